"""The store interface every implementation honours (and the one test suite runs against).

A stored response is one record plus two ordered lists hanging off it:

- the record: the Response object as last written, the validated create body (what a background
  worker needs to run it), the tenant, the previous_response_id link, the lease;
- its input items, in order, each with an id (``input_items`` listing, ``item_reference``);
- its event log, in sequence order (background stream resume).

Status transitions are conditional writes: a cancelled response never becomes completed.
All methods are async; implementations that block run their calls in a thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from responses_gateway.errors import GatewayError

TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


class CancelledError(Exception):
    """A conditional write found the response cancelled: the worker must stop."""


class StoreUnavailable(GatewayError):
    """A store call failed for good (retries spent, database locked): end the response failed."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message, type="server_error", code="store_unavailable")


@dataclass(slots=True)
class StoredResponse:
    id: str
    tenant: str
    response: dict[str, Any]  # the Response object as the API returns it
    request: dict[str, Any]  # the validated create body (model, tools, input after resolution…)
    input_items: list[dict[str, Any]] = field(default_factory=list)  # with ids, in order
    previous_response_id: str | None = None
    background: bool = False
    lease_until: float | None = None  # epoch seconds; a running background worker renews it
    expires_at: int | None = None  # epoch seconds (TTL)

    @property
    def status(self) -> str:
        return self.response.get("status", "")


class Store(ABC):
    """Tenant-scoped storage of responses; another tenant's record is simply not found."""

    @abstractmethod
    async def put(self, record: StoredResponse) -> None:
        """Write a new response with its input items (create; overwrites one of the same id)."""

    @abstractmethod
    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        """The record with its input items, or None if absent, expired or another tenant's."""

    @abstractmethod
    async def delete(self, response_id: str, tenant: str) -> bool:
        """Remove the response, its input items and its events. False if it was not there."""

    @abstractmethod
    async def get_items(self, item_ids: list[str], tenant: str) -> dict[str, dict[str, Any]]:
        """Look up input or output items of this tenant's stored responses by item id."""

    @abstractmethod
    async def update_response(
        self,
        response_id: str,
        response: dict[str, Any],
        *,
        expect_status: frozenset[str] | set[str] | None = None,
        lease_until: float | None = None,
    ) -> bool:
        """Replace the Response object if its current status is in ``expect_status``.

        Returns False (and writes nothing) when the condition fails, so a completion cannot
        overwrite a cancel. ``expect_status=None`` writes unconditionally.
        """

    @abstractmethod
    async def append_events(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        response: dict[str, Any] | None = None,
        lease_until: float | None = None,
    ) -> None:
        """Persist a batch of consecutive events (one write for the whole range).

        Raises CancelledError, writing nothing, if the response was cancelled. A running
        worker's flush may carry its Response object (and lease) in the same write: then the
        record is replaced too, and only while it is ``in_progress`` (else CancelledError), so a
        terminal Response lands atomically with its terminal events and never after a cancel.
        """

    @abstractmethod
    async def read_events(self, response_id: str, after: int = -1) -> list[dict[str, Any]]:
        """Stored events with ``sequence_number > after``, in order."""

    @abstractmethod
    async def renew_lease(self, response_id: str, lease_until: float) -> bool:
        """Extend a running worker's lease; False if the response is no longer running."""

    def check_input_items(self, items: list[dict[str, Any]]) -> None:  # noqa: B027 - optional hook
        """Raise GatewayError 400 if an input item can never be stored; call before any work."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; most stores need nothing."""

"""The store interface every implementation honours (and the one test suite runs against).

The interface is split by role, one small ABC each; :class:`Store` is their union, what every
engine (``SQLiteStore``, ``DynamoDBStore``) implements and every wrapper (store/wrapper.py:
tracing, blobs) covers member by member:

- :class:`ResponseStore`: stored responses and their background event log;
- :class:`ConversationStore`: the Conversations API and a turn's lock and settle;
- :class:`ToolReadStore`: what server tools' calls gave the model;
- :class:`UsageSource`: the usage ledger (and so rate limits and budgets) beside the store;
- :class:`HealthSource`: routed deployments' shared health beside the store;
- :class:`Bounded` (``limits``: what one conversation and one response may hold) and
  :class:`Closable` (``aclose``).

A stored response is one record plus what hangs off it:

- the record: the Response object as last written, the validated create body (what a background
  worker needs to run it), the tenant, the previous_response_id link, the lease;
- its input items, in order, each with an id (``input_items`` listing, ``item_reference``);
- its event log, in sequence order (background stream resume);
- what its server tools' calls gave the model (``put_tool_reads``), by tenant and call id.

Status transitions are conditional writes: a cancelled response never becomes completed.
All methods are async; implementations that block run their calls in a thread.

A conversation (the Conversations API, ``conversation`` on create) is a record (metadata,
committed length, a turn lock) and its items, one row each, keyed by position, so a turn reads
and appends in a constant number of calls however long the conversation is.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import orjson

from responses_gateway.errors import GatewayError
from responses_gateway.ids import request_id
from responses_gateway.records import Compared, Value

if TYPE_CHECKING:
    from responses_gateway.store.health import HealthStore
    from responses_gateway.store.usage import UsageStore

logger = logging.getLogger("responses_gateway.store")
MIB = 1024 * 1024


class CancelledError(Exception):
    """A conditional write found the response cancelled: the worker must stop."""


class StoreUnavailable(GatewayError):
    """A store call failed for good (retries spent, database locked): end the response failed.

    ``detail`` (endpoints, table names, ARNs, file paths) goes to the log only; the client is
    told which store is unavailable (``store``: "response store", "file store", …) and which
    request to quote.
    """

    def __init__(self, detail: str, *, store: str = "response store") -> None:
        rid = request_id.get()
        quote = f", quoting request id {rid}" if rid else ""
        super().__init__(
            503,
            f"The {store} is unavailable right now. You can retry your request; if the "
            f"error persists, tell the gateway's operator{quote}.",
            type="server_error",
            code="store_unavailable",
        )
        self.detail = detail
        logger.error("%s unavailable (request %s): %s", store, rid, detail)


class ResponseTooLarge(StoreUnavailable):
    """A Response object over GATEWAY_MAX_STORED_RESPONSE_BYTES. Nothing is written; the
    response ends failed as after any store failure (a stream cannot take back what it sent),
    but the client is told which bound it hit."""

    def __init__(self, size: int, limit: int) -> None:
        GatewayError.__init__(
            self,
            400,
            f"This response is too large to store: {size} bytes, more than the {limit} bytes "
            "one stored response may hold (GATEWAY_MAX_STORED_RESPONSE_BYTES). Ask for less "
            "output (max_output_tokens, max_tool_calls), or set store to false.",
            code="response_too_large",
        )
        self.detail = self.message


# -- bounds ----------------------------------------------------------------------------------


class StoreLimits(Value):
    """What one conversation and one stored response may hold (0: no bound; a frozen value:
    records.py).

    A turn on a conversation reads all of it, so its size is what every turn costs in memory
    and upstream tokens; these keep that bounded. Enforced before anything is written."""

    __slots__ = ("conversation_bytes", "conversation_items", "response_bytes")

    conversation_items: int  # GATEWAY_MAX_CONVERSATION_ITEMS
    conversation_bytes: int  # GATEWAY_MAX_CONVERSATION_BYTES (items' JSON)
    response_bytes: int  # GATEWAY_MAX_STORED_RESPONSE_BYTES (input; Response)

    def __init__(self, conversation_items: int = 10_000, conversation_bytes: int = 64 * MIB,
                 response_bytes: int = 32 * MIB) -> None:
        object.__setattr__(self, "conversation_items", conversation_items)
        object.__setattr__(self, "conversation_bytes", conversation_bytes)
        object.__setattr__(self, "response_bytes", response_bytes)

    def check_input(self, items: list[dict[str, Any]]) -> None:
        """A create's input items, together, within what one stored response may hold."""
        total = sum(map(item_bytes, items))
        if self.response_bytes and total > self.response_bytes:
            raise GatewayError(
                400,
                f"The input is too large to store: {total} bytes, more than the "
                f"{self.response_bytes} bytes one stored response may hold "
                "(GATEWAY_MAX_STORED_RESPONSE_BYTES). Send less input, or set store to false.",
                param="input",
                code="input_too_large",
            )

    def check_response(self, size: int) -> None:
        """A Response object's JSON (``size`` bytes) within the bound, before it is written."""
        if self.response_bytes and size > self.response_bytes:
            raise ResponseTooLarge(size, self.response_bytes)

    def check_room(
        self, conversation: StoredConversation, items: list[dict[str, Any]], param: str,
        size: int | None = None,
    ) -> int:
        """Raise ConversationFull unless ``items`` fit beside what ``conversation`` holds;
        their size in bytes (``size`` when the caller has counted it already)."""
        size = sum(map(item_bytes, items)) if size is None else size
        if self.conversation_items and (
            conversation.item_count + len(items) > self.conversation_items
        ):
            raise ConversationFull(
                f"holds {conversation.item_count} items; {len(items)} more would exceed its "
                f"limit of {self.conversation_items} items (GATEWAY_MAX_CONVERSATION_ITEMS)",
                param,
            )
        if self.conversation_bytes and (
            conversation.byte_count + size > self.conversation_bytes
        ):
            raise ConversationFull(
                f"holds {conversation.byte_count} bytes of items; {size} more would exceed "
                f"its limit of {self.conversation_bytes} bytes "
                "(GATEWAY_MAX_CONVERSATION_BYTES)",
                param,
            )
        return size


DEFAULT_LIMITS = StoreLimits()


def item_bytes(item: dict[str, Any]) -> int:
    """What an item counts toward a bound: its JSON, as the API returns it."""
    return len(orjson.dumps(item))


class Bounded:
    """Role: a store's bounds (``limits``), what the implementation was built with
    (``_limits``), else the defaults. A wrapper passes its inner store's on."""

    @property
    def limits(self) -> StoreLimits:
        return getattr(self, "_limits", None) or DEFAULT_LIMITS


class StoredResponse(Compared):
    """One response as every store keeps it: what retrieve, resume and a later
    ``previous_response_id`` read back (a record: records.py; :meth:`replace` for
    ``dataclasses.replace``)."""

    __slots__ = ("background", "expires_at", "id", "input_items", "lease_until",
                 "previous_response_id", "request", "response", "tenant")

    id: str
    tenant: str
    response: dict[str, Any]  # the Response object as the API returns it
    request: dict[str, Any]  # the validated create body (model, tools, input after resolution…)
    input_items: list[dict[str, Any]]  # with ids, in order
    previous_response_id: str | None
    background: bool
    lease_until: float | None  # epoch seconds; a running background worker renews it
    expires_at: int | None  # epoch seconds (TTL)

    def __init__(self, id: str, tenant: str, response: dict[str, Any], request: dict[str, Any],
                 input_items: list[dict[str, Any]] | None = None,
                 previous_response_id: str | None = None, background: bool = False,
                 lease_until: float | None = None, expires_at: int | None = None) -> None:
        self.id = id
        self.tenant = tenant
        self.response = response
        self.request = request
        self.input_items = [] if input_items is None else input_items
        self.previous_response_id = previous_response_id
        self.background = background
        self.lease_until = lease_until
        self.expires_at = expires_at

    def replace(self, **changes: Any) -> StoredResponse:
        """A copy with ``changes`` (``dataclasses.replace``: the other fields shared)."""
        fields = {name: getattr(self, name) for name in StoredResponse.__annotations__}
        return StoredResponse(**{**fields, **changes})

    @property
    def status(self) -> str:
        return self.response.get("status", "")


class TurnSettle(Compared):
    """A background turn's settle, carried by the worker's terminal write (``append_events``).

    ``items`` (a completed or incomplete turn) are appended at the end and the lock released,
    conditional on the lock (``token``, taken at ``length``): held by this turn, or free. With
    ``items=None`` (a failed turn) the lock is only released, if still ``token``'s. (A record:
    records.py.)
    """

    __slots__ = ("conversation_id", "items", "length", "tenant", "token")

    conversation_id: str
    tenant: str
    token: str
    length: int
    items: list[dict[str, Any]] | None

    def __init__(self, conversation_id: str, tenant: str, token: str, length: int,
                 items: list[dict[str, Any]] | None = None) -> None:
        self.conversation_id = conversation_id
        self.tenant = tenant
        self.token = token
        self.length = length
        self.items = items


class ResponseStore(Bounded, ABC):
    """Role: tenant-scoped stored responses and their event log; another tenant's record is
    simply not found."""

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
        turn: TurnSettle | None = None,
    ) -> None:
        """Persist a batch of consecutive events (one write for the whole range).

        Raises CancelledError, writing nothing, if the response was cancelled. A running
        worker's flush may carry its Response object (and lease) in the same write: then the
        record is replaced too, and only while it is ``in_progress`` (else CancelledError), so a
        terminal Response lands atomically with its terminal events and never after a cancel.

        ``turn`` (with a terminal ``response``): the conversation turn's settle lands in the
        same atomic write, so a response is never terminal without its items appended. If the
        lock was taken over, nothing is written (StoreUnavailable); if the conversation is
        gone, or a release-only lock is no longer the turn's, the rest lands without it.
        """

    @abstractmethod
    async def read_events(self, response_id: str, after: int = -1) -> list[dict[str, Any]]:
        """Stored events with ``sequence_number > after``, in order."""

    @abstractmethod
    async def renew_lease(self, response_id: str, lease_until: float) -> bool:
        """Extend a running worker's lease; False if the response is no longer running."""

    def check_input_items(self, items: list[dict[str, Any]]) -> None:
        """Raise GatewayError 400 if the input can never be stored (over the bound of one
        stored response; a store may refuse single items too); call before any work."""
        self.limits.check_input(items)


class ToolReadStore(ABC):
    """Role: what server tools' calls gave the model, kept by tenant and call id."""

    @abstractmethod
    async def put_tool_reads(
        self, tenant: str, response_id: str, reads: dict[str, str], *,
        expires_at: int | None = None,
    ) -> None:
        """Keep what the server tools' calls of a response gave the model (``reads``: call id
        -> text; web_search's pages, file_search's passages), so a later request in any
        process gives it back. Deleted with the response, expiring with it (``expires_at``,
        else the store's retention from now)."""

    @abstractmethod
    async def get_tool_reads(self, tenant: str, call_ids: list[str]) -> dict[str, str]:
        """The kept reads of these calls (one batch), this tenant's only."""


class UsageSource:
    """Role: the usage ledger (usage reports, rate limits, budgets) beside the store."""

    def usage_store(self) -> UsageStore | None:
        """The usage ledger beside this store (store/usage.py); None: usage is not kept."""
        return None


class HealthSource:
    """Role: routed deployments' health, shared by every process using the store."""

    def health_store(self) -> HealthStore | None:
        """Routed deployments' health beside this store, shared by every process using it
        (store/health.py); None: each process keeps its own."""
        return None


class Closable:
    """Role: what the store holds open (connections, threads)."""

    async def aclose(self) -> None:
        """Release connections; most stores need nothing."""


# -- conversations ---------------------------------------------------------------------------


class ConversationLocked(GatewayError):
    """Another response (or item write) holds the conversation: OpenAI's 400, retry later."""

    def __init__(self) -> None:
        super().__init__(
            400,
            "Another process is currently operating on this conversation. Please retry in a "
            "few seconds.",
            param="conversation",
            code="conversation_locked",
        )


class DuplicateItem(GatewayError):
    """An item id the conversation already holds (ids are unique within a conversation)."""

    def __init__(self, item_id: str, param: str) -> None:
        super().__init__(
            400,
            f"Duplicate item found with id {item_id}. Remove duplicate items from your input "
            "and try again.",
            param=param,
        )


class ConversationFull(GatewayError):
    """The conversation is at its bound (StoreLimits): nothing was written. Delete items or
    start a new conversation."""

    def __init__(self, detail: str, param: str) -> None:
        super().__init__(
            400,
            f"This conversation {detail}. Delete items from it, or start a new conversation.",
            param=param,
            code="conversation_too_large",
        )


class StoredConversation(Compared):
    """A conversation's record without its items: its counters bound it, its lock orders
    turns (a record: records.py)."""

    __slots__ = ("byte_count", "created_at", "holder", "id", "item_count", "length", "locked",
                 "metadata", "tenant")

    id: str
    tenant: str
    created_at: int
    metadata: dict[str, str]
    length: int  # positions committed so far (deleted items leave holes; never reused)
    locked: bool  # a turn holds the lock right now
    holder: str | None  # while locked: the holding turn's token ("<response id>.<hex>")
    item_count: int  # items held (what GATEWAY_MAX_CONVERSATION_ITEMS bounds)
    byte_count: int  # their JSON bytes (GATEWAY_MAX_CONVERSATION_BYTES), kept with appends

    def __init__(self, id: str, tenant: str, created_at: int,
                 metadata: dict[str, str] | None = None, length: int = 0, locked: bool = False,
                 holder: str | None = None, item_count: int = 0, byte_count: int = 0) -> None:
        self.id = id
        self.tenant = tenant
        self.created_at = created_at
        self.metadata = {} if metadata is None else metadata
        self.length = length
        self.locked = locked
        self.holder = holder
        self.item_count = item_count
        self.byte_count = byte_count

    def to_object(self) -> dict[str, Any]:
        """The ``conversation`` object the API returns."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }


class ConversationStore(Bounded, ABC):
    """Role: tenant-scoped conversations; another tenant's conversation is not found (None).

    Items are appended at positions ``length, length+1, ...`` and ``length`` moves in the same
    conditional write, so readers (who stop at ``length``) never see half an append. A turn
    takes the lock (``lock_conversation``) when its request is ready and releases it with its
    append (``append_conversation_items(..., token=)``) or ``release_conversation``; a lock
    older than ``until`` is free again (a crashed process cannot hold it forever). Either can
    carry the turn's response record (``record=``), stored in the same atomic write, so a turn
    costs one read and two writes (lock, settle) however long the conversation is.
    """

    @abstractmethod
    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        """Write a new conversation with its first items (ids unique, already checked);
        ConversationFull, writing nothing, if they pass the bounds (``limits``)."""

    @abstractmethod
    async def get_conversation(
        self, conversation_id: str, tenant: str
    ) -> StoredConversation | None:
        """The record alone (no items)."""

    @abstractmethod
    async def update_conversation(
        self, conversation_id: str, tenant: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        """Replace the metadata; None if not found."""

    @abstractmethod
    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        """Remove the conversation and its items; False if it was not there."""

    @abstractmethod
    async def conversation_items(
        self, conversation_id: str, tenant: str
    ) -> tuple[StoredConversation, list[dict[str, Any]]] | None:
        """The record and every committed item in order (a turn's history): one read."""

    @abstractmethod
    async def lock_conversation(
        self, conversation_id: str, tenant: str, token: str, *, length: int, until: float
    ) -> bool | None:
        """Take the turn lock if it is free and ``length`` is unchanged since the history was
        read. False: held by another or changed (ConversationLocked). None: not found."""

    @abstractmethod
    async def append_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        items: list[dict[str, Any]],
        *,
        token: str | None = None,
        length: int | None = None,
        param: str = "items",
        record: StoredResponse | None = None,
    ) -> StoredConversation | None:
        """Append ``items`` after the last one, atomically.

        With ``token`` (a turn's lock, taken at ``length``) the append also releases it and
        StoreUnavailable means the lock was lost. Without, the conversation must not be
        locked (ConversationLocked), an id it already holds raises DuplicateItem naming
        ``param``, and items that would pass the bounds raise ConversationFull (a turn's were
        checked when it began: its append is admitted whole). None: not found.

        ``record`` (only with ``token``): the turn's response, stored (as ``put`` would) in the
        same atomic write, so the end of a turn is one write and a failed append stores no
        record. If the conversation is gone (None) the record is still stored: the response
        stands without it.
        """

    @abstractmethod
    async def release_conversation(
        self, conversation_id: str, token: str, *, record: StoredResponse | None = None
    ) -> None:
        """Drop the lock if ``token`` still holds it (a turn that appends nothing).

        ``record``: the turn's (failed or cancelled) response, stored in the same write
        whether or not the lock was still held."""

    @abstractmethod
    async def renew_conversation_lock(
        self, conversation_id: str, token: str, until: float
    ) -> bool:
        """Move the lock's lapse to ``until`` if ``token`` still holds it (a long turn);
        False if it does not (lapsed and taken, released, or the conversation is gone)."""

    @abstractmethod
    async def list_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        *,
        limit: int,
        order: str,
        after: str | None = None,
    ) -> tuple[list[dict[str, Any]], bool] | None:
        """One page (``order`` ``asc``/``desc``) after the item ``after``, and whether more
        follow. None: conversation not found. KeyError: no item ``after``."""

    @abstractmethod
    async def get_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, dict[str, Any] | None] | None:
        """The record and the item (None if absent); None if the conversation is not found."""

    @abstractmethod
    async def delete_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, bool] | None:
        """Remove one item: the record and whether it was there; None: not found."""


# -- the union -------------------------------------------------------------------------------


class Store(ResponseStore, ConversationStore, ToolReadStore, UsageSource, HealthSource,
            Closable):
    """Every role: what an engine implements and a wrapper covers (store/wrapper.py)."""


#: The roles :class:`Store` unites; their public members are the whole store interface.
ROLES: tuple[type, ...] = (ResponseStore, ConversationStore, ToolReadStore, UsageSource,
                           HealthSource, Bounded, Closable)

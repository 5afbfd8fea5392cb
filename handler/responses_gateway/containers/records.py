"""The Containers API's records: containers and their files, per tenant, one engine per
platform (local.py: the SQLite file of the store; aws.py: the store's DynamoDB table).

Records hold what the API shows and what the service needs to find a container's engine box
again (``state``); the files' bytes are the engine's (the container's ``/mnt/data``). A tenant
reaches only its own records: every call takes the tenant, and another tenant's id is None.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from responses_gateway.containers.models import ContainerFile, ContainerRecord


class TooManyContainers(Exception):
    """Adding the container would take the tenant past its bound of running containers."""

    def __init__(self, running: int) -> None:
        super().__init__(running)
        self.running = running


class ContainerRecords(ABC):
    @abstractmethod
    async def add(self, record: ContainerRecord, max_running: int, now: float) -> None:
        """Write the record unless the tenant already has ``max_running`` (0: no bound)
        running containers not yet past their expiry at ``now``
        (:class:`TooManyContainers`, nothing written)."""

    @abstractmethod
    async def get(self, tenant: str, container_id: str) -> ContainerRecord | None: ...

    @abstractmethod
    async def page(self, tenant: str, *, name: str | None, order: str, after: str | None,
                   limit: int) -> tuple[list[ContainerRecord], bool]:
        """Up to ``limit`` records by ``created_at`` (then id) in ``order``, after the one
        ``after`` names; and whether more follow."""

    @abstractmethod
    async def touch(self, tenant: str, container_id: str, now: float,
                    state: str | None = None) -> bool:
        """A running container was used at ``now`` (and its engine state is ``state``,
        when given); False when it is not running (gone, expired)."""

    @abstractmethod
    async def expire(self, tenant: str, container_id: str, now: float,
                     forget_at: float) -> bool:
        """running and past its expiry at ``now`` -> expired (kept until ``forget_at``),
        its files' records removed; False when it was not (another call did it)."""

    @abstractmethod
    async def remove(self, tenant: str, container_id: str) -> ContainerRecord | None:
        """Delete the record and its files' records; the record, or None if there was none."""

    @abstractmethod
    async def expired(self, tenant: str | None, now: float, limit: int
                      ) -> list[ContainerRecord]:
        """Up to ``limit`` running records past their expiry: the tenant's, or (``None``)
        every tenant's where the engine can find them without a full scan (else [])."""

    async def forget(self, now: float, limit: int) -> int:
        """Drop up to ``limit`` expired records past their ``forget_at`` where the engine
        keeps them itself (DynamoDB's TTL does it there); how many."""
        return 0

    # -- container files ------------------------------------------------------------------

    @abstractmethod
    async def put_file(self, file: ContainerFile) -> ContainerFile:
        """Record ``file``; a file already recorded at its path keeps its id and
        ``created_at`` and takes the new size (and source): that record is returned."""

    @abstractmethod
    async def get_file(self, tenant: str, container_id: str, file_id: str
                       ) -> ContainerFile | None: ...

    @abstractmethod
    async def files(self, tenant: str, container_id: str) -> list[ContainerFile]:
        """The container's files by ``created_at`` then id."""

    @abstractmethod
    async def remove_file(self, tenant: str, container_id: str, file_id: str
                          ) -> ContainerFile | None: ...

    async def aclose(self) -> None:
        return None

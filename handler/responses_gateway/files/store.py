"""The two seams of file storage, each with a local and an AWS implementation.

:class:`FileRecords` keeps the records and the per-tenant byte total (checked and moved in
the same atomic write as the record, so concurrent uploads cannot pass the bound together);
:class:`Blobs` keeps the bytes. A record is written after its bytes and removed before them:
a crash between leaves unreferenced bytes, never a record without content.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from responses_gateway.files.models import FileRecord


class TenantFull(Exception):
    """Adding the file would take the tenant past its byte bound; ``used`` is what it holds."""

    def __init__(self, used: int) -> None:
        super().__init__(used)
        self.used = used


class FileRecords(ABC):
    @abstractmethod
    async def add(self, record: FileRecord, tenant_limit: int) -> None:
        """Write the record and add its bytes to the tenant's total; TenantFull (nothing
        written) when that total would pass ``tenant_limit`` (0: no bound)."""

    @abstractmethod
    async def get(self, file_id: str, tenant: str) -> FileRecord | None: ...

    @abstractmethod
    async def page(
        self, tenant: str, *, purpose: str | None, order: str, after: str | None, limit: int,
    ) -> tuple[list[FileRecord], bool]:
        """Up to ``limit`` records by ``created_at`` (then id) in ``order``, after the record
        ``after`` names; and whether more follow."""

    @abstractmethod
    async def remove(self, file_id: str, tenant: str) -> FileRecord | None:
        """Delete the record and give its bytes back to the tenant's total."""

    @abstractmethod
    async def used_bytes(self, tenant: str) -> int: ...

    async def aclose(self) -> None:
        return None


class Blobs(ABC):
    @abstractmethod
    async def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def delete(self, key: str) -> None: ...

    async def aclose(self) -> None:
        return None

"""The two seams of file storage, each with a local and an AWS implementation.

:class:`FileRecords` keeps the records and the per-tenant byte total (checked and moved in
the same atomic write as the record, so concurrent uploads cannot pass the bound together);
:class:`Blobs` keeps the bytes. A record is written after its bytes and removed before them:
a crash between leaves unreferenced bytes, never a record without content.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from responses_gateway.files.models import FileRecord

if TYPE_CHECKING:
    from responses_gateway.files.models import UploadRecord


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

    @abstractmethod
    async def delete_prefix(self, prefix: str) -> None:
        """Delete every blob whose key starts with ``prefix`` (which ends with ``/``)."""

    @abstractmethod
    async def size(self, key: str) -> int | None:
        """The blob's length in bytes, None when there is none (its bytes are not read)."""

    @abstractmethod
    async def join(self, keys: list[str], target: str) -> None:
        """Write the blobs ``keys`` one after the other as the blob ``target`` without
        holding them all in memory (an Upload's parts becoming its File)."""

    async def aclose(self) -> None:
        return None


class UploadRecords(ABC):
    """The Uploads API's records (files/uploads.py); every change is one conditional write."""

    @abstractmethod
    async def add(self, record: UploadRecord) -> None: ...

    @abstractmethod
    async def get(self, upload_id: str, tenant: str) -> UploadRecord | None: ...

    @abstractmethod
    async def add_part(self, upload_id: str, tenant: str, size: int, now: float) -> bool:
        """Count ``size`` more bytes while the Upload is pending, unexpired, and stays within
        its declared bytes; False (nothing changed) otherwise."""

    @abstractmethod
    async def claim(self, upload_id: str, tenant: str, now: float, until: float) -> bool:
        """pending (or completing with a claim that ran out) -> completing until ``until``."""

    @abstractmethod
    async def settle(self, upload_id: str, tenant: str, status: str,
                     file_id: str | None) -> None:
        """completing -> ``status`` (completed with its file, or pending again)."""

    @abstractmethod
    async def cancel(self, upload_id: str, tenant: str, now: float) -> bool:
        """pending and unexpired -> cancelled; False otherwise."""

    async def aclose(self) -> None:
        return None

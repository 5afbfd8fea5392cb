"""The two seams of file storage, each with a local and an AWS implementation.

:class:`FileRecords` keeps the records and the per-tenant byte total (checked and moved in
the same atomic write as the record, so concurrent uploads cannot pass the bound together);
:class:`Blobs` keeps the bytes. A record is written after its bytes and removed before them:
a crash between leaves unreferenced bytes, never a record without content.

The tenant's total counts its Files and the parts of its open Uploads: a part adds its size
when it is counted on its Upload (same write), the File an Upload becomes takes those bytes
over (``credit``), and a cancelled or expired Upload gives them back in the write that ends
it. Expired Files and Uploads are found per tenant (or, where the engine can, across all) and
removed with their bytes (:meth:`~.service.Files.reclaim`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, BinaryIO

from responses_gateway.files.models import FileRecord

if TYPE_CHECKING:
    from responses_gateway.files.models import UploadRecord


CHUNK_BYTES = 1 << 20  # what a blob is read and written in: memory per transfer


class TenantFull(Exception):
    """Adding the file would take the tenant past its byte bound; ``used`` is what it holds."""

    def __init__(self, used: int) -> None:
        super().__init__(used)
        self.used = used


class FileRecords(ABC):
    @abstractmethod
    async def add(self, record: FileRecord, tenant_limit: int, credit: int = 0) -> None:
        """Write the record and add its bytes, less ``credit`` (bytes already counted: the
        parts of the Upload it is made of), to the tenant's total; TenantFull (nothing
        written) when that adds bytes and the total would pass ``tenant_limit`` (0: none)."""

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

    @abstractmethod
    async def expired(self, tenant: str | None, now: float, limit: int) -> list[FileRecord]:
        """Up to ``limit`` records past their ``expires_at``: the tenant's, or (``None``)
        every tenant's where the engine can find them without a full scan (else [])."""

    async def aclose(self) -> None:
        return None


class Blobs(ABC):
    @abstractmethod
    async def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def put_file(self, key: str, source: BinaryIO) -> None:
        """Write the blob from a file object (read in chunks: a spooled upload is never held
        in memory whole)."""

    @abstractmethod
    def chunks(self, key: str) -> AsyncIterator[bytes] | None:
        """The blob's bytes in chunks of at most :data:`CHUNK_BYTES`, or None when there is
        none (checked when the first chunk is read: see :meth:`stream`)."""

    async def stream(self, key: str) -> AsyncIterator[bytes] | None:
        """The blob's chunks with the first already read (so a missing blob is None here,
        before a response has started), or None."""
        chunks = self.chunks(key)
        if chunks is None:
            return None
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            first = b""
        except FileNotFoundError:
            return None

        async def rest() -> AsyncIterator[bytes]:
            yield first
            async for chunk in chunks:
                yield chunk

        return rest()

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
    async def add_part(self, upload_id: str, tenant: str, size: int, now: float,
                       tenant_limit: int) -> bool:
        """Count ``size`` more bytes while the Upload is pending, unexpired, and stays within
        its declared bytes, adding them to the tenant's total in the same write; False
        (nothing changed) otherwise, TenantFull when the total would pass ``tenant_limit``."""

    @abstractmethod
    async def claim(self, upload_id: str, tenant: str, now: float, until: float,
                    file_id: str) -> bool:
        """pending (or completing with a claim that ran out) -> completing until ``until``,
        ``file_id`` kept as the File this complete will make (a complete that dies after
        making it is then found out: files/uploads.py)."""

    @abstractmethod
    async def settle(self, upload_id: str, tenant: str, status: str,
                     file_id: str | None) -> None:
        """completing -> ``status`` (completed with its file, or pending again without
        one)."""

    @abstractmethod
    async def cancel(self, upload_id: str, tenant: str, now: float) -> bool:
        """pending and unexpired -> cancelled, its parts' bytes given back to the tenant's
        total; False otherwise."""

    @abstractmethod
    async def expire(self, upload_id: str, tenant: str, now: float) -> bool:
        """Open (pending, or completing with a claim that ran out) past its ``expires_at``
        -> expired, its parts' bytes given back to the tenant's total; False otherwise."""

    @abstractmethod
    async def expired(self, tenant: str | None, now: float, limit: int
                      ) -> list[UploadRecord]:
        """Up to ``limit`` Uploads :meth:`expire` would end: the tenant's, or (``None``)
        every tenant's where the engine can find them without a full scan (else [])."""

    async def aclose(self) -> None:
        return None

"""The Files API's operations on one storage pair, with OpenAI's errors and the bounds.

Expired Files (and, through :attr:`Files.reclaimers`, expired Uploads) are removed with their
bytes and give them back to the tenant's total: the one a call touches (retrieve, content,
list), the tenant's before a write is refused for its total, and every tenant's in a running
gateway's periodic sweep (api/app.py, ``GATEWAY_FILE_SWEEP_SECONDS``) where the engine can
find them (the local one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

from responses_gateway import ids
from responses_gateway.errors import (
    GatewayError,
    invalid_request,
    invalid_type,
    missing_parameter,
    not_found,
    out_of_range,
    shown,
)
from responses_gateway.files.models import FileRecord
from responses_gateway.files.store import Blobs, FileRecords, TenantFull

#: ``expires_after.seconds`` bounds (OpenAI: one hour to thirty days).
MIN_EXPIRY_SECONDS = 3600
MAX_EXPIRY_SECONDS = 30 * 86400
T = TypeVar("T")
RECLAIM_BATCH = 100  # expired objects removed per look (a sweep looks until none is left)
logger = logging.getLogger("responses_gateway.files")

#: Removes a tenant's (``None``: every tenant's) expired objects; how many it removed.
Reclaimer = Callable[[str | None], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class FileLimits:
    file_bytes: int  # GATEWAY_MAX_FILE_BYTES (0: no bound)
    tenant_bytes: int  # GATEWAY_MAX_TENANT_FILE_BYTES (0: no bound)
    name_chars: int = 256  # GATEWAY_MAX_NAME_CHARS (0: no bound)
    description_chars: int = 512  # GATEWAY_MAX_DESCRIPTION_CHARS (0: no bound)


class Files:
    def __init__(self, records: FileRecords, blobs: Blobs, limits: FileLimits,
                 clock: Callable[[], float] = time.time) -> None:
        self.records = records
        self.blobs = blobs
        self.limits = limits
        #: what "now" is for expiry (seconds since the epoch): tests move it, not time.time
        self.clock = clock
        #: what removes expired objects: its own Files, and the Uploads beside it (uploads.py)
        self.reclaimers: list[Reclaimer] = [self._reclaim_files]

    def check_name(self, value: str, param: str) -> str:
        """A name (file name, mime type) within ``GATEWAY_MAX_NAME_CHARS``."""
        return check_length(value, param, self.limits.name_chars, "GATEWAY_MAX_NAME_CHARS")

    def check_size(self, size: int) -> None:
        """A file over ``GATEWAY_MAX_FILE_BYTES`` is refused before it is read further."""
        if self.limits.file_bytes and size > self.limits.file_bytes:
            raise GatewayError(
                413,
                f"File is too large: {size} bytes, more than the {self.limits.file_bytes} bytes "
                "this gateway accepts per file (GATEWAY_MAX_FILE_BYTES).",
                param="file", code="file_too_large")

    async def create(
        self, tenant: str, filename: str, data: bytes, purpose: str,
        expires_after: int | None = None,
    ) -> FileRecord:
        record = self._new(tenant, filename, len(data), purpose, expires_after)
        await self.blobs.put(record.blob_key, data)
        return await self._register(record)

    async def create_from(
        self, tenant: str, filename: str, source: BinaryIO, size: int, purpose: str,
        expires_after: int | None = None,
    ) -> FileRecord:
        """A File of the ``size`` bytes of ``source`` (a spooled upload), copied in chunks."""
        record = self._new(tenant, filename, size, purpose, expires_after)
        await self.blobs.put_file(record.blob_key, source)
        return await self._register(record)

    async def create_joined(
        self, tenant: str, filename: str, size: int, parts: list[str], purpose: str,
        expires_after: int | None = None, *, file_id: str | None = None,
    ) -> FileRecord:
        """A File of ``size`` bytes made of the blobs ``parts`` (an Upload's), joined by the
        blob store without reading them all into memory; it takes over the ``size`` bytes
        the parts hold in the tenant's total. ``file_id``: its id, chosen by the Upload's
        claim."""
        record = self._new(tenant, filename, size, purpose, expires_after, file_id)
        await self.blobs.join(parts, record.blob_key)
        return await self._register(record, credit=size)

    def _new(self, tenant: str, filename: str, size: int, purpose: str,
             expires_after: int | None, file_id: str | None = None) -> FileRecord:
        self.check_size(size)
        self.check_name(filename, "filename")
        now = int(self.clock())
        return FileRecord(
            id=file_id or ids.new_id(ids.FILE), tenant=tenant, filename=filename, bytes=size,
            purpose=purpose, created_at=now,
            expires_at=now + expires_after if expires_after is not None else None)

    async def _register(self, record: FileRecord, credit: int = 0) -> FileRecord:
        """The record of bytes already written (removed again when it cannot be added)."""
        try:
            await self.within_quota(
                record.tenant, lambda: self.records.add(record, self.limits.tenant_bytes,
                                                        credit))
        except TenantFull as full:
            await self.blobs.delete(record.blob_key)
            raise self.storage_full(record.bytes, full.used, "file") from None
        except BaseException:
            await self.blobs.delete(record.blob_key)
            raise
        return record

    async def within_quota(self, tenant: str, write: Callable[[], Awaitable[Any]]) -> Any:
        """``write``, and when the tenant's total refuses it, once more after the tenant's
        expired Files and Uploads gave their bytes back (TenantFull when it still does)."""
        try:
            return await write()
        except TenantFull:
            if not await self.reclaim(tenant):
                raise
        return await write()

    def storage_full(self, size: int, used: int, param: str) -> GatewayError:
        return GatewayError(
            400,
            f"This upload of {size} bytes would exceed the storage limit of "
            f"{self.limits.tenant_bytes} bytes for your files ({used} bytes in use; "
            "GATEWAY_MAX_TENANT_FILE_BYTES, which counts Files and the parts of pending "
            "Uploads). Delete files you no longer need.",
            param=param, code="storage_limit_exceeded")

    async def get(self, file_id: str, tenant: str) -> FileRecord:
        if ids.unknowable(file_id):
            raise file_not_found(ids.clipped(file_id))
        record = await self.records.get(file_id, tenant)
        if record is not None and record.expired(self.clock()):
            await self._remove(record)
            record = None
        if record is None:
            raise file_not_found(file_id)
        return record

    async def content(self, file_id: str, tenant: str) -> tuple[FileRecord, bytes]:
        """The record and its bytes (ingestion reads a file whole, within its bounds)."""
        record = await self.get(file_id, tenant)
        data = await self.blobs.get(record.blob_key)
        if data is None:
            raise file_not_found(file_id)
        return record, data

    async def stream(self, file_id: str, tenant: str
                     ) -> tuple[FileRecord, AsyncIterator[bytes]]:
        """The record and its bytes in chunks (``GET /v1/files/{id}/content``: never the
        whole file in memory)."""
        record = await self.get(file_id, tenant)
        chunks = await self.blobs.stream(record.blob_key)
        if chunks is None:
            raise file_not_found(file_id)
        return record, chunks

    async def page(
        self, tenant: str, *, purpose: str | None, order: str, after: str | None, limit: int,
    ) -> tuple[list[FileRecord], bool]:
        records, more = await self.records.page(
            tenant, purpose=purpose, order=order, after=after, limit=limit)
        now = self.clock()
        for record in records:
            if record.expired(now):
                await self._remove(record)
        return [r for r in records if not r.expired(now)], more

    async def reclaim(self, tenant: str | None) -> int:
        """Remove the tenant's (``None``: every tenant's, where the engines can find them)
        expired Files and Uploads with their bytes; how many were removed."""
        removed = 0
        for reclaimer in self.reclaimers:
            removed += await reclaimer(tenant)
        return removed

    async def _reclaim_files(self, tenant: str | None) -> int:
        return await reclaim_expired(
            lambda: self.records.expired(tenant, self.clock(), RECLAIM_BATCH), self._remove)

    async def _remove(self, record: FileRecord) -> int:
        """The record (its bytes given back) then its bytes; 1 if this call removed it."""
        if await self.records.remove(record.id, record.tenant) is None:
            return 0  # removed by another call meanwhile
        await self.blobs.delete(record.blob_key)
        return 1

    async def delete(self, file_id: str, tenant: str) -> None:
        if ids.unknowable(file_id):
            raise file_not_found(ids.clipped(file_id))
        record = await self.records.remove(file_id, tenant)
        if record is None:
            raise file_not_found(file_id)
        await self.blobs.delete(record.blob_key)

    async def aclose(self) -> None:
        await self.records.aclose()
        await self.blobs.aclose()


def check_length(value: str, param: str, limit: int, setting: str) -> str:
    """OpenAI's 400 for a string past its maximum length (``limit``: 0 is no bound)."""
    if limit and len(value) > limit:
        raise invalid_request(
            f"Invalid '{param}': string too long. Expected a string with maximum length "
            f"{limit}, but got a string with length {len(value)} instead ({setting}).",
            param=param, code="string_above_max_length")
    return value


def file_not_found(file_id: str) -> GatewayError:
    return not_found(f"No such File object: {file_id}", param="id")


def parse_expiry(anchor: Any, seconds: Any, *, form: bool = False) -> int | None:
    """``expires_after``'s ``anchor`` and ``seconds``: seconds from creation, or None when
    neither is given. ``form``: a File's multipart fields (``expires_after[seconds]`` is
    text there); an Upload's JSON takes an integer only. Either half alone is OpenAI's
    missing-parameter 400 for the other."""
    if anchor is None and seconds is None:
        return None
    if anchor is None:
        raise missing_parameter("expires_after.anchor")
    if anchor != "created_at":
        raise invalid_request(
            f"Invalid value: {shown(anchor)}. Supported values are: 'created_at'.",
            param="expires_after.anchor", code="invalid_value")
    if seconds is None:
        raise missing_parameter("expires_after.seconds")
    value = seconds
    if form and isinstance(seconds, str):
        try:
            value = int(seconds)
        except ValueError:
            raise invalid_request(
                f"Invalid 'expires_after.seconds': expected an integer, but got {seconds!r} "
                "instead.", param="expires_after.seconds", code="invalid_type") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid_type("expires_after.seconds", "an integer", value)
    if not MIN_EXPIRY_SECONDS <= value <= MAX_EXPIRY_SECONDS:
        raise out_of_range("expires_after.seconds", MIN_EXPIRY_SECONDS, MAX_EXPIRY_SECONDS, value)
    return value


async def reclaim_expired(find: Callable[[], Awaitable[Sequence[T]]],
                          end: Callable[[T], Awaitable[int]]) -> int:
    """End expired objects (Files, Uploads) a batch of :data:`RECLAIM_BATCH` at a time until
    ``find`` has none left; how many ``end`` ended (1 each; 0: another call ended it first,
    and a batch ending none stops the look rather than finding the same ones again)."""
    ended = 0
    while found := await find():
        round_ = sum([await end(item) for item in found])
        ended += round_
        if len(found) < RECLAIM_BATCH or not round_:
            break  # all seen, or none of these could be ended here (another call's)
    return ended

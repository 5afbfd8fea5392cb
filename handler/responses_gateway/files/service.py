"""The Files API's operations on one storage pair, with OpenAI's errors and the bounds."""

from __future__ import annotations

import time
from dataclasses import dataclass

from responses_gateway import ids
from responses_gateway.errors import GatewayError, invalid_request, not_found
from responses_gateway.files.models import FileRecord
from responses_gateway.files.store import Blobs, FileRecords, TenantFull

#: ``expires_after.seconds`` bounds (OpenAI: one hour to thirty days).
MIN_EXPIRY_SECONDS = 3600
MAX_EXPIRY_SECONDS = 30 * 86400


@dataclass(frozen=True, slots=True)
class FileLimits:
    file_bytes: int  # GATEWAY_MAX_FILE_BYTES (0: no bound)
    tenant_bytes: int  # GATEWAY_MAX_TENANT_FILE_BYTES (0: no bound)


class Files:
    def __init__(self, records: FileRecords, blobs: Blobs, limits: FileLimits) -> None:
        self.records = records
        self.blobs = blobs
        self.limits = limits

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

    async def create_joined(
        self, tenant: str, filename: str, size: int, parts: list[str], purpose: str,
        expires_after: int | None = None,
    ) -> FileRecord:
        """A File of ``size`` bytes made of the blobs ``parts`` (an Upload's), joined by the
        blob store without reading them all into memory."""
        record = self._new(tenant, filename, size, purpose, expires_after)
        await self.blobs.join(parts, record.blob_key)
        return await self._register(record)

    def _new(self, tenant: str, filename: str, size: int, purpose: str,
             expires_after: int | None) -> FileRecord:
        self.check_size(size)
        now = int(time.time())
        return FileRecord(
            id=ids.new_id(ids.FILE), tenant=tenant, filename=filename, bytes=size,
            purpose=purpose, created_at=now,
            expires_at=now + expires_after if expires_after is not None else None)

    async def _register(self, record: FileRecord) -> FileRecord:
        """The record of bytes already written (removed again when it cannot be added)."""
        try:
            await self.records.add(record, self.limits.tenant_bytes)
        except TenantFull as full:
            await self.blobs.delete(record.blob_key)
            raise GatewayError(
                400,
                f"This upload of {record.bytes} bytes would exceed the storage limit of "
                f"{self.limits.tenant_bytes} bytes for your files ({full.used} bytes in use; "
                "GATEWAY_MAX_TENANT_FILE_BYTES). Delete files you no longer need.",
                param="file", code="storage_limit_exceeded") from None
        except BaseException:
            await self.blobs.delete(record.blob_key)
            raise
        return record

    async def get(self, file_id: str, tenant: str) -> FileRecord:
        record = await self.records.get(file_id, tenant)
        if record is None or record.expired(time.time()):
            raise file_not_found(file_id)
        return record

    async def content(self, file_id: str, tenant: str) -> tuple[FileRecord, bytes]:
        record = await self.get(file_id, tenant)
        data = await self.blobs.get(record.blob_key)
        if data is None:
            raise file_not_found(file_id)
        return record, data

    async def page(
        self, tenant: str, *, purpose: str | None, order: str, after: str | None, limit: int,
    ) -> tuple[list[FileRecord], bool]:
        records, more = await self.records.page(
            tenant, purpose=purpose, order=order, after=after, limit=limit)
        now = time.time()
        return [r for r in records if not r.expired(now)], more

    async def delete(self, file_id: str, tenant: str) -> None:
        record = await self.records.remove(file_id, tenant)
        if record is None:
            raise file_not_found(file_id)
        await self.blobs.delete(record.blob_key)

    async def aclose(self) -> None:
        await self.records.aclose()
        await self.blobs.aclose()


def file_not_found(file_id: str) -> GatewayError:
    return not_found(f"No such File object: {file_id}", param="id")


def parse_expiry(anchor: str | None, seconds: str | None) -> int | None:
    """``expires_after[anchor]`` / ``[seconds]`` of an upload: seconds from creation, or None."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise invalid_request(
            f"Invalid value: '{anchor}'. Supported values are: 'created_at'.",
            param="expires_after.anchor", code="invalid_value")
    try:
        value = int(seconds or "")
    except ValueError:
        raise invalid_request(
            f"Invalid 'expires_after.seconds': expected an integer, but got {seconds!r} instead.",
            param="expires_after.seconds", code="invalid_type") from None
    if not MIN_EXPIRY_SECONDS <= value <= MAX_EXPIRY_SECONDS:
        raise invalid_request(
            "Invalid 'expires_after.seconds': integer below minimum value or above maximum "
            f"value. Expected a value between {MIN_EXPIRY_SECONDS} and {MAX_EXPIRY_SECONDS}, "
            f"but got {value} instead.",
            param="expires_after.seconds", code="integer_out_of_range")
    return value

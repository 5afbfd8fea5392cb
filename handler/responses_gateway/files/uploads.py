"""The Uploads API's rules: a file sent in parts (a function URL takes 6 MB per request), as
OpenAI's SDKs do (``client.uploads.upload_file_chunked``).

An Upload declares its size; each part's bytes are kept as a blob under
``uploads/<tenant>/<upload id>/<part id>`` (:func:`part_key`) and counted on the Upload's
record in one conditional write, so parts never pass the declared size. Completing claims the
Upload (pending -> completing, so two completes cannot make two files), checks the named
parts' sizes and ``md5``, and makes the File through :class:`~.service.Files` (its bounds
apply) with the blob store joining the parts in order (a file on disk; in S3 a multipart
upload copying each part, never all parts in memory); the parts are removed. An Upload
expires an hour after it was created.

A part's bytes count toward the tenant's ``GATEWAY_MAX_TENANT_FILE_BYTES`` from the write that
counts it on its Upload; the File the Upload becomes takes them over; cancelling gives them
back, and so does expiry: an expired Upload is ended (status ``expired``, terminal: OpenAI's
Upload statuses, no call reopens it) and its parts removed when it is next touched, before
the tenant is refused for its total, or by the running gateway's sweep (files/service.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any, BinaryIO

from responses_gateway import ids
from responses_gateway.errors import (
    MAX_INT,
    GatewayError,
    invalid_request,
    invalid_type,
    missing_parameter,
    not_found,
    out_of_range,
)
from responses_gateway.files.models import (
    CANCELLED,
    COMPLETED,
    COMPLETING,
    PENDING,
    UPLOAD_PURPOSES,
    FileRecord,
    UploadRecord,
)
from responses_gateway.files.service import (
    RECLAIM_BATCH,
    Files,
    parse_expiry,
    reclaim_expired,
)
from responses_gateway.files.store import Blobs, TenantFull, UploadRecords

UPLOAD_SECONDS = 3600  # OpenAI: an Upload expires an hour after it is created
CLAIM_SECONDS = 300  # a complete that died mid-way frees its Upload for another after this
#: What a part id may look like (ids.new_id: ``part_`` and hex); anything else (``../x``,
#: ``a//b``) names no part, and is never made into a blob key.
_PART_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def part_key(tenant: str, upload_id: str, part_id: str) -> str:
    return f"uploads/{tenant}/{upload_id}/{part_id}"


class Uploads:
    def __init__(self, records: UploadRecords, blobs: Blobs, files: Files,
                 part_bytes: int) -> None:
        self.records = records
        self.blobs = blobs
        self.files = files
        self.part_bytes = part_bytes  # GATEWAY_MAX_UPLOAD_PART_BYTES (0: no bound)
        files.reclaimers.append(self.reclaim)

    @property
    def clock(self) -> Callable[[], float]:
        """The Files' clock: an Upload expires, and becomes a File, on the same one."""
        return self.files.clock

    async def create(self, tenant: str, body: dict[str, Any]) -> UploadRecord:
        for name in ("bytes", "filename", "mime_type", "purpose"):
            if body.get(name) is None:
                raise missing_parameter(name)
        size = body["bytes"]
        if not isinstance(size, int) or isinstance(size, bool):
            raise invalid_type("bytes", "an integer", size)
        limit = self.files.limits.file_bytes or MAX_INT  # 0: no bound but what a store keeps
        if not 1 <= size <= limit:
            raise out_of_range("bytes", 1, limit, size, "GATEWAY_MAX_FILE_BYTES")
        for name in ("filename", "mime_type", "purpose"):
            if not isinstance(body[name], str) or not body[name]:
                raise invalid_type(name, "a non-empty string", body[name])
        self.files.check_name(body["filename"], "filename")
        self.files.check_name(body["mime_type"], "mime_type")
        if body["purpose"] not in UPLOAD_PURPOSES:
            raise invalid_request(
                f"'{body['purpose']}' is not one of {list(UPLOAD_PURPOSES)!r} - 'purpose'",
                param="purpose", code="invalid_value")
        expiry = body.get("expires_after")
        if expiry is not None and not isinstance(expiry, dict):
            raise invalid_request("Invalid type for 'expires_after': expected an object.",
                                  param="expires_after", code="invalid_type")
        seconds = None
        if expiry is not None:
            seconds = parse_expiry(expiry.get("anchor"), expiry.get("seconds"))
        created = int(self.clock())
        record = UploadRecord(
            id=ids.new_id(ids.UPLOAD), tenant=tenant, filename=body["filename"], bytes=size,
            purpose=body["purpose"], mime_type=body["mime_type"], created_at=created,
            expires_at=created + UPLOAD_SECONDS, file_expires_after=seconds)
        await self.records.add(record)
        return record

    def check_part_size(self, size: int) -> None:
        if self.part_bytes and size > self.part_bytes:
            raise GatewayError(
                413, f"Part is too large: {size} bytes, more than the {self.part_bytes} bytes "
                "this gateway accepts per part (GATEWAY_MAX_UPLOAD_PART_BYTES).",
                param="data", code="part_too_large")

    async def add_part(self, tenant: str, upload_id: str, source: BinaryIO, size: int
                       ) -> dict[str, Any]:
        """The part of ``size`` bytes read from ``source`` (a spooled upload, copied to the
        blob store in chunks), counted on its Upload and in the tenant's total."""
        self.check_part_size(size)
        record = await self._get(tenant, upload_id)
        self._check_open(record, "add a part to")
        if record.received + size > record.bytes:
            raise _over(record, size)
        part_id = ids.new_id(ids.UPLOAD_PART)
        key = part_key(tenant, upload_id, part_id)
        await self.blobs.put_file(key, source)
        limit = self.files.limits.tenant_bytes
        try:
            counted = await self.files.within_quota(tenant, lambda: self.records.add_part(
                upload_id, tenant, size, self.clock(), limit))
        except TenantFull as full:
            await self.blobs.delete(key)
            raise self.files.storage_full(size, full.used, "data") from None
        except BaseException:
            await self.blobs.delete(key)
            raise
        if not counted:
            await self.blobs.delete(key)
            record = await self._get(tenant, upload_id)
            self._check_open(record, "add a part to")
            raise _over(record, size)
        return {"id": part_id, "object": "upload.part", "created_at": int(self.clock()),
                "upload_id": upload_id}

    async def complete(self, tenant: str, upload_id: str, body: dict[str, Any]
                       ) -> tuple[UploadRecord, FileRecord]:
        part_ids = body.get("part_ids")
        if part_ids is None:
            raise missing_parameter("part_ids")
        if not isinstance(part_ids, list) or not all(isinstance(p, str) for p in part_ids):
            raise invalid_request("Invalid type for 'part_ids': expected an array of strings.",
                                  param="part_ids", code="invalid_type")
        if len(set(part_ids)) != len(part_ids):
            raise invalid_request("Invalid 'part_ids': a part may be listed only once.",
                                  param="part_ids", code="invalid_value")
        md5 = body.get("md5")
        if md5 is not None and not isinstance(md5, str):
            raise invalid_request("Invalid type for 'md5': expected a string.", param="md5",
                                  code="invalid_type")
        record = await self._get(tenant, upload_id)
        self._check_open(record, "complete")
        made = await self._made(record)
        if made is not None:  # an earlier complete made the File, then stopped
            return replace(record, status=COMPLETED, file_id=made.id), made
        now = self.clock()
        file_id = ids.new_id(ids.FILE)
        if not await self.records.claim(upload_id, tenant, now, now + CLAIM_SECONDS, file_id):
            self._check_open(await self._get(tenant, upload_id), "complete")
            raise invalid_request(f"Upload {upload_id} is already being completed.",
                                  param="upload_id", code="upload_in_progress")
        try:
            keys = await self._checked_parts(tenant, upload_id, part_ids, record.bytes)
            if md5 and await self._md5(keys) != md5.lower():
                raise invalid_request(
                    "The md5 checksum of the uploaded parts does not match the 'md5' given.",
                    param="md5", code="md5_mismatch")
            file = await self.files.create_joined(tenant, record.filename, record.bytes, keys,
                                                  record.purpose, record.file_expires_after,
                                                  file_id=file_id)
        except BaseException:
            await self.records.settle(upload_id, tenant, PENDING, None)
            raise
        await self.records.settle(upload_id, tenant, COMPLETED, file.id)
        await self.blobs.delete_prefix(part_key(tenant, upload_id, ""))
        return replace(record, status=COMPLETED, file_id=file.id), file

    async def cancel(self, tenant: str, upload_id: str) -> UploadRecord:
        record = await self._get(tenant, upload_id)
        self._check_open(record, "cancel")
        if not await self.records.cancel(upload_id, tenant, self.clock()):
            self._check_open(await self._get(tenant, upload_id), "cancel")
            raise invalid_request(f"Upload {upload_id} is being completed; it cannot be "
                                  "cancelled.", param="upload_id", code="upload_in_progress")
        await self.blobs.delete_prefix(part_key(tenant, upload_id, ""))
        return replace(record, status=CANCELLED)

    async def _checked_parts(self, tenant: str, upload_id: str, part_ids: list[str],
                             declared: int) -> list[str]:
        """The parts' blob keys, each present and together of the declared size (their
        sizes are read, not their bytes)."""
        keys: list[str] = []
        total = 0
        for part_id in part_ids:
            if not _PART_ID.fullmatch(part_id):
                raise _no_part(part_id, upload_id)
            key = part_key(tenant, upload_id, part_id)
            size = await self.blobs.size(key)
            if size is None:
                raise _no_part(part_id, upload_id)
            total += size
            keys.append(key)
        if total != declared:
            raise invalid_request(
                f"The parts listed hold {total} bytes, but the Upload was created with "
                f"bytes={declared}; they must match.", param="part_ids", code="bytes_mismatch")
        return keys

    async def _md5(self, keys: list[str]) -> str:
        """The md5 of the parts joined, one part in memory at a time."""
        digest = hashlib.md5(usedforsecurity=False)
        for key in keys:
            chunks = await self.blobs.stream(key)
            if chunks is not None:
                async for chunk in chunks:
                    digest.update(chunk)
        return digest.hexdigest()

    async def _get(self, tenant: str, upload_id: str) -> UploadRecord:
        """The Upload; one past its hour is ended here (parts removed, bytes given back)."""
        if ids.unknowable(upload_id):
            raise not_found(f"No such Upload object: {ids.clipped(upload_id)}",
                            param="upload_id")
        record = await self.records.get(upload_id, tenant)
        if record is not None and record.expirable(self.clock()):
            await self._expire(record)
            record = await self.records.get(upload_id, tenant)
        if record is None:
            raise not_found(f"No such Upload object: {upload_id}", param="upload_id")
        return record

    async def reclaim(self, tenant: str | None) -> int:
        """End the tenant's (``None``: every tenant's, where the engine can find them)
        expired Uploads, removing their parts; how many this call ended."""
        return await reclaim_expired(
            lambda: self.records.expired(tenant, self.clock(), RECLAIM_BATCH), self._expire)

    async def _made(self, record: UploadRecord) -> FileRecord | None:
        """The File an earlier complete of ``record`` made before it stopped (its claim chose
        the id; the File holds the parts' bytes in the tenant's total), settled now as
        completed with its parts removed; None when there is none. Without this, the
        Upload's expiry would give those bytes back a second time, and a complete tried again
        would make a second File of them."""
        if record.status != COMPLETING or not record.file_id:
            return None
        file = await self.files.records.get(record.file_id, record.tenant)
        if file is None:
            return None
        await self.records.settle(record.id, record.tenant, COMPLETED, file.id)
        await self.blobs.delete_prefix(part_key(record.tenant, record.id, ""))
        return file

    async def _expire(self, record: UploadRecord) -> int:
        if await self._made(record) is not None:
            return 1  # it had completed: nothing to give back
        if not await self.records.expire(record.id, record.tenant, self.clock()):
            return 0  # ended by another call meanwhile
        await self.blobs.delete_prefix(part_key(record.tenant, record.id, ""))
        return 1

    def _check_open(self, record: UploadRecord, action: str) -> None:
        status = record.shown_status(self.clock())
        if status != PENDING:
            raise invalid_request(
                f"Cannot {action} Upload {record.id}: it is {status}.", param="upload_id",
                code=f"upload_{status}")

    async def aclose(self) -> None:
        await self.records.aclose()


def _over(record: UploadRecord, size: int) -> GatewayError:
    return invalid_request(
        f"This part of {size} bytes would take Upload {record.id} past the {record.bytes} "
        f"bytes it was created with ({record.received} received so far).", param="data",
        code="upload_too_large")


def _no_part(part_id: str, upload_id: str) -> GatewayError:
    shown = part_id if len(part_id) <= 128 else part_id[:128] + "..."
    return invalid_request(f"No such part '{shown}' in Upload {upload_id}.",
                           param="part_ids", code="invalid_value")

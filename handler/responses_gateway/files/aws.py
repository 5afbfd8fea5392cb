"""Files in AWS: bytes in S3 (``GATEWAY_FILES_BUCKET``, key ``<tenant>/<file id>``), records in
the gateway's DynamoDB table, one partition per tenant: ``pk = files#<tenant>`` holds a row
``F#<file id>`` per file and the row ``U`` with the tenant's byte total (moved in the same
transaction as a file's row or an Upload part's count, under a condition that keeps it within
the bound), and a row ``UP#<upload id>`` per Upload. An Upload's parts are objects under
``uploads/<tenant>/<upload id>/``.

The table's TTL attribute is ``expires_at``. A row that holds bytes counted in ``U`` never
carries it (TTL would delete the row and leave its bytes counted, and its object in S3): a
File's expiry is ``file_expires_at``, an open Upload's ``upload_expires_at``; the gateway
removes them itself (files/service.py reclaim). An Upload that ended (completed, cancelled,
expired) gets ``expires_at`` a day on, and TTL removes its row."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, BinaryIO

from responses_gateway.files.models import (
    CANCELLED,
    COMPLETING,
    EXPIRED,
    PENDING,
    FileRecord,
    UploadRecord,
)
from responses_gateway.files.store import (
    CHUNK_BYTES,
    Blobs,
    FileRecords,
    TenantFull,
    UploadRecords,
)

USAGE = "U"
FILE_EXPIRY = "file_expires_at"  # a File row's expiry (not the TTL attribute: see above)
UPLOAD_EXPIRY = "upload_expires_at"  # an Upload row's expiry (likewise)
ENDED_ROW_SECONDS = 86400  # an ended Upload's row stays this long (its status answers)
MIN_PART = 5 * 1024 * 1024  # S3: every part of a multipart upload but the last is this or more


def _pk(tenant: str) -> dict[str, str]:
    return {"S": "files#" + tenant}


def _sk(file_id: str) -> dict[str, str]:
    return {"S": "F#" + file_id}


def _item(record: FileRecord) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": _pk(record.tenant), "sk": _sk(record.id), "id": {"S": record.id},
        "tenant": {"S": record.tenant}, "filename": {"S": record.filename},
        "bytes": {"N": str(record.bytes)}, "purpose": {"S": record.purpose},
        "created_at": {"N": str(record.created_at)},
    }
    if record.expires_at is not None:
        item[FILE_EXPIRY] = {"N": str(record.expires_at)}  # not TTL: reclaim gives bytes back
    return item


def _record(item: dict[str, Any]) -> FileRecord:
    row = {key: (value.get("S") if "S" in value else int(value["N"]))
           for key, value in item.items() if key in ("id", "tenant", "filename", "bytes",
                                                     "purpose", "created_at", "expires_at",
                                                     FILE_EXPIRY)}
    if FILE_EXPIRY in row:  # rows written before it held their expiry as the TTL attribute
        row["expires_at"] = row.pop(FILE_EXPIRY)
    return FileRecord.from_row(row)


class DynamoDBFileRecords(FileRecords):
    def __init__(self, table: str, client: Any = None) -> None:
        from responses_gateway.store.dynamodb.table import make_client

        self.table = table
        self.client = client or make_client()

    async def add(self, record: FileRecord, tenant_limit: int, credit: int = 0) -> None:
        size = record.bytes - credit
        if size > 0 and tenant_limit and size > tenant_limit:
            raise TenantFull(await self.used_bytes(record.tenant))
        put = {"TableName": self.table, "Item": _item(record),
               "ConditionExpression": "attribute_not_exists(pk)"}
        try:
            await asyncio.to_thread(self.client.transact_write_items, TransactItems=[
                {"Update": usage_update(self.table, record.tenant, size, tenant_limit)},
                {"Put": put}])
        except self.client.exceptions.TransactionCanceledException as exc:
            if _failed(exc, 0):
                raise TenantFull(await self.used_bytes(record.tenant)) from None
            raise

    async def get(self, file_id: str, tenant: str) -> FileRecord | None:
        result = await asyncio.to_thread(
            self.client.get_item, TableName=self.table,
            Key={"pk": _pk(tenant), "sk": _sk(file_id)}, ConsistentRead=True)
        item = result.get("Item")
        return _record(item) if item else None

    async def page(
        self, tenant: str, *, purpose: str | None, order: str, after: str | None, limit: int,
    ) -> tuple[list[FileRecord], bool]:
        records = await asyncio.to_thread(self._all, tenant)
        records.sort(key=lambda r: (r.created_at, r.id), reverse=order == "desc")
        if after:  # its place among all the tenant's files, as the SQLite engine finds it
            ids = [r.id for r in records]
            if after in ids:
                records = records[ids.index(after) + 1:]
        if purpose:
            records = [r for r in records if r.purpose == purpose]
        return records[:limit], len(records) > limit

    def _all(self, tenant: str) -> list[FileRecord]:
        records: list[FileRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :f)",
            "ExpressionAttributeValues": {":pk": _pk(tenant), ":f": {"S": "F#"}},
        }
        while True:
            result = self.client.query(**kwargs)
            records += [_record(item) for item in result.get("Items", [])]
            if "LastEvaluatedKey" not in result:
                return records
            kwargs["ExclusiveStartKey"] = result["LastEvaluatedKey"]

    async def remove(self, file_id: str, tenant: str) -> FileRecord | None:
        record = await self.get(file_id, tenant)
        if record is None:
            return None
        try:
            await asyncio.to_thread(self.client.transact_write_items, TransactItems=[
                {"Delete": {"TableName": self.table, "Key": {"pk": _pk(tenant), "sk": _sk(file_id)},
                            "ConditionExpression": "attribute_exists(pk)"}},
                {"Update": {"TableName": self.table, "Key": {"pk": _pk(tenant), "sk": {"S": USAGE}},
                            "UpdateExpression": "ADD b :n",
                            "ExpressionAttributeValues": {":n": {"N": str(-record.bytes)}}}},
            ])
        except self.client.exceptions.TransactionCanceledException:
            return None  # deleted by someone else meanwhile
        return record

    async def used_bytes(self, tenant: str) -> int:
        result = await asyncio.to_thread(
            self.client.get_item, TableName=self.table,
            Key={"pk": _pk(tenant), "sk": {"S": USAGE}}, ConsistentRead=True)
        return max(0, int(result.get("Item", {}).get("b", {}).get("N", "0")))

    async def expired(self, tenant: str | None, now: float, limit: int) -> list[FileRecord]:
        """The tenant's (one partition, read in a thread); across tenants this would be a
        scan of the whole table, so [] (each tenant's are reclaimed as it is served)."""
        if tenant is None:
            return []
        records = await asyncio.to_thread(self._all, tenant)
        return [r for r in records if r.expired(now)][:limit]


def usage_update(table: str, tenant: str, size: int, tenant_limit: int) -> dict[str, Any]:
    """The Update moving the tenant's total by ``size``, under the condition that keeps it
    within ``tenant_limit`` when it adds bytes."""
    update: dict[str, Any] = {
        "TableName": table, "Key": {"pk": _pk(tenant), "sk": {"S": USAGE}},
        "UpdateExpression": "ADD b :n", "ExpressionAttributeValues": {":n": {"N": str(size)}},
    }
    if size > 0 and tenant_limit:
        update["ConditionExpression"] = "attribute_not_exists(b) OR b <= :room"
        update["ExpressionAttributeValues"][":room"] = {"N": str(tenant_limit - size)}
    return update


def _failed(exc: Any, index: int) -> bool:
    """Whether the transaction's item ``index`` failed its condition."""
    reasons = exc.response.get("CancellationReasons") or []
    return len(reasons) > index and reasons[index].get("Code") == "ConditionalCheckFailed"


def _upload_item(record: UploadRecord) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": _pk(record.tenant), "sk": {"S": "UP#" + record.id}}
    for name, value in record.to_row().items():
        if value is not None:
            name = UPLOAD_EXPIRY if name == "expires_at" else name
            item[name] = {"S": value} if isinstance(value, str) else {"N": str(value)}
    return item


def _upload_record(item: dict[str, Any]) -> UploadRecord:
    row = {k: (v["S"] if "S" in v else float(v["N"]) if "." in v["N"] else int(v["N"]))
           for k, v in item.items() if k not in ("pk", "sk", "expires_at")}
    row["expires_at"] = row.pop(UPLOAD_EXPIRY, None) or item.get("expires_at", {}).get("N")
    return UploadRecord.from_row(row)


class DynamoDBUploadRecords(UploadRecords):
    def __init__(self, table: str, client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        from responses_gateway.store.dynamodb.table import make_client

        self.table = table
        self.client = client or make_client()
        #: when a completed Upload's row starts its ENDED_ROW_SECONDS (the table's TTL)
        self.clock = clock

    def _key(self, upload_id: str, tenant: str) -> dict[str, Any]:
        return {"pk": _pk(tenant), "sk": {"S": "UP#" + upload_id}}

    async def add(self, record: UploadRecord) -> None:
        await asyncio.to_thread(self.client.put_item, TableName=self.table,
                                Item=_upload_item(record),
                                ConditionExpression="attribute_not_exists(pk)")

    async def get(self, upload_id: str, tenant: str) -> UploadRecord | None:
        result = await asyncio.to_thread(self.client.get_item, TableName=self.table,
                                         Key=self._key(upload_id, tenant), ConsistentRead=True)
        item = result.get("Item")
        return _upload_record(item) if item else None

    async def _change(self, upload_id: str, tenant: str, update: str, condition: str,
                      values: dict[str, Any]) -> bool:
        typed = {k: {"S": v} if isinstance(v, str) else {"N": str(v)}
                 for k, v in values.items()}
        try:
            await asyncio.to_thread(
                self.client.update_item, TableName=self.table, Key=self._key(upload_id, tenant),
                UpdateExpression=update, ConditionExpression="attribute_exists(pk) AND "
                + condition, ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues=typed)
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    async def add_part(self, upload_id: str, tenant: str, size: int, now: float,
                       tenant_limit: int) -> bool:
        # A condition cannot add, so ``received`` moves from the value read, under the
        # condition that it is still that value (parts sent at once retry; none is lost),
        # in one transaction with the tenant's total.
        for _ in range(16):
            record = await self.get(upload_id, tenant)
            if record is None or record.received + size > record.bytes:
                return False
            update = self._update(
                upload_id, tenant, "SET received = :new",
                f"#s = :p AND {UPLOAD_EXPIRY} > :now AND received = :old",
                {":new": record.received + size, ":old": record.received, ":p": PENDING,
                 ":now": now})
            try:
                await asyncio.to_thread(self.client.transact_write_items, TransactItems=[
                    {"Update": update},
                    {"Update": usage_update(self.table, tenant, size, tenant_limit)}])
                return True
            except self.client.exceptions.TransactionCanceledException as exc:
                if _failed(exc, 1):
                    raise TenantFull(await self._used(tenant)) from None
                if not _failed(exc, 0):
                    raise
            if record.status != PENDING or record.expires_at <= now:
                return False
        return False

    async def _used(self, tenant: str) -> int:
        return await DynamoDBFileRecords(self.table, self.client).used_bytes(tenant)

    def _update(self, upload_id: str, tenant: str, update: str, condition: str,
                values: dict[str, Any]) -> dict[str, Any]:
        return {"TableName": self.table, "Key": self._key(upload_id, tenant),
                "UpdateExpression": update,
                "ConditionExpression": "attribute_exists(pk) AND " + condition,
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {
                    k: {"S": v} if isinstance(v, str) else {"N": str(v)}
                    for k, v in values.items()}}

    async def claim(self, upload_id: str, tenant: str, now: float, until: float,
                    file_id: str) -> bool:
        return await self._change(
            upload_id, tenant, "SET #s = :c, claimed_until = :until, file_id = :f",
            f"{UPLOAD_EXPIRY} > :now AND (#s = :p OR (#s = :c AND claimed_until < :now))",
            {":c": COMPLETING, ":until": until, ":now": now, ":p": PENDING, ":f": file_id})

    async def settle(self, upload_id: str, tenant: str, status: str,
                     file_id: str | None) -> None:
        if file_id is None:
            await self._change(upload_id, tenant, "SET #s = :s, claimed_until = :z "
                               "REMOVE file_id", "#s = :c",
                               {":s": status, ":z": 0, ":c": COMPLETING})
        else:
            await self._change(upload_id, tenant, "SET #s = :s, claimed_until = :z, "
                               "file_id = :f, expires_at = :ttl", "#s = :c",
                               {":s": status, ":z": 0, ":c": COMPLETING, ":f": file_id,
                                ":ttl": int(self.clock()) + ENDED_ROW_SECONDS})

    async def cancel(self, upload_id: str, tenant: str, now: float) -> bool:
        return await self._end(upload_id, tenant, CANCELLED, now,
                               lambda r: r.status == PENDING and r.expires_at > now,
                               f"#s = :p AND {UPLOAD_EXPIRY} > :now")

    async def expire(self, upload_id: str, tenant: str, now: float) -> bool:
        return await self._end(
            upload_id, tenant, EXPIRED, now, lambda r: r.expirable(now),
            f"{UPLOAD_EXPIRY} <= :now AND (#s = :p OR (#s = :c AND claimed_until < :now))")

    async def _end(self, upload_id: str, tenant: str, status: str, now: float,
                   may: Callable[[UploadRecord], bool], condition: str) -> bool:
        """The Upload -> ``status`` under ``condition`` (``may`` of the record read), its
        parts' bytes given back, in one transaction; the row then expires with the TTL."""
        for _ in range(16):
            record = await self.get(upload_id, tenant)
            if record is None or not may(record):
                return False
            update = self._update(
                upload_id, tenant, "SET #s = :x, expires_at = :ttl",
                condition + " AND received = :r",
                {":x": status, ":p": PENDING, ":c": COMPLETING, ":now": now,
                 ":r": record.received, ":ttl": int(now) + ENDED_ROW_SECONDS})
            if ":c" not in condition:
                update["ExpressionAttributeValues"].pop(":c")
            try:
                await asyncio.to_thread(self.client.transact_write_items, TransactItems=[
                    {"Update": update},
                    {"Update": usage_update(self.table, tenant, -record.received, 0)}])
                return True
            except self.client.exceptions.TransactionCanceledException as exc:
                if not _failed(exc, 0):
                    raise
        return False

    async def expired(self, tenant: str | None, now: float, limit: int
                      ) -> list[UploadRecord]:
        """The tenant's (one partition, read in a thread); [] across tenants."""
        if tenant is None:
            return []

        def read() -> list[UploadRecord]:
            found: list[UploadRecord] = []
            kwargs: dict[str, Any] = {
                "TableName": self.table, "ConsistentRead": True,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :u)",
                "ExpressionAttributeValues": {":pk": _pk(tenant), ":u": {"S": "UP#"}},
            }
            while len(found) < limit:
                result = self.client.query(**kwargs)
                found += [r for r in map(_upload_record, result.get("Items", []))
                          if r.expirable(now)]
                if "LastEvaluatedKey" not in result:
                    break
                kwargs["ExclusiveStartKey"] = result["LastEvaluatedKey"]
            return found[:limit]

        return await asyncio.to_thread(read)


class S3Blobs(Blobs):
    def __init__(self, bucket: str, client: Any = None) -> None:
        self.bucket = bucket
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                # A configured endpoint (local S3, tests) is addressed by path; AWS by host.
                style = "path" if (os.environ.get("AWS_ENDPOINT_URL_S3")
                                   or os.environ.get("AWS_ENDPOINT_URL")) else "auto"
                self._client = boto3.session.Session().client("s3", config=Config(
                    retries={"mode": "standard", "max_attempts": 5},
                    s3={"addressing_style": style}, max_pool_connections=32))
            return self._client

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self.client.put_object, Bucket=self.bucket, Key=key, Body=data)

    async def put_file(self, key: str, source: BinaryIO) -> None:
        """boto3's managed transfer: a multipart upload of 8 MiB parts past 8 MiB, a few
        parts in memory at a time."""
        await asyncio.to_thread(self.client.upload_fileobj, source, self.bucket, key)

    def chunks(self, key: str) -> AsyncIterator[bytes] | None:
        return self._chunks(key)

    async def _chunks(self, key: str) -> AsyncIterator[bytes]:
        def open_body() -> Any:
            try:
                return self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            except self.client.exceptions.NoSuchKey:
                raise FileNotFoundError(key) from None

        body = await asyncio.to_thread(open_body)
        try:
            while chunk := await asyncio.to_thread(body.read, CHUNK_BYTES):
                yield chunk
        finally:
            await asyncio.to_thread(body.close)

    async def get(self, key: str) -> bytes | None:
        def read() -> bytes | None:
            try:
                return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except self.client.exceptions.NoSuchKey:
                return None

        return await asyncio.to_thread(read)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self.client.delete_object, Bucket=self.bucket, Key=key)

    async def delete_prefix(self, prefix: str) -> None:
        def run() -> None:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    self.client.delete_objects(Bucket=self.bucket,
                                               Delete={"Objects": keys, "Quiet": True})

        await asyncio.to_thread(run)

    async def size(self, key: str) -> int | None:
        def head() -> int | None:
            try:
                return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
            except self.client.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise

        return await asyncio.to_thread(head)

    async def join(self, keys: list[str], target: str) -> None:
        await asyncio.to_thread(self._join, keys, target)

    def _join(self, keys: list[str], target: str) -> None:
        """One multipart upload: a source of 5 MiB or more is copied inside S3
        (UploadPartCopy), smaller ones are read and sent together until they make a part of
        5 MiB (S3's least but for the last part), so memory holds at most about one part."""
        s3 = self.client
        upload = s3.create_multipart_upload(Bucket=self.bucket, Key=target)["UploadId"]
        parts: list[dict[str, Any]] = []
        pending = bytearray()

        def send(data: bytes) -> None:
            answer = s3.upload_part(Bucket=self.bucket, Key=target, UploadId=upload,
                                    PartNumber=len(parts) + 1, Body=data)
            parts.append({"PartNumber": len(parts) + 1, "ETag": answer["ETag"]})

        try:
            for key in keys:
                size = int(s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
                if not pending and size >= MIN_PART:
                    answer = s3.upload_part_copy(
                        Bucket=self.bucket, Key=target, UploadId=upload,
                        PartNumber=len(parts) + 1,
                        CopySource={"Bucket": self.bucket, "Key": key})
                    parts.append({"PartNumber": len(parts) + 1,
                                  "ETag": answer["CopyPartResult"]["ETag"]})
                    continue
                pending += s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                if len(pending) >= MIN_PART:
                    send(bytes(pending))
                    pending.clear()
            if pending or not parts:
                send(bytes(pending))
            s3.complete_multipart_upload(Bucket=self.bucket, Key=target, UploadId=upload,
                                         MultipartUpload={"Parts": parts})
        except BaseException:
            s3.abort_multipart_upload(Bucket=self.bucket, Key=target, UploadId=upload)
            raise

"""Container records in AWS: the gateway's DynamoDB table, one partition per tenant
(``pk = containers#<tenant>``): a row ``C#<container id>`` per container and a row
``F#<container id>#<file id>`` per container file.

A container row carries the table's TTL attribute ``expires_at``: ``keep_seconds`` after its
expiry while it runs (moved on every use), its ``forget_at`` once expired. So a container
nobody touches again leaves the table by itself, as its AgentCore session ends by itself;
one that is touched is reclaimed then (containers/service.py), its file rows removed with it.
File rows carry a TTL of their own, further off (``keep_seconds`` and a week from when they
were written), moved on when their container's files are listed (after every execution):
a used container's files do not go before it, an abandoned one's go some time after it.

The bound on running containers is a count read before the write (a query of the tenant's
partition), and read again after it: a create that finds its container past the bound among
the running ones (ordered by when they were made) removes it and is refused. So two creates
at the same moment in two processes do not both pass it (short of their clocks disagreeing
by more than the time between their writes). Every other change is one conditional write.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

from responses_gateway.containers.models import EXPIRED, RUNNING, ContainerFile, ContainerRecord
from responses_gateway.containers.records import ContainerRecords, TooManyContainers

_CONTAINER_FIELDS = ("id", "tenant", "name", "created_at", "last_active_at", "memory_limit",
                     "expires_minutes", "idle_seconds", "status", "state", "forget_at")
#: how much longer than its container's keeping a file row's TTL runs (a container is used,
#: and its files listed, at least every GATEWAY_CONTAINER_IDLE_SECONDS while it lives)
FILE_TTL_SLACK = 7 * 86400
_FILE_FIELDS = ("id", "container_id", "tenant", "path", "bytes", "created_at", "source")


def _pk(tenant: str) -> dict[str, str]:
    return {"S": "containers#" + tenant}


def _csk(container_id: str) -> dict[str, str]:
    return {"S": "C#" + container_id}


def _fsk(container_id: str, file_id: str = "") -> dict[str, str]:
    return {"S": f"F#{container_id}#{file_id}"}


def _value(value: Any) -> dict[str, str]:
    return {"S": value} if isinstance(value, str) else {"N": repr(value)
                                                        if isinstance(value, float) else
                                                        str(value)}


def _item(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _value(v) for k, v in row.items() if v is not None}


def _row(item: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in names:
        value = item.get(name)
        if value is None:
            row[name] = None
        elif "S" in value:
            row[name] = value["S"]
        else:
            row[name] = float(value["N"])
    return row


def _made(item: dict[str, Any]) -> tuple[float, str]:
    """When a container was made (its first ``last_active_at``; ``created_at`` for a row
    written before ``made_at`` was), then its id: the order of the bound's second look."""
    made = item.get("made_at") or item.get("created_at") or {"N": "0"}
    return float(made["N"]), item["sk"]["S"]


def _container(item: dict[str, Any]) -> ContainerRecord:
    return ContainerRecord.from_row(_row(item, _CONTAINER_FIELDS))


def _file(item: dict[str, Any]) -> ContainerFile:
    return ContainerFile.from_row(_row(item, _FILE_FIELDS))


class DynamoDBContainerRecords(ContainerRecords):
    def __init__(self, table: str, client: Any = None, *, keep_seconds: float = 86400.0
                 ) -> None:
        from responses_gateway.store.dynamodb.table import make_client

        self.table = table
        self.client = client or make_client()
        #: how long a container's row outlives its expiry (the TTL): GATEWAY_RETENTION_DAYS
        self.keep_seconds = keep_seconds

    def _query(self, tenant: str, prefix: str, **extra: Any) -> list[dict[str, Any]]:
        """Every item of the tenant's partition whose sort key starts with ``prefix``."""
        items: list[dict[str, Any]] = []
        values = {":pk": _pk(tenant), ":p": {"S": prefix},
                  **extra.pop("ExpressionAttributeValues", {})}
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)",
            "ExpressionAttributeValues": values, **extra}
        while True:
            result = self.client.query(**kwargs)
            items += result.get("Items", [])
            if "LastEvaluatedKey" not in result:
                return items
            kwargs["ExclusiveStartKey"] = result["LastEvaluatedKey"]

    def _running(self, tenant: str, now: float) -> list[dict[str, Any]]:
        return self._query(tenant, "C#", FilterExpression="#s = :r AND active_until > :now",
                           ExpressionAttributeNames={"#s": "status"},
                           ExpressionAttributeValues={":r": {"S": RUNNING},
                                                      ":now": _value(now)})

    async def add(self, record: ContainerRecord, max_running: int, now: float) -> None:
        if max_running:
            running = len(await asyncio.to_thread(self._running, record.tenant, now))
            if running >= max_running:
                raise TooManyContainers(running)
        item = _item(record.to_row())
        item.update(pk=_pk(record.tenant), sk=_csk(record.id),
                    active_until=_value(record.active_until),
                    expires_at=_value(int(record.active_until + self.keep_seconds)),
                    made_at=_value(record.last_active_at))
        await asyncio.to_thread(self.client.put_item, TableName=self.table, Item=item,
                                ConditionExpression="attribute_not_exists(pk)")
        if max_running:
            # Another process may have counted before this write too: the running ones
            # made before this one, read now, decide (the later of two takes it back).
            running_items = await asyncio.to_thread(self._running, record.tenant, now)
            before = [i for i in running_items if _made(i) < _made(item)]
            if len(before) >= max_running:
                await asyncio.to_thread(
                    self.client.delete_item, TableName=self.table,
                    Key={"pk": item["pk"], "sk": item["sk"]})
                raise TooManyContainers(len(before))

    async def get(self, tenant: str, container_id: str) -> ContainerRecord | None:
        result = await asyncio.to_thread(
            self.client.get_item, TableName=self.table,
            Key={"pk": _pk(tenant), "sk": _csk(container_id)}, ConsistentRead=True)
        item = result.get("Item")
        return _container(item) if item else None

    async def page(self, tenant: str, *, name: str | None, order: str, after: str | None,
                   limit: int) -> tuple[list[ContainerRecord], bool]:
        items = await asyncio.to_thread(self._query, tenant, "C#")
        records = sorted((_container(i) for i in items), key=lambda r: (r.created_at, r.id),
                         reverse=order == "desc")
        if after:  # its place among all the tenant's containers, as SQLite finds it
            positions = [r.id for r in records]
            if after in positions:
                records = records[positions.index(after) + 1:]
        if name is not None:
            records = [r for r in records if r.name == name]
        return records[:limit], len(records) > limit

    async def touch(self, tenant: str, container_id: str, now: float,
                    state: str | None = None) -> bool:
        update = ("SET last_active_at = :now, active_until = :now + idle_seconds, "
                  "expires_at = :ttl + idle_seconds")
        values = {":now": _value(now), ":ttl": _value(int(now + self.keep_seconds)),
                  ":r": {"S": RUNNING}}
        if state is not None:
            update += ", #st = :state"
            values[":state"] = {"S": state}
        names = {"#s": "status", **({"#st": "state"} if state is not None else {})}
        try:
            await asyncio.to_thread(
                self.client.update_item, TableName=self.table,
                Key={"pk": _pk(tenant), "sk": _csk(container_id)}, UpdateExpression=update,
                ConditionExpression="attribute_exists(pk) AND #s = :r",
                ExpressionAttributeNames=names, ExpressionAttributeValues=values)
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    async def expire(self, tenant: str, container_id: str, now: float,
                     forget_at: float) -> bool:
        try:
            await asyncio.to_thread(
                self.client.update_item, TableName=self.table,
                Key={"pk": _pk(tenant), "sk": _csk(container_id)},
                UpdateExpression="SET #s = :e, forget_at = :f, expires_at = :ttl",
                ConditionExpression="attribute_exists(pk) AND #s = :r AND active_until <= :now",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":e": {"S": EXPIRED}, ":r": {"S": RUNNING},
                                           ":f": _value(forget_at),
                                           ":ttl": _value(int(forget_at)),
                                           ":now": _value(now)})
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        await self._remove_files(tenant, container_id)
        return True

    async def remove(self, tenant: str, container_id: str) -> ContainerRecord | None:
        result = await asyncio.to_thread(
            self.client.delete_item, TableName=self.table,
            Key={"pk": _pk(tenant), "sk": _csk(container_id)}, ReturnValues="ALL_OLD")
        item = result.get("Attributes")
        if not item:
            return None
        await self._remove_files(tenant, container_id)
        return _container(item)

    async def _remove_files(self, tenant: str, container_id: str) -> None:
        items = await asyncio.to_thread(self._query, tenant, _fsk(container_id)["S"],
                                        ProjectionExpression="pk, sk")
        if items:
            await asyncio.to_thread(self._delete_all, [{"pk": i["pk"], "sk": i["sk"]}
                                                       for i in items])

    def _delete_all(self, keys: list[dict[str, Any]]) -> None:
        """BatchWriteItem deletes in groups of 25, what DynamoDB left unprocessed sent again."""
        for start in range(0, len(keys), 25):
            pending: dict[str, Any] = {self.table: [{"DeleteRequest": {"Key": key}}
                                                    for key in keys[start:start + 25]]}
            for attempt in range(10):
                pending = self.client.batch_write_item(RequestItems=pending).get(
                    "UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(random.uniform(0, 0.05 * 2**attempt))

    async def expired(self, tenant: str | None, now: float, limit: int
                      ) -> list[ContainerRecord]:
        """The tenant's (one partition); across tenants that would be a scan, so [] (each
        tenant's are reclaimed as it is served, and the TTL drops the rest)."""
        if tenant is None:
            return []
        items = await asyncio.to_thread(
            self._query, tenant, "C#", FilterExpression="#s = :r AND active_until <= :now",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":r": {"S": RUNNING}, ":now": _value(now)})
        return [_container(i) for i in items][:limit]

    # -- container files ------------------------------------------------------------------

    async def put_file(self, file: ContainerFile) -> ContainerFile:
        existing = [f for f in await self.files(file.tenant, file.container_id)
                    if f.path == file.path]
        if existing:
            kept = existing[0]
            file = ContainerFile(id=kept.id, container_id=kept.container_id,
                                 tenant=kept.tenant, path=kept.path, bytes=file.bytes,
                                 created_at=kept.created_at, source=file.source)
        item = _item(file.to_row())
        item.update(pk=_pk(file.tenant), sk=_fsk(file.container_id, file.id),
                    expires_at=_value(self._file_ttl()))
        await asyncio.to_thread(self.client.put_item, TableName=self.table, Item=item)
        return file

    def _file_ttl(self) -> int:
        """A file row's TTL: past its container's keeping, by the table's clock (real
        time), moved on when its container's files are listed."""
        return int(time.time() + self.keep_seconds + FILE_TTL_SLACK)

    def _refresh(self, items: list[dict[str, Any]]) -> None:
        """File rows whose TTL is less than half its span away get a new one."""
        soon = time.time() + (self.keep_seconds + FILE_TTL_SLACK) / 2
        for item in items:
            ttl = item.get("expires_at")
            if ttl is not None and float(ttl["N"]) >= soon:
                continue
            with contextlib.suppress(self.client.exceptions.ConditionalCheckFailedException):
                self.client.update_item(
                    TableName=self.table, Key={"pk": item["pk"], "sk": item["sk"]},
                    UpdateExpression="SET expires_at = :t",
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeValues={":t": _value(self._file_ttl())})

    async def get_file(self, tenant: str, container_id: str, file_id: str
                       ) -> ContainerFile | None:
        result = await asyncio.to_thread(
            self.client.get_item, TableName=self.table,
            Key={"pk": _pk(tenant), "sk": _fsk(container_id, file_id)}, ConsistentRead=True)
        item = result.get("Item")
        return _file(item) if item else None

    async def files(self, tenant: str, container_id: str) -> list[ContainerFile]:
        items = await asyncio.to_thread(self._query, tenant, _fsk(container_id)["S"])
        await asyncio.to_thread(self._refresh, items)
        return sorted((_file(i) for i in items), key=lambda f: (f.created_at, f.id))

    async def remove_file(self, tenant: str, container_id: str, file_id: str
                          ) -> ContainerFile | None:
        result = await asyncio.to_thread(
            self.client.delete_item, TableName=self.table,
            Key={"pk": _pk(tenant), "sk": _fsk(container_id, file_id)}, ReturnValues="ALL_OLD")
        item = result.get("Attributes")
        return _file(item) if item else None

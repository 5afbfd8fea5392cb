"""DynamoDB store (``GATEWAY_STORE=dynamodb:TABLE``): one table, one partition per response.

The item layout and why it serves each access pattern is in docs/store.md. In short, partition
``pk = <response id>`` holds the record ``R``, the input items ``R#IN#<idx>``, the parts of a
request or response too large to sit in the record (``R#RQ#<n>``, ``R#RS#<n>``) and the event
batches ``EV#<last seq>``; partition ``ITEM#<tenant>#<item id>`` points at the responses holding
that item (``item_reference``). Every item carries ``expires_at`` (TTL).

boto3 is imported on first use (cold start); blocking calls run in threads. Throttling and
transient errors are retried by botocore's standard mode; what still fails raises
StoreUnavailable so the caller can end the response ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import orjson

from responses_gateway.errors import GatewayError
from responses_gateway.status import IN_PROGRESS, QUEUED, TERMINAL_STATUSES
from responses_gateway.store.base import (
    CancelledError,
    ConversationLocked,
    ConversationStore,
    DuplicateItem,
    Store,
    StoredConversation,
    StoredResponse,
    StoreUnavailable,
    TurnSettle,
)
from responses_gateway.store.dynamodb_schema import (
    TTL_ATTRIBUTE,
    table_definition,
    ttl_specification,
)

log = logging.getLogger(__name__)

MAX_ITEM_BYTES = 400_000  # DynamoDB: 400 KB per item, names included (moto: 405,000)
ITEM_OVERHEAD = 2048  # keys, attribute names and small attributes beside a payload
INPUT_ITEM_LIMIT = MAX_ITEM_BYTES - ITEM_OVERHEAD
PART_BYTES = 350_000  # one part of a split payload
INLINE_RESPONSE_BYTES = 200_000  # response + request inline must fit one record item
INLINE_REQUEST_BYTES = 120_000
COMPRESS_ABOVE = 1024  # small JSON stays a readable string
TXN_MAX_ACTIONS = 100
TXN_MAX_BYTES = 3_500_000  # under the 4 MB transaction limit
RUNNING_STATUSES = (QUEUED, IN_PROGRESS)  # :q and :p of the condition
RECORD = "R"
CONVERSATION = "C"  # a conversation's record; its items are C#I#<pos>, id pointers C#P#<id>
_APPEND_ATTEMPTS = 5
_CONFLICT_ATTEMPTS = 6
_TORN_READ_ATTEMPTS = 5
_HOLD_SECONDS = 300.0  # a lock held while an append's rows are written outside its commit


class _ConditionFailed(Exception):
    """A ConditionExpression did not hold; in a transaction, ``failed`` holds the indexes of
    the actions whose condition failed."""

    def __init__(self, failed: tuple[int, ...] = ()) -> None:
        super().__init__(failed)
        self.failed = failed


class _TornRead(Exception):
    """The record and its parts came from different writes; read again."""


# -- encoding ------------------------------------------------------------------------------------


def _s(value: str) -> dict[str, Any]:
    return {"S": value}


def _n(value: float) -> dict[str, Any]:
    return {"N": str(value)}


def _pack(obj: Any) -> tuple[dict[str, Any], int]:
    """JSON as a string attribute when small, zlib-compressed binary otherwise; and its size."""
    data = orjson.dumps(obj)
    if len(data) <= COMPRESS_ABOVE:
        return {"S": data.decode()}, len(data)
    packed = zlib.compress(data, 6)
    return {"B": packed}, len(packed)


def _unpack(value: dict[str, Any]) -> Any:
    if "S" in value:
        return orjson.loads(value["S"])
    return orjson.loads(zlib.decompress(value["B"]))


def _raw(value: dict[str, Any]) -> bytes:
    return value["S"].encode() if "S" in value else value["B"]


def _split(data: bytes) -> list[bytes]:
    return [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]


def _in_sk(index: int) -> str:
    return f"R#IN#{index:06d}"


def _part_sk(prefix: str, index: int) -> str:
    return f"R#{prefix}#{index:03d}"


def _event_sk(last_seq: int) -> str:
    return f"EV#{max(last_seq, 0):012d}"


def _conv_item_sk(pos: int) -> str:
    return f"C#I#{pos:012d}"


def _conv_pointer_sk(item_id: str) -> str:
    return f"C#P#{item_id}"


def _conv_part_sk(pos: int, k: int) -> str:
    """Part k (1…) of the item at ``pos`` when it is too large for one DynamoDB item. ``C#J``
    sorts right after every ``C#I`` row and before the pointers, so a turn's history Query
    (``C`` … ``C#J#~``) reads the parts with their items, in one range."""
    return f"C#J#{pos:012d}#{k:03d}"


def _conv_item_rows(
    conversation_id: str, pos: int, item: dict[str, Any]
) -> tuple[list[dict[str, Any]], int]:
    """The row ``C#I#<pos>`` holding ``item`` (and its parts), and their payload size.

    An item whose JSON compresses to more than one DynamoDB item can hold keeps its first
    350 KB in the row and the rest in part rows that repeat a version token the row names,
    as a response's large record does (``_blob``): a long output item is never refused."""
    attr, size = _pack(item)
    row: dict[str, Any] = {
        "pk": _s(conversation_id), "sk": _s(_conv_item_sk(pos)), "iid": _s(item["id"]),
    }
    if size <= INPUT_ITEM_LIMIT:
        row["item"] = attr
        return [row], size
    chunks = _split(_raw(attr))
    version = secrets.token_hex(6)
    row.update({"d": {"B": chunks[0]}, "np": _n(len(chunks)), "v": _s(version)})
    parts = [
        {"pk": _s(conversation_id), "sk": _s(_conv_part_sk(pos, k)), "d": {"B": chunk},
         "v": _s(version)}
        for k, chunk in enumerate(chunks[1:], start=1)
    ]
    return [*parts, row], size  # the row last: a batch writes it after its parts


def _conv_part_keys(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Keys of a row's part rows (none for an item stored whole)."""
    if "np" not in row:
        return []
    pos = int(row["sk"]["S"][4:])
    return [
        {"pk": row["pk"], "sk": _s(_conv_part_sk(pos, k))} for k in range(1, int(row["np"]["N"]))
    ]


def _conv_item_of(row: dict[str, Any], parts: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The item a row holds, its parts taken from ``parts`` (by sort key); None when a part
    is missing or from another write (the item was deleted while being read)."""
    if "item" in row:
        return _unpack(row["item"])
    version = row["v"]["S"]
    chunks = [row["d"]["B"]]
    for key in _conv_part_keys(row):
        part = parts.get(key["sk"]["S"])
        if part is None or part["v"]["S"] != version:
            return None
        chunks.append(part["d"]["B"])
    return orjson.loads(zlib.decompress(b"".join(chunks)))


def _pointer_pk(tenant: str, item_id: str) -> str:
    return f"ITEM#{tenant}#{item_id}"


def _expired(item: dict[str, Any], now: float) -> bool:
    ttl = item.get(TTL_ATTRIBUTE)
    return ttl is not None and float(ttl["N"]) <= now


def _blob(
    response_id: str, name: str, prefix: str, obj: Any, inline_limit: int, ttl: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Record attributes for ``obj`` and, if it does not fit inline, its part items.

    Parts have fixed keys and carry a version token that the record names, so a reader that
    meets parts from another write (Query is read-committed, not a snapshot) reads again.
    """
    attr, size = _pack(obj)
    if size <= inline_limit:
        return {name: attr}, []
    version = secrets.token_hex(6)
    parts = [
        {
            "pk": _s(response_id),
            "sk": _s(_part_sk(prefix, i)),
            "d": {"B": part},
            "v": _s(version),
            TTL_ATTRIBUTE: ttl,
        }
        for i, part in enumerate(_split(_raw(attr)))
    ]
    return {f"{name}_n": _n(len(parts)), f"{name}_v": _s(version)}, parts


def _read_blob(
    record: dict[str, Any], name: str, prefix: str, parts: dict[str, dict[str, Any]]
) -> Any:
    if name in record:
        return _unpack(record[name])
    version = record[f"{name}_v"]["S"]
    chunks = []
    for i in range(int(record[f"{name}_n"]["N"])):
        part = parts.get(_part_sk(prefix, i))
        if part is None or part["v"]["S"] != version:
            raise _TornRead
        chunks.append(part["d"]["B"])
    return orjson.loads(zlib.decompress(b"".join(chunks)))


def _size(item: dict[str, Any]) -> int:
    """About what DynamoDB counts of an item toward a transaction's 4 MB: names and values."""
    total = 0
    for name, value in item.items():
        total += len(name)
        for kind, data in value.items():
            total += len(data.encode()) if kind == "S" else len(data) if kind == "B" else 8
    return total


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One write per key (a transaction, or a batch, refuses two on one item); the last wins,
    as it would written one after another (an item id given twice: its pointer names the
    later one)."""
    return list({(i["pk"]["S"], i["sk"]["S"]): i for i in items}.values())


def _fits(actions: int, size: int) -> bool:
    """Within one TransactWriteItems (with a margin under the 4 MB)."""
    return actions <= TXN_MAX_ACTIONS and size < TXN_MAX_BYTES


def _names(*names: str) -> tuple[str, dict[str, str]]:
    """A ProjectionExpression with every name escaped (DynamoDB reserves hundreds of words)."""
    return ", ".join(f"#p{i}" for i in range(len(names))), {
        f"#p{i}": name for i, name in enumerate(names)
    }


# -- client ---------------------------------------------------------------------------------------


def make_client(max_attempts: int = 5) -> Any:
    """A DynamoDB client with standard retries.

    botocore reads ``AWS_ENDPOINT_URL_DYNAMODB`` (or ``AWS_ENDPOINT_URL``) itself, so local
    DynamoDB and moto need no extra code here.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        connect_timeout=5,
        read_timeout=15,
        max_pool_connections=32,
    )
    # A session of its own: creating clients from the default session is not thread-safe.
    return boto3.session.Session().client("dynamodb", config=config)


def create_table(table_name: str, client: Any = None) -> bool:
    """Create the table (same definition as template.yaml) and enable TTL; True if created."""
    from botocore.exceptions import ClientError

    client = client or make_client()
    created = True
    try:
        client.create_table(**table_definition(table_name))
    except client.exceptions.ResourceInUseException:
        created = False
    client.get_waiter("table_exists").wait(
        TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )
    try:
        client.update_time_to_live(
            TableName=table_name, TimeToLiveSpecification=ttl_specification()
        )
    except ClientError as e:
        if "already enabled" not in str(e):
            raise
    return created


# -- conversations (layout in docs/store.md) -------------------------------------------------------


class _Conversations:
    """The ConversationStore half of DynamoDBStore: partition ``pk = <conversation id>`` holds
    the record ``C`` (tenant, created, meta, n = committed length, lk/lku = the turn lock),
    one item per conversation item ``C#I#<pos>`` and a pointer ``C#P#<item id>`` to its
    position. Nothing here expires: conversations live until deleted, as OpenAI's do."""

    table_name: str
    _call: Any
    _batch_write: Any
    _batch_put: Any
    _partition_keys: Any
    _delete_owned: Any
    _put: Any
    _record_writes: Any

    def _conv_key(self, conversation_id: str) -> dict[str, Any]:
        return {"pk": _s(conversation_id), "sk": _s(CONVERSATION)}

    @staticmethod
    def _conv_of(conversation_id: str, item: dict[str, Any]) -> StoredConversation:
        lock_until = item.get("lku")
        locked = lock_until is not None and float(lock_until["N"]) > time.time()
        return StoredConversation(
            id=conversation_id,
            tenant=item["tenant"]["S"],
            created_at=int(item["created"]["N"]),
            metadata=orjson.loads(item["meta"]["S"]),
            length=int(item["n"]["N"]),
            locked=locked,
            holder=item["lk"]["S"] if locked and "lk" in item else None,
        )

    def _get_conv(
        self, conversation_id: str, tenant: str
    ) -> tuple[StoredConversation, dict[str, Any]] | None:
        item = self._call(
            "get_item",
            TableName=self.table_name,
            Key=self._conv_key(conversation_id),
            ConsistentRead=True,
        ).get("Item")
        if item is None or item["tenant"]["S"] != tenant:
            return None
        return self._conv_of(conversation_id, item), item

    def _rows(
        self, conversation_id: str, items: list[dict[str, Any]], start: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Item rows (with their parts) and pointer rows for ``items`` at ``start``…, and
        their packed size."""
        rows: list[dict[str, Any]] = []
        size = 0
        for offset, item in enumerate(items):
            pos = start + offset
            item_rows, packed = _conv_item_rows(conversation_id, pos, item)
            size += packed + 200 * len(item_rows)
            rows += item_rows
            rows.append({
                "pk": _s(conversation_id), "sk": _s(_conv_pointer_sk(item["id"])), "pos": _n(pos)
            })
        return rows, size

    def _create_conversation(
        self, conv: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        rows, _ = self._rows(conv.id, items, 0)
        self._batch_put(rows)  # invisible until the record exists
        self._call(
            "put_item",
            TableName=self.table_name,
            Item={
                **self._conv_key(conv.id),
                "tenant": _s(conv.tenant),
                "created": _n(conv.created_at),
                "meta": _s(orjson.dumps(conv.metadata).decode()),
                "n": _n(len(items)),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        conv.length = len(items)

    def _update_conversation(
        self, conversation_id: str, tenant: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        try:
            item = self._call(
                "update_item",
                TableName=self.table_name,
                Key=self._conv_key(conversation_id),
                UpdateExpression="SET meta = :m",
                ConditionExpression="tenant = :t",
                ExpressionAttributeValues={
                    ":m": _s(orjson.dumps(metadata).decode()), ":t": _s(tenant)
                },
                ReturnValues="ALL_NEW",
            )["Attributes"]
        except _ConditionFailed:
            return None
        return self._conv_of(conversation_id, item)

    def _delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        if not self._delete_owned(self._conv_key(conversation_id), tenant):
            return False  # the record first: from here on the conversation is not found
        try:
            keys = self._partition_keys(conversation_id)
            self._batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
        except StoreUnavailable:  # unreachable without the record; a later delete retries
            log.warning("could not remove all items of deleted conversation %s", conversation_id)
        return True

    def _conversation_items(
        self, conversation_id: str, tenant: str
    ) -> tuple[StoredConversation, list[dict[str, Any]]] | None:
        """One strongly consistent Query: the record (``C`` sorts first), then the items, then
        the parts of items too large for one row (``C#J``)."""
        rows = self._query(  # type: ignore[attr-defined]
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": _s(conversation_id), ":lo": _s(CONVERSATION), ":hi": _s("C#J#~")
            },
        )
        first = next(rows, None)
        if first is None or first["sk"]["S"] != CONVERSATION or first["tenant"]["S"] != tenant:
            return None
        conv = self._conv_of(conversation_id, first)
        end = _conv_item_sk(conv.length)
        found: list[dict[str, Any]] = []
        parts: dict[str, dict[str, Any]] = {}
        for row in rows:
            sk = row["sk"]["S"]
            if sk.startswith("C#J#"):
                parts[sk] = row
            elif sk < end:
                found.append(row)
        items = [item for row in found if (item := _conv_item_of(row, parts)) is not None]
        return conv, items

    def _items_of(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items of item rows, reading the parts of any stored in parts (one BatchGet)."""
        keys = [key for row in rows for key in _conv_part_keys(row)]
        parts = {p["sk"]["S"]: p for p in self._batch_get(keys)} if keys else {}
        return [item for row in rows if (item := _conv_item_of(row, parts)) is not None]

    def _lock_conversation(
        self, conversation_id: str, tenant: str, token: str, length: int, until: float
    ) -> bool | None:
        try:
            self._call(
                "update_item",
                TableName=self.table_name,
                Key=self._conv_key(conversation_id),
                UpdateExpression="SET lk = :k, lku = :u",
                ConditionExpression=(
                    "tenant = :t AND n = :n AND (attribute_not_exists(lku) OR lku < :now)"
                ),
                ExpressionAttributeValues={
                    ":k": _s(token), ":u": _n(until), ":t": _s(tenant), ":n": _n(length),
                    ":now": _n(time.time()),
                },
            )
        except _ConditionFailed:
            return None if self._get_conv(conversation_id, tenant) is None else False
        return True

    def _append_items(
        self,
        conversation_id: str,
        tenant: str,
        items: list[dict[str, Any]],
        token: str | None,
        length: int | None,
        param: str,
        record: StoredResponse | None = None,
    ) -> StoredConversation | None:
        if record is not None and token is None:
            raise ValueError("a record settles with a turn's append only (token=)")
        for _ in range(_APPEND_ATTEMPTS):
            if token is not None and length is not None:
                conv = None  # under our lock nothing else moves ``n``: no read needed
                start = length
            else:
                found = self._get_conv(conversation_id, tenant)
                if found is None:
                    return None
                conv = found[0]
                if token is None:
                    if conv.locked:
                        raise ConversationLocked()
                    self._check_duplicates(conversation_id, conv.length, items, param)
                start = conv.length
            rows, size = self._rows(conversation_id, items, start)
            values: dict[str, Any] = {":t": _s(tenant), ":n": _n(start),
                                      ":new": _n(start + len(items))}
            if token is not None:
                held = "lk = :k"
                values[":k"] = _s(token)
            else:
                held = "(attribute_not_exists(lku) OR lku < :now)"
                values[":now"] = _n(time.time())
            commit = {
                "TableName": self.table_name,
                "Key": self._conv_key(conversation_id),
                "UpdateExpression": "SET n = :new REMOVE lk, lku",
                "ConditionExpression": f"tenant = :t AND n = :n AND {held}",
                "ExpressionAttributeValues": values,
            }
            try:
                self._settle(commit, rows, size, record, tenant=tenant, token=token)
            except _ConditionFailed:
                if token is not None:
                    if self._get_conv(conversation_id, tenant) is None:
                        if record is not None:  # deleted while the turn ran: it stands alone
                            self._put(record)
                        return None
                    raise StoreUnavailable(
                        f"The conversation {conversation_id} was taken over while this "
                        "response ran."
                    ) from None
                continue  # another writer moved n (or locked it): read again
            result = conv or StoredConversation(conversation_id, tenant, 0)
            result.length = start + len(items)
            result.locked = False
            return result
        raise ConversationLocked()

    def _settle(
        self,
        commit: dict[str, Any],
        rows: list[dict[str, Any]],
        size: int,
        record: StoredResponse | None,
        *,
        tenant: str,
        token: str | None,
    ) -> None:
        """Land ``rows`` (a conversation's new items) and ``record`` (a turn's response) with
        ``commit``, the conditional Update of the conversation's ``C``, in one transaction.

        Whatever does not fit one TransactWriteItems (100 actions, 4 MB) is written first,
        where it stays invisible until that transaction lands, so the commit is always
        atomic: the record's rows (a reader starts at the record), then the item rows (past
        ``n``; written under a lock checked just before, so no other append can be using
        those positions). A condition that fails raises _ConditionFailed.
        """
        tail: list[dict[str, Any]] = []
        extra: list[dict[str, Any]] = []
        if record is not None:
            extra, item = self._record_writes(record)
            tail = [item]
        tail_size = sum(map(_size, tail))
        early: list[dict[str, Any]] = []
        puts = _unique([*rows, *extra, *tail])
        if not _fits(len(puts) + 1, size + sum(map(_size, extra)) + tail_size):
            early, puts = extra, _unique([*rows, *tail])
            if not _fits(len(puts) + 1, size + tail_size):
                self._hold(commit, tenant, token)
                early, puts = [*extra, *rows], tail
        if early:
            self._batch_put(_unique(early))
        if puts:
            self._call("transact_write_items", TransactItems=[
                {"Update": commit},
                *({"Put": {"TableName": self.table_name, "Item": p}} for p in puts),
            ])
        else:
            self._call("update_item", **commit)

    def _hold(self, commit: dict[str, Any], tenant: str, token: str | None) -> None:
        """Make sure the conversation stays ours while rows are written outside the commit:
        renew a turn's lock (``token``), or take one for an item write and make ``commit``
        conditional on it. Raises _ConditionFailed (a turn's lock lost) or ConversationLocked."""
        conversation_id = commit["Key"]["pk"]["S"]
        values = commit["ExpressionAttributeValues"]
        until = time.time() + _HOLD_SECONDS
        if token is not None:
            if not self._renew_lock(conversation_id, token, until):
                raise _ConditionFailed
            return
        token = secrets.token_hex(8)
        start = int(values[":n"]["N"])
        if not self._lock_conversation(conversation_id, tenant, token, start, until):
            raise ConversationLocked()
        commit["ConditionExpression"] = "tenant = :t AND n = :n AND lk = :k"
        values[":k"] = _s(token)
        values.pop(":now", None)

    def _check_duplicates(
        self, conversation_id: str, length: int, items: list[dict[str, Any]], param: str
    ) -> None:
        """An id the conversation holds already: its pointer, and the row it points at, exist
        below ``n`` (a pointer left by a crashed append may point at a reused position)."""
        keys = [
            {"pk": _s(conversation_id), "sk": _s(_conv_pointer_sk(item["id"]))} for item in items
        ]
        pointers = self._batch_get(keys)
        candidates = {
            p["sk"]["S"][4:]: int(p["pos"]["N"]) for p in pointers if int(p["pos"]["N"]) < length
        }
        if not candidates:
            return
        rows = self._batch_get(
            [{"pk": _s(conversation_id), "sk": _s(_conv_item_sk(p))} for p in candidates.values()]
        )
        held = {row["iid"]["S"] for row in rows}
        for item in items:
            if item["id"] in candidates and item["id"] in held:
                raise DuplicateItem(item["id"], param)

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), 100):
            request = {self.table_name: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            for attempt in range(10):
                result = self._call("batch_get_item", RequestItems=request)
                found += result.get("Responses", {}).get(self.table_name, [])
                request = result.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(random.uniform(0, 0.05 * 2**attempt))
            else:
                raise StoreUnavailable("DynamoDB batch_get_item left keys unprocessed")
        return found

    def _release_conversation(
        self, conversation_id: str, token: str, record: StoredResponse | None = None
    ) -> None:
        release = {
            "TableName": self.table_name,
            "Key": self._conv_key(conversation_id),
            "UpdateExpression": "REMOVE lk, lku",
            "ConditionExpression": "lk = :k",
            "ExpressionAttributeValues": {":k": _s(token)},
        }
        try:
            self._settle(release, [], 0, record, tenant="", token=token)
        except _ConditionFailed:  # no longer ours (or gone): nothing to release
            if record is not None:
                self._put(record)

    def _renew_lock(self, conversation_id: str, token: str, until: float) -> bool:
        try:
            self._call(
                "update_item",
                TableName=self.table_name,
                Key=self._conv_key(conversation_id),
                UpdateExpression="SET lku = :u",
                ConditionExpression="lk = :k",
                ExpressionAttributeValues={":k": _s(token), ":u": _n(until)},
            )
        except _ConditionFailed:
            return False
        return True

    def _position(self, conversation_id: str, item_id: str, length: int) -> int | None:
        """Where ``item_id`` sits, if it is committed and its row is really that item."""
        pointer = self._call(
            "get_item",
            TableName=self.table_name,
            Key={"pk": _s(conversation_id), "sk": _s(_conv_pointer_sk(item_id))},
            ConsistentRead=True,
        ).get("Item")
        if pointer is None or int(pointer["pos"]["N"]) >= length:
            return None
        return int(pointer["pos"]["N"])

    def _row(self, conversation_id: str, pos: int, item_id: str) -> dict[str, Any] | None:
        row = self._call(
            "get_item",
            TableName=self.table_name,
            Key={"pk": _s(conversation_id), "sk": _s(_conv_item_sk(pos))},
            ConsistentRead=True,
        ).get("Item")
        return row if row is not None and row["iid"]["S"] == item_id else None

    def _list_items(
        self, conversation_id: str, tenant: str, limit: int, order: str, after: str | None
    ) -> tuple[list[dict[str, Any]], bool] | None:
        found = self._get_conv(conversation_id, tenant)
        if found is None:
            return None
        conv = found[0]
        lo, hi = 0, conv.length - 1
        if after is not None:
            pos = self._position(conversation_id, after, conv.length)
            if pos is None:
                raise KeyError(after)
            if order == "asc":
                lo = pos + 1
            else:
                hi = pos - 1
        if hi < lo:
            return [], False
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": _s(conversation_id),
                ":lo": _s(_conv_item_sk(lo)),
                ":hi": _s(_conv_item_sk(hi)),
            },
            "ScanIndexForward": order == "asc",
        }
        rows: list[dict[str, Any]] = []
        while len(rows) <= limit:  # one page, unless 1 MB cut it short
            kwargs["Limit"] = limit + 1 - len(rows)
            page = self._call("query", **kwargs)
            rows += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return self._items_of(rows[:limit]), len(rows) > limit

    def _get_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, dict[str, Any] | None] | None:
        found = self._get_conv(conversation_id, tenant)
        if found is None:
            return None
        conv = found[0]
        pos = self._position(conversation_id, item_id, conv.length)
        row = None if pos is None else self._row(conversation_id, pos, item_id)
        items = [] if row is None else self._items_of([row])
        return conv, items[0] if items else None

    def _delete_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, bool] | None:
        found = self._get_conv(conversation_id, tenant)
        if found is None:
            return None
        conv = found[0]
        pos = self._position(conversation_id, item_id, conv.length)
        row = None if pos is None else self._row(conversation_id, pos, item_id)
        if pos is None or row is None:
            return conv, False
        self._batch_write([
            {"DeleteRequest": {"Key": key}}
            for key in [
                {"pk": _s(conversation_id), "sk": _s(_conv_item_sk(pos))},
                {"pk": _s(conversation_id), "sk": _s(_conv_pointer_sk(item_id))},
                *_conv_part_keys(row),
            ]
        ])
        return conv, True


# -- store ----------------------------------------------------------------------------------------


class DynamoDBStore(_Conversations, Store, ConversationStore):
    """Responses in one DynamoDB table (layout in docs/store.md)."""

    def __init__(
        self,
        table_name: str,
        *,
        retention_days: int = 30,
        client: Any = None,
        max_attempts: int = 5,
    ) -> None:
        self.table_name = table_name
        self.retention_s = retention_days * 86400
        self._client = client
        self._max_attempts = max_attempts
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = make_client(self._max_attempts)
        return self._client

    def _record_key(self, response_id: str) -> dict[str, Any]:
        return {"pk": _s(response_id), "sk": _s(RECORD)}

    def _ttl(self) -> dict[str, Any]:
        return _n(int(time.time()) + self.retention_s)

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One API call: condition failures become _ConditionFailed, transaction conflicts are
        retried here (botocore does not), anything else left after botocore's retries becomes
        StoreUnavailable."""
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(_CONFLICT_ATTEMPTS):
            try:
                return getattr(self.client, operation)(**kwargs)
            except ClientError as e:
                error = e.response.get("Error", {})
                code = error.get("Code", "")
                if code == "ConditionalCheckFailedException":
                    raise _ConditionFailed from None
                conflict = code == "TransactionConflictException"
                if code == "TransactionCanceledException":
                    reasons = [r.get("Code") for r in e.response.get("CancellationReasons", [])]
                    if "ConditionalCheckFailed" in reasons:
                        raise _ConditionFailed(tuple(
                            i for i, r in enumerate(reasons) if r == "ConditionalCheckFailed"
                        )) from None
                    conflict = "TransactionConflict" in reasons
                if not conflict or attempt + 1 == _CONFLICT_ATTEMPTS:
                    message = f"DynamoDB {operation} failed: {code}: {error.get('Message', '')}"
                    raise StoreUnavailable(message) from e
            except BotoCoreError as e:
                raise StoreUnavailable(f"DynamoDB {operation} failed: {e}") from e
            time.sleep(random.uniform(0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """All items of a strongly consistent Query, page after page."""
        kwargs = {"TableName": self.table_name, "ConsistentRead": True, **kwargs}
        while True:
            page = self._call("query", **kwargs)
            yield from page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _delete_owned(self, key: dict[str, Any], tenant: str) -> bool:
        """Delete the record at ``key`` if ``tenant`` owns it; False if not (or not there)."""
        try:
            self._call(
                "delete_item",
                TableName=self.table_name,
                Key=key,
                ConditionExpression="tenant = :t",
                ExpressionAttributeValues={":t": _s(tenant)},
            )
        except _ConditionFailed:
            return False
        return True

    def _partition_keys(self, pk: str) -> list[dict[str, Any]]:
        """The keys of every item in partition ``pk`` (a record and what hangs off it)."""
        return [
            {"pk": item["pk"], "sk": item["sk"]}
            for item in self._query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(pk)},
                ProjectionExpression="pk, sk",
            )
        ]

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """BatchWriteItem in groups of 25, resubmitting what DynamoDB left unprocessed."""
        for start in range(0, len(requests), 25):
            pending = {self.table_name: requests[start : start + 25]}
            for attempt in range(10):
                result = self._call("batch_write_item", RequestItems=pending)
                pending = result.get("UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(random.uniform(0, 0.05 * 2**attempt))
            else:
                raise StoreUnavailable("DynamoDB batch_write_item left items unprocessed")

    def _batch_put(self, items: list[dict[str, Any]]) -> None:
        self._batch_write([{"PutRequest": {"Item": item}} for item in items])

    # -- put -------------------------------------------------------------------------------------

    def check_input_items(self, items: list[dict[str, Any]]) -> None:
        self._pack_inputs(items)

    @staticmethod
    def _pack_inputs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        packed = []
        for index, item in enumerate(items):
            attr, size = _pack(item)
            if size > INPUT_ITEM_LIMIT:
                raise GatewayError(
                    400,
                    f"Input item {index} is too large to store: {size} bytes after compression,"
                    f" more than the {INPUT_ITEM_LIMIT} bytes one stored item can hold."
                    " Split its content across several input items.",
                    param=f"input[{index}]",
                )
            packed.append(attr)
        return packed

    def _pointer(
        self, tenant: str, item_id: str, response_id: str, where: str, index: int, ttl: Any
    ) -> dict[str, Any]:
        return {
            "pk": _s(_pointer_pk(tenant, item_id)),
            "sk": _s(response_id),
            "loc": _s(where),
            "idx": _n(index),
            TTL_ATTRIBUTE: ttl,
        }

    def _output_pointers(
        self, tenant: str, response_id: str, response: dict[str, Any], ttl: Any
    ) -> list[dict[str, Any]]:
        return [
            self._pointer(tenant, item["id"], response_id, "out", i, ttl)
            for i, item in enumerate(response.get("output") or [])
            if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]
        ]

    async def put(self, record: StoredResponse) -> None:
        await asyncio.to_thread(self._put, record)

    def _put(self, r: StoredResponse) -> None:
        rows, item = self._record_writes(r)
        self._batch_put(rows)
        # The record goes last: until it exists nothing above is visible.
        self._call("put_item", TableName=self.table_name, Item=item)

    def _record_writes(self, r: StoredResponse) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """A record's rows (input items, item pointers, parts) and the record item ``R``,
        which names them: it is written last, alone or in a turn's settle transaction."""
        packed = self._pack_inputs(r.input_items)  # the 400 comes before any write
        expires_at = (
            r.expires_at if r.expires_at is not None else int(time.time()) + self.retention_s
        )
        ttl = _n(expires_at)
        writes: list[dict[str, Any]] = []
        for index, (item, attr) in enumerate(zip(r.input_items, packed, strict=True)):
            entry = {"pk": _s(r.id), "sk": _s(_in_sk(index)), "item": attr, TTL_ATTRIBUTE: ttl}
            item_id = item.get("id")
            if isinstance(item_id, str) and item_id:
                entry["iid"] = _s(item_id)
                writes.append(self._pointer(r.tenant, item_id, r.id, "in", index, ttl))
            writes.append(entry)
        writes += self._output_pointers(r.tenant, r.id, r.response, ttl)
        rsp_attrs, rsp_parts = _blob(r.id, "rsp", "RS", r.response, INLINE_RESPONSE_BYTES, ttl)
        req_attrs, req_parts = _blob(r.id, "req", "RQ", r.request, INLINE_REQUEST_BYTES, ttl)
        item = {
            **self._record_key(r.id),
            "tenant": _s(r.tenant),
            "status": _s(r.status),
            "bg": {"BOOL": r.background},
            "n_in": _n(len(r.input_items)),
            TTL_ATTRIBUTE: ttl,
            **rsp_attrs,
            **req_attrs,
        }
        if r.previous_response_id:
            item["prev"] = _s(r.previous_response_id)
        if r.lease_until is not None:
            item["lease_until"] = _n(r.lease_until)
        return writes + rsp_parts + req_parts, item

    # -- get -------------------------------------------------------------------------------------

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        return await asyncio.to_thread(self._get, response_id, tenant)

    def _get(self, response_id: str, tenant: str) -> StoredResponse | None:
        for _ in range(_TORN_READ_ATTEMPTS):
            items = list(
                self._query(
                    KeyConditionExpression="pk = :pk AND sk >= :r",
                    ExpressionAttributeValues={":pk": _s(response_id), ":r": _s(RECORD)},
                )
            )
            if not items or items[0]["sk"]["S"] != RECORD:
                return None
            record = items[0]
            if record["tenant"]["S"] != tenant or _expired(record, time.time()):
                return None
            try:
                return self._assemble(response_id, record, items[1:])
            except _TornRead:
                continue
        raise StoreUnavailable(f"Response {response_id} kept changing while being read")

    @staticmethod
    def _assemble(
        response_id: str, record: dict[str, Any], rest: list[dict[str, Any]]
    ) -> StoredResponse:
        n_in = int(record["n_in"]["N"])
        inputs: list[dict[str, Any]] = []
        parts: dict[str, dict[str, Any]] = {}
        for item in rest:  # sorted by sk: inputs arrive in order
            sk = item["sk"]["S"]
            if sk.startswith("R#IN#"):
                if int(sk[5:]) < n_in:  # a longer earlier put may have left more
                    inputs.append(_unpack(item["item"]))
            else:
                parts[sk] = item
        if len(inputs) != n_in:
            raise _TornRead
        lease = record.get("lease_until")
        return StoredResponse(
            id=response_id,
            tenant=record["tenant"]["S"],
            response=_read_blob(record, "rsp", "RS", parts),
            request=_read_blob(record, "req", "RQ", parts),
            input_items=inputs,
            previous_response_id=record["prev"]["S"] if "prev" in record else None,
            background=record["bg"]["BOOL"],
            lease_until=float(lease["N"]) if lease else None,
            expires_at=int(record[TTL_ATTRIBUTE]["N"]),
        )

    def _load_response(self, response_id: str) -> dict[str, Any] | None:
        """Only the Response object (no input items), for output item lookups."""
        for _ in range(_TORN_READ_ATTEMPTS):
            record = self._get_record(response_id, "rsp", "rsp_n", "rsp_v", TTL_ATTRIBUTE)
            if record is None or _expired(record, time.time()):
                return None
            parts: dict[str, dict[str, Any]] = {}
            if "rsp" not in record:
                parts = {
                    item["sk"]["S"]: item
                    for item in self._query(
                        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                        ExpressionAttributeValues={":pk": _s(response_id), ":p": _s("R#RS#")},
                    )
                }
            try:
                return _read_blob(record, "rsp", "RS", parts)
            except _TornRead:
                continue
        raise StoreUnavailable(f"Response {response_id} kept changing while being read")

    # -- delete ----------------------------------------------------------------------------------

    async def delete(self, response_id: str, tenant: str) -> bool:
        return await asyncio.to_thread(self._delete, response_id, tenant)

    def _delete(self, response_id: str, tenant: str) -> bool:
        stored = self._get(response_id, tenant)
        if stored is None:
            return False
        if not self._delete_owned(self._record_key(response_id), tenant):
            return False  # the record first: from here on the response is not found
        item_ids = {
            item["id"]
            for item in [*stored.input_items, *(stored.response.get("output") or [])]
            if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]
        }
        keys = [{"pk": _s(_pointer_pk(tenant, i)), "sk": _s(response_id)} for i in item_ids]
        try:
            keys += self._partition_keys(response_id)
            self._batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
        except StoreUnavailable:  # invisible leftovers; TTL removes them
            log.warning("could not remove all items of deleted response %s", response_id)
        return True

    # -- item lookup -----------------------------------------------------------------------------

    async def get_items(self, item_ids: list[str], tenant: str) -> dict[str, dict[str, Any]]:
        ids = list(dict.fromkeys(item_ids))
        if not ids:
            return {}
        pointers = await asyncio.gather(
            *(asyncio.to_thread(self._pointers, tenant, item_id) for item_id in ids)
        )
        candidates = {i: p for i, p in zip(ids, pointers, strict=True) if p}
        return await asyncio.to_thread(self._resolve, candidates)

    def _pointers(self, tenant: str, item_id: str) -> list[tuple[str, str, int]]:
        now = time.time()
        return [
            (item["sk"]["S"], item["loc"]["S"], int(item["idx"]["N"]))
            for item in self._query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(_pointer_pk(tenant, item_id))},
            )
            if not _expired(item, now)
        ]

    def _resolve(
        self, candidates: dict[str, list[tuple[str, str, int]]]
    ) -> dict[str, dict[str, Any]]:
        """Follow pointers to items; a stale pointer (item gone or replaced) falls to the next."""
        found: dict[str, dict[str, Any]] = {}
        pending = {item_id: list(pointers) for item_id, pointers in candidates.items()}
        responses: dict[str, dict[str, Any] | None] = {}
        while pending:
            wanted = {item_id: pointers.pop(0) for item_id, pointers in pending.items()}
            inputs = {
                (rid, idx): item_id
                for item_id, (rid, where, idx) in wanted.items()
                if where == "in"
            }
            found.update(self._get_input_items(inputs))
            for item_id, (rid, where, idx) in wanted.items():
                if where != "out":
                    continue
                if rid not in responses:
                    responses[rid] = self._load_response(rid)
                output = (responses[rid] or {}).get("output") or []
                item = output[idx] if idx < len(output) else None
                if isinstance(item, dict) and item.get("id") == item_id:
                    found[item_id] = item
            pending = {i: p for i, p in pending.items() if i not in found and p}
        return found

    def _get_input_items(self, keys: dict[tuple[str, int], str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        now = time.time()
        rows = self._batch_get([{"pk": _s(rid), "sk": _s(_in_sk(idx))} for rid, idx in keys])
        for item in rows:
            item_id = keys.get((item["pk"]["S"], int(item["sk"]["S"][5:])))
            if item_id and item.get("iid", {}).get("S") == item_id and not _expired(item, now):
                found[item_id] = _unpack(item["item"])
        return found

    # -- status transitions ----------------------------------------------------------------------

    async def update_response(
        self,
        response_id: str,
        response: dict[str, Any],
        *,
        expect_status: frozenset[str] | set[str] | None = None,
        lease_until: float | None = None,
    ) -> bool:
        expected = None if expect_status is None else sorted(expect_status)
        return await asyncio.to_thread(self._update, response_id, response, expected, lease_until)

    def _update(
        self,
        response_id: str,
        response: dict[str, Any],
        expected: list[str] | None,
        lease_until: float | None,
    ) -> bool:
        if expected is not None and not expected:
            return False
        update, parts = self._response_update(response_id, response, expected, lease_until)
        try:
            if not parts:
                self._call("update_item", **update)
            elif len(parts) < TXN_MAX_ACTIONS and len(parts) * PART_BYTES < TXN_MAX_BYTES:
                puts = [{"Put": {"TableName": self.table_name, "Item": p}} for p in parts]
                self._call("transact_write_items", TransactItems=[{"Update": update}, *puts])
            else:
                raise StoreUnavailable(
                    f"Response {response_id} is too large to store even compressed"
                )
        except _ConditionFailed:
            return False
        self._after_update(response_id, response)
        return True

    def _response_update(
        self,
        response_id: str,
        response: dict[str, Any],
        expected: list[str] | None,
        lease_until: float | None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The UpdateItem of the record (conditional on ``expected``) and its part items."""
        status = response.get("status", "")
        rsp_attrs, parts = _blob(
            response_id, "rsp", "RS", response, INLINE_RESPONSE_BYTES, self._ttl()
        )
        values: dict[str, Any] = {":s": _s(status)}
        sets = ["#s = :s"]
        for i, (name, value) in enumerate(rsp_attrs.items()):
            sets.append(f"{name} = :r{i}")
            values[f":r{i}"] = value
        if lease_until is not None:
            sets.append("lease_until = :l")
            values[":l"] = _n(lease_until)
        removes = [name for name in ("rsp", "rsp_n", "rsp_v") if name not in rsp_attrs]
        condition = "attribute_exists(pk)"
        if expected is not None:
            condition += f" AND #s IN ({', '.join(f':e{i}' for i in range(len(expected)))})"
            values.update({f":e{i}": _s(s) for i, s in enumerate(expected)})
        update = {
            "TableName": self.table_name,
            "Key": self._record_key(response_id),
            "UpdateExpression": f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": values,
        }
        return update, parts

    def _after_update(self, response_id: str, response: dict[str, Any]) -> None:
        if response.get("status") in TERMINAL_STATUSES and response.get("output"):
            self._index_outputs(response_id, response)

    def _get_record(self, response_id: str, *attributes: str) -> dict[str, Any] | None:
        """Some attributes of the response's record item (strongly consistent)."""
        projection, names = _names(*attributes)
        return self._call(
            "get_item",
            TableName=self.table_name,
            Key=self._record_key(response_id),
            ConsistentRead=True,
            ProjectionExpression=projection,
            ExpressionAttributeNames=names,
        ).get("Item")

    def _index_outputs(self, response_id: str, response: dict[str, Any]) -> None:
        record = self._get_record(response_id, "tenant", TTL_ATTRIBUTE)
        if record is not None:
            tenant = record["tenant"]["S"]
            self._batch_put(
                self._output_pointers(tenant, response_id, response, record[TTL_ATTRIBUTE])
            )

    async def renew_lease(self, response_id: str, lease_until: float) -> bool:
        return await asyncio.to_thread(self._renew, response_id, lease_until)

    def _renew(self, response_id: str, lease_until: float) -> bool:
        try:
            self._call(
                "update_item",
                TableName=self.table_name,
                Key=self._record_key(response_id),
                UpdateExpression="SET lease_until = :l",
                ConditionExpression="attribute_exists(pk) AND #s IN (:q, :p)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={
                    ":l": _n(lease_until),
                    ":q": _s(RUNNING_STATUSES[0]),
                    ":p": _s(RUNNING_STATUSES[1]),
                },
            )
        except _ConditionFailed:
            return False
        return True

    # -- conversations (the work is in _Conversations) ---------------------------------------

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        await asyncio.to_thread(self._create_conversation, conversation, items)

    async def get_conversation(
        self, conversation_id: str, tenant: str
    ) -> StoredConversation | None:
        found = await asyncio.to_thread(self._get_conv, conversation_id, tenant)
        return None if found is None else found[0]

    async def update_conversation(
        self, conversation_id: str, tenant: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        return await asyncio.to_thread(
            self._update_conversation, conversation_id, tenant, metadata
        )

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        return await asyncio.to_thread(self._delete_conversation, conversation_id, tenant)

    async def conversation_items(
        self, conversation_id: str, tenant: str
    ) -> tuple[StoredConversation, list[dict[str, Any]]] | None:
        return await asyncio.to_thread(self._conversation_items, conversation_id, tenant)

    async def lock_conversation(
        self, conversation_id: str, tenant: str, token: str, *, length: int, until: float
    ) -> bool | None:
        return await asyncio.to_thread(
            self._lock_conversation, conversation_id, tenant, token, length, until
        )

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
        return await asyncio.to_thread(
            self._append_items, conversation_id, tenant, items, token, length, param, record
        )

    async def release_conversation(
        self, conversation_id: str, token: str, *, record: StoredResponse | None = None
    ) -> None:
        await asyncio.to_thread(self._release_conversation, conversation_id, token, record)

    async def renew_conversation_lock(
        self, conversation_id: str, token: str, until: float
    ) -> bool:
        return await asyncio.to_thread(self._renew_lock, conversation_id, token, until)

    async def list_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        *,
        limit: int,
        order: str,
        after: str | None = None,
    ) -> tuple[list[dict[str, Any]], bool] | None:
        return await asyncio.to_thread(
            self._list_items, conversation_id, tenant, limit, order, after
        )

    async def get_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, dict[str, Any] | None] | None:
        return await asyncio.to_thread(
            self._get_conversation_item, conversation_id, tenant, item_id
        )

    async def delete_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, bool] | None:
        return await asyncio.to_thread(
            self._delete_conversation_item, conversation_id, tenant, item_id
        )

    # -- event log -------------------------------------------------------------------------------

    async def append_events(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        response: dict[str, Any] | None = None,
        lease_until: float | None = None,
        turn: TurnSettle | None = None,
    ) -> None:
        if turn is not None and response is None:
            raise ValueError("a turn settles with the terminal Response only (response=)")
        if events or response is not None:
            await asyncio.to_thread(
                self._append, response_id, events, response, lease_until, turn
            )

    def _append(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        response: dict[str, Any] | None = None,
        lease_until: float | None = None,
        turn: TurnSettle | None = None,
    ) -> None:
        """One TransactWriteItems: the batch item ``EV#<last seq>`` (plus parts if it is huge,
        the batch item written last) and either a ConditionCheck that the response is not
        cancelled or, with ``response``, the record's update conditional on ``in_progress``.

        With ``turn``, the conditional Update of the conversation's ``C`` and the turn's item
        rows join that transaction, so the terminal record and the append land together or
        not at all. Item rows that do not fit go first (invisible past ``n``), under the
        turn's lock renewed just before, as a foreground settle's do."""
        event_items = self._event_items(response_id, events) if events else []
        check = {
            "ConditionCheck": {
                "TableName": self.table_name,
                "Key": self._record_key(response_id),
                "ConditionExpression": "attribute_exists(pk) AND #s <> :c",
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {":c": _s("cancelled")},
            }
        }
        heads: list[dict[str, Any]] = [check]
        record_parts: list[dict[str, Any]] = []
        if response is not None:
            update, record_parts = self._response_update(
                response_id, response, ["in_progress"], lease_until
            )
            heads = [{"Update": update}]
        rows: list[dict[str, Any]] = []
        rows_size = 0
        if turn is not None:
            commit, rows, rows_size = self._turn_commit(turn)
            heads.append({"Update": commit})
        try:
            items = record_parts + event_items
            if rows and not _fits(
                len(heads) + len(items) + len(rows), self._payload(items) + rows_size
            ):
                assert turn is not None
                if not self._renew_lock(
                    turn.conversation_id, turn.token, time.time() + _HOLD_SECONDS
                ):
                    raise _ConditionFailed((1,))
                self._batch_put(rows)
                rows = []
            if not self._fits(items, len(heads)):
                # A batch over ~3.5 MB compressed: its parts go first in transactions of their
                # own (invisible until their batch item exists); the batch item goes last,
                # with the record's update, so the two still land together or not at all.
                early, items = event_items[:-1], [*record_parts, *event_items[-1:]]
                per_txn = max(1, min(TXN_MAX_ACTIONS - 1, TXN_MAX_BYTES // PART_BYTES))
                for start in range(0, len(early), per_txn):
                    self._transact(check, early[start : start + per_txn])
                if not self._fits(items, len(heads)):
                    raise StoreUnavailable(
                        f"Response {response_id} is too large to store even compressed"
                    )
            self._call("transact_write_items", TransactItems=[
                *heads, *({"Put": {"TableName": self.table_name, "Item": i}} for i in items + rows)
            ])
        except _ConditionFailed as failed:
            if turn is None or not failed.failed or 0 in failed.failed:
                raise CancelledError(response_id) from None
            # The conversation's condition failed. A lost lock stores nothing (the response
            # ends failed, as a foreground one does); a conversation deleted meanwhile, or a
            # release whose lock is no longer the turn's, lets the rest land alone.
            if turn.items is not None and self._get_conv(turn.conversation_id, turn.tenant):
                raise StoreUnavailable(
                    f"The conversation {turn.conversation_id} was taken over while this "
                    "response ran."
                ) from None
            self._append(response_id, events, response, lease_until)
            return
        if response is not None:
            self._after_update(response_id, response)

    def _turn_commit(
        self, turn: TurnSettle
    ) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        """The Update of the conversation's ``C`` settling ``turn`` (append at ``length`` and
        release, or release only), conditional on the turn's lock; its item rows and size."""
        values: dict[str, Any] = {":k": _s(turn.token)}
        commit: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self._conv_key(turn.conversation_id),
            "UpdateExpression": "REMOVE lk, lku",
            "ConditionExpression": "lk = :k",
            "ExpressionAttributeValues": values,
        }
        if turn.items is None:
            return commit, [], 0
        rows, size = self._rows(turn.conversation_id, turn.items, turn.length)
        values.update({":t": _s(turn.tenant), ":n": _n(turn.length),
                       ":new": _n(turn.length + len(turn.items))})
        commit["UpdateExpression"] = "SET n = :new REMOVE lk, lku"
        commit["ConditionExpression"] = "tenant = :t AND n = :n AND lk = :k"
        return commit, _unique(rows), size

    @staticmethod
    def _payload(items: list[dict[str, Any]]) -> int:
        return sum(len(_raw(item.get("ev") or item["d"])) for item in items)

    @classmethod
    def _fits(cls, items: list[dict[str, Any]], heads: int = 1) -> bool:
        return len(items) + heads <= TXN_MAX_ACTIONS and cls._payload(items) < TXN_MAX_BYTES

    def _transact(self, head: dict[str, Any], items: list[dict[str, Any]]) -> None:
        puts = [{"Put": {"TableName": self.table_name, "Item": item}} for item in items]
        self._call("transact_write_items", TransactItems=[head, *puts])

    def _event_items(self, response_id: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = int(events[0]["sequence_number"])
        last = int(events[-1]["sequence_number"])
        ttl = self._ttl()
        attr, size = _pack(events)
        base = {
            "pk": _s(response_id),
            "sk": _s(_event_sk(last)),
            "first": _n(first),
            "last": _n(last),
            TTL_ATTRIBUTE: ttl,
        }
        items: list[dict[str, Any]] = []
        if size <= PART_BYTES:
            base["ev"] = attr
        else:
            chunks = _split(_raw(attr))
            base["d"] = {"B": chunks[0]}
            base["n"] = _n(len(chunks))
            items = [
                {
                    "pk": _s(response_id),
                    "sk": _s(f"{_event_sk(last)}#{k:03d}"),
                    "d": {"B": chunk},
                    TTL_ATTRIBUTE: ttl,
                }
                for k, chunk in enumerate(chunks[1:], start=1)
            ]
        items.append(base)
        return items

    async def read_events(self, response_id: str, after: int = -1) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._read_events, response_id, after)

    def _read_events(self, response_id: str, after: int) -> list[dict[str, Any]]:
        # Batches are keyed by their last sequence number, so this range starts at the first
        # batch holding an event after `after`.
        items = list(
            self._query(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={
                    ":pk": _s(response_id),
                    ":lo": _s(_event_sk(after + 1)),
                    ":hi": _s("EV#~"),
                },
            )
        )
        parts = {
            item["sk"]["S"]: item["d"]["B"] for item in items if item["sk"]["S"].count("#") == 2
        }
        now = time.time()
        out: list[dict[str, Any]] = []
        for item in items:
            sk = item["sk"]["S"]
            if sk.count("#") != 1 or _expired(item, now):
                continue
            if "ev" in item:
                batch = _unpack(item["ev"])
            else:
                data = [item["d"]["B"]]
                data += [parts[f"{sk}#{k:03d}"] for k in range(1, int(item["n"]["N"]))]
                batch = orjson.loads(zlib.decompress(b"".join(data)))
            out.extend(e for e in batch if e["sequence_number"] > after)
        return out


"""How the DynamoDB store lays values into items: JSON packed (compressed above 1 KB), payloads
too large for one item split into version-tagged parts, the sort keys of every row kind, and the
limits of one item and one transaction. Pure functions; no client here."""

from __future__ import annotations

import secrets
import zlib
from typing import Any

import orjson

from responses_gateway.status import IN_PROGRESS, QUEUED
from responses_gateway.store.base import StoreLimits
from responses_gateway.store.dynamodb_schema import TTL_ATTRIBUTE

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
    attr, size, _ = _pack_sized(obj)
    return attr, size


def _pack_sized(obj: Any) -> tuple[dict[str, Any], int, int]:
    """``_pack``, and the JSON's own size (what the store's bounds count)."""
    data = orjson.dumps(obj)
    if len(data) <= COMPRESS_ABOVE:
        return {"S": data.decode()}, len(data), len(data)
    packed = zlib.compress(data, 6)
    return {"B": packed}, len(packed), len(data)


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
) -> tuple[list[dict[str, Any]], int, int]:
    """The row ``C#I#<pos>`` holding ``item`` (and its parts), their payload size, and the
    item's JSON size, which the row keeps (``sz``) so a delete can give it back to the
    conversation's count.

    An item whose JSON compresses to more than one DynamoDB item can hold keeps its first
    350 KB in the row and the rest in part rows that repeat a version token the row names,
    as a response's large record does (``_blob``): a long output item is never refused."""
    attr, size, raw = _pack_sized(item)
    row: dict[str, Any] = {
        "pk": _s(conversation_id), "sk": _s(_conv_item_sk(pos)), "iid": _s(item["id"]),
        "sz": _n(raw),
    }
    if size <= INPUT_ITEM_LIMIT:
        row["item"] = attr
        return [row], size, raw
    chunks = _split(_raw(attr))
    version = secrets.token_hex(6)
    row.update({"d": {"B": chunks[0]}, "np": _n(len(chunks)), "v": _s(version)})
    parts = [
        {"pk": _s(conversation_id), "sk": _s(_conv_part_sk(pos, k)), "d": {"B": chunk},
         "v": _s(version)}
        for k, chunk in enumerate(chunks[1:], start=1)
    ]
    return [*parts, row], size, raw  # the row last: a batch writes it after its parts


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
    response_id: str, name: str, prefix: str, obj: Any, inline_limit: int, ttl: dict[str, Any],
    limits: StoreLimits | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Record attributes for ``obj`` and, if it does not fit inline, its part items.

    Parts have fixed keys and carry a version token that the record names, so a reader that
    meets parts from another write (Query is read-committed, not a snapshot) reads again.
    ``limits``: ``obj`` is a Response, checked against the bound of one stored response.
    """
    attr, size, raw = _pack_sized(obj)
    if limits is not None:
        limits.check_response(raw)
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



"""The usage ledger in the response store's DynamoDB table (store/usage.py says what it keeps).

Items (docs/dashboard.md has the costs):

- ``USAGE#<day>#<shard>`` / ``<hour>#<tenant>#<model>``: a bucket's counters, moved by
  ``ADD``; the shard is the response id's (dynamodb_schema.shard_of), so a day's writes spread
  over SHARDS partitions and a bucket is the sum of its shards' items.
- ``USAGE#ID#<response id>`` / ``U``: the response's log row; written only if absent, in the
  same transaction as its counters, so a response is counted once whoever runs it again.
- ``LOG#<day>#<shard>`` / ``<created_at>#<response id>``: the same row, listed by time (admin
  views): each shard's Query newest first, merged.
- Rows written before the shards (``USAGE#<day>``, ``LOG#<day>``) are read as one more shard
  until they expire.
- ``RATE#<tenant>#<width>#<window>`` / ``W``: a key's requests and tokens in one rate window,
  a request counted by a conditional ``ADD`` (under the caps, or nothing): every process and
  Lambda instance shares one count.
- ``BUDGET#<tenant>#<period>`` / ``B``: a key's tokens in a budget period.

Everything but the buckets carries ``expires_at`` (TTL).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from responses_gateway.store.dynamodb.codec import CONVERSATION, _ConditionFailed, _n, _s
from responses_gateway.store.dynamodb.table import _Table
from responses_gateway.store.dynamodb_schema import (
    CONVERSATION_INDEX,
    CONVERSATION_INDEX_PK,
    CONVERSATION_INDEX_SK,
    CONVERSATIONS,
    SHARDS,
    TTL_ATTRIBUTE,
    conversation_index_sort,
    shard_of,
)
from responses_gateway.store.usage import (
    COUNTERS,
    DAY,
    Caps,
    Counts,
    UsageEntry,
    UsageRow,
    UsageStore,
    Windows,
    day_of,
    over,
    refusal,
)

_WINDOW_GRACE = 3600  # a rate window's item outlives its window by this (TTL)
_BUDGET_GRACE = 40 * DAY


def _window_key(tenant: str, windows: Windows) -> dict[str, Any]:
    pk = f"RATE#{tenant}#{windows.window_seconds}#{windows.window}"
    return {"pk": _s(pk), "sk": _s("W")}


_LOG_POOL: ThreadPoolExecutor | None = None


def _log_pool() -> ThreadPoolExecutor:
    """The admin log's threads (at most 8 of its queries at once), made at its first use."""
    global _LOG_POOL
    if _LOG_POOL is None:
        _LOG_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="usage-log")
    return _LOG_POOL


def _shards(prefix: str) -> list[str]:
    """A sharded partition's keys, and the unsharded one rows written before the shards
    sit in (read until they expire; an empty partition costs one read unit)."""
    return [f"{prefix}#{n}" for n in range(SHARDS)] + [prefix]


def _budget_key(tenant: str, period: str) -> dict[str, Any]:
    return {"pk": _s(f"BUDGET#{tenant}#{period}"), "sk": _s("B")}


class DynamoDBUsage(_Table, UsageStore):
    """The ledger of one table (the response store's client is shared)."""

    async def record(self, entry: UsageEntry, windows: Windows | None) -> bool:
        return await asyncio.to_thread(self._record, entry, windows)

    async def record_once(self, entry: UsageEntry, windows: Windows | None) -> bool:
        """``record`` in one try, no retry (store/bookkeeping.py retries it off the response's
        path): a throttled partition costs the response no backoff."""
        return await asyncio.to_thread(self._record, entry, windows, True)

    def _record(self, entry: UsageEntry, windows: Windows | None, once: bool = False) -> bool:
        row = orjson.dumps(entry.log_row()).decode()
        # From the entry, not the clock: a retry (store/bookkeeping.py) sends the very same
        # transaction, which its ClientRequestToken requires (else IdempotentParameterMismatch)
        expires = _n(int(entry.finished_at) + self.retention_s)
        names: dict[str, str] = {"#tenant": "tenant", "#model": "model"}
        values: dict[str, Any] = {":tenant": _s(entry.tenant), ":model": _s(entry.model)}
        adds = []
        for i, name in enumerate(COUNTERS):
            names[f"#c{i}"], values[f":c{i}"] = name, _n(entry.counts.get(name, 0))
            adds.append(f"#c{i} :c{i}")
        for i, (kind, n) in enumerate(sorted(entry.tool_calls.items())):
            names[f"#t{i}"], values[f":t{i}"] = f"tool#{kind}", _n(n)
            adds.append(f"#t{i} :t{i}")
        bucket_sk = f"{entry.hour:010d}#{entry.tenant}#{entry.model}"
        shard = shard_of(entry.response_id)
        actions: list[dict[str, Any]] = [
            {"Put": {
                "TableName": self.table_name,
                "Item": {"pk": _s(f"USAGE#ID#{entry.response_id}"), "sk": _s("U"),
                         "row": _s(row), TTL_ATTRIBUTE: expires},
                "ConditionExpression": "attribute_not_exists(pk)",
            }},
            {"Put": {
                "TableName": self.table_name,
                "Item": {"pk": _s(f"LOG#{day_of(entry.created_at)}#{shard}"),
                         "sk": _s(f"{entry.created_at:010d}#{entry.response_id}"),
                         "row": _s(row), TTL_ATTRIBUTE: expires},
            }},
            {"Update": {
                "TableName": self.table_name,
                "Key": {"pk": _s(f"USAGE#{day_of(entry.hour)}#{shard}"),
                        "sk": _s(bucket_sk)},
                "UpdateExpression": "SET #tenant = :tenant, #model = :model ADD "
                                    + ", ".join(adds),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }},
        ]
        if windows is not None and entry.unreserved:
            tokens = {":n": _n(entry.unreserved)}
            if windows.window is not None:
                end = (windows.window + 1) * windows.window_seconds
                actions.append({"Update": {
                    "TableName": self.table_name,
                    "Key": _window_key(entry.tenant, windows),
                    "UpdateExpression": "ADD tokens :n SET #e = :e",
                    "ExpressionAttributeNames": {"#e": TTL_ATTRIBUTE},
                    "ExpressionAttributeValues": {**tokens, ":e": _n(end + _WINDOW_GRACE)},
                }})
            if windows.period_key is not None:
                end = windows.period_end or int(entry.finished_at)
                actions.append({"Update": {
                    "TableName": self.table_name,
                    "Key": _budget_key(entry.tenant, windows.period_key),
                    "UpdateExpression": "ADD tokens :n SET #e = :e",
                    "ExpressionAttributeNames": {"#e": TTL_ATTRIBUTE},
                    "ExpressionAttributeValues": {**tokens, ":e": _n(end + _BUDGET_GRACE)},
                }})
        # The same token for a call botocore retries: DynamoDB applies it once.
        token = hashlib.sha256(entry.response_id.encode()).hexdigest()[:36]
        try:
            self._call("transact_write_items", once=once, TransactItems=actions,
                       ClientRequestToken=token)
        except _ConditionFailed:
            return False
        return True

    async def admit(self, tenant: str, caps: Caps, windows: Windows) -> Counts:
        return await asyncio.to_thread(self._admit, tenant, caps, windows)

    def _admit(self, tenant: str, caps: Caps, windows: Windows) -> Counts:
        counts = Counts()
        if windows.period_key is not None:
            counts.budget_tokens = self._tokens(_budget_key(tenant, windows.period_key))
            if caps.budget and counts.budget_tokens >= caps.budget:
                counts.admitted, counts.refused_by = False, "budget"
                return counts
        if windows.window is None:
            return counts
        conditions = []
        values: dict[str, Any] = {
            ":one": _n(1), ":e": _n((windows.window + 1) * windows.window_seconds
                                    + _WINDOW_GRACE)}
        if caps.requests:
            conditions.append("(attribute_not_exists(requests) OR requests < :rq)")
            values[":rq"] = _n(caps.requests)
        if caps.tokens:
            conditions.append("(attribute_not_exists(tokens) OR tokens < :tk)")
            values[":tk"] = _n(caps.tokens)
        kwargs: dict[str, Any] = {}
        if conditions:
            kwargs["ConditionExpression"] = " AND ".join(conditions)
        try:
            item = self._call(
                "update_item", TableName=self.table_name, Key=_window_key(tenant, windows),
                UpdateExpression="ADD requests :one SET #e = :e",
                ExpressionAttributeNames={"#e": TTL_ATTRIBUTE},
                ExpressionAttributeValues=values, ReturnValues="ALL_NEW", **kwargs,
            )["Attributes"]
        except _ConditionFailed:
            seen = self._window(tenant, windows)
            seen.budget_tokens = counts.budget_tokens
            seen.admitted = False
            seen.refused_by = refusal(seen, caps) or "requests"
            return seen
        counts.requests = int(item.get("requests", {}).get("N", 0))
        counts.tokens = int(item.get("tokens", {}).get("N", 0))
        return counts

    async def reserve(self, tenant: str, caps: Caps, windows: Windows, tokens: int) -> Counts:
        return await asyncio.to_thread(self._reserve, tenant, caps, windows, tokens)

    def _reserve(self, tenant: str, caps: Caps, windows: Windows, tokens: int) -> Counts:
        """One conditional ``ADD`` per counter (the window's, the period's), in one
        transaction when both are kept: each holds only while the tokens fit under its cap
        (``tokens <= cap - n``: a condition cannot add), so concurrent calls never pass it."""
        updates = []
        if windows.window is not None:
            end = (windows.window + 1) * windows.window_seconds + _WINDOW_GRACE
            updates.append(_reserving(self.table_name, _window_key(tenant, windows), tokens,
                                      caps.tokens, end))
        if windows.period_key is not None:
            end = (windows.period_end or int(time.time())) + _BUDGET_GRACE
            updates.append(_reserving(self.table_name,
                                      _budget_key(tenant, windows.period_key), tokens,
                                      caps.budget, end))
        try:
            if len(updates) == 2:
                self._call("transact_write_items",
                           TransactItems=[{"Update": u} for u in updates])
            elif updates:  # one counter: its new value comes back with the update
                item = self._call("update_item", ReturnValues="ALL_NEW",
                                  **updates[0])["Attributes"]
                tokens_now = int(item.get("tokens", {}).get("N", 0))
                if windows.window is not None:
                    return Counts(requests=int(item.get("requests", {}).get("N", 0)),
                                  tokens=tokens_now)
                return Counts(budget_tokens=tokens_now)
        except _ConditionFailed:
            seen = self._read_counts(tenant, windows)
            seen.admitted = False
            seen.refused_by = over(seen, caps, tokens) or "tokens"
            return seen
        return self._read_counts(tenant, windows)

    def _read_counts(self, tenant: str, windows: Windows) -> Counts:
        counts = self._window(tenant, windows) if windows.window is not None else Counts()
        if windows.period_key is not None:
            counts.budget_tokens = self._tokens(_budget_key(tenant, windows.period_key))
        return counts

    def _tokens(self, key: dict[str, Any]) -> int:
        item = self._call("get_item", TableName=self.table_name, Key=key,
                          ConsistentRead=True).get("Item") or {}
        return int(item.get("tokens", {}).get("N", 0))

    def _window(self, tenant: str, windows: Windows) -> Counts:
        item = self._call("get_item", TableName=self.table_name,
                          Key=_window_key(tenant, windows), ConsistentRead=True).get("Item")
        item = item or {}
        return Counts(requests=int(item.get("requests", {}).get("N", 0)),
                      tokens=int(item.get("tokens", {}).get("N", 0)))

    async def counts(self, tenant: str, windows: Windows) -> Counts:
        return await asyncio.to_thread(self._read_counts, tenant, windows)

    async def buckets(self, start: int, end: int) -> list[UsageRow]:
        def read() -> list[UsageRow]:
            # A bucket is split over the day's shards: their items are summed here.
            summed: dict[tuple[int, str, str], UsageRow] = {}
            for day in _days(start, end):
                for pk in _shards(f"USAGE#{day}"):
                    for item in self._query(
                        KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                        ExpressionAttributeValues={":pk": _s(pk),
                                                   ":lo": _s(f"{start:010d}"),
                                                   ":hi": _s(f"{end - 1:010d}~")},
                    ):
                        hour = int(item["sk"]["S"].split("#", 1)[0])
                        if not start <= hour < end:
                            continue
                        key = (hour, item["tenant"]["S"], item["model"]["S"])
                        row = summed.get(key)
                        if row is None:
                            row = summed[key] = UsageRow(*key, dict.fromkeys(COUNTERS, 0))
                        for c in COUNTERS:
                            row.counts[c] += int(item.get(c, {}).get("N", 0))
                        for k, v in item.items():
                            if k.startswith("tool#"):
                                row.tool_calls[k[5:]] = row.tool_calls.get(k[5:], 0) + int(v["N"])
            return sorted(summed.values(), key=lambda r: (r.hour, r.tenant, r.model))

        return await asyncio.to_thread(read)

    async def log(self, start: int, end: int, limit: int,
                  before: tuple[int, str] | None = None) -> list[dict[str, Any]]:
        # Log rows expire with the responses (TTL): older days hold nothing, and each day
        # walked is a query per shard.
        start = max(start, int(time.time()) - self.retention_s - DAY)
        if before is not None and before[0] < start:
            return []  # the cursor is older than the range: nothing before it is in it

        high = f"{before[0]:010d}#{before[1]}" if before else f"{end - 1:010d}~"

        def newest(pk: str, want: int) -> list[tuple[str, str]]:
            """One shard's newest ``want`` rows before the cursor, (sort key, row)."""
            page = self._call(
                "query", TableName=self.table_name, ConsistentRead=True,
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={":pk": _s(pk), ":lo": _s(f"{start:010d}"),
                                           ":hi": _s(high)},
                ScanIndexForward=False, Limit=want + 1,
            )
            return [(item["sk"]["S"], item["row"]["S"])
                    for item in page.get("Items", []) if item["sk"]["S"] != high]

        rows: list[dict[str, Any]] = []
        for day in reversed(_days(start, end)):
            want = limit - len(rows)
            # Each shard's newest ``want`` rows before the cursor hold the day's newest
            # ``want``: merged by (created_at, id), the order the cursor pages by. A day's
            # shards are asked side by side (a month of quiet days was 527 queries in a row),
            # in threads of their own: the default pool is every store call's.
            loop, pool = asyncio.get_running_loop(), _log_pool()
            pages = await asyncio.gather(*(loop.run_in_executor(pool, newest, pk, want)
                                           for pk in _shards(f"LOG#{day}")))
            found = sorted((row for page in pages for row in page), reverse=True)
            rows += [orjson.loads(row) for _, row in found[:want]]
            if len(rows) >= limit:
                break
        return rows[:limit]

    async def log_row(self, response_id: str) -> dict[str, Any] | None:
        def read() -> dict[str, Any] | None:
            item = self._call(
                "get_item", TableName=self.table_name, ConsistentRead=True,
                Key={"pk": _s(f"USAGE#ID#{response_id}"), "sk": _s("U")},
            ).get("Item")
            return orjson.loads(item["row"]["S"]) if item else None

        return await asyncio.to_thread(read)

    async def conversations(self, limit: int, after: str | None = None,
                            tenant: str | None = None) -> list[dict[str, Any]]:
        """Newest first: a Query per shard of the conversations index
        (store/dynamodb_schema.py), each newest first from the cursor, merged; the cursor is
        ``after``'s (created, id), read from its record. One key's conversations are the same
        Queries filtered by tenant (the index is by time, not by key: such a page reads the
        index entries of every key until it is full)."""

        def read() -> list[dict[str, Any]]:
            below = None
            if after is not None:
                below = conversation_index_sort(after, self._created(after))
            streams = [self._index_shard(f"{CONVERSATIONS}#{n}", below, tenant, limit)
                       for n in range(SHARDS)]
            streams.append(self._legacy_index(below, tenant))
            merged = heapq.merge(*streams, key=lambda pair: pair[0], reverse=True)
            found = []
            for _, item in merged:
                found.append(_conversation(item))
                if len(found) >= limit:
                    break
            return found

        return await asyncio.to_thread(read)

    def _index_shard(self, pk: str, below: str | None, tenant: str | None, page: int
                     ) -> Iterator[tuple[str, dict[str, Any]]]:
        """One shard of the conversations index, newest first from ``below`` (exclusive),
        lazily, a page at a time: the merge reads a shard only as far as the list goes."""
        condition = "#p = :p"
        values: dict[str, Any] = {":p": _s(pk)}
        names = {"#p": CONVERSATION_INDEX_PK}
        if below is not None:
            condition += " AND #s < :below"
            values[":below"] = _s(below)
            names["#s"] = CONVERSATION_INDEX_SK
        kwargs: dict[str, Any] = {
            "TableName": self.table_name, "IndexName": CONVERSATION_INDEX,
            "KeyConditionExpression": condition, "ExpressionAttributeValues": values,
            "ExpressionAttributeNames": names, "ScanIndexForward": False,
            # a filtered page drops other keys' entries: read whole pages for it
            "Limit": 100 if tenant is not None else max(1, min(page, 100)),
        }
        if tenant is not None:
            kwargs["FilterExpression"] = "tenant = :t"
            values[":t"] = _s(tenant)
        while True:
            result = self._call("query", **kwargs)
            for item in result.get("Items", []):
                yield item[CONVERSATION_INDEX_SK]["S"], item
            if "LastEvaluatedKey" not in result:
                return
            kwargs["ExclusiveStartKey"] = result["LastEvaluatedKey"]

    def _legacy_index(self, below: str | None, tenant: str | None
                      ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Index entries written before the shards (``CONV``, by tenant and id), sorted here:
        empty once ``store init`` has moved them (table.py backfill_conversation_index)."""
        entries = []
        for _, item in self._index_shard(CONVERSATIONS, None, tenant, 100):
            sort = conversation_index_sort(item["pk"]["S"], int(item["created"]["N"]))
            if below is None or sort < below:
                entries.append((sort, item))
        entries.sort(key=lambda pair: pair[0], reverse=True)
        yield from entries

    def _created(self, conversation_id: str) -> int:
        """When a conversation was created: where it sits in the index (LookupError if none)."""
        item = self._call("get_item", TableName=self.table_name,
                          Key={"pk": _s(conversation_id), "sk": _s(CONVERSATION)},
                          ProjectionExpression="created").get("Item")
        if item is None:
            raise LookupError(conversation_id)
        return int(item["created"]["N"])

    async def conversation(self, conversation_id: str) -> dict[str, Any] | None:
        def read() -> dict[str, Any] | None:
            item = self._call("get_item", TableName=self.table_name, ConsistentRead=True,
                              Key={"pk": _s(conversation_id), "sk": _s(CONVERSATION)}
                              ).get("Item")
            return None if item is None else _conversation(item)

        return await asyncio.to_thread(read)

    async def aclose(self) -> None:
        """The client is the response store's: it closes it."""


def _reserving(table: str, key: dict[str, Any], tokens: int, cap: int, expires: int
               ) -> dict[str, Any]:
    """An ``UpdateItem``'s arguments adding ``tokens`` to a counter while under ``cap``."""
    update: dict[str, Any] = {
        "TableName": table, "Key": key, "UpdateExpression": "ADD tokens :n SET #e = :e",
        "ExpressionAttributeNames": {"#e": TTL_ATTRIBUTE},
        "ExpressionAttributeValues": {":n": _n(tokens), ":e": _n(expires)},
    }
    if cap:
        update["ConditionExpression"] = "attribute_not_exists(tokens) OR tokens <= :room"
        update["ExpressionAttributeValues"][":room"] = _n(cap - tokens)
    return update


def _conversation(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["pk"]["S"], "api_key_id": item["tenant"]["S"],
            "created_at": int(item["created"]["N"]), "metadata": orjson.loads(item["meta"]["S"])}


def _days(start: int, end: int) -> list[str]:
    """The UTC days ``[start, end)`` touches, oldest first."""
    days = []
    day = start - start % DAY
    while day < end:
        days.append(day_of(day))
        day += DAY
    return days

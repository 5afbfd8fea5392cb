"""A background response's event log on DynamoDB: batches ``EV#<last seq>`` written in one
TransactWriteItems with a check that the response is not cancelled, or with the record's update
(the worker's flush; its terminal one also settles the conversation turn)."""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any

import orjson

from responses_gateway.store.base import CancelledError, StoreUnavailable, TurnSettle
from responses_gateway.store.dynamodb.codec import (
    _HOLD_SECONDS,
    PART_BYTES,
    TXN_MAX_ACTIONS,
    TXN_MAX_BYTES,
    _ConditionFailed,
    _event_sk,
    _expired,
    _fits,
    _n,
    _pack,
    _raw,
    _s,
    _split,
    _unpack,
)
from responses_gateway.store.dynamodb.turns import _Turns
from responses_gateway.store.dynamodb_schema import TTL_ATTRIBUTE


class _Events(_Turns):
    """Append and read event batches."""

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
        turn's lock renewed just before, as a foreground settle's do. A terminal Response's
        output-item pointers join it too, or go just before it when they do not fit."""
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
        # A terminal Response's output-item pointers land with it (or just before it, where
        # no reader sees them until it does): whoever sees it ended can resolve its outputs.
        pointers = [] if response is None else self._terminal_pointers(response_id, response)
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
            puts = items + rows + self._early_pointers(
                pointers, len(heads) + len(items) + len(rows),
                self._payload(items) + (rows_size if rows else 0),
            )
            self._call("transact_write_items", TransactItems=[
                *heads, *({"Put": {"TableName": self.table_name, "Item": i}} for i in puts)
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

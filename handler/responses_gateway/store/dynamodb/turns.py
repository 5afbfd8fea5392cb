"""The turn lock and appends on DynamoDB: an append writes rows at ``n, n+1, …`` and moves
``n`` in one TransactWriteItems conditional on the lock, so readers (who stop at ``n``) never see
half an append; a turn's settle carries its response record in that same transaction. See
docs/store.md, "The turn lock" and "A turn: one read, two writes"."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from responses_gateway.store.base import (
    ConversationLocked,
    DuplicateItem,
    StoredConversation,
    StoredResponse,
    StoreUnavailable,
    TurnSettle,
)
from responses_gateway.store.dynamodb.codec import (
    _APPEND_ATTEMPTS,
    _HOLD_SECONDS,
    _ConditionFailed,
    _conv_item_sk,
    _conv_pointer_sk,
    _fits,
    _n,
    _s,
    _size,
    _unique,
)
from responses_gateway.store.dynamodb.conversations import _Conversations

# An append adds its items and bytes to the conversation's counts (``ni``, ``nb``) in the same
# Update that moves ``n``; a record written before the counts existed starts them at zero.
COUNTED = "ni = if_not_exists(ni, :z) + :ni, nb = if_not_exists(nb, :z) + :nb"


def _counted(items: list[dict[str, Any]], raw: int) -> dict[str, Any]:
    return {":z": _n(0), ":ni": _n(len(items)), ":nb": _n(raw)}


class _Turns(_Conversations):
    """Lock, append (a turn's settle or an item write), release, renew."""

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
            rows, size, raw = self._rows(conversation_id, items, start)
            if conv is not None and token is None:  # an item write: within the bounds
                self.limits.check_room(conv, items, param, raw)  # (a turn's: when it began)
            values: dict[str, Any] = {":t": _s(tenant), ":n": _n(start),
                                      ":new": _n(start + len(items)), **_counted(items, raw)}
            if token is not None:
                held = "lk = :k"
                values[":k"] = _s(token)
            else:
                held = "(attribute_not_exists(lku) OR lku < :now)"
                values[":now"] = _n(time.time())
            commit = {
                "TableName": self.table_name,
                "Key": self._conv_key(conversation_id),
                "UpdateExpression": f"SET n = :new, {COUNTED} REMOVE lk, lku",
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
            if conv is None:  # a turn's append read nothing: its counts are unknown here
                return StoredConversation(conversation_id, tenant, 0, length=start + len(items))
            conv.length = start + len(items)
            conv.item_count += len(items)
            conv.byte_count += raw
            conv.locked = False
            return conv
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
        rows, size, raw = self._rows(turn.conversation_id, turn.items, turn.length)
        values.update({":t": _s(turn.tenant), ":n": _n(turn.length),
                       ":new": _n(turn.length + len(turn.items)), **_counted(turn.items, raw)})
        commit["UpdateExpression"] = f"SET n = :new, {COUNTED} REMOVE lk, lku"
        commit["ConditionExpression"] = "tenant = :t AND n = :n AND lk = :k"
        return commit, _unique(rows), size

    # -- the ConversationStore calls ----------------------------------------------------------

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

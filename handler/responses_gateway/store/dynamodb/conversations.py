"""Conversations on DynamoDB: partition ``pk = <conversation id>`` holds the record ``C``
(tenant, created, meta, ``n`` = committed length, the turn lock), the items ``C#I#<pos>`` (and
``C#J`` parts of long ones) and pointers ``C#P#<item id>``. Reads, metadata and deletes here;
the turn lock and appends in turns.py. Nothing expires: conversations live until deleted, as
OpenAI's do. Layout in docs/store.md."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from responses_gateway.store.base import (
    ConversationStore,
    StoredConversation,
    StoreUnavailable,
)
from responses_gateway.store.dynamodb.codec import (
    CONVERSATION,
    _ConditionFailed,
    _conv_item_of,
    _conv_item_rows,
    _conv_item_sk,
    _conv_part_keys,
    _conv_pointer_sk,
    _n,
    _s,
)
from responses_gateway.store.dynamodb.responses import _Responses
from responses_gateway.store.dynamodb_schema import conversation_index_keys

log = logging.getLogger(__name__)


class _Conversations(_Responses, ConversationStore):
    """A conversation's record and items: create, read, list, delete."""

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
            item_count=int(item["ni"]["N"]) if "ni" in item else 0,
            byte_count=int(item["nb"]["N"]) if "nb" in item else 0,
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
    ) -> tuple[list[dict[str, Any]], int, int]:
        """Item rows (with their parts) and pointer rows for ``items`` at ``start``…, their
        packed size, and the items' JSON size (what the conversation's bound counts)."""
        rows: list[dict[str, Any]] = []
        size = raw = 0
        for offset, item in enumerate(items):
            pos = start + offset
            item_rows, packed, item_raw = _conv_item_rows(conversation_id, pos, item)
            size += packed + 200 * len(item_rows)
            raw += item_raw
            rows += item_rows
            rows.append({
                "pk": _s(conversation_id), "sk": _s(_conv_pointer_sk(item["id"])), "pos": _n(pos)
            })
        return rows, size, raw

    def _create_conversation(
        self, conv: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        rows, _, raw = self._rows(conv.id, items, 0)
        self.limits.check_room(conv, items, "items", raw)
        self._batch_put(rows)  # invisible until the record exists
        self._call(
            "put_item",
            TableName=self.table_name,
            Item={
                **self._conv_key(conv.id),
                **conversation_index_keys(conv.id, conv.created_at),  # the admin list's index
                "tenant": _s(conv.tenant),
                "created": _n(conv.created_at),
                "meta": _s(orjson.dumps(conv.metadata).decode()),
                "n": _n(len(items)),
                "ni": _n(len(items)),
                "nb": _n(raw),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        conv.length = conv.item_count = len(items)
        conv.byte_count = raw

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
        rows = self._query(
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
        row_key = {"pk": _s(conversation_id), "sk": _s(_conv_item_sk(pos))}
        pointer_key = {"pk": _s(conversation_id), "sk": _s(_conv_pointer_sk(item_id))}
        if "sz" not in row:  # stored before conversations counted their items: not counted
            keys = [row_key, pointer_key, *_conv_part_keys(row)]
            self._batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
            return conv, True
        # The row and its share of the counts go together: a second delete of the same item
        # finds no row and gives nothing back twice.
        size = int(row["sz"]["N"])
        try:
            self._call("transact_write_items", TransactItems=[
                {"Delete": {"TableName": self.table_name, "Key": row_key,
                            "ConditionExpression": "iid = :i",
                            "ExpressionAttributeValues": {":i": _s(item_id)}}},
                {"Delete": {"TableName": self.table_name, "Key": pointer_key}},
                {"Update": {"TableName": self.table_name, "Key": self._conv_key(conversation_id),
                            "UpdateExpression": "SET ni = ni - :one, nb = nb - :sz",
                            "ConditionExpression": "attribute_exists(ni)",
                            "ExpressionAttributeValues": {":one": _n(1), ":sz": _n(size)}}},
            ])
        except _ConditionFailed:  # deleted meanwhile (the item, or the conversation)
            return conv, False
        if "np" in row:
            self._batch_write([{"DeleteRequest": {"Key": k}} for k in _conv_part_keys(row)])
        conv.item_count -= 1
        conv.byte_count -= size
        return conv, True

    # -- the ConversationStore calls ----------------------------------------------------------

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

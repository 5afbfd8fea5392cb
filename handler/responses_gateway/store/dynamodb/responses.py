"""Stored responses on DynamoDB: partition ``pk = <response id>`` holds the record ``R``, its
input items and the parts of a large request or Response; ``ITEM#<tenant>#<item id>`` points at
the responses holding an item (``item_reference``). Layout in docs/store.md."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from responses_gateway.errors import GatewayError
from responses_gateway.status import TERMINAL_STATUSES
from responses_gateway.store.base import ResponseStore, StoredResponse, StoreUnavailable
from responses_gateway.store.dynamodb.codec import (
    _TORN_READ_ATTEMPTS,
    INLINE_REQUEST_BYTES,
    INLINE_RESPONSE_BYTES,
    INPUT_ITEM_LIMIT,
    PART_BYTES,
    RECORD,
    RUNNING_STATUSES,
    _blob,
    _ConditionFailed,
    _expired,
    _fits,
    _in_sk,
    _n,
    _names,
    _pack,
    _pointer_pk,
    _read_blob,
    _s,
    _size,
    _TornRead,
    _unpack,
)
from responses_gateway.store.dynamodb.table import _Table
from responses_gateway.store.dynamodb.tool_reads import read_keys
from responses_gateway.store.dynamodb_schema import TTL_ATTRIBUTE

log = logging.getLogger(__name__)


class _Responses(_Table, ResponseStore):
    """The Store half: put, get, delete, item lookup, status transitions, leases."""

    def check_input_items(self, items: list[dict[str, Any]]) -> None:
        super().check_input_items(items)  # the bound of one stored response
        self._pack_inputs(items)  # and what one item can hold

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
        rsp_attrs, rsp_parts = _blob(r.id, "rsp", "RS", r.response, INLINE_RESPONSE_BYTES, ttl,
                                     self.limits)
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
            record = self._get_record(
                response_id, "rsp", "rsp_n", "rsp_v", TTL_ATTRIBUTE, "status"
            )
            if (record is None or _expired(record, time.time())
                    or record["status"]["S"] not in TERMINAL_STATUSES):
                return None  # an output item is found once its response has ended
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
            partition = self._partition_keys(response_id)
            keys += partition + read_keys(tenant, partition)  # its tool reads (tool_reads.py)
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
        pointers = self._early_pointers(
            self._terminal_pointers(response_id, response), 1 + len(parts),
            len(parts) * PART_BYTES,
        )
        try:
            if not parts and not pointers:
                self._call("update_item", **update)
            elif _fits(len(parts) + len(pointers) + 1, len(parts) * PART_BYTES):
                puts = [{"Put": {"TableName": self.table_name, "Item": p}}
                        for p in parts + pointers]
                self._call("transact_write_items", TransactItems=[{"Update": update}, *puts])
            else:
                raise StoreUnavailable(
                    f"Response {response_id} is too large to store even compressed"
                )
        except _ConditionFailed:
            return False
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
            response_id, "rsp", "RS", response, INLINE_RESPONSE_BYTES, self._ttl(), self.limits
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

    def _terminal_pointers(
        self, response_id: str, response: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The output-item pointers (``item_reference``) a write making ``response`` terminal
        carries, so a reader who sees it terminal can resolve its output items."""
        if response.get("status") not in TERMINAL_STATUSES or not response.get("output"):
            return []
        record = self._get_record(response_id, "tenant", TTL_ATTRIBUTE)
        if record is None:
            return []
        return self._output_pointers(
            record["tenant"]["S"], response_id, response, record[TTL_ATTRIBUTE]
        )

    def _early_pointers(
        self, pointers: list[dict[str, Any]], actions: int, size: int
    ) -> list[dict[str, Any]]:
        """The pointers that join a transaction of ``actions`` actions and ``size`` bytes;
        when they do not fit they are written now, before it: invisible until the record it
        makes terminal lands (``_load_response`` resolves only a terminal response's)."""
        if pointers and not _fits(actions + len(pointers), size + sum(map(_size, pointers))):
            self._batch_put(pointers)
            return []
        return pointers

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

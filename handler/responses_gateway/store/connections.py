"""A WebSocket connection's state on API Gateway, in the gateway's DynamoDB table.

API Gateway holds the socket and invokes the WebSocket function once per message, so what a
connection remembers between messages lives here, in partition ``WS#<connection id>`` (TTL
two hours, API Gateway's own connection limit):

- ``C``: the tenant and the lanes running (``lanes``: lane key -> lease end, epoch seconds);
- ``L#<lane key>``: the lane's most recent ``store: false`` response that ended well (zlib
  JSON), what a continuation from it needs (``api/ws_session.py`` keeps the same per lane);
- ``R#<response id>``: a response of the connection for steering (``api/ws_steer.py``): its
  ``state`` (``running`` or the status it ended in), whether it can be steered, the steers
  queued for it (``steers``: JSON each; another invocation appends them, the running one
  polls), and the steers waiting for the client's tool output (``pending``).

Lane keys: ``-`` is the lane of responses without ``stream_id``, ``s:<stream id>`` a named one.
"""

from __future__ import annotations

import logging
import random
import time
import zlib
from typing import Any

import orjson

from responses_gateway.store.base import StoredResponse, StoreUnavailable

logger = logging.getLogger("responses_gateway")
CONNECTION_TTL_SECONDS = 2 * 3600  # API Gateway closes a WebSocket after two hours
LANE_LEASE_SECONDS = 900  # a lane claimed by an invocation that died frees itself after this
#: a remembered response larger than this (compressed) is not kept: DynamoDB's item limit
#: is 400 KB, key and attributes included
MAX_RECORD_BYTES = 390 * 1024
_BATCH_ATTEMPTS = 10


RUNNING = "running"


def lane_key(lane: str | None) -> str:
    return "-" if lane is None else f"s:{lane}"


def _lane_of(key: str) -> str | None:
    return None if key == "-" else key[2:]


class Connections:
    """The connection table's items, through one boto3 DynamoDB ``client``."""

    def __init__(self, table: str, client: Any) -> None:
        self.table = table
        self.db = client

    @staticmethod
    def key(connection_id: str, sort: str) -> dict[str, Any]:
        return {"pk": {"S": f"WS#{connection_id}"}, "sk": {"S": sort}}

    def open(self, connection_id: str, tenant: str) -> None:
        self.db.put_item(TableName=self.table, Item={
            **self.key(connection_id, "C"),
            "tenant": {"S": tenant},
            "lanes": {"M": {}},
            "expires_at": {"N": str(int(time.time()) + CONNECTION_TTL_SECONDS)},
        })

    def load(self, connection_id: str) -> dict[str, Any] | None:
        """The connection's tenant and remembered responses (by lane); None if not open."""
        items = self._partition(connection_id)
        head = next((i for i in items if i["sk"]["S"] == "C"), None)
        if head is None:
            return None
        remembered: dict[str | None, StoredResponse] = {}
        for item in items:
            sort = item["sk"]["S"]
            if sort.startswith("L#") and "record" in item:
                data = orjson.loads(zlib.decompress(item["record"]["B"]))
                remembered[_lane_of(sort[2:])] = StoredResponse(**data)
        return {
            "connection_id": connection_id,
            "tenant": head["tenant"]["S"],
            "remembered": remembered,
        }

    def claim(self, connection_id: str, lane: str | None) -> bool:
        """Run one response in ``lane``, unless one runs there (one whose invocation died
        frees the lane when its lease ends)."""
        now = int(time.time())
        try:
            self.db.update_item(
                TableName=self.table, Key=self.key(connection_id, "C"),
                UpdateExpression="SET lanes.#lane = :until",
                ConditionExpression="attribute_exists(pk) AND (attribute_not_exists(lanes.#lane)"
                                    " OR lanes.#lane < :now)",
                ExpressionAttributeNames={"#lane": lane_key(lane)},
                ExpressionAttributeValues={":until": {"N": str(now + LANE_LEASE_SECONDS)},
                                           ":now": {"N": str(now)}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def free(self, connection_id: str, lane: str | None) -> None:
        self.db.update_item(
            TableName=self.table, Key=self.key(connection_id, "C"),
            UpdateExpression="REMOVE lanes.#lane",
            ExpressionAttributeNames={"#lane": lane_key(lane)},
        )

    def remember(self, connection_id: str, lane: str | None, record: StoredResponse) -> None:
        """``record`` is now ``lane``'s most recent response (the one before is forgotten).

        One too large for an item is not kept: a continuation from it is not found, as for
        any response the connection does not hold.
        """
        data = zlib.compress(orjson.dumps({
            "id": record.id, "tenant": record.tenant, "response": record.response,
            "request": record.request, "input_items": record.input_items,
            "previous_response_id": record.previous_response_id,
        }))
        if len(data) > MAX_RECORD_BYTES:
            logger.warning("response %s is too large to remember on connection %s (%d bytes)",
                           record.id, connection_id, len(data))
            self.forget(connection_id, lane)
            return
        self.db.put_item(TableName=self.table, Item={
            **self.key(connection_id, f"L#{lane_key(lane)}"), "record": {"B": data},
            "expires_at": {"N": str(int(time.time()) + CONNECTION_TTL_SECONDS)},
        })

    def forget(self, connection_id: str, lane: str | None) -> None:
        self.db.delete_item(TableName=self.table,
                            Key=self.key(connection_id, f"L#{lane_key(lane)}"))

    # -- steering: a response running in one invocation, steered from another --

    def start_response(self, connection_id: str, response_id: str, steerable: bool) -> None:
        self.db.put_item(TableName=self.table, Item={
            **self.key(connection_id, f"R#{response_id}"),
            "state": {"S": RUNNING}, "steerable": {"BOOL": steerable}, "steers": {"L": []},
            "expires_at": {"N": str(int(time.time()) + CONNECTION_TTL_SECONDS)},
        })

    def add_steer(self, connection_id: str, response_id: str, steer: dict[str, Any],
                  most: int) -> str | None:
        """Queue ``steer`` for a running response: None, or why not (``missing``,
        ``not_steerable``, ``full``, or the status the response ended in)."""
        condition = "#state = :running AND steerable = :yes"
        values: dict[str, Any] = {":running": {"S": RUNNING}, ":yes": {"BOOL": True},
                                  ":one": {"L": [{"S": orjson.dumps(steer).decode()}]}}
        if most:
            condition += " AND size(steers) < :most"
            values[":most"] = {"N": str(most)}
        try:
            self.db.update_item(
                TableName=self.table, Key=self.key(connection_id, f"R#{response_id}"),
                UpdateExpression="SET steers = list_append(steers, :one)",
                ConditionExpression=condition, ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values)
        except self.db.exceptions.ConditionalCheckFailedException:
            item = self.db.get_item(TableName=self.table, ConsistentRead=True,
                                    Key=self.key(connection_id, f"R#{response_id}")).get("Item")
            if item is None:
                return "missing"
            if item["state"]["S"] != RUNNING:
                return item["state"]["S"]
            return "full" if item["steerable"]["BOOL"] else "not_steerable"
        except self.db.exceptions.ClientError as exc:  # the item would pass DynamoDB's 400 KB
            if exc.response.get("Error", {}).get("Code") != "ValidationException":
                raise
            return "full"
        return None

    def steers(self, connection_id: str, response_id: str) -> list[dict[str, Any]]:
        """The steers queued for a running response (its invocation polls this)."""
        item = self.db.get_item(TableName=self.table, ConsistentRead=True,
                                Key=self.key(connection_id, f"R#{response_id}"),
                                ProjectionExpression="steers").get("Item") or {}
        return [orjson.loads(entry["S"]) for entry in item.get("steers", {}).get("L", [])]

    def end_response(self, connection_id: str, response_id: str,
                     status: str) -> list[dict[str, Any]]:
        """The response ended ``status``: no steer is queued after this; every steer that
        was (in one write, so none is lost between the last poll and the end)."""
        old = self.db.update_item(
            TableName=self.table, Key=self.key(connection_id, f"R#{response_id}"),
            UpdateExpression="SET #state = :status REMOVE steers",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":status": {"S": status}},
            ReturnValues="ALL_OLD").get("Attributes") or {}
        return [orjson.loads(entry["S"]) for entry in old.get("steers", {}).get("L", [])]

    def keep_pending(self, connection_id: str, response_id: str,
                     steers: list[dict[str, Any]]) -> None:
        """``steers`` wait for the client's create from ``response_id``."""
        self.db.update_item(
            TableName=self.table, Key=self.key(connection_id, f"R#{response_id}"),
            UpdateExpression="SET pending = :steers",
            ExpressionAttributeValues={":steers": {"S": orjson.dumps(steers).decode()}})

    def take_pending(self, connection_id: str, response_id: str) -> list[dict[str, Any]]:
        """The steers waiting for a create from ``response_id``, taken (one write: two
        creates cannot both commit them)."""
        try:
            old = self.db.update_item(
                TableName=self.table, Key=self.key(connection_id, f"R#{response_id}"),
                UpdateExpression="REMOVE pending", ConditionExpression="attribute_exists(pending)",
                ReturnValues="UPDATED_OLD").get("Attributes") or {}
        except self.db.exceptions.ConditionalCheckFailedException:
            return []
        return orjson.loads(old["pending"]["S"]) if "pending" in old else []

    def close(self, connection_id: str) -> None:
        """Delete every item of the connection."""
        keys = [{"pk": i["pk"], "sk": i["sk"]}
                for i in self._partition(connection_id, projection="pk, sk")]
        for start in range(0, len(keys), 25):
            self._batch_write([{"DeleteRequest": {"Key": key}} for key in keys[start:start + 25]])

    def _partition(self, connection_id: str, projection: str | None = None
                   ) -> list[dict[str, Any]]:
        query: dict[str, Any] = {
            "TableName": self.table, "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": f"WS#{connection_id}"}},
            "ConsistentRead": True,
        }
        if projection:
            query["ProjectionExpression"] = projection
        items: list[dict[str, Any]] = []
        for page in self.db.get_paginator("query").paginate(**query):
            items.extend(page["Items"])
        return items

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """One BatchWriteItem (at most 25 requests), resubmitting what DynamoDB left
        unprocessed with jittered backoff, as the store's batch loops do; bounded."""
        pending = {self.table: requests}
        for attempt in range(_BATCH_ATTEMPTS):
            result = self.db.batch_write_item(RequestItems=pending)
            pending = result.get("UnprocessedItems") or {}
            if not pending:
                return
            time.sleep(random.uniform(0, 0.05 * 2**attempt))
        raise StoreUnavailable("DynamoDB batch_write_item left items unprocessed")

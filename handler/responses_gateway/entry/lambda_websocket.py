"""WebSocket mode on AWS: an API Gateway WebSocket API in front of this Lambda.

Function URLs cannot carry WebSockets, so API Gateway holds the socket and invokes this handler
once per route: ``$connect`` (the handshake: the gateway's key check, 401 refuses it),
``$default`` (one client message: the same :class:`~responses_gateway.api.ws_session.Session`
as under uvicorn runs it to its end) and ``$disconnect``. Events go back through the
management API (``PostToConnection``), one message per event, in order, from one thread that
posts while the response is still being produced.

The connection's state lives in the gateway's DynamoDB table, partition ``WS#<connection id>``
(TTL two hours, API Gateway's own limit): item ``C`` holds the tenant, the lanes running and
the evicted ids; items ``R#<response id>`` the ``store: false`` responses a continuation may
name. Lanes do not queue here (each message is its own invocation): a second
``response.create`` on a busy lane is an ``error``.

    Handler: responses_gateway.entry.lambda_websocket.handler
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import queue
import threading
import time
import zlib
from typing import Any

import orjson

from responses_gateway.api.auth import Authenticator
from responses_gateway.api.ws_session import Event, Session
from responses_gateway.config import Settings
from responses_gateway.errors import GatewayError
from responses_gateway.responses.gateway import Gateway
from responses_gateway.store.base import StoredResponse

logger = logging.getLogger("responses_gateway")
CONNECTION_TTL_SECONDS = 2 * 3600  # API Gateway closes a WebSocket after two hours
LANE_LEASE_SECONDS = 900  # a lane claimed by an invocation that died frees itself after this
DEFAULT_LANE = "-"
_loop = asyncio.new_event_loop()
_gateway: Gateway | None = None
_clients: dict[str, Any] = {}


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _loop.run_until_complete(_handle(event))


async def _handle(event: dict[str, Any]) -> dict[str, Any]:
    ctx = event["requestContext"]
    route, connection_id = ctx["routeKey"], ctx["connectionId"]
    gateway = _get_gateway()
    table = Connections(_table_name(gateway.settings))
    if route == "$connect":
        headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
        try:
            tenant = Authenticator(gateway.settings.api_keys).tenant(headers.get("authorization"))
        except GatewayError as exc:
            return {"statusCode": exc.status, "body": orjson.dumps(exc.body()).decode()}
        await asyncio.to_thread(table.open, connection_id, tenant)
        return {"statusCode": 200}
    if route == "$disconnect":
        await asyncio.to_thread(table.close, connection_id)
        return {"statusCode": 200}
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        body = base64.b64decode(body)
    state = await asyncio.to_thread(table.load, connection_id)
    if state is None:  # $connect never ran or the state expired: nothing to answer to
        return {"statusCode": 410}
    poster = Poster(_management_client(ctx), connection_id)
    session = ApiGatewaySession(gateway, state, table, poster.emit)
    try:
        await session.receive(body)
    except ConnectionGone:
        pass  # the response ended ``cancelled``; nobody is left to tell
    finally:
        await asyncio.to_thread(poster.close)
    return {"statusCode": 200}


def _get_gateway() -> Gateway:
    global _gateway
    if _gateway is None:
        from responses_gateway.responses.services import build_gateway

        _gateway = build_gateway(Settings.from_env())
    return _gateway


def _table_name(settings: Settings) -> str:
    kind, _, table = settings.store.partition(":")
    if kind != "dynamodb" or not table:
        raise RuntimeError("the WebSocket function needs GATEWAY_STORE=dynamodb:TABLE")
    return table


def _client(service: str, endpoint_url: str | None = None) -> Any:
    key = f"{service}@{endpoint_url}"
    if key not in _clients:
        import boto3
        from botocore.config import Config

        _clients[key] = boto3.session.Session().client(
            service, endpoint_url=endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 4}),
        )
    return _clients[key]


def _management_client(ctx: dict[str, Any]) -> Any:
    """The management API of this connection's stage (``GATEWAY_WS_MANAGEMENT_URL`` wins:
    custom domains, tests)."""
    url = os.environ.get("GATEWAY_WS_MANAGEMENT_URL") or (
        f"https://{ctx['domainName']}/{ctx['stage']}"
    )
    return _client("apigatewaymanagementapi", url)


class ConnectionGone(Exception):
    """The client went away: API Gateway answered 410 to a post."""


class Poster:
    """Posts events to one connection in order from one thread, while the response goes on.

    ``emit`` only queues; a post that finds the connection gone makes the next ``emit`` raise
    :class:`ConnectionGone`, which ends the response ``cancelled`` as a disconnect does.
    """

    def __init__(self, client: Any, connection_id: str) -> None:
        self._client = client
        self._connection_id = connection_id
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.gone = False
        self._thread = threading.Thread(target=self._post_all, daemon=True)
        self._thread.start()

    async def emit(self, events: list[Event]) -> None:
        if self.gone:
            raise ConnectionGone(self._connection_id)
        for event in events:
            self._queue.put(orjson.dumps(event))

    def close(self) -> None:
        """Wait until every queued event is posted (or the connection is gone)."""
        self._queue.put(None)
        self._thread.join()

    def _post_all(self) -> None:
        while (data := self._queue.get()) is not None:
            if self.gone:
                continue
            try:
                self._client.post_to_connection(ConnectionId=self._connection_id, Data=data)
            except self._client.exceptions.GoneException:
                self.gone = True
            except Exception:
                logger.exception("posting to WebSocket connection %s failed",
                                 self._connection_id)
                self.gone = True


class Connections:
    """A connection's state in the gateway's table (partition ``WS#<connection id>``)."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.db = _client("dynamodb", os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"))

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
        items = []
        pages = self.db.get_paginator("query").paginate(
            TableName=self.table, KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"WS#{connection_id}"}},
            ConsistentRead=True,
        )
        for page in pages:
            items.extend(page["Items"])
        head = next((i for i in items if i["sk"]["S"] == "C"), None)
        if head is None:
            return None
        records = {}
        for item in items:
            if item["sk"]["S"].startswith("R#"):
                record = StoredResponse(**orjson.loads(zlib.decompress(item["record"]["B"])))
                records[record.id] = record
        return {
            "connection_id": connection_id,
            "tenant": head["tenant"]["S"],
            "evicted": set(head.get("evicted", {}).get("SS", ())),
            "records": records,
        }

    def claim(self, connection_id: str, lane: str) -> bool:
        """Run one response in ``lane``, unless one runs there (one whose invocation died
        frees the lane when its lease ends)."""
        now = int(time.time())
        try:
            self.db.update_item(
                TableName=self.table, Key=self.key(connection_id, "C"),
                UpdateExpression="SET lanes.#lane = :until",
                ConditionExpression="attribute_exists(pk) AND (attribute_not_exists(lanes.#lane)"
                                    " OR lanes.#lane < :now)",
                ExpressionAttributeNames={"#lane": lane},
                ExpressionAttributeValues={":until": {"N": str(now + LANE_LEASE_SECONDS)},
                                           ":now": {"N": str(now)}},
            )
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def free(self, connection_id: str, lane: str) -> None:
        self.db.update_item(
            TableName=self.table, Key=self.key(connection_id, "C"),
            UpdateExpression="REMOVE lanes.#lane", ExpressionAttributeNames={"#lane": lane},
        )

    def remember(self, connection_id: str, record: StoredResponse, evicted: set[str]) -> None:
        data = zlib.compress(orjson.dumps({
            "id": record.id, "tenant": record.tenant, "response": record.response,
            "request": record.request, "input_items": record.input_items,
            "previous_response_id": record.previous_response_id,
        }))
        expires = {"N": str(int(time.time()) + CONNECTION_TTL_SECONDS)}
        self.db.put_item(TableName=self.table, Item={
            **self.key(connection_id, f"R#{record.id}"), "record": {"B": data},
            "expires_at": expires,
        })
        self._set_evicted(connection_id, evicted)

    def _set_evicted(self, connection_id: str, evicted: set[str]) -> None:
        if evicted:
            update, values = "SET evicted = :e", {":e": {"SS": sorted(evicted)}}
            self.db.update_item(TableName=self.table, Key=self.key(connection_id, "C"),
                                UpdateExpression=update, ExpressionAttributeValues=values)
        else:
            self.db.update_item(TableName=self.table, Key=self.key(connection_id, "C"),
                                UpdateExpression="REMOVE evicted")

    def evict(self, connection_id: str, evicted: set[str]) -> None:
        self._set_evicted(connection_id, evicted)

    def close(self, connection_id: str) -> None:
        keys = []
        pages = self.db.get_paginator("query").paginate(
            TableName=self.table, KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"WS#{connection_id}"}},
            ProjectionExpression="pk, sk",
        )
        for page in pages:
            keys.extend(page["Items"])
        for start in range(0, len(keys), 25):
            self.db.batch_write_item(RequestItems={self.table: [
                {"DeleteRequest": {"Key": key}} for key in keys[start:start + 25]
            ]})


class ApiGatewaySession(Session):
    """A Session whose lanes and remembered responses live in the table, not in memory."""

    def __init__(self, gateway: Gateway, state: dict[str, Any], table: Connections,
                 emit: Any) -> None:
        super().__init__(gateway, state["tenant"], emit, records=state["records"],
                         evicted=state["evicted"])
        self.connection_id = state["connection_id"]
        self.table = table

    async def acquire(self, lane: str | None) -> bool:
        return await asyncio.to_thread(self.table.claim, self.connection_id,
                                       lane or DEFAULT_LANE)

    async def release(self, lane: str | None) -> None:
        await asyncio.to_thread(self.table.free, self.connection_id, lane or DEFAULT_LANE)

    async def remember(self, record: StoredResponse) -> None:
        await super().remember(record)
        if record.response.get("store") is False:  # a stored one is in the store already
            await asyncio.to_thread(self.table.remember, self.connection_id, record,
                                    set(self.evicted))
        elif record.id in self.evicted:
            await asyncio.to_thread(self.table.evict, self.connection_id, set(self.evicted))

    async def evict(self, response_id: str) -> None:
        await super().evict(response_id)
        await asyncio.to_thread(self.table.evict, self.connection_id, set(self.evicted))

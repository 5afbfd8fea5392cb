"""WebSocket mode on AWS: an API Gateway WebSocket API in front of this Lambda.

Function URLs cannot carry WebSockets, so API Gateway holds the socket and invokes this handler
once per route: ``$connect`` (the handshake: the gateway's key check, 401 refuses it),
``$default`` (one client message: the same :class:`~responses_gateway.api.ws_session.Session`
as under uvicorn runs it to its end) and ``$disconnect``. Events go back through the
management API (``PostToConnection``), one message per event, in order, from one thread that
posts while the response is still being produced.

The connection's state lives in the gateway's DynamoDB table (``store/connections.py``):
the tenant, the lanes running, each lane's most recent ``store: false`` response, each
response's steering state. Lanes do not queue here (each message is its own invocation): a
second ``response.create`` on a busy lane is an ``error``.

Steering: a ``response.steer`` arrives in another invocation than the response it steers, so
it is queued in the table (conditional on the response still running, under the bound) and
that invocation answers only a refusal. The running invocation polls its response's item
(``STEER_POLL_SECONDS``, as a background worker learns of a cancel from the store), hands
each steer to its job, which acknowledges it ``response.steer.accepted`` and stops at its next
safe point, and starts the successor itself on its lane. Its last write ends the response
and takes every steer queued until then, so none is lost.

    Handler: responses_gateway.entry.lambda_websocket.handler
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import queue
import threading
from typing import Any

import orjson

from responses_gateway.api import ws_steer
from responses_gateway.api.auth import Authenticator
from responses_gateway.api.ws_remembered import Remembered
from responses_gateway.api.ws_session import Create, Event, Session, response_in_progress
from responses_gateway.config import Settings, settings_from_env
from responses_gateway.errors import GatewayError
from responses_gateway.responses.gateway import Gateway
from responses_gateway.responses.job import Job
from responses_gateway.responses.steering import Steer, new_steer
from responses_gateway.store.base import StoredResponse
from responses_gateway.store.connections import Connections

logger = logging.getLogger("responses_gateway")
STEER_POLL_SECONDS = 0.5  # how soon a running response learns of a steer from the table
_loop = asyncio.new_event_loop()
_gateway: Gateway | None = None
_clients: dict[str, Any] = {}


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _loop.run_until_complete(_handle(event))


async def _handle(event: dict[str, Any]) -> dict[str, Any]:
    ctx = event["requestContext"]
    route, connection_id = ctx["routeKey"], ctx["connectionId"]
    gateway = _get_gateway()
    table = gateway.platform.connections(
        _client("dynamodb", os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")))
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
    poster = Poster(_management_client(gateway.settings, ctx), connection_id)
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

        _gateway = build_gateway(settings_from_env())
    return _gateway


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


def _management_client(settings: Settings, ctx: dict[str, Any]) -> Any:
    """The management API of this connection's stage (``GATEWAY_WS_MANAGEMENT_URL`` wins:
    custom domains, tests)."""
    url = settings.ws_management_url or f"https://{ctx['domainName']}/{ctx['stage']}"
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


class ApiGatewaySession(Session):
    """A Session whose lanes and remembered responses live in the table, not in memory.

    Each message is its own invocation, so lanes do not queue: a lane running elsewhere
    refuses the create.
    """

    def __init__(self, gateway: Gateway, state: dict[str, Any], table: Connections,
                 emit: Any) -> None:
        remembered = Remembered(gateway.settings.ws_max_remembered_bytes, state["remembered"])
        super().__init__(gateway, state["tenant"], emit, remembered=remembered)
        self.connection_id = state["connection_id"]
        self.table = table
        self._polls: dict[str, asyncio.Future[None]] = {}

    async def admit(self, lane: str | None) -> GatewayError | None:
        refusal = self._stream_refusal(lane, ())
        if refusal is not None:
            return refusal
        if await asyncio.to_thread(self.table.claim, self.connection_id, lane):
            return None
        if lane is None:
            return response_in_progress()
        return GatewayError(
            429,
            f"A response is already running on stream '{lane}', and responses do not queue "
            "on this connection (API Gateway): wait for its terminal event.",
            type="requests",
            code="too_many_queued_responses",
        )

    async def release(self, lane: str | None) -> None:
        await asyncio.to_thread(self.table.free, self.connection_id, lane)

    async def remember(self, lane: str | None, record: StoredResponse) -> None:
        for forgotten in await self.remembered.keep(lane, record):
            if forgotten != lane:
                await asyncio.to_thread(self.table.forget, self.connection_id, forgotten)
        if record.response.get("store") is False and lane in self.remembered.lanes():
            await asyncio.to_thread(self.table.remember, self.connection_id, lane, record)
        else:  # the store has it (or it is too large): continuations find it there, or not
            await asyncio.to_thread(self.table.forget, self.connection_id, lane)

    async def evict(self, response_id: str) -> None:
        for lane in self.remembered.forget(response_id):
            await asyncio.to_thread(self.table.forget, self.connection_id, lane)

    # -- steering across invocations --

    async def steer(self, event: dict[str, Any]) -> Event | None:
        invalid = ws_steer.check(event)
        if invalid is not None:
            return invalid
        target, steer_input = event["previous_response_id"], event["input"]
        steer = new_steer(target, steer_input)
        refusal = await asyncio.to_thread(self.table.add_steer, self.connection_id, target,
                                          steer.to_record(), self.max_steers)
        if refusal is None:
            return None  # the response's invocation acknowledges it in its stream
        if refusal == "missing":
            return ws_steer.not_running(target, steer_input, None)
        if refusal == "not_steerable":
            return ws_steer.not_supported(target, steer_input, None)
        if refusal == "full":
            return ws_steer.too_many(target, steer_input, self.max_steers, None)
        return ws_steer.not_running(target, steer_input, refusal)

    async def started(self, job: Job, create: Create, template: dict[str, Any]) -> None:
        await super().started(job, create, template)
        try:
            await asyncio.to_thread(self.table.start_response, self.connection_id,
                                    job.record.id, job.steering is not None)
        except Exception:  # the response runs all the same; steers find no target
            logger.warning("recording response %s for steering failed", job.record.id,
                           exc_info=True)
            job.steering = None
        if job.steering is not None:
            self._polls[job.record.id] = asyncio.ensure_future(self._poll(job))

    async def _poll(self, job: Job) -> None:
        """Hand the steers another invocation queued to the running job."""
        steering = job.steering
        assert steering is not None
        while True:
            await asyncio.sleep(STEER_POLL_SECONDS)
            try:
                queued = await asyncio.to_thread(self.table.steers, self.connection_id,
                                                 job.record.id)
            except Exception:  # the table is unreachable for now: the end's write takes them
                logger.warning("reading the steers of %s failed", job.record.id, exc_info=True)
                continue
            known = {steer.id for steer in steering.steers}
            for data in queued:
                if data["id"] not in known:
                    steering.add(Steer.from_record(data))

    async def ended(self, job: Job, create: Create) -> list[Steer]:
        poll = self._polls.pop(job.record.id, None)
        if poll is not None:
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poll
        try:
            queued = await asyncio.to_thread(self.table.end_response, self.connection_id,
                                             job.record.id, str(job.response.get("status")))
        except Exception:  # those the polls brought are still answered
            logger.warning("ending response %s for steering failed", job.record.id,
                           exc_info=True)
            queued = []
        steering = job.steering
        if steering is not None:
            known = {steer.id for steer in steering.steers}
            steering.steers += [Steer.from_record(data) for data in queued
                                if data["id"] not in known]
        return await super().ended(job, create)

    def abandoned(self, job: Job) -> None:
        super().abandoned(job)
        poll = self._polls.pop(job.record.id, None)
        if poll is not None:  # the loop outlives the invocation: stop polling now
            poll.cancel()

    async def keep_pending(self, lane: str | None, response_id: str,
                           steers: list[Steer]) -> None:
        await asyncio.to_thread(self.table.keep_pending, self.connection_id, response_id,
                                [steer.to_record() for steer in steers])

    async def take_pending(self, lane: str | None, response_id: str) -> list[Steer]:
        taken = await asyncio.to_thread(self.table.take_pending, self.connection_id,
                                        response_id)
        return [Steer.from_record(data, acknowledged=True) for data in taken]

"""The WebSocket mode of ``/v1/responses``, whatever carries the socket.

A client sends ``response.create`` events (a create body with a ``type``; ``stream`` implicit,
``background`` refused) and gets back the very events an SSE stream carries, one JSON text
message each, then ``error`` events where HTTP would answer 4xx/5xx. The connection survives
every error about one message; only the transport closes it.

What a connection adds to HTTP:

- **In-connection state** (``api/ws_remembered.py``). Each lane's most recent response that
  ended ``completed`` or ``incomplete`` is remembered, so a continuation
  (``previous_response_id``) from it finds it without the store, even with ``store: false``;
  an older ``store: false`` response is not found (OpenAI keeps the most recent response in a
  connection-local cache). A continuation that fails forgets the response it named: a later
  continuation from it gets ``previous_response_not_found`` unless the store has it (OpenAI:
  "failed continuation evicts cache"). What grew from it keeps its history.
- **Lanes.** ``stream_id`` names a lane: lanes run side by side, a lane runs its responses in
  order (FIFO) and every event of a laned response echoes its ``stream_id``. Without
  ``stream_id`` a second ``response.create`` while one runs is an ``error``. The receive loop
  never waits for a lane: a create is queued or refused at once, so a steer or another lane's
  create is answered while a lane streams.
- **Bounds** (settings): responses running or queued on the connection
  (``GATEWAY_WS_MAX_ACTIVE_RESPONSES``, OpenAI's 16), named streams
  (``GATEWAY_WS_MAX_STREAMS``, OpenAI's 32), bytes remembered
  (``GATEWAY_WS_MAX_REMEMBERED_BYTES``). A create past the first two is an ``error``.
- **Warm-up** (``generate: false``): the request is validated, translated and its state
  kept as for any response, but the model is not called: ``response.created``,
  ``response.in_progress``, ``response.completed`` with no output and zero usage. Its id is a
  ``previous_response_id`` like any other (OpenAI: "prepares request state ... returns a
  response ID that you can chain from"), so the next turn sends only what is new.
- ``response.steer`` is answered ``response.steer.failed`` (``steering_not_supported``): a
  Chat Completions or Bedrock generation cannot take input while it runs.

The transport (``api/websocket.py`` under uvicorn, ``entry/lambda_websocket.py`` on API
Gateway) hands each message to :meth:`Session.receive` and sends what ``emit`` is given.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from responses_gateway import limiter as limits
from responses_gateway.api.json_body import fits_depth, too_deep
from responses_gateway.api.ws_remembered import Lane, Remembered, flattened
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.responses.gateway import Gateway
from responses_gateway.responses.job import Job
from responses_gateway.status import FINISHED_STATUSES
from responses_gateway.store.base import StoredResponse

logger = logging.getLogger("responses_gateway")

Event = dict[str, Any]
Emit = Callable[[list[Event]], Awaitable[None]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]
CLIENT_EVENTS = ("response.create", "response.steer")


def error_event(exc: GatewayError, stream_id: str | None = None) -> Event:
    """The documented WebSocket ``error`` event: the HTTP error body plus its status.

    ``code`` is never null here (the Open Responses schema requires a string): where HTTP
    sends none, the error's type stands in.
    """
    error: dict[str, Any] = {
        "type": exc.type,
        "code": exc.code or exc.type,
        "message": exc.message,
        "param": exc.param,
    }
    if exc.headers:
        error["headers"] = dict(exc.headers)
    event: Event = {"type": "error", "status": exc.status, "error": error}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"The message is larger than this gateway accepts ({limit} bytes; "
        "GATEWAY_MAX_BODY_BYTES).",
        code="request_too_large",
    )


@dataclass(slots=True)
class Create:
    """One admitted ``response.create``: its body (``type``, ``stream_id`` taken out)."""

    body: dict[str, Any]
    lane: Lane
    generate: bool


class Session:
    """One connection: its tenant, remembered responses and lanes.

    ``spawn`` starts a lane's worker beside the receive loop (uvicorn); without it ``receive``
    runs the response to its end before returning (one Lambda invocation per message).
    """

    def __init__(
        self,
        gateway: Gateway,
        tenant: str,
        emit: Emit,
        *,
        spawn: Spawn | None = None,
        remembered: Remembered | None = None,
    ) -> None:
        settings = gateway.settings
        self.gateway = gateway
        self.tenant = tenant
        self.emit = emit
        self.spawn = spawn
        self.max_active = settings.ws_max_active_responses
        self.max_streams = settings.ws_max_streams
        self.remembered = remembered if remembered is not None else Remembered(
            settings.ws_max_remembered_bytes)
        #: lanes with work: the running response first, then the queued ones (FIFO)
        self._lanes: dict[Lane, deque[Create]] = {}

    @property
    def busy(self) -> bool:
        return bool(self._lanes)

    @property
    def active(self) -> int:
        """Responses running or queued on this connection."""
        return sum(len(queue) for queue in self._lanes.values())

    async def receive(self, message: str | bytes) -> None:
        """Handle one client message; every mistake in it becomes an ``error`` event.

        Never waits for a running response: a create is queued behind its lane or refused.
        """
        try:
            event = self._parse(message)
            if event["type"] == "response.steer":
                await self.emit([self._steer_failed(event)])
                return
            body, lane = self._create_body(event)
            create = Create(body, lane, _generate(body))
        except GatewayError as exc:
            await self.emit([error_event(exc)])
            return
        refusal = await self.admit(lane)
        if refusal is not None:
            await self.emit([error_event(refusal, lane)])
            return
        if self.spawn is None:
            try:
                await self._run(create)
            finally:
                await self.release(lane)
            return
        queue = self._lanes.get(lane)
        if queue is not None:
            queue.append(create)
            return
        self._lanes[lane] = deque([create])
        self.spawn(partial(self._drain, lane))

    async def _drain(self, lane: Lane) -> None:
        """Run ``lane``'s responses one after another until its queue is empty."""
        queue = self._lanes[lane]
        try:
            while queue:
                await self._run(queue[0])
                queue.popleft()
        finally:
            del self._lanes[lane]

    # -- admission: overridable where the connection's state lives elsewhere (API Gateway) --

    async def admit(self, lane: Lane) -> GatewayError | None:
        """Why this connection cannot take one more response in ``lane`` now, or None."""
        if lane is None and lane in self._lanes:
            return response_in_progress()
        if self.max_active and self.active >= self.max_active:
            return too_many_active(self.max_active)
        return self._stream_refusal(lane, self._lanes)

    def _stream_refusal(self, lane: Lane, working: Any) -> GatewayError | None:
        """A new named stream past ``max_streams`` (those working or remembered count)."""
        if lane is None or not self.max_streams or lane in working:
            return None
        streams = {name for name in (*working, *self.remembered.lanes()) if name is not None}
        if lane in streams or len(streams) < self.max_streams:
            return None
        return too_many_streams(self.max_streams)

    async def release(self, lane: Lane) -> None:
        """A response admitted without ``spawn`` ended."""

    async def remember(self, lane: Lane, record: StoredResponse) -> None:
        """A response ended well in ``lane``: it is the lane's most recent."""
        self.remembered.put(lane, record)

    async def evict(self, response_id: str) -> None:
        """A continuation from ``response_id`` failed: the connection no longer continues
        from it (what grew from it keeps its history)."""
        self.remembered.forget(response_id)

    # -- one response --

    async def _run(self, create: Create) -> None:
        body, lane = create.body, create.lane
        previous = body.get("previous_response_id")
        previous = previous if isinstance(previous, str) else None
        base = self.remembered.get(previous) if previous is not None else None
        job: Job | None = None
        try:
            # The key's limits first (limiter.py).
            settings = self.gateway.settings
            await limits.admit(self.gateway.store, settings.limits, self.tenant, settings)
            job = await self.gateway.new_job(
                body, self.tenant, cached=self.remembered, generate=create.generate,
                reserve=limits.reserver(self.gateway.store, settings.limits, self.tenant, {}))
            await job.ready()
        except GatewayError as exc:
            if job is not None:
                await job.close()
            if previous is not None:
                await self.evict(previous)
            await self.emit([error_event(exc, lane)])
            return
        try:
            async with contextlib.aclosing(job.batches()) as batches:
                async for batch in batches:
                    if lane is not None:
                        for event in batch:
                            event["stream_id"] = lane
                    await self.emit(batch)
        except GatewayError as exc:  # the store failed for good before the end
            if previous is not None:
                await self.evict(previous)
            await self.emit([error_event(exc, lane)])
            return
        if job.response.get("status") in FINISHED_STATUSES:
            await self.remember(lane, flattened(_remembered(job), base))
        elif previous is not None:
            await self.evict(previous)

    # -- parsing --

    def _parse(self, message: str | bytes) -> dict[str, Any]:
        limit = self.gateway.settings.max_body_bytes
        if limit and len(message) > limit:
            raise too_large(limit)
        try:
            event = orjson.loads(message)
        except orjson.JSONDecodeError:
            raise invalid_request(
                "We could not parse the JSON of your message. Each WebSocket message must be "
                "one JSON object, such as a 'response.create' event.",
                code="invalid_json",
            ) from None
        if not isinstance(event, dict):
            raise invalid_request(
                "Each WebSocket message must be a JSON object with a 'type'.", param="type"
            )
        if not fits_depth(event):  # as an HTTP body: refused before anything runs
            raise too_deep()
        kind = event.get("type")
        if kind not in CLIENT_EVENTS:
            if not isinstance(kind, str):
                raise missing_parameter("type")
            raise invalid_request(
                f"Invalid value: '{kind}'. Supported values are: 'response.create' and "
                "'response.steer'.",
                param="type",
                code="invalid_value",
            )
        return event

    def _create_body(self, event: dict[str, Any]) -> tuple[dict[str, Any], Lane]:
        body = dict(event)
        del body["type"]
        lane = body.pop("stream_id", None)
        if lane is not None and not isinstance(lane, str):
            raise invalid_request(
                "Invalid type for 'stream_id': expected a string.", param="stream_id",
                code="invalid_type",
            )
        if body.get("background"):
            raise invalid_request(
                "'background' is not supported over WebSocket; send the request over HTTP "
                "to run it in the background.",
                param="background",
            )
        body.pop("background", None)
        body["stream"] = True  # implicit: what the client sent there does not matter
        return body, lane

    def _steer_failed(self, event: dict[str, Any]) -> Event:
        steer: dict[str, Any] = {
            "input": event.get("input"),
            "previous_response_id": event.get("previous_response_id"),
        }
        return {
            "type": "response.steer.failed",
            "sequence_number": 0,
            "steer": steer,
            "error": {
                "type": "invalid_request_error",
                "code": "steering_not_supported",
                "message": "Steering is not supported by this gateway's models: send the "
                "input in a new 'response.create' with 'previous_response_id'.",
            },
        }


def response_in_progress() -> GatewayError:
    return GatewayError(
        409,
        "A response is already in progress on this connection. Wait for its terminal "
        "event, or give each concurrent response its own 'stream_id'.",
        code="response_in_progress",
    )


def too_many_active(limit: int) -> GatewayError:
    return GatewayError(
        429,
        f"Too many responses are running or queued on this connection (at most {limit}; "
        "GATEWAY_WS_MAX_ACTIVE_RESPONSES). Wait for a terminal event before sending another "
        "'response.create'.",
        type="requests",
        code="too_many_queued_responses",
    )


def too_many_streams(limit: int) -> GatewayError:
    return GatewayError(
        400,
        f"Too many streams on this connection (at most {limit} 'stream_id' values; "
        "GATEWAY_WS_MAX_STREAMS). Reuse a stream, or open a new connection.",
        param="stream_id",
        code="too_many_streams",
    )


def _generate(body: dict[str, Any]) -> bool:
    """``generate`` (WebSocket only, default true), taken out of the create body."""
    generate = body.pop("generate", None)
    if generate is None:
        return True
    if not isinstance(generate, bool):
        raise invalid_request(
            "Invalid type for 'generate': expected a boolean.", param="generate",
            code="invalid_type",
        )
    return generate


def _remembered(job: Job) -> StoredResponse:
    """What a continuation needs of a finished response, without its translated request."""
    record = job.record
    return StoredResponse(
        id=record.id,
        tenant=record.tenant,
        response=job.response,
        request={"sealed_reasoning": job.translator.sealed_reasoning},
        input_items=record.input_items,
        previous_response_id=record.previous_response_id,
        expires_at=record.expires_at,
    )


__all__ = ["Session", "error_event"]

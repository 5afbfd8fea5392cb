"""The WebSocket mode of ``/v1/responses``, whatever carries the socket.

A client sends ``response.create`` events (a create body with a ``type``; ``stream`` implicit,
``background`` refused) and gets back the very events an SSE stream carries, one JSON text
message each, then ``error`` events where HTTP would answer 4xx/5xx. The connection survives
every error about one message; only the transport closes it.

What a connection adds to HTTP:

- **In-connection state.** Every response that ends ``completed`` or ``incomplete`` on the
  connection is remembered, so a continuation (``previous_response_id``) finds it without the
  store, even with ``store: false``. A continuation that fails evicts the response it named:
  a later continuation from it gets ``previous_response_not_found`` unless the store has it
  (OpenAI: "failed continuation evicts cache"). Ancestors stay reachable for other chains.
- **Lanes.** ``stream_id`` names a lane: lanes run side by side, a lane runs its responses in
  order (FIFO) and every event of a laned response echoes its ``stream_id``. Without
  ``stream_id`` a second ``response.create`` while one runs is an ``error``.
- **Warm-up** (``generate: false``): the request is validated, translated and its state
  kept as for any response, but the model is not called: ``response.created``,
  ``response.in_progress``, ``response.completed`` with no output and zero usage. Its id is a
  ``previous_response_id`` like any other (OpenAI: "prepares request state ... returns a
  response ID that you can chain from"), so the next turn sends only what is new.
- ``response.steer`` is answered ``response.steer.failed`` (``steering_not_supported``): a
  Chat Completions or Bedrock generation cannot take input while it runs.

The transport (``api/websocket.py`` under uvicorn, ``api/websocket_apigw.py`` on API Gateway)
hands each message to :meth:`Session.receive` and sends what ``emit`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

import orjson

from responses_gateway.api.json_body import fits_depth, too_deep
from responses_gateway.backends.base import BackendRequest
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.responses.gateway import Gateway, Job
from responses_gateway.store.base import StoredResponse
from responses_gateway.backends.chunks import Chunk

logger = logging.getLogger("responses_gateway")

Event = dict[str, Any]
Emit = Callable[[list[Event]], Awaitable[None]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]
CLIENT_EVENTS = ("response.create", "response.steer")
#: responses that may wait in one lane behind the running one
MAX_QUEUED_PER_LANE = 16
_REMEMBERED = ("completed", "incomplete")


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


class _Hiding(Mapping[str, StoredResponse]):
    """The remembered responses but one: an evicted id, still reachable as an ancestor."""

    def __init__(self, records: Mapping[str, StoredResponse], hidden: str) -> None:
        self._records = records
        self._hidden = hidden
        self._first = True

    def __getitem__(self, key: str) -> StoredResponse:
        if self._first and key == self._hidden:  # the first lookup is the id the client named
            self._first = False
            raise KeyError(key)
        self._first = False
        return self._records[key]

    def __iter__(self) -> Any:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


class Session:
    """One connection: its tenant, remembered responses and lanes.

    ``spawn`` starts a response beside the receive loop (uvicorn); without it ``receive``
    runs the response to its end before returning (one Lambda invocation per message).
    """

    def __init__(
        self,
        gateway: Gateway,
        tenant: str,
        emit: Emit,
        *,
        spawn: Spawn | None = None,
        records: dict[str, StoredResponse] | None = None,
        evicted: set[str] | None = None,
    ) -> None:
        self.gateway = gateway
        self.tenant = tenant
        self.emit = emit
        self.spawn = spawn
        self.records: dict[str, StoredResponse] = records if records is not None else {}
        self.evicted: set[str] = evicted if evicted is not None else set()
        self._lanes: dict[str | None, asyncio.Lock] = {}
        self._queued: dict[str | None, int] = {}

    @property
    def busy(self) -> bool:
        return any(lock.locked() for lock in self._lanes.values())

    async def receive(self, message: str | bytes) -> None:
        """Handle one client message; every mistake in it becomes an ``error`` event."""
        try:
            event = self._parse(message)
            if event["type"] == "response.steer":
                await self.emit([self._steer_failed(event)])
                return
            body, lane = self._create_body(event)
            generate = _generate(body)
        except GatewayError as exc:
            await self.emit([error_event(exc)])
            return
        if not await self.acquire(lane):
            await self.emit([error_event(_lane_busy(lane), lane)])
            return

        async def run() -> None:
            try:
                await self._run(body, lane, generate=generate)
            finally:
                await self.release(lane)

        if self.spawn is None:
            await run()
        else:
            self.spawn(run)

    # -- lanes: overridable where the connection's state lives elsewhere (API Gateway) --

    async def acquire(self, lane: str | None) -> bool:
        """Claim ``lane`` for one response; False when it cannot take another now."""
        lock = self._lanes.setdefault(lane, asyncio.Lock())
        if lock.locked():
            queued = self._queued.get(lane, 0)
            if lane is None or queued >= MAX_QUEUED_PER_LANE:
                return False
            self._queued[lane] = queued + 1
            try:
                await lock.acquire()  # asyncio.Lock wakes waiters in order: FIFO
            finally:
                self._queued[lane] -= 1
            return True
        await lock.acquire()
        return True

    async def release(self, lane: str | None) -> None:
        self._lanes[lane].release()

    async def remember(self, record: StoredResponse) -> None:
        """A response ended well on this connection: continuations find it here."""
        self.records[record.id] = record
        self.evicted.discard(record.id)

    async def evict(self, response_id: str) -> None:
        """A continuation from ``response_id`` failed: the connection no longer continues from
        it, though the responses after it still reach it as their ancestor."""
        self.evicted.add(response_id)

    # -- one response --

    async def _run(self, body: dict[str, Any], lane: str | None, *, generate: bool = True) -> None:
        previous = body.get("previous_response_id")
        previous = previous if isinstance(previous, str) else None
        cached: Mapping[str, StoredResponse] = self.records
        if previous is not None and previous in self.evicted:
            cached = _Hiding(self.records, previous)
        job: Job | None = None
        try:
            job = await self.gateway.prepare(body, self.tenant, cached=cached)
            if not generate:
                _warm_up(job)
            await job.prepare()
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
        if job.response.get("status") in _REMEMBERED:
            await self.remember(_remembered(job))
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

    def _create_body(self, event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
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
                "code": "steering_not_supported",
                "message": "Steering is not supported by this gateway's models: send the "
                "input in a new 'response.create' with 'previous_response_id'.",
            },
        }


def _lane_busy(lane: str | None) -> GatewayError:
    if lane is None:
        return GatewayError(
            409,
            "A response is already in progress on this connection. Wait for its terminal "
            "event, or give each concurrent response its own 'stream_id'.",
            code="response_in_progress",
        )
    return GatewayError(
        429,
        f"Too many responses are queued on stream '{lane}' (at most "
        f"{MAX_QUEUED_PER_LANE}).",
        type="requests",
        code="too_many_queued_responses",
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


class _NoGeneration:
    """The backend of a warm-up: the model is never called; one chunk ends the turn.

    The job runs as any other (events, store, in-connection state, conversation), so a
    warm-up is chained exactly like a generated response: its input items, no output.
    """

    name = "warm-up"

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        yield [{
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }]

    async def aclose(self) -> None:
        return None


def _warm_up(job: Job) -> None:
    """Make ``job`` a warm-up: no upstream request, and no MCP call a client approved runs
    (nothing is generated, so nothing is acted on; the listed tools stay in its output)."""
    job.backend = _NoGeneration()
    if job.tools is not None:
        job.tools.approved.clear()


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

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
  (``GATEWAY_WS_MAX_REMEMBERED_BYTES``). A create past the first two is an ``error``. What
  the connection keeps per lane for steering (the responses that ended last, steers waiting
  for tool output) is kept for the lanes that were used most recently, as many as may be in
  use at once: a lane stops counting as a stream once its work ended and it is not
  remembered, so a client cycling through new ``stream_id`` values does not grow it.
- **Warm-up** (``generate: false``): the request is validated, translated and its state
  kept as for any response, but the model is not called: ``response.created``,
  ``response.in_progress``, ``response.completed`` with no output and zero usage. Its id is a
  ``previous_response_id`` like any other (OpenAI: "prepares request state ... returns a
  response ID that you can chain from"), so the next turn sends only what is new.
- **Steering** (``response.steer``, ``api/ws_steer.py``): input queued for a running
  response, acknowledged ``response.steer.accepted`` in that response's stream; the response
  stops at its next safe point ``incomplete`` (``reason: "steered"``, its output kept) and the
  session starts the successor itself on the same lane: the steered response's settings,
  ``previous_response_id`` the steered one, the queued input. A response that stops for the
  client's tool output keeps its steers queued (``response.steer.pending``, its
  ``required_input``) for the client's next create from it, whose input they are prepended to.
  Otherwise ``response.steer.failed`` with OpenAI's codes.

The transport (``api/websocket.py`` under uvicorn, ``entry/lambda_websocket.py`` on API
Gateway) hands each message to :meth:`Session.receive` and sends what ``emit`` is given.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from responses_gateway import limiter as limits
from responses_gateway.api import ws_steer
from responses_gateway.api.json_body import fits_depth, too_deep
from responses_gateway.api.ws_remembered import Lane, Remembered, flattened
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.responses.gateway import Gateway
from responses_gateway.responses.job import Job
from responses_gateway.responses.steering import Steer, Steering, new_steer
from responses_gateway.status import FINISHED_STATUSES
from responses_gateway.store.base import StoredResponse

logger = logging.getLogger("responses_gateway")

Event = dict[str, Any]
Emit = Callable[[list[Event]], Awaitable[None]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]
CLIENT_EVENTS = ("response.create", "response.steer")
#: ended responses a connection tells a late steer about, per lane (else response_not_found)
ENDED_PER_LANE = 4
#: named streams a connection keeps steering state for when GATEWAY_WS_MAX_STREAMS is 0
DEFAULT_STREAMS = 32


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
    #: the steers this create commits (a successor the gateway started, or a create from a
    #: response whose steers waited for the client's tool output)
    steers: list[Steer] = field(default_factory=list)
    successor: bool = False  # started by the gateway for a steered response's steers


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
        self.max_steers = settings.ws_max_pending_steers
        #: responses running on this connection, by id: what a steer targets
        self._running: dict[str, tuple[Job, Create]] = {}
        #: each lane's responses that ended last (a steered one and its successor): (id, status)
        self._ended: OrderedDict[Lane, deque[tuple[str, str]]] = OrderedDict()
        #: each lane's steers waiting for the client's tool output: (response id, steers)
        self._pending: OrderedDict[Lane, tuple[str, list[Steer]]] = OrderedDict()
        #: lanes those two keep, the most recently used: all that may be in use at once
        self.lanes_kept = (self.max_streams or DEFAULT_STREAMS) + 1  # the unnamed one too

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
        An error about a create with a ``stream_id`` echoes it, as every event of its lane.
        """
        lane: Lane = None
        try:
            event = self._parse(message)
            if event["type"] == "response.steer":
                failure = await self.steer(event)
                if failure is not None:
                    await self.emit([failure])
                return
            lane = _lane(event)
            body = self._create_body(event)
            create = Create(body, lane, _generate(body))
        except GatewayError as exc:
            await self.emit([error_event(exc, lane)])
            return
        refusal = await self.admit(lane)
        if refusal is not None:
            await self.emit([error_event(refusal, lane)])
            return
        if self.spawn is None:
            try:
                next_create: Create | None = create
                while next_create is not None:  # a steered response's successor follows
                    next_create = await self._run(next_create)
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
                successor = await self._run(queue[0])
                queue.popleft()
                if successor is not None:  # a steered response's: next on its lane
                    queue.appendleft(successor)
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
        await self.remembered.keep(lane, record)

    async def evict(self, response_id: str) -> None:
        """A continuation from ``response_id`` failed: the connection no longer continues
        from it (what grew from it keeps its history)."""
        self.remembered.forget(response_id)

    # -- one response --

    async def _run(self, create: Create) -> Create | None:
        """Run one response to its end; the successor its steers ask for, if any."""
        body, lane = create.body, create.lane
        previous = body.get("previous_response_id")
        previous = previous if isinstance(previous, str) else None
        if previous is not None and not create.steers:
            # steers that waited for this create (the client's tool output) are its input
            create.steers = await self.take_pending(lane, previous)
            if create.steers:
                body["input"] = [*ws_steer.steers_input(create.steers),
                                 *ws_steer.as_items(body.get("input"))]
        template = ws_steer.settings_of(body)  # what a successor inherits
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
            if previous is not None and not create.steers:
                await self.evict(previous)
            await self._uncommitted(create, exc, previous)
            return None
        await self.started(job, create, template)
        try:
            async with contextlib.aclosing(job.batches()) as batches:
                async for batch in batches:
                    if lane is not None:
                        for event in batch:
                            event["stream_id"] = lane
                    await self.emit(batch)
        except GatewayError as exc:  # the store failed for good before the end
            await self.ended(job, create)
            if previous is not None:
                await self.evict(previous)
            await self.emit([error_event(exc, lane)])
            return None
        except BaseException:  # the client left (or the process stops): nobody to steer for
            self.abandoned(job)
            raise
        steers = await self.ended(job, create)
        if job.response.get("status") in FINISHED_STATUSES:
            await self.remember(lane, flattened(_remembered(job), base))
        elif previous is not None:
            await self.evict(previous)
        return await self._after_steers(job, create, template, steers)

    # -- steering (api/ws_steer.py) --

    async def steer(self, event: dict[str, Any]) -> Event | None:
        """Queue a ``response.steer`` for its running response; its ``response.steer.failed``
        when it cannot be (``accepted`` comes in the response's own stream)."""
        invalid = ws_steer.check(event)
        if invalid is not None:
            return invalid
        target, steer_input = event["previous_response_id"], event["input"]
        running = self._running.get(target)
        if running is None:
            ended = next((status for lane in self._ended.values() for rid, status in lane
                          if rid == target), None)
            return ws_steer.not_running(target, steer_input, ended)
        job, create = running
        steering = job.steering
        if steering is None:
            return ws_steer.not_supported(target, steer_input, create.lane)
        if job.translator.done:
            return ws_steer.not_running(target, steer_input, job.response.get("status"),
                                        create.lane)
        if self.max_steers and len(steering.steers) >= self.max_steers:
            return ws_steer.too_many(target, steer_input, self.max_steers, create.lane)
        steering.add(new_steer(target, steer_input))
        return None

    async def started(self, job: Job, create: Create, template: dict[str, Any]) -> None:
        """``job`` runs: steers may target it (when its kind of response can be steered)."""
        if ws_steer.steerable(template, job):
            job.steering = Steering()
        self._running[job.record.id] = (job, create)

    async def ended(self, job: Job, create: Create) -> list[Steer]:
        """``job`` ended: every steer it accepted, in order (those it did not acknowledge yet
        arrived after its last safe point)."""
        self._running.pop(job.record.id, None)
        ended = self._ended.get(create.lane)
        if ended is None:
            ended = deque(maxlen=ENDED_PER_LANE)
        _keep(self._ended, create.lane, ended, self.lanes_kept)
        ended.append((job.record.id, str(job.response.get("status"))))
        return job.steering.steers if job.steering is not None else []

    def abandoned(self, job: Job) -> None:
        """``job`` was cancelled with its connection: steers no longer target it."""
        self._running.pop(job.record.id, None)

    async def keep_pending(self, lane: Lane, response_id: str, steers: list[Steer]) -> None:
        """``steers`` wait for the client's create from ``response_id`` (its tool output)."""
        _keep(self._pending, lane, (response_id, steers), self.lanes_kept)

    async def take_pending(self, lane: Lane, response_id: str) -> list[Steer]:
        """The steers waiting for a create from ``response_id`` (taken: it commits them)."""
        for key, (rid, steers) in list(self._pending.items()):
            if rid == response_id:
                del self._pending[key]
                return steers
        return []

    async def _after_steers(self, job: Job, create: Create, template: dict[str, Any],
                            steers: list[Steer]) -> Create | None:
        """What a response's steers become once it ended: its successor, or ``pending``
        (the client's tool output first), or ``failed`` (it did not end well)."""
        if not steers:
            return None
        translator = job.translator
        events = job.steering.acknowledge(translator) if job.steering is not None else []
        status = job.response.get("status")
        successor: Create | None = None
        if status not in FINISHED_STATUSES:
            events += [translator.event(ws_steer.failed(
                "response_not_active", "The response ended without output to continue "
                "from; send the input in a new 'response.create'.", steer))
                for steer in steers]
        elif required := ws_steer.required_input(job.response.get("output") or []):
            events += [translator.event(ws_steer.pending(steer, required)) for steer in steers]
            await self.keep_pending(create.lane, job.record.id, steers)
        else:
            successor = Create(ws_steer.successor_body(template, job.record.id, steers),
                               create.lane, True, steers, successor=True)
        if create.lane is not None:
            for event in events:
                event["stream_id"] = create.lane
        await self.emit(events)
        return successor

    async def _uncommitted(self, create: Create, exc: GatewayError,
                           previous: str | None) -> None:
        """A create that carried steers failed before ``response.created``: a successor's
        steers are returned (``successor_creation_failed``); a client's create from a
        response whose steers waited gives them back to wait on."""
        lane = create.lane
        events = [error_event(exc, lane)]
        if create.steers and create.generate and previous is not None:
            if create.successor:
                events = [ws_steer.failed("successor_creation_failed", exc.message, steer)
                          for steer in create.steers]
                for event in events:
                    if lane is not None:
                        event["stream_id"] = lane
            else:
                await self.keep_pending(lane, previous, create.steers)
        await self.emit(events)

    # -- parsing --

    def _parse(self, message: str | bytes) -> dict[str, Any]:
        limit = self.gateway.settings.max_body_bytes
        if limit and _size(message) > limit:
            raise too_large(limit)
        try:
            event = orjson.loads(message)
        except orjson.JSONDecodeError as exc:
            if "depth limit" in str(exc):  # valid JSON, deeper than orjson goes: as HTTP's
                raise too_deep() from None
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

    def _create_body(self, event: dict[str, Any]) -> dict[str, Any]:
        body = dict(event)
        del body["type"]
        body.pop("stream_id", None)
        if body.get("background"):
            raise invalid_request(
                "'background' is not supported over WebSocket; send the request over HTTP "
                "to run it in the background.",
                param="background",
            )
        body.pop("background", None)
        body["stream"] = True  # implicit: what the client sent there does not matter
        return body


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


def _lane(event: dict[str, Any]) -> Lane:
    """A create's ``stream_id`` (None: the connection's unnamed lane)."""
    lane = event.get("stream_id")
    if lane is not None and not isinstance(lane, str):
        raise invalid_request(
            "Invalid type for 'stream_id': expected a string.", param="stream_id",
            code="invalid_type",
        )
    return lane


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


def _keep(lanes: OrderedDict[Lane, Any], lane: Lane, value: Any, limit: int) -> None:
    """``lanes[lane] = value`` as the most recently used, forgetting the least recently used
    lanes past ``limit``."""
    lanes.pop(lane, None)
    lanes[lane] = value
    while len(lanes) > limit:
        lanes.popitem(last=False)


def _size(message: str | bytes) -> int:
    """A message's bytes (a text message counts as its UTF-8, as an HTTP body does), so
    ``GATEWAY_MAX_BODY_BYTES`` bounds the same bytes over both (a character may be four);
    encoded only when not ASCII."""
    if isinstance(message, str) and not message.isascii():
        return len(message.encode("utf-8", "surrogatepass"))
    return len(message)


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

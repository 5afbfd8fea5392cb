"""One response being produced: from ``response.created`` to exactly one terminal event.

The job owns the response's lifecycle: the upstream request of each model turn, the deadline
(responses/deadline.py), how a failure or a departed consumer ends it, and the write of its
record before the terminal event leaves (read-your-writes). The order of model turns and tool
calls is the turn loop's (responses/turns.py). The HTTP surface, the WebSocket session and
the background worker all run responses through a job, so they cannot disagree; what differs
between them is given at construction: whether the model is called (``generate``: a WebSocket
warm-up is not) and where the record goes (``persist``: a background job writes its event log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import anyio

from responses_gateway.backends.base import Backend, BackendRequest, Chunk
from responses_gateway.config import Settings
from responses_gateway.errors import GatewayError
from responses_gateway.observability import ResponseMetrics
from responses_gateway.responses import conversations
from responses_gateway.responses.deadline import Deadline
from responses_gateway.responses.steering import Steering
from responses_gateway.responses.turns import TurnLoop
from responses_gateway.store.base import CancelledError as StoreCancelled
from responses_gateway.store.base import Store, StoredResponse, StoreUnavailable
from responses_gateway.tools import reads as tool_reads
from responses_gateway.tools.catalog import specs_from_record
from responses_gateway.tools.registry import ITEM_COUNTERS, SERVER_KINDS, ServerTools
from responses_gateway.tools.server import Rebuild, ServerCall
from responses_gateway.translate.response_object import response_error
from responses_gateway.translate.sealing import Sealer
from responses_gateway.translate.stream import Event, ResponseTranslator, TranslateOptions
from responses_gateway.translate.to_chat import client_param

logger = logging.getLogger("responses_gateway")
#: Where a job's record goes before its terminal event leaves (default: the store, with the
#: conversation turn's settle); a background job's event log takes it instead.
Persist = Callable[["Job"], Awaitable[None]]


class Services(Protocol):
    """What a job uses of the process-wide services (responses/gateway.py's Gateway)."""

    settings: Settings
    store: Store
    sealer: Sealer

    def backend_for(self, kind: str) -> Backend: ...


@dataclass(slots=True)
class Compaction:
    """A streamed create's compaction, run by the job after ``response.created``
    (gateway.py ``_compacted``): ``run`` makes the summarising calls and the record again of
    what they left; ``item_id`` names the item ``response.compaction.compacting`` reports."""

    item_id: str
    run: Callable[[], Awaitable[None]]


class Job:
    """One response being produced. ``batches()`` is the whole lifecycle, terminal included."""

    def __init__(
        self, gateway: Services, record: StoredResponse, *, stream: bool, store: bool,
        tools: ServerTools | None = None, conversation: conversations.Turn | None = None,
        generate: bool = True, persist: Persist | None = None, started_at: float | None = None,
    ):
        """``tools`` and ``conversation``: the server tools this response runs and its turn
        on a conversation, as its builder made them (gateway.py ``new_job``; a stored record's
        are rebuilt by :meth:`from_record`)."""
        self.gateway = gateway
        self.record = record
        self.store = store
        self._persist = persist
        runs = record.request.get("model_runs", True)  # False: a compaction_trigger's
        #: ``prompt_cache_options.prewarm``: the backend reads the prompt, nothing is generated
        #: (responses/prewarm.py); it overrides ``generate: false``, as OpenAI's does
        self._prewarm = bool(record.request.get("prewarm")) and runs
        generate = (generate or self._prewarm) and runs
        self._generate = generate
        chat = _upstream_body(record.request["chat"], stream)
        self.deadline = Deadline()
        limit = gateway.settings.max_response_seconds
        if limit > 0:
            # One clock for the whole response: a compaction before it was built counts.
            start = started_at if started_at is not None else time.time()
            self.deadline.set(start + limit, GatewayError(
                504,
                f"The response took longer than this gateway allows ({limit:g} s, "
                "GATEWAY_MAX_RESPONSE_SECONDS); the output so far is kept.",
                type="server_error", code="response_timeout",
            ))
        #: the server tools this response runs between model turns (tools/server.py)
        self.tools = tools
        options = record.request["options"]
        self.translator = ResponseTranslator(
            record.response,
            TranslateOptions(
                summary=options["summary"],
                logprobs=options["logprobs"],
                encrypted_reasoning=options["encrypted_reasoning"],
                seal=partial(gateway.sealer.seal, tenant=record.tenant),
                tools=specs_from_record(record.request.get("tools")),
                annotate=tools.annotate if tools is not None else None,
            ),
        )
        if tools is not None and (not generate or self._prewarm):
            tools.skip_first_calls()  # nothing is generated: nothing approved runs
        self.first_calls: list[ServerCall] = tools.first_calls() if tools is not None else []
        backend = gateway.backend_for(record.request["backend"])
        self.reasoning_input = backend.reasoning_input(gateway.settings.reasoning_input)
        self.backend = backend
        self.backend_request = BackendRequest(body=chat, tenant=record.tenant, stream=stream)
        self.metrics = ResponseMetrics(
            record.id, record.response.get("model") or "", stream=stream, content=chat,
            tenant=record.tenant, ledger=gateway.store.usage_store(), stored=store,
            reserved=record.request.get("reserved"), counters=ITEM_COUNTERS,
        )
        self.chunks: AsyncIterator[list[Chunk]] | None = None  # this model turn's upstream
        self._turns_started = 0  # model turns sent upstream
        self.turn_step = -1  # the current model turn's step (ResponseMetrics.step_opened)
        self._first: asyncio.Future[list[Chunk]] | None = None
        #: the response's turn on a conversation: it settles with the record (``persist``)
        self.conversation = conversation
        #: set by a WebSocket session: a ``response.steer`` may stop it (responses/steering.py)
        self.steering: Steering | None = None
        #: set by the gateway: a compaction still to run before the model (a streamed create)
        self.compaction: Compaction | None = None
        self._turns = TurnLoop(self)

    @classmethod
    def from_record(cls, gateway: Services, record: StoredResponse, *,
                    persist: Persist | None = None) -> Job:
        """A job for a stored (background) record, in whichever process runs it: its server
        tools and its conversation turn rebuilt from what the record holds."""
        return cls(gateway, record, stream=True, store=True, persist=persist,
                   tools=_tools_of(gateway, record),
                   conversation=conversations.turn_of(gateway.store, record))

    def set_deadline(self, when: float, error: GatewayError) -> None:
        """End the response ``failed`` with ``error`` at ``when`` (epoch seconds), partial
        output kept, if it has not ended by then; the earliest deadline set wins."""
        self.deadline.set(when, error)

    def seconds_left(self) -> float | None:
        return self.deadline.seconds_left()

    @property
    def response(self) -> dict[str, Any]:
        return self.translator.response

    async def ready(self) -> None:
        """The backend's local work before the upstream call (``Backend.prepare``: Bedrock
        fetches image URLs): its failures are still HTTP errors naming the client's param.
        After a compaction still to run (``compaction``), the job does it once compacted."""
        if not self._generate or self.compaction is not None:
            return
        try:
            await self.backend.prepare(self.backend_request)
        except GatewayError as exc:
            raise self._client_param(exc) from None

    def open(self) -> asyncio.Future[list[Chunk]]:
        """Send the request upstream; the future resolves with the first chunks.

        An UpstreamError from it happened before any output: within a grace period it can
        still be an HTTP error. Calls the client approved run first, and the model after
        them: then the future is resolved at once, with nothing.
        """
        if self._first is None:
            if self.conversation is not None:
                self.conversation.keep()  # the turn's lock outlives any long response
            if self.first_calls:
                self._first = asyncio.get_running_loop().create_future()
                self._first.set_result([])
            else:
                self._start_turn()
        assert self._first is not None
        return self._first

    async def start_next_turn(self) -> asyncio.Future[list[Chunk]]:
        """Close this model turn's upstream stream, reserve the (grown) request's tokens and
        send it again."""
        chunks, self.chunks = self.chunks, None
        if chunks is not None:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        await self._reserve_turn()
        self._start_turn()
        assert self._first is not None
        return self._first

    async def _reserve_turn(self) -> None:
        """Count a further model turn against the key's token limits before the upstream
        sees it (limiter.py ``reserve_turn``). The create reserved the first turn's input
        and the output of every turn (``max_output_tokens`` bounds them all, turns.py); each
        further turn sends the history again, grown by the tools' outputs, so its input is
        reserved now, in the create's windows, and the settle replaces all of it with what
        the response spent. Past what is left the response fails ``rate_limit_exceeded``
        (a GatewayError), its output so far kept, instead of passing the limit."""
        reserved = self.metrics.reserved
        if reserved is None or not self._generate:
            return  # no token limit for this key: nothing was reserved
        from responses_gateway import limiter as limits
        from responses_gateway.token_estimate import estimate_chat_off_loop as estimate

        tokens = await estimate(self.backend_request.body)
        if self._turns_started == 0:  # approved calls ran first: the create reserved the rest
            tokens -= await estimate(self.record.request["chat"])
        if tokens <= 0:
            return
        reserved = await limits.reserve_turn(
            self.gateway.store, self.gateway.settings.limits, self.record.tenant, reserved,
            tokens, self.response.get("model") or "")
        self.metrics.reserved = self.record.request["reserved"] = reserved

    def _start_turn(self) -> None:
        self._turns_started += 1
        # its step in the timeline and its span (the turn loop closes them: turns.py)
        self.turn_step = self.metrics.turn_opened(
            str(self.backend_request.body.get("model") or "") if self._generate else None)
        if not self._generate:
            self.chunks = _no_generation()
        elif self._prewarm:
            from responses_gateway.responses.prewarm import prewarm_request, prewarmed

            warm = prewarm_request(self.backend_request)
            self.chunks = prewarmed(self.backend.stream(warm))
        else:
            self.chunks = self.backend.stream(self.backend_request)
        self._first = asyncio.ensure_future(self._first_chunk())

    async def _first_chunk(self) -> list[Chunk]:
        assert self.chunks is not None
        try:
            return await anext(self.chunks)
        except GatewayError as exc:
            raise self._client_param(exc) from None

    def _client_param(self, exc: GatewayError) -> GatewayError:
        """A backend names chat messages (``messages[2].content[0]``); the client sent input."""
        return client_param(exc, self.record.request.get("message_params") or ())

    async def batches(self) -> AsyncIterator[list[Event]]:
        """``response.created`` first, then everything up to exactly one terminal event.

        Events come in batches, never empty: those one upstream read produced leave together
        (one socket write to a streaming client), which under load is many per read. The
        stored record is written before the terminal event leaves. If the consumer goes away,
        the upstream request is closed and the record still ends in a true state
        (``cancelled``).
        """
        translator = self.translator
        turns = self._turns
        compaction = self.compaction
        first = self.open() if compaction is None else None
        timer = self.deadline.arm(asyncio.current_task())
        if self.steering is not None:
            self.steering.arm()
        try:
            try:
                started = translator.start()
                if compaction is not None:
                    # The summary is written while the client already reads that it is.
                    yield started + translator.compacting(compaction.item_id)
                    first = await self.deadline.wait(self._compacted(compaction))  # its time
                    started = []
                for item in self.record.request.get("output_items") or ():
                    started += translator.add_finished_item(item)  # made before the model ran
                translator.add_usage(self.record.request.get("output_usage"))  # what it cost
                if self.tools is not None:
                    started += self.tools.opening_items(translator)
                yield started
                async for events in turns.run(first):
                    yield events
                if not translator.done:
                    if self.steering is not None:  # numbered before the terminal event
                        turns.pending += self.steering.acknowledge(translator)
                    ending = translator.steered() if turns.steered else translator.finish()
                    yield await self.stored(turns.pending + ending)
                return
            except (StoreUnavailable, StoreCancelled):
                raise  # the store's own verdicts: a 503, or a background job that must stop
            except GatewayError as exc:
                # An upstream failure, or a backend refusing part of the request (a Bedrock
                # image it cannot fetch) after the stream had started: the response fails.
                if translator.done:
                    return
                if exc.code == "upstream_connection_closed" and translator.finish_reason:
                    ending = translator.finish()  # closed early, after the model had finished
                else:
                    ending = translator.fail(exc.code or "upstream_error", exc.message)
            except Exception:
                logger.exception("response %s failed inside the gateway", self.record.id)
                if translator.done:
                    return
                ending = translator.fail(
                    "server_error", "The gateway failed while producing this response.")
            # failed (or finished early) on the way: the terminal event, once stored
            yield await self.stored(turns.pending + ending)
        finally:
            if timer is not None:
                timer.cancel()
            if not translator.done:
                # The consumer went away (client disconnect, cancellation): stop for real.
                translator.cancel()
                await _shielded(self.persist())
            await _shielded(self.close())

    async def _compacted(self, compaction: Compaction) -> asyncio.Future[list[Chunk]]:
        """Run the compaction the create left to the stream, then open the model's turn on
        what it left, in one sequence: the upstream request becomes the record's compacted
        chat body, the backend does its local work (``ready``), the request is sent
        (``open``: its first chunks come back), and the translator learns what the chat
        function names of the new render stand for."""
        await compaction.run()
        self.compaction = None
        request = self.record.request
        self.backend_request.body = _upstream_body(request["chat"], self.backend_request.stream)
        self.metrics.reserved = request.get("reserved")
        await self.ready()
        first = self.open()
        self.translator.set_tools(specs_from_record(request.get("tools")))
        return first

    async def run_to_end(self) -> dict[str, Any]:
        """Consume every event; the final Response object (non-stream requests)."""
        async for _ in self.batches():
            pass
        return self.response

    async def close(self) -> None:
        if self.conversation is not None and not self.record.background:
            await self.conversation.release()  # ended before its terminal write: let go
        if self.tools is not None:
            await self.tools.aclose()
        first, chunks = self._first, self.chunks
        self.metrics.finish(self.translator.response, first)
        await self.metrics.account()  # its usage, counted once (store/usage.py)
        if first is not None and not first.done():
            first.cancel()
            await asyncio.wait({first})  # the backend closes its upstream response on cancel
        if first is not None and first.done() and not first.cancelled():
            first.exception()  # retrieved: no "exception was never retrieved" warning
        if chunks is not None:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await aclose()  # the stream may already be dead; closing is best effort

    async def stored(self, events: list[Event]) -> list[Event]:
        """Persist, then let ``events`` (the last one terminal) leave.

        When the store fails for good a stream cannot take back what it sent, so its terminal
        event becomes ``response.failed`` (nothing was stored: the client must not be told
        ``completed``); a non-stream request raises, which is a 503.
        """
        try:
            await self.persist()
        except StoreUnavailable as exc:
            if not self.backend_request.stream or not events:
                raise
            response = self.translator.response
            response.update(
                status="failed",
                completed_at=None,
                incomplete_details=None,
                error=response_error(exc.code or "store_unavailable", exc.message),
            )
            seq = events[-1]["sequence_number"]
            events[-1] = {"type": "response.failed", "response": response, "sequence_number": seq}
        # Logged and counted before the terminal event leaves: whoever reads the usage, or
        # sends the next create, after it sees this response (close() covers the others).
        self.metrics.finish(self.translator.response, self._first)
        await self.metrics.account()
        return events

    async def persist(self) -> None:
        """Write the record before the terminal event leaves (or hand it to ``persist``);
        what the server tools' calls gave the model first (tools/reads.py)."""
        if self.tools is not None:
            await tool_reads.keep(self.gateway.store, self.record, self.tools, stored=self.store,
                                  most_bytes=self.gateway.settings.max_tool_output_bytes)
        if self._persist is not None:
            await self._persist(self)
            return
        record = self.record if self.store else None
        if record is not None:
            record.request["sealed_reasoning"] = self.translator.sealed_reasoning
        if self.conversation is not None:  # the record lands with the turn's append in one
            await self.conversation.finish(self, record)  # write: if it fails, neither does
        elif record is not None:
            await self.gateway.store.put(record)


def _upstream_body(chat: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The record's chat body as this job sends it: streamed or not as its client reads it
    (a background job always streams)."""
    chat = dict(chat)
    if not stream:
        chat["stream"] = False
        chat.pop("stream_options", None)
    elif not chat.get("stream"):  # a background job streams, whatever its client asked
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


async def _no_generation() -> AsyncIterator[list[Chunk]]:
    """A warm-up's model turn (WebSocket ``generate: false``): the model is never called; one
    chunk ends the turn, with zero usage. Everything else (events, store, in-connection state,
    conversation) runs as for any response, so a warm-up chains like a generated one."""
    yield [{
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }]


def _tools_of(gateway: Services, record: StoredResponse) -> ServerTools | None:
    """The server tools a stored response runs (a background worker's job)."""
    request = record.request
    data = request.get("server_tools")
    if data is None:  # a record written before server tools had a seam: under the tool's kind
        data = {kind: request[kind] for kind in SERVER_KINDS if request.get(kind)}
    if not data:
        return None
    return ServerTools.from_record(
        data, Rebuild(gateway.settings, partial(gateway.sealer.unseal, tenant=record.tenant),
                     services=gateway))


async def _shielded(awaitable: Awaitable[None]) -> None:
    """Finish cleanup even when the surrounding task is being cancelled."""
    with anyio.CancelScope(shield=True):
        await awaitable

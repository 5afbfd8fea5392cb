"""The turn loop: a model turn, then the calls the gateway runs, then the next model turn.

It owns the order and the bounds across turns; the job owns the upstream request, the
deadline and persistence (responses/job.py); each server tool owns its items and events
(tools/server.py). One translator serves every turn, so ids, output indexes and sequence
numbers continue and usage is summed.

``pending`` holds events produced and not yet handed on: a failure mid-batch keeps them (the
job sends them before its failure). Batches are handed on whenever the loop is about to wait,
so a client sees a tool's item open while the tool runs.

Bounds, whatever the client asked (a model may call tools forever, and each turn re-sends a
history its tools' outputs keep growing): ``max_tool_calls`` or ``GATEWAY_MAX_TOOL_CALLS``
calls run, whichever is lower; ``GATEWAY_MAX_TOOL_OUTPUT_BYTES`` of tool items kept (the last
call may pass it by one call's own bound); ``GATEWAY_MAX_TOOL_TURNS`` model turns with tool
calls. Past the first two the model is no longer offered the gateway's tools and answers with
what it has, as OpenAI does past ``max_tool_calls``; past the third the response ends with what
the last turn produced.

``max_output_tokens`` bounds the whole response, as OpenAI's does (reasoning included): each
model turn is asked for at most what the earlier turns left of it, and once they spent it all
no turn follows (the calls of the last one, whose results no turn could read, do not run) and
the response ends ``incomplete``, reason ``max_output_tokens``, as a turn cut at its cap ends.
The job reserves each further turn's input against the key's token limits (responses/job.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, Protocol

import orjson

from responses_gateway.backends.base import BackendRequest, Chunk
from responses_gateway.observability import ResponseMetrics
from responses_gateway.responses.deadline import Deadline
from responses_gateway.responses.steering import Steering
from responses_gateway.settings import Route
from responses_gateway.token_estimate import estimate
from responses_gateway.tools.catalog import catalog_of
from responses_gateway.tools.registry import SERVER_KINDS, ServerTools
from responses_gateway.tools.server import ServerCall
from responses_gateway.translate.response_object import usage_from_chat
from responses_gateway.translate.sealing import with_sealed_reasoning
from responses_gateway.translate.stream import Event, ResponseTranslator
from responses_gateway.translate.to_chat import turn_messages


class TurnHost(Protocol):
    """What the loop uses of the job that runs it (responses/job.py)."""

    gateway: Any  # settings (the bounds) and the sealer (reasoning sent back)
    record: Any
    translator: ResponseTranslator
    tools: ServerTools | None
    first_calls: list[ServerCall]
    metrics: ResponseMetrics
    deadline: Deadline
    chunks: AsyncIterator[list[Chunk]] | None
    backend_request: BackendRequest
    steering: Steering | None
    reasoning_input: str | None
    turn_step: int  # the current model turn's step in ``metrics`` (job._start_turn opens it)

    @property
    def response(self) -> dict[str, Any]: ...

    async def stored(self, events: list[Event]) -> list[Event]: ...

    async def start_next_turn(self) -> asyncio.Future[list[Chunk]]: ...


class TurnLoop:
    __slots__ = ("call_limit", "calls_run", "job", "output_bytes", "output_left", "pending",
                 "steered", "turn_start")

    def __init__(self, job: TurnHost) -> None:
        self.job = job
        self.pending: list[Event] = []
        self.steered = False  # a steer stopped the response at a safe point (steering.py)
        self.calls_run = 0  # calls the gateway ran
        self.output_bytes = 0  # JSON bytes of the items those calls made
        self.turn_start = 0  # output index where the current model turn's items begin
        settings = job.gateway.settings
        asked = job.response.get("max_tool_calls")
        self.call_limit = (settings.max_tool_calls if asked is None
                           else min(asked, settings.max_tool_calls))
        cap = job.response.get("max_output_tokens")
        #: what the model turns may still write of ``max_output_tokens`` (None: no cap)
        self.output_left: int | None = cap if isinstance(cap, int) and cap > 0 else None

    def _takes_images(self) -> bool:
        """Whether the model reads images: a generated one goes back to it as an image part
        in the next turn (fitting/vision.py), as it does in a later response."""
        job = self.job
        route = Route(job.record.request["backend"], str(job.backend_request.body["model"]))
        return bool(job.gateway.fitting.takes_images(job.response.get("model") or "", route))

    @property
    def exhausted(self) -> bool:
        """No more calls may run: the model is no longer offered the gateway's tools."""
        return (self.calls_run >= self.call_limit
                or self.output_bytes >= self.job.gateway.settings.max_tool_output_bytes)

    async def run(self, first: asyncio.Future[list[Chunk]]) -> AsyncIterator[list[Event]]:
        """Every batch up to the end of the last model turn (a terminal event only when an
        upstream error chunk ended the response)."""
        job = self.job
        translator = job.translator
        tools = job.tools
        feed = translator.feed
        metrics = job.metrics
        deadline = job.deadline
        steering = job.steering
        self.turn_start = len(translator.response["output"])
        first_calls = job.first_calls
        if first_calls:  # approved by the client last time: they run before the model
            async for events in self._run_calls(first_calls, limited=False):
                yield events
            if self.pending:
                events, self.pending = self.pending, []
                yield events
            if any(call.pauses for call in first_calls):
                translator.stop_for_client()  # a resumed program's next calls: no model turn
                return
            first = await self._next_turn()
        turns = 0
        while True:
            # One model turn's chunks through the translator, batch by batch: the hot path,
            # inline (no generator between it and the job's).
            pending = self.pending
            if steering is not None:
                steering.waiting = True  # before the turn's first read: a safe point
            try:
                # shield: a cancelled consumer must not cancel ``first`` itself (anyio repeats a
                # cancel, which would break httpx's shielded connection close); close() does.
                chunks: list[Chunk] | None = await deadline.wait(asyncio.shield(first))
            except StopAsyncIteration:
                chunks = None
            except asyncio.CancelledError:
                if steering is None or not steering.interrupted():
                    raise
                chunks = None
                self.steered = True
            finally:
                if steering is not None:
                    steering.waiting = False
            source = job.chunks
            assert source is not None
            while chunks is not None:
                for chunk in chunks:
                    pending += feed(chunk)
                    if translator.done:  # an upstream error chunk ended it
                        break
                if pending:
                    if metrics.waiting:
                        metrics.first_content()
                    if translator.done:
                        pending = await job.stored(pending)
                    events, pending = pending, []
                    self.pending = pending
                    yield events
                if translator.done:
                    return
                deadline.check()  # it passed while the consumer had the batch
                if steering is not None and steering.requested:
                    if (ack := steering.acknowledge(translator)):
                        self.pending = pending = pending + ack
                    if translator.steerable:
                        self.steered = True
                        return
                    steering.waiting = False
                elif steering is not None:
                    steering.waiting = translator.steerable  # a steer may cut this wait
                deadline.waiting = True  # as deadline.wait does, inline: this is per batch
                try:
                    chunks = await anext(source)
                except StopAsyncIteration:
                    chunks = None
                except asyncio.CancelledError:
                    error = deadline.failure()
                    if error is None:
                        if steering is None or not steering.interrupted():
                            raise
                        self.steered = True
                        return
                    raise error from None
                finally:
                    if steering is not None:
                        steering.waiting = False
                    deadline.waiting = False
            # The turn's stream ended: its step and span close (one that failed is closed
            # with the response's error as the job ends: ResponseMetrics.timing).
            metrics.turn_closed(job.turn_step, translator.turn_usage, translator.finish_reason)
            if translator.done or tools is None or not translator.wants_tool_turn:
                return
            # The model called tools the gateway runs: their items, then the next turn.
            usage = translator.turn_usage
            self.pending += translator.end_turn()
            calls = translator.server_calls
            self._spend_output(usage, calls)
            stop = translator.client_calls > 0  # the client must answer its own calls
            if self.output_left == 0 and not stop:
                translator.stop_at_output_limit()  # no turn may follow to read the calls
                return
            async for events in self._run_calls(calls, limited=True):
                yield events
            ran = sum(1 for call in calls if call.extra.get("ran"))
            stop = stop or any(call.pauses for call in calls)
            if self.pending:
                events, self.pending = self.pending, []
                yield events
            turns += 1
            if stop or not ran or turns >= job.gateway.settings.max_tool_turns:
                return  # (a model that calls past max_tool_calls is not asked again)
            if steering is not None and steering.requested:  # between model turns: safe
                self.pending += steering.acknowledge(translator)
                translator.next_turn()
                self.steered = True
                return
            first = await self._next_turn()

    async def _run_calls(
        self, calls: list[ServerCall], *, limited: bool
    ) -> AsyncIterator[list[Event]]:
        """Each call by the tool that offered it; past the bounds none runs."""
        job = self.job
        tools = job.tools
        assert tools is not None
        output = job.translator.response["output"]
        for call in calls:
            if limited and self.exhausted:
                continue  # no more calls (and the tools are no longer offered)
            call.extra["ran"] = True
            call.extra["calls_left"] = max(0, self.call_limit - self.calls_run - 1)
            made = len(output)
            step = job.metrics.call_opened(call)  # its step in the timeline, its span
            cut: str | None = "cancelled"
            runner = tools.run(call, job.translator)
            try:
                while True:
                    try:
                        batch = await job.deadline.wait(anext(runner))
                    except StopAsyncIteration:
                        break
                    events, self.pending = self.pending + batch, []
                    yield events
                cut = None
            except Exception as exc:
                cut = getattr(exc, "code", None) or type(exc).__name__
                raise
            finally:
                with contextlib.suppress(Exception):
                    await runner.aclose()
                # counted even when the response then fails (a deadline during its item)
                job.translator.add_tool_usage(call.usage)
                job.metrics.call_closed(call, step, output[made:], cut)
            if not call.pauses:
                self.calls_run += 1
            self.calls_run += call.made  # a program's own calls count too
            self.output_bytes += sum(len(orjson.dumps(item)) for item in output[made:])

    def _spend_output(self, usage: dict[str, Any] | None, calls: list[ServerCall]) -> None:
        """Count the model turn that just ended against ``max_output_tokens``: its output
        tokens as the upstream reported them (``usage``), else (none sent) the estimate of its
        items and of the calls it wrote for the gateway."""
        if self.output_left is None:
            return
        if usage is not None:
            spent = usage_from_chat(usage)["output_tokens"]
        else:
            spent = (estimate(self.job.translator.response["output"][self.turn_start:])
                     + sum(estimate(call.arguments) for call in calls))
        self.output_left = max(0, self.output_left - spent)

    async def _next_turn(self) -> asyncio.Future[list[Chunk]]:
        """The next model turn: the chat request gets this turn's output (its text, reasoning
        and the calls the gateway ran with their results) and goes upstream again."""
        job = self.job
        translator = job.translator
        translator.next_turn()
        items = with_sealed_reasoning(translator.response["output"][self.turn_start:],
                                      translator.sealed_reasoning)
        self.turn_start = len(translator.response["output"])
        added = turn_messages(
            items, catalog=catalog_of(translator.options.tools or {}),
            reasoning_input=job.reasoning_input,
            unseal=partial(job.gateway.sealer.unseal, tenant=job.record.tenant),
            images=self._takes_images(),
            reads=job.tools.reads() if job.tools is not None else None,  # what the calls read
        )
        body = job.backend_request.body
        messages = body["messages"] = list(body["messages"])  # the record's own stays as it was
        last = messages[-1] if messages else None
        if (added and last is not None and last.get("role") == "assistant"
                and not last.get("tool_calls") and added[0].get("role") == "assistant"
                and not added[0].get("content")):
            # Calls approved in the previous response belong to its last assistant turn.
            messages[-1] = {**last, **{k: v for k, v in added[0].items() if v is not None}}
            added = added[1:]
        messages.extend(added)
        if body.get("tool_choice") not in (None, "auto", "none"):
            # A forced choice ("required", one tool) is for the first model turn: forced
            # again, the model could never answer after the tools it called have run.
            body["tool_choice"] = "auto"
        if self.exhausted:
            _drop_server_functions(body, translator.options.tools or {})
        if self.output_left is not None:  # what the earlier turns left of max_output_tokens
            body.pop("max_tokens", None)
            body["max_completion_tokens"] = self.output_left
        return await job.start_next_turn()


def _drop_server_functions(body: dict[str, object], specs: dict[str, object]) -> None:
    """``max_tool_calls`` reached: the model is no longer offered the gateway's tools."""
    kept = [t for t in body.get("tools") or ()  # type: ignore[attr-defined]
            if getattr(specs.get(t["function"]["name"]), "kind", None) not in SERVER_KINDS]
    body["tools"] = kept
    if not kept:
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            body.pop(key, None)

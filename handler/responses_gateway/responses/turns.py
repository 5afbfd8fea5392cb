"""The turn loop: a model turn, then the calls the gateway runs, then the next model turn.

It owns the order and the bounds across turns (``max_tool_calls``, ``MAX_TOOL_TURNS``); the
job owns the upstream request, the deadline and persistence (responses/job.py); each server
tool owns its items and events (tools/server.py). One translator serves every turn, so ids,
output indexes and sequence numbers continue and usage is summed.

``pending`` holds events produced and not yet handed on: a failure mid-batch keeps them (the
job sends them before its failure). Batches are handed on whenever the loop is about to wait,
so a client sees a tool's item open while the tool runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING

from responses_gateway.backends.base import Chunk
from responses_gateway.tools.catalog import catalog_of
from responses_gateway.tools.registry import SERVER_KINDS
from responses_gateway.tools.server import ServerCall
from responses_gateway.translate.sealing import with_sealed_reasoning
from responses_gateway.translate.stream import Event
from responses_gateway.translate.to_chat import turn_messages

if TYPE_CHECKING:
    from responses_gateway.responses.job import Job

#: Model turns with tool calls the gateway runs in one response, at most (a model that never
#: stops calling tools ends there, with what it produced; max_tool_calls bounds it sooner).
MAX_TOOL_TURNS = 64


class TurnLoop:
    __slots__ = ("calls_run", "job", "pending", "turn_start")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.pending: list[Event] = []
        self.calls_run = 0  # calls the gateway ran, for max_tool_calls
        self.turn_start = 0  # output index where the current model turn's items begin

    async def run(self, first: asyncio.Future[list[Chunk]]) -> AsyncIterator[list[Event]]:
        """Every batch up to the end of the last model turn (a terminal event only when an
        upstream error chunk ended the response)."""
        job = self.job
        translator = job.translator
        tools = job.tools
        self.turn_start = len(translator.response["output"])
        first_calls = job.first_calls
        if first_calls:  # approved by the client last time: they run before the model
            async for events in self._run_calls(first_calls, limited=False):
                yield events
            if self.pending:
                events, self.pending = self.pending, []
                yield events
            first = await self._next_turn()
        turns = 0
        while True:
            async for events in self._model_turn(first):
                yield events
            if translator.done or tools is None or not translator.wants_tool_turn:
                return
            # The model called tools the gateway runs: their items, then the next turn.
            self.pending += translator.end_turn()
            calls = translator.server_calls
            stop = translator.client_calls > 0  # the client must answer its own calls
            ran = 0
            async for events in self._run_calls(calls, limited=True):
                yield events
            ran = sum(1 for call in calls if call.extra.get("ran"))
            stop = stop or any(call.pauses for call in calls)
            if self.pending:
                events, self.pending = self.pending, []
                yield events
            turns += 1
            if stop or not ran or turns >= MAX_TOOL_TURNS:
                return  # (a model that calls past max_tool_calls is not asked again)
            first = await self._next_turn()

    async def _model_turn(self, first: asyncio.Future[list[Chunk]]) -> AsyncIterator[list[Event]]:
        """One model turn's chunks through the translator, batch by batch (the hot path)."""
        job = self.job
        translator = job.translator
        feed = translator.feed
        metrics = job.metrics
        deadline = job.deadline
        pending = self.pending
        try:
            # shield: a cancelled consumer must not cancel ``first`` itself (anyio repeats a
            # cancel, which would break httpx's shielded connection close); close() does.
            chunks: list[Chunk] | None = await deadline.wait(asyncio.shield(first))
        except StopAsyncIteration:
            chunks = None
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
            deadline.waiting = True  # as deadline.wait does, inline: this is per batch
            try:
                chunks = await anext(source)
            except StopAsyncIteration:
                chunks = None
            except asyncio.CancelledError:
                error = deadline.failure()
                if error is None:
                    raise
                raise error from None
            finally:
                deadline.waiting = False

    async def _run_calls(
        self, calls: list[ServerCall], *, limited: bool
    ) -> AsyncIterator[list[Event]]:
        """Each call by the tool that offered it; past ``max_tool_calls`` none runs."""
        job = self.job
        tools = job.tools
        assert tools is not None
        limit = job.response.get("max_tool_calls")
        for call in calls:
            if limited and limit is not None and self.calls_run >= limit:
                continue  # max_tool_calls: no more calls (and the tools are no longer offered)
            call.extra["ran"] = True
            runner = tools.run(call, job.translator)
            try:
                while True:
                    try:
                        batch = await job.deadline.wait(anext(runner))
                    except StopAsyncIteration:
                        break
                    events, self.pending = self.pending + batch, []
                    yield events
            finally:
                with contextlib.suppress(Exception):
                    await runner.aclose()
            if not call.pauses:
                self.calls_run += 1

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
        limit = job.response.get("max_tool_calls")
        if limit is not None and self.calls_run >= limit:
            _drop_server_functions(body, translator.options.tools or {})
        return await job.start_next_turn()


def _drop_server_functions(body: dict[str, object], specs: dict[str, object]) -> None:
    """``max_tool_calls`` reached: the model is no longer offered the gateway's tools."""
    kept = [t for t in body.get("tools") or ()  # type: ignore[attr-defined]
            if getattr(specs.get(t["function"]["name"]), "kind", None) not in SERVER_KINDS]
    body["tools"] = kept
    if not kept:
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            body.pop(key, None)

"""Compaction: a window of items becomes the user messages it kept plus one ``compaction`` item
whose sealed content is a summary the backend model wrote of it.

Used by ``POST /v1/responses/compact`` (api/context_routes.py), by ``context_management`` on
create and by a ``compaction_trigger`` input item (fit.py), all through :class:`~.fit.Fitting`.
The summary comes from one non-streaming chat call to the request's own model through its own
backend, the window rendered as for a create (render.py's ``summarising``: to_chat.py, earlier
compaction items included) with :data:`SUMMARY_PROMPT` after it; the item made of it, and what
the model reads of the items, are translate/compaction_items.py's. A window larger than the
model can read is summarised in consecutive parts, cut where cuts.py allows, each part's
summary carried into the next, within the bounds of compaction_bounds.py (input size,
summarising calls, time; it stops when its client leaves). For a heavy conversation
(heavy.py) the plan (its items opened, sized and cut into parts: ~270 ms for 175,000 items)
and the window kept after the summary are made in a worker thread (:func:`plan`).
The output follows OpenAI's: "a list of all user messages, followed by a single compaction
item"; when the context window is known, the user messages kept are the newest that fit in a
quarter of it (the latest always), the others being in the summary.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.backends.base import Backend, BackendRequest
from responses_gateway.errors import UpstreamError
from responses_gateway.records import Compared
from responses_gateway.responses.fitting import cuts, tokens
from responses_gateway.responses.fitting.compaction_bounds import (
    CompactionLimits,
    Departure,
    bounded,
)
from responses_gateway.responses.fitting.render import Fitted, Renderer
from responses_gateway.translate import compaction_items
from responses_gateway.translate.response_object import usage_from_chat

SUMMARY_PROMPT = (
    "Context checkpoint. Write a summary of the conversation above for another model that "
    "will continue it without seeing it. Keep everything needed to go on: the user's goals "
    "and constraints, decisions made, facts, names, numbers and identifiers learnt, tool calls "
    "made and what they returned, work done, and what remains to do. Be concise and concrete. "
    "Answer with the summary only."
)
#: Kept user messages take at most this share of a known context window.
KEEP_SHARE = 0.25
#: One summarising call reads at most this share of the window (the rest: prompt and summary).
READ_SHARE = 0.6
#: A summary may be at most this share of the window (and at most SUMMARY_MAX_TOKENS).
SUMMARY_SHARE = 0.2
SUMMARY_MAX_TOKENS = 4096


class Compacted(Compared):
    """A compaction's result: the window that replaces the history, and what it cost (a
    record: records.py)."""

    __slots__ = ("item", "usage", "window")

    window: list[dict[str, Any]]  # the kept user messages, then ``item``
    item: dict[str, Any]  # the compaction item
    usage: dict[str, Any]  # Responses usage of the summarising calls

    def __init__(self, window: list[dict[str, Any]], item: dict[str, Any],
                 usage: dict[str, Any] | None = None) -> None:
        self.window = window
        self.item = item
        self.usage = {} if usage is None else usage


class Planned:
    """A compaction checked against its bounds (the input's size, the summarising calls its
    parts need), none of its calls made yet: :meth:`run` makes them. Checked first so that a
    stream that compacts after ``response.created`` still refuses these as HTTP errors."""

    __slots__ = ("item_id", "limits", "parts", "render", "seal", "summariser", "visible",
                 "window")

    def __init__(self, render: Renderer, backend: Backend, seal: compaction_items.Seal, *,
                 window: int | None, limits: CompactionLimits) -> None:
        self.render, self.seal, self.window, self.limits = render, seal, window, limits
        self.summariser = _Summariser(backend, render, window, limits)
        self.visible = compaction_items.visible(render.items, render.unseal)
        limits.check_input(sum(map(len, map(orjson.dumps, self.visible))))
        self.parts = cuts.parts(self.visible,
                                None if window is None else int(window * READ_SHARE))
        limits.check_calls(len(self.parts), window)
        #: the compaction item's id, known before its summary (a stream names it first)
        self.item_id = compaction_items.new_id()

    async def run(self, left: Departure | None = None) -> Compacted:
        """The summarising calls, bounded in time; ``left``: the client's departure."""
        summary = await bounded(self.summariser.run(self.parts), self.limits, left)
        window = self.window
        args = (summary, self.visible, None if window is None else int(window * KEEP_SHARE),
                self.seal, self.item_id)
        new_window = compaction_items.new_window
        kept = (await asyncio.to_thread(new_window, *args) if self.render.heavy
                else new_window(*args))
        return Compacted(window=kept, item=kept[-1], usage=self.summariser.usage)

    async def fitted(self, *, left: Departure | None = None, model_runs: bool = True) -> Fitted:
        """A create's conversation compacted and rendered with the compaction item as the
        response's first output item; ``model_runs=False`` (a ``compaction_trigger``): the
        item is the only output, the model does not run."""
        result = await self.run(left)
        fitted = await self.render.rendered(output_items=[result.item])
        fitted.usage = result.usage
        fitted.model_runs = model_runs
        return fitted


async def plan(render: Renderer, backend: Backend, seal: compaction_items.Seal, *,
               window: int | None, limits: CompactionLimits) -> Planned:
    """A :class:`Planned` compaction of ``render``'s conversation, made in a worker thread
    when it is heavy (its bounds' errors raised the same)."""
    if render.heavy:
        return await asyncio.to_thread(Planned, render, backend, seal, window=window,
                                       limits=limits)
    return Planned(render, backend, seal, window=window, limits=limits)


async def compact(
    render: Renderer,
    backend: Backend,
    seal: compaction_items.Seal,
    *,
    window: int | None,
    limits: CompactionLimits,
    left: Departure | None = None,
) -> Compacted:
    """Summarise the conversation ``render`` holds (earlier compaction items included) with
    its route's model on ``backend``; ``seal``: the tenant's, for the compaction item.

    Within ``limits`` (compaction_bounds.py): the input's size and the summarising calls its
    parts need are checked before the first call (:class:`Planned`); the time it takes and
    its client leaving (``left``) cancel the call under way. What the model reads of the
    items, and the item made of the summary, are compaction_items.py's; where the window is
    cut into parts is cuts.py's.
    """
    return await (await plan(render, backend, seal, window=window, limits=limits)).run(left)


def response_of(result: Compacted) -> dict[str, Any]:
    """The ``response.compaction`` object ``POST /v1/responses/compact`` answers with."""
    return {
        "id": ids.new_id(ids.RESPONSE),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": result.window,
        "usage": result.usage,
    }


class _Summariser:
    """Summarises consecutive parts, each part's summary leading the next; counts its calls
    against ``limits.calls`` before each one."""

    def __init__(self, backend: Backend, render: Renderer, window: int | None,
                 limits: CompactionLimits) -> None:
        self.backend, self.render, self.window, self.limits = backend, render, window, limits
        #: a summary may take a fifth of the window, at most SUMMARY_MAX_TOKENS
        self.max_tokens = SUMMARY_MAX_TOKENS if window is None else max(
            64, min(SUMMARY_MAX_TOKENS, int(window * SUMMARY_SHARE)))
        #: Responses usage of the summarising calls so far, added up as each one ends
        self.usage: dict[str, Any] = usage_from_chat({})
        self._planned = 0  # calls made and still to make

    async def run(self, parts: list[list[dict[str, Any]]]) -> str:
        self._planned = len(parts)
        summary = ""
        for part in parts:
            summary = await self._part(part, summary)
        return summary

    async def _part(self, part: list[dict[str, Any]], earlier: str) -> str:
        """The summary of ``part`` after ``earlier``; a part the model cannot read whole (its
        exact count, where the backend counts, says so) is summarised in two halves."""
        window = self.window
        body = self.render.summarising(part, earlier=earlier, prompt=SUMMARY_PROMPT,
                                       max_tokens=self.max_tokens)
        if window is not None and len(part) > 1:
            counted = await tokens.count(self.backend, body)
            if counted.tokens + body["max_completion_tokens"] > window:
                cut = cuts.middle(part)
                if 0 < cut < len(part):
                    self._planned += 1
                    self.limits.check_calls(self._planned, window)
                    earlier = await self._part(part[:cut], earlier)
                    return await self._part(part[cut:], earlier)
        # one summarising call; what it cost is added to the usage
        request = BackendRequest(body=body, tenant=self.render.tenant, stream=False)
        await self.backend.prepare(request)
        completion: Any = None
        async for batch in self.backend.stream(request):
            for chunk in batch:  # backends may hand over raw JSON bytes
                completion = orjson.loads(chunk) if isinstance(chunk, bytes | bytearray) else chunk
        return _text_of(completion, self.usage)


def _text_of(completion: Any, usage: dict[str, Any]) -> str:
    """The summary a chat completion holds (its usage added to ``usage``); a 502 for an
    error or no text."""
    error = completion.get("error") if isinstance(completion, dict) else None
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise UpstreamError(502, f"Upstream error: {message}", code="upstream_error")
    choices = (completion.get("choices") if isinstance(completion, dict) else None) or []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = content.strip() if isinstance(content, str) else ""
    if not text:
        raise UpstreamError(
            502, "Upstream error: the model wrote no summary for the compaction.",
            code="upstream_error")
    used = usage_from_chat(completion.get("usage") if isinstance(completion.get("usage"), dict)
                           else {})
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        usage[key] += used[key]
    for group in ("input_tokens_details", "output_tokens_details"):
        for key in usage[group]:
            usage[group][key] += used[group][key]
    return text


__all__ = ["Compacted", "Planned", "compact", "plan", "response_of"]

"""Where a window of conversation items may be cut, and the cuts fitting makes by it.

The one rule: never separate a call from its output, nor reasoning from what it preceded (a
model sent one without the other refuses it or loses its thread). A ``program`` is a call
whose output is its ``program_output``, and the program's own calls (a gateway's
``mcp_call`` among them) stand between them: nothing is cut inside. Compaction splits a window
into the parts its summarising calls read (:func:`parts`, :func:`middle`); truncation leaves
the oldest items out up to a point the rule allows (:func:`truncate`). Deciding
to cut is fit.py's; rendering is render.py's, counting tokens.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import Backend
from responses_gateway.responses.fitting import tokens
from responses_gateway.token_estimate import estimate, estimate_chat
from responses_gateway.tools import client_tools
from responses_gateway.tools.programmatic import PROGRAM, PROGRAM_OUTPUT
from responses_gateway.translate import compaction_items

if TYPE_CHECKING:
    from responses_gateway.responses.fitting.render import Fitted, Renderer

# Tools the client runs pair the same way (shell_call with shell_call_output...).
CALLS = ("function_call", "custom_tool_call", *client_tools.PAIRS)
OUTPUTS = ("function_call_output", "custom_tool_call_output", *client_tools.PAIRS.values())
#: Truncation counts at most this many times before it gives up.
_MAX_ROUNDS = 16


class Cuts:
    """Fed items in order, says whether a cut after those fed so far keeps the rule."""

    __slots__ = ("_after_reasoning", "open_calls")

    def __init__(self) -> None:
        self.open_calls: set[str] = set()  # calls fed whose output has not come yet
        self._after_reasoning = False

    def add(self, item: dict[str, Any]) -> None:
        kind, call_id = item.get("type"), item.get("call_id")
        if (kind in CALLS and isinstance(call_id, str)) or kind == PROGRAM:
            self.open_calls.add(str(call_id))
        elif kind == PROGRAM_OUTPUT:
            self.open_calls.discard(str(call_id))
        elif kind in OUTPUTS:
            # a local_shell_call_output names its call by ``id`` (client_tools.output_call_id)
            self.open_calls.discard(client_tools.output_call_id(item))
        self._after_reasoning = kind == "reasoning"

    @property
    def allowed(self) -> bool:
        return not self.open_calls and not self._after_reasoning


def cut_points(items: Sequence[dict[str, Any]]) -> list[int]:
    """Every index ``i`` (0 < i < len) where ``items[:i]`` and ``items[i:]`` keep the rule."""
    cuts = Cuts()
    points: list[int] = []
    for index, item in enumerate(items):
        if index and cuts.allowed:
            points.append(index)
        cuts.add(item)
    return points


# -- compaction: the parts a window is summarised in -----------------------------------------


def parts(items: list[dict[str, Any]], budget: int | None) -> list[list[dict[str, Any]]]:
    """Consecutive parts of about ``budget`` estimated tokens each (one part when it is
    None), cut where the rule allows."""
    if budget is None or not items:
        return [items]
    budget = max(1, budget)
    split: list[list[dict[str, Any]]] = [[]]
    size = 0
    cuts = Cuts()
    for item in items:
        cost = estimate(item)
        if split[-1] and cuts.allowed and size + cost > budget:
            split.append([])
            size = 0
        split[-1].append(item)
        size += cost
        cuts.add(item)
    return split


def middle(part: Sequence[dict[str, Any]]) -> int:
    """The index nearest the middle where ``part`` splits by the rule (0: nowhere)."""
    return min(cut_points(part), key=lambda c: abs(2 * c - len(part)), default=0)


# -- truncation: the oldest items left out ---------------------------------------------------


async def truncate(render: Renderer, backend: Backend, fitted: Fitted, counted: tokens.Count,
                   budget: int, window: int) -> Fitted:
    """Leave out the oldest items of ``render``'s conversation until the count fits
    ``budget`` (each round counted again, exact where ``backend`` counts); OpenAI's 400
    ``context_length_exceeded`` when nothing more may go."""
    items, output_items, heavy = render.items, fitted.output_items, render.heavy
    # (a heavy conversation's walks in a worker thread: heavy.py)
    candidates = (await asyncio.to_thread(droppable, items, output_items) if heavy
                  else droppable(items, output_items))
    omit: set[int] = set()
    for _ in range(_MAX_ROUNDS):
        # Estimates of the items scaled to the count: the rest of the request (tools,
        # instructions, the template) is not what leaving items out saves.
        estimated = (await asyncio.to_thread(estimate_chat, fitted.chat) if heavy
                     else estimate_chat(fitted.chat))
        scale = max(1.0, counted.tokens / max(1, estimated))
        # A little past the excess: a count per round is a round trip upstream.
        wanted = (counted.tokens - budget) / scale * 1.2 + 1
        more = (await asyncio.to_thread(drop, items, candidates, omit, wanted) if heavy
                else drop(items, candidates, omit, wanted))
        if not more:
            break
        omit |= more
        fitted = await render.rendered(omit=omit, output_items=output_items)
        counted = await tokens.count(backend, fitted.chat, fitted.message_params)
        if counted.tokens <= budget:
            return fitted
    raise tokens.context_length_exceeded(counted.tokens, window)


def droppable(items: list[dict[str, Any]], output_items: Sequence[dict[str, Any]]) -> list[int]:
    """Indexes truncation may leave out, oldest first: before the latest user message, not
    ``system``/``developer`` messages, not what a compaction item already stands for (the
    model does not see it, so leaving it out saves nothing; the user messages it kept are
    seen)."""
    last_user = max((i for i, item in enumerate(items) if compaction_items.is_role(item, "user")),
                    default=len(items))
    hidden_before = compaction_items.latest([*items, *output_items])
    return [
        i for i in range(min(last_user, len(items)))
        if not compaction_items.is_role(items[i], "system", "developer")
        and not (i < hidden_before and not compaction_items.is_role(items[i], "user"))
    ]


def drop(items: list[dict[str, Any]], candidates: list[int], omit: set[int],
         excess: float) -> set[int]:
    """The next oldest ``candidates`` to leave out, at least ``excess`` estimated tokens,
    ending where the rule allows."""
    chosen: set[int] = set()
    saved = 0
    cuts = Cuts()
    for index in candidates:
        if index in omit:
            continue
        item = items[index]
        chosen.add(index)
        saved += estimate(item)
        cuts.add(item)
        if saved >= excess and cuts.allowed:
            return chosen
    if cuts.open_calls:  # a call whose output is in the latest turn: it must stay, and its own
        # and an open program with all that followed it (its calls)
        start = min((i for i in chosen if items[i].get("type") == PROGRAM
                     and items[i].get("call_id") in cuts.open_calls), default=len(items))
        chosen = {i for i in chosen
                  if i < start and items[i].get("call_id") not in cuts.open_calls}
    return chosen

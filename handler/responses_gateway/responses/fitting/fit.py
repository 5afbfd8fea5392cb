"""Fitting a create's input to the model: ``context_management`` compaction, ``truncation``.

:class:`Fitting` is the one home of it, owned by the Gateway (``gateway.fitting``): it renders
the conversation (:meth:`Fitting.fit`), which may first compact it (the rendered input passed
``compact_threshold``: the compaction item becomes the response's first output item and stands,
for the model, for everything before it) and then:

- ``truncation: "auto"``: leaves out the oldest items until the input fits the context window
  less room to answer (``max_output_tokens``, else a tenth of the window). Never the
  instructions or ``system``/``developer`` messages, never the latest user message or what
  follows it, never against the cut rule (cuts.py, which does it). Items are left out of what
  the model reads, not of what is stored.
- ``truncation: "disabled"`` (the default): an input over the window is OpenAI's 400
  ``context_length_exceeded``.

A ``compaction_trigger`` as the final input item compacts everything before it whatever the
threshold, and the compaction item is then the response's only output (``model_runs``).
Compaction is bounded (compaction_bounds.py); its summarising calls' usage goes into the response's.

Without a known window (windows.py) and without ``context_management`` this costs nothing
beyond the render. Counts are exact where the backend counts (tokens.py); the estimate screens
first, so a request far below the window is never counted upstream.

This module decides; each step is one call down, never back: render.py renders,
compaction.py summarises (the item's shape: translate/compaction_items.py), cuts.py truncates,
tokens.py counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import Backend
from responses_gateway.config import Route
from responses_gateway.responses.fitting import compaction, cuts, tokens, vision
from responses_gateway.responses.fitting.compaction_bounds import CompactionLimits, Departure
from responses_gateway.responses.fitting.render import Fitted, Pending, Renderer
from responses_gateway.responses.fitting.windows import ContextWindows
from responses_gateway.translate import compaction_items
from responses_gateway.translate.sealing import Sealer

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest

__all__ = ["Fitted", "Fitting", "Pending"]

#: Share of the window ``context_management`` compacts past when ``compact_threshold`` is null.
DEFAULT_THRESHOLD_SHARE = 0.8


class Fitting:
    """Renders, compacts, truncates and counts a conversation for its route's backend.

    ``windows``: the operator's context windows by model name (``GATEWAY_CONTEXT_WINDOWS``);
    ``reasoning_input``: the operator's ``GATEWAY_REASONING_INPUT``, which each backend may
    overrule (``Backend.reasoning_input``); ``limits``: what one compaction may cost
    (compaction_bounds.py); ``vision``: ``GATEWAY_VISION_MODELS`` (vision.py: which models
    read images).
    """

    def __init__(
        self,
        backend_for: Callable[[str], Backend],
        sealer: Sealer,
        *,
        windows: Mapping[str, int],
        reasoning_input: str | None,
        limits: CompactionLimits | None = None,
        vision: Sequence[str] = (),
    ) -> None:
        self._backend_for = backend_for
        self._vision = tuple(vision)
        self._sealer = sealer
        self._reasoning_input = reasoning_input
        self.limits = limits or CompactionLimits()
        self.windows = ContextWindows(windows, backend_for)

    def takes_images(self, client_model: str, route: Route) -> bool:
        """Whether the route's model reads images (a generated image goes back as one)."""
        return vision.takes_images(self._vision, client_model, route.model,
                                   self._backend_for(route.backend))

    async def fit(
        self,
        req: CreateResponseRequest,
        route: Route,
        items: list[dict[str, Any]],
        tenant: str,
        *,
        new_catalog: Callable[[], Any] | None = None,
        left: Departure | None = None,
        reads: Mapping[str, str] | None = None,
        defer: bool = False,
        heavy: bool,
    ) -> Fitted:
        """The chat body for ``items`` (history and this turn's input), fitted to the model.
        ``new_catalog`` makes the tool catalog each render fills (to_chat.py); ``left``: the
        client's departure, which stops a foreground create's compaction (compaction_bounds.py);
        ``reads``: what server tools' calls among the items gave the model (tools/reads.py).

        ``defer`` (a foreground stream): a compaction decided here is checked against its
        bounds but not run; the uncompacted render comes back with ``pending`` (render.py's
        :class:`Pending`), which the stream runs after ``response.created``, so that
        ``response.compaction.compacting`` leaves while the summary is written."""
        entry = next((e for e in req.context_management or () if e.type == "compaction"), None)
        left = None if req.background else left  # a background response's compaction runs on
        backend, render = self._renderer(req, route, items, tenant, new_catalog, reads, heavy)
        fitted = await render.rendered()
        window = await self.windows.window(req.model, route)

        async def planned() -> compaction.Planned:  # the bounds checked, no call made yet
            return await compaction.plan(render, backend,
                                         partial(self._sealer.seal, tenant=tenant),
                                         window=window, limits=self.limits)

        # a look at every input item (~22 ms for 185,000: off the loop when heavy)
        trigger = compaction_items.trigger_requested
        if (await asyncio.to_thread(trigger, req.input, items) if render.heavy
                else trigger(req.input, items)):
            plan = await planned()
            fitted.model_runs = False
            if defer:
                fitted.pending = Pending(plan.item_id, partial(plan.fitted, model_runs=False))
                return fitted
            return await plan.fitted(left=left, model_runs=False)
        if entry is None and window is None:
            return fitted
        compactable = entry is not None and compaction_items.compactable(items)
        counted: tokens.Count | None = None
        threshold = entry.compact_threshold if entry is not None else None
        if threshold is None and entry is not None and window is not None:
            threshold = int(window * DEFAULT_THRESHOLD_SHARE)
        if threshold is not None:
            counted = await tokens.count_unless_within(backend, fitted.chat, threshold,
                                                       fitted.message_params)
            if counted is not None and counted.tokens > threshold and compactable:
                plan = await planned()
                if defer:
                    fitted.pending = Pending(plan.item_id, partial(
                        self._compacted_within, plan, req, render, backend, window))
                    return fitted
                fitted, counted = await plan.fitted(left=left), None
        return await self._within(req, render, backend, fitted, window, counted)

    async def _compacted_within(self, plan: compaction.Planned, req: CreateResponseRequest,
                                render: Renderer, backend: Backend,
                                window: int | None) -> Fitted:
        """A deferred compaction run, then the window's rule on what it left."""
        fitted = await plan.fitted()
        return await self._within(req, render, backend, fitted, window, None)

    async def _within(self, req: CreateResponseRequest, render: Renderer, backend: Backend,
                      fitted: Fitted, window: int | None,
                      counted: tokens.Count | None) -> Fitted:
        """``fitted`` as the window allows: as it is, truncated (``truncation: "auto"``), or
        OpenAI's 400 ``context_length_exceeded``; ``counted``: its count, when known."""
        if window is None:
            return fitted
        auto = req.truncation == "auto"
        # under "auto", room is left for the answer: max_output_tokens, else a tenth
        budget = (window - min(req.max_output_tokens or window // 10, window // 2) if auto
                  else window)
        if counted is None:
            counted = await tokens.count_unless_within(backend, fitted.chat, budget,
                                                       fitted.message_params)
            if counted is None:  # clearly within: not counted
                return fitted
        if counted.tokens <= budget:
            return fitted
        if not auto:
            raise tokens.context_length_exceeded(counted.tokens, window)
        return await cuts.truncate(render, backend, fitted, counted, budget, window)

    async def render(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]], tenant: str,
        reads: Mapping[str, str] | None = None, *, heavy: bool,
    ) -> Fitted:
        """The chat body for ``items`` as they are, neither compacted nor truncated."""
        return await self._renderer(req, route, items, tenant, None, reads,
                                    heavy)[1].rendered()

    async def compact(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]],
        tenant: str, *, left: Departure | None = None, reads: Mapping[str, str] | None = None,
        heavy: bool,
    ) -> compaction.Compacted:
        """``items`` summarised into one compaction item (``POST /v1/responses/compact``);
        ``left``: the client's departure, which stops it."""
        backend, render = self._renderer(req, route, items, tenant, None, reads, heavy)
        return await compaction.compact(
            render, backend, partial(self._sealer.seal, tenant=tenant),
            window=await self.windows.window(req.model, route), limits=self.limits, left=left)

    async def count(self, route: Route, chat: dict[str, Any]) -> tokens.Count:
        """The input tokens of a rendered chat body for the route's backend."""
        return await tokens.count(self._backend_for(route.backend), chat)

    def _renderer(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]],
        tenant: str, new_catalog: Callable[[], Any] | None,
        reads: Mapping[str, str] | None, heavy: bool,
    ) -> tuple[Backend, Renderer]:
        """The route's backend, and the renderer of ``items`` for its model (``heavy``: their
        weight, heavy.py, as the caller that assembled them decided it)."""
        backend = self._backend_for(route.backend)
        return backend, Renderer(
            req, route, items, tenant, partial(self._sealer.unseal, tenant=tenant), backend,
            reasoning_input=self._reasoning_input, vision_models=self._vision,
            new_catalog=new_catalog, reads=reads, heavy=heavy)

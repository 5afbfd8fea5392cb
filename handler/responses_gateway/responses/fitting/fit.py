"""Fitting a create's input to the model: ``context_management`` compaction, ``truncation``.

:class:`Fitting` is the one home of it, owned by the Gateway (``gateway.fitting``): it renders
the conversation (:meth:`Fitting.fit`), which may first compact it (the rendered input passed
``compact_threshold``: the compaction item becomes the response's first output item and stands,
for the model, for everything before it) and then:

- ``truncation: "auto"``: leaves out the oldest items until the input fits the context window
  less room to answer (``max_output_tokens``, else a tenth of the window). Never the
  instructions or ``system``/``developer`` messages, never the latest user message or what
  follows it, never against the cut rule (cuts.py). Items are left out of what the model
  reads, not of what is stored.
- ``truncation: "disabled"`` (the default): an input over the window is OpenAI's 400
  ``context_length_exceeded``.

A ``compaction_trigger`` as the final input item compacts everything before it whatever the
threshold, and the compaction item is then the response's only output (``model_runs``).
Compaction is bounded (compaction_bounds.py); its summarising calls' usage goes into the response's.

Without a known window (windows.py) and without ``context_management`` this costs nothing
beyond the render. Counts are exact where the backend counts (tokens.py); the estimate screens
first, so a request far below the window is never counted upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import Backend
from responses_gateway.config import Route
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.responses.fitting import compaction, tokens, vision
from responses_gateway.responses.fitting.compaction_bounds import CompactionLimits, Departure
from responses_gateway.responses.fitting.cuts import Cuts
from responses_gateway.responses.fitting.windows import ContextWindows
from responses_gateway.token_estimate import estimate, estimate_chat
from responses_gateway.translate import compaction_items
from responses_gateway.translate.sealing import Sealer
from responses_gateway.translate.to_chat import client_param, to_chat_request

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest

#: Share of the window ``context_management`` compacts past when ``compact_threshold`` is null.
DEFAULT_THRESHOLD_SHARE = 0.8
#: An estimate this many times below the budget is trusted without an exact count.
_SAFE_FACTOR = 1.5
_MAX_ROUNDS = 16


def context_length_exceeded(tokens_used: int, window: int) -> GatewayError:
    return invalid_request(
        f"Your input exceeds the context window of this model ({tokens_used} tokens; the "
        f"window holds {window}). Please adjust your input and try again, or set "
        "'truncation' to 'auto'.",
        param="input",
        code="context_length_exceeded",
    )


@dataclass
class Fitted:
    """A conversation fitted to its route: the chat body to send, and what fitting made."""

    chat: dict[str, Any]
    message_params: list[str]
    output_items: list[dict[str, Any]] = field(default_factory=list)
    catalog: Any = None  # the render's tool catalog, when asked for one (new_catalog)
    usage: dict[str, Any] | None = None  # Responses usage of the compaction's summarising calls
    model_runs: bool = True  # False: a compaction_trigger asked for the compaction only


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

    def reasoning_input(self, backend_kind: str) -> str | None:
        """How reasoning goes back upstream in history for the backend of that kind."""
        return self._backend_for(backend_kind).reasoning_input(self._reasoning_input)

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
    ) -> Fitted:
        """The chat body for ``items`` (history and this turn's input), fitted to the model.
        ``new_catalog`` makes the tool catalog each render fills (to_chat.py); ``left``: the
        client's departure, which stops a foreground create's compaction (compaction_bounds.py);
        ``reads``: what server tools' calls among the items gave the model (tools/reads.py)."""
        render = self._renderer(req, route, items, tenant, new_catalog, reads)
        fitted = render()
        left = None if req.background else left  # a background response's compaction runs on
        window = await self.windows.window(req.model, route)
        if compaction_items.trigger_requested(req.input):
            return await self._triggered(req, route, items, tenant, window, left, render,
                                         reads)
        entry = next((e for e in req.context_management or () if e.type == "compaction"), None)
        if entry is None and window is None:
            return fitted
        backend = self._backend_for(route.backend)
        counted: tokens.Count | None = None
        threshold = entry.compact_threshold if entry is not None else None
        if threshold is None and entry is not None and window is not None:
            threshold = int(window * DEFAULT_THRESHOLD_SHARE)
        if threshold is not None and estimate_chat(fitted.chat) * _SAFE_FACTOR > threshold:
            counted = await _count(backend, fitted)
            if counted.tokens > threshold and _compactable(items):
                result = await self._compact(req, route, items, tenant, window, left, reads)
                fitted = render(output_items=[result.item])
                fitted.usage = result.usage
                counted = None
        if window is None:
            return fitted
        auto = req.truncation == "auto"
        budget = window - _reserve(req, window) if auto else window
        if counted is None and estimate_chat(fitted.chat) * _SAFE_FACTOR <= budget:
            return fitted
        counted = counted or await _count(backend, fitted)
        if counted.tokens <= budget:
            return fitted
        if not auto:
            raise context_length_exceeded(counted.tokens, window)
        return await _truncate(render, items, fitted, counted, budget, window, backend)

    def render(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]], tenant: str,
        reads: Mapping[str, str] | None = None,
    ) -> Fitted:
        """The chat body for ``items`` as they are, neither compacted nor truncated."""
        return self._renderer(req, route, items, tenant, None, reads)()

    async def compact(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]],
        tenant: str, *, left: Departure | None = None, reads: Mapping[str, str] | None = None,
    ) -> compaction.Compacted:
        """``items`` summarised into one compaction item (``POST /v1/responses/compact``);
        ``left``: the client's departure, which stops it."""
        return await self._compact(req, route, items, tenant,
                                   await self.windows.window(req.model, route), left, reads)

    async def count(self, route: Route, chat: dict[str, Any]) -> tokens.Count:
        """The input tokens of a rendered chat body for the route's backend."""
        return await tokens.count(self._backend_for(route.backend), chat)

    async def _triggered(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]],
        tenant: str, window: int | None, left: Departure | None, render: Callable[..., Fitted],
        reads: Mapping[str, str] | None = None,
    ) -> Fitted:
        """A create whose input ends with a ``compaction_trigger``: everything before it
        compacted now; the compaction item is the response's output, the model does not run."""
        if not any(not compaction_items.is_trigger(item) for item in items):
            raise invalid_request(
                "Nothing to compact: the 'compaction_trigger' item needs earlier input or a "
                "'previous_response_id' or 'conversation' with items.", param="input")
        result = await self._compact(req, route, items, tenant, window, left, reads)
        fitted = render(output_items=[result.item])
        fitted.usage = result.usage
        fitted.model_runs = False
        return fitted

    async def _compact(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]],
        tenant: str, window: int | None, left: Departure | None,
        reads: Mapping[str, str] | None = None,
    ) -> compaction.Compacted:
        return await compaction.compact(
            self._backend_for(route.backend), self._sealer, req, route, items, tenant,
            reasoning_input=self.reasoning_input(route.backend), window=window,
            limits=self.limits, left=left, reads=reads)

    def _renderer(
        self, req: CreateResponseRequest, route: Route, items: list[dict[str, Any]],
        tenant: str, new_catalog: Callable[[], Any] | None,
        reads: Mapping[str, str] | None = None,
    ) -> Callable[..., Fitted]:
        return partial(_render, req, route, items, partial(self._sealer.unseal, tenant=tenant),
                       self.reasoning_input(route.backend), new_catalog,
                       images=self.takes_images(req.model, route), reads=reads)


def _render(
    req: CreateResponseRequest,
    route: Route,
    items: list[dict[str, Any]],
    unseal: Any,
    reasoning_input: str | None,
    new_catalog: Callable[[], Any] | None,
    *,
    images: bool = False,
    omit: Collection[int] = (),
    output_items: Sequence[dict[str, Any]] = (),
    reads: Mapping[str, str] | None = None,
) -> Fitted:
    params: list[str] = []
    extra = {"catalog": new_catalog()} if new_catalog is not None else {}
    chat = to_chat_request(req, items, model=route.model, reasoning_input=reasoning_input,
                           unseal=unseal, message_params=params, omit=omit,
                           output_items=output_items, images=images, reads=reads, **extra)
    return Fitted(chat, params, list(output_items), extra.get("catalog"))


async def _count(backend: Backend, fitted: Fitted) -> tokens.Count:
    try:
        return await tokens.count(backend, fitted.chat)
    except GatewayError as exc:  # a backend's 400 about messages[k]: name what was sent
        raise client_param(exc, fitted.message_params) from None


def _reserve(req: CreateResponseRequest, window: int) -> int:
    """Room left for the answer under ``truncation: "auto"``."""
    return min(req.max_output_tokens or window // 10, window // 2)


def _compactable(items: list[dict[str, Any]]) -> bool:
    """Anything a summary could replace: items other than user and system messages."""
    return any(not compaction_items.is_role(item, "user", "system", "developer") for item in items)


async def _truncate(
    render: Any,
    items: list[dict[str, Any]],
    fitted: Fitted,
    counted: tokens.Count,
    budget: int,
    window: int,
    backend: Backend,
) -> Fitted:
    """Leave out the oldest items until the count fits ``budget``."""
    output_items = fitted.output_items
    candidates = _candidates(items, output_items)
    omit: set[int] = set()
    for _ in range(_MAX_ROUNDS):
        # Estimates of the items scaled to the count: the rest of the request (tools,
        # instructions, the template) is not what leaving items out saves.
        scale = max(1.0, counted.tokens / max(1, estimate_chat(fitted.chat)))
        # A little past the excess: a count per round is a round trip upstream.
        more = _drop(items, candidates, omit, (counted.tokens - budget) / scale * 1.2 + 1)
        if not more:
            raise context_length_exceeded(counted.tokens, window)
        omit |= more
        fitted = render(omit=omit, output_items=output_items)
        counted = await _count(backend, fitted)
        if counted.tokens <= budget:
            return fitted
    raise context_length_exceeded(counted.tokens, window)


def _candidates(items: list[dict[str, Any]], output_items: list[dict[str, Any]]) -> list[int]:
    """Indexes truncation may leave out, oldest first: before the latest user message, not
    ``system``/``developer`` messages, not what a compaction item already stands for (the
    model does not see it, so leaving it out saves nothing)."""
    last_user = max((i for i, item in enumerate(items) if compaction_items.is_role(item, "user")),
                    default=len(items))
    everything = [*items, *output_items]
    hidden_before = compaction_items.latest(everything)
    return [
        i for i in range(min(last_user, len(items)))
        if not compaction_items.is_role(items[i], "system", "developer")
        and not (i < hidden_before and _superseded(everything, hidden_before, i))
    ]


def _superseded(everything: list[dict[str, Any]], at: int, index: int) -> bool:
    """Whether the compaction item at ``at`` hides ``index`` (kept user messages are seen)."""
    return not compaction_items.is_role(everything[index], "user")


def _drop(
    items: list[dict[str, Any]], candidates: list[int], omit: set[int], excess: float
) -> set[int]:
    """The next oldest items to leave out, at least ``excess`` estimated tokens, ending where
    the cut rule allows (cuts.py)."""
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
        chosen = {i for i in chosen if not _in_calls(items[i], cuts.open_calls)}
    return chosen


def _in_calls(item: dict[str, Any], calls: set[str]) -> bool:
    return item.get("call_id") in calls

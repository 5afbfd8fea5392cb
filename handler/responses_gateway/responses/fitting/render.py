"""A request's conversation rendered for its route's model: the chat body fitting works on.

:class:`Renderer` holds what a render of one request needs (the request, its items, the
tenant's unseal, how the backend takes reasoning back, whether the model reads images:
vision.py) and renders it again as fitting decides: with items left out (truncation,
cuts.py), with the compaction item as an output item (compaction.py), or a part of the window
as a summarising call's body. The rendering itself is translate/to_chat.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import Backend
from responses_gateway.config import Route
from responses_gateway.records import Compared
from responses_gateway.responses.fitting import vision
from responses_gateway.translate import compaction_items
from responses_gateway.translate.to_chat import Unseal, to_chat_request

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest

#: The request's options a summarising call leaves out (its answer is plain text).
_NOT_FOR_A_SUMMARY = ("response_format", "logprobs", "top_logprobs", "parallel_tool_calls",
                      "stream_options", "reasoning_effort", "verbosity", "max_tokens")


class Fitted(Compared):
    """A conversation fitted to its route: the chat body to send, and what fitting made (a
    record: records.py)."""

    __slots__ = ("catalog", "chat", "message_params", "model_runs", "output_items", "pending",
                 "usage")

    chat: dict[str, Any]
    message_params: list[str]
    output_items: list[dict[str, Any]]
    catalog: Any  # the render's tool catalog, when asked for one (new_catalog)
    usage: dict[str, Any] | None  # Responses usage of the compaction's summarising calls
    model_runs: bool  # False: a compaction_trigger asked for the compaction only
    #: a compaction decided but not yet run (fit.py's ``defer``): the stream runs it
    pending: Pending | None

    def __init__(self, chat: dict[str, Any], message_params: list[str],
                 output_items: list[dict[str, Any]] | None = None, catalog: Any = None,
                 usage: dict[str, Any] | None = None, model_runs: bool = True,
                 pending: Pending | None = None) -> None:
        self.chat = chat
        self.message_params = message_params
        self.output_items = [] if output_items is None else output_items
        self.catalog = catalog
        self.usage = usage
        self.model_runs = model_runs
        self.pending = pending


class Pending(Compared):
    """A compaction a streamed create runs after ``response.created`` (fit.py ``defer``):
    ``item_id`` names its item in ``response.compaction.compacting`` while ``run`` makes the
    summarising calls; ``run`` returns the conversation fitted again (compacted, then
    checked against the window), whose first output item is the compaction item."""

    __slots__ = ("item_id", "run")

    item_id: str
    run: Callable[[], Awaitable[Fitted]]

    def __init__(self, item_id: str, run: Callable[[], Awaitable[Fitted]]) -> None:
        self.item_id = item_id
        self.run = run


class Renderer:
    """Renders one request's conversation for its route's model; ``unseal`` opens what was
    sealed for ``tenant`` (translate/sealing.py).

    ``reasoning_input``: the operator's ``GATEWAY_REASONING_INPUT``, which ``backend`` may
    overrule; ``vision_models``: ``GATEWAY_VISION_MODELS``; ``new_catalog`` makes the tool
    catalog each render fills (to_chat.py); ``reads``: what server tools' calls among the
    items gave the model (tools/reads.py).
    """

    def __init__(
        self,
        req: CreateResponseRequest,
        route: Route,
        items: list[dict[str, Any]],
        tenant: str,
        unseal: Unseal,
        backend: Backend,
        *,
        reasoning_input: str | None,
        vision_models: Sequence[str],
        new_catalog: Callable[[], Any] | None = None,
        reads: Mapping[str, str] | None = None,
        heavy: bool,
    ) -> None:
        self.req, self.items, self.tenant, self.unseal = req, items, tenant, unseal
        self._model = route.model
        self._new_catalog, self._reads = new_catalog, reads
        self._reasoning_input = backend.reasoning_input(reasoning_input)
        self._images = vision.takes_images(vision_models, req.model, route.model, backend)
        #: whether work over the items leaves the event loop (heavy.py), as the caller
        #: that assembled them decided it
        self.heavy = heavy

    async def rendered(self, *, omit: Collection[int] = (),
                       output_items: Sequence[dict[str, Any]] = ()) -> Fitted:
        """:meth:`__call__`, in a worker thread when the items are heavy: a render costs
        ~4 µs an item (a history of 100,000: ~0.5 s, reasoning items unsealed besides), too
        long for the event loop; a light one stays on it."""
        if self.heavy:
            return await asyncio.to_thread(self, omit=omit, output_items=output_items)
        return self(omit=omit, output_items=output_items)

    def __call__(self, *, omit: Collection[int] = (),
                 output_items: Sequence[dict[str, Any]] = ()) -> Fitted:
        """The chat body without the items at ``omit``, with ``output_items`` (made before
        the model runs) after the input."""
        params: list[str] = []
        extra = {"catalog": self._new_catalog()} if self._new_catalog is not None else {}
        chat = to_chat_request(self.req, self.items, model=self._model,
                               reasoning_input=self._reasoning_input, unseal=self.unseal,
                               message_params=params, omit=omit, output_items=output_items,
                               images=self._images, reads=self._reads, **extra)
        return Fitted(chat, params, list(output_items), extra.get("catalog"))

    def summarising(self, items: list[dict[str, Any]], *, earlier: str, prompt: str,
                    max_tokens: int) -> dict[str, Any]:
        """The chat body of a summarising call (compaction.py) on ``items``, a part of the
        window: ``earlier`` (the summary of the parts before) leads it, ``prompt`` follows;
        no tool catalog kept, images as text notes, the answer text of ``max_tokens``."""
        chat = to_chat_request(self.req, items, model=self._model,
                               reasoning_input=self._reasoning_input, unseal=self.unseal,
                               reads=self._reads)
        messages = list(chat["messages"])
        if earlier:
            lead = next((i for i, m in enumerate(messages) if m.get("role") != "system"),
                        len(messages))
            messages.insert(lead, compaction_items.summary_message(earlier))
        messages.append({"role": "user", "content": prompt})
        body = {k: v for k, v in chat.items() if k not in _NOT_FOR_A_SUMMARY}
        body.update(messages=messages, stream=False)
        if body.get("tools"):
            body["tool_choice"] = "none"  # tool history stays valid; the answer is text
        body["max_completion_tokens"] = max_tokens
        return body

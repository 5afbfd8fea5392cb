"""``configuration_update`` input items: the settings of the responses that follow them.

openai-python 3.57: "A configuration update for subsequent responses. Each setting stays in
effect until a later update replaces that setting." An update carries ``reasoning.effort``
and ``text.format``; the newest update in the conversation (the stored history through
``previous_response_id`` or ``conversation``, then this request's input) sets each, over the
request's own ``reasoning.effort`` and ``text.format`` (OpenAI's guide: keep the request-level
effort unchanged and append an update to change it). The items stay in the conversation and
in ``input_items``; the model never sees them as messages (translate/to_chat.py), and the
Response echoes the effective values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest

KIND = "configuration_update"
_UNSET: Any = object()


def apply_updates(req: CreateResponseRequest, items: Sequence[Any]) -> None:
    """Set ``req``'s reasoning effort and text format from the newest update among ``items``
    (the whole conversation, this turn's input last) that sets each."""
    effort, fmt = _UNSET, _UNSET
    for item in items:
        if not isinstance(item, dict) or item.get("type") != KIND:
            continue
        reasoning, text = item.get("reasoning"), item.get("text")
        if isinstance(reasoning, dict) and "effort" in reasoning:
            effort = reasoning["effort"]
        if isinstance(text, dict) and isinstance(text.get("format"), dict):
            fmt = text["format"]
    if effort is _UNSET and fmt is _UNSET:
        return
    from responses_gateway.translate.request_models import ReasoningConfig, TextConfig

    if effort is not _UNSET:
        reasoning_config = req.reasoning or ReasoningConfig()
        req.reasoning = reasoning_config.model_copy(update={"effort": effort})
    if fmt is not _UNSET:
        verbosity = req.text.verbosity if req.text is not None else None
        # The stored update was validated when it was sent (translate/request_items.py).
        req.text = TextConfig.model_validate({"format": fmt, "verbosity": verbosity})

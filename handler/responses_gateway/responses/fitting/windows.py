"""How many tokens a model's context window holds: what ``truncation`` fits the input into,
what ``truncation: "disabled"`` refuses beyond, and the default compaction threshold.

In this order, the first that knows:

1. ``GATEWAY_CONTEXT_WINDOWS`` (``model=tokens,...``, by client or backend model name): an
   operator's word wins over what a server reports (a server may allow more than the
   deployment should use);
2. an OpenAI-compatible server's ``GET /models``, the answer the dialect probe already read
   (backends/openai_compat.py): ``max_model_len`` (vLLM, SGLang), ``n_ctx`` or ``meta.n_ctx``
   / ``meta.n_ctx_train`` (llama.cpp), ``context_length`` / ``context_window`` /
   ``max_context_length`` (OpenRouter, Groq, LM Studio);
3. Bedrock: the model family's documented window (:data:`BEDROCK_WINDOWS`; Bedrock's API
   does not report it).

Unknown (None) means: no truncation, no refusal, no default threshold. Each answer is
remembered for the life of the process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from responses_gateway.config import Route

#: Context windows of Bedrock model families, by the start of the base model id (the longest
#: match wins), from each provider's model card.
BEDROCK_WINDOWS: dict[str, int] = {
    "anthropic.claude": 200_000,
    "amazon.nova-micro": 128_000,
    "amazon.nova-lite": 300_000,
    "amazon.nova-pro": 300_000,
    "amazon.nova-premier": 1_000_000,
    "meta.llama3-1": 128_000,
    "meta.llama3-2": 128_000,
    "meta.llama3-3": 128_000,
    "meta.llama4": 128_000,
    "mistral.mistral-large-2407": 128_000,
    "openai.gpt-oss": 128_000,
    "deepseek.r1": 128_000,
    "deepseek.v3": 128_000,
}
_MODEL_KEYS = ("max_model_len", "n_ctx", "context_length", "context_window", "max_context_length")
_META_KEYS = ("n_ctx", "n_ctx_train")


def parse_windows(text: str) -> dict[str, int]:
    """``GATEWAY_CONTEXT_WINDOWS``: ``model=tokens,...`` (a model name may hold ``=`` only
    before the last one)."""
    windows: dict[str, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.strip().rpartition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(
                f"GATEWAY_CONTEXT_WINDOWS: {part.strip()!r} is not model=tokens (a positive "
                "integer)")
        windows[name.strip()] = int(value)
    return windows


def from_models(answer: Any, model: str) -> int | None:
    """The window a ``GET /models`` answer gives ``model`` (a server of one model may list
    it under another name: then its only entry counts)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    named = [e for e in entries if e.get("id") == model]
    for entry in named or (entries if len(entries) == 1 else []):
        for key in _MODEL_KEYS:
            if _positive(entry.get(key)):
                return int(entry[key])
        meta = entry.get("meta")
        if isinstance(meta, dict):
            for key in _META_KEYS:
                if _positive(meta.get(key)):
                    return int(meta[key])
    return None


def bedrock_window(model: str) -> int | None:
    from responses_gateway.backends.bedrock.models import model_info

    base = model_info(model).base
    found = [prefix for prefix in BEDROCK_WINDOWS if base.startswith(prefix)]
    return BEDROCK_WINDOWS[max(found, key=len)] if found else None


class ContextWindows:
    """Windows by route, asked of the backends once each."""

    def __init__(self, configured: Mapping[str, int], backend_for: Callable[[str], Any]) -> None:
        self._configured = configured
        self._backend_for = backend_for
        self._known: dict[tuple[str, str], int | None] = {}

    async def window(self, client_model: str, route: Route) -> int | None:
        for name in (client_model, route.model):
            if name in self._configured:
                return self._configured[name]
        key = (route.backend, route.model)
        if key not in self._known:
            self._known[key] = await self._ask(route)
        return self._known[key]

    async def _ask(self, route: Route) -> int | None:
        if route.backend == "bedrock":
            return bedrock_window(route.model)
        models_answer = getattr(self._backend_for(route.backend), "models_answer", None)
        if models_answer is None:
            return None
        return from_models(await models_answer(), route.model)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

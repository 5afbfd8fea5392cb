"""What an OpenAI-compatible server says beyond chat: its models' context windows and exact
token counts, for context fitting (responses/fitting/).

- Context window: from ``GET /models``, the answer the dialect probe already read
  (openai_compat.py): ``max_model_len`` (vLLM, SGLang), ``n_ctx`` or ``meta.n_ctx`` /
  ``meta.n_ctx_train`` (llama.cpp), ``context_length`` / ``context_window`` /
  ``max_context_length`` (OpenRouter, Groq, LM Studio).
- Token count: vLLM's ``POST /tokenize`` with the chat messages (its chat template applied);
  llama.cpp's ``POST /apply-template`` then ``POST /tokenize`` of the prompt it renders (tool
  definitions, which that route does not take, are estimated and added). Other servers
  cannot count (None).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from responses_gateway.backends.dialects import Dialect
from responses_gateway.token_estimate import estimate

_MODEL_KEYS = ("max_model_len", "n_ctx", "context_length", "context_window", "max_context_length")
_META_KEYS = ("n_ctx", "n_ctx_train")
#: POST a JSON body to a path at the server's root; the parsed 200 answer, else None.
ServerJson = Callable[[str, dict[str, Any]], Awaitable[Any]]


def window_from_models(answer: Any, model: str) -> int | None:
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


async def count_tokens(dialect: Dialect, chat: dict[str, Any], server_json: ServerJson
                       ) -> int | None:
    """The input tokens of ``chat`` as a vLLM or llama.cpp server counts them; None for any
    other server, or when it does not answer."""
    if dialect.name not in ("vllm", "llama.cpp"):
        return None
    body = dialect.prepare({**chat, "stream": False})
    messages = body.get("messages") or []
    if dialect.name == "vllm":
        request: dict[str, Any] = {"model": chat.get("model"), "messages": messages,
                                   "add_generation_prompt": True}
        if body.get("tools"):
            request["tools"] = body["tools"]
        answer = await server_json("/tokenize", request)
        tokens = answer.get("count") if isinstance(answer, dict) else None
        return tokens if isinstance(tokens, int) else None
    rendered = await server_json("/apply-template", {"messages": messages})
    prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
    if not isinstance(prompt, str):
        return None
    answer = await server_json("/tokenize", {"content": prompt})
    ids = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(ids, list):
        return None
    return len(ids) + (estimate(body["tools"]) if body.get("tools") else 0)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

"""``prompt_cache_options.prewarm``: warm the backend's prompt cache and generate nothing.

OpenAI's types say a prewarm "prepares the prompt cache without generating output" and
overrides ``generate`` to false; its answer is the ``generate: false`` warm-up's (WebSocket
mode: a Response with no output whose id later turns chain from), here ``completed`` with
``output: []`` and a ``usage`` that counts what was read and written to the cache
(``input_tokens``, ``input_tokens_details.cached_tokens`` / ``cache_write_tokens``) and no
output tokens. OpenAI documents no example of that answer: this is the most plausible shape
(docs/routing.md, "Prewarming").

The backend is called with the request as it would be sent (the same system prompt, tools,
history and cache points: what the cache keys on) but asked for the smallest output it can
give, one token (``max_completion_tokens: 1``; on Bedrock Converse's ``maxTokens: 1``), and
without reasoning (extended thinking cannot run in one token; Claude keeps the tools' and
system prompt's cache points either way). What comes back is dropped but for its usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from responses_gateway.backends.base import BackendRequest, Chunk
from responses_gateway.backends.chunks import parse_chunk

#: the chat body's fields that would make the warming call generate more than one token
_DROPPED = ("max_tokens", "reasoning_effort", "n", "logprobs", "top_logprobs")


def prewarm_request(request: BackendRequest) -> BackendRequest:
    """The same request, asking for one token of output."""
    body = {k: v for k, v in request.body.items() if k not in _DROPPED}
    body["max_completion_tokens"] = 1
    return BackendRequest(body=body, tenant=request.tenant, stream=request.stream,
                          extra=request.extra)


async def prewarmed(chunks: AsyncIterator[list[Chunk]]) -> AsyncIterator[list[Chunk]]:
    """The backend's answer reduced to one chunk: no output, ``finish_reason: stop``, the
    prompt's usage (cache reads and writes kept) with zero completion tokens. An upstream
    error chunk passes through as it came (the translator fails the response with it)."""
    usage: dict[str, Any] | None = None
    kept: dict[str, Any] = {}
    async for batch in chunks:
        for chunk in batch:
            parsed = chunk if isinstance(chunk, dict) else parse_chunk(None, chunk)
            if parsed is None:
                continue  # [DONE]
            if "error" in parsed:
                yield [parsed]
                return
            if isinstance(parsed.get("usage"), dict):
                usage = parsed["usage"]
            for key in ("id", "model", "created", "service_tier"):
                if key in parsed:
                    kept[key] = parsed[key]
    yield [{**kept, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": _input_only(usage or {})}]


def _input_only(usage: dict[str, Any]) -> dict[str, Any]:
    """The prompt's tokens (and its cache details); nothing generated is reported."""
    prompt = usage.get("prompt_tokens")
    prompt = prompt if isinstance(prompt, int) and prompt > 0 else 0
    kept: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 0,
                            "total_tokens": prompt}
    if isinstance(usage.get("prompt_tokens_details"), dict):
        kept["prompt_tokens_details"] = usage["prompt_tokens_details"]
    return kept

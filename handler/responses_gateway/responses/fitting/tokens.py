"""How many tokens a chat request's input is: one answer for ``POST /v1/responses/input_tokens``,
``truncation`` and the ``context_management`` compaction threshold.

Exact where the backend can count:

- Bedrock: ``CountTokens`` on the Converse request the backend would send;
- vLLM: ``POST /tokenize`` with the chat messages (its chat template applied);
- llama.cpp: ``POST /apply-template`` then ``POST /tokenize`` of the prompt it renders (tool
  definitions, which that route does not take, are estimated and added).

Anywhere else an estimate (:func:`estimate`): a quarter of the UTF-8 bytes of the messages'
and tools' JSON, with every image or file counted as :data:`MEDIA_TOKENS` instead of its
bytes. OpenAI's own tokenizers are not used: tiktoken downloads its files at run time, which a
Lambda without internet access cannot do. The estimate runs over English text at about the
true count plus the JSON's own punctuation, so it errs high, the safe side for ``truncation``.
A count that fails (the server has no such route, a timeout) falls back to the estimate.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from responses_gateway.errors import GatewayError

logger = logging.getLogger("responses_gateway")

#: An image or file in the estimate: about what a high-detail image costs OpenAI's and
#: Claude's models; its base64 bytes would count hundreds of times more.
MEDIA_TOKENS = 1500
_DATA_URL = re.compile(rb'"data:[^"]{256,}"')
_MEDIA_PART = re.compile(rb'"type":"(?:image_url|file|input_image|input_file)"')


@dataclass(frozen=True, slots=True)
class Count:
    tokens: int
    exact: bool  # the backend counted (else: the estimate)


def estimate(value: Any) -> int:
    """The estimate for any JSON value: a chat body's messages and tools, or one item."""
    raw = orjson.dumps(value)
    size = len(raw)
    for match in _DATA_URL.finditer(raw):
        size -= match.end() - match.start()
    return math.ceil(size / 4) + MEDIA_TOKENS * len(_MEDIA_PART.findall(raw))


def estimate_chat(chat: dict[str, Any]) -> int:
    return estimate(chat.get("messages") or []) + (estimate(chat["tools"]) if chat.get("tools")
                                                   else 0)


async def count(backend: Any, chat: dict[str, Any]) -> Count:
    """The input tokens of ``chat`` (a Chat Completions body) for ``backend``. A request
    the backend would refuse for the client's reason (more images than Bedrock takes) raises
    that 400 here, naming the chat message (``messages[k]``) as backends do."""
    try:
        if getattr(backend, "name", None) == "bedrock":
            exact = await _bedrock(backend, chat)
        else:
            exact = await _openai_compatible(backend, chat)
    except GatewayError as exc:
        if 400 <= exc.status < 500 and exc.status not in (401, 403, 404, 429):
            raise
        logger.warning("token count failed; using the estimate", exc_info=True)
        exact = None
    except Exception:  # counting must never fail a request; the estimate stands in
        logger.warning("token count failed; using the estimate", exc_info=True)
        exact = None
    if exact is not None:
        return Count(exact, True)
    return Count(estimate_chat(chat), False)


async def _openai_compatible(backend: Any, chat: dict[str, Any]) -> int | None:
    models_answer = getattr(backend, "models_answer", None)
    if models_answer is None:
        return None
    if getattr(backend, "dialect", None) is None:
        await models_answer()  # recognises the server (backends/dialects.py), once
    dialect = backend.dialect
    name = getattr(dialect, "name", None)
    if name not in ("vllm", "llama.cpp"):
        return None
    body = dialect.prepare({**chat, "stream": False})
    messages = body.get("messages") or []
    if name == "vllm":
        request: dict[str, Any] = {"model": chat.get("model"), "messages": messages,
                                   "add_generation_prompt": True}
        if body.get("tools"):
            request["tools"] = body["tools"]
        answer = await backend.server_json("/tokenize", request)
        tokens = answer.get("count") if isinstance(answer, dict) else None
        return tokens if isinstance(tokens, int) else None
    rendered = await backend.server_json("/apply-template", {"messages": messages})
    prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
    if not isinstance(prompt, str):
        return None
    answer = await backend.server_json("/tokenize", {"content": prompt})
    ids = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(ids, list):
        return None
    return len(ids) + (estimate(body["tools"]) if body.get("tools") else 0)


async def _bedrock(backend: Any, chat: dict[str, Any]) -> int | None:
    from responses_gateway.backends.bedrock.request import build_converse_request, remote_media

    if remote_media(chat):
        return None  # images by URL would have to be downloaded just to be counted
    call = build_converse_request({**chat, "stream": False}, media={}, stream=False)
    kwargs = call.kwargs
    converse = {k: kwargs[k] for k in ("messages", "system", "toolConfig",
                                       "additionalModelRequestFields") if kwargs.get(k)}
    client = backend.client
    answer = await asyncio.to_thread(
        lambda: client().count_tokens(modelId=kwargs["modelId"], input={"converse": converse}))
    tokens = answer.get("inputTokens")
    return tokens if isinstance(tokens, int) else None

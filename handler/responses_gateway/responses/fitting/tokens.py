"""How many tokens a chat request's input is: one answer for ``POST /v1/responses/input_tokens``,
``truncation`` and the ``context_management`` compaction threshold.

Exact where the backend counts (``Backend.count_tokens``: Bedrock's ``CountTokens``, vLLM's and
llama.cpp's ``/tokenize``); anywhere else, or when a count fails (the server has no such route,
a timeout), the estimate of token_estimate.py. An estimate well below a limit is trusted
(:func:`clearly_within`), so a request far below the window is never counted upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from responses_gateway.backends.base import Backend
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.records import Value
from responses_gateway.token_estimate import estimate_chat_off_loop
from responses_gateway.translate.to_chat import client_param

logger = logging.getLogger("responses_gateway")
#: An estimate this many times below a limit is trusted without an exact count.
SAFE_FACTOR = 1.5


class Count(Value):
    """Input tokens, and whether the backend counted them or the gateway estimated (a frozen
    value: records.py)."""

    __slots__ = ("exact", "tokens")

    tokens: int
    exact: bool  # the backend counted (else: the estimate)

    def __init__(self, tokens: int, exact: bool) -> None:
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "exact", exact)


def context_length_exceeded(tokens_used: int, window: int) -> GatewayError:
    """OpenAI's 400 for an input its model cannot read."""
    return invalid_request(
        f"Your input exceeds the context window of this model ({tokens_used} tokens; the "
        f"window holds {window}). Please adjust your input and try again, or set "
        "'truncation' to 'auto'.",
        param="input",
        code="context_length_exceeded",
    )


async def clearly_within(chat: dict[str, Any], limit: int) -> bool:
    """Whether the estimate of ``chat`` is so far below ``limit`` that no count is needed
    (a heavy chat body estimated in a worker thread: token_estimate.py)."""
    return await estimate_chat_off_loop(chat) * SAFE_FACTOR <= limit


async def count_unless_within(backend: Backend, chat: dict[str, Any], limit: int,
                              message_params: Sequence[str] | None = None) -> Count | None:
    """:func:`count`, or None (no count made) when the estimate of ``chat`` is clearly
    within ``limit``."""
    if await clearly_within(chat, limit):
        return None
    return await count(backend, chat, message_params)


async def count(backend: Backend, chat: dict[str, Any],
                message_params: Sequence[str] | None = None) -> Count:
    """The input tokens of ``chat`` (a Chat Completions body) for ``backend``. A request
    the backend would refuse for the client's reason (more images than Bedrock takes) raises
    that 400 here, naming the chat message (``messages[k]``) as backends do, or what the
    client sent when ``message_params`` (to_chat.py's) say."""
    try:
        exact = await backend.count_tokens(chat)
    except GatewayError as exc:
        if 400 <= exc.status < 500 and exc.status not in (401, 403, 404, 429):
            if message_params is not None:
                raise client_param(exc, message_params) from None
            raise
        logger.warning("token count failed; using the estimate", exc_info=True)
        exact = None
    except Exception:  # counting must never fail a request; the estimate stands in
        logger.warning("token count failed; using the estimate", exc_info=True)
        exact = None
    if exact is not None:
        return Count(exact, True)
    return Count(await estimate_chat_off_loop(chat), False)

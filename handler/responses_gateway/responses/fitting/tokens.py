"""How many tokens a chat request's input is: one answer for ``POST /v1/responses/input_tokens``,
``truncation`` and the ``context_management`` compaction threshold.

Exact where the backend counts (``Backend.count_tokens``: Bedrock's ``CountTokens``, vLLM's and
llama.cpp's ``/tokenize``); anywhere else, or when a count fails (the server has no such route,
a timeout), the estimate of token_estimate.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from responses_gateway.backends.base import Backend
from responses_gateway.errors import GatewayError
from responses_gateway.token_estimate import estimate_chat

logger = logging.getLogger("responses_gateway")

@dataclass(frozen=True, slots=True)
class Count:
    """Input tokens, and whether the backend counted them or the gateway estimated."""

    tokens: int
    exact: bool  # the backend counted (else: the estimate)


async def count(backend: Backend, chat: dict[str, Any]) -> Count:
    """The input tokens of ``chat`` (a Chat Completions body) for ``backend``. A request
    the backend would refuse for the client's reason (more images than Bedrock takes) raises
    that 400 here, naming the chat message (``messages[k]``) as backends do."""
    try:
        exact = await backend.count_tokens(chat)
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

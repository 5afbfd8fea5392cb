"""The token estimate used where no upstream counts: a quarter of the UTF-8 bytes of the JSON,
with every image or file counted as :data:`MEDIA_TOKENS` instead of its bytes.

OpenAI's own tokenizers are not used: tiktoken downloads its files at run time, which a Lambda
without internet access cannot do. Over English text the estimate runs at about the true count
plus the JSON's own punctuation, so it errs high, the safe side for ``truncation``. Neutral
ground: context fitting (responses/fitting/tokens.py) and a backend that counts only part of a
request (llama.cpp, which does not count tool definitions) both use it.

A long list (a chat body's messages) is measured a slice of members at a time, the same sums
as one encode of it whole (neither pattern can span two members), so no one orjson call holds
the GIL long; :func:`estimate_chat_off_loop` runs a heavy chat body's estimate in a worker thread
(175,000 messages: ~40 ms, every create with a known window or a token limit, every turn).
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import orjson

from responses_gateway.heavy import heavy_items

#: An image or file in the estimate: about what a high-detail image costs OpenAI's and
#: Claude's models; its base64 bytes would count hundreds of times more.
MEDIA_TOKENS = 1500
_DATA_URL = re.compile(rb'"data:[^"]{256,}"')
_MEDIA_PART = re.compile(rb'"type":"(?:image_url|file|input_image|input_file)"')


#: members of a list encoded at once (a chat body's messages: well under a millisecond)
_SLICE = 1024


def estimate(value: Any) -> int:
    """The estimate for any JSON value: a chat body's messages and tools, or one item."""
    if not isinstance(value, list) or len(value) <= _SLICE:
        size, media = _measured(orjson.dumps(value))
    else:  # a slice at a time: its brackets off, the commas between slices on
        slices = range(0, len(value), _SLICE)
        size, media = 2 + len(slices) - 1, 0
        for start in slices:
            part_size, part_media = _measured(orjson.dumps(value[start:start + _SLICE]))
            size += part_size - 2
            media += part_media
    return math.ceil(size / 4) + MEDIA_TOKENS * media


def _measured(raw: bytes) -> tuple[int, int]:
    """The bytes of a JSON text less its long data URLs, and its media parts."""
    size = len(raw)
    for match in _DATA_URL.finditer(raw):
        size -= match.end() - match.start()
    return size, len(_MEDIA_PART.findall(raw))


def estimate_chat(chat: dict[str, Any]) -> int:
    """The estimate for a Chat Completions body's input: its messages and tools."""
    return estimate(chat.get("messages") or []) + (estimate(chat["tools"]) if chat.get("tools")
                                                   else 0)


async def estimate_chat_off_loop(chat: dict[str, Any]) -> int:
    """:func:`estimate_chat`, in a worker thread when the messages are heavy (heavy.py)."""
    if heavy_items(chat.get("messages")):
        return await asyncio.to_thread(estimate_chat, chat)
    return estimate_chat(chat)

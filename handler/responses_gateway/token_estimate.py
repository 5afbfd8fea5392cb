"""The token estimate used where no upstream counts: a quarter of the UTF-8 bytes of the JSON,
with every image or file counted as :data:`MEDIA_TOKENS` instead of its bytes.

OpenAI's own tokenizers are not used: tiktoken downloads its files at run time, which a Lambda
without internet access cannot do. Over English text the estimate runs at about the true count
plus the JSON's own punctuation, so it errs high, the safe side for ``truncation``. Neutral
ground: context fitting (responses/fitting/tokens.py) and a backend that counts only part of a
request (llama.cpp, which does not count tool definitions) both use it.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

#: An image or file in the estimate: about what a high-detail image costs OpenAI's and
#: Claude's models; its base64 bytes would count hundreds of times more.
MEDIA_TOKENS = 1500
_DATA_URL = re.compile(rb'"data:[^"]{256,}"')
_MEDIA_PART = re.compile(rb'"type":"(?:image_url|file|input_image|input_file)"')


def estimate(value: Any) -> int:
    """The estimate for any JSON value: a chat body's messages and tools, or one item."""
    raw = orjson.dumps(value)
    size = len(raw)
    for match in _DATA_URL.finditer(raw):
        size -= match.end() - match.start()
    return math.ceil(size / 4) + MEDIA_TOKENS * len(_MEDIA_PART.findall(raw))


def estimate_chat(chat: dict[str, Any]) -> int:
    """The estimate for a Chat Completions body's input: its messages and tools."""
    return estimate(chat.get("messages") or []) + (estimate(chat["tools"]) if chat.get("tools")
                                                   else 0)

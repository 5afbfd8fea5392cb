"""``chunking_strategy``: OpenAI's ``auto`` (800 tokens, 400 overlap) and ``static``.

Tokens here are word and punctuation pieces (``\\w+`` or one other character, with the white
space before it): near a BPE tokenizer's count over English text, without downloading one.
"""

from __future__ import annotations

import re
from itertools import islice
from typing import Any

from responses_gateway.errors import invalid_request, out_of_range

AUTO = {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}
MIN_CHUNK, MAX_CHUNK = 100, 4096
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])", re.UNICODE)


def parse_strategy(value: Any, param: str = "chunking_strategy") -> dict[str, Any]:
    """The strategy as OpenAI reports it on a file (``auto`` becomes its static sizes)."""
    if value is None:
        return {"type": "static", "static": dict(AUTO)}
    if not isinstance(value, dict) or value.get("type") not in ("auto", "static"):
        raise invalid_request(
            f"Invalid '{param}': expected an object with type 'auto' or 'static'.",
            param=param, code="invalid_value")
    if value["type"] == "auto":
        return {"type": "static", "static": dict(AUTO)}
    static = value.get("static")
    if not isinstance(static, dict):
        raise invalid_request(f"Missing required parameter: '{param}.static'.",
                              param=f"{param}.static", code="missing_required_parameter")
    size, overlap = static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens")
    for name, number in (("max_chunk_size_tokens", size), ("chunk_overlap_tokens", overlap)):
        if not isinstance(number, int) or isinstance(number, bool):
            raise invalid_request(
                f"Invalid '{param}.static.{name}': expected an integer.",
                param=f"{param}.static.{name}", code="invalid_type")
    assert isinstance(size, int) and isinstance(overlap, int)
    if not MIN_CHUNK <= size <= MAX_CHUNK:
        raise out_of_range(f"{param}.static.max_chunk_size_tokens", MIN_CHUNK, MAX_CHUNK, size)
    if overlap < 0 or overlap > size // 2:
        raise invalid_request(
            f"Invalid '{param}.static.chunk_overlap_tokens': must be between 0 and half of "
            f"max_chunk_size_tokens ({size // 2}), but got {overlap} instead.",
            param=f"{param}.static.chunk_overlap_tokens", code="invalid_value")
    return {"type": "static", "static": {"max_chunk_size_tokens": size,
                                         "chunk_overlap_tokens": overlap}}


class TooManyTokens(ValueError):
    """The text holds more pieces than the bound given to :func:`chunk`."""


def chunk(text: str, strategy: dict[str, Any], max_tokens: int | None = None) -> list[str]:
    """Windows of ``max_chunk_size_tokens`` pieces, each starting ``overlap`` before the last
    one ended; the pieces' own text, so a chunk is a verbatim slice of the document.
    :class:`TooManyTokens` when it holds more than ``max_tokens`` (counting stops there)."""
    static = strategy["static"]
    size, overlap = static["max_chunk_size_tokens"], static["chunk_overlap_tokens"]
    pieces = _PIECE.finditer(text)
    if max_tokens is not None:
        pieces = islice(pieces, max_tokens + 1)
    starts = [m.start() for m in pieces]
    if max_tokens is not None and len(starts) > max_tokens:
        raise TooManyTokens(max_tokens)
    if not starts:
        return []
    chunks: list[str] = []
    step = size - overlap
    for first in range(0, len(starts), step):
        last = first + size
        end = starts[last] if last < len(starts) else len(text)
        piece = text[starts[first]:end].strip()
        if piece:
            chunks.append(piece)
        if last >= len(starts):
            break
    return chunks

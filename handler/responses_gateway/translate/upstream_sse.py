"""Upstream chat SSE → chunk dicts: the decoding every SSE backend shares."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from responses_gateway.sse import SSEDecoder

DONE = b"[DONE]"


def parse_chunk(event: str | None, data: bytes) -> dict[str, Any] | None:
    """One SSE event's data as a chunk dict; None for ``[DONE]``.

    Malformed JSON and ``event: error`` frames become ``{"error": ...}`` chunks, which the
    translator turns into ``response.failed``.
    """
    if data == DONE:
        return None
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {"error": {"code": "upstream_protocol_error",
                          "message": "the upstream sent a chunk that is not valid JSON"}}
    if chunk.__class__ is not dict:
        return {"error": {"code": "upstream_protocol_error",
                          "message": "the upstream sent a chunk that is not a JSON object"}}
    if event == "error" and "error" not in chunk:
        return {"error": chunk}
    return chunk


def chunks_from_lines(lines: Iterable[bytes | str]) -> Iterator[dict[str, Any]]:
    """Chunks from SSE lines until ``[DONE]`` or the end of the lines.

    A single ``data: `` line followed by a blank line (what nearly every provider sends) skips
    the general decoder; anything else (``event:``, multi-line data, CRLF, comments) uses it.
    """
    decoder = SSEDecoder()
    line = decoder.line
    stash: bytes | None = None  # data of a one-line event waiting for its blank line
    pending = False  # the general decoder holds part of an event
    loads = orjson.loads
    for raw in lines:
        if not raw:
            if stash is not None:
                data, stash = stash, None
                if data == DONE:
                    return
                try:
                    chunk = loads(data)
                except orjson.JSONDecodeError:
                    chunk = None
                if chunk.__class__ is not dict:
                    chunk = parse_chunk(None, data)  # the error chunk (or None for [DONE])
                    if chunk is None:
                        continue
                yield chunk
                continue
            pending = False
            frame = decoder.flush()
        elif stash is None and not pending and raw[:6] == b"data: " and raw[-1] != 13:
            stash = raw[6:]  # type: ignore[index]
            continue
        else:
            # str lines, CRLF, event:, comments, multi-line data: the general decoder.
            if stash is not None:
                line(b"data: " + stash)
                stash = None
            pending = True
            frame = line(raw)
            if frame is not None:
                pending = False
        if frame is not None:
            chunk = parse_chunk(*frame)
            if chunk is None:
                return
            yield chunk
    if stash is not None:
        line(b"data: " + stash)
    frame = decoder.flush()
    if frame is not None:
        chunk = parse_chunk(*frame)
        if chunk is not None:
            yield chunk

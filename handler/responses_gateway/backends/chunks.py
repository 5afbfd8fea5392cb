"""The chat-chunk wire format backends hand over: upstream chat SSE → chunk dicts (or their
JSON bytes), the decoding every SSE backend shares and the translator reads (translate/stream.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import orjson

from responses_gateway.sse import SSEDecoder

DONE = b"[DONE]"
#: A chunk dict, or a chunk's JSON bytes as the upstream sent them (see ChunkDecoder).
Chunk = dict[str, Any] | bytes


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


class ChunkDecoder:
    """Upstream SSE bytes or lines → chunks, incrementally, until ``[DONE]``.

    The one decoder every SSE backend and the benchmark entry use. A single ``data: `` line
    followed by a blank line (what nearly every provider sends) comes out as its JSON bytes,
    unparsed: :meth:`ResponseTranslator.feed` parses it, and skips most of that for a chunk
    that repeats the previous one's bytes. Anything else (``event:``, multi-line data,
    comments) goes through :class:`SSEDecoder` and comes out parsed (an ``event: error`` frame
    becomes an error chunk). Work is done a batch of lines at a time.
    """

    __slots__ = ("_buf", "_busy", "_cr", "_line", "_stash", "done")

    def __init__(self) -> None:
        self._line = SSEDecoder().line
        self._buf = b""  # an unterminated line from the previous read
        self._cr = False  # the previous read ended in CR (its LF may start this one)
        self._stash: bytes | None = None  # one-line data event waiting for its blank line
        self._busy = False  # the general decoder holds part of an event
        self.done = False  # [DONE] was seen

    def feed(self, data: bytes) -> list[Chunk]:
        """Chunks completed by one network read (any size, any split)."""
        if self._cr:
            self._cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:  # CRLF and bare CR line ends
            self._cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._buf:
            data = self._buf + data
        lines = data.split(b"\n")
        self._buf = lines.pop()
        return self.lines(lines)

    def lines(self, lines: Iterable[bytes | str]) -> list[Chunk]:
        """Chunks completed by these whole lines (given without their line ends)."""
        out: list[Chunk] = []
        if self.done:
            return out
        line = self._line
        stash = self._stash
        busy = self._busy
        for raw in lines:
            if not raw:
                if stash is not None:
                    if stash == DONE:
                        stash = None
                        self.done = True
                        break
                    out.append(stash)
                    stash = None
                    continue
                busy = False
                frame = line(b"")
            elif stash is None and not busy and raw[:6] == b"data: " and raw[-1] != 13:
                stash = raw[6:]  # type: ignore[assignment]
                continue
            else:  # str lines, a stray CR, event:, comments, multi-line data
                if stash is not None:
                    line(b"data: " + stash)
                    stash = None
                busy = True
                frame = line(raw)
                if frame is not None:
                    busy = False
            if frame is not None:
                chunk = parse_chunk(*frame)
                if chunk is None:
                    self.done = True
                    break
                out.append(chunk)
        self._stash = stash
        self._busy = busy
        return out

    def end(self) -> list[Chunk]:
        """The stream ended: an unterminated last event still counts (``done`` stays False
        unless that event was ``[DONE]``: the caller judges an end without it)."""
        if self.done:
            return []
        pending = [self._buf] if self._buf else []
        self._buf = b""
        return self.lines([*pending, b""])


def chunks_from_lines(lines: Iterable[bytes | str]) -> Iterator[dict[str, Any]]:
    """Chunk dicts from SSE lines until ``[DONE]`` or the end of the lines."""
    decoder = ChunkDecoder()
    source = iter(lines)
    while block := list(islice(source, 256)):
        yield from map(_parsed, decoder.lines(block))
        if decoder.done:
            return
    yield from map(_parsed, decoder.end())


def _parsed(chunk: Chunk) -> dict[str, Any]:
    return parse_chunk(None, chunk) if chunk.__class__ is bytes else chunk  # type: ignore[return-value]

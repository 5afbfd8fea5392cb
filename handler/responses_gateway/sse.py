"""Server-sent events: the writer for our Responses stream and the reader for upstream streams.

Writer: each event is one ``bytes`` of ``event: <type>\\ndata: <compact json>\\n\\n`` (``\\n`` only,
no ``[DONE]``: OpenAI's Responses streams have none).

Reader: an incremental line decoder that survives CRLF, multi-line ``data:``, comments and
``event: error`` frames. Lines come in without their newline, as ``httpx`` yields them.
"""

from __future__ import annotations

from typing import Any

import orjson

_dumps = orjson.dumps
_PREFIXES: dict[str, bytes] = {}


def encode_event(event: dict[str, Any]) -> bytes:
    kind = event["type"]
    prefix = _PREFIXES.get(kind)
    if prefix is None:
        prefix = _PREFIXES[kind] = b"event: " + kind.encode() + b"\ndata: "
    return prefix + _dumps(event) + b"\n\n"


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """A batch of events as one body (one socket write)."""
    if len(events) == 1:
        return encode_event(events[0])
    return b"".join([encode_event(event) for event in events])


def encode_comment(text: str = "keep-alive") -> bytes:
    return b": " + text.encode() + b"\n\n"


class SSEDecoder:
    """Feed lines; get ``(event_name, data)`` at each blank line that ends an event.

    ``event_name`` is None for plain ``data:`` events (the chat completions case).
    """

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: bytes | None = None

    def line(self, line: bytes | str) -> tuple[str | None, bytes] | None:
        if isinstance(line, str):
            line = line.encode()
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            return self.flush()
        if line.startswith(b"data:"):
            value = line[6:] if line[5:6] == b" " else line[5:]
            self._data = value if self._data is None else self._data + b"\n" + value
        elif line[0] == 58:  # ":" comment / keep-alive
            pass
        elif line.startswith(b"event:"):
            self._event = line[6:].strip().decode()
        # id:, retry: and unknown fields carry nothing for us
        return None

    def flush(self) -> tuple[str | None, bytes] | None:
        """End the pending event (a blank line, or the end of the stream)."""
        data, event = self._data, self._event
        self._data = self._event = None
        if data is None:
            return None
        return event, data


def iter_sse_lines(body: bytes) -> list[bytes]:
    """Split a whole SSE body into lines as a streaming reader would see them."""
    return body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")

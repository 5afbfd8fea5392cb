"""The repeat fast path of the translator: chunks that repeat the previous chunk's bytes around
a new fragment are not parsed whole (docs/translation.md).
"""

from __future__ import annotations

from typing import Any

import orjson

from responses_gateway.translate.item_kinds import CALL as _CALL
from responses_gateway.translate.item_kinds import TEXT as _TEXT

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_PROBE = b'"\\u0000probe"'
_PROBE_TEXT = "\x00probe"


class _Repeat:
    """The bytes of a fragment-only chunk around its fragment string.

    Learned only once a probe string put in the fragment's place parses to the same chunk
    with the probe at the fragment's slot: that proves the string sits between tokens at that
    slot (the probe's opening quote then backslash would break the JSON anywhere else), so any
    one JSON string in its place is the same chunk with another fragment.
    """

    __slots__ = ("head", "hits", "minimum", "start", "tail", "tail_bytes")

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head = head
        self.tail_bytes = tail
        self.start = len(head)
        self.tail = len(tail)
        self.minimum = len(head) + len(tail) + 1  # room for at least a two-byte string
        self.hits = 0

    def matches(self, data: bytes) -> bool:
        return (
            len(data) > self.minimum
            and data.startswith(self.head)
            and data.endswith(self.tail_bytes)
        )

    @classmethod
    def learn(cls, data: bytes, chunk: dict[str, Any], value: str, kind: int) -> _Repeat | None:
        needle = orjson.dumps(value)  # the upstream may escape otherwise: then no repeat yet
        at = data.find(needle)
        if at < 0 or data.find(needle, at + 1) >= 0:
            return None
        head, tail = data[:at], data[at + len(needle) :]
        try:
            probe = _loads(head + _PROBE + tail)
        except _JSONDecodeError:
            return None
        slot = _fragment_slot(probe, kind)
        if slot is None or slot[0].get(slot[1]) != _PROBE_TEXT:
            return None
        slot[0][slot[1]] = value
        return cls(head, tail) if probe == chunk else None


def _fragment_slot(chunk: Any, kind: int) -> tuple[dict[str, Any], str] | None:
    """Where a fragment-only chunk of ``kind`` holds its fragment."""
    try:
        delta = chunk["choices"][0]["delta"]
        if kind == _CALL:
            delta = delta["tool_calls"][0]["function"]
            key = "arguments"
        elif kind == _TEXT:
            key = "content"
        else:
            key = "reasoning_content" if delta.get("reasoning_content") else "reasoning"
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return (delta, key) if delta.__class__ is dict else None

"""The model's code as it streamed it: ``{"code": "..."}`` arguments decoded fragment by
fragment, so each ``response.code_interpreter_call_code.delta`` carries code text (what OpenAI
streams), not pieces of a JSON string with its escapes.

The model's arguments arrive in the chat stream's fragments (``ServerCall.fragments``); the
call runs once they are all in, so the deltas are replayed then, one per fragment that added
code. Arguments of another shape (other keys first, raw code instead of JSON) give one delta
of the whole code: :func:`code_deltas` checks that its deltas spell the code exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import orjson

_OPENING = re.compile(r'\s*\{\s*"code"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}


class CodeDecoder:
    """Decodes the ``code`` string of a JSON object streamed in pieces. ``feed`` returns the
    code text a piece adds; ``ok`` turns False at anything it does not follow (the caller then
    falls back to the whole code)."""

    __slots__ = ("_head", "_pending", "_state", "ok")

    def __init__(self) -> None:
        self._head = ""  # what came before the string opened
        self._pending = ""  # an escape split across pieces
        self._state = 0  # 0: before the string, 1: in it, 2: after it
        self.ok = True

    def feed(self, piece: str) -> str:
        if not self.ok or self._state == 2:
            return ""
        if self._state == 0:
            self._head += piece
            match = _OPENING.match(self._head)
            if match is None:
                if not _could_open(self._head):
                    self.ok = False
                return ""
            piece = self._head[match.end():]
            self._head = ""
            self._state = 1
        return self._string(self._pending + piece)

    def _string(self, text: str) -> str:
        out: list[str] = []
        self._pending = ""
        i, n = 0, len(text)
        while i < n:
            char = text[i]
            if char == '"':
                self._state = 2
                break
            if char != "\\":
                j = i
                while j < n and text[j] not in '"\\':
                    j += 1
                out.append(text[i:j])
                i = j
                continue
            if i + 1 >= n:
                self._pending = text[i:]
                break
            kind = text[i + 1]
            if kind in _ESCAPES:
                out.append(_ESCAPES[kind])
                i += 2
                continue
            if kind != "u":
                self.ok = False
                break
            if i + 6 > n:
                self._pending = text[i:]
                break
            unit = _hex(text[i + 2:i + 6])
            if unit is None:
                self.ok = False
                break
            if 0xD800 <= unit < 0xDC00:  # a surrogate pair: its low half follows
                if i + 12 > n:
                    self._pending = text[i:]
                    break
                low = _hex(text[i + 8:i + 12]) if text[i + 6:i + 8] == "\\u" else None
                if low is None or not 0xDC00 <= low < 0xE000:
                    self.ok = False
                    break
                out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
                i += 12
                continue
            out.append(chr(unit))
            i += 6
        return "".join(out)


def _could_open(head: str) -> bool:
    """Whether ``head`` is still a prefix of ``{"code": "``, whitespace allowed."""
    compact = re.sub(r"\s+", "", head)
    return '{"code":"'.startswith(compact) if len(compact) < 9 else False


def _hex(text: str) -> int | None:
    try:
        return int(text, 16) if len(text) == 4 else None
    except ValueError:
        return None


def code_of(arguments: str) -> str | None:
    """The code the model sent: ``{"code": "..."}``'s string, or arguments that are not JSON
    taken as the code itself (some models write raw code to a ``python`` function); None when
    there is none."""
    try:
        parsed = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return arguments if arguments.strip() else None
    if isinstance(parsed, dict):
        code = parsed.get("code")
        if not isinstance(code, str):  # a model's other spelling of the one argument
            found = [v for v in parsed.values() if isinstance(v, str)]
            code = found[0] if len(found) == 1 else None
        return code if code and code.strip() else None
    return parsed if isinstance(parsed, str) and parsed.strip() else None


def code_deltas(fragments: Iterable[str], code: str) -> list[str]:
    """The code deltas of the streamed ``fragments``: one per fragment that added code, which
    together spell ``code``; else (arguments of another shape) ``[code]``."""
    decoder = CodeDecoder()
    deltas = [delta for delta in map(decoder.feed, fragments) if delta]
    if decoder.ok and "".join(deltas) == code:
        return deltas
    return [code] if code else []

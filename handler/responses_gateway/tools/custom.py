"""``custom`` tools (freeform input, optionally a grammar) as chat functions, and back.

A chat model calls functions with JSON arguments, so a custom tool is offered as a function
taking one string, ``input``; its call's arguments ``{"input": "..."}`` become the
``custom_tool_call``'s ``input``, streamed as they are decoded. A ``regex`` grammar becomes the
JSON Schema ``pattern`` of that string, which servers that constrain tool arguments to their
schema (vLLM, llama.cpp, SGLang guided decoding) enforce; a ``lark`` grammar has no JSON Schema
form, so it is given to the model in the description only (docs/tools.md).
"""

from __future__ import annotations

from typing import Any

import orjson

INPUT = "input"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def chat_function(
    name: str, description: str | None, fmt: dict[str, Any] | None
) -> dict[str, Any]:
    """The chat function standing for one custom tool."""
    field: dict[str, Any] = {"type": "string"}
    notes = [description] if description else []
    if fmt and fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition") or ""
        if syntax == "regex":
            field["pattern"] = definition
        notes.append(
            f"Put the tool's raw input in `{INPUT}` (not JSON unless the tool wants JSON). "
            f"The input must match this {syntax} grammar:\n{definition}"
        )
        field["description"] = f"Raw input matching the {syntax} grammar."
    else:
        notes.append(f"Put the tool's raw input (free text) in `{INPUT}`.")
        field["description"] = "Raw input for the tool."
    return {
        "name": name,
        "description": "\n\n".join(notes),
        "parameters": {
            "type": "object",
            "properties": {INPUT: field},
            "required": [INPUT],
            "additionalProperties": False,
        },
    }


def arguments_for(text: str) -> str:
    """A custom call's input as chat function arguments (history sent back upstream)."""
    return orjson.dumps({INPUT: text}).decode()


def input_of(arguments: str) -> str:
    """The input a finished call's arguments carry: ``{"input": ...}``, another object with one
    string (a model that renamed the field), else the raw text (a model that skipped JSON)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict):
        if isinstance(value.get(INPUT), str):
            return value[INPUT]
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return value if isinstance(value, str) else arguments


class InputStream:
    """Decodes ``{"input": "...`` as its fragments arrive: each fragment gives the text newly
    known, so ``custom_tool_call_input.delta`` events stream like OpenAI's. Anything else (other
    keys first, no JSON) streams nothing, and the call's input is decoded when it closes."""

    __slots__ = ("_buffer", "_pos", "_state", "text")

    def __init__(self) -> None:
        self._buffer = ""
        self._pos = 0
        self._state = 0  # 0 before the string, 1 inside it, 2 after it, 3 not this shape
        self.text: list[str] = []

    def feed(self, fragment: str) -> str:
        if self._state >= 2:
            return ""
        self._buffer += fragment
        if self._state == 0:
            head = self._buffer.lstrip()
            for expected in ("{", f'"{INPUT}"', ":", '"'):
                if len(head) < len(expected):
                    if not expected.startswith(head):
                        self._state = 3
                    return ""
                if not head.startswith(expected):
                    self._state = 3
                    return ""
                head = head[len(expected):].lstrip() if expected != '"' else head[1:]
            self._state = 1
            self._buffer, self._pos = head, 0
        try:
            return self._decode()
        except ValueError:  # a broken \u escape: the input is decoded when the call closes
            self._state = 3
            return ""

    def _decode(self) -> str:
        buffer, pos, out = self._buffer, self._pos, []
        while pos < len(buffer):
            char = buffer[pos]
            if char == '"':
                self._state = 2
                pos += 1
                break
            if char != "\\":
                end = pos
                while end < len(buffer) and buffer[end] not in '"\\':
                    end += 1
                out.append(buffer[pos:end])
                pos = end
                continue
            if pos + 1 >= len(buffer):
                break  # the escape continues in the next fragment
            code = buffer[pos + 1]
            if code == "u":
                if pos + 6 > len(buffer):
                    break
                unit = int(buffer[pos + 2:pos + 6], 16)
                if 0xD800 <= unit < 0xDC00:  # a surrogate pair needs its second half
                    if pos + 12 > len(buffer):
                        break
                    low = int(buffer[pos + 8:pos + 12], 16)
                    out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
                    pos += 12
                    continue
                out.append(chr(unit))
                pos += 6
                continue
            out.append(_ESCAPES.get(code, code))
            pos += 2
        self._buffer, self._pos = buffer[pos:], 0
        text = "".join(out)
        if text:
            self.text.append(text)
        return text

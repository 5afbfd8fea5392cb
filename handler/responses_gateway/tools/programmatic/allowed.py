"""Which of the request's tools a program may call, and how the model is told about them.

``allowed_callers`` on a function, custom or namespace tool says who may call it: ``direct``
(the model, as a call item of its turn) and/or ``programmatic`` (a program). Without it a tool
is direct only, as OpenAI's. A program sees one async function per tool it may call
(``tools.get_weather({...})``; a namespace's members under ``tools.<namespace>``); calling any
other name throws in the program, saying why. Programmatic-only tools are left out of what the
model is offered directly (translate/to_chat.py asks :func:`direct`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from responses_gateway.tools import client_tools
from responses_gateway.tools.server import (
    DIRECT,
    PROGRAMMATIC,
    allowed_callers,
    offered_directly,
)

#: the client-run tools a program may call (their call items carry ``caller``)
CLIENT_RUN = ("shell", "apply_patch")

# (who may call a tool is the seam's: tools/server.py)
callers = allowed_callers
direct = offered_directly


@dataclass(frozen=True, slots=True)
class Callable:
    """One tool a program may call."""

    #: "function", "custom", "shell", "apply_patch" (the call item it makes: function_call...),
    #: or "server:<kind>" (a tool the gateway runs: tool.py)
    kind: str
    name: str
    namespace: str | None
    description: str | None
    parameters: dict[str, Any] | None  # a function's JSON Schema; None for custom

    @property
    def path(self) -> str:
        """How the program names it (``tools.<path>``)."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


def _field(tool: Any, name: str) -> Any:
    return tool.get(name) if isinstance(tool, dict) else getattr(tool, name, None)


def collect(tools: Sequence[Any]) -> tuple[list[Callable], list[str]]:
    """(the tools a program may call, the names of those it may not: direct-only)."""
    allowed: list[Callable] = []
    refused: list[str] = []

    def take(tool: Any, namespace: str | None, inherited: tuple[str, ...] | None) -> None:
        kind = _field(tool, "type")
        if kind not in ("function", "custom"):
            return
        name = _field(tool, "name")
        who = callers(tool) if _field(tool, "allowed_callers") is not None else (
            inherited or (DIRECT,))
        path = f"{namespace}.{name}" if namespace else str(name)
        if PROGRAMMATIC not in who:
            refused.append(path)
            return
        params = _field(tool, "parameters") if kind == "function" else None
        allowed.append(Callable(kind, str(name), namespace, _field(tool, "description"),
                                params if isinstance(params, dict) else None))

    for tool in tools:
        kind = _field(tool, "type")
        entry = client_tools.client_run(tool)
        if entry is not None and entry.kind in CLIENT_RUN:
            if PROGRAMMATIC in callers(tool):
                allowed.append(Callable(entry.kind, entry.kind, None, entry.description,
                                        entry.parameters))
            else:
                refused.append(entry.kind)
        elif entry is not None:
            continue  # computer, local_shell, tool_search: never a program's
        elif kind == "namespace":
            inherited = (callers(tool) if _field(tool, "allowed_callers") is not None
                         else None)
            for member in _field(tool, "tools") or ():
                take(member, _field(tool, "name"), inherited)
        else:
            take(tool, None, None)
    return allowed, refused


def to_record(allowed: Sequence[Callable]) -> list[dict[str, Any]]:
    return [asdict(c) for c in allowed]


def from_record(data: Sequence[dict[str, Any]]) -> list[Callable]:
    return [Callable(**entry) for entry in data]


def describe(allowed: Sequence[Callable], refused: Sequence[str]) -> str:
    """The program function's description: how to write a program and what it may call."""
    lines = [
        "Run a JavaScript program (Node.js, no network, no npm modules) that calls tools and "
        "returns one result. Use it to call tools many times (loops, branches, several at "
        "once with Promise.all) in one step. The code is the body of an async function: use "
        "`await`, and `return` the result (a string, or a value made JSON); what it prints "
        "with console.log is the result when it returns nothing. Each tool is an async "
        "function of `tools` that takes the tool's arguments as one object and resolves to "
        "the tool's output as a string (JSON.parse it when it is JSON); a failed call "
        "throws. Programs must be deterministic: no Math.random or Date for decisions.",
        "",
        "Tools the program may call:",
    ]
    if not allowed:
        lines.append("(none)")
    for c in allowed:
        if c.kind == "custom":
            signature = f"await tools.{c.path}(input: string)"
        else:
            signature = f"await tools.{c.path}(args: object)"
        text = f"- {signature}"
        if c.description:
            text += f": {c.description}"
        if c.parameters:
            text += f"\n  arguments schema: {json.dumps(c.parameters, separators=(',', ':'))}"
        lines.append(text)
    if refused:
        lines.append("")
        lines.append("Not callable from a program (call them directly): " + ", ".join(refused))
    return "\n".join(lines)

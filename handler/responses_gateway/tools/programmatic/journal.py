"""A program's state, read from the items: its code, the calls it made and their answers.

Everything a paused program needs to resume is in the conversation (the previous response's
output in the store, or the items a ``store: false`` client sends back): the ``program`` item
(its code and fingerprint), the calls it made (``function_call`` / ``custom_tool_call`` items
whose ``caller`` is ``{"type": "program", "caller_id": <the program's call_id>}``, in order),
and their outputs. So no state of its own is kept anywhere: another process or Lambda
instance resumes it from the request alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from responses_gateway.tools import client_tools
from responses_gateway.tools.programmatic import PROGRAM, PROGRAM_OUTPUT

CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
         "shell_call": "shell_call_output", "apply_patch_call": "apply_patch_call_output"}
OUTPUTS = frozenset(CALLS.values())
#: the client-run tools' calls, named by their tool (they have no ``name``)
NAMED_BY_TYPE = {"shell_call": "shell", "apply_patch_call": "apply_patch"}


def fingerprint(code: str) -> str:
    """What the program item carries to be sent back unchanged: the code's digest, so a
    resumed program is the one whose calls the journal holds."""
    return "pgfp_v1_" + hashlib.sha256(code.encode()).hexdigest()[:40]


def caller_of(item: Mapping[str, Any]) -> str | None:
    """The program call id that made ``item``, if a program did."""
    caller = item.get("caller")
    if isinstance(caller, Mapping) and caller.get("type") == "program":
        caller_id = caller.get("caller_id")
        return caller_id if isinstance(caller_id, str) else None
    return None


def output_text(output: Any) -> str:
    """A call output's ``output`` (a string or content parts) as the program reads it."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(p.get("text", "")) for p in output
                       if isinstance(p, Mapping) and p.get("type") in ("input_text",
                                                                          "output_text"))
    return ""


@dataclass(slots=True)
class Program:
    """One program as the items tell it."""

    call_id: str
    code: str
    fingerprint: str
    #: its calls so far, in order: path, kind, call_id, and output once answered
    calls: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False

    @property
    def answered(self) -> bool:
        return all("output" in c for c in self.calls)

    def journal(self) -> list[dict[str, Any]]:
        return [{"path": c["path"], "output": c.get("output")} for c in self.calls]


def programs(items: Sequence[Mapping[str, Any]]) -> dict[str, Program]:
    """Every program among ``items`` (a whole conversation), by call id."""
    found: dict[str, Program] = {}
    by_call: dict[str, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == PROGRAM and isinstance(item.get("call_id"), str):
            code = item.get("code") if isinstance(item.get("code"), str) else ""
            found[item["call_id"]] = Program(item["call_id"], code,
                                             str(item.get("fingerprint") or ""))
        elif kind == PROGRAM_OUTPUT and item.get("call_id") in found:
            found[item["call_id"]].finished = True
        elif kind in CALLS:
            owner = found.get(caller_of(item) or "")
            if owner is not None and isinstance(item.get("call_id"), str):
                name = NAMED_BY_TYPE.get(kind) or str(item.get("name") or "")
                namespace = item.get("namespace")
                call = {"call_id": item["call_id"], "kind": kind,
                        "path": f"{namespace}.{name}" if namespace else name}
                owner.calls.append(call)
                by_call[item["call_id"]] = call
        elif kind in OUTPUTS:
            call = by_call.get(item.get("call_id"))  # type: ignore[arg-type]
            if call is not None:
                call["output"] = (output_text(item.get("output")) if kind in (
                    "function_call_output", "custom_tool_call_output")
                    else client_tools.output_text(item))
    return found


def waiting(items: Sequence[Mapping[str, Any]]) -> Program | None:
    """The latest program that paused and whose calls the client has all answered now."""
    for program in reversed(list(programs(items).values())):
        if not program.finished:
            return program if program.calls and program.answered else None
    return None

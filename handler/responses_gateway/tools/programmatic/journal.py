"""A program's state, read from the items: its code, the calls it made and their answers.

Everything a paused program needs to resume is in the conversation (the previous response's
output in the store, or the items a ``store: false`` client sends back): the ``program`` item
(its code and fingerprint), the calls it made (``function_call`` / ``custom_tool_call`` items
whose ``caller`` is ``{"type": "program", "caller_id": <the program's call_id>}``, in order),
their outputs, and the items of its calls to the gateway's tools (told by where they stand:
:func:`_served`). So no state of its own is kept anywhere: another process or Lambda instance
resumes it from the request alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from responses_gateway.errors import GatewayError, invalid_request
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
    #: what its calls to the gateway's tools answered, in order, as far as the items tell
    served: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return all("output" in c for c in self.calls)

    def journal(self) -> list[dict[str, Any]]:
        served = [s for s in self.served if s.get("path") is not None]
        return [*({"path": c["path"], "output": c.get("output")} for c in self.calls),
                *({"lane": "server", **s} for s in served)]


def programs(items: Sequence[Mapping[str, Any]],
             reads: Mapping[str, str] | None = None) -> dict[str, Program]:
    """Every program among ``items`` (a whole conversation), by call id; ``reads``: what the
    gateway's calls among them gave (tools/reads.py), for the calls whose items keep no
    answer (code_interpreter's)."""
    found: dict[str, Program] = {}
    by_call: dict[str, dict[str, Any]] = {}
    by_output: dict[str, str] = {}  # a program call's call_id -> its program
    #: per item: (the program it marks, whether it is one of its calls), or None
    marks: list[tuple[str, bool] | None] = []
    for item in items:
        marks.append(None)
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == PROGRAM and isinstance(item.get("call_id"), str):
            marks[-1] = (item["call_id"], False)
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
                by_output[item["call_id"]] = owner.call_id
                marks[-1] = (owner.call_id, True)
        elif kind in OUTPUTS:
            call = by_call.get(item.get("call_id"))  # type: ignore[arg-type]
            if call is not None:
                marks[-1] = (by_output[item["call_id"]], False)
                call["output"] = (output_text(item.get("output")) if kind in (
                    "function_call_output", "custom_tool_call_output")
                    else client_tools.output_text(item))
    _served(items, marks, found, reads or {})
    return found


def _served(items: Sequence[Mapping[str, Any]], marks: Sequence[tuple[str, bool] | None],
            found: Mapping[str, Program], reads: Mapping[str, str]) -> None:
    """The items of a program's calls to the gateway's tools (an ``mcp_call``: their types
    have no ``caller``), told by where they stand: a run of them right after one of the
    program's own items (its ``program`` item, a call's output) and right before one of its
    calls is the program's; the model's own calls never stand there (a turn's calls run in
    order, and the program's pause comes last). Each is read as the model would read it
    (its tool's history reader, with ``reads``): a code_interpreter call answers what it
    printed (its reads: kept with a stored response, or in this process for ``store:
    false``; else its item's logs when the client asked for ``code_interpreter_call.outputs``;
    else the reader's "no longer at hand"). None runs again: its side effects happened once."""
    from responses_gateway.tools import registry

    readers: dict[str, Any] = {}  # a shared type's reader (hosted shell's), built once
    i = 0
    while i < len(items):
        j = i
        while j < len(items) and marks[j] is None and _server_item(items[j], registry, items,
                                                                    readers):
            j += 1
        if j > i:
            before = marks[i - 1] if i > 0 else None
            after = marks[j] if j < len(items) else None
            if before is not None and after is not None and after[1] \
                    and before[0] == after[0] and before[0] in found:
                _read_lane(items, items[i:j], found[before[0]], registry, reads)
            i = j
        else:
            i += 1


def _server_item(item: Any, registry: Any, items: Sequence[Mapping[str, Any]],
                 readers: dict[str, Any]) -> bool:
    """An item of a tool the gateway runs: its own type (``mcp_call``), or a type it shares
    with a client tool that its reader owns (a hosted ``shell_call`` names a container)."""
    if not isinstance(item, Mapping):
        return False
    kind = item.get("type")
    if kind in registry.SERVER_ITEM_TYPES:
        return kind not in (PROGRAM, PROGRAM_OUTPUT)
    if kind not in registry.SHARED_ITEM_TYPES:
        return False
    if kind not in readers:
        readers[kind] = registry.history_reader(kind, items, {})
    return bool(registry.owns(readers[kind], item))


def _read_lane(items: Sequence[Mapping[str, Any]], run: Sequence[Mapping[str, Any]],
               program: Program, registry: Any, reads: Mapping[str, str]) -> None:
    for item in run:
        kind = item["type"]
        try:
            read = registry.history_reader(kind, items, reads).read(item, "input")
        except GatewayError:  # malformed: not an answer to replay
            read = None
        if read is None:
            continue
        path = f"{read.spec.namespace}.{read.spec.name}" if read.spec.namespace else \
            read.spec.name
        program.served.append({"path": path, "output": read.output})


#: how OpenAI's 400 names a call left without its output, by the call's type
UNANSWERED = {"function_call": "function call", "custom_tool_call": "custom tool call",
              "shell_call": "shell call", "apply_patch_call": "apply patch call"}


def waiting(items: Sequence[Mapping[str, Any]],
            reads: Mapping[str, str] | None = None) -> Program | None:
    """The latest program that paused and whose calls the client has all answered now.

    One the client left a call of unanswered is OpenAI's 400 for a pending call sent back
    without its output ("No tool output found for function call call_…", ``param``
    ``input``): resumed, the program would wait for it forever; left paused, the model would
    not see it."""
    for program in reversed(list(programs(items, reads).values())):
        if not program.finished:
            if not program.calls:
                return None
            for call in program.calls:
                if "output" not in call:
                    raise invalid_request(
                        f"No tool output found for {UNANSWERED[call['kind']]} "
                        f"{call['call_id']}.", param="input")
            return program
    return None

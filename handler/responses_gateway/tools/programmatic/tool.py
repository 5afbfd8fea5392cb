"""``programmatic_tool_calling`` as a server tool (tools/server.py).

The model is offered one function, ``program`` (``{"code": "..."}``), whose description lists
the tools a program may call (allowed.py). A call runs the program in a fresh container of the
Containers service's engine (``ContainerEngine.run_javascript``: Node.js in the sandbox
engine's jail, AgentCore's ``javascript`` on AWS; no network; ``GATEWAY_CODE_TIMEOUT`` per
execution; output bounded by ``GATEWAY_CODE_MAX_OUTPUT_BYTES``), from its start each time,
with the journal of its earlier calls (bridge.py). The items, in OpenAI's order:

- ``program`` (``call_id`` the model's call id, ``code``, ``fingerprint``);
- the items of the calls it made to tools the gateway runs (MCP, code_interpreter: their
  ``run``, as for the model's calls; ``join`` gives this tool the others);
- the calls the program made to the client's tools (``function_call`` / ``custom_tool_call``
  / ``shell_call`` / ``apply_patch_call`` with ``caller: {"type": "program", "caller_id"}``):
  the response then ends (``pauses``) so
  the client runs them; its next request (``previous_response_id``, or the items sent back
  with ``store: false``) carries their outputs, and this tool resumes the program before the
  model runs (``first_calls``, journal.py);
- ``program_output`` (``result``, ``status`` ``completed``; ``incomplete`` with the reason when
  the program threw, timed out, made too many calls or took another path on replay), which the
  model reads as the result of its ``program`` call.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from responses_gateway import ids
from responses_gateway.containers.engine import Box, EngineError
from responses_gateway.errors import GatewayError
from responses_gateway.tools import client_tools
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.programmatic import (
    PROGRAM,
    PROGRAM_OUTPUT,
    REGISTRATION,
    bridge,
    journal,
)
from responses_gateway.tools.programmatic import allowed as reach
from responses_gateway.tools.programmatic.allowed import Callable
from responses_gateway.tools.programmatic.journal import Program
from responses_gateway.tools.server import (
    Event,
    HistoryCall,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
    ToolServices,
)

KIND = REGISTRATION.kind
#: the kind of a callable a server tool runs: this, then the tool's kind (``server:mcp``)
SERVED = "server:"
NAME = "program"  # the function the model calls
PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": (
        "The JavaScript body of an async function: await tools.<name>(args) calls, then "
        "`return` the result.")}},
    "required": ["code"],
    "additionalProperties": False,
}
#: what a program's call to an MCP tool that needs approval throws (no approval is asked)
_NEEDS_APPROVAL = ("{path} needs the user's approval, which a program cannot ask for "
                   "(require_approval: never allows it)")
#: the program item's and its output's id prefixes (the registration's)
PROGRAM_PREFIX, OUTPUT_PREFIX = (item.id_prefix for item in REGISTRATION.items)


class ProgrammaticTool(ServerTool):
    """Programs for one response: what they may call, and the program it resumes, if any."""

    kind = KIND

    def __init__(self, allowed: list[Callable], refused: list[str], settings: Any,
                 services: ToolServices, waiting: Program | None = None) -> None:
        self.allowed = allowed
        self.refused = refused
        self.settings = settings
        self.services = services
        self.waiting = waiting  # a paused program whose calls the request answers
        self._codes: dict[str, str] = {}  # program call id -> code, of programs run here
        #: the response's other server tools, and what of theirs a program may call (join)
        self.peers: dict[str, ServerTool] = {}
        self.served: list[Callable] = []

    def join(self, peers: Mapping[str, ServerTool]) -> None:
        self.peers = {kind: tool for kind, tool in peers.items() if tool is not self}
        self.served = [
            Callable(f"{SERVED}{kind}", str(function["name"]), namespace,
                     function.get("description"), function.get("parameters"))
            for kind, tool in self.peers.items()
            for namespace, function in tool.program_functions()]

    @property
    def callable(self) -> list[Callable]:
        """Every tool a program may call: the client's, then the gateway's."""
        return [*self.allowed, *self.served]

    # -- building ------------------------------------------------------------------------------

    @classmethod
    async def for_request(cls, request: RequestTools) -> ProgrammaticTool:
        allowed, refused = reach.collect(request.every)
        waiting = journal.waiting([*request.history, *request.items], request.reads)
        return cls(allowed, refused, request.settings, request.services, waiting)

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return [(None, {"name": NAME,
                        "description": reach.describe(self.callable, self.refused),
                        "parameters": json.loads(json.dumps(PARAMETERS))})]

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "programmatic_tool_calling"}``: the model writes a program first."""
        if isinstance(choice, str) or getattr(choice, "type", None) not in REGISTRATION.tool_types:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, NAME)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        waiting = self.waiting
        return {"allowed": reach.to_record(self.allowed), "refused": self.refused,
                "waiting": None if waiting is None else {
                    "call_id": waiting.call_id, "code": waiting.code,
                    "fingerprint": waiting.fingerprint, "calls": waiting.calls,
                    "served": waiting.served}}

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> ProgrammaticTool:
        waiting = data.get("waiting")
        return cls(reach.from_record(data.get("allowed") or []),
                   list(data.get("refused") or []), rebuild.settings, rebuild.services,
                   Program(**waiting) if waiting else None)

    # -- running -------------------------------------------------------------------------------

    def first_calls(self) -> list[ServerCall]:
        """The paused program resumes before the model runs: the client answered its calls."""
        program = self.waiting
        if program is None:
            return []
        return [ServerCall(program.call_id, ToolSpec(KIND, NAME),
                           json.dumps({"code": program.code}), extra={"resume": True})]

    def skip_first_calls(self) -> None:
        self.waiting = None

    def reads(self) -> dict[str, str]:
        """The code of the programs this response ran, by call id: a resumed program's item
        is in an earlier response, and the next model turn reads its call from here."""
        return dict(self._codes)

    async def run(self, call: ServerCall, writer: ItemWriter) -> AsyncIterator[list[Event]]:
        resumed = self.waiting if call.extra.get("resume") else None
        if resumed is not None:
            self.waiting = None
            code, entries = resumed.code, resumed.journal()
            failure = (None if resumed.fingerprint == journal.fingerprint(code) else
                       "The program item's code or fingerprint was changed; it cannot resume.")
        else:
            code, entries, failure = _code_of(call.arguments), [], None
            program = {"id": ids.new_id(PROGRAM_PREFIX), "type": PROGRAM,
                       "call_id": call.call_id, "code": code,
                       "fingerprint": journal.fingerprint(code)}
            events = writer.start_tool_item(program, None)
            events += writer.end_tool_item("completed", None)
            yield events
            if not code.strip():
                failure = "No code was given: call program with {\"code\": \"...\"}."
        self._codes[call.call_id] = code
        # GATEWAY_MAX_TOOL_CALLS per program, and what the response's max_tool_calls leaves
        left = call.extra.get("calls_left")
        limit = int(self.settings.max_tool_calls)
        limit = min(limit, left) if isinstance(left, int) else limit
        while failure is None:
            outcome = await self._execute(code, entries)
            if outcome.error is not None:
                failure = _explained(outcome.error, outcome.logs)
                break
            if outcome.done:
                result = outcome.result if outcome.result is not None else outcome.logs
                yield _output(writer, call.call_id, result, "completed")
                return
            calls = self._checked(outcome.calls)
            if calls is None:
                failure = ("The program did not complete: it asked for a tool call the "
                           "prelude never makes (a tool it may not call).")
                break
            outcome.calls = calls
            if call.made + len(outcome.calls) > limit:
                failure = (f"The program made more tool calls than it may ({limit}: "
                           "max_tool_calls, GATEWAY_MAX_TOOL_CALLS) and was stopped.")
                break
            call.made += len(outcome.calls)
            client = [p for p in outcome.calls
                      if not str(p.get("kind") or "").startswith(SERVED)]
            for pending in outcome.calls:
                if pending in client:
                    continue
                entry = {"lane": "server", "path": str(pending.get("path") or "")}
                async for batch in self._run_served(writer, pending, entry):
                    yield batch
                entries = [*entries, entry]
            if not client:
                continue  # the gateway answered every call: run the program again
            events = []
            for pending in client:
                events += _client_call(writer, call.call_id, pending)
            call.pauses = True  # the client runs them; its answer resumes the program
            yield events
            return
        yield _output(writer, call.call_id, failure or "", "incomplete")

    def _checked(self, pending: list[Any]) -> list[dict[str, Any]] | None:
        """The pending calls as the gateway knows the tools they name, or None when one names
        none a program may call: the frame comes from inside the jail, where the program's
        own code runs too, so it is read as untrusted (a forged frame must not reach a tool
        that is not ``programmatic``)."""
        by_path = {c.path: c for c in self.callable}
        checked: list[dict[str, Any]] = []
        for entry in pending:
            found = by_path.get(entry.get("path")) if isinstance(entry, dict) else None
            arguments = entry.get("arguments") if isinstance(entry, dict) else None
            if found is None or not isinstance(arguments, str):
                return None
            checked.append({"path": found.path, "kind": found.kind, "name": found.name,
                            "namespace": found.namespace, "arguments": arguments})
        return checked

    async def _run_served(self, writer: ItemWriter, pending: Mapping[str, Any],
                          entry: dict[str, Any]) -> AsyncIterator[list[Event]]:
        """A call to a tool the gateway runs (an MCP server's), run now by that tool, its
        items in the response as the model's call's would be; what the model would read of it
        is the program's answer (``entry``)."""
        kind = str(pending.get("kind") or "")[len(SERVED):]
        peer = self.peers.get(kind)
        if peer is None:
            entry["error"] = f"{entry['path']} is not available"
            return
        namespace = pending.get("namespace")
        needs_approval = getattr(peer, "needs_approval", None)  # an MCP server's tools
        if callable(needs_approval) and needs_approval(
                namespace if isinstance(namespace, str) else "", str(pending.get("name") or "")):
            # No mcp_approval_request: 3.57's has no ``caller``, so the client's approval
            # would run the call as the model's (first in the next response), outside the
            # program, which would never read its answer. The program sees why instead.
            entry["error"] = _NEEDS_APPROVAL.format(path=entry["path"])
            return
        served = ServerCall("call_" + secrets.token_hex(12),
                            ToolSpec(kind, str(pending.get("name") or ""),
                                     namespace if isinstance(namespace, str) else None),
                            str(pending.get("arguments") or "{}"))
        made: list[dict[str, Any]] = []
        async for batch in peer.run(served, writer):
            made += [e["item"] for e in batch if e.get("type") == "response.output_item.done"]
            yield batch
        if served.pauses:  # a peer that asks the client for something a program cannot
            entry["error"] = _NEEDS_APPROVAL.format(path=entry["path"])
            return
        reader = type(peer).history_reader(made, peer.reads())
        for item in made:
            read = reader.read(item, "program")
            if read is not None:
                entry["output"] = read.output
                return
        entry["output"] = ""

    async def _execute(self, code: str, entries: Sequence[dict[str, Any]]) -> bridge.Outcome:
        """One execution from the start, in a container of its own that ends with it."""
        engine = self.services.containers.engine
        memory = int(self.settings.code_memory_mb)
        timeout = float(self.settings.code_timeout)
        box = Box(id=ids.new_id(ids.CONTAINER), memory_mb=memory)
        source = bridge.script(code, entries, self.callable, self.refused)
        try:
            await engine.start(box)
            ran = await engine.run_javascript(
                box, source, timeout=timeout,
                max_output=int(self.settings.code_max_output_bytes))
        except (EngineError, GatewayError) as exc:
            return bridge.Outcome(error=f"The program could not run: {_reason(exc)}")
        finally:
            with contextlib.suppress(EngineError):
                await engine.stop(box)
        return bridge.read(ran.stdout, ran.stderr, timed_out=ran.timed_out, timeout=timeout,
                           dropped=ran.dropped)

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> ProgramHistory:
        return ProgramHistory(items, reads)


def _code_of(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return ""
    code = parsed.get("code") if isinstance(parsed, dict) else None
    return code if isinstance(code, str) else ""


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, GatewayError) else str(exc) or type(exc).__name__


def _explained(error: str, logs: str) -> str:
    text = f"The program did not complete: {error}"
    return f"{text}\nIts output before that:\n{logs}" if logs else text


def _output(writer: ItemWriter, call_id: str, result: str, status: str) -> list[Event]:
    item = {"id": ids.new_id(OUTPUT_PREFIX), "type": PROGRAM_OUTPUT, "call_id": call_id,
            "result": result, "status": status}  # its types know no in_progress
    events = writer.start_tool_item(item, None)
    events += writer.end_tool_item(status, None)
    return events


def _client_call(writer: ItemWriter, program_id: str, pending: Mapping[str, Any]) -> list[Event]:
    """A call the program made to a tool the client runs, as the model's own would be, with
    its ``caller``: added, its arguments (or input) streamed once, done."""
    caller = {"type": "program", "caller_id": program_id}
    call_id = "call_" + secrets.token_hex(12)
    name = str(pending.get("name") or "")
    namespace = pending.get("namespace")
    arguments = str(pending.get("arguments") or "")
    if pending.get("kind") in reach.CLIENT_RUN:  # shell_call, apply_patch_call
        item = client_tools.call_item(str(pending["kind"]), call_id, arguments, "completed")
        item["caller"] = caller
        events = writer.start_tool_item(item, None)
        events += writer.end_tool_item(item["status"], None)
        return events
    custom = pending.get("kind") == "custom"  # else a function's call
    field, event = (("input", "response.custom_tool_call_input") if custom
                    else ("arguments", "response.function_call_arguments"))
    item: dict[str, Any] = {
        "id": ids.new_id(ids.CUSTOM_TOOL_CALL if custom else ids.FUNCTION_CALL),
        "type": "custom_tool_call" if custom else "function_call",
        "call_id": call_id, field: "", "name": name}
    if not custom:  # a custom_tool_call has no status (openai-python's type, the model's own)
        item["status"] = "in_progress"
    if namespace:
        item["namespace"] = namespace
    item["caller"] = caller
    events = writer.start_tool_item(item, None)
    item[field] = arguments
    events.append(writer.tool_item_event(f"{event}.delta", delta=arguments))
    events.append(writer.tool_item_event(f"{event}.done", **{field: arguments}))
    events += writer.end_tool_item("completed", None)
    return events


class ProgramHistory:
    """Programs as the model reads them: its call of ``program`` (the code) and the program's
    result, read where the ``program_output`` stands (a paused program, with no output yet,
    is not shown: it resumes before the model runs). The calls a program made and their
    outputs are not the model's (translate/to_chat.py leaves them out)."""

    def __init__(self, items: Sequence[Mapping[str, Any]], reads: Mapping[str, str]) -> None:
        self.codes = dict(reads)
        for item in items:
            if isinstance(item, Mapping) and item.get("type") == PROGRAM \
                    and isinstance(item.get("call_id"), str):
                self.codes[item["call_id"]] = str(item.get("code") or "")

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        if item.get("type") != PROGRAM_OUTPUT:
            return None
        call_id = str(item.get("call_id") or "")
        result = str(item.get("result") or "")
        return HistoryCall(call_id, ToolSpec(KIND, NAME),
                           json.dumps({"code": self.codes.get(call_id, "")}), result)

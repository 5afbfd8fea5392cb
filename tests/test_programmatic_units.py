"""Units of programmatic tool calling (tools/programmatic/): who may call what
(``allowed_callers``), the journal rebuilt from the items, the prelude's frame read back, and
the prelude itself run by Node.js outside any jail (replay, pending calls, refusals)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from responses_gateway.errors import GatewayError
from responses_gateway.tools.programmatic import allowed, bridge, journal
from responses_gateway.tools.programmatic.allowed import Callable

FN = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def test_allowed_callers_both_ways() -> None:
    tools = [FN, {**FN, "name": "g", "allowed_callers": ["programmatic"]},
             {**FN, "name": "h", "allowed_callers": ["direct", "programmatic"]},
             {"type": "namespace", "name": "ns", "allowed_callers": ["programmatic"],
              "tools": [{**FN, "name": "a"}, {**FN, "name": "b", "allowed_callers": ["direct"]}]}]
    callable_, refused = allowed.collect(tools)
    assert [c.path for c in callable_] == ["g", "h", "ns.a"]
    assert refused == ["f", "ns.b"]
    assert [allowed.direct(t) for t in tools[:3]] == [True, False, True]
    text = allowed.describe(callable_, refused)
    assert "await tools.ns.a(args: object)" in text and "call them directly): f, ns.b" in text


def _items(done: bool = False) -> list[dict]:
    caller = {"type": "program", "caller_id": "call_p"}
    items = [{"type": "program", "call_id": "call_p", "code": "x",
              "fingerprint": journal.fingerprint("x")},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
              "caller": caller},
             {"type": "function_call", "call_id": "c2", "name": "a", "namespace": "ns",
              "arguments": "{}", "caller": caller},
             {"type": "function_call", "call_id": "direct", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c2",
              "output": [{"type": "input_text", "text": "two"}], "caller": caller},
             {"type": "function_call_output", "call_id": "c1", "output": "one"}]
    if done:
        items.append({"type": "program_output", "call_id": "call_p", "result": "r",
                      "status": "completed"})
    return items


def test_the_journal_is_rebuilt_from_the_items() -> None:
    [program] = journal.programs(_items()).values()
    assert program.journal() == [{"path": "f", "output": "one"},
                                 {"path": "ns.a", "output": "two"}]
    assert journal.waiting(_items()) == program
    # c1 not answered: OpenAI's 400 for a pending call sent back without its output
    with pytest.raises(GatewayError) as raised:
        journal.waiting(_items()[:-1])
    assert (raised.value.status, raised.value.message, raised.value.param) == (
        400, "No tool output found for function call c1.", "input")
    assert journal.waiting(_items(done=True)) is None  # finished


def test_frames_read_back() -> None:
    line = bridge.MARK + json.dumps({"calls": [{"path": "f"}], "logs": "hi"})
    assert bridge.read(f"noise\n{line}\n", "", timed_out=False, timeout=1).calls == [
        {"path": "f"}]
    done = bridge.read(bridge.MARK + json.dumps({"done": "r"}), "", timed_out=False, timeout=1)
    assert done.done and done.result == "r"
    late = bridge.read("", "", timed_out=True, timeout=2)
    assert "2 seconds" in (late.error or "") and "GATEWAY_CODE_TIMEOUT" in (late.error or "")
    broken = bridge.read("", "Warning: disabling flag x\nSyntaxError: bad", timed_out=False,
                         timeout=1)
    assert broken.error == "The program could not run: SyntaxError: bad"


@pytest.mark.slow  # a Node.js process per case
@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
@pytest.mark.parametrize(("code", "entries", "expect"), [
    ("return await tools.f({a: 1});", [], {"calls": [
        {"path": "f", "kind": "function", "name": "f", "namespace": None,
         "arguments": '{"a":1}'}]}),
    ("return await tools.f({a: 1});", [{"path": "f", "output": "ok"}], {"done": "ok"}),
    ("const r = await Promise.all([tools.f({}), tools.ns.a({})]); return r;",
     [{"path": "f", "output": "1"}], {"calls": [
         {"path": "ns.a", "kind": "function", "name": "a", "namespace": "ns",
          "arguments": "{}"}]}),
    ("return await tools.ns.a({});", [{"path": "f", "output": "1"}],
     {"error": "call 1 of the program to the client's tools was ns.a on this run but f "
               "before: the program is not deterministic"}),
    ("try { await tools.g(); } catch (e) { return e.message; }", [],
     {"done": 'g may not be called from a program (its allowed_callers do not include '
              '"programmatic")'}),
    ("console.log('a', {b: 1});", [], {"done": None}),
])
def test_the_prelude_replays_and_pends(code: str, entries: list, expect: dict) -> None:
    callable_ = [Callable("function", "f", None, None, None),
                 Callable("function", "a", "ns", None, None)]
    source = bridge.script(code, entries, callable_, ["g"])
    ran = subprocess.run(["node", "-"], input=source, capture_output=True, text=True,
                         timeout=60)
    outcome = bridge.read(ran.stdout, ran.stderr, timed_out=False, timeout=60)
    if "calls" in expect:
        assert outcome.calls == expect["calls"]
    elif "error" in expect:
        assert outcome.error == expect["error"]
    else:
        assert outcome.done and outcome.result == expect["done"]
        if expect["done"] is None:
            assert outcome.logs == 'a {"b":1}'


def test_a_forged_frame_reaches_no_tool_it_may_not_call() -> None:
    """The frame comes from the jail: a call it names is checked against the tools a program
    may call, and its kind comes from the gateway, not the frame."""
    from responses_gateway.tools.programmatic.tool import ProgrammaticTool

    tool = ProgrammaticTool([Callable("function", "f", None, None, None)], ["g"], None, None)
    tool.served = [Callable("server:mcp", "add", "lab", None, None)]
    good = tool._checked([{"path": "lab.add", "kind": "function", "arguments": "{}"}])
    assert good == [{"path": "lab.add", "kind": "server:mcp", "name": "add",
                     "namespace": "lab", "arguments": "{}"}]
    assert tool._checked([{"path": "g", "kind": "function", "arguments": "{}"}]) is None
    assert tool._checked([{"path": "f", "arguments": 3}]) is None
    assert tool._checked(["f"]) is None


def test_an_output_past_its_bound_says_so() -> None:
    cut = bridge.read("partial", "", timed_out=False, timeout=1, dropped=10)
    assert "GATEWAY_CODE_MAX_OUTPUT_BYTES" in (cut.error or "")


def _mcp(output: str) -> dict:
    return {"type": "mcp_call", "id": f"mcp_{output}", "server_label": "lab", "name": "add",
            "arguments": "{}", "output": output, "status": "completed"}


def test_the_gateway_calls_of_a_program_are_told_by_where_they_stand() -> None:
    caller = {"type": "program", "caller_id": "call_p"}
    items = [{"type": "program", "call_id": "call_p", "code": "x", "fingerprint": "f"},
             _mcp("1"), _mcp("3"),
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
              "caller": caller},
             _mcp("99"),  # the model's own call, run after the program paused
             {"type": "function_call_output", "call_id": "c1", "output": "one"},
             _mcp("6"),  # the resumed program's, before its next call
             {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}",
              "caller": caller}]
    [program] = journal.programs(items).values()
    assert [s["output"] for s in program.served] == ["1", "3", "6"]
    assert program.journal()[1:] == [{"path": "f", "output": None}] + [
        {"lane": "server", "path": "lab.add", "output": o} for o in ("1", "3", "6")]
    ci = {"type": "code_interpreter_call", "id": "ci_1", "code": "1", "container_id": "c",
          "outputs": None, "status": "completed"}
    items[2:2] = [ci]  # its output is not in its item: its reads are (tools/reads.py)
    [program] = journal.programs(items, {"ci_1": "printed\n"}).values()
    assert [s.get("output") for s in program.served] == ["1", "printed\n", "3", "6"]
    assert [e["path"] for e in program.journal() if e.get("lane")] == [
        "lab.add", "python", "lab.add", "lab.add"]


def test_a_gateway_call_without_its_reads_is_never_run_again() -> None:
    """Issue 47: a code_interpreter call a program made before it paused answers from the
    journal on resume, even when what it printed is no longer at hand (a ``store: false``
    chain in another process): its side effects must not happen twice."""
    caller = {"type": "program", "caller_id": "call_p"}
    items = [{"type": "program", "call_id": "call_p", "code": "x", "fingerprint": "f"},
             {"type": "code_interpreter_call", "id": "ci_1", "code": "1", "container_id": "c",
              "outputs": [{"type": "logs", "logs": "from the item"}], "status": "completed"},
             {"type": "code_interpreter_call", "id": "ci_2", "code": "2", "container_id": "c",
              "outputs": None, "status": "completed"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
              "caller": caller},
             {"type": "function_call_output", "call_id": "c1", "output": "one"}]
    program = journal.waiting(items, {})
    assert program is not None
    served = [e for e in program.journal() if e.get("lane")]
    assert [e["path"] for e in served] == ["python", "python"]
    assert served[0]["output"] == "from the item"
    assert "no longer at hand" in served[1]["output"]


def test_a_hosted_shell_call_is_in_the_gateways_lane() -> None:
    """A hosted ``shell_call`` (its environment names a container) a program made is read
    from its items on resume, like an ``mcp_call``; the client's shell would carry
    ``caller``."""
    caller = {"type": "program", "caller_id": "call_p"}
    items = [{"type": "program", "call_id": "call_p", "code": "x", "fingerprint": "f"},
             {"type": "shell_call", "id": "sh_1", "call_id": "s1", "status": "completed",
              "action": {"commands": ["wc -l < log"]},
              "environment": {"type": "container_reference", "container_id": "cntr_1"}},
             {"type": "shell_call_output", "id": "sho_1", "call_id": "s1",
              "output": [{"stdout": "1\n", "stderr": "",
                          "outcome": {"type": "exit", "exit_code": 0}}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
              "caller": caller},
             {"type": "function_call_output", "call_id": "c1", "output": "one"}]
    program = journal.waiting(items)
    assert program is not None
    [served] = [e for e in program.journal() if e.get("lane")]
    assert served["path"] == "shell" and '"stdout": "1\\n"' in served["output"]


def test_fitting_never_cuts_between_a_program_and_its_output() -> None:
    """Issue 47: truncation and compaction keep ``program`` with its ``program_output`` and
    the program's calls (a gateway's ``mcp_call`` among them) between them."""
    from responses_gateway.responses.fitting.cuts import cut_points, drop

    caller = {"type": "program", "caller_id": "call_p"}
    items = [{"type": "message", "role": "user", "content": "go"},
             {"type": "program", "call_id": "call_p", "code": "x", "fingerprint": "f"},
             _mcp("1"),
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
              "caller": caller},
             {"type": "function_call_output", "call_id": "c1", "output": "one"},
             _mcp("2"),
             {"type": "program_output", "call_id": "call_p", "result": "r",
              "status": "completed"},
             {"type": "message", "role": "assistant", "content": "done"},
             {"type": "message", "role": "user", "content": "next"}]
    assert cut_points(items) == [1, 7, 8]
    # a program whose output is in the latest turn stays whole, its calls with it
    assert drop(items, [0, 1, 2, 3, 4, 5], set(), 10**9) == {0}


@pytest.mark.parametrize(("kind", "item_type", "field", "event"), [
    ("function", "function_call", "arguments", "response.function_call_arguments"),
    ("custom", "custom_tool_call", "input", "response.custom_tool_call_input"),
])
def test_a_programs_client_call_is_written_as_the_models_own(
    kind: str, item_type: str, field: str, event: str
) -> None:
    """A program's call of a function or custom tool the client runs: added, its arguments
    (or input) streamed once, done; its ``caller`` the program; valid for openai-python."""
    from responses_gateway.tools.programmatic.tool import _client_call
    from responses_gateway.translate.request import parse_create_request
    from responses_gateway.translate.response_object import new_response
    from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
    from tests.helpers.responses_validation import sdk_validate_event

    response = new_response(parse_create_request({"model": "m"}).echo(), response_id="resp_p",
                            created_at=1, status="in_progress")
    writer = ResponseTranslator(response, TranslateOptions())
    writer.start()
    pending = {"kind": kind, "name": "lookup", "namespace": "docs", "arguments": "{\"q\": 1}"}
    events = _client_call(writer, "call_program", pending)  # type: ignore[arg-type]
    assert [e["type"] for e in events] == [
        "response.output_item.added", f"{event}.delta", f"{event}.done",
        "response.output_item.done"]
    for e in events:
        sdk_validate_event(e)
    item = events[-1]["item"]
    assert item["type"] == item_type and item[field] == "{\"q\": 1}"
    assert item.get("status") == (None if kind == "custom" else "completed")
    assert item["namespace"] == "docs"
    assert item["caller"] == {"type": "program", "caller_id": "call_program"}
    assert events[2][field] == "{\"q\": 1}" and events[1]["delta"] == "{\"q\": 1}"

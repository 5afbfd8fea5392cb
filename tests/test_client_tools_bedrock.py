"""Tools the client runs (issue 29) on the Bedrock backend: ``shell`` streamed and
``apply_patch`` not, each a typed call item from a Converse ``toolUse`` and its output going
back as the ``toolResult``, over the fake Bedrock runtime (real AWS event-stream framing)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.helpers.e2e import client_for, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response
from tests.test_e2e_bedrock import (
    NOVA,
    assistant,
    bedrock_settings,
    converse_json,
    converse_stream,
    tool,
    tool_result,
    tool_use,
    user,
)

SHELL = {"type": "shell", "environment": {"type": "local"}}
OUTPUT = [{"stdout": "README.md\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


@pytest.fixture(scope="module")
def client(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    db = tmp_path_factory.mktemp("client-tools-bedrock") / "gateway.db"
    with GatewayServer(bedrock_settings(fake, db)) as server, client_for(server) as c:
        yield c


@pytest.fixture
def bedrock(fake: FakeBedrock) -> FakeBedrock:
    with fake.lock:
        fake.requests.clear()
    return fake


@pytest.mark.slow
def test_shell_streamed_then_its_output_as_the_tool_result(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.stream(NOVA, converse_stream(
        tool("tooluse_sh1", "shell", '{"action": {"comm', 'ands": ["ls"]}}'), stop="tool_use"))
    events = sdk_events(client.responses.create(
        model=NOVA, input="List the files.", tools=[SHELL], stream=True))
    for event in events:
        sdk_validate_event(event)
    first = events[-1]["response"]
    sdk_validate_response(first)
    [call] = first["output"]
    assert call["type"] == "shell_call" and call["call_id"] == "tooluse_sh1"
    assert call["action"]["commands"] == ["ls"] and call["status"] == "completed"
    assert [e["delta"] for e in events if e["type"] == "response.shell_call_command.delta"] == [
        "ls"]
    [sent] = bedrock.requests
    [spec] = sent.body["toolConfig"]["tools"]
    assert spec["toolSpec"]["name"] == "shell"
    assert spec["toolSpec"]["inputSchema"]["json"]["required"] == ["action"]

    bedrock.requests.clear()
    bedrock.json(NOVA, converse_json({"text": "There is a README."}))
    second = client.responses.create(
        model=NOVA, tools=[SHELL], previous_response_id=first["id"],
        input=[{"type": "shell_call_output", "call_id": "tooluse_sh1", "output": OUTPUT}])
    assert second.output_text == "There is a README."
    [sent] = bedrock.requests
    assert sent.body["messages"] == [
        user("List the files."),
        assistant(tool_use("tooluse_sh1", "shell", {"action": call["action"]})),
        user(tool_result("tooluse_sh1", json.dumps(OUTPUT))),
    ]


def test_apply_patch_not_streamed(client: OpenAI, bedrock: FakeBedrock) -> None:
    operation = {"type": "update_file", "path": "a.py", "diff": "@@\n-x = 1\n+x = 2\n"}
    bedrock.json(NOVA, converse_json(
        tool_use("tooluse_ap1", "apply_patch", {"operation": operation}), stop="tool_use"))
    first = client.responses.create(model=NOVA, input="Set x to 2.",
                                    tools=[{"type": "apply_patch"}],
                                    tool_choice={"type": "apply_patch"}).to_dict(mode="json")
    sdk_validate_response(first)
    [call] = first["output"]
    assert call["type"] == "apply_patch_call" and call["operation"] == operation
    [sent] = bedrock.requests
    assert sent.body["toolConfig"]["toolChoice"] == {"tool": {"name": "apply_patch"}}

    bedrock.requests.clear()
    bedrock.json(NOVA, converse_json({"text": "Patched."}))
    client.responses.create(model=NOVA, tools=[{"type": "apply_patch"}],
                            previous_response_id=first["id"], input=[
                                {"type": "apply_patch_call_output", "call_id": "tooluse_ap1",
                                 "status": "completed", "output": "Updated a.py"}])
    [sent] = bedrock.requests
    assert sent.body["messages"][-1] == user(tool_result(
        "tooluse_ap1", '{"status": "completed", "output": "Updated a.py"}'))

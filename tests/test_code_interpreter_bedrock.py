"""code_interpreter with GATEWAY_BACKEND=bedrock (issue 42): the fake Bedrock runtime
(tests/helpers/eventstream_server.py) asks for the ``python`` function with a toolUse block,
reads the run's output as a toolResult, and answers; the sandbox engine runs the code. A
chained request runs in the same container. The model's turns depend on what it was sent, so
they are computed per request (Converse), or queued one a turn (ConverseStream)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, client_for, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.test_code_interpreter import AUTO, OUTPUTS, calls_of
from tests.test_e2e_bedrock import (
    NOVA,
    bedrock_settings,
    converse_json,
    converse_stream,
    text,
    tool,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


@pytest.fixture(scope="module")
def client(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    where: Path = tmp_path_factory.mktemp("code-bedrock")
    settings = bedrock_settings(fake, where / "gateway.db", code_interpreter="sandbox",
                                container_dir=str(where / "containers"))
    with GatewayServer(settings) as gateway, client_for(gateway) as c:
        yield c


def model_running(code: str) -> Any:
    """A model that runs ``code`` once, then answers with what the run printed."""

    def turn(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]["content"]
        results = [b["toolResult"] for b in last if "toolResult" in b]
        if results:
            printed = results[0]["content"][0]["text"]
            return converse_json({"text": f"It printed {printed.strip()}"})
        return converse_json({"toolUse": {"toolUseId": f"tooluse_{len(code)}",
                                          "name": "python", "input": {"code": code}}},
                             stop="tool_use")
    return turn


def test_bedrock_model_runs_code_and_keeps_state(fake: FakeBedrock, client: OpenAI) -> None:
    fake.answer_with(NOVA, model_running("base = 40\nprint(base + 2)"))
    first = check_response(client.responses.create(
        model=NOVA, input="Add two to forty.", tools=AUTO, include=[OUTPUTS]))
    [call] = calls_of(first)
    assert call["status"] == "completed" and call["code"] == "base = 40\nprint(base + 2)"
    assert call["outputs"][-1]["logs"].strip() == "42"
    assert first["output"][-1]["content"][0]["text"] == "It printed 42"
    sent = fake.requests_for(NOVA)[-2].body
    assert [t["toolSpec"]["name"] for t in sent["toolConfig"]["tools"]] == ["python"]

    fake.answer_with(NOVA, model_running("print(base * 2)"))
    later = check_response(client.responses.create(
        model=NOVA, input="Double it.", tools=AUTO, previous_response_id=first["id"]))
    [again] = calls_of(later)
    assert again["container_id"] == call["container_id"]
    assert later["output"][-1]["content"][0]["text"] == "It printed 80"
    # the earlier call went back to Bedrock as a toolUse and its toolResult
    messages = fake.requests_for(NOVA)[-2].body["messages"]
    uses = [b["toolUse"] for m in messages for b in m["content"] if "toolUse" in b]
    assert uses[0]["name"] == "python" and uses[0]["input"] == {"code": call["code"]}


def test_bedrock_streamed_code_deltas_come_from_the_tool_use_fragments(
        fake: FakeBedrock, client: OpenAI) -> None:
    fake.streams(NOVA, converse_stream(
        tool("tooluse_ci", "python", '{"co', 'de": "print(\\"str', 'eam\\")"}'),
        stop="tool_use"), converse_stream(text("Streamed.")))
    events = sdk_events(client.responses.create(
        model=NOVA, input="Run it.", tools=AUTO, include=[OUTPUTS], stream=True))
    check_stream(events)
    [call] = calls_of(events[-1]["response"])
    deltas = [e["delta"] for e in events
              if e["type"] == "response.code_interpreter_call_code.delta"]
    assert deltas == ['print("str', 'eam")'] and call["code"] == 'print("stream")'
    assert call["outputs"][-1]["logs"].strip() == "stream"
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "Streamed."

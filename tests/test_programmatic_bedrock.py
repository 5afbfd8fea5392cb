"""Programmatic tool calling with GATEWAY_BACKEND=bedrock: the fake Bedrock runtime
(tests/helpers/eventstream_server.py) writes a program with a toolUse block, the program
pauses on a client function, the client answers, and the resumed program's result reaches
the model as a toolResult; the sandbox engine runs the program. Validated against
openai-python 3.57's types (the Open Responses spec has no program items)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.e2e import client_for
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.test_e2e_bedrock import NOVA, bedrock_settings, converse_json
from tests.test_programmatic import PTC, WEATHER, _works, answer, create, program_calls

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


@pytest.fixture(scope="module")
def client(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    if not _works():
        pytest.skip("the sandbox engine (bubblewrap) or Node.js is not available here")
    where: Path = tmp_path_factory.mktemp("ptc-bedrock")
    settings = bedrock_settings(fake, where / "gateway.db", code_interpreter="sandbox",
                                container_dir=str(where / "containers"))
    with GatewayServer(settings) as gateway, client_for(gateway) as c:
        yield c


def model_writing(code: str) -> Any:
    """A model that writes ``code`` as a program once, then answers with its result."""

    def turn(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]["content"]
        results = [b["toolResult"] for b in last if "toolResult" in b]
        if results:
            return converse_json({"text": "Result: " + results[0]["content"][0]["text"]})
        return converse_json({"toolUse": {"toolUseId": "tooluse_program", "name": "program",
                                          "input": {"code": code}}}, stop="tool_use")
    return turn


def test_bedrock_model_writes_a_program_that_pauses(fake: FakeBedrock,
                                                    client: OpenAI) -> None:
    fake.answer_with(NOVA, model_writing(
        "return 'it is ' + await tools.get_weather({city: 'Bern'});"))
    first = create(client, False, model=NOVA, input="Weather in Bern?", tools=[PTC, WEATHER])
    assert [i["type"] for i in first["output"]] == ["program", "function_call"]
    [call] = program_calls(first)
    sent = fake.requests_for(NOVA)[-1].body
    assert [t["toolSpec"]["name"] for t in sent["toolConfig"]["tools"]] == ["program"]
    second = create(client, False, model=NOVA, tools=[PTC, WEATHER],
                    previous_response_id=first["id"], input=[answer(call)])
    assert second["output"][0]["result"] == "it is sunny in Bern"
    assert second["output"][-1]["content"][0]["text"] == "Result: it is sunny in Bern"

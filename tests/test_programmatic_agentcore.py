"""Programmatic tool calling on the AWS platform: programs run by AgentCore's own JavaScript
(``executeCode``, ``language: javascript``, ``runtime: nodejs``) in sessions of the fake
AgentCore (tests/helpers/agentcore_server.py, its real wire format), DynamoDB on moto, the
scripted upstream as the model: a program pauses on a client function and resumes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from openai import OpenAI

from tests.helpers.file_storage import gateway_on
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_programmatic import PTC, WEATHER, answer, create, program_calls, writing

pytestmark = pytest.mark.slow  # the AWS platform on moto, a session per execution

KEY = "key-agentcore-ptc"


@pytest.mark.skipif(shutil.which("node") is None, reason="the fake runs Node.js")
def test_programs_run_in_agentcore_javascript(upstream: ScriptedUpstream,
                                              tmp_path: Path) -> None:
    from tests.helpers.agentcore_server import FakeAgentCore

    code = ("const a = await tools.get_weather({city: 'Oslo'});\n"
            "const b = await tools.get_weather({city: 'Lima'});\nreturn `${a} / ${b}`;")
    with FakeAgentCore() as fake, gateway_on(
            "aws", tmp_path, api_keys=(KEY,), code_interpreter="agentcore",
            agentcore_endpoint_url=fake.url, bedrock_region="us-east-1",
            upstream_url=upstream.base_url) as server, \
            OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60) as client:
        response = create(client, False, model="m", tools=[PTC, WEATHER],
                          input=writing("agentcore-ptc", code))
        for _ in range(2):
            [call] = program_calls(response)
            response = create(client, True, model="m", tools=[PTC, WEATHER],
                              previous_response_id=response["id"], input=[answer(call)])
        assert response["output"][0]["result"] == "sunny in Oslo / sunny in Lima"
        assert response["output"][0]["status"] == "completed"
        thrown = create(client, False, model="m", tools=[PTC],
                        input=writing("agentcore-throw", "throw new Error('no luck');"))
        assert thrown["output"][1]["status"] == "incomplete"
        assert "no luck" in thrown["output"][1]["result"]
        assert [r for r in fake.refused if r[1] == "ValidationException"] == []

"""Issue 17 end to end: the openai client, through the gateway, in front of upstreams that hold
requests to a real server's rules (tests/helpers/upstream_schemas.py) and name themselves in
``GET /v1/models`` as that server does. The agent loop and output limits must work with the
dialect chosen automatically, as a new user would run it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.e2e import MODEL, WEATHER_TOOL, check_response, client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.upstream_schemas import CHECKS

# owned_by in GET /v1/models -> the dialect it names, and the status that server answers a
# request it refuses with (llama-cpp-python: 500 for its validation errors).
SERVERS = {"llamacpp": ("llama.cpp", 400), "me": ("llama-cpp-python", 500),
           "library": ("ollama", 400), "vllm": ("vllm", 400)}


@pytest.fixture(params=list(SERVERS), scope="module")
def served(request: Any, tmp_path_factory: Any) -> Iterator[tuple[OpenAI, ScriptedUpstream, str]]:
    dialect, status = SERVERS[request.param]
    check = CHECKS[dialect]

    def validate(body: dict[str, Any]) -> tuple[int, Any] | None:
        problems = check(body)
        if not problems:
            return None
        return status, {"error": {"message": "; ".join(problems),
                                  "type": "invalid_request_error", "param": None, "code": None}}

    db: Path = tmp_path_factory.mktemp("dialects") / "gw.db"
    with ScriptedUpstream(owned_by=request.param, validate=validate) as up, \
            GatewayServer(e2e_settings(up, db)) as gw:
        yield client_for(gw), up, dialect


def test_agent_loop_through_every_dialect(served: tuple[OpenAI, ScriptedUpstream, str]) -> None:
    client, upstream, dialect = served
    upstream.reset()
    question = {"role": "user",
                "content": "loop [[script:tool args='{\"city\": \"Oslo\"}']]"}
    first = client.responses.create(model=MODEL, input=[question], tools=[WEATHER_TOOL])
    [call] = first.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Oslo"}
    second = client.responses.create(model=MODEL, tools=[WEATHER_TOOL], input=[
        question, call.to_dict(mode="json"),
        {"type": "function_call_output", "call_id": call.call_id, "output": "cold, -3 C"},
    ])
    assert second.status == "completed", second.error
    assert second.output_text == "Tool output: cold, -3 C"
    check_response(second)
    [sent] = [r for r in upstream.requests if r["messages"][-1].get("role") == "tool"]
    assert CHECKS[dialect](sent) == []
    assert sent["messages"][1]["content"] in ("", None)


def test_output_limit_through_every_dialect(
    served: tuple[OpenAI, ScriptedUpstream, str],
) -> None:
    client, upstream, _ = served
    upstream.reset()
    response = client.responses.create(
        model=MODEL, input="limit [[script:length text='This answer is cut']]",
        max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    [sent] = upstream.requests
    assert sent["max_tokens"] == 16 and "max_completion_tokens" not in sent

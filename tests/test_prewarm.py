"""``prompt_cache_options.prewarm`` (issue 43) through openai-python 3.57 used unmodified: the
backend reads the prompt with its cache points and generates nothing; the client gets a
``completed`` Response with no output, the prompt's usage (cache writes counted) and no
output tokens, streamed or not, and later turns chain from it. On Bedrock, every Converse
request is checked against botocore's model (tests/helpers/converse_strict.py) and asserted
exactly; on an OpenAI-compatible server, the scripted upstream records what it received.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.converse_strict import assert_valid_converse
from tests.helpers.e2e import (
    WEATHER_TOOL,
    check_response,
    check_stream,
    client_for,
    e2e_settings,
    sdk_events,
)
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_e2e_bedrock import (
    CLAUDE,
    WEATHER_SPEC,
    bedrock_settings,
    converse_json,
    converse_stream,
    text,
    user,
)

WRITE_USAGE = {"inputTokens": 5, "outputTokens": 1, "totalTokens": 2106,
               "cacheReadInputTokens": 0, "cacheWriteInputTokens": 2100}
ONE_HOUR = {"cachePoint": {"type": "default", "ttl": "1h"}}


@pytest.fixture(scope="module")
def bedrock() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


@pytest.fixture(scope="module")
def gateway(bedrock: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("prewarm-bedrock") / "gateway.db"
    with GatewayServer(bedrock_settings(bedrock, db)) as server:
        yield server


@pytest.fixture(scope="module")
def openai_gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("prewarm-openai") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


@pytest.fixture(scope="module")
def openai_client(openai_gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(openai_gateway) as c:
        yield c


def sent(fake: FakeBedrock, operation: str) -> dict[str, Any]:
    with fake.lock:
        [request] = fake.requests
        fake.requests.clear()
    assert request.operation == operation
    assert_valid_converse(request.body, operation)
    return request.body


def assert_prewarmed(response: dict[str, Any], cache_write: int, input_tokens: int) -> None:
    assert response["status"] == "completed" and response["output"] == []
    assert response["usage"] == {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cache_write_tokens": cache_write, "cached_tokens": 0},
        "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens}
    assert response["prompt_cache_options"] == {"mode": "implicit", "ttl": "12h"}


# -- Bedrock -------------------------------------------------------------------------------------


def test_prewarm_on_bedrock_writes_the_cache_points_and_stops_at_one_token(
        client: OpenAI, bedrock: FakeBedrock) -> None:
    with bedrock.lock:
        bedrock.requests.clear()
    bedrock.json(CLAUDE, converse_json({"text": "Sure"}, stop="max_tokens",
                                       usage=WRITE_USAGE))
    response = check_response(client.responses.create(
        model=CLAUDE, instructions="Long shared prefix.", input="Question?",
        tools=[WEATHER_TOOL], prompt_cache_key="tenant-a", reasoning={"effort": "high"},
        prompt_cache_options={"prewarm": True, "ttl": "12h"}))

    # 12h asks more than Bedrock keeps: its longest, 1 h, on every point; one token, no
    # thinking (it cannot run in one token)
    assert sent(bedrock, "converse") == {
        "system": [{"text": "Long shared prefix."}, ONE_HOUR],
        "messages": [user("Question?", ONE_HOUR)],
        "toolConfig": {"tools": [WEATHER_SPEC, ONE_HOUR]},
        "inferenceConfig": {"maxTokens": 1},
    }
    assert_prewarmed(response, cache_write=2100, input_tokens=2105)

    # The next turn chains from it and generates as usual.
    bedrock.json(CLAUDE, converse_json({"text": "Answer."}))
    answer = check_response(client.responses.create(
        model=CLAUDE, previous_response_id=response["id"], input="Question?",
        prompt_cache_key="tenant-a"))
    assert answer["output"][0]["content"][0]["text"] == "Answer."
    assert "inferenceConfig" not in sent(bedrock, "converse")


def test_a_streamed_prewarm_is_created_in_progress_completed(
        client: OpenAI, bedrock: FakeBedrock) -> None:
    with bedrock.lock:
        bedrock.requests.clear()
    bedrock.stream(CLAUDE, converse_stream(text("Hello there"), stop="max_tokens",
                                           usage=WRITE_USAGE))
    events = sdk_events(client.responses.create(
        model=CLAUDE, instructions="Long shared prefix.", input="Question?", stream=True,
        prompt_cache_key="k", prompt_cache_options={"prewarm": True, "ttl": "12h"}))
    check_stream(events)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress",
                                           "response.completed"]
    assert_prewarmed(events[-1]["response"], cache_write=2100, input_tokens=2105)
    body = sent(bedrock, "converse-stream")
    assert body["inferenceConfig"] == {"maxTokens": 1}
    assert body["system"][-1] == ONE_HOUR


# -- OpenAI-compatible -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_prewarm_on_an_openai_compatible_server_asks_for_one_token(
        openai_client: OpenAI, upstream: ScriptedUpstream, stream: bool) -> None:
    marker = f"prewarm-{stream}"
    created = openai_client.responses.create(
        model="m", instructions="Shared instructions.",
        input=f"[[script:text text='a long answer that is never generated']] {marker}",
        tools=[WEATHER_TOOL], reasoning={"effort": "high"}, max_output_tokens=500,
        stream=stream, prompt_cache_options={"prewarm": True, "ttl": "12h"})
    if stream:
        events = sdk_events(created)
        check_stream(events)
        assert [e["type"] for e in events] == ["response.created", "response.in_progress",
                                               "response.completed"]
        response = events[-1]["response"]
    else:
        response = check_response(created)
    [body] = [b for b in upstream.requests if marker in str(b["messages"])]
    # one token, by the name this server's dialect takes (backends/dialects.py)
    assert {k: body[k] for k in ("max_tokens", "max_completion_tokens") if k in body} == {
        "max_tokens": 1}
    assert "reasoning_effort" not in body
    assert body["prompt_cache_options"] == {"ttl": "12h"}  # prewarm is the gateway's
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
    assert response["status"] == "completed" and response["output"] == []
    usage = response["usage"]
    assert usage["output_tokens"] == 0 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"]


def test_without_prewarm_nothing_changes(openai_client: OpenAI,
                                         upstream: ScriptedUpstream) -> None:
    response = check_response(openai_client.responses.create(
        model="m", input="[[script:text text='Hi.']] no-prewarm",
        prompt_cache_options={"prewarm": False}))
    [body] = [b for b in upstream.requests if "no-prewarm" in str(b["messages"])]
    assert "max_completion_tokens" not in body and "max_tokens" not in body
    assert response["output"][0]["content"][0]["text"] == "Hi."
    assert response["prompt_cache_options"] == {"mode": "implicit", "ttl": "30m"}


def test_over_a_websocket_prewarm_wins_over_generate_false(
        openai_gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    """OpenAI's types: ``prewarm`` "overrides the ``generate`` field to ``false``"; the
    backend still reads the prompt (a plain ``generate: false`` never calls it)."""
    from tests.test_websocket import completed, create, session

    [warm] = session(openai_gateway, [create(
        "[[script:text text='never sent']] ws-prewarm", generate=False, store=False,
        prompt_cache_options={"prewarm": True})])
    response = completed(warm)
    assert response["status"] == "completed" and response["output"] == []
    assert response["usage"]["input_tokens"] > 0 and response["usage"]["output_tokens"] == 0
    [body] = [b for b in upstream.requests if "ws-prewarm" in str(b["messages"])]
    assert body["max_tokens"] == 1

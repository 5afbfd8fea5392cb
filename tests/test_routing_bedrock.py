"""Issue 33 on Bedrock: prompt caching with TTLs and breakpoints, service tiers, a route over
two Regions. The gateway under uvicorn, the unmodified ``openai`` client, fake Bedrock runtimes
speaking the AWS wire format; every Converse request checked strictly against botocore's model
(tests/helpers/converse_strict.py) and asserted exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from responses_gateway.backends.route_config import parse_routes
from tests.helpers.converse_strict import assert_valid_converse
from tests.helpers.e2e import WEATHER_TOOL, client_for, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, Recorded, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.test_e2e_bedrock import (
    CLAUDE,
    NOVA,
    WEATHER_SPEC,
    bedrock_settings,
    converse_json,
    converse_stream,
    text,
    user,
)

OLD_CLAUDE = "anthropic.claude-3-5-sonnet-20240620-v1:0"  # no prompt caching on Bedrock
CACHED_USAGE = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 2105,
                "cacheReadInputTokens": 2000, "cacheWriteInputTokens": 100}


def point(ttl: str | None = None) -> dict[str, Any]:
    return {"cachePoint": {"type": "default", **({"ttl": ttl} if ttl else {})}}


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        yield


@pytest.fixture(scope="module")
def east(aws_env: None) -> Iterator[FakeBedrock]:
    with FakeBedrock() as server:
        yield server


@pytest.fixture(scope="module")
def west(aws_env: None) -> Iterator[FakeBedrock]:
    with FakeBedrock() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(east: FakeBedrock, west: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    routes = parse_routes(json.dumps({"routes": {"claude": [
        {"backend": "bedrock", "model": CLAUDE, "region": "us-east-1",
         "endpoint_url": east.url},
        {"backend": "bedrock", "model": CLAUDE, "region": "us-west-2",
         "endpoint_url": west.url},
    ]}, "cooldown_after": 1000}), default_kind="bedrock", secret=lambda name: None)
    db = tmp_path_factory.mktemp("routing-bedrock") / "gateway.db"
    with GatewayServer(bedrock_settings(east, db, routes=routes)) as server:
        yield server


@pytest.fixture
def bedrock(east: FakeBedrock, west: FakeBedrock) -> FakeBedrock:
    for fake in (east, west):
        with fake.lock:
            fake.requests.clear()
    return east


def only(fake: FakeBedrock, operation: str = "converse") -> Recorded:
    [sent] = fake.requests
    assert sent.operation == operation
    assert_valid_converse(sent.body, operation)
    return sent


# -- prompt caching --------------------------------------------------------------------------


def test_cache_points_carry_the_requested_ttl_and_usage_reports_cache_reads(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.json(CLAUDE, converse_json({"text": "Cached."}, usage=CACHED_USAGE))
    response = client.responses.create(
        model=CLAUDE, instructions="Long shared prefix.", input="Question?",
        tools=[WEATHER_TOOL], prompt_cache_key="tenant-a",
        extra_body={"prompt_cache_options": {"ttl": "30m"}})

    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 2000
    assert response.usage.input_tokens == 2103
    one_hour = point("1h")  # at least 30 minutes: Bedrock's 1 h
    assert only(bedrock).body == {
        "system": [{"text": "Long shared prefix."}, one_hour],
        "messages": [user("Question?", one_hour)],
        "toolConfig": {"tools": [WEATHER_SPEC, one_hour]},
    }


def test_explicit_breakpoints_alone_and_ttls_never_increase(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    """``mode: explicit``: only the client's breakpoints; a later point asking a longer TTL
    than an earlier one gets the earlier one's (Bedrock refuses increasing TTLs)."""
    bedrock.json(CLAUDE, converse_json({"text": "Done."}))
    client.responses.create(
        model=CLAUDE, instructions="System text.",
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "A long document.",
             "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "input_text", "text": "More context.",
             "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"}},
            {"type": "input_text", "text": "The question."}]}],
        extra_body={"prompt_cache_options": {"mode": "explicit"}})

    assert only(bedrock).body == {
        "system": [{"text": "System text."}],
        "messages": [user("A long document.", point(), "More context.", point("5m"),
                          "The question.")],
    }


def test_breakpoints_on_system_and_developer_parts_place_points_in_system(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    """System and developer messages stay parts as far as Converse's ``system`` list: a point
    right after each marked part, with its own TTL (or the request's), none added after."""
    bedrock.json(CLAUDE, converse_json({"text": "Done."}))
    client.responses.create(
        model=CLAUDE, instructions="Preamble.",
        input=[{"role": "system", "content": [
                    {"type": "input_text", "text": "Policy.",
                     "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"}},
                    {"type": "input_text", "text": "Tail."}]},
               {"role": "developer", "content": [
                    {"type": "input_text", "text": "Dev rules.",
                     "prompt_cache_breakpoint": {"mode": "explicit"}}]},
               {"role": "user", "content": "Q?"}],
        extra_body={"prompt_cache_options": {"mode": "explicit"}})

    assert only(bedrock).body == {
        "system": [{"text": "Preamble."}, {"text": "Policy."}, point("1h"), {"text": "Tail."},
                   {"text": "Dev rules."}, point()],
        "messages": [user("Q?")],
    }


def test_system_breakpoints_count_first_and_the_implicit_points_fill_up_to_four(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.stream(CLAUDE, converse_stream(text("Ok.")))
    marked = {"mode": "explicit"}
    sdk_events(client.responses.create(
        model=CLAUDE, stream=True, tools=[WEATHER_TOOL], prompt_cache_key="k",
        input=[{"role": "developer", "content": [
                    {"type": "input_text", "text": "A.", "prompt_cache_breakpoint": marked},
                    {"type": "input_text", "text": "B.", "prompt_cache_breakpoint": marked},
                    {"type": "input_text", "text": "C.", "prompt_cache_breakpoint": marked}]},
               {"role": "user", "content": "Hi"}],
        extra_body={"prompt_cache_options": {"ttl": "30m"}}))

    # Three client points in system (the last one also ends it: no second point there); the
    # end of the history (which covers tools and system too) makes four, Bedrock's limit: the
    # tools get none.
    one_hour = point("1h")
    assert only(bedrock, "converse-stream").body == {
        "system": [{"text": "A."}, one_hour, {"text": "B."}, one_hour, {"text": "C."},
                   one_hour],
        "messages": [user("Hi", one_hour)],
        "toolConfig": {"tools": [WEATHER_SPEC]},
    }


def test_nova_caches_system_and_history_but_not_tools(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.json(NOVA, converse_json({"text": "Ok."}))
    client.responses.create(model=NOVA, instructions="Be brief.", input="Hi",
                            tools=[WEATHER_TOOL], prompt_cache_key="k",
                            prompt_cache_retention="24h")

    assert only(bedrock).body == {
        "system": [{"text": "Be brief."}, point("1h")],
        "messages": [user("Hi", point("1h"))],
        "toolConfig": {"tools": [WEATHER_SPEC]},
    }


@pytest.mark.parametrize("model", [OLD_CLAUDE, "meta.llama3-1-70b-instruct-v1:0"])
def test_no_cache_points_for_models_without_caching(
    model: str, client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.json(model, converse_json({"text": "Ok."}))
    client.responses.create(
        model=model, instructions="Be brief.", prompt_cache_key="k",
        input=[{"role": "developer", "content": [
                    {"type": "input_text", "text": "Rules.",
                     "prompt_cache_breakpoint": {"mode": "explicit"}},
                    {"type": "input_text", "text": "More rules."}]},
               {"role": "user", "content": [
            {"type": "input_text", "text": "Doc.", "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "input_text", "text": "Q?"}]}],
        extra_body={"prompt_cache_options": {"ttl": "30m"}})

    body = only(bedrock).body
    assert "cachePoint" not in json.dumps(body)
    assert body["system"] == [{"text": "Be brief."}, {"text": "Rules."}, {"text": "More rules."}]
    assert body["messages"] == [user("Doc.", "Q?")]


# -- service tiers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "sent"), [
    ("flex", "flex"), ("priority", "priority"), ("default", "default"), ("auto", None)])
def test_service_tier_reaches_converse_and_the_response_reports_the_one_used(
    asked: str, sent: str | None, client: OpenAI, bedrock: FakeBedrock
) -> None:
    answer = converse_json({"text": "Ok."})
    if sent:
        answer["serviceTier"] = {"type": sent}
    bedrock.json(NOVA, answer)
    response = client.responses.create(model=NOVA, input="Hi", service_tier=asked)  # type: ignore[arg-type]

    body = only(bedrock).body
    assert body.get("serviceTier") == ({"type": sent} if sent else None)
    assert response.service_tier == (sent or "auto")


def test_streamed_service_tier_comes_from_the_metadata_event(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    events = converse_stream(text("Ok."))
    events[-1]["metadata"]["serviceTier"] = {"type": "priority"}
    bedrock.stream(NOVA, events)
    streamed = sdk_events(client.responses.create(model=NOVA, input="Hi", stream=True,
                                                  service_tier="priority"))

    assert only(bedrock, "converse-stream").body["serviceTier"] == {"type": "priority"}
    assert streamed[-1]["type"] == "response.completed"
    assert streamed[-1]["response"]["service_tier"] == "priority"


# -- a route over two Regions ----------------------------------------------------------------


@pytest.mark.parametrize(("status", "error"), [
    (429, "ThrottlingException"), (503, "ServiceUnavailableException"),
    (500, "InternalServerException")])
def test_a_region_failing_before_output_falls_back_to_the_next(
    status: int, error: str, gateway: GatewayServer, east: FakeBedrock, west: FakeBedrock,
    bedrock: FakeBedrock,
) -> None:
    east.error(CLAUDE, status, error, "not now")
    west.json(CLAUDE, converse_json({"text": "From the west."}))
    with client_for(gateway) as c:
        raw = c.responses.with_raw_response.create(model="claude", input="Hi",
                                                   service_tier="flex")
    response = raw.parse()

    assert response.output_text == "From the west."
    assert response.model == "claude"
    assert raw.headers["x-gateway-deployment"] == f"bedrock:{CLAUDE}@us-west-2"
    assert len(east.requests) == 1  # routed deployments with a fallback do not retry
    sent = only(west)
    assert sent.model_id == CLAUDE
    assert sent.body["serviceTier"] == {"type": "flex"}


def test_a_bad_request_is_not_sent_to_the_other_region(
    gateway: GatewayServer, east: FakeBedrock, west: FakeBedrock, bedrock: FakeBedrock
) -> None:
    import openai

    east.error(CLAUDE, 400, "ValidationException", "The input is invalid.")
    with client_for(gateway) as c, pytest.raises(openai.BadRequestError):
        c.responses.create(model="claude", input="Hi")
    assert len(east.requests) == 1
    assert west.requests == []


def test_routing_settings_give_each_region_its_own_client(
    gateway: GatewayServer, tmp_path: Path
) -> None:
    router = gateway.gateway.backend_for("route:claude")
    regions = [r.backend.region for r in router.deployments]  # type: ignore[attr-defined]
    assert regions == ["us-east-1", "us-west-2"]
    assert [r.backend.max_attempts for r in router.deployments] == [1, 1]  # type: ignore[attr-defined]

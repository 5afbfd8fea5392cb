"""Routes (issue 33): a client model served by ordered deployments, with fallback before output.

Two scripted Chat Completions servers stand for two deployments; the official ``openai``
client, unmodified, talks to the gateway. The first deployment is down, rate limited (429) or
failing (500) before any output: the second serves, streamed, not streamed and in the
background, and the response names the model the client asked for. A failure after output has
started is not sent elsewhere. A deployment that keeps failing is skipped for a cool-down.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from responses_gateway.backends.base import BackendRequest, BaseBackend
from responses_gateway.backends.route_config import Deployment, Routes, parse_routes
from responses_gateway.backends.router import Router
from responses_gateway.config import Settings, SettingsError, settings_from_env
from tests.helpers.e2e import check_response, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import reconstruct
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

HEADER = "x-gateway-deployment"
FAILURES = {  # the first deployment's model on the first server: how it fails
    "down": None,  # a port nobody listens on
    "limited": "script/429 retry_after=none",
    "broken": "script/500",
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on exit: connecting is refused


def routes_json(first: ScriptedUpstream, second: ScriptedUpstream, **extra: Any) -> str:
    down = f"http://127.0.0.1:{closed_port()}/v1"
    routes: dict[str, Any] = {}
    for name, model in FAILURES.items():
        routes[name] = [
            {"backend": "openai", "model": model or "m-first", "name": "first",
             "url": first.base_url if model else down},
            {"backend": "openai", "model": "m-second", "name": "second",
             "url": second.base_url},
        ]
    routes["late"] = [
        {"model": "script/drop after=2", "name": "first", "url": first.base_url},
        {"model": "m-second", "name": "second", "url": second.base_url},
    ]
    return json.dumps({"routes": routes, **extra})


def settings_with_routes(first: ScriptedUpstream, second: ScriptedUpstream, db: Path,
                         **extra: Any) -> Settings:
    routes = parse_routes(routes_json(first, second, **extra), default_kind="openai",
                          secret=lambda name: None)
    return e2e_settings(first, db, routes=routes, max_retries=2)


@pytest.fixture(scope="module")
def first() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def second() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def gateway(first: ScriptedUpstream, second: ScriptedUpstream,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("routing") / "gateway.db"
    # Cool-down out of the way here: each test sees its route's first deployment tried.
    with GatewayServer(settings_with_routes(first, second, db, cooldown_after=1000)) as server:
        yield server


@pytest.fixture
def upstreams(first: ScriptedUpstream, second: ScriptedUpstream
              ) -> tuple[ScriptedUpstream, ScriptedUpstream]:
    first.reset()
    second.reset()
    return first, second


def wait_terminal(client: OpenAI, response_id: str, seconds: float = 15) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


# -- fallback before output ----------------------------------------------------------------


@pytest.mark.parametrize("route", list(FAILURES))
def test_non_stream_falls_back_and_names_the_deployment(
    route: str, client: OpenAI, upstreams: tuple[ScriptedUpstream, ScriptedUpstream],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = upstreams
    caplog.set_level(logging.WARNING, logger="responses_gateway.router")
    raw = client.responses.with_raw_response.create(model=route, input="Say hello")
    response = raw.parse()

    check_response(response)
    assert response.status == "completed"
    assert response.output_text == DEFAULT_TEXT
    assert response.model == route  # the model the client asked for, not a deployment's
    assert raw.headers[HEADER] == "second"
    assert [body["model"] for body in second.requests] == ["m-second"]
    assert len(first.requests) == (0 if route == "down" else 1)  # no retry: the next is it
    [line] = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert (line.route, line.deployment, line.next_deployment) == (route, "first", "second")
    assert line.upstream_status == {"down": 502, "limited": 429, "broken": 500}[route]
    # The line names the route and its deployment, and blames the deployment's own url, not
    # GATEWAY_UPSTREAM_URL (issue 40).
    assert line.getMessage() == (f"routed model {route!r}: deployment 'first' failed before "
                                 "any output, falling back to 'second'")
    assert "GATEWAY_UPSTREAM_URL" not in line.reason
    if route == "down":
        assert line.reason.endswith(f"is the url of route {route!r} deployment 'first' "
                                    "(GATEWAY_ROUTES) right?")


@pytest.mark.parametrize("route", list(FAILURES))
def test_stream_falls_back(route: str, client: OpenAI,
                           upstreams: tuple[ScriptedUpstream, ScriptedUpstream]) -> None:
    _, second = upstreams
    with client.responses.with_streaming_response.create(
        model=route, input="Say hello", stream=True
    ) as raw:
        assert HEADER not in raw.headers  # headers left before any deployment answered
        events = sdk_events(raw.parse())

    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["model"] == route
    assert reconstruct(events).text == DEFAULT_TEXT
    assert len(second.requests) == 1


@pytest.mark.parametrize("route", list(FAILURES))
def test_background_falls_back(route: str, client: OpenAI,
                               upstreams: tuple[ScriptedUpstream, ScriptedUpstream]) -> None:
    _, second = upstreams
    created = client.responses.create(model=route, input="Say hello", background=True)
    final = wait_terminal(client, created.id)

    assert final.status == "completed"
    assert final.output_text == DEFAULT_TEXT
    assert final.model == route
    assert len(second.requests) == 1


def test_every_deployment_failing_is_the_last_ones_error(
    client: OpenAI, tmp_path: Path, first: ScriptedUpstream
) -> None:
    routes = parse_routes(json.dumps({"twice": [
        {"model": "script/500", "url": first.base_url, "name": "a"},
        {"model": "script/429 retry_after=none", "url": first.base_url, "name": "b"},
    ]}), default_kind="openai", secret=lambda name: None)
    with GatewayServer(e2e_settings(first, tmp_path / "g.db", routes=routes)) as server, \
            client_for(server) as c:
        import openai

        with pytest.raises(openai.RateLimitError):
            c.responses.create(model="twice", input="Say hello")


# -- no fallback once output has started -----------------------------------------------------


def test_failure_after_output_is_not_retried(
    client: OpenAI, upstreams: tuple[ScriptedUpstream, ScriptedUpstream]
) -> None:
    first, second = upstreams
    events = sdk_events(client.responses.create(model="late", input="Say hello", stream=True))

    assert events[-1]["type"] == "response.failed"
    assert "connection closed" in events[-1]["response"]["error"]["message"]
    assert reconstruct(events).text  # the partial output is kept
    assert DEFAULT_TEXT.startswith(reconstruct(events).text)
    assert len(first.requests) == 1
    assert second.requests == []  # nothing was sent elsewhere


def test_a_body_cut_before_a_non_stream_answer_is_whole_falls_back(
    client: OpenAI, upstreams: tuple[ScriptedUpstream, ScriptedUpstream]
) -> None:
    """Without streaming upstream the answer is one chunk: cut mid-body, nothing reached the
    client yet, so the next deployment may still serve it."""
    first, second = upstreams
    response = client.responses.create(model="late", input="Say hello")

    assert response.status == "completed"
    assert response.output_text == DEFAULT_TEXT
    assert (len(first.requests), len(second.requests)) == (1, 1)


# -- the cool-down ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_deployment_that_keeps_failing_is_skipped_for_the_cooldown(
    first: ScriptedUpstream, second: ScriptedUpstream, tmp_path: Path
) -> None:
    # 3 s: the three creates made while it cools down must fit in it on a loaded machine
    settings = settings_with_routes(first, second, tmp_path / "g.db", cooldown_after=2,
                                    cooldown_seconds=3)
    with GatewayServer(settings) as server, client_for(server) as c:
        first.reset()
        second.reset()
        for _ in range(2):
            assert c.responses.create(model="broken", input="Hi").output_text == DEFAULT_TEXT
        assert len(first.requests) == 2
        for _ in range(3):  # cooling down: straight to the second deployment
            assert c.responses.create(model="broken", input="Hi").output_text == DEFAULT_TEXT
        assert len(first.requests) == 2
        assert len(second.requests) == 5
        time.sleep(3.1)  # cooled down: tried again (and, failing, skipped again at once)
        c.responses.create(model="broken", input="Hi")
        c.responses.create(model="broken", input="Hi")
        assert len(first.requests) == 3


# -- configuration ---------------------------------------------------------------------------


def test_routes_from_env_json_and_file(tmp_path: Path) -> None:
    text = json.dumps({"claude": [
        {"backend": "bedrock", "model": "anthropic.claude-x", "region": "us-east-1"},
        {"backend": "bedrock", "model": "anthropic.claude-x", "region": "us-west-2",
         "weight": 0},
        {"model": "llama", "url": "http://10.0.0.5:8000/v1", "api_key": "VLLM_KEY"},
        "openai:gpt-4o",
    ]})
    env = {"GATEWAY_ROUTES": text, "VLLM_KEY": "sk-vllm"}
    settings = settings_from_env(env)
    assert settings.routes is not None
    names = [d.name for d in settings.routes.routes["claude"]]
    assert names == ["bedrock:anthropic.claude-x@us-east-1",
                     "bedrock:anthropic.claude-x@us-west-2",
                     "openai:llama@10.0.0.5:8000", "openai:gpt-4o"]
    assert settings.routes.routes["claude"][2].api_key == "sk-vllm"
    assert "sk-vllm" not in repr(settings)  # a key never reaches a log line
    route = settings.route("claude")
    assert (route.backend, route.model) == ("route:claude", "anthropic.claude-x")
    assert settings.route("other").backend == "openai"

    path = tmp_path / "routes.json"
    path.write_text(text)
    from_file = settings_from_env({"GATEWAY_ROUTES": str(path), "VLLM_KEY": "sk-vllm"})
    assert from_file.routes == settings.routes


@pytest.mark.parametrize(("value", "words"), [
    ("{not json", "GATEWAY_ROUTES must be JSON"),
    ("/nonexistent/routes.json", "GATEWAY_ROUTES: cannot read the file"),
    ('{"a": []}', "'a' must map to a non-empty list"),
    ('{"a": [{"backend": "azure", "model": "x"}]}', "backend must be one of"),
    ('{"a": [{"backend": "bedrock"}]}', "model must be a non-empty string"),
    ('{"a": [{"model": "x", "region": "us-east-1"}]}', "'region' is not an option of a openai"),
    ('{"a": [{"model": "x", "url": "ftp://h"}]}', "url must be an http"),
    ('{"a": [{"model": "x", "weight": -1}]}', "weight must be a number"),
    ('{"a": [{"model": "x", "api_key": "NOPE"}]}', "names 'NOPE', which is not set"),
    ('{"a": ["x", "x"]}', "two deployments named 'openai:x'"),
    ('{"a": [{"model": "x", "dialect": "klingon"}]}', "dialect must be one of"),
    ('{"routes": {}, "cooldown_after": 0}', "cooldown_after must be a whole number (1 or more)"),
])
def test_a_broken_route_is_a_one_line_error_naming_the_setting(value: str, words: str) -> None:
    with pytest.raises(SettingsError) as caught:
        settings_from_env({"GATEWAY_ROUTES": value})
    message = str(caught.value)
    assert message.startswith("GATEWAY_ROUTES")
    assert words in message
    assert "\n" not in message


def test_no_routes_is_none() -> None:
    assert settings_from_env({}).routes is None
    assert not Routes()


# -- the router's order, by itself -----------------------------------------------------------


class _Answers(BaseBackend):
    """A backend that fails (raises ``error``) or answers one chunk, and counts its calls."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.models: list[str] = []

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Any]]:
        self.models.append(request.body["model"])
        if self.error is not None:
            raise self.error
        yield [{"choices": [{"index": 0, "delta": {"content": "ok"}}]}]


def _router(*backends: tuple[str, float | None, BaseBackend], **kwargs: Any) -> Router:
    return Router("r", [(Deployment(name=n, kind="openai", model=f"m-{n}", weight=w), b)
                        for n, w, b in backends], **kwargs)


async def _served(router: Router) -> str:
    request = BackendRequest(body={"model": "client-name", "messages": []})
    async for _ in router.stream(request):
        pass
    return request.extra["deployment"]


def test_weights_spread_the_first_attempt_in_proportion() -> None:
    import random

    draws = random.Random(7)
    router = _router(("a", 3, _Answers()), ("b", 1, _Answers()), ("last", 0, _Answers()),
                     rng=draws.random)
    firsts = [router.order()[0].deployment.name for _ in range(4000)]
    assert 0.70 < firsts.count("a") / 4000 < 0.80
    assert "last" not in firsts
    assert all(router.order()[-1].deployment.name == "last" for _ in range(50))
    assert [r.deployment.name for r in _router(("x", None, _Answers()),
                                               ("y", None, _Answers())).order()] == ["x", "y"]


def test_cooldown_with_a_clock_and_a_client_error_that_does_not_fall_back() -> None:
    import asyncio

    from responses_gateway.errors import GatewayError, UpstreamError

    now = [0.0]
    failing, spare = _Answers(UpstreamError(503, "busy")), _Answers()
    router = _router(("a", None, failing), ("b", None, spare), cooldown_after=2,
                     cooldown_seconds=10, clock=lambda: now[0])
    assert [asyncio.run(_served(router)) for _ in range(3)] == ["b", "b", "b"]
    assert failing.models == ["m-a", "m-a"]  # skipped from the third request on
    assert spare.models == ["m-b"] * 3  # each deployment gets its own model name
    now[0] = 10.5
    asyncio.run(_served(router))
    assert len(failing.models) == 3  # tried again once cooled down
    everyone_cooling = _router(("a", None, failing), cooldown_after=1, clock=lambda: now[0])
    with pytest.raises(UpstreamError):
        asyncio.run(_served(everyone_cooling))
    with pytest.raises(UpstreamError):
        asyncio.run(_served(everyone_cooling))  # still tried: nothing else to try

    refused = _Answers(GatewayError(400, "bad input"))
    unused = _Answers()
    with pytest.raises(GatewayError):
        asyncio.run(_served(_router(("a", None, refused), ("b", None, unused))))
    assert unused.models == []


# -- what reaches an OpenAI-compatible upstream ------------------------------------------------


def test_cost_and_identity_controls_reach_the_upstream(
    client: OpenAI, upstreams: tuple[ScriptedUpstream, ScriptedUpstream]
) -> None:
    _, second = upstreams
    response = client.responses.create(
        model="down", service_tier="flex", prompt_cache_key="pk", user="u-1",
        safety_identifier="sid", reasoning={"effort": "xhigh"},
        input=[{"role": "developer", "content": [
                    {"type": "input_text", "text": "Rules.",
                     "prompt_cache_breakpoint": {"mode": "explicit"}},  # type: ignore[typeddict-unknown-key]
                    {"type": "input_text", "text": "More rules."}]},
               {"role": "user", "content": [
            {"type": "input_text", "text": "Long context.",
             "prompt_cache_breakpoint": {"mode": "explicit"}},  # type: ignore[typeddict-unknown-key]
            {"type": "input_text", "text": "Question?"}]}],
        extra_body={"prompt_cache_options": {"ttl": "30m"}})

    assert response.status == "completed"
    [sent] = second.requests
    assert {k: sent.get(k) for k in ("service_tier", "prompt_cache_key", "user",
                                     "safety_identifier", "prompt_cache_options",
                                     "reasoning_effort")} == {
        "service_tier": "flex", "prompt_cache_key": "pk", "user": "u-1",
        "safety_identifier": "sid", "prompt_cache_options": {"ttl": "30m"},
        "reasoning_effort": "high"}  # a generic server knows low/medium/high
    # A generic server is not sent OpenAI's per-part breakpoint; its system text stays a string.
    assert "prompt_cache_breakpoint" not in json.dumps(sent["messages"])
    assert sent["messages"][0] == {"role": "system", "content": "Rules.\nMore rules."}


def test_openai_dialect_keeps_breakpoints_and_effort_levels() -> None:
    from responses_gateway.backends.dialects import dialect_named

    body = {"model": "m", "reasoning_effort": "max", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}}]}]}
    openai_body = dialect_named("openai").prepare(body)
    assert openai_body["reasoning_effort"] == "xhigh"
    assert openai_body["messages"][0]["content"][0]["prompt_cache_breakpoint"]
    vllm_body = dialect_named("vllm").prepare({**body, "reasoning_effort": "none"})
    assert "reasoning_effort" not in vllm_body
    assert "prompt_cache_breakpoint" not in vllm_body["messages"][0]["content"][0]
    # System text kept as parts for a breakpoint: OpenAI gets the parts, others one string.
    system = {"role": "system", "content": [
        {"type": "text", "text": "a", "prompt_cache_breakpoint": {"mode": "explicit"}},
        {"type": "text", "text": "b"}]}
    assert dialect_named("openai").prepare({**body, "messages": [system]})["messages"] == [
        system]
    assert dialect_named("vllm").prepare({**body, "messages": [system]})["messages"] == [
        {"role": "system", "content": "a\nb"}]


def test_the_response_reports_the_service_tier_the_upstream_says() -> None:
    from responses_gateway.translate.response_object import new_response
    from responses_gateway.translate.stream import ResponseTranslator

    response = new_response({"model": "m", "service_tier": "auto"}, response_id="resp_1",
                            created_at=0)
    translator = ResponseTranslator(response)
    translator.start()
    translator.feed({"choices": [{"index": 0, "delta": {"content": "hi"},
                                  "finish_reason": "stop"}], "service_tier": "default"})
    translator.feed({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                     "service_tier": "flex"})
    translator.finish()
    assert response["service_tier"] == "flex"


@pytest.mark.parametrize(("breakpoint_", "param", "says"), [
    ({"mode": "implicit"}, "prompt_cache_breakpoint.mode", "'implicit'"),
    ("yes", "prompt_cache_breakpoint", "expected an object"),
    ({"ttl": "30m"}, "prompt_cache_breakpoint.mode", "Missing required parameter"),
    ({"mode": "explicit", "ttl": "1h"}, "prompt_cache_breakpoint.ttl", "'1h'"),
])
def test_a_malformed_breakpoint_is_a_400(client: OpenAI, breakpoint_: Any, param: str,
                                         says: str) -> None:
    """A part's ``prompt_cache_breakpoint`` is read as OpenAI types it (``mode`` "explicit",
    ``ttl`` optional); anything else is OpenAI's 400 naming it, not silently ignored."""
    import openai

    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="down", input=[{"role": "developer", "content": [
            {"type": "input_text", "text": "Rules.",
             "prompt_cache_breakpoint": breakpoint_}]}])  # type: ignore[typeddict-unknown-key]
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["param"] == f"input[0].content[0].{param}"
    assert says in error["message"]

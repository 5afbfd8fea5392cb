"""Per-key limits (issue 34.2): requests and tokens per window and a token budget, from
GATEWAY_LIMITS; past one, OpenAI's 429 with its x-ratelimit-* headers and retry-after, and
openai-python's retry succeeds after the reset; two gateway processes sharing one DynamoDB
table enforce one limit; the WebSocket's creates are limited too. Tokens are reserved before
the upstream is called (a burst never passes the limit; a request larger than it never
reaches the upstream) and settled to what was spent."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from responses_gateway.config import Settings, SettingsError, settings_from_env
from responses_gateway.key_limits import parse_limits
from responses_gateway.limiter import duration, estimate_of
from responses_gateway.token_estimate import estimate_chat
from tests.helpers.gateway_process import GatewayProcess
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import (
    aws_env,
    create_dynamodb_table,
    moto_server,
    sqlite_or_dynamodb,
    use_moto,
)
from tests.helpers.scripted_upstream import ScriptedUpstream, message_text
from tests.helpers.search_providers import SearchProvider

pytestmark = pytest.mark.slow

KEY = "sk-limited-key-0123456789"
SEARCH_KEY = "sk-searxng-limits-0123"
OTHER = "sk-other-key-0123456789"
ADMIN = "admin-key-0123456789abcdef"
TENANT = "t_" + hashlib.sha256(KEY.encode()).hexdigest()[:32]


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return sqlite_or_dynamodb(request, tmp_path)


def gateway(upstream: ScriptedUpstream, tmp_path: Path, limits: dict[str, object],
            store: str | None = None, *, admin: bool = False, **more: Any) -> GatewayServer:
    return GatewayServer(Settings(
        upstream_url=upstream.base_url, store=store or f"sqlite:{tmp_path / 'g.db'}",
        api_keys=(KEY, OTHER), limits=parse_limits(json.dumps(limits)),
        admin_keys=(ADMIN,) if admin else (), **more,
    ))


def at_window_start(width: int, need: float = 4.0) -> None:
    """Wait, if need be, until the window has ``need`` seconds left, so a burst does not
    straddle two windows."""
    while width - time.time() % width < need:
        time.sleep(0.02)


def create(base_url: str, key: str = KEY) -> httpx.Response:
    return httpx.post(base_url + "/responses", json={"model": "m", "input": "hello"},
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_a_burst_past_the_requests_limit_gets_openais_429(
    upstream: ScriptedUpstream, tmp_path: Path, store: str
) -> None:
    with gateway(upstream, tmp_path, {"t_" + "0" * 32: {"requests_per_minute": 1},
                                      TENANT: {"requests_per_minute": 3}}, store) as gw:
        at_window_start(60)
        answers = [create(gw.base_url) for _ in range(5)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
        for n, answer in enumerate(answers[:3]):
            assert answer.headers["x-ratelimit-limit-requests"] == "3"
            assert answer.headers["x-ratelimit-remaining-requests"] == str(2 - n)
            assert answer.headers["x-ratelimit-reset-requests"].endswith("s")
        refused = answers[3]
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert refused.json()["error"]["type"] == "requests"
        assert "Limit 3, Used 3" in refused.json()["error"]["message"]
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["x-request-id"]
        # Another key has its own window (the default rule: none here).
        assert create(gw.base_url, OTHER).status_code == 200
        assert "x-ratelimit-limit-requests" not in create(gw.base_url, OTHER).headers


def test_openai_python_retries_after_the_reset(upstream: ScriptedUpstream,
                                               tmp_path: Path) -> None:
    with gateway(upstream, tmp_path,
                 {"default": {"requests_per_minute": 2, "window_seconds": 3}}) as gw:
        # Warm (the gateway's and the SDK's first-call imports), so the burst fits a window.
        OpenAI(base_url=gw.base_url, api_key=OTHER).responses.create(model="m", input="warm")
        no_retry = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        retrying = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=3)
        at_window_start(3, need=2.8)
        no_retry.responses.create(model="m", input="one")
        no_retry.responses.create(model="m", input="two")
        with pytest.raises(openai.RateLimitError) as refused:
            no_retry.responses.create(model="m", input="three")
        assert refused.value.response.headers["x-ratelimit-remaining-requests"] == "0"
        started = time.monotonic()
        response = retrying.responses.create(model="m", input="four")
        assert response.status == "completed"
        assert time.monotonic() - started >= 1.5  # it waited for the next window


def test_tokens_are_reserved_at_admission_and_settled_to_usage(
    upstream: ScriptedUpstream, tmp_path: Path, store: str
) -> None:
    """A create reserves its estimate before the upstream sees it; its real usage replaces the
    estimate when it is counted, so the next one is judged by what was spent."""
    with gateway(upstream, tmp_path, {"default": {"tokens_per_minute": 20},
                                      TENANT: {"tokens_per_minute": 0,
                                               "tokens_per_period": 20, "period": "day"}},
                 store) as gw:
        at_window_start(60)
        first = create(gw.base_url, OTHER)
        assert first.status_code == 200, first.text
        spent = first.json()["usage"]["total_tokens"]
        estimate = asyncio.run(estimate_of(upstream.requests[-1]))
        assert spent < estimate and 2 * spent + estimate > 20 >= spent + estimate
        # Its answer's headers: the window as it was admitted (its estimate reserved).
        assert first.headers["x-ratelimit-limit-tokens"] == "20"
        assert first.headers["x-ratelimit-remaining-tokens"] == str(20 - estimate)
        second = create(gw.base_url, OTHER)  # fits only because the first was settled
        assert second.status_code == 200, second.text
        assert second.headers["x-ratelimit-remaining-tokens"] == str(20 - spent - estimate)
        seen = len(upstream.requests)
        third = create(gw.base_url, OTHER)
        assert third.status_code == 429
        error = third.json()["error"]
        assert (error["type"], error["code"]) == ("tokens", "rate_limit_exceeded")
        assert error["message"].startswith("Rate limit reached for m with this key on tokens "
                                           f"per min (TPM): Limit 20, Used {2 * spent}, "
                                           f"Requested {estimate}. Please try again in ")
        assert third.headers["x-ratelimit-remaining-tokens"] == str(20 - 2 * spent)
        assert 1 <= int(third.headers["retry-after"]) <= 60
        assert len(upstream.requests) == seen  # refused before the upstream
        # The budget the same way: OpenAI's insufficient_quota once the estimate cannot fit.
        assert create(gw.base_url).status_code == 200
        assert create(gw.base_url).status_code == 200
        over = create(gw.base_url)
        assert over.status_code == 429
        assert over.json()["error"]["code"] == "insufficient_quota"
        assert f"used {2 * spent}, requested {estimate}" in over.json()["error"]["message"]
        assert over.headers["x-ratelimit-limit-tokens"] == "20"
        assert len(upstream.requests) == seen + 2


def test_a_request_larger_than_the_limit_never_reaches_the_upstream(
    upstream: ScriptedUpstream, tmp_path: Path, store: str
) -> None:
    with gateway(upstream, tmp_path, {"default": {"tokens_per_minute": 50}}, store) as gw:
        seen = len(upstream.requests)
        answer = httpx.post(gw.base_url + "/responses",
                            json={"model": "m", "input": "word " * 200},
                            headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert answer.status_code == 429
        error = answer.json()["error"]
        assert (error["type"], error["code"], error["param"]) == (
            "tokens", "rate_limit_exceeded", None)
        requested = int(error["message"].split("Requested ")[1].split(".")[0])
        assert requested > 250  # 1,000 characters of input
        assert error["message"] == (
            "Request too large for m with this key on tokens per min (TPM): Limit 50, "
            f"Requested {requested}. The input or output tokens must be reduced in order to "
            "run successfully.")
        assert answer.headers["x-ratelimit-limit-tokens"] == "50"
        assert answer.headers["x-ratelimit-remaining-tokens"] == "50"  # nothing was counted
        # The output it allows counts too: a small input with a large max_output_tokens.
        capped = httpx.post(gw.base_url + "/responses",
                            json={"model": "m", "input": "hi", "max_output_tokens": 64},
                            headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert capped.status_code == 429
        assert "Request too large" in capped.json()["error"]["message"]
        assert len(upstream.requests) == seen
        assert create(gw.base_url).status_code == 200  # a small one still passes


def test_a_concurrent_burst_never_passes_the_tokens_limit(
    upstream: ScriptedUpstream, tmp_path: Path, store: str
) -> None:
    """Many creates at once against a small tokens-per-minute limit: each reserves its
    estimate atomically, so those admitted together never spend more than the limit, and the
    window keeps exactly what they spent."""
    limit = 100
    with gateway(upstream, tmp_path, {"default": {"tokens_per_minute": limit}}, store,
                 admin=True) as gw:
        at_window_start(60, need=20)
        seen = len(upstream.requests)

        def one(n: int) -> httpx.Response:
            return httpx.post(gw.base_url + "/responses",
                              json={"model": "m", "input": f"burst {n}",
                                    "max_output_tokens": 16},
                              headers={"Authorization": f"Bearer {KEY}"}, timeout=60)

        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(one, range(24)))
        admitted = [a for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code != 200]
        assert refused and all(a.status_code == 429 for a in refused)
        assert {a.json()["error"]["type"] for a in refused} == {"tokens"}
        estimate = asyncio.run(estimate_of(upstream.requests[-1]))
        assert len(admitted) >= limit // estimate  # reservations alone admit this many
        spent = sum(a.json()["usage"]["total_tokens"] for a in admitted)
        assert spent <= limit
        assert len(upstream.requests) - seen == len(admitted)  # no refused one went upstream
        counts = httpx.get(gw.base_url + "/admin/limits", timeout=30,
                           headers={"Authorization": f"Bearer {ADMIN}"}).json()
        window = next(k for k in counts["keys"] if k["api_key_id"] == TENANT)["window"]
        assert window["tokens"] == spent  # every reservation settled to what was spent


def test_a_background_response_settles_its_reservation(
    upstream: ScriptedUpstream, tmp_path: Path, store: str
) -> None:
    """The reservation travels in the record: the worker that runs it (here in-process)
    replaces the estimate with what the response spent."""
    with gateway(upstream, tmp_path, {"default": {"tokens_per_minute": 1000}}, store,
                 admin=True) as gw:
        at_window_start(60, need=15)
        client = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        raw = client.responses.with_raw_response.create(model="m", input="in the background",
                                                        background=True)
        started = raw.parse()
        reserved = 1000 - int(raw.headers["x-ratelimit-remaining-tokens"])
        assert reserved > 0  # counted at admission, before the worker ran it
        response = started
        deadline = time.monotonic() + 20
        while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.1)
            response = client.responses.retrieve(started.id)
        assert response.status == "completed"
        assert response.usage is not None
        assert reserved == asyncio.run(estimate_of(upstream.requests[-1]))
        spent = response.usage.total_tokens
        assert spent != reserved
        deadline = time.monotonic() + 10  # counted as the worker's job closes, after its
        while True:                       # terminal write: poll, within the window's 15 s
            counts = httpx.get(gw.base_url + "/admin/limits", timeout=30,
                               headers={"Authorization": f"Bearer {ADMIN}"}).json()
            window = next(k for k in counts["keys"] if k["api_key_id"] == TENANT)["window"]
            if window["tokens"] == spent or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert window["tokens"] == spent


@pytest.fixture(scope="module")
def provider() -> Iterator[SearchProvider]:
    with SearchProvider("searxng", key=SEARCH_KEY) as fake:
        yield fake


def searching(provider: SearchProvider) -> dict[str, Any]:
    """The gateway's web_search (the fake SearXNG) for ``gateway(**…)``."""
    return {"web_search_provider": "searxng", "web_search_url": provider.base_url,
            "web_search_api_key": SEARCH_KEY, "web_allow_hosts": ("127.0.0.1",)}


def searches(times: int, fragments: int) -> str:
    """A model that calls web_search ``times`` turns in a row, each call written in
    ``fragments`` deltas (``fragments`` + 1 output tokens a turn, as the upstream counts)."""
    names = ",".join(["web_search"] * times)
    return (f"[[script:tool names={names} args='{{\"query\": \"rust edition\"}}' "
            f"n={fragments}]] search on")


def window_tokens(gw: GatewayServer) -> int:
    counts = httpx.get(gw.base_url + "/admin/limits", timeout=30,
                       headers={"Authorization": f"Bearer {ADMIN}"}).json()
    return next(k for k in counts["keys"] if k["api_key_id"] == TENANT)["window"]["tokens"]


@pytest.mark.parametrize("fragments", [20, 24])
def test_max_output_tokens_bounds_a_whole_tool_loop(
    upstream: ScriptedUpstream, provider: SearchProvider, tmp_path: Path, fragments: int
) -> None:
    """Issue 40: a model that searches 20 times under ``max_output_tokens: 50`` wrote 21
    tokens a turn, each turn asked for 50 again: 420 output tokens. Now each turn is asked
    for what the earlier ones left, and the response ends ``incomplete`` (reason
    ``max_output_tokens``) once that is spent: cut inside a turn (21 + 21 + 8), or exactly
    at the end of one (25 + 25: its search does not run, nothing could read it)."""
    with gateway(upstream, tmp_path, {"default": {"tokens_per_minute": 100_000}}, admin=True,
                 **searching(provider)) as gw:
        at_window_start(60, need=20)
        client = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        seen = len(upstream.requests)
        response = client.responses.create(
            model="m", input=searches(20, fragments), tools=[{"type": "web_search"}],
            max_output_tokens=50)
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.usage is not None and response.usage.output_tokens == 50
        sent = upstream.requests[seen:]
        per_turn = fragments + 1
        asked = [50 - per_turn * turn for turn in range(len(sent))]
        assert [body["max_tokens"] for body in sent] == asked  # the generic dialect's name
        searched = [i for i in response.output if i.type == "web_search_call"]
        assert len(searched) == (2 if fragments == 20 else 1)
        assert response.tool_usage is not None
        assert response.tool_usage.web_search.num_requests == len(searched)
        # Its usage is the sum over its turns (the upstream counts a message's words + 1).
        assert response.usage.input_tokens == sum(
            len(message_text(m).split()) + 1 for body in sent for m in body["messages"])
        assert window_tokens(gw) == response.usage.total_tokens  # settled to that sum


def test_without_usage_the_turns_output_is_estimated(
    upstream: ScriptedUpstream, provider: SearchProvider, tmp_path: Path
) -> None:
    """An upstream that reports no usage: each turn's output counts at its estimate (the
    call's arguments, ``{"query": "rust edition"}``: 9), so the loop still ends."""
    with gateway(upstream, tmp_path, {}, **searching(provider)) as gw:
        client = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        seen = len(upstream.requests)
        events = [e.to_dict() for e in client.responses.create(
            model="m", input=searches(20, 1).replace("n=1", "n=1 usage=0"),
            tools=[{"type": "web_search"}], max_output_tokens=20, stream=True)]
        response = events[-1]["response"]
        assert (response["status"], response["incomplete_details"]) == (
            "incomplete", {"reason": "max_output_tokens"})
        assert [body["max_tokens"] for body in upstream.requests[seen:]] == [20, 11, 2]


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_loop_never_passes_the_tokens_limit(
    upstream: ScriptedUpstream, provider: SearchProvider, tmp_path: Path, stream: bool,
    store: str,
) -> None:
    """Issue 40: 20 searches in one response left 294,712 tokens in a 3,000-token window.
    Each further model turn's input (the history, grown by the search results) is reserved
    before it is sent; the turn that no longer fits ends the response ``failed`` with
    ``rate_limit_exceeded``, its output kept, and the window holds what was spent."""
    limit = 3000
    with gateway(upstream, tmp_path, {"default": {"tokens_per_minute": limit}}, store,
                 admin=True, **searching(provider)) as gw:
        at_window_start(60, need=20)
        client = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        seen = len(upstream.requests)
        kwargs: Any = {"model": "m", "input": searches(20, 3),
                       "tools": [{"type": "web_search"}], "max_output_tokens": 200}
        if stream:
            events = [e.to_dict() for e in client.responses.create(stream=True, **kwargs)]
            assert events[-1]["type"] == "response.failed"
            response = events[-1]["response"]
        else:
            response = client.responses.create(**kwargs).to_dict()
        assert response["status"] == "failed"
        assert response["error"]["code"] == "rate_limit_exceeded"
        assert "tokens per min (TPM): Limit 3000" in response["error"]["message"]
        searched = [i for i in response["output"] if i["type"] == "web_search_call"]
        assert 1 <= len(searched) < 20  # it ran some turns, not all of them
        assert len(upstream.requests) - seen == len(searched)  # the refused turn never left
        estimates = [estimate_chat(body) for body in upstream.requests[seen:]]
        assert sum(estimates) + 200 <= limit  # every turn was reserved in the window
        spent = response["usage"]["total_tokens"]
        assert window_tokens(gw) == spent <= limit  # settled to the sum over its turns
        assert response["usage"]["output_tokens"] <= 200


def test_websocket_creates_are_limited(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    with gateway(upstream, tmp_path, {"default": {"requests_per_minute": 1}}) as gw:
        at_window_start(60)
        url = gw.base_url.replace("http", "ws") + "/responses"
        events = []
        for _ in range(2):  # one connection each: the second is not refused as in progress
            with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
                ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
                while True:
                    event = json.loads(ws.recv(timeout=20))
                    events.append(event)
                    if event["type"] in ("response.completed", "error"):
                        break
        assert events[-1]["type"] == "error"
        assert events[-1]["error"]["code"] == "rate_limit_exceeded"
        assert any(e["type"] == "response.completed" for e in events)


def test_two_processes_sharing_one_table_enforce_one_limit(
    upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with moto_server() as endpoint:
        use_moto(monkeypatch, endpoint)
        table = create_dynamodb_table()
        env = {**aws_env(endpoint), "GATEWAY_UPSTREAM_URL": upstream.base_url,
               "GATEWAY_STORE": f"dynamodb:{table}", "GATEWAY_API_KEYS": KEY,
               "GATEWAY_LIMITS": json.dumps({"default": {"requests_per_minute": 7}})}
        with GatewayProcess(env, tmp_path) as one, GatewayProcess(env, tmp_path) as two:
            at_window_start(60)
            urls = [one.url + "/v1", two.url + "/v1"] * 8
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(create, urls))
        codes = sorted(a.status_code for a in answers)
        assert codes == [200] * 7 + [429] * 9, [(a.status_code, a.text[:200]) for a in answers]


def test_limits_setting_is_checked_at_start() -> None:
    with pytest.raises(SettingsError, match="GATEWAY_LIMITS"):
        settings_from_env({"GATEWAY_LIMITS": json.dumps({"sk-raw-key": {}})})
    with pytest.raises(SettingsError, match="requests_per_minute"):
        settings_from_env({"GATEWAY_LIMITS": '{"default": {"requests_per_minute": -1}}'})
    rule = settings_from_env({"GATEWAY_LIMITS": json.dumps(
        {"default": {"tokens_per_minute": 9}, TENANT: {"requests_per_minute": 2}})}).limits
    assert rule.for_tenant(TENANT).tokens_per_minute == 9  # a key's entry keeps the default's
    assert rule.for_tenant("t_other").requests_per_minute == 0
    assert settings_from_env({}).limits is None  # unset: key_limits.py is not even imported


def test_reset_durations_as_openai_spells_them() -> None:
    assert [duration(s) for s in (0.02, 1, 1.2, 59, 360, 3723)] == [
        "20ms", "1s", "2s", "59s", "6m0s", "1h2m3s"]

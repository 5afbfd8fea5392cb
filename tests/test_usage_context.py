"""``POST /v1/responses/compact`` and ``POST /v1/responses/input_tokens`` call the upstream too
(summarising turns; a token count), so they are counted in the usage ledger like responses
(requests and tokens, by model and key) and pass the key's limits: requests per minute for
both, and a compaction's estimated tokens reserved before its first summarising call (issue
34). One suite on SQLite and DynamoDB (moto over HTTP), through openai-python."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from responses_gateway.config import Settings
from responses_gateway.key_limits import parse_limits
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import (
    sqlite_or_dynamodb,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

KEY = "sk-context-key-0123456789"
SMALL = "sk-small-key-0123456789"
ADMIN = "admin-key-0123456789abcdef"


def tenant_of(key: str) -> str:
    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return sqlite_or_dynamodb(request, tmp_path)


def gateway(upstream: ScriptedUpstream, store: str, limits: dict[str, Any]) -> GatewayServer:
    return GatewayServer(Settings(upstream_url=upstream.base_url, store=store,
                                  api_keys=(KEY, SMALL), admin_keys=(ADMIN,),
                                  limits=parse_limits(json.dumps(limits))))


def admin_get(gw: GatewayServer, path: str, **params: Any) -> dict[str, Any]:
    answer = httpx.get(gw.base_url + path, params=params,  # 30 s: moto on a loaded machine
                       headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def conversation(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(n):
        items.append({"role": "user", "content": f"Remember FACT:f{i}."})
        items.append({"role": "assistant", "content": f"Noted f{i}."})
    return items


def at_window_start(need: float = 10.0) -> None:
    while 60 - time.time() % 60 < need:
        time.sleep(0.05)


@pytest.mark.slow
def test_compact_and_input_tokens_are_counted_like_responses(
    upstream: ScriptedUpstream, store: str
) -> None:
    with gateway(upstream, store, {"default": {"requests_per_minute": 50,
                                               "tokens_per_minute": 100000}}) as gw:
        client = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        raw = client.responses.with_raw_response.compact(model="m", input=conversation(3))
        compacted = json.loads(raw.text)
        used = compacted["usage"]
        assert used["input_tokens"] > 0 and used["output_tokens"] > 0
        assert raw.headers["x-ratelimit-limit-requests"] == "50"
        assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
        counted = client.responses.with_raw_response.input_tokens.count(
            model="m", input="How many tokens is this?")
        assert counted.parse().input_tokens > 0
        assert counted.headers["x-ratelimit-remaining-requests"] == "48"

        page = admin_get(gw, "/organization/usage/completions",
                         start_time=int(time.time()) - 7200, bucket_width="1h",
                         group_by="model,api_key_id")
        results = [r for b in page["data"] for r in b["results"]]
        assert [(r["model"], r["api_key_id"]) for r in results] == [("m", tenant_of(KEY))]
        [result] = results
        assert result["num_model_requests"] == 2  # the compaction and the count
        assert result["input_tokens"] == used["input_tokens"]  # a count spends nothing
        assert result["output_tokens"] == used["output_tokens"]

        rows = admin_get(gw, "/admin/responses")["data"]
        assert sorted(r["endpoint"] for r in rows) == [
            "responses/compact", "responses/input_tokens"]
        [row] = [r for r in rows if r["endpoint"] == "responses/compact"]
        assert row["id"] == compacted["id"] and row["status"] == "completed"
        # The compaction's reservation was settled to what its calls spent.
        limits = admin_get(gw, "/admin/limits")
        [key] = [k for k in limits["keys"] if k["api_key_id"] == tenant_of(KEY)]
        if int(time.time()) // 60 == compacted["created_at"] // 60:  # same window still
            assert key["window"]["tokens"] == used["input_tokens"] + used["output_tokens"]
            assert key["window"]["requests"] == 2


@pytest.mark.slow
def test_compact_and_input_tokens_pass_the_keys_limits(
    upstream: ScriptedUpstream, store: str
) -> None:
    with gateway(upstream, store, {"default": {"requests_per_minute": 2},
                                   tenant_of(SMALL): {"tokens_per_minute": 40}}) as gw:
        at_window_start()
        client = OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
        seen = len(upstream.requests)
        client.responses.compact(model="m", input=conversation(1))
        client.responses.input_tokens.count(model="m", input="hi")
        assert len(upstream.requests) == seen + 1  # the summarising call (a count is local)
        with pytest.raises(openai.RateLimitError) as compact_refused:
            client.responses.compact(model="m", input=conversation(1))
        assert compact_refused.value.code == "rate_limit_exceeded"
        assert "requests per min (RPM): Limit 2, Used 2" in compact_refused.value.message
        with pytest.raises(openai.RateLimitError) as count_refused:
            client.responses.input_tokens.count(model="m", input="hi")
        assert count_refused.value.response.headers["x-ratelimit-remaining-requests"] == "0"
        assert len(upstream.requests) == seen + 1

        # A compaction whose estimate is past the key's tokens per minute: refused before
        # its first summarising call, and not counted.
        small = OpenAI(base_url=gw.base_url, api_key=SMALL, max_retries=0)
        with pytest.raises(openai.RateLimitError) as too_large:
            small.responses.compact(model="m", input=conversation(6))
        assert too_large.value.type == "tokens"
        assert too_large.value.body["message"].startswith(  # type: ignore[index]
            "Request too large for m with this key on tokens per min (TPM): Limit 40, ")
        assert len(upstream.requests) == seen + 1
        rows = admin_get(gw, "/admin/responses")["data"]
        assert tenant_of(SMALL) not in {r["api_key_id"] for r in rows}

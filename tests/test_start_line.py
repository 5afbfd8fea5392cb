"""What a real ``responses-gateway serve`` says (issue 44): the start line lists every active
capability (server tools and their providers, embedding model, image backend, admin, limits,
routes, prices, tracing), and each request the limits refuse leaves exactly one JSON log line
(the tenant id and the key's name, which limit, its value, the counts), never a key."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.helpers.gateway_process import GatewayProcess
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

KEY = "sk-start-line-key-0123456789"
OTHER = "sk-start-line-two-0123456789"
ADMIN = "admin-start-line-0123456789"
TENANT = "t_" + hashlib.sha256(KEY.encode()).hexdigest()[:32]
OTHER_TENANT = "t_" + hashlib.sha256(OTHER.encode()).hexdigest()[:32]


def lines(gw: GatewayProcess) -> list[dict[str, Any]]:
    found = []
    for line in gw.stderr().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
    return found


def test_the_start_line_lists_every_capability(upstream: ScriptedUpstream,
                                               tmp_path: Path) -> None:
    routes = {"routes": {"claude": ["bedrock:us.anthropic.claude-sonnet-4-20250514-v1:0",
                                    "openai:qwen3"]}}
    env = {
        "GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_STORE": f"sqlite:{tmp_path}/g.db",
        "GATEWAY_API_KEYS": KEY, "GATEWAY_ADMIN_KEYS": ADMIN,
        "GATEWAY_WEB_SEARCH_PROVIDER": "searxng", "GATEWAY_WEB_SEARCH_URL": "http://127.0.0.1:9",
        "GATEWAY_IMAGE_BACKEND": "openai", "GATEWAY_IMAGE_MODEL": "gpt-image-1",
        "GATEWAY_EMBEDDING_MODEL": "text-embedding-3-large",
        "GATEWAY_LIMITS": json.dumps({"default": {"requests_per_minute": 60,
                                                  "usd_per_day": 5}}),
        "GATEWAY_ROUTES": json.dumps(routes),
        "GATEWAY_PRICES": json.dumps({"qwen3": {"input": 0.1, "output": 0.2}}),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer otel-secret-0123",
    }
    with GatewayProcess(env, tmp_path) as gw:
        (started,) = [x for x in lines(gw) if x.get("message") == "gateway started"]
        shown = started["settings"]
        assert shown["server_tools"] == ["file_search", "image_generation", "mcp",
                                         "web_search"]
        assert shown["web_search_provider"] == "searxng"
        assert shown["image_backend"] == "openai" and shown["image_model"] == "gpt-image-1"
        assert shown["embedding_model"] == "text-embedding-3-large"
        assert shown["embedding_backend"] == "openai"
        assert shown["admin"].startswith("on")
        assert shown["limits"] == {"default": {"requests_per_minute": 60, "usd_per_day": 5.0},
                                   "keys": 0}
        assert shown["routes"] == {"claude": [
            "bedrock:us.anthropic.claude-sonnet-4-20250514-v1:0", "openai:qwen3"]}
        assert shown["prices"] == {"models": ["qwen3"], "default": False}
        assert shown["tracing"] == {"opentelemetry": "http://127.0.0.1:9/v1/traces",
                                    "xray": False}
        assert shown["container_engine"] is None
        text = gw.stderr()
        assert KEY not in text and ADMIN not in text and "otel-secret-0123" not in text

    # Nothing configured: each capability says off.
    plain = {"GATEWAY_UPSTREAM_URL": upstream.base_url,
             "GATEWAY_STORE": f"sqlite:{tmp_path}/plain.db"}
    with GatewayProcess(plain, tmp_path) as gw:
        (started,) = [x for x in lines(gw) if x.get("message") == "gateway started"]
        shown = started["settings"]
        assert shown["server_tools"] == ["file_search", "mcp"]  # vector stores on SQLite
        assert shown["admin"] == "off" and shown["limits"] is None and shown["routes"] == {}
        assert shown["tracing"] == {"opentelemetry": None, "xray": False}
        assert shown["web_search_provider"] is None and shown["image_backend"] is None


def test_each_request_the_limits_refuse_leaves_one_log_line(upstream: ScriptedUpstream,
                                                            tmp_path: Path) -> None:
    limits = {"default": {"requests_per_minute": 2, "window_seconds": 3600},
              "t_" + hashlib.sha256(OTHER.encode()).hexdigest()[:32]: {"usd_per_day": 1e-9}}
    env = {"GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_STORE": f"sqlite:{tmp_path}/g.db",
           "GATEWAY_API_KEYS": json.dumps({"team-rate": KEY, "team-dollars": OTHER}),
           "GATEWAY_LIMITS": json.dumps(limits),
           "GATEWAY_PRICES": json.dumps({"default": {"input": 1, "output": 1}})}
    with GatewayProcess(env, tmp_path) as gw:
        client = OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        tokens = 0
        for _ in range(2):
            usage = client.responses.create(model="m", input="hello").usage
            assert usage is not None
            tokens += usage.input_tokens + usage.output_tokens
        refused = [httpx.post(gw.url + "/v1/responses", json={"model": "m", "input": "x"},
                              headers={"Authorization": f"Bearer {KEY}"}) for _ in range(2)]
        assert [r.status_code for r in refused] == [429, 429]
        # The other key: one response, then its dollar budget is spent.
        other = OpenAI(base_url=gw.url + "/v1", api_key=OTHER, max_retries=0)
        other.responses.create(model="m", input="hello")
        spent = httpx.post(gw.url + "/v1/responses", json={"model": "m", "input": "x"},
                           headers={"Authorization": f"Bearer {OTHER}"})
        assert spent.status_code == 429
        assert spent.json()["error"]["code"] == "insufficient_quota"
        deadline = time.monotonic() + 10
        while len(found := [x for x in lines(gw)
                            if x.get("message") == "request refused by the limits"]) < 3:
            assert time.monotonic() < deadline, gw.stderr()
            time.sleep(0.05)
        time.sleep(0.3)  # (nothing more may come: one line per refusal)
        found = [x for x in lines(gw) if x.get("message") == "request refused by the limits"]
        assert len(found) == 3
        rate, again, dollars = (x["refused"] for x in found)
        assert rate == {"api_key_id": TENANT, "api_key_name": "team-rate",
                        "limit": "requests_per_minute", "limit_value": 2,
                        "used": 2, "requested": None, "status": 429,
                        "code": "rate_limit_exceeded", "retry_after": rate["retry_after"],
                        "counts": {"requests": 2, "tokens": tokens, "period_tokens": 0}}
        assert int(rate["retry_after"]) > 0 and again["limit"] == "requests_per_minute"
        assert all(x["level"] == "WARNING" and x["request_id"].startswith("req_")
                   for x in found)
        assert {found[0]["request_id"], found[1]["request_id"]} == {
            r.headers["x-request-id"] for r in refused}
        assert dollars["api_key_id"] == OTHER_TENANT and dollars["limit"] == "usd_per_day"
        assert dollars["api_key_name"] == "team-dollars"
        assert dollars["limit_value"] == 1e-9 and dollars["used"] > 1e-9
        assert dollars["code"] == "insufficient_quota"
        text = gw.stderr()
        assert KEY not in text and OTHER not in text

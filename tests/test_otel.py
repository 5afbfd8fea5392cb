"""OpenTelemetry (issue 44): with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a real
``responses-gateway serve`` exports one trace per response over OTLP/HTTP to a collector the
test runs (tests/helpers/otlp_collector.py, decoded with the OpenTelemetry protobufs): a span
for the response with the GenAI attributes, one per model turn and one per tool call under
it, the client's ``traceparent`` continued, no key anywhere, content only when
``GATEWAY_DEBUG_LOG_CONTENT`` says so. Without the endpoint the SDK is never imported."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from tests.helpers.gateway_process import ROOT, GatewayProcess
from tests.helpers.mcp_server import McpTestServer
from tests.helpers.otlp_collector import OtlpCollector, Span
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

KEY = "sk-traced-key-0123456789abcdef"
UPSTREAM_KEY = "sk-upstream-secret-0123456789"
TENANT = "t_" + hashlib.sha256(KEY.encode()).hexdigest()[:32]
SERVER, CLIENT, INTERNAL = 2, 3, 1  # opentelemetry.proto's SpanKind
ERROR = 2


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with McpTestServer() as server:
        yield server


@pytest.fixture(scope="module")
def collector() -> Iterator[OtlpCollector]:
    with OtlpCollector() as running:
        yield running


def gateway_env(upstream: ScriptedUpstream, collector: OtlpCollector, tmp_path: Path,
                **more: str) -> dict[str, str]:
    return {"GATEWAY_UPSTREAM_URL": upstream.base_url,
            "GATEWAY_UPSTREAM_API_KEY": UPSTREAM_KEY,
            "GATEWAY_STORE": f"sqlite:{tmp_path / 'g.db'}", "GATEWAY_API_KEYS": KEY,
            "GATEWAY_MCP_ALLOW_HOSTS": "127.0.0.1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_SERVICE_NAME": "gateway-under-test", **more}


def of_response(spans: list[Span], response_id: str) -> tuple[Span, list[Span]]:
    """The response's span and its children."""
    (root,) = [s for s in spans if s.attributes.get("gen_ai.response.id") == response_id]
    return root, [s for s in spans if s.parent_span_id == root.span_id]


def has_response(response_id: str, children: int) -> Any:
    def done(spans: list[Span]) -> bool:
        roots = [s for s in spans if s.attributes.get("gen_ai.response.id") == response_id]
        return bool(roots) and sum(s.parent_span_id == roots[0].span_id
                                   for s in spans) >= children
    return done


def test_a_tool_running_response_is_one_trace_in_the_clients(
        upstream: ScriptedUpstream, mcp_server: McpTestServer, collector: OtlpCollector,
        tmp_path: Path) -> None:
    client_trace, client_span = secrets.token_hex(16), secrets.token_hex(8)
    env = gateway_env(upstream, collector, tmp_path,
                      GATEWAY_API_KEYS=json.dumps({"team-traced": KEY}))
    with GatewayProcess(env, tmp_path) as gw:
        client = OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0,
                        default_headers={"traceparent": f"00-{client_trace}-{client_span}-01"})
        response = client.responses.create(
            model="traced-model",
            input="[[script:tool names=lab__search args='{\"query\": \"otel\"}']] go",
            tools=[{"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
                    "require_approval": "never"}])
        assert response.status == "completed"
        assert [i.type for i in response.output][-2:] == ["mcp_call", "message"]
        spans = collector.wait_for(has_response(response.id, 3))
        root, children = of_response(spans, response.id)

        # The response: the client's trace, under the client's span.
        assert root.trace_id == client_trace and root.parent_span_id == client_span
        assert root.name == "chat traced-model" and root.kind == SERVER
        a = root.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "traced-model"
        assert a["gen_ai.response.model"] == "traced-model"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.usage.input_tokens"] == response.usage.input_tokens
        assert a["gen_ai.usage.output_tokens"] == response.usage.output_tokens
        assert a["gen_ai.response.finish_reasons"] == ["stop"]
        assert a["gateway.api_key_id"] == TENANT and a["gateway.model_turns"] == 2
        assert a["gateway.api_key_name"] == "team-traced"  # the name GATEWAY_API_KEYS gave
        assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a
        assert root.resource["service.name"] == "gateway-under-test"
        assert root.status_code != ERROR

        # Two model turns and the tool call between them, each a child of the response.
        by_name = {s.name: s for s in children}
        assert set(by_name) == {"model_turn 1", "execute_tool lab.search", "model_turn 2"}
        first, tool, second = (by_name["model_turn 1"], by_name["execute_tool lab.search"],
                               by_name["model_turn 2"])
        assert first.kind == second.kind == CLIENT and tool.kind == INTERNAL
        assert all(s.trace_id == client_trace for s in children)
        assert first.end_ns <= tool.start_ns <= tool.end_ns <= second.start_ns
        assert root.start_ns <= first.start_ns and second.end_ns <= root.end_ns
        assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
        assert second.attributes["gen_ai.response.finish_reasons"] == ["stop"]
        assert (first.attributes["gateway.turn.input_tokens"]
                + second.attributes["gateway.turn.input_tokens"]) == a["gen_ai.usage.input_tokens"]
        t = tool.attributes
        assert t["gen_ai.operation.name"] == "execute_tool"
        assert t["gen_ai.tool.name"] == "lab.search" and t["gen_ai.tool.type"] == "extension"
        assert t["gen_ai.tool.call.id"] and t["gateway.tool.status"] == "completed"
        assert "gen_ai.tool.call.arguments" not in t

        # A stream without traceparent is a trace of its own.
        plain = OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        with plain.responses.stream(model="traced-model", input="hello") as stream:
            streamed = stream.get_final_response()
        spans = collector.wait_for(has_response(streamed.id, 1))
        own, (turn,) = of_response(spans, streamed.id)
        assert own.parent_span_id == "" and own.trace_id != client_trace
        assert own.attributes["gateway.stream"] is True
        assert own.attributes["gateway.time_to_first_token_ms"] >= 0
        assert turn.name == "model_turn 1"

        # A WebSocket's upgrade header holds for each response on the socket.
        ws_trace, ws_span = secrets.token_hex(16), secrets.token_hex(8)
        with connect(gw.ws_url, additional_headers={
                "Authorization": f"Bearer {KEY}",
                "traceparent": f"00-{ws_trace}-{ws_span}-01"}) as ws:
            ids = []
            for _ in range(2):
                ws.send(json.dumps({"type": "response.create", "model": "traced-model",
                                    "input": "hi"}))
                while (event := json.loads(ws.recv(timeout=20)))["type"] != \
                        "response.completed":
                    assert event["type"] != "error", event
                ids.append(event["response"]["id"])
        for response_id in ids:
            spans = collector.wait_for(has_response(response_id, 1))
            ws_root, _ = of_response(spans, response_id)
            assert ws_root.trace_id == ws_trace and ws_root.parent_span_id == ws_span

        # A failed response: its span says why.
        with pytest.raises(openai.APIStatusError):
            plain.responses.create(model="traced-model", input="[[script:error status=400 "
                                   "code=bad_thing message='no way']] x")
        spans = collector.wait_for(lambda s: any(
            x.attributes.get("gateway.status") == "rejected" for x in s))
        (failed,) = [s for s in spans if s.attributes.get("gateway.status") == "rejected"]
        assert failed.status_code == ERROR and failed.attributes["error.type"]

    # No key, the gateway's or the upstream's, in any attribute of any span.
    for span in collector.spans:
        text = json.dumps([span.attributes, span.resource])
        assert KEY not in text and UPSTREAM_KEY not in text
    assert all(KEY not in json.dumps(headers) for headers in collector.posts)


def test_content_is_traced_only_when_the_debug_setting_says_so(
        upstream: ScriptedUpstream, mcp_server: McpTestServer, collector: OtlpCollector,
        tmp_path: Path) -> None:
    env = gateway_env(upstream, collector, tmp_path, GATEWAY_DEBUG_LOG_CONTENT="true")
    with GatewayProcess(env, tmp_path) as gw:
        client = OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        response = client.responses.create(
            model="traced-model",
            input="[[script:tool names=lab__search args='{\"query\": \"secret plan\"}']] go",
            tools=[{"type": "mcp", "server_label": "lab", "server_url": mcp_server.url,
                    "require_approval": "never",
                    "headers": {"Authorization": "Bearer mcp-header-secret-0123"}}])
        spans = collector.wait_for(has_response(response.id, 3))
        root, children = of_response(spans, response.id)
        assert "gateway.api_key_name" not in root.attributes  # (a key given no name)
        messages = json.loads(root.attributes["gen_ai.input.messages"])
        assert any("go" in json.dumps(m) for m in messages)
        output = json.loads(root.attributes["gen_ai.output.messages"])
        assert output[-1]["type"] == "message"
        (tool,) = [s for s in children if s.name.startswith("execute_tool")]
        assert "secret plan" in tool.attributes["gen_ai.tool.call.arguments"]
    for span in collector.spans:
        text = json.dumps(span.attributes)
        assert KEY not in text and "mcp-header-secret-0123" not in text


def test_without_an_endpoint_the_sdk_is_never_loaded(tmp_path: Path) -> None:
    """A response served in a process without OTEL_* imports no opentelemetry module."""
    code = """
import asyncio, sys
from responses_gateway.config import Settings
from responses_gateway.observability import ResponseMetrics, configure
configure(Settings(store="sqlite:%s"))
m = ResponseMetrics("resp_1", "m", stream=False)
m.finish({"id": "resp_1", "status": "completed", "usage": {}})
asyncio.run(m.account())
print(sorted(n for n in sys.modules if n.startswith("opentelemetry")))
""" % (tmp_path / "g.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT / "handler")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_in_lambda_the_spans_leave_before_the_invocation_ends(
        upstream: ScriptedUpstream, collector: OtlpCollector, tmp_path: Path) -> None:
    """The buffered Lambda handler (Mangum) with a batch delay of ten minutes: the spans are
    at the collector when the handler returns, and the process then dies at once (a frozen
    execution environment runs no exit hook)."""
    client_trace, client_span = secrets.token_hex(16), secrets.token_hex(8)
    code = """
import json, os, sys
from responses_gateway.entry.lambda_buffered import handler
event = json.load(open(sys.argv[1]))
event["headers"]["traceparent"] = sys.argv[2]
answer = handler(event, None)
print(json.loads(answer["body"])["id"], flush=True)
os._exit(0)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"PYTHONPATH": str(ROOT / "handler"), "AWS_LAMBDA_FUNCTION_NAME": "gw-test",
                "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_TRACE_DISABLED": "true",
                "GATEWAY_UPSTREAM_URL": upstream.base_url,
                "GATEWAY_STORE": f"sqlite:{tmp_path / 'g.db'}",
                "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
                "OTEL_BSP_SCHEDULE_DELAY": "600000"})
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "events" / "create_response.json"),
         f"00-{client_trace}-{client_span}-01"],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    response_id = done.stdout.strip().splitlines()[-1]
    assert response_id.startswith("resp_")
    spans = list(collector.spans)  # no waiting: they were sent before the handler returned
    root, (turn,) = of_response(spans, response_id)
    assert root.trace_id == client_trace and root.parent_span_id == client_span
    assert turn.name == "model_turn 1"

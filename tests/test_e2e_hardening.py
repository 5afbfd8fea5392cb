"""End to end: what an outside security and fault review found (issue 16), each through the
gateway under uvicorn (or the CLI that serves it), as a client or an attacker would meet it.

Items covered here: 1 (deep JSON), 6 (over-long ids), 7 (store errors leak nothing, carry a
request id), 9 (credentials in query strings stay out of the access log). The others live
beside the code they fix: Bedrock media (test_bedrock_images), upstream secrets
(test_upstream_dialects), HTTP framing (test_upstream_network), unfinished calls
(test_translate_endings), cancel and followers (test_background), the deadline
(test_runner_deadline).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from responses_gateway.api.json_body import MAX_DEPTH
from responses_gateway.translate.request_models import MAX_ID_LENGTH
from tests.helpers.e2e import MODEL, e2e_settings
from tests.helpers.gateway_server import GatewayServer, free_port
from tests.helpers.scripted_upstream import ScriptedUpstream

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("hardening") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body.keys() == {"error"} and body["error"].keys() == {"message", "type", "param", "code"}
    assert "Traceback" not in response.text
    return body["error"]


def _nested(depth: int) -> dict[str, Any]:
    """``depth`` objects, each inside the next."""
    value: dict[str, Any] = {"type": "string"}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _raw_nested(depth: int) -> bytes:
    """The same as JSON text, for depths beyond what Python's encoder allows."""
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


# -- 1: deep JSON is a 400 before anything is sent or stored ---------------------------------


@pytest.mark.parametrize("mode", ["plain", "stream", "background"])
@pytest.mark.parametrize("where", ["tools", "text.format"])
@pytest.mark.parametrize("depth", [254, 600, 1000])
def test_deeply_nested_bodies_are_a_400_before_the_upstream(
    gateway: GatewayServer, upstream: ScriptedUpstream, mode: str, where: str, depth: int
) -> None:
    upstream.reset()
    schema = b'{"type":"object","properties":{"x":' + _raw_nested(depth) + b"}}"
    if where == "tools":
        head = b'"tools":[{"type":"function","name":"f","parameters":' + schema + b"}]"
    else:
        head = b'"text":{"format":{"type":"json_schema","name":"s","schema":' + schema + b"}}"
    flags = {"plain": b"", "stream": b',"stream":true', "background": b',"background":true'}
    body = b'{"model":"' + MODEL.encode() + b'","input":"hi",' + head + flags[mode] + b"}"
    answer = httpx.post(gateway.base_url + "/responses", content=body,
                        headers={"content-type": "application/json"}, timeout=30)
    error = _error(answer, 400)
    assert "nested too deeply" in error["message"]
    assert upstream.requests == []


def test_the_deepest_accepted_body_goes_through(
    gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    """MAX_DEPTH levels in all (body, tools, the tool, then the parameters) are sent upstream,
    streamed, stored and read back; one more level is refused."""
    upstream.reset()
    levels = MAX_DEPTH - 3
    tools = [{"type": "function", "name": "f", "parameters": _nested(levels)}]
    for stream in (False, True):
        answer = httpx.post(gateway.base_url + "/responses", json={
            "model": MODEL, "input": "hi", "tools": tools, "stream": stream}, timeout=30)
        assert answer.status_code == 200, answer.text[:300]
    assert b"response.completed" in answer.content
    assert len(upstream.requests) == 2
    assert upstream.requests[0]["tools"][0]["function"]["parameters"] == _nested(levels)
    deeper = [{"type": "function", "name": "f", "parameters": _nested(levels + 1)}]
    answer = httpx.post(gateway.base_url + "/responses", json={
        "model": MODEL, "input": "hi", "tools": deeper}, timeout=30)
    assert "nested too deeply" in _error(answer, 400)["message"]


# -- 6: ids longer than a store key can be are refused at the edge --------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_over_long_input_item_ids_are_a_400(
    gateway: GatewayServer, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.reset()
    long_id = "msg_" + "x" * 3000
    answer = httpx.post(gateway.base_url + "/responses", json={
        "model": MODEL, "stream": stream,
        "input": [{"type": "message", "id": long_id, "role": "user", "content": "hi"}],
    }, timeout=30)
    error = _error(answer, 400)
    assert error["param"] == "input[0].id"
    assert error["code"] == "string_above_max_length"
    assert str(MAX_ID_LENGTH) in error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize("field", ["previous_response_id", "item_reference"])
def test_over_long_referenced_ids_are_a_400(gateway: GatewayServer, field: str) -> None:
    long_id = "resp_" + "é" * 3000
    body: dict[str, Any] = {"model": MODEL, "input": "hi"}
    if field == "previous_response_id":
        body["previous_response_id"] = long_id
    else:
        body["input"] = [{"type": "item_reference", "id": long_id}]
    error = _error(httpx.post(gateway.base_url + "/responses", json=body, timeout=30), 400)
    assert error["code"] == "string_above_max_length"


@pytest.mark.parametrize("method,suffix", [("GET", ""), ("DELETE", ""), ("POST", "/cancel"),
                                           ("GET", "/input_items")])
def test_over_long_path_ids_are_not_found(gateway: GatewayServer, method: str, suffix: str) -> None:
    url = f"{gateway.base_url}/responses/resp_{'x' * 3000}{suffix}"
    error = _error(httpx.request(method, url, timeout=30), 404)
    assert error["param"] == "response_id"
    assert len(error["message"]) < 200  # the id is not echoed whole


# -- 7: a request id in every answer ----------------------------------------------------------


def test_every_answer_carries_a_request_id(gateway: GatewayServer) -> None:
    ok = httpx.post(gateway.base_url + "/responses", json={"model": MODEL, "input": "hi"})
    bad = httpx.post(gateway.base_url + "/responses", json={"model": MODEL, "input": 3})
    ids = {ok.headers["x-request-id"], bad.headers["x-request-id"]}
    assert len(ids) == 2 and all(i.startswith("req_") and len(i) == 36 for i in ids)


# -- 9: credentials in query strings stay out of the access log -------------------------------


@pytest.mark.slow
def test_a_key_in_the_query_string_never_reaches_the_access_log(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """``responses-gateway serve`` with its access log on, as a user runs it locally."""
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_UPSTREAM_URL": upstream.base_url,
        "GATEWAY_STORE": f"sqlite:{tmp_path / 'g.db'}",
        "GATEWAY_API_KEYS": "gw-right-key",
        "PYTHONPATH": str(ROOT / "handler"),
    }
    secret = "sk-leaked-0123456789abcdef"
    proc = subprocess.Popen(
        [sys.executable, "-m", "responses_gateway", "serve", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("the gateway did not start") from None
                time.sleep(0.1)
        for path in (f"/v1/models?api_key={secret}", f"/v1/responses?key={secret}&stream=true",
                     f"/v1/models?access_token={secret}"):
            answer = httpx.get(base + path, timeout=5)
            assert answer.status_code in (401, 405), answer.text
            assert secret not in answer.text
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=15)
    assert "GET /v1/models?api_key=[redacted]" in output, output  # the line is still there
    assert secret not in output

"""The API function started as the Lambda Web Adapter starts it: ``handler/run.sh`` with the
port and readiness path template.yaml gives the adapter, polled until ready, then streamed
through over real HTTP. Also: X-Ray subsegments from the trace header the adapter forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from responses_gateway import collector
from responses_gateway.api.app import create_app
from responses_gateway.collector import YOUNG_GENERATION_THRESHOLD
from responses_gateway.config import Settings
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
RUN_SH = ROOT / "handler" / "run.sh"


def adapter_settings() -> dict[str, str]:
    """The AWS_LWA_* variables template.yaml sets on the API function."""
    from cfnlint.decode import decode

    template, problems = decode(str(ROOT / "template.yaml"))
    assert not problems
    env = template["Resources"]["ApiFunction"]["Properties"]["Environment"]["Variables"]
    return {k: v for k, v in env.items() if k.startswith("AWS_LWA_")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def started_like_the_adapter(env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """Run run.sh as /opt/bootstrap would; yield the base URL once the readiness check passes.

    The adapter listens for the app on AWS_LWA_PORT (8080 in the template); here a free port
    stands in for it, so parallel runs cannot collide.
    """
    settings = adapter_settings()
    port = free_port()
    readiness = settings["AWS_LWA_READINESS_CHECK_PATH"]
    child_env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("GATEWAY_", "AWS_", "POWERTOOLS_"))
    }
    child_env.update(settings)
    child_env.update(
        AWS_LWA_PORT=str(port),
        PYTHON=sys.executable,  # Lambda's python3; here the interpreter running the tests
        PYTHONPATH=str(ROOT / "handler"),
        GATEWAY_STORE=f"sqlite:{tmp_path / 'gateway.db'}",
        **env,
    )
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen([str(RUN_SH)], env=child_env, stdout=log, stderr=subprocess.STDOUT,
                               cwd=tmp_path, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base + readiness, timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the readiness check never passed"
            time.sleep(0.05)
        yield base
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # what Lambda sends at shutdown
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        log.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


def test_template_points_the_adapter_at_the_app() -> None:
    settings = adapter_settings()
    assert settings["AWS_LWA_READINESS_CHECK_PATH"] == "/health"
    assert settings["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert settings["AWS_LWA_PORT"] == "8080"


def test_run_sh_serves_and_streams(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    env = {"GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_API_KEYS": "sk-test"}
    with started_like_the_adapter(env, tmp_path) as base:
        health = httpx.get(base + "/health")
        assert health.status_code == 200 and health.json() == {"status": "ok"}

        body = {"model": "gpt-4o-mini", "stream": True,
                "input": "[[script:text n=6 delay=0.15]]"}
        arrivals: list[tuple[float, dict]] = []
        started = time.monotonic()
        with httpx.stream("POST", base + "/v1/responses", json=body, timeout=30,
                          headers={"authorization": "Bearer sk-test"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    arrivals.append((time.monotonic() - started, json.loads(line[6:])))
        types = [event["type"] for _, event in arrivals]
        assert types[0] == "response.created" and types[-1] == "response.completed"
        text = "".join(e["delta"] for _, e in arrivals if e["type"] == "response.output_text.delta")
        assert text == DEFAULT_TEXT
        # Streamed, not buffered: the first event left long before the last one.
        assert arrivals[-1][0] - arrivals[0][0] > 0.5

        rid = arrivals[-1][1]["response"]["id"]
        stored = httpx.get(f"{base}/v1/responses/{rid}",
                           headers={"authorization": "Bearer sk-test"})
        assert stored.status_code == 200 and stored.json()["status"] == "completed"


@contextlib.contextmanager
def xray_daemon() -> Iterator[tuple[str, list[dict]]]:
    """A UDP socket standing in for the X-Ray daemon; yields its address and what it got."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    received: list[dict] = []

    def drain() -> None:
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                return
            header, _, document = data.decode().partition("\n")
            assert json.loads(header) == {"format": "json", "version": 1}
            received.append(json.loads(document))

    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}", received
        drain()
    finally:
        sock.close()


def test_a_lambda_environment_builds_the_first_create_at_init(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """In Lambda the lifespan builds the validators and the backend's client before /health
    answers (api/warm_start.py); the first create, through openai-python unmodified, streams as
    any other."""
    import openai

    env = {"GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_API_KEYS": "sk-test",
           "AWS_LAMBDA_FUNCTION_NAME": "responses-gateway-api",
           "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true",
           "HOME": str(tmp_path)}
    with started_like_the_adapter(env, tmp_path) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test")
        with client.responses.stream(
            model="gpt-4o-mini", input="[[script:text n=3]]",
            tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        ) as stream:
            types = [event.type for event in stream]
            final = stream.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.status == "completed" and final.output_text
    log = (tmp_path / "server.log").read_text()
    assert "could not build" not in log  # prewarm ran and built both


def test_trace_header_from_the_adapter_becomes_subsegments(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    trace_root = "1-6784a2e2-0123456789abcdef01234567"
    with xray_daemon() as (daemon, received):
        env = {
            "GATEWAY_UPSTREAM_URL": upstream.base_url,
            "AWS_LAMBDA_FUNCTION_NAME": "responses-gateway-api",
            "LAMBDA_TASK_ROOT": str(ROOT / "handler"),
            "AWS_XRAY_DAEMON_ADDRESS": daemon,
            "POWERTOOLS_TRACE_DISABLED": "false",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "HOME": str(tmp_path),
        }
        with started_like_the_adapter(env, tmp_path) as base:
            response = httpx.post(
                base + "/v1/responses",
                json={"model": "gpt-4o-mini", "input": "Hello"},
                headers={"x-amzn-trace-id": f"Root={trace_root};Parent=53995c3f42cd8ad8;Sampled=1",
                         "x-amzn-lambda-context": json.dumps({"request_id": "req-1"})},
                timeout=30,
            )
            assert response.status_code == 200
            time.sleep(0.3)  # subsegments go out over UDP as they close
    names = {doc["name"] for doc in received}
    assert {"upstream", "store.put"} <= names, received
    for doc in received:
        assert doc["trace_id"] == trace_root and doc["type"] == "subsegment"
        assert doc["parent_id"] == "53995c3f42cd8ad8"
    upstream_segment = next(doc for doc in received if doc["name"] == "upstream")
    assert upstream_segment["annotations"]["backend"]
    assert upstream_segment["end_time"] >= upstream_segment["start_time"]


def test_startup_freezes_what_it_built_and_collects_young_objects_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-event garbage made the collector ~5% of the gateway's CPU under load. Only the first
    startup freezes: Mangum runs the lifespan on every call."""
    app = create_app(Settings(upstream_url="http://127.0.0.1:9/v1",
                              store=f"sqlite:{tmp_path / 'gc.db'}"))
    before = gc.get_threshold()
    monkeypatch.setattr(collector, "_tuned", False)  # as in a fresh process
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)

    async def start_and_stop() -> tuple[int, int]:
        async with app.router.lifespan_context(app):
            return gc.get_threshold()[0], gc.get_freeze_count()

    class Garbage:
        pass

    try:
        young, frozen = asyncio.run(start_and_stop())
        cycle = Garbage()  # what a call leaves behind: a reference cycle
        cycle.me = cycle  # type: ignore[attr-defined]
        gone = weakref.ref(cycle)
        del cycle
        asyncio.run(start_and_stop())  # the next call
        gc.collect()
    finally:
        gc.set_threshold(*before)
    assert young == YOUNG_GENERATION_THRESHOLD
    assert frozen > 1000  # the modules and services built at startup
    assert gone() is None  # collected: not frozen by the second startup


def test_what_the_first_response_built_is_frozen_once_none_is_open(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is built lazily at the first response (validators, clients, modules) is frozen
    when the process first has no response open, after collecting: garbage is not kept."""
    monkeypatch.setattr(collector, "_tuned", True)
    monkeypatch.setattr(collector, "_settled", False)
    monkeypatch.setattr(collector, "_open", 0)

    class Built:
        pass

    def frozen(obj: object) -> bool:  # the permanent generation is in no generation's list
        return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())

    try:
        collector.response_opened()
        collector.response_opened()
        kept = Built()  # built by the first response, kept
        cycle = Built()
        cycle.me = cycle  # type: ignore[attr-defined]
        gone = weakref.ref(cycle)
        del cycle
        collector.response_closed()
        assert not frozen(kept)  # one response is still open
        collector.response_closed()
        assert frozen(kept)
        assert gone() is None  # collected before the freeze
        collector.response_opened()
        later = Built()
        collector.response_closed()
        assert not frozen(later)  # once per process
    finally:
        gc.unfreeze()
        gc.freeze()  # the suite's process stays frozen as its first gateway left it

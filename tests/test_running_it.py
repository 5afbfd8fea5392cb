"""Running the gateway as a newcomer does (issue 28): a mistyped setting is one line and exit
status 2, the logs say how every response ended and why, ``GET /v1/models`` lists the
upstream's models, and the installs come from one lock.

``responses-gateway serve`` runs here as a real child process; what it prints is read back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from responses_gateway.config import Settings
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

ROOT = Path(__file__).resolve().parent.parent


def clean_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GATEWAY_", "AWS_", "POWERTOOLS_")) and k not in ("HOST", "PORT")}
    env["PYTHONPATH"] = str(ROOT / "handler")
    env.update(values)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- settings it cannot use -------------------------------------------------------------------


@pytest.mark.parametrize(("env", "line"), [
    ({"GATEWAY_READ_TIMEOUT": "abc"},
     "GATEWAY_READ_TIMEOUT must be a number of seconds (0 or more), not 'abc'"),
    ({"GATEWAY_MAX_RETRIES": "2.5"},
     "GATEWAY_MAX_RETRIES must be a whole number (0 or more), not '2.5'"),
    ({"GATEWAY_MODEL_MAP": "{bad"}, "GATEWAY_MODEL_MAP must be a JSON object"),
    ({"GATEWAY_MODEL_MAP": "fast"}, "'fast' is not name=model"),
    ({"PORT": "abc"}, "PORT must be a port number (1-65535), not 'abc'"),
    ({"GATEWAY_STORE": "postgres://db"},
     "GATEWAY_STORE must be sqlite:PATH or dynamodb:TABLE, not 'postgres://db'"),
    ({"GATEWAY_STORE": "dynamodb:"}, "GATEWAY_STORE must be sqlite:PATH or dynamodb:TABLE"),
    ({"GATEWAY_UPSTREAM_URL": "localhost:11434/v1"},
     "GATEWAY_UPSTREAM_URL must be an http:// or https:// URL"),
    ({"GATEWAY_UPSTREAM_URL": "ftp://user:hunter2@host/v1"}, "not 'ftp://host/v1'"),
    ({"GATEWAY_BACKEND": "azure"}, "GATEWAY_BACKEND must be"),
    ({"GATEWAY_LOG_LEVEL": "loud"},
     "GATEWAY_LOG_LEVEL must be one of debug, info, warning, error, critical, not 'loud'"),
    ({"GATEWAY_DEBUG_LOG_CONTENT": "maybe"},
     "GATEWAY_DEBUG_LOG_CONTENT must be true or false, not 'maybe'"),
    ({"GATEWAY_CONTEXT_WINDOWS": "llama"}, "GATEWAY_CONTEXT_WINDOWS"),
    ({"GATEWAY_UPSTREAM_DIALECT": "olama"}, "GATEWAY_UPSTREAM_DIALECT must be one of"),
    ({"GATEWAY_HOSTED_TOOLS": "drop"}, "GATEWAY_HOSTED_TOOLS must be 'omit' or 'reject'"),
    ({"GATEWAY_REASONING_INPUT": "yes"}, "GATEWAY_REASONING_INPUT must be reasoning_content"),
])
def test_a_setting_it_cannot_use_is_one_line_and_exit_status_2(
    env: dict[str, str], line: str, tmp_path: Path
) -> None:
    done = subprocess.run([sys.executable, "-m", "responses_gateway", "serve"],
                          env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("responses-gateway: ") and line in lines[0]
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr
    assert not (tmp_path / "gateway.db").exists()  # stopped before anything was built


def test_help_and_version_work_whatever_the_settings(tmp_path: Path) -> None:
    env = clean_env(PORT="abc", GATEWAY_READ_TIMEOUT="abc")
    helped = subprocess.run([sys.executable, "-m", "responses_gateway", "serve", "--help"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--port PORT" in helped.stdout
    assert "PORT, 8000" in helped.stdout and "HOST, 127.0.0.1" in helped.stdout
    top = subprocess.run([sys.executable, "-m", "responses_gateway", "--help"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert top.returncode == 0 and "``" not in top.stdout  # no reStructuredText markup
    version = subprocess.run([sys.executable, "-m", "responses_gateway", "--version"],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    from importlib.metadata import version as installed

    assert version.stdout.strip() == f"responses-gateway {installed('responses-gateway')}"


# -- what `responses-gateway serve` logs --------------------------------------------------------


class Served:
    """A ``responses-gateway serve`` child process and what it printed."""

    def __init__(self, base: str, log: Path) -> None:
        self.base = base
        self.log = log

    def lines(self) -> list[dict[str, Any]]:
        text = self.log.read_text()
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def text(self) -> str:
        return self.log.read_text()

    def finished(self, response_id: str, timeout: float = 10) -> dict[str, Any]:
        """The one "response finished" line of ``response_id`` (waits for it)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.lines() if line.get("message") == "response finished"
                     and line["response"]["id"] == response_id]
            if found or time.monotonic() > deadline:
                assert len(found) == 1, self.text()
                return found[0]
            time.sleep(0.05)


@contextlib.contextmanager
def serve(tmp_path: Path, **env: str) -> Iterator[Served]:
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "responses_gateway", "serve", "--port", str(port)],
            env=clean_env(GATEWAY_STORE=f"sqlite:{tmp_path / 'gateway.db'}", **env),
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, log_path.read_text()
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(base + "/health", timeout=1).status_code == 200:
                        break
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            yield Served(base, log_path)
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


FIELDS = {"id", "api_key_id", "api_key_name", "model", "backend", "status", "duration_ms",
          "ttft_ms", "input_tokens", "output_tokens", "upstream_status", "error_type",
          "error_message", "request_id"}


@pytest.mark.slow
def test_serve_logs_every_response_with_the_request_id(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    with serve(tmp_path, GATEWAY_UPSTREAM_URL=upstream.base_url.replace("://", "://me:pw9@"),
               GATEWAY_UPSTREAM_API_KEY="sk-upstream-secret-1") as served:
        # completed
        reply = httpx.post(served.base + "/v1/responses", timeout=30,
                           json={"model": "gpt-4o-mini", "input": "hi", "stream": True})
        assert reply.status_code == 200
        completed = [json.loads(line[6:]) for line in reply.text.splitlines()
                     if line.startswith("data: ")][-1]["response"]
        line = served.finished(completed["id"])
        summary = line["response"]
        assert set(summary) == FIELDS
        assert (summary["api_key_id"], summary["api_key_name"]) == ("default", None)  # no keys
        assert summary["status"] == "completed" and summary["model"] == "gpt-4o-mini"
        assert summary["backend"] == "openai" and summary["error_type"] is None
        assert summary["output_tokens"] == completed["usage"]["output_tokens"] > 0
        assert 0 < summary["ttft_ms"] <= summary["duration_ms"]
        assert summary["request_id"] == line["request_id"] == reply.headers["x-request-id"]
        assert line["response_id"] == completed["id"] and line["level"] == "INFO"

        # failed: the upstream refuses after response.created has left
        reply = httpx.post(served.base + "/v1/responses", timeout=30, json={
            "model": "gpt-4o-mini", "stream": True,
            "input": "[[script:error status=400 code=context_length_exceeded message=too_long]]"})
        failed = [json.loads(line[6:]) for line in reply.text.splitlines()
                  if line.startswith("data: ")][-1]["response"]
        assert failed["status"] == "failed"
        line = served.finished(failed["id"])
        summary = line["response"]
        assert line["level"] == "WARNING" and summary["status"] == "failed"
        assert summary["upstream_status"] == 400
        assert summary["error_type"] == failed["error"]["code"]
        assert "too_long" in summary["error_message"]
        assert summary["request_id"] == reply.headers["x-request-id"]

        # cancelled: the client goes away mid-stream
        with httpx.stream("POST", served.base + "/v1/responses", timeout=30, json={
                "model": "gpt-4o-mini", "stream": True,
                "input": "[[script:slow n=40 delay=0.1]]"}) as stream:
            request_id = stream.headers["x-request-id"]
            for text in stream.iter_lines():
                if text.startswith("data: ") and '"response.output_text.delta"' in text:
                    break
        deadline = time.monotonic() + 10
        while not [x for x in served.lines() if x.get("response", {}).get("status") ==
                   "cancelled"]:
            assert time.monotonic() < deadline, served.text()
            time.sleep(0.05)
        (cancelled,) = [x for x in served.lines()
                        if x.get("response", {}).get("status") == "cancelled"]
        assert cancelled["response"]["request_id"] == request_id == cancelled["request_id"]
        assert cancelled["response"]["error_type"] is None

        started = [x for x in served.lines() if x.get("message") == "gateway started"]
        assert len(started) == 1
        assert started[0]["settings"]["upstream_url"] == upstream.base_url
        assert started[0]["settings"]["auth"] == "off"
        assert started[0]["settings"]["store"].startswith("sqlite:")
        text = served.text()
        assert "pw9" not in text and "sk-upstream-secret-1" not in text
        assert "Traceback" not in text


@pytest.mark.slow
def test_a_misspelt_setting_is_a_warning_at_start_naming_the_closest_one(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    with serve(tmp_path, GATEWAY_UPSTREAM_URL=upstream.base_url,
               GATEWAY_UPSTREAM_ULR="http://127.0.0.1:9/v1-typo-value",
               GATEWAY_API_KEY="sk-not-to-be-logged") as served:
        deadline = time.monotonic() + 10
        while not (warned := [x for x in served.lines() if x.get("level") == "WARNING"
                              and "unknown_settings" in x]):
            assert time.monotonic() < deadline, served.text()
            time.sleep(0.05)
        (line,) = warned
        assert "GATEWAY_UPSTREAM_ULR (did you mean GATEWAY_UPSTREAM_URL?)" in line["message"]
        assert "GATEWAY_API_KEY (did you mean GATEWAY_API_KEYS?)" in line["message"]
        assert line["unknown_settings"] == {"GATEWAY_API_KEY": "GATEWAY_API_KEYS",
                                            "GATEWAY_UPSTREAM_ULR": "GATEWAY_UPSTREAM_URL"}
        assert "typo-value" not in served.text() and "sk-not-to-be-logged" not in served.text()
        assert httpx.get(served.base + "/health", timeout=5).status_code == 200


@pytest.mark.slow
def test_log_level_and_content_logging_are_honoured_locally(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    with serve(tmp_path, GATEWAY_UPSTREAM_URL=upstream.base_url, GATEWAY_LOG_LEVEL="warning",
               GATEWAY_DEBUG_LOG_CONTENT="true") as served:
        ok = httpx.post(served.base + "/v1/responses", timeout=30,
                        json={"model": "m", "input": "a secret-free question"}).json()
        bad = httpx.post(served.base + "/v1/responses", timeout=30,
                         json={"model": "m", "input": "[[script:error status=500]]"})
        assert bad.status_code == 500
        time.sleep(0.3)
        lines = served.lines()
        assert not [x for x in lines if x.get("level") == "INFO"]  # below the level
        assert not [x for x in lines if x.get("response", {}).get("id") == ok["id"]]
        (refused,) = [x for x in lines if x.get("message") == "response finished"]
        assert refused["response"]["status"] == "rejected"
        assert refused["response"]["upstream_status"] == 500
        assert "[[script:error status=500]]" in json.dumps(refused["response"]["request"])
    with serve(tmp_path, GATEWAY_UPSTREAM_URL=upstream.base_url,
               GATEWAY_DEBUG_LOG_CONTENT="true") as served:
        ok = httpx.post(served.base + "/v1/responses", timeout=30,
                        json={"model": "m", "input": "a secret-free question"}).json()
        line = served.finished(ok["id"])
        assert "a secret-free question" in json.dumps(line["response"]["request"])
        assert DEFAULT_TEXT in json.dumps(line["response"]["output"])


@pytest.mark.slow
def test_a_dead_upstream_is_named_at_start_and_to_the_client(tmp_path: Path) -> None:
    dead = f"http://user:pw7@127.0.0.1:{free_port()}/v1"
    with serve(tmp_path, GATEWAY_UPSTREAM_URL=dead, GATEWAY_MAX_RETRIES="0") as served:
        reply = httpx.post(served.base + "/v1/responses", timeout=30,
                           json={"model": "m", "input": "hi"})
        assert reply.status_code == 502
        message = reply.json()["error"]["message"]
        shown = dead.replace("user:pw7@", "")
        assert f"could not reach the upstream at {shown}/chat/completions (ConnectError)" \
            in message and "GATEWAY_UPSTREAM_URL" in message
        deadline = time.monotonic() + 10
        while "upstream check" not in served.text():
            assert time.monotonic() < deadline, served.text()
            time.sleep(0.05)
        (check,) = [x for x in served.lines() if x["message"].startswith("upstream check")]
        assert check["level"] == "WARNING" and shown in check["message"]
        assert "ConnectError" in check["message"]
        (finished,) = [x for x in served.lines() if x.get("message") == "response finished"]
        assert finished["response"]["status"] == "rejected"
        assert finished["response"]["error_type"] == "upstream_unavailable"
        assert finished["request_id"] == reply.headers["x-request-id"]
        assert "pw7" not in served.text()


@pytest.mark.slow
def test_an_upstream_url_without_v1_is_a_502_naming_the_setting_and_a_hint_at_start(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    root = upstream.base_url.removesuffix("/v1")
    with serve(tmp_path, GATEWAY_UPSTREAM_URL=root) as served:
        deadline = time.monotonic() + 10
        while "upstream check" not in served.text():
            assert time.monotonic() < deadline, served.text()
            time.sleep(0.05)
        (check,) = [x for x in served.lines() if x["message"].startswith("upstream check")]
        assert f"set GATEWAY_UPSTREAM_URL={root}/v1" in check["message"]
        reply = httpx.post(served.base + "/v1/responses", timeout=30,
                           json={"model": "m", "input": "hi"})
        assert reply.status_code == 502  # never a 404: the SDKs would raise NotFoundError
        error = reply.json()["error"]
        assert error["code"] == "upstream_misconfigured" and error["type"] == "server_error"
        assert "GATEWAY_UPSTREAM_URL" in error["message"]
        assert f"{root}/chat/completions" in error["message"]


def test_an_upstream_404_about_the_model_stays_a_404(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    with GatewayServer(Settings(upstream_url=upstream.base_url,
                                store=f"sqlite:{tmp_path / 'g.db'}")) as gateway:
        reply = httpx.post(gateway.base_url + "/responses", timeout=30, json={
            "model": "m", "input": "[[script:error status=404 code=model_not_found "
                                   "message='The model m does not exist']]"})
        assert reply.status_code == 404
        assert reply.json()["error"]["code"] == "model_not_found"


# -- GET /v1/models ---------------------------------------------------------------------------


def test_models_lists_the_mapped_names_then_the_upstreams_cached(tmp_path: Path) -> None:
    settings_of = {"model_map": {"fast": "scripted", "claude": "bedrock:anthropic.x"},
                   "models": ("extra", "fast"), "store": f"sqlite:{tmp_path / 'g.db'}"}
    with ScriptedUpstream() as up:
        gateway = GatewayServer(Settings(upstream_url=up.base_url, **settings_of))
        with gateway:
            first = httpx.get(gateway.base_url + "/models").json()
            up.stop()  # from now on the upstream cannot answer: the listing is cached
            second = httpx.get(gateway.base_url + "/models").json()
    ids = [m["id"] for m in first["data"]]
    assert first["object"] == "list"
    assert ids[:3] == ["extra", "fast", "claude"]
    assert "scripted" in ids and "script/text" in ids and len(ids) == len(set(ids))
    for model in first["data"]:
        assert set(model) == {"id", "object", "created", "owned_by"}  # OpenAI's four fields
        assert model["object"] == "model" and isinstance(model["created"], int)
    assert [m["id"] for m in second["data"]] == ids


def test_a_model_is_retrieved_by_name_as_openai_retrieves_one(tmp_path: Path) -> None:
    """``client.models.retrieve``: a mapped name, an upstream's (a slash in it), and OpenAI's
    404 ``model_not_found`` for a name neither lists."""
    from openai import NotFoundError, OpenAI

    with ScriptedUpstream() as up, GatewayServer(Settings(
            upstream_url=up.base_url, model_map={"fast": "scripted"},
            store=f"sqlite:{tmp_path / 'g.db'}")) as gateway:
        client = OpenAI(base_url=gateway.base_url, api_key="sk-test", max_retries=0)
        fast = client.models.retrieve("fast")
        slashed = client.models.retrieve("script/text")
        with pytest.raises(NotFoundError) as missing:
            client.models.retrieve("no-such-model")
    assert (fast.id, fast.object, fast.owned_by) == ("fast", "model", "responses-gateway")
    assert slashed.id == "script/text" and slashed.object == "model"
    error = missing.value.body
    assert isinstance(error, dict) and error["code"] == "model_not_found"
    assert error["type"] == "invalid_request_error" and error["param"] is None
    assert error["message"] == ("The model `no-such-model` does not exist or you do not have "
                                "access to it.")


def test_models_still_lists_the_mapped_names_when_the_upstream_cannot(tmp_path: Path) -> None:
    settings = Settings(upstream_url=f"http://127.0.0.1:{free_port()}/v1", models=("a",),
                        model_map={"b": "c"}, store=f"sqlite:{tmp_path / 'g.db'}")
    with GatewayServer(settings) as gateway:
        reply = httpx.get(gateway.base_url + "/models")
    assert reply.status_code == 200
    assert [m["id"] for m in reply.json()["data"]] == ["a", "b"]


def test_models_on_bedrock_lists_foundation_models_and_inference_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    use_dummy_aws(monkeypatch)
    with FakeBedrock() as fake:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK", fake.url)
        fake.foundation_models = [
            {"modelId": "anthropic.claude-sonnet-4-20250514-v1:0", "providerName": "Anthropic",
             "outputModalities": ["TEXT"], "inferenceTypesSupported": ["INFERENCE_PROFILE"]},
            {"modelId": "amazon.nova-lite-v1:0", "providerName": "Amazon",
             "outputModalities": ["TEXT"], "inferenceTypesSupported": ["ON_DEMAND"]},
            {"modelId": "amazon.titan-image-generator-v2:0", "providerName": "Amazon",
             "outputModalities": ["IMAGE"], "inferenceTypesSupported": ["ON_DEMAND"]},
        ]
        created = datetime(2025, 5, 14, tzinfo=UTC)
        fake.inference_profiles = [
            {"inferenceProfileId": f"us.anthropic.claude-{n}", "status": "ACTIVE",
             "createdAt": created.isoformat(), "inferenceProfileName": n, "type": "SYSTEM_DEFINED",
             "inferenceProfileArn": f"arn:aws:bedrock:us-east-1::inference-profile/{n}",
             "models": []}
            for n in ("a", "b", "c")
        ]
        settings = Settings(backend="bedrock", bedrock_region="us-east-1",
                            bedrock_endpoint_url=fake.url, model_map={"sonnet": "us.x"},
                            store=f"sqlite:{tmp_path / 'g.db'}")
        with GatewayServer(settings) as gateway:
            listed = httpx.get(gateway.base_url + "/models").json()["data"]
            again = httpx.get(gateway.base_url + "/models").json()["data"]
        asked = list(fake.control_requests)
    ids = [m["id"] for m in listed]
    assert ids == ["sonnet", "amazon.nova-lite-v1:0", "us.anthropic.claude-a",
                   "us.anthropic.claude-b", "us.anthropic.claude-c"]
    assert listed[2]["created"] == int(created.timestamp())
    assert again == listed
    # one listing for both calls: foundation models once, the profiles' two pages once
    assert len([p for p in asked if p.startswith("/foundation-models")]) == 1
    assert len([p for p in asked if p.startswith("/inference-profiles")]) == 2


# -- one lock ---------------------------------------------------------------------------------


def _lock_module() -> Any:
    spec = importlib.util.spec_from_file_location("lock", ROOT / "scripts" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_layer_pins_are_the_runtime_lock_for_lambda() -> None:
    lock = _lock_module()
    runtime = (ROOT / "requirements.lock").read_text()
    assert (ROOT / "layers" / "dependencies" / "requirements.txt").read_text() == \
        lock.layer_text(runtime), "run python3 scripts/lock.py"


def test_the_runtime_lock_has_the_test_locks_versions_and_pyprojects_ranges() -> None:
    import tomllib

    from packaging.requirements import Requirement

    lock = _lock_module()
    runtime = {name: version for name, version, _ in lock.pins(
        (ROOT / "requirements.lock").read_text())}
    tested = {name: version for name, version, _ in lock.pins(
        (ROOT / "requirements-test.lock").read_text())}
    for name, version in runtime.items():
        assert tested.get(name) == version, f"{name}: {version} at runtime, {tested.get(name)}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for group, specs in [("runtime", project["dependencies"]),
                         ("lambda", project["optional-dependencies"]["lambda"]),
                         ("code", project["optional-dependencies"]["code"]),
                         ("test", project["optional-dependencies"]["test"])]:
        pinned = tested if group in ("test", "code") else runtime
        for spec in specs:
            req = Requirement(spec)
            name = lock.normal(req.name)
            assert name in pinned, f"{req.name} ({group}) is not in the lock"
            assert req.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is not {req}"


def test_the_readme_commands_install_from_the_locks() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    # scripts/test-deps.sh: the system packages (the dashboard test's chromium), apt-get
    assert ci == "scripts/test-deps.sh && " \
                 "python3 -m pip install --no-deps -r requirements-test.lock -e . && " \
                 "python3 -m pytest -n 4 --dist worksteal"
    assert f"```bash\n{ci}\n```" in readme
    assert "python3 -m pip install --no-deps -r requirements.lock -e ." in readme
    assert "pip install openai" in readme  # the README's Python example needs it

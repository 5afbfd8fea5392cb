"""The Lambda entry points driven by the sample events in events/, as Lambda would call them.

The buffered API handler (``responses_gateway.entry.lambda_buffered.handler``, Mangum) gets every
function URL event; the worker handler gets its event and a dead letter. Behind them: a
scripted Chat Completions upstream and DynamoDB (moto server), both real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from responses_gateway import observability
from responses_gateway.api.auth import Authenticator
from responses_gateway.config import Settings, settings_from_env
from responses_gateway.store.dynamodb import DynamoDBStore
from tests.helpers.moto_server import (
    create_dynamodb_table,
    unique_table_name,
    use_moto,
)
from tests.helpers.responses_validation import failed_code
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

EVENTS = Path(__file__).resolve().parent.parent / "events"
PLACEHOLDER_ID = json.loads((EVENTS / "worker_event.json").read_text())["response_id"]
API_KEY = "sk-gateway-example"
TENANT = Authenticator([API_KEY]).tenant(f"Bearer {API_KEY}")
T = TypeVar("T")


@dataclass
class FakeContext:
    """What Lambda passes as ``context`` (the fields the handlers read)."""

    aws_request_id: str = "6f1d0b9e-8c0a-4f59-9a61-3f1b2c3d4e5f"
    function_name: str = "responses-gateway-api"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:api"
    memory_limit_in_mb: int = 1024
    deadline: float = 0.0

    def get_remaining_time_in_millis(self) -> int:
        return int(max(self.deadline - time.time(), 0) * 1000) if self.deadline else 900_000


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a loop of its own, in another thread: the handlers own this one's."""
    import asyncio

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result(timeout=60)  # type: ignore[arg-type]


def load_event(name: str, response_id: str | None = None) -> dict[str, Any]:
    text = (EVENTS / name).read_text()
    if response_id is not None:
        text = text.replace(PLACEHOLDER_ID, response_id)
    return json.loads(text)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture
def lambda_env(
    monkeypatch: pytest.MonkeyPatch, moto_endpoint: str, upstream: ScriptedUpstream
) -> str:
    """The environment template.yaml gives the functions, pointed at the local stand-ins."""
    use_moto(monkeypatch, moto_endpoint)
    table = create_dynamodb_table(unique_table_name())
    for name in ("GATEWAY_WORKER_FUNCTION", "AWS_LAMBDA_FUNCTION_NAME", "LAMBDA_TASK_ROOT",
                 "GATEWAY_UPSTREAM_API_KEY", "GATEWAY_MODEL_MAP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_BACKEND", "openai")
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", upstream.base_url)
    monkeypatch.setenv("GATEWAY_STORE", f"dynamodb:{table}")
    monkeypatch.setenv("GATEWAY_API_KEYS", API_KEY)
    monkeypatch.setenv("GATEWAY_RETENTION_DAYS", "1")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "responses-gateway-test")
    return table


def buffered_handler() -> Callable[..., dict[str, Any]]:
    """The module-level ``handler`` of the buffered entry point, imported under the current
    environment (as Lambda imports it when an execution environment starts)."""
    sys.modules.pop("responses_gateway.entry.lambda_buffered", None)
    module = importlib.import_module("responses_gateway.entry.lambda_buffered")

    def invoke(event: dict[str, Any], context: FakeContext | None = None) -> dict[str, Any]:
        return module.handler(event, context or FakeContext())

    return invoke


@pytest.fixture
def api(lambda_env: str) -> Callable[..., dict[str, Any]]:
    return buffered_handler()


@pytest.fixture
def store(lambda_env: str) -> DynamoDBStore:
    return DynamoDBStore(lambda_env, retention_days=1)


def body_of(result: dict[str, Any]) -> Any:
    assert result["isBase64Encoded"] is False
    return json.loads(result["body"])


def sse_events(body: str) -> list[dict[str, Any]]:
    events = []
    for frame in body.split("\n\n"):
        lines = frame.split("\n")
        data = [line[6:] for line in lines if line.startswith("data: ")]
        kind = [line[7:] for line in lines if line.startswith("event: ")]
        if data:
            event = json.loads("\n".join(data))
            assert kind == [event["type"]]
            events.append(event)
    return events


def create_completed(api: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    result = api(load_event("create_response.json"))
    assert result["statusCode"] == 200, result
    return body_of(result)


def queued_background_record(settings: Settings) -> str:
    """A background response stored ``queued``, as the API stores it before invoking the
    worker; returns its id."""
    from responses_gateway.responses.services import build_gateway

    async def make() -> str:
        gateway = build_gateway(settings)
        try:
            job = await gateway.new_job(
                {"model": "gpt-4o-mini", "input": "Write a haiku.", "background": True}, TENANT
            )
            job.record.lease_until = time.time() + 60
            await gateway.store.put(job.record)
            return job.record.id
        finally:
            await gateway.aclose()

    return run_async(make)


# -- the API events -------------------------------------------------------------------------


def test_every_event_file_is_a_function_url_event_or_the_worker_event() -> None:
    """(The API Gateway WebSocket events, ``ws_*.json``, are tested in test_websocket_apigw.)"""
    names = sorted(p.name for p in EVENTS.glob("*.json") if not p.name.startswith("ws_"))
    assert names == sorted([
        "create_response.json", "create_response_stream.json", "create_response_bad_request.json",
        "retrieve_response.json", "cancel_response.json", "delete_response.json",
        "list_input_items.json", "worker_event.json",
    ])
    for name in names:
        event = load_event(name)
        if name == "worker_event.json":
            assert set(event) == {"response_id", "tenant"}
            continue
        assert event["version"] == "2.0" and event["routeKey"] == "$default"
        http = event["requestContext"]["http"]
        assert http["path"] == event["rawPath"]
        assert event["headers"]["host"] == event["requestContext"]["domainName"]
        assert all(key == key.lower() for key in event["headers"])


def test_create_non_stream(api: Callable[..., dict[str, Any]], upstream: ScriptedUpstream) -> None:
    result = api(load_event("create_response.json"))
    assert result["statusCode"] == 200
    assert result["headers"]["content-type"] == "application/json"
    response = body_of(result)
    assert response["object"] == "response" and response["id"].startswith("resp_")
    assert response["status"] == "completed"
    assert response["model"] == "gpt-4o-mini"
    assert response["output"][0]["content"][0]["text"] == DEFAULT_TEXT
    assert response["usage"]["output_tokens"] > 0
    assert upstream.requests[-1]["messages"][-1]["content"] == "Say hello in five words."


def test_create_stream_returns_the_whole_sse_body(api: Callable[..., dict[str, Any]]) -> None:
    result = api(load_event("create_response_stream.json"))
    assert result["statusCode"] == 200
    assert result["headers"]["content-type"].startswith("text/event-stream")
    assert result["headers"]["cache-control"] == "no-cache"
    events = sse_events(result["body"])
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[1] == "response.in_progress"
    assert types[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == DEFAULT_TEXT
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == DEFAULT_TEXT


def test_retrieve_input_items_and_delete(api: Callable[..., dict[str, Any]]) -> None:
    created = create_completed(api)
    rid = created["id"]

    result = api(load_event("retrieve_response.json", rid))
    assert result["statusCode"] == 200
    assert result["headers"]["content-type"] == "application/json"
    retrieved = body_of(result)
    assert retrieved["id"] == rid and retrieved["status"] == "completed"
    assert retrieved["output"] == created["output"]

    result = api(load_event("list_input_items.json", rid))
    assert result["statusCode"] == 200
    page = body_of(result)
    assert page["object"] == "list" and page["has_more"] is False
    assert [item["content"] for item in page["data"]] == [
        [{"type": "input_text", "text": "Say hello in five words."}]
    ]
    assert page["first_id"] == page["data"][0]["id"]

    result = api(load_event("delete_response.json", rid))
    assert result["statusCode"] == 200
    assert body_of(result) == {"id": rid, "object": "response", "deleted": True}

    result = api(load_event("retrieve_response.json", rid))
    assert result["statusCode"] == 404
    assert body_of(result)["error"]["message"] == f"Response with id '{rid}' not found."


@pytest.mark.slow
def test_the_placeholder_id_is_not_found(api: Callable[..., dict[str, Any]]) -> None:
    """Replayed as they are (``sam local invoke``), the id-bearing events meet a 404."""
    for name in ("retrieve_response.json", "cancel_response.json", "delete_response.json",
                 "list_input_items.json"):
        result = api(load_event(name))
        assert result["statusCode"] == 404, name
        error = body_of(result)["error"]
        assert error["type"] == "invalid_request_error" and PLACEHOLDER_ID in error["message"]


@pytest.mark.slow
def test_cancel_a_queued_background_response(api: Callable[..., dict[str, Any]]) -> None:
    rid = queued_background_record(settings_from_env())
    result = api(load_event("cancel_response.json", rid))
    assert result["statusCode"] == 200
    cancelled = body_of(result)
    assert cancelled["id"] == rid and cancelled["status"] == "cancelled"
    assert body_of(api(load_event("retrieve_response.json", rid)))["status"] == "cancelled"


def test_bad_request(api: Callable[..., dict[str, Any]], upstream: ScriptedUpstream) -> None:
    before = len(upstream.requests)
    result = api(load_event("create_response_bad_request.json"))
    assert result["statusCode"] == 400
    assert result["headers"]["content-type"] == "application/json"
    error = body_of(result)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "temperature"
    assert len(upstream.requests) == before  # refused before any upstream call


def test_missing_api_key_is_a_401(api: Callable[..., dict[str, Any]]) -> None:
    event = load_event("create_response.json")
    del event["headers"]["authorization"]
    result = api(event)
    assert result["statusCode"] == 401
    assert "You didn't provide an API key" in body_of(result)["error"]["message"]


# -- the worker -----------------------------------------------------------------------------


@pytest.fixture
def worker(lambda_env: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from responses_gateway.entry import lambda_worker as lambda_handler

    monkeypatch.setattr(lambda_handler, "_gateway", None)  # rebuilt from this test's env
    return lambda_handler


@pytest.mark.slow
def test_worker_runs_a_background_response(
    worker: Any, api: Callable[..., dict[str, Any]], store: DynamoDBStore
) -> None:
    rid = queued_background_record(settings_from_env())
    event = load_event("worker_event.json", rid)
    event["tenant"] = TENANT
    result = worker.handler(event, FakeContext(deadline=time.time() + 120))
    assert result == {"response_id": rid, "status": "completed"}

    response = body_of(api(load_event("retrieve_response.json", rid)))
    assert response["status"] == "completed" and response["background"] is True
    assert response["output"][0]["content"][0]["text"] == DEFAULT_TEXT
    events = run_async(lambda: store.read_events(rid))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"


@pytest.mark.slow
def test_worker_ends_a_dead_letter_failed(
    worker: Any, api: Callable[..., dict[str, Any]]
) -> None:
    rid = queued_background_record(settings_from_env())
    destination_record = {  # what an on-failure SQS destination delivers
        "version": "1.0",
        "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": 2},
        "requestPayload": {"response_id": rid, "tenant": TENANT},
        "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
    }
    event = {"Records": [{"messageId": "1", "eventSource": "aws:sqs",
                          "body": json.dumps(destination_record)}]}
    assert worker.handler(event, FakeContext()) == {"failed": [rid]}
    response = body_of(api(load_event("retrieve_response.json", rid)))
    assert response["status"] == "failed"
    assert failed_code(response["error"]) == "worker_unavailable"


# -- observability in Lambda ------------------------------------------------------------------


@pytest.fixture
def in_lambda(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], lambda_env: str
) -> Iterator[Callable[[], str]]:
    """Pretend to run in Lambda (JSON logs, EMF metrics on stdout); restore logging after.

    Yields a function returning what was printed so far.
    """
    import uuid

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "responses-gateway-api")
    monkeypatch.setenv("GATEWAY_LOG_LEVEL", "INFO")
    # A fresh Powertools logger (they are configured once per service name) on this stdout.
    monkeypatch.setattr(observability, "SERVICE", f"gateway-test-{uuid.uuid4().hex[:8]}")
    root = logging.getLogger("responses_gateway")
    saved = (list(root.handlers), root.propagate, root.level, dict(observability._state))
    observability._state["configured"] = False
    printed: list[str] = []

    def output() -> str:
        printed.append(capsys.readouterr().out)
        return "".join(printed)

    try:
        yield output
    finally:
        root.handlers[:], root.propagate, root.level = saved[0], saved[1], saved[2]
        observability._state.clear()
        observability._state.update(saved[3])


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_lambda_logs_and_metrics(in_lambda: Callable[[], str]) -> None:
    api = buffered_handler()  # in the test: its logger writes to the captured stdout
    context = FakeContext(aws_request_id="0d4c1a52-5b7e-4a31-b2a4-9c8e7f6d5e4c")
    result = api(load_event("create_response_stream.json"), context)
    assert result["statusCode"] == 200
    rid = sse_events(result["body"])[-1]["response"]["id"]
    text = in_lambda()
    lines = json_lines(text)

    logs = [line for line in lines if line.get("message") == "response finished"]
    assert len(logs) == 1
    log = logs[0]
    assert log["request_id"] == context.aws_request_id
    assert log["response_id"] == rid
    assert log["service"] == observability.SERVICE
    assert log["response"]["status"] == "completed" and log["response"]["model"] == "gpt-4o-mini"
    assert log["response"]["ttft_ms"] <= log["response"]["duration_ms"]
    assert "Say hello in five words." not in text and DEFAULT_TEXT not in text  # no content
    assert API_KEY not in text

    metrics = [line for line in lines if "_aws" in line]
    assert len(metrics) == 1
    emf = metrics[0]
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "ResponsesGateway"
    assert ["service"] in directive["Dimensions"]
    assert ["service", "Model"] in directive["Dimensions"]
    names = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert names["TimeToFirstToken"] == names["Duration"] == "Milliseconds"
    assert {"InputTokens", "OutputTokens", "Responses"} <= set(names)
    assert emf["Model"] == "gpt-4o-mini" and emf["OutputTokens"][0] > 0  # EMF values: lists
    assert 0 < emf["TimeToFirstToken"][0] <= emf["Duration"][0]


def test_failed_responses_count_errors_by_type(in_lambda: Callable[[], str]) -> None:
    api = buffered_handler()
    event = load_event("create_response.json")
    body = json.loads(event["body"])
    body["input"] = "[[script:error status=400 code=context_length_exceeded]]"
    event["body"] = json.dumps(body)
    result = api(event)
    assert result["statusCode"] == 400
    errors = [line for line in json_lines(in_lambda()) if "Errors" in line]
    assert len(errors) == 1
    (directive,) = errors[0]["_aws"]["CloudWatchMetrics"]
    assert ["service", "ErrorType"] in directive["Dimensions"]
    assert errors[0]["ErrorType"] == "context_length_exceeded" and errors[0]["Errors"] == [1.0]


def test_debug_content_logs_request_and_output(
    in_lambda: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_DEBUG_LOG_CONTENT", "true")
    result = buffered_handler()(load_event("create_response.json"))
    assert result["statusCode"] == 200
    text = in_lambda()
    assert "Say hello in five words." in text and DEFAULT_TEXT in text


# -- the log line of each response (issue 28) ---------------------------------------------------

LOG_FIELDS = {"id", "api_key_id", "api_key_name", "model", "backend", "status", "duration_ms",
              "ttft_ms", "input_tokens", "output_tokens", "upstream_status", "error_type",
              "error_message", "request_id"}


def finished_lines(text: str) -> dict[str, dict[str, Any]]:
    """The "response finished" lines by response id."""
    return {line["response"]["id"]: line for line in json_lines(text)
            if line.get("message") == "response finished"}


def test_the_log_line_of_a_completed_and_a_failed_response(
    in_lambda: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_MAX_RETRIES", "0")
    api = buffered_handler()
    first = FakeContext(aws_request_id="11111111-5b7e-4a31-b2a4-9c8e7f6d5e4c")
    result = api(load_event("create_response_stream.json"), first)
    completed = sse_events(result["body"])[-1]["response"]
    event = load_event("create_response_stream.json")
    body = json.loads(event["body"])
    body["input"] = "[[script:error status=429 code=rate_limit_exceeded message=slow_down]]"
    event["body"] = json.dumps(body)
    second = FakeContext(aws_request_id="22222222-5b7e-4a31-b2a4-9c8e7f6d5e4c")
    refused = api(event, second)
    failed = sse_events(refused["body"])[-1]["response"]
    assert failed["status"] == "failed"
    lines = finished_lines(in_lambda())

    line = lines[completed["id"]]
    assert set(line["response"]) == LOG_FIELDS and line["level"] == "INFO"
    summary = line["response"]
    assert summary["status"] == "completed" and summary["backend"] == "openai"
    assert summary["output_tokens"] == completed["usage"]["output_tokens"] > 0
    assert summary["upstream_status"] is None and summary["error_type"] is None
    assert line["request_id"] == summary["request_id"] == first.aws_request_id
    assert result["headers"]["x-request-id"] == first.aws_request_id

    line = lines[failed["id"]]
    summary = line["response"]
    assert set(summary) == LOG_FIELDS and line["level"] == "WARNING"
    assert summary["status"] == "failed" and summary["upstream_status"] == 429
    assert summary["error_type"] == failed["error"]["code"]
    assert "slow_down" in summary["error_message"]
    assert line["request_id"] == summary["request_id"] == second.aws_request_id
    assert refused["headers"]["x-request-id"] == second.aws_request_id


@pytest.mark.slow
def test_the_log_line_of_a_response_cancelled_while_the_worker_runs_it(
    in_lambda: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from responses_gateway.entry import lambda_worker
    from responses_gateway.responses.services import build_gateway

    # The worker looks for a cancel at every renewal: each second (lease / 3, at most 1 s).
    # 5 s, not less: a loaded CI machine can stall the worker's first renewal past a shorter
    # lease, and a retrieve then rightly ends the response "worker_lost".
    monkeypatch.setenv("GATEWAY_LEASE_SECONDS", "5")
    monkeypatch.setattr(lambda_worker, "_gateway", None)
    api = buffered_handler()

    async def queued() -> str:
        gateway = build_gateway(settings_from_env())
        try:
            job = await gateway.new_job({"model": "gpt-4o-mini", "background": True,
                                         "input": "[[script:slow n=60 delay=0.1]]"}, TENANT)
            job.record.lease_until = time.time() + 60
            await gateway.store.put(job.record)
            return job.record.id
        finally:
            await gateway.aclose()

    rid = run_async(queued)
    event = load_event("worker_event.json", rid)
    event["tenant"] = TENANT
    ran: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: ran.update(lambda_worker.handler(
        event, FakeContext(aws_request_id="33333333-worker", deadline=time.time() + 60))))
    worker.start()
    deadline = time.monotonic() + 20
    while body_of(api(load_event("retrieve_response.json", rid)))["status"] != "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)  # some output first
    assert body_of(api(load_event("cancel_response.json", rid)))["status"] == "cancelled"
    worker.join(timeout=30)
    assert ran == {"response_id": rid, "status": "cancelled"}

    line = finished_lines(in_lambda())[rid]
    summary = line["response"]
    assert set(summary) == LOG_FIELDS and line["level"] == "INFO"
    assert summary["status"] == "cancelled" and summary["error_type"] is None
    assert summary["backend"] == "openai" and summary["model"] == "gpt-4o-mini"
    assert line["response_id"] == rid

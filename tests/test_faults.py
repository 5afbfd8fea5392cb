"""Faults: the upstream, the store and the client misbehave; every response still ends true.

Each case checks the same three things: the client sees one clear outcome (an OpenAI-shaped
HTTP error, or a stream with exactly one terminal event), the store holds what the client was
told (the terminal Response, or nothing), and nothing is left open upstream.

The gateway runs under uvicorn in front of the scripted upstream (real HTTP and SSE); DynamoDB
is moto in server mode, with faults injected at the store's botocore client ('before-send'
handlers answer in DynamoDB's place) or by pointing the store at a port nothing listens on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from responses_gateway.api import app as app_module
from responses_gateway.api.sse_response import EventStreamResponse
from responses_gateway.config import Settings
from responses_gateway.responses.services import build_gateway
from responses_gateway.sse import encode_event
from responses_gateway.store.dynamodb import DynamoDBStore, make_client
from tests.helpers.e2e import check_stream, e2e_settings, split_frames
from tests.helpers.gateway_server import GatewayServer, free_port
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.helpers.responses_validation import (
    TERMINAL_TYPES,
    events_from_sse,
    failed_code,
    validate_response,
)
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

pytestmark = pytest.mark.slow

MODEL = "scripted-model"
BODY_LIMIT = 2 * 1024 * 1024
READ_TIMEOUT = 1.0
RUNNING = ("queued", "in_progress")


# -- talking to the gateway ---------------------------------------------------------------


@dataclass
class Answer:
    """One HTTP answer, read whole: a JSON body or the SSE frames of a stream."""

    status: int
    headers: httpx.Headers
    body: bytes = b""
    frames: list[bytes] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def is_stream(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    @property
    def events(self) -> list[dict[str, Any]]:
        return events_from_sse([f for f in self.frames if not f.startswith(b":")])

    @property
    def comments(self) -> list[bytes]:
        return [f for f in self.frames if f.startswith(b":")]

    def json(self) -> Any:
        return json.loads(self.body)


def post(url: str, body: dict[str, Any] | bytes, *, timeout: float = 60) -> Answer:
    start = time.monotonic()
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    with httpx.Client(timeout=timeout) as client, client.stream(
        "POST", url, content=content, headers=headers
    ) as response:
        answer = Answer(response.status_code, response.headers)
        answer.body = b"".join(response.iter_raw())
    if answer.is_stream:
        answer.frames, rest = split_frames(answer.body)
        assert not rest, f"the stream ended inside a frame: {rest[:200]!r}"
    answer.seconds = time.monotonic() - start
    return answer


def assert_openai_error(answer: Answer, status: int, code: str | None = None) -> dict[str, Any]:
    assert answer.status == status, (answer.status, answer.body[:500])
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error
    if code == "store_unavailable":  # nothing of the store's internals reaches a client
        for internal in ("DynamoDB", "127.0.0.1", "http://", "arn:", ".db"):
            assert internal not in error["message"], error
        assert "req_" in error["message"] and answer.headers["x-request-id"] in error["message"]
    return error


def assert_store_failure(error: dict[str, Any]) -> None:
    """A response failed by the store: the SDK's code, no store internals in the message."""
    assert error["code"] == "server_error", error
    assert "store_unavailable" in error["message"], error
    for internal in ("DynamoDB", "127.0.0.1", "http://", "arn:", ".db"):
        assert internal not in error["message"], error


def terminal_of(answer: Answer) -> dict[str, Any]:
    """The stream's one terminal event, after checking every event and the grammar."""
    assert answer.status == 200 and answer.is_stream, (answer.status, answer.body[:500])
    events = answer.events
    check_stream(events)
    terminals = [e for e in events if e["type"] in TERMINAL_TYPES]
    assert len(terminals) == 1
    return terminals[0]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def retrieve(gateway: GatewayServer, response_id: str) -> httpx.Response:
    return httpx.get(f"{gateway.base_url}/responses/{response_id}", timeout=30)


def settle(gateway: GatewayServer, response_id: str, timeout: float = 10) -> dict[str, Any]:
    """The stored response once it left queued/in_progress (fails if it never does)."""
    deadline = time.monotonic() + timeout
    while True:
        response = retrieve(gateway, response_id)
        assert response.status_code == 200, response.text
        stored = response.json()
        if stored["status"] not in RUNNING:
            return stored
        assert time.monotonic() < deadline, f"{response_id} stuck {stored['status']}"
        time.sleep(0.05)


def sqlite_statuses(db: Path) -> dict[str, str]:
    """Every stored response's status, read straight from the SQLite file."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, response FROM responses").fetchall()
    return {rid: json.loads(raw)["status"] for rid, raw in rows}


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


def _settings(upstream: ScriptedUpstream, db: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "read_timeout": READ_TIMEOUT,
        "keepalive_seconds": 0.2,
        "stream_grace_seconds": 0.3,
        "max_body_bytes": BODY_LIMIT,
    }
    values.update(overrides)
    return e2e_settings(upstream, db, **values)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, db: Path) -> Iterator[GatewayServer]:
    with GatewayServer(_settings(upstream, db)) as server:
        yield server


@pytest.fixture(autouse=True)
def upstream_left_nothing_open(upstream: ScriptedUpstream) -> Iterator[None]:
    yield
    assert upstream.wait_streams_closed(5.0), [s for s in upstream.streams if s.closed_at is None]


# -- upstream refuses before any output ---------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("script", "status", "code"),
    [
        ("429", 429, "rate_limit_exceeded"),
        ("500", 500, "server_error"),
        ("error status=503", 503, "server_error"),
    ],
)
def test_refusal_before_output_is_the_same_http_error_and_nothing_stored(
    gateway: GatewayServer, upstream: ScriptedUpstream, db: Path,
    script: str, status: int, code: str, stream: bool,
) -> None:
    before = sqlite_statuses(db)
    upstream.reset()
    answer = post(gateway.base_url + "/responses",
                  {"model": MODEL, "input": f"[[script:{script}]]", "stream": stream})

    error = assert_openai_error(answer, status, code)
    assert f"HTTP {status}" in error["message"]
    assert len(upstream.requests) == 1  # max_retries=0: asked once
    assert sqlite_statuses(db) == before  # the client got no id: nothing may be stored


def test_refusal_is_retried_before_output(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    with GatewayServer(_settings(upstream, tmp_path / "g.db", max_retries=2)) as gateway:
        for script in ("429 retry_after=0", "500"):
            key = f"retry-{script.split()[0]}"
            answer = post(gateway.base_url + "/responses", {
                "model": MODEL, "stream": True,
                "input": f"[[script:{script} times=2 key={key} then=text]]",
            })
            terminal = terminal_of(answer)
            assert terminal["type"] == "response.completed"
            assert text_of(answer.events) == DEFAULT_TEXT  # once: no output was repeated
            assert upstream.attempts(key) == 3
            assert settle(gateway, terminal["response"]["id"]) == terminal["response"]
        assert set(sqlite_statuses(tmp_path / "g.db").values()) == {"completed"}


@pytest.mark.parametrize("script", ["429", "500"])
def test_refusal_after_created_ends_failed_and_stored_failed(
    upstream: ScriptedUpstream, tmp_path: Path, script: str
) -> None:
    """No grace period: response.created leaves first, so the refusal is a failed response."""
    settings = _settings(upstream, tmp_path / "g.db", stream_grace_seconds=0.0)
    with GatewayServer(settings) as gateway:
        answer = post(gateway.base_url + "/responses",
                      {"model": MODEL, "input": f"[[script:{script}]]", "stream": True})
        terminal = terminal_of(answer)
        assert [e["type"] for e in answer.events] == [
            "response.created", "response.in_progress", "response.failed"]
        response = terminal["response"]
        assert response["status"] == "failed"
        assert response["error"]["code"] in ("rate_limit_exceeded", "server_error")
        assert settle(gateway, response["id"]) == response


# -- upstream breaks mid-stream ------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "code", "seen"),
    [
        ("drop after=3 n=8", "upstream_connection_closed", 3),
        ("drop after=3 n=8 clean=1", "upstream_connection_closed", 3),
        ("malformed after=2", "upstream_protocol_error", 2),
        (f"stall after=2 seconds={READ_TIMEOUT * 3}", "upstream_timeout", 2),
        ("error_event after=2", "model_error", 2),
    ],
)
def test_midstream_fault_ends_failed_with_the_partial_output_stored(
    gateway: GatewayServer, upstream: ScriptedUpstream, script: str, code: str, seen: int
) -> None:
    answer = post(gateway.base_url + "/responses",
                  {"model": MODEL, "input": f"[[script:{script}]]", "stream": True})

    terminal = terminal_of(answer)
    response = terminal["response"]
    assert terminal["type"] == "response.failed"
    assert failed_code(response["error"]) == code
    deltas = [e for e in answer.events if e["type"] == "response.output_text.delta"]
    assert len(deltas) == seen
    [message] = response["output"]
    assert message["status"] == "incomplete"
    assert message["content"][0]["text"] == text_of(answer.events)  # nothing lost
    assert settle(gateway, response["id"]) == response  # stored as the client saw it
    validate_response(response)
    if script.startswith("stall"):
        assert READ_TIMEOUT <= answer.seconds < READ_TIMEOUT * 3
        assert answer.comments  # keep-alive comments went out while the upstream was silent


@pytest.mark.parametrize("stream", [True, False])
def test_an_end_without_done_after_the_finish_reason_is_complete(
    gateway: GatewayServer, stream: bool
) -> None:
    """Some servers close after the finish_reason (and usage) without ``data: [DONE]``."""
    answer = post(gateway.base_url + "/responses",
                  {"model": MODEL, "input": "[[script:text n=4 done=0]]", "stream": stream})
    response = terminal_of(answer)["response"] if stream else answer.json()
    assert response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == DEFAULT_TEXT
    assert response["usage"] is not None
    assert settle(gateway, response["id"]) == response


@pytest.mark.parametrize(
    ("script", "status", "code"),
    [
        ("drop after=3", 502, "upstream_connection_closed"),
        ("malformed", 502, "upstream_protocol_error"),
        (f"stall seconds={READ_TIMEOUT * 3}", 504, "upstream_timeout"),
    ],
)
def test_broken_non_stream_answer_is_an_http_error_and_nothing_stored(
    gateway: GatewayServer, db: Path, script: str, status: int, code: str
) -> None:
    before = sqlite_statuses(db)
    answer = post(gateway.base_url + "/responses",
                  {"model": MODEL, "input": f"[[script:{script}]]"})
    assert_openai_error(answer, status, code)
    assert sqlite_statuses(db) == before


# -- sizes -----------------------------------------------------------------------------------


def test_huge_upstream_output_arrives_whole(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    size = 8 * 1024 * 1024
    pattern = "0123456789abcdefghijklmnopqrstuvwxyz\n"
    expected = (pattern * (size // len(pattern) + 1))[:size]
    body = {"model": MODEL, "input": f"[[script:huge size={size} piece=65536]]"}

    answer = post(gateway.base_url + "/responses", {**body, "stream": True})
    terminal = terminal_of(answer)
    assert terminal["type"] == "response.completed"
    assert text_of(answer.events) == expected
    response = terminal["response"]
    assert response["output"][0]["content"][0]["text"] == expected
    assert settle(gateway, response["id"]) == response

    whole = post(gateway.base_url + "/responses", body)
    assert whole.status == 200
    assert whole.json()["output"][0]["content"][0]["text"] == expected
    # Slow terminal writes leave time for keep-alives: none may follow the end of the body.
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


def _body_of_size(size: int) -> bytes:
    """A create body of exactly ``size`` bytes (the input text pads it)."""
    head = json.dumps({"model": MODEL, "input": ""}).encode()
    pad = size - len(head)
    return json.dumps({"model": MODEL, "input": "x" * pad}).encode()


def test_request_just_under_the_body_limit_is_served(
    gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    upstream.reset()
    body = _body_of_size(BODY_LIMIT)
    assert len(body) == BODY_LIMIT
    answer = post(gateway.base_url + "/responses", body)
    assert answer.status == 200, answer.body[:300]
    [request] = upstream.requests
    assert request["messages"][-1]["content"] == json.loads(body)["input"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_request_over_the_body_limit_is_413_and_goes_nowhere(
    gateway: GatewayServer, upstream: ScriptedUpstream, db: Path, chunked: bool
) -> None:
    upstream.reset()
    before = sqlite_statuses(db)
    body = _body_of_size(BODY_LIMIT + 1)
    url = gateway.base_url + "/responses"
    if chunked:  # no Content-Length: the limit must hold while the body streams in
        pieces = (body[i : i + 65536] for i in range(0, len(body), 65536))
        response = httpx.post(url, content=pieces, timeout=30)
        answer = Answer(response.status_code, response.headers, response.content)
    else:
        answer = post(url, body)
    error = assert_openai_error(answer, 413, "request_too_large")
    assert str(BODY_LIMIT) in error["message"]
    assert upstream.requests == []
    assert sqlite_statuses(db) == before


# -- client disconnects ----------------------------------------------------------------------


def _raw_request(port: int, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        f"POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def test_client_disconnects_at_random_points(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """Leave at a random moment (before the answer, in the grace period, after k events);
    each time the upstream stream is closed and the record ends in a true state."""
    db = tmp_path / "g.db"
    rng = random.Random(7)
    with GatewayServer(_settings(upstream, db)) as gateway:
        for i in range(16):
            upstream.reset()
            script = f"[[script:slow n=30 delay=0.02 first_delay={rng.choice([0, 0.5])} key=d{i}]]"
            body = {"model": MODEL, "input": script, "stream": True}
            left_at: float
            leave = rng.choice(["before-answer", "after-events"])
            if leave == "before-answer":
                sock = _raw_request(gateway.port, json.dumps(body).encode())
                time.sleep(rng.uniform(0, 0.4))
                sock.close()
                left_at = time.monotonic()
            else:
                wanted = rng.randint(1, 40)
                got = 0
                with httpx.Client(timeout=30) as client, client.stream(
                    "POST", gateway.base_url + "/responses", json=body
                ) as response:
                    assert response.status_code == 200
                    pending = b""
                    for piece in response.iter_raw():
                        frames, pending = split_frames(pending + piece)
                        got += sum(not f.startswith(b":") for f in frames)
                        if got >= wanted:
                            break
                left_at = time.monotonic()
            # The upstream stream, if it was opened, is closed promptly (or it had finished).
            deadline = left_at + 10
            while time.monotonic() < deadline and (
                not upstream.streams or upstream.streams[0].closed_at is None
            ):
                time.sleep(0.01)
            [stream] = upstream.streams
            assert stream.closed_at is not None, f"iteration {i}: upstream left open"
            assert stream.completed or stream.client_disconnected
        # Every record written ends true: never left in_progress.
        deadline = time.monotonic() + 10
        while any(s in RUNNING for s in sqlite_statuses(db).values()):
            assert time.monotonic() < deadline, sqlite_statuses(db)
            time.sleep(0.05)
        statuses = sqlite_statuses(db)
        assert set(statuses.values()) <= {"completed", "cancelled"}, statuses
        assert "cancelled" in statuses.values()


# -- the store: DynamoDB under moto --------------------------------------------------------


class Injector:
    """A 'before-send' handler: answers chosen DynamoDB calls with an error, in DynamoDB's
    place, so botocore's own retry logic sees exactly what a real throttle looks like."""

    def __init__(
        self,
        error: str,
        times: int,
        *,
        operations: tuple[str, ...] = (),
        when: Callable[[dict[str, Any]], bool] | None = None,
        status: int = 400,
    ) -> None:
        self.error, self.times, self.operations = error, times, operations
        self.when, self.status = when, status
        self.injected = 0
        self.calls: list[str] = []

    def __call__(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        self.calls.append(operation)
        if self.injected >= self.times:
            return None
        if self.operations and operation not in self.operations:
            return None
        if self.when is not None and not self.when(json.loads(request.body or b"{}")):
            return None
        self.injected += 1
        body = json.dumps({
            "__type": f"com.amazonaws.dynamodb.v20120810#{self.error}",
            "message": f"injected {self.error}",
        }).encode()
        headers = {"x-amzn-RequestId": f"injected-{self.injected}",
                   "Content-Type": "application/x-amz-json-1.0",
                   "Content-Length": str(len(body))}
        return AWSResponse(request.url, self.status, headers, _RawBody(body))


class _RawBody:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


@pytest.fixture
def table(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    use_moto(monkeypatch, moto_endpoint)
    return create_dynamodb_table()


class DynamoGateway:
    """The gateway on a DynamoDB store the test holds (to fault its client).

    The app builds its services at startup, in the server's event loop, and closes them there;
    the store is handed to that build rather than the whole gateway, so the app still owns it.
    """

    def __init__(
        self,
        upstream: ScriptedUpstream,
        table: str,
        monkeypatch: pytest.MonkeyPatch,
        *,
        store: DynamoDBStore | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = _settings(upstream, Path("unused.db"), store=f"dynamodb:{table}",
                                  **overrides)
        self.store = store or DynamoDBStore(table, max_attempts=3)
        monkeypatch.setattr(
            app_module, "build_gateway", lambda settings: build_gateway(settings, self.store)
        )
        self.server = GatewayServer(self.settings)

    def inject(self, injector: Injector) -> Injector:
        self.store.client.meta.events.register("before-send.dynamodb", injector)
        return injector

    def heal(self, injector: Injector) -> None:
        self.store.client.meta.events.unregister("before-send.dynamodb", injector)

    def record_items(self, response_id: str) -> list[dict[str, Any]]:
        """Every item in the response's partition, read with a client of our own."""
        result = make_client().query(
            TableName=self.store.table_name,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": response_id}},
            ConsistentRead=True,
        )
        return result["Items"]

    def __enter__(self) -> GatewayServer:
        return self.server.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


def test_dynamodb_throttling_is_absorbed_by_retries(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dynamo = DynamoGateway(upstream, table, monkeypatch)
    with dynamo as gateway:
        injector = dynamo.inject(Injector("ThrottlingException", times=2))
        answer = post(gateway.base_url + "/responses",
                      {"model": MODEL, "input": "hello", "stream": True})
        terminal = terminal_of(answer)
        assert terminal["type"] == "response.completed"
        assert injector.injected == 2
        assert len(injector.calls) >= 3  # the throttled call was sent again
        assert settle(gateway, terminal["response"]["id"]) == terminal["response"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_dynamodb_throttling_that_persists_fails_clearly(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    dynamo = DynamoGateway(upstream, table, monkeypatch)
    with dynamo as gateway:
        injector = dynamo.inject(Injector("ThrottlingException", times=10**6))
        answer = post(gateway.base_url + "/responses",
                      {"model": MODEL, "input": "hello", "stream": stream})
        assert answer.seconds < 15  # retries are bounded: it ends, it does not hang
        if stream:
            terminal = terminal_of(answer)
            assert terminal["type"] == "response.failed"
            assert_store_failure(terminal["response"]["error"])
            response_id = terminal["response"]["id"]
        else:
            assert_openai_error(answer, 503, "store_unavailable")
            response_id = None
        dynamo.heal(injector)
        if response_id is not None:  # told failed, and indeed not stored: nothing half-written
            assert retrieve(gateway, response_id).status_code == 404
            assert not [i for i in dynamo.record_items(response_id) if i["sk"]["S"] == "R"]


def test_record_write_failing_after_its_items_leaves_nothing_visible(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Input items are written first, the record last: if the record write fails, neither
    the response nor its input items can be found."""
    dynamo = DynamoGateway(upstream, table, monkeypatch)
    with dynamo as gateway:
        injector = dynamo.inject(
            Injector("InternalServerError", times=10**6, operations=("PutItem",), status=500)
        )
        answer = post(gateway.base_url + "/responses",
                      {"model": MODEL, "input": "remember me", "stream": True})
        terminal = terminal_of(answer)
        assert_store_failure(terminal["response"]["error"])
        assert "BatchWriteItem" in injector.calls  # the items went in before the record failed
        dynamo.heal(injector)
        response_id = terminal["response"]["id"]
        assert retrieve(gateway, response_id).status_code == 404
        items = httpx.get(f"{gateway.base_url}/responses/{response_id}/input_items")
        assert items.status_code == 404
        chained = post(gateway.base_url + "/responses",
                       {"model": MODEL, "input": "again", "previous_response_id": response_id})
        assert_openai_error(chained, 400, "previous_response_not_found")


def _dead_store(table: str) -> DynamoDBStore:
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "dynamodb",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        config=Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=1,
                      read_timeout=2),
    )
    return DynamoDBStore(table, client=client)


@pytest.mark.parametrize(
    "body",
    [
        {"input": "later", "background": True},
        {"input": "later", "background": True, "stream": True},
        {"input": "next", "previous_response_id": "resp_0123456789abcdef"},
    ],
    ids=["background", "background-stream", "previous-response"],
)
def test_store_unavailable_at_create_is_a_clear_503(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch,
    body: dict[str, Any],
) -> None:
    upstream.reset()
    with DynamoGateway(upstream, table, monkeypatch, store=_dead_store(table)) as gateway:
        answer = post(gateway.base_url + "/responses", {"model": MODEL, **body})
        error = assert_openai_error(answer, 503, "store_unavailable")
        assert error["type"] == "server_error"
        assert answer.seconds < 15
    assert upstream.requests == []  # nothing was started that could not be recorded


def test_store_unavailable_when_a_foreground_response_ends(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DynamoGateway(upstream, table, monkeypatch, store=_dead_store(table)) as gateway:
        url = gateway.base_url + "/responses"
        assert_openai_error(post(url, {"model": MODEL, "input": "hi"}), 503, "store_unavailable")
        terminal = terminal_of(post(url, {"model": MODEL, "input": "hi", "stream": True}))
        assert terminal["response"]["status"] == "failed"
        assert_store_failure(terminal["response"]["error"])
        # store=false never touches the store: served as usual
        free = terminal_of(post(url, {"model": MODEL, "input": "hi", "stream": True,
                                      "store": False}))
        assert free["type"] == "response.completed"


def _terminal_write(status: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the write that sets a record's status (UpdateItem, or one in a transaction)."""
    def sets_status(payload: dict[str, Any]) -> bool:
        updates = [payload] + [t.get("Update", {}) for t in payload.get("TransactItems", [])]
        return any(
            u.get("ExpressionAttributeValues", {}).get(":s") == {"S": status} for u in updates
        )
    return sets_status


def _follow(gateway: GatewayServer, response_id: str) -> Answer:
    start = time.monotonic()
    response = httpx.get(f"{gateway.base_url}/responses/{response_id}",
                         params={"stream": "true"}, timeout=30)
    answer = Answer(response.status_code, response.headers, response.content)
    answer.frames, rest = split_frames(response.content)
    assert not rest
    answer.seconds = time.monotonic() - start
    return answer


def test_conditional_write_lost_to_a_cancel_keeps_the_cancel(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another instance cancels just before the worker's terminal write: the write's condition
    fails in DynamoDB itself, and the response stays cancelled."""
    # 10 s: a renewal stalled past a short lease on a loaded machine would let settle()'s
    # retrieve end it worker_lost before the terminal write, and the cancel would not land
    dynamo = DynamoGateway(upstream, table, monkeypatch, lease_seconds=10.0)
    canceller = DynamoDBStore(table)
    holder: dict[str, str] = {}

    def cancel_first(payload: dict[str, Any]) -> bool:
        if _terminal_write("completed")(payload):
            # the store's blocking halves: this runs in the worker's store thread
            record = canceller._get(holder["id"], "default")
            assert record is not None
            holder["cancelled"] = str(canceller._update(
                holder["id"], dict(record.response, status="cancelled"), list(RUNNING), 0
            ))
        return False  # let the real write go: DynamoDB rejects it

    with dynamo as gateway:
        dynamo.inject(Injector("unused", times=1, when=cancel_first))
        created = post(gateway.base_url + "/responses", {
            "model": MODEL, "input": "[[script:slow n=6 delay=0.05]]", "background": True})
        assert created.status == 200, created.body
        holder["id"] = created.json()["id"]
        stored = settle(gateway, holder["id"])
        assert holder.get("cancelled") == "True"  # the cancel landed right before the write
        assert stored["status"] == "cancelled"
        time.sleep(0.5)  # nothing overwrites it later
        assert retrieve(gateway, holder["id"]).json()["status"] == "cancelled"
        follow = _follow(gateway, holder["id"])  # the end, carrying the cancelled object
        ends = [e for e in follow.events if e["type"] in TERMINAL_TYPES]
        assert [(e["type"], e["response"]["status"]) for e in ends] == [
            ("response.failed", "cancelled")]


def test_terminal_write_rejected_ends_failed_not_stuck(
    upstream: ScriptedUpstream, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's terminal write fails its condition while the record still says running
    (as if the condition misfired): the response must not stay in_progress forever; once the
    lease lapses it reads failed, and a follower gets exactly that one terminal event."""
    dynamo = DynamoGateway(upstream, table, monkeypatch, lease_seconds=1.0)
    with dynamo as gateway:
        injector = dynamo.inject(Injector(
            "TransactionCanceledException", times=10**6, when=_terminal_write("completed")))
        created = post(gateway.base_url + "/responses", {
            "model": MODEL, "input": "[[script:slow n=4 delay=0.05]]", "background": True})
        response_id = created.json()["id"]
        # The rejected write first: on a loaded machine the 1 s lease can lapse (and a read
        # report failed) before the worker gets to its terminal write at all.
        deadline = time.monotonic() + 30
        while injector.injected < 1:
            assert time.monotonic() < deadline, "the terminal write was never attempted"
            time.sleep(0.05)
        stored = settle(gateway, response_id, timeout=10)
        assert stored["status"] == "failed"
        follow = _follow(gateway, response_id)
        terminals = [e for e in follow.events if e["type"] in TERMINAL_TYPES]
        assert [t["type"] for t in terminals] == ["response.failed"]
        assert terminals[0]["response"]["status"] == stored["status"]


# -- the SSE writer --------------------------------------------------------------------------


def test_no_keepalive_after_the_body_ends() -> None:
    """The last body message may wait on a slow client (flow control); the keep-alive must
    not write after it (uvicorn rejects a message after a completed response)."""
    sent: list[dict[str, Any]] = []

    async def events() -> Any:
        yield [{"type": "response.created", "sequence_number": 0}]

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("more_body") is False:
            await asyncio.sleep(0.3)  # draining to a slow reader

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(30)
        return {"type": "http.disconnect"}

    response = EventStreamResponse(events(), keepalive_seconds=0.05)
    asyncio.run(asyncio.wait_for(response({"type": "http"}, receive, send), 10))
    ends = [i for i, m in enumerate(sent) if m.get("more_body") is False]
    assert ends == [len(sent) - 1], sent


def _body_messages(source: Any) -> list[dict[str, Any]]:
    """The body messages an EventStreamResponse sends for ``source``, the client staying."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(30)
        return {"type": "http.disconnect"}

    response = EventStreamResponse(source, keepalive_seconds=0)
    asyncio.run(asyncio.wait_for(response({"type": "http"}, receive, send), 10))
    return [m for m in sent if m["type"] == "http.response.body"]


def test_each_batch_of_events_is_one_body_message() -> None:
    batches = [
        [{"type": "response.created", "sequence_number": 0},
         {"type": "response.in_progress", "sequence_number": 1}],
        [{"type": "response.output_text.delta", "delta": str(i), "sequence_number": 2 + i}
         for i in range(3)],
        [{"type": "response.completed", "sequence_number": 5}],
    ]

    async def source() -> Any:
        for batch in batches:
            yield batch

    messages = _body_messages(source())
    # The terminal event's batch also ends the body: no empty message (a socket write) after.
    assert [m["more_body"] for m in messages] == [True, True, False]
    assert [split_frames(m["body"]) for m in messages] == [
        ([encode_event(event) for event in batch], b"") for batch in batches
    ]


def test_a_source_that_ends_without_a_terminal_event_still_ends_the_body() -> None:
    closed: list[bool] = []

    async def source() -> Any:
        try:
            yield [{"type": "response.created", "sequence_number": 0}]
        finally:
            closed.append(True)

    messages = _body_messages(source())
    assert [(m["body"] == b"", m["more_body"]) for m in messages] == [(False, True), (True, False)]
    assert closed == [True]


def test_the_source_is_closed_after_its_terminal_batch() -> None:
    """Ending the body at the terminal batch closes the source there; its cleanup runs."""
    cleanup: list[str] = []

    async def source() -> Any:
        try:
            yield [{"type": "response.completed", "sequence_number": 0}]
            cleanup.append("resumed")  # a source must not need this: closed at the yield
        finally:
            cleanup.append("closed")

    assert [m["more_body"] for m in _body_messages(source())] == [False]
    assert cleanup == ["closed"]


@pytest.mark.parametrize("keepalive", [0.0, 0.05])
def test_a_disconnect_ends_the_response_and_closes_its_source(keepalive: float) -> None:
    closed: list[bool] = []
    sent: list[dict[str, Any]] = []

    async def source() -> Any:
        try:
            yield [{"type": "response.created", "sequence_number": 0}]
            await asyncio.sleep(30)  # the upstream is thinking
            yield [{"type": "response.in_progress", "sequence_number": 1}]
        finally:
            closed.append(True)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    gone_at = time.monotonic() + 0.2

    async def receive() -> dict[str, Any]:  # as uvicorn's: the disconnect is a state
        await asyncio.sleep(max(0.0, gone_at - time.monotonic()))
        return {"type": "http.disconnect"}

    response = EventStreamResponse(source(), keepalive_seconds=keepalive)
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(response({"type": "http"}, receive, send), 10))
    assert time.monotonic() - started < 2
    assert closed == [True]
    comments = [m for m in sent if m.get("body", b"").startswith(b": ")]
    assert bool(comments) == (keepalive > 0)  # keep-alives went out while it waited
    assert all(m.get("more_body") is not False for m in sent)  # no end: the client had gone


def _stalled(batches: list[list[dict[str, Any]]], stuck: Any, send_timeout: float,
             ) -> tuple[list[dict[str, Any]], list[bool], float]:
    """An EventStreamResponse over ``batches`` whose client stops reading at the first body
    message ``stuck(message)`` picks (its write never ends): the messages written, whether
    the source was closed, and how long the response took."""
    sent: list[dict[str, Any]] = []
    closed: list[bool] = []

    async def source() -> Any:
        try:
            for batch in batches:
                yield batch
        finally:
            closed.append(True)

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and stuck(message):
            await asyncio.sleep(3600)  # the client reads nothing more
        sent.append(message)

    response = EventStreamResponse(source(), keepalive_seconds=0.05,
                                   send_timeout=send_timeout)
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(response({"type": "http"}, _connected, send), 10))
    return sent, closed, time.monotonic() - started


_BATCHES = [[{"type": "response.created", "sequence_number": 0}],
            [{"type": "response.output_text.delta", "delta": "a", "sequence_number": 1}],
            [{"type": "response.completed", "sequence_number": 2}]]


@pytest.mark.parametrize("stuck_at", ["middle", "last"])
def test_a_write_the_client_never_reads_ends_the_response(
    stuck_at: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GATEWAY_SEND_TIMEOUT_SECONDS: past it the client counts as gone, on any write (the
    body's last one too), and the source is closed as on a disconnect."""
    from responses_gateway.api import stalled_client

    monkeypatch.setattr(stalled_client, "BUFFERED", 0)  # no transport here to drain
    if stuck_at == "middle":
        def stuck(m: dict[str, Any]) -> bool:
            return b"output_text.delta" in m["body"]
    else:
        def stuck(m: dict[str, Any]) -> bool:
            return m["more_body"] is False
    sent, closed, took = _stalled(_BATCHES, stuck, send_timeout=0.3)
    assert 0.3 <= took < 3
    assert closed == [True]
    assert all(b"response.completed" not in m.get("body", b"") for m in sent)


async def _connected() -> dict[str, Any]:
    """An ASGI receive whose client stays connected (for longer than any test here)."""
    await asyncio.sleep(3600)
    return {"type": "http.disconnect"}


def _read_slowly(batches: list[list[dict[str, Any]]], delay: Any, send_timeout: float) -> bytes:
    """What a client that takes ``delay(message)`` seconds over each body write reads of an
    EventStreamResponse over ``batches``."""
    sent: list[bytes] = []

    async def source() -> Any:
        for batch in batches:
            yield batch

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await asyncio.sleep(delay(message))
            sent.append(message["body"])

    response = EventStreamResponse(source(), keepalive_seconds=0.05, send_timeout=send_timeout)
    asyncio.run(asyncio.wait_for(response({"type": "http"}, _connected, send), 10))
    return b"".join(sent)


def test_a_slow_reader_that_keeps_reading_is_not_cut() -> None:
    """Each write may take up to the timeout: a client slower than the stream, but reading,
    gets every event (0.7 s in all, past the 0.3 s timeout)."""
    slow = [[{"type": "response.output_text.delta", "delta": str(i), "sequence_number": i}]
            for i in range(6)] + [[{"type": "response.completed", "sequence_number": 6}]]
    bodies = _read_slowly(slow, lambda message: 0.1, send_timeout=0.3)
    assert bodies.count(b"event: response.output_text.delta") == 6
    assert b"event: response.completed" in bodies


def test_a_large_message_read_at_a_slow_but_steady_rate_is_not_cut() -> None:
    """A write waits for the message before it to drain (uvicorn): the time a 300 KB event
    takes a 200 KB/s reader (1.5 s, past this 0.5 s timeout) is allowed on top."""
    big = [{"type": "response.output_text.delta", "delta": "x" * 300_000, "sequence_number": 0}]
    previous = [0]

    def draining(message: dict[str, Any]) -> float:  # the previous message still draining
        wait, previous[0] = previous[0] / 200_000, len(message["body"])
        return wait

    bodies = _read_slowly([big, [{"type": "response.completed", "sequence_number": 1}]],
                          draining, send_timeout=0.5)
    assert b"event: response.completed" in bodies


def test_a_cancel_from_outside_during_a_write_is_not_taken_for_a_stall() -> None:
    """The task cancelled mid-write (a server shutting down): the write's timing ends with
    it, so a slow cleanup of the source is not then taken for a stalled client and the
    cancel is not swallowed."""
    async def source() -> Any:
        try:
            yield [{"type": "response.created", "sequence_number": 0}]
            yield [{"type": "response.in_progress", "sequence_number": 1}]
        finally:
            await asyncio.sleep(0.5)  # the record's last write, say: past the timeout

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and b"in_progress" in message["body"]:
            await asyncio.sleep(3600)

    async def main() -> None:
        response = EventStreamResponse(source(), keepalive_seconds=0, send_timeout=0.2)
        task = asyncio.create_task(response({"type": "http"}, _connected, send))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), 10))

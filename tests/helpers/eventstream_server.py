"""A fake Bedrock runtime on 127.0.0.1 that speaks the real AWS event-stream wire format.

boto3 is pointed at it with ``endpoint_url`` and dummy credentials, so botocore's own
serializer, HTTP stack, event-stream decoder and error parser all run. Tests script one
answer per model id and read back the request bodies the gateway sent::

    with FakeBedrock() as fake:
        fake.stream("m1", [{"messageStart": {"role": "assistant"}}, ...])
        fake.error("m2", 429, "ThrottlingException", "slow down")
        ...
        fake.requests[-1].body   # the Converse JSON (blobs base64-encoded, as on the wire)

Stream steps: an event dict ``{"<eventType>": payload}``; ``exception(member, message)`` for
an exception frame; ``DROP`` to cut the connection half-way through the next frame;
``hang(seconds)`` to keep the connection open, sending ignorable ``ping`` frames, until the
client goes away (recorded in ``disconnects``).

Frame layout (what ``botocore.eventstream`` decodes): prelude = total length and headers
length (uint32 BE each) + CRC32 of those 8 bytes; headers, each ``name-len(1) name type(1)=7
value-len(2) value``; payload; CRC32 of everything before.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

DROP = "drop"


@dataclass(frozen=True)
class Hang:
    seconds: float


def hang(seconds: float) -> Hang:
    return Hang(seconds)


@dataclass(frozen=True)
class Exception_:
    member: str
    message: str


def exception(member: str, message: str) -> Exception_:
    return Exception_(member, message)


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(
        struct.pack("!B", len(k)) + k.encode() + struct.pack("!BH", 7, len(v.encode()))
        + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack("!II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    return message + struct.pack("!I", zlib.crc32(message) & 0xFFFFFFFF)


def event_frame(name: str, payload: dict[str, Any] | bytes) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return frame({":event-type": name, ":content-type": "application/json",
                  ":message-type": "event"}, body)


def exception_frame(member: str, message: str) -> bytes:
    return frame({":exception-type": member, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())


@dataclass
class Recorded:
    operation: str  # "converse" | "converse-stream"
    model_id: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class _Answer:
    kind: str  # stream | json | error | compute
    steps: list[Any] = field(default_factory=list)
    compute: Callable[[dict[str, Any]], Any] | None = None
    status: int = 200
    payload: Any = None
    error_type: str = ""
    queue: list[list[Any]] = field(default_factory=list)  # kind "streams": one per request


class FakeBedrock:
    def __init__(self) -> None:
        self._answers: dict[str, _Answer] = {}
        self.requests: list[Recorded] = []
        self.disconnects: list[str] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        # The control plane (``bedrock``, not ``bedrock-runtime``): what ListFoundationModels
        # and ListInferenceProfiles answer (summaries as AWS sends them), and the paths asked.
        self.foundation_models: list[dict[str, Any]] = []
        self.inference_profiles: list[dict[str, Any]] = []
        self.profiles_page_size = 2
        self.control_requests: list[str] = []

    # -- scripting ---------------------------------------------------------------------

    def stream(self, model_id: str, steps: list[Any]) -> None:
        self._answers[model_id] = _Answer("stream", steps=list(steps))

    def streams(self, model_id: str, *answers: list[Any]) -> None:
        """ConverseStream answered with each of ``answers`` in turn (the last one again once
        they are used up): a model whose turns differ (a tool call, then the answer)."""
        self._answers[model_id] = _Answer("streams", queue=[list(a) for a in answers])

    def json(self, model_id: str, payload: dict[str, Any], status: int = 200) -> None:
        self._answers[model_id] = _Answer("json", status=status, payload=payload)

    def answer_with(self, model_id: str, compute: Callable[[dict[str, Any]], Any]) -> None:
        """InvokeModel answered by ``compute(request body)`` (embeddings of the texts sent); a
        ValueError it raises is Bedrock's 400 ValidationException with its message."""
        self._answers[model_id] = _Answer("compute", compute=compute)

    def error(self, model_id: str, status: int, error_type: str, message: str) -> None:
        self._answers[model_id] = _Answer("error", status=status, error_type=error_type,
                                          payload={"message": message})

    def requests_for(self, model_id: str) -> list[Recorded]:
        return [r for r in self.requests if r.model_id == model_id]

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeBedrock:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeBedrock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FakeBedrock

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def do_GET(self) -> None:
        """The control plane's listings: ListFoundationModels (``byOutputModality`` filter)
        and ListInferenceProfiles (paged by ``nextToken``, ``profiles_page_size`` a page)."""
        path, _, query = self.path.partition("?")
        params = dict(part.partition("=")[::2] for part in query.split("&") if part)
        with self.owner.lock:
            self.owner.control_requests.append(self.path)
        if path == "/foundation-models":
            wanted = params.get("byOutputModality")
            summaries = [m for m in self.owner.foundation_models
                         if wanted is None or wanted in m.get("outputModalities", [wanted])]
            self._send_json(200, {"modelSummaries": summaries})
        elif path == "/inference-profiles":
            start = int(params.get("nextToken") or 0)
            size = self.owner.profiles_page_size
            page: dict[str, Any] = {
                "inferenceProfileSummaries": self.owner.inference_profiles[start:start + size]}
            if start + size < len(self.owner.inference_profiles):
                page["nextToken"] = str(start + size)
            self._send_json(200, page)
        else:
            self._send_json(404, {"message": f"no route {self.path}"}, "UnknownOperationException")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path.split("/")  # "", "model", "<id>", "<operation>"
        if len(parts) != 4 or parts[1] != "model":
            self._send_json(404, {"message": f"no route {self.path}"}, "UnknownOperationException")
            return
        model_id, operation = unquote(parts[2]), parts[3]
        with self.owner.lock:
            self.owner.requests.append(Recorded(operation, model_id, json.loads(raw or b"{}"),
                                                dict(self.headers.items())))
        if operation == "count-tokens":  # CountTokens: this fake's own count (count_tokens)
            self._send_json(200, {"inputTokens": count_tokens(json.loads(raw or b"{}"))})
            return
        answer = self.owner._answers.get(model_id)
        if answer is None:
            self._send_json(404, {"message": f"no scripted answer for {model_id}"},
                            "ResourceNotFoundException")
        elif answer.kind == "error":
            self._send_json(answer.status, answer.payload, answer.error_type)
        elif answer.kind == "json":
            self._send_json(answer.status, answer.payload)
        elif answer.kind == "compute":
            assert answer.compute is not None
            try:
                self._send_json(200, answer.compute(json.loads(raw or b"{}")))
            except ValueError as exc:
                self._send_json(400, {"message": str(exc)}, "ValidationException")
        elif answer.kind == "streams":
            with self.owner.lock:
                steps = answer.queue.pop(0) if len(answer.queue) > 1 else answer.queue[0]
            self._send_stream(model_id, steps)
        else:
            self._send_stream(model_id, answer.steps)

    def _send_json(self, status: int, payload: Any, error_type: str | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", "fake-request-id")
        if error_type:
            self.send_header("x-amzn-ErrorType",
                             f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/")
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_stream(self, model_id: str, steps: list[Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amzn-RequestId", "fake-stream-request-id")
        self.end_headers()
        self.wfile.flush()
        try:
            for i, step in enumerate(steps):
                if step == DROP:
                    rest = steps[i + 1] if i + 1 < len(steps) else {"contentBlockDelta": {
                        "contentBlockIndex": 0, "delta": {"text": "never arrives"}}}
                    data = _encode_step(rest)
                    self.wfile.write(b"%x\r\n" % len(data) + data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if isinstance(step, Hang):
                    self._hang(model_id, step.seconds)
                    return
                self._chunk(_encode_step(step))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.owner.lock:
                self.owner.disconnects.append(model_id)
            self.close_connection = True

    def _hang(self, model_id: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        ping = event_frame("ping", {})
        while time.monotonic() < deadline:
            time.sleep(0.02)
            self._chunk(ping)  # raises once the client has gone
        self.wfile.write(b"0\r\n\r\n")


def count_tokens(body: dict[str, Any]) -> int:
    """The fake's tokenizer for CountTokens: a word or a punctuation mark is a token, three
    more per message and per system block (a Converse request in ``input.converse``)."""
    converse = (body.get("input") or {}).get("converse") or {}
    blocks = list(converse.get("system") or [])
    messages = converse.get("messages") or []
    for message in messages:
        blocks.extend(message.get("content") or [])
    text = " ".join(json.dumps(b) if "text" not in b else b["text"] for b in blocks)
    return len(re.findall(r"\w+|[^\w\s]", text)) + 3 * (len(messages) + len(
        converse.get("system") or []))


def _encode_step(step: Any) -> bytes:
    if isinstance(step, Exception_):
        return exception_frame(step.member, step.message)
    if isinstance(step, bytes):
        return step
    ((name, payload),) = step.items()
    return event_frame(name, payload)


@contextmanager
def fake_bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        yield fake


def use_dummy_aws(monkeypatch: Any) -> None:
    """Dummy credentials and no shared config, so boto3 signs requests and talks only to us."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK"):
        monkeypatch.delenv(name, raising=False)

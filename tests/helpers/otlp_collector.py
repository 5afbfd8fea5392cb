"""A tiny OTLP/HTTP trace collector for tests: ``POST /v1/traces`` on 127.0.0.1, each body
decoded with the OpenTelemetry protobufs (``opentelemetry-proto``'s
``ExportTraceServiceRequest``) into plain spans.

    with OtlpCollector() as collector:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
        ...
        spans = collector.wait_for(lambda spans: ..., seconds=30)
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind: 2 SERVER, 3 CLIENT, 1 INTERNAL
    start_ns: int
    end_ns: int
    status_code: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


class OtlpCollector:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.posts: list[dict[str, str]] = []  # each request's headers
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector._add(request, dict(self.headers))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _add(self, request: ExportTraceServiceRequest, headers: dict[str, str]) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: value_of(kv.value)
                        for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(Span(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(), kind=s.kind,
                        start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                        status_code=s.status.code,
                        attributes={kv.key: value_of(kv.value) for kv in s.attributes},
                        resource=resource))
        with self._lock:
            self.spans.extend(found)
            self.posts.append(headers)

    def wait_for(self, done: Callable[[list[Span]], bool], seconds: float = 30) -> list[Span]:
        """The spans received once ``done(spans)`` holds (an AssertionError after
        ``seconds``: a generous bound, for a loaded machine)."""
        deadline = time.monotonic() + seconds
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the collector did not get the spans: {spans}")
            time.sleep(0.05)

    def __enter__(self) -> OtlpCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

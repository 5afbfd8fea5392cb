"""Logs, metrics and traces with Powertools, paid for only where they are read: in Lambda.

- **Logger**: the ``responses_gateway`` loggers write JSON lines with two correlation ids,
  ``request_id`` (the Lambda request, else the ``x-request-id`` the client got) and
  ``response_id``: in Lambda through Powertools (with the service name), elsewhere to stderr,
  at ``GATEWAY_LOG_LEVEL``. One line per response says how it ended (id, model, backend,
  status, timings, tokens, the upstream's status and error code, the reason of a failure),
  never prompt or output text nor keys, unless ``GATEWAY_DEBUG_LOG_CONTENT`` is set.
- **Metrics**: one EMF record per response (namespace ``ResponsesGateway``):
  ``TimeToFirstToken`` (streaming only), ``Duration``, ``InputTokens``, ``OutputTokens``,
  ``Responses``, for the service and per ``Model``; ``Errors`` per ``ErrorType``. Printed to
  stdout only in Lambda, where CloudWatch turns the lines into metrics; elsewhere nothing.
- **Tracer**: subsegments for the upstream call and every store call, only in Lambda with
  tracing on (``POWERTOOLS_TRACE_DISABLED`` unset or false). Subsegments hang directly off
  the invocation's segment, never off the SDK's thread-local stack, because a streaming
  response and its store writes overlap in one thread.

- **OpenTelemetry**: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces one) set, each
  response is a trace exported over OTLP/HTTP (otel.py: a span for the response, one per model
  turn and per tool call; a client's ``traceparent`` continues its trace), anywhere.

Nothing here runs per chunk: a job records its first content once and reports at its end.
Powertools, the X-Ray SDK and the OpenTelemetry SDK are imported only when enabled, so local
starts stay fast.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson

from responses_gateway import collector
from responses_gateway.ids import new_request_id, request_id
from responses_gateway.status import TERMINAL_STATUSES

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from responses_gateway.settings import Settings
    from responses_gateway.store.usage import UsageEntry, UsageStore

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "responses-gateway"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ResponsesGateway"

response_id: ContextVar[str | None] = ContextVar("response_id", default=None)
#: the client's W3C trace context headers (``traceparent``, ``tracestate``), when it sent them
#: and OpenTelemetry is on (otel.py continues the client's trace)
trace_carrier: ContextVar[dict[str, str] | None] = ContextVar("trace_carrier", default=None)
#: steps (model turns, tool calls) a response's timeline keeps; the settings' bounds on
#: tool calls and turns keep real ones far below, this bounds the log row whatever they say
MAX_STEPS = 200
#: characters of a failure's message kept in the log row (the Response keeps all of it)
MAX_ERROR_CHARS = 2000
logger = logging.getLogger("responses_gateway.observability")
_state: dict[str, Any] = {"debug_content": False, "configured": False}


def in_lambda() -> bool:
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def configure(settings: Settings) -> None:
    """When services are built: the debug switch, the level, and where the lines go (once per
    process: Powertools JSON in Lambda, JSON lines on stderr elsewhere)."""
    _state["debug_content"] = settings.debug_log_content
    _state["settings"] = settings
    level = settings.log_level.upper()
    if not in_lambda():
        _local_lines(level)
        return
    if _state["configured"]:
        return
    _state["configured"] = True
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    source = Logger(service=SERVICE, level=level)
    source.registered_handler.addFilter(_Correlation())
    logging.getLogger("responses_gateway")  # registered, so its config is copied
    copy_config_to_registered_loggers(source_logger=source, include={"responses_gateway"})


def _local_lines(level: str) -> None:
    """The gateway's own lines as JSON on stderr, at ``level`` (``responses-gateway serve``,
    the Lambda Web Adapter's uvicorn before Lambda's env is seen, tests). One handler per
    process; records still propagate, so a root handler (pytest's caplog) sees them too."""
    root = logging.getLogger("responses_gateway")
    root.setLevel(level)
    if not any(isinstance(h, _StderrLines) for h in root.handlers):
        handler = _StderrLines()
        handler.addFilter(_Correlation())
        root.addHandler(handler)


# The attributes every LogRecord has: the rest are a line's ``extra`` fields.
_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class _StderrLines(logging.Handler):
    """One JSON object per record on the current ``sys.stderr`` (looked up per line, as
    ``logging.lastResort`` does: a test's captured stream comes and goes)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line: dict[str, Any] = {
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                + f".{int(record.msecs):03d}Z",
                "level": record.levelname,
                "logger": record.name,
                "message": record.getMessage(),
            }
            line.update((k, v) for k, v in record.__dict__.items() if k not in _RECORD_FIELDS)
            if record.exc_info:
                line["exception"] = logging.Formatter().formatException(record.exc_info)
            text = scrub(orjson.dumps(line, default=str).decode())
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


class _Correlation(logging.Filter):
    """Adds the request and response ids of the current task to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id.get()
        if rid is not None:
            record.request_id = rid
        resp = response_id.get()
        if resp is not None:
            record.response_id = resp
        return True


# Query parameters that carry credentials: a client may send its key as ``?api_key=`` (it is
# refused, but the access log line would still keep it).
_CREDENTIAL_QUERY = (
    r"(?i)([?&;](?:[a-z0-9_.-]*(?:key|token|secret|password|passwd|auth[a-z]*|sig|signature|"
    r"credential[s]?|session)))=[^&;#\s\"']*"
)
# The user and password of a URL (``https://user:key@host/v1``).
_URL_USERINFO = r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s\"']+@"


@cache
def _pattern(source: str) -> re.Pattern[str]:
    """One of the patterns above, compiled the first time a line needs it (both cost every
    cold start ~1 ms to compile at import, and many processes never log a matching line)."""
    return re.compile(source)


def scrub(text: str) -> str:
    """``text`` with the values of credential-like query parameters and the user and password
    of URLs replaced."""
    if "@" in text:
        text = _pattern(_URL_USERINFO).sub(r"\1***@", text)
    if "=" not in text:
        return text
    return _pattern(_CREDENTIAL_QUERY).sub(r"\1=[redacted]", text)


class ScrubCredentials(logging.Filter):
    """Keeps credentials sent in a query string out of log lines (uvicorn's access log quotes
    every request's full path)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args:
            record.args = tuple(scrub(a) if isinstance(a, str) else a for a in args)
        elif isinstance(record.msg, str):
            record.msg = scrub(record.msg)
        return True


def scrub_server_logs() -> None:
    """Install :class:`ScrubCredentials` on the server's loggers (once; idempotent)."""
    for name in ("uvicorn.access", "uvicorn.error", "responses_gateway"):
        target = logging.getLogger(name)
        if not any(isinstance(f, ScrubCredentials) for f in target.filters):
            target.addFilter(ScrubCredentials())


# -- per request --------------------------------------------------------------------------


class RequestContext:
    """ASGI middleware: binds the request id (Lambda's, from Mangum's context or the Lambda Web
    Adapter's ``x-amzn-lambda-context`` header, else a minted ``req_`` id) and, when tracing,
    the X-Ray trace header. Responses answer it in ``x-request-id``, as OpenAI does
    (:func:`responses_gateway.ids.request_id_header`).

    The adapter runs the app in its own process, so ``_X_AMZN_TRACE_ID`` is not updated per
    invocation there; it arrives as the ``x-amzn-trace-id`` header instead. Lambda sends one
    request at a time to an execution environment, so setting it process-wide is safe.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket" and otel_enabled():
                carrier = _carrier(scope["headers"])
                if carrier:  # each response on the socket continues the client's trace
                    token = trace_carrier.set(carrier)
                    try:
                        await self.app(scope, receive, send)
                    finally:
                        trace_carrier.reset(token)
                    return
            await self.app(scope, receive, send)
            return
        carried = trace_carrier.set(_carrier(scope["headers"])) if otel_enabled() else None
        try:
            await self._http(scope, receive, send)
        finally:
            if carried is not None:
                trace_carrier.reset(carried)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid: str | None = None
        context = scope.get("aws.context")
        if context is not None:
            rid = getattr(context, "aws_request_id", None)
        else:
            for name, value in scope["headers"]:
                if name == b"x-amzn-lambda-context":
                    with contextlib.suppress(ValueError, AttributeError):
                        rid = orjson.loads(value).get("request_id")
                elif name == b"x-amzn-trace-id" and tracing_enabled():
                    os.environ["_X_AMZN_TRACE_ID"] = value.decode("latin-1")
        # The responses the app builds answer it in x-request-id (request_id_header): set
        # there rather than by wrapping ``send``, which would cost a call per body message.
        token = request_id.set(rid or new_request_id())
        try:
            await self.app(scope, receive, send)
        finally:
            request_id.reset(token)


def _carrier(headers: list[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The W3C trace context headers of a request, if it sent any."""
    found = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers
             if name in (b"traceparent", b"tracestate")}
    return found if "traceparent" in found else None


def otel_enabled() -> bool:
    """Whether responses are traced with OpenTelemetry (an OTLP endpoint is configured)."""
    from responses_gateway import otel

    return otel.enabled()


# -- per response -------------------------------------------------------------------------


class ResponseMetrics:
    """One response's timings; reported once, when its job closes."""

    __slots__ = ("content", "counters", "done", "entry", "first_ms", "ledger", "model",
                 "reserved", "started", "started_at", "steps", "stored", "stream", "tenant",
                 "trace", "ttft_ms", "waiting")

    def __init__(self, response: str, model: str, *, stream: bool, content: Any = None,
                 tenant: str | None = None, ledger: UsageStore | None = None,
                 stored: bool = False, reserved: Any = None,
                 counters: dict[str, str] | None = None) -> None:
        self.tenant = tenant  # with ``ledger``: the response's usage is counted (account())
        self.ledger = ledger
        #: the ledger's counters its output items add to, by item type (UsageEntry.of)
        self.counters = counters
        self.reserved = reserved  # the tokens its key's limits reserved (store/usage.py)
        self.stored = stored
        self.entry: UsageEntry | None = None
        self.started = time.perf_counter()
        self.started_at = time.time()
        self.model = model
        self.stream = stream  # the log line's and metric's time to first token: streams only
        self.waiting = True  # until the first output (the dashboard's, for every response)
        self.ttft_ms: float | None = None
        self.first_ms: float | None = None
        #: the response's steps, each model turn and server tool call: [kind, name, start ms,
        #: duration ms (None while it runs), error (None: it went well)]; one list per step,
        #: never per chunk (responses/turns.py)
        self.steps: list[list[Any]] = []
        self.done = False
        self.content = content if _state["debug_content"] else None
        #: its OpenTelemetry spans (otel.py), when an OTLP endpoint is configured
        self.trace: Any = _open_trace(response, model, tenant, stream, self.content) \
            if otel_enabled() else None
        response_id.set(response)
        collector.response_opened()

    def first_content(self) -> None:
        """The first chunk that produced output (called once, by the job's event loop)."""
        self.waiting = False
        self.first_ms = (time.perf_counter() - self.started) * 1000
        if self.stream:
            self.ttft_ms = self.first_ms

    def step_opened(self, kind: str, name: str) -> int:
        """A model turn (``kind`` "model") or a tool call began: its index for
        :meth:`step_closed`. Past :data:`MAX_STEPS` steps none is kept (-1)."""
        if len(self.steps) >= MAX_STEPS:
            return -1
        self.steps.append([kind, name, round((time.perf_counter() - self.started) * 1000, 1),
                           None, None])
        return len(self.steps) - 1

    def turn_opened(self, backend_model: str | None) -> int:
        """A model turn began: its step in the timeline and, when it asks a backend
        (``backend_model``; None: nothing is generated), its span (otel.py). Returns the step
        for :meth:`turn_closed`."""
        if self.trace is not None and backend_model is not None:
            self.trace.turn_started(backend_model)
        return self.step_opened("model", self.model)

    def turn_closed(self, step: int, usage: dict[str, Any] | None,
                    finish_reason: str | None) -> None:
        """The model turn's last chunk came (``usage``: the upstream's, Chat shaped)."""
        if self.trace is not None:
            self.trace.turn_ended(usage, finish_reason)
        self.step_closed(step)

    def call_opened(self, call: Any) -> int:
        """The turn loop runs a server tool's call: its step and span. Returns the step for
        :meth:`call_closed`."""
        spec = call.spec
        name = f"{spec.namespace}.{spec.name}" if spec.namespace else spec.name
        if self.trace is not None:
            self.trace.tool_started(call, name)
        return self.step_opened(spec.kind, name)

    def call_closed(self, call: Any, step: int, items: list[dict[str, Any]],
                    cut: str | None) -> None:
        """The call's run ended with ``items``; ``cut``: what stopped it (an exception's code,
        ``cancelled``). A cut call's step stays open: the response's ending closes it
        (:meth:`timing`), as it does a deadline's."""
        if cut is None:
            self.step_closed(step, failure_of(items))
        if self.trace is not None:
            self.trace.tool_ended(call, items, cut)

    def step_closed(self, index: int, error: str | None = None,
                    at_ms: float | None = None) -> None:
        """The step ended (``error``: how it failed), now or ``at_ms`` after the start."""
        if 0 <= index < len(self.steps) and self.steps[index][3] is None:
            step = self.steps[index]
            end = (time.perf_counter() - self.started) * 1000 if at_ms is None else at_ms
            step[3] = round(max(0.0, end - step[2]), 1)
            step[4] = error

    def timing(self, duration_ms: float, ending: str | None) -> dict[str, Any]:
        """What the admin views show of where the time went: when the job began (epoch
        seconds), its first output and its end (ms after), and its steps, any still open
        closed as the response ended (``ending``: its error code, ``cancelled``, …)."""
        for index, step in enumerate(self.steps):
            if step[3] is None:
                self.step_closed(index, ending or "unfinished", duration_ms)
        return {
            "started_at": round(self.started_at, 3),
            "first_output_ms": None if self.first_ms is None else round(self.first_ms, 1),
            "duration_ms": round(duration_ms, 1),
            "steps": [{"type": k, "name": n, "start_ms": t, "duration_ms": d, "error": e}
                      for k, n, t, d, e in self.steps],
        }

    def finish(self, response: dict[str, Any], first: Any = None) -> None:
        """Log and (in Lambda) emit this response's figures; later calls do nothing.

        ``first`` is the job's first-chunk future: a response that never started because the
        upstream refused it before any output ends as that refusal's error.
        """
        if self.done:
            return
        self.done = True
        collector.response_closed()
        duration_ms = (time.perf_counter() - self.started) * 1000
        status = response.get("status") or ""
        error_type = None
        if status == "failed":
            error_type = (response.get("error") or {}).get("code") or "failed"
        elif status not in TERMINAL_STATUSES:
            status, error_type = _unstarted(first)
        usage = response.get("usage") or {}
        upstream_status, reason = _failure(response, first)
        settings: Settings | None = _state.get("settings")
        name = _key_name(settings, self.tenant)
        summary: dict[str, Any] = {
            "id": response.get("id") or response_id.get(),
            "api_key_id": self.tenant,
            "api_key_name": name,
            "model": self.model,
            "backend": settings.route(self.model).backend if settings is not None else None,
            "status": status,
            "duration_ms": round(duration_ms, 1),
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 1),
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "upstream_status": upstream_status,
            "error_type": error_type,
            "error_message": reason,
            "request_id": request_id.get(),
        }
        if self.content is not None:
            summary["request"] = self.content
            summary["output"] = response.get("output")
        if self.trace is not None:
            self.trace.finish(response, status, error_type, reason, self.ttft_ms)
        # A failure is logged here, once, with its reason (the backends redact their keys).
        level = logging.WARNING if status in ("failed", "rejected") else logging.INFO
        logger.log(level, "response finished", extra={"response": summary})
        if self.ledger is not None and self.tenant is not None:
            from responses_gateway.store.usage import UsageEntry

            ending = _ending(response, status, error_type, reason)
            self.entry = UsageEntry.of(response, tenant=self.tenant, model=self.model,
                                       status=status, stored=self.stored,
                                       counters=self.counters,
                                       timing=self.timing(duration_ms, (ending or {}).get(
                                           "code")),
                                       error=ending)
        if in_lambda() and not _truthy(os.environ.get("POWERTOOLS_METRICS_DISABLED")):
            try:
                _emit(self.model, self.ttft_ms, duration_ms, usage, error_type)
            except Exception:  # metrics must never fail a response
                logger.exception("could not emit metrics")


    async def account(self) -> None:
        """Count the finished response's usage in the ledger, once (store/usage.py); a failed
        write is retried in the background (store/bookkeeping.py), never the response's
        failure. In Lambda its spans are exported first: the invocation may be frozen once the
        response is sent."""
        trace, self.trace = (self.trace, None) if self.done else (None, self.trace)
        if trace is not None and in_lambda():
            import asyncio

            from responses_gateway import otel

            await asyncio.to_thread(otel.flush)
        entry, self.entry = self.entry, None
        if entry is None or self.ledger is None:
            return
        from responses_gateway.store.usage import settlement

        settings: Settings | None = _state.get("settings")
        entry, windows = settlement(entry, settings.limits if settings is not None else None,
                                    self.reserved)
        from responses_gateway.store import bookkeeping

        await bookkeeping.record(self.ledger, entry, windows)  # retried off the path if need be


def failure_of(items: list[dict[str, Any]]) -> str | None:
    """How a call's items say it failed (an item ``failed`` or ``incomplete``, or carrying an
    ``error``: an MCP server's), for its step in the timeline; None: it went well."""
    for item in items:
        error = item.get("error")
        if isinstance(error, dict):
            return str(error.get("code") or error.get("type") or error.get("message")
                       or "error")[:200]
        if error:  # an mcp_call's: the server's message
            return str(error)[:200]
        if item.get("status") in ("failed", "incomplete"):
            return str(item["status"])
    return None


def _open_trace(response: str, model: str, tenant: str | None, stream: bool,
                content: Any) -> Any:
    """The response's OpenTelemetry spans (otel.py), or None when they cannot be opened."""
    try:
        from responses_gateway.otel import ResponseTrace

        settings: Settings | None = _state.get("settings")
        backend = settings.route(model).backend if settings is not None else None
        return ResponseTrace(response, model, tenant=tenant,
                             key_name=_key_name(settings, tenant),
                             carrier=trace_carrier.get(), content=content, backend=backend,
                             stream=stream)
    except Exception:  # tracing must never fail a response
        logger.warning("could not open the response's trace", exc_info=True)
        return None


def key_name(tenant: str | None) -> str | None:
    """The name the tenant's key was given, under the settings the process runs with (the
    limits' refusal lines, limiter.py, show it beside the tenant id)."""
    return _key_name(_state.get("settings"), tenant)


def _key_name(settings: Settings | None, tenant: str | None) -> str | None:
    """The name the tenant's key was given (GATEWAY_API_KEYS' JSON form), if any."""
    if settings is None or tenant is None:
        return None
    from responses_gateway.tenants import names_by_tenant

    return names_by_tenant(settings.api_keys).get(tenant)


def _ending(response: dict[str, Any], status: str, error_type: str | None,
            reason: str | None) -> dict[str, Any] | None:
    """Why the response did not complete, for its log row: the error's code and message
    (failed, refused before any output), the reason it is incomplete, or how it was
    cancelled; None when it completed."""
    if status in ("failed", "rejected"):
        error = response.get("error") or {}
        code = error.get("code") or error_type or status
        message = error.get("message") or reason or ""
    elif status == "incomplete":
        code = (response.get("incomplete_details") or {}).get("reason") or "incomplete"
        message = {"max_output_tokens": "The response reached max_output_tokens.",
                   "content_filter": "The upstream's content filter stopped the response.",
                   }.get(code, "The response ended before it was complete.")
    elif status == "cancelled":
        code = "cancelled"
        message = ("Cancelled (POST /v1/responses/{id}/cancel) before it ended."
                   if response.get("background") else
                   "The client went away (disconnected or cancelled) before the response "
                   "ended; the gateway stopped its upstream request.")
    else:
        return None
    return {"code": code, "message": message[:MAX_ERROR_CHARS]}


def _unstarted(first: Any) -> tuple[str, str | None]:
    """Status and error type of a response that never reached a terminal state."""
    from responses_gateway.errors import GatewayError

    if first is not None and first.done() and not first.cancelled():
        exc = first.exception()
        if isinstance(exc, GatewayError):
            return "rejected", exc.code or exc.type or "upstream_error"
    return "cancelled", None


#: compiled (by ``re``'s cache) when a failure is first described: not at every cold start
_HTTP_STATUS = r"\(HTTP (\d{3})\)"


def _failure(response: dict[str, Any], first: Any) -> tuple[int | None, str | None]:
    """The upstream's HTTP status and the failure's reason, when the response failed.

    The status is the one the upstream answered when the message quotes it ("Upstream error
    (HTTP 401): ..."), else the one the gateway mapped it to.
    """
    from responses_gateway.errors import UpstreamError

    reason = (response.get("error") or {}).get("message")
    status = None
    if first is not None and first.done() and not first.cancelled():
        exc = first.exception()
        if isinstance(exc, UpstreamError):
            quoted = re.search(_HTTP_STATUS, exc.message)
            status = int(quoted.group(1)) if quoted else exc.status
        if exc is not None:
            reason = reason or str(exc)
    if reason is not None and status is None and (quoted := re.search(_HTTP_STATUS, reason)):
        status = int(quoted.group(1))
    return status, reason


def _emit(
    model: str,
    ttft_ms: float | None,
    duration_ms: float,
    usage: dict[str, Any],
    error_type: str | None,
) -> None:
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    metrics = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
    _dimension_set(metrics, Model=model or "unknown")
    if ttft_ms is not None:
        metrics.add_metric("TimeToFirstToken", MetricUnit.Milliseconds, ttft_ms)
    metrics.add_metric("Duration", MetricUnit.Milliseconds, duration_ms)
    metrics.add_metric("InputTokens", MetricUnit.Count, usage.get("input_tokens") or 0)
    metrics.add_metric("OutputTokens", MetricUnit.Count, usage.get("output_tokens") or 0)
    metrics.add_metric("Responses", MetricUnit.Count, 1)
    metrics.flush_metrics()
    if error_type:
        errors = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
        _dimension_set(errors, ErrorType=error_type)
        errors.add_metric("Errors", MetricUnit.Count, 1)
        errors.flush_metrics()


def _dimension_set(metrics: Any, **dimensions: str) -> None:
    """A second dimension set beside the service-only one (so alarms see every model)."""
    add_set = getattr(metrics, "add_dimensions", None)
    if add_set is not None:
        add_set(service=SERVICE, **dimensions)
    else:  # older Powertools: one set, the service dimension plus these
        for name, value in dimensions.items():
            metrics.add_dimension(name=name, value=value)


# -- tracing ------------------------------------------------------------------------------


@cache
def tracing_enabled() -> bool:
    """In Lambda (not ``sam local``) with ``POWERTOOLS_TRACE_DISABLED`` unset or false."""
    return (
        bool(os.environ.get("LAMBDA_TASK_ROOT"))
        and in_lambda()
        and not os.environ.get("AWS_SAM_LOCAL")
        and not _truthy(os.environ.get("POWERTOOLS_TRACE_DISABLED"))
    )


@cache
def _recorder() -> Any:
    from aws_lambda_powertools import Tracer

    return Tracer(service=SERVICE, auto_patch=False).provider


@contextlib.asynccontextmanager
async def subsegment(name: str, **annotations: str) -> AsyncIterator[None]:
    """A subsegment of the invocation's segment around the block (nothing when not tracing)."""
    sub = _begin(name, annotations) if tracing_enabled() else None
    try:
        yield
    except Exception as exc:  # not CancelledError / GeneratorExit: a client going away
        if sub is not None:
            sub.add_fault_flag()
            sub.put_metadata("error", repr(exc), SERVICE)
        raise
    finally:
        if sub is not None:
            _end(sub)


def _begin(name: str, annotations: dict[str, str]) -> Any:
    try:
        from aws_xray_sdk.core.models.subsegment import Subsegment

        recorder = _recorder()
        segment = recorder.current_segment()
        if segment is None or not getattr(segment, "sampled", False):
            return None
        sub = Subsegment(name, "remote", segment)
        segment.add_subsegment(sub)
        for key, value in annotations.items():
            sub.put_annotation(key, value)
        return sub
    except Exception:  # tracing must never fail a response
        logger.debug("could not open subsegment %s", name, exc_info=True)
        return None


def _end(sub: Any) -> None:
    try:
        sub.close()
        _recorder().stream_subsegments()
    except Exception:
        logger.debug("could not close subsegment", exc_info=True)

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

Nothing here runs per chunk: a job records its first content once and reports at its end.
Powertools and the X-Ray SDK are imported only when enabled, so local starts stay fast.
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
from responses_gateway.store.base import Store
from responses_gateway.store.wrapper import StoreWrapper, role_calls

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from responses_gateway.settings import Settings
    from responses_gateway.store.usage import UsageEntry, UsageStore

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "responses-gateway"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ResponsesGateway"

response_id: ContextVar[str | None] = ContextVar("response_id", default=None)
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
_CREDENTIAL_QUERY = re.compile(
    r"(?i)([?&;](?:[a-z0-9_.-]*(?:key|token|secret|password|passwd|auth[a-z]*|sig|signature|"
    r"credential[s]?|session)))=[^&;#\s\"']*"
)


# The user and password of a URL (``https://user:key@host/v1``).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s\"']+@")


def scrub(text: str) -> str:
    """``text`` with the values of credential-like query parameters and the user and password
    of URLs replaced."""
    if "@" in text:
        text = _URL_USERINFO.sub(r"\1***@", text)
    if "=" not in text:
        return text
    return _CREDENTIAL_QUERY.sub(r"\1=[redacted]", text)


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
            await self.app(scope, receive, send)
            return
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


# -- per response -------------------------------------------------------------------------


class ResponseMetrics:
    """One response's timings; reported once, when its job closes."""

    __slots__ = ("content", "counters", "done", "entry", "ledger", "model", "reserved",
                 "started", "stored", "tenant", "ttft_ms", "waiting")

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
        self.model = model
        self.waiting = stream  # time to first token is measured for streams only
        self.ttft_ms: float | None = None
        self.done = False
        self.content = content if _state["debug_content"] else None
        response_id.set(response)
        collector.response_opened()

    def first_content(self) -> None:
        """The first chunk that produced output (called once, by the job's event loop)."""
        self.waiting = False
        self.ttft_ms = (time.perf_counter() - self.started) * 1000

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
        summary: dict[str, Any] = {
            "id": response.get("id") or response_id.get(),
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
        # A failure is logged here, once, with its reason (the backends redact their keys).
        level = logging.WARNING if status in ("failed", "rejected") else logging.INFO
        logger.log(level, "response finished", extra={"response": summary})
        if self.ledger is not None and self.tenant is not None:
            from responses_gateway.store.usage import UsageEntry

            self.entry = UsageEntry.of(response, tenant=self.tenant, model=self.model,
                                       status=status, stored=self.stored,
                                       counters=self.counters)
        if in_lambda() and not _truthy(os.environ.get("POWERTOOLS_METRICS_DISABLED")):
            try:
                _emit(self.model, self.ttft_ms, duration_ms, usage, error_type)
            except Exception:  # metrics must never fail a response
                logger.exception("could not emit metrics")


    async def account(self) -> None:
        """Count the finished response's usage in the ledger, once (store/usage.py); a failed
        write is retried in the background (store/bookkeeping.py), never the response's
        failure."""
        entry, self.entry = self.entry, None
        if entry is None or self.ledger is None:
            return
        from responses_gateway.store.usage import settlement

        settings: Settings | None = _state.get("settings")
        entry, windows = settlement(entry, settings.limits if settings is not None else None,
                                    self.reserved)
        from responses_gateway.store import bookkeeping

        await bookkeeping.record(self.ledger, entry, windows)  # retried off the path if need be


def _unstarted(first: Any) -> tuple[str, str | None]:
    """Status and error type of a response that never reached a terminal state."""
    from responses_gateway.errors import GatewayError

    if first is not None and first.done() and not first.cancelled():
        exc = first.exception()
        if isinstance(exc, GatewayError):
            return "rejected", exc.code or exc.type or "upstream_error"
    return "cancelled", None


_HTTP_STATUS = re.compile(r"\(HTTP (\d{3})\)")


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
            quoted = _HTTP_STATUS.search(exc.message)
            status = int(quoted.group(1)) if quoted else exc.status
        if exc is not None:
            reason = reason or str(exc)
    if reason is not None and status is None and (quoted := _HTTP_STATUS.search(reason)):
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


def trace_store(store: Store) -> Store:
    """The store, every call a subsegment when tracing (else the store itself)."""
    return _TracedStore(store) if tracing_enabled() else store


class _TracedStore(StoreWrapper):
    """Every store call (each role's coroutines, conversation calls included) in a
    ``store.<method>`` subsegment; the rest handed on as is."""

    passed_through = ("limits", "check_input_items", "usage_store", "health_store", "aclose")
    around_each = role_calls(but=passed_through)

    def _around(self, name: str) -> contextlib.AbstractAsyncContextManager[None]:
        return subsegment(f"store.{name}")

"""OpenTelemetry traces of responses, exported over OTLP/HTTP when an endpoint is configured
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, the SDK's own
variables, with its ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_BSP_*`` and
the rest). Langfuse, Phoenix, Jaeger, Grafana Tempo and X-Ray (through the ADOT collector) all
read them. The SDK and its exporter are imported only then (observability.py asks
:func:`enabled` first): without an endpoint nothing here loads.

One trace per response, after the OpenTelemetry GenAI semantic conventions:

- the response: a SERVER span ``chat {model}`` (``gen_ai.operation.name`` ``chat``,
  ``gen_ai.request.model``, ``gen_ai.response.id``, ``gen_ai.response.model``,
  ``gen_ai.response.finish_reasons``, ``gen_ai.usage.input_tokens`` / ``output_tokens`` for
  the whole response, ``gen_ai.conversation.id``, ``error.type`` when it failed), and the
  gateway's own: the tenant id (``gateway.api_key_id``: never a key) and the key's name
  (``gateway.api_key_name``, when GATEWAY_API_KEYS names it), status, time to first token,
  the backend;
- each model turn: a CLIENT span ``model_turn {n}``, from the upstream request to its last
  chunk, with the backend model, its finish reason and its own tokens under ``gateway.turn.*``
  (not ``gen_ai.usage.*``: a tracing UI that sums generations would count them twice);
- each call the gateway runs: an INTERNAL span ``execute_tool {name}``
  (``gen_ai.operation.name`` ``execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.type``
  ``extension``, ``gen_ai.tool.call.id``), marked failed when its item failed.

A client's W3C ``traceparent`` (and ``tracestate``) header makes the response span a child of
the client's span: the response shows up inside the client's own trace. Prompts and outputs
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``) are
attributes only when ``GATEWAY_DEBUG_LOG_CONTENT`` is on.

Spans leave through a batch processor (a thread); in Lambda the job flushes it before the
invocation can end (:func:`flush`, awaited off the event loop). When something else (the ADOT
Lambda layer's auto-instrumentation) already installed an SDK tracer provider, its provider
and exporters are used instead of a second one.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import orjson

logger = logging.getLogger("responses_gateway.otel")

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_state: dict[str, Any] = {}
#: what ``gen_ai.provider.name`` says, by backend kind
_PROVIDERS = {"bedrock": "aws.bedrock", "openai": "openai"}


def enabled() -> bool:
    """Whether an OTLP endpoint is configured (read once per process)."""
    found = _state.get("enabled")
    if found is None:
        found = _state["enabled"] = (
            any(os.environ.get(name) for name in _ENDPOINTS)
            and (os.environ.get("OTEL_SDK_DISABLED") or "").strip().lower() != "true"
            and (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower() != "none")
    return bool(found)


def endpoint() -> str | None:
    """Where traces go (the start line's view; no headers, which may hold a key)."""
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/traces" if base else None


def _tracer() -> Any:
    """The gateway's tracer, its provider built on first use."""
    tracer = _state.get("tracer")
    if tracer is not None:
        return tracer
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # nobody installed one (no ADOT layer)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        service = (os.environ.get("OTEL_SERVICE_NAME")
                   or os.environ.get("POWERTOOLS_SERVICE_NAME") or "responses-gateway")
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _state["provider"] = provider
    from responses_gateway import __name__ as package

    tracer = _state["tracer"] = provider.get_tracer(package)
    return tracer


def flush(timeout_millis: int = 5000) -> None:
    """Export every ended span now (blocking: run it off the event loop)."""
    provider = _state.get("provider")
    if provider is not None:
        try:
            provider.force_flush(timeout_millis)
        except Exception:  # tracing must never fail a response
            logger.debug("could not flush spans", exc_info=True)


def _parent(carrier: dict[str, str] | None) -> Any:
    """The client's context from its ``traceparent`` / ``tracestate`` headers, or None."""
    if not carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


class ResponseTrace:
    """One response's spans; every method swallows its own failures (never a response's)."""

    __slots__ = ("content", "span", "tools", "turn", "turns")

    def __init__(self, response_id: str, model: str, *, tenant: str | None,
                 key_name: str | None = None, carrier: dict[str, str] | None, content: Any,
                 backend: str | None, stream: bool) -> None:
        from opentelemetry.trace import SpanKind

        self.turn: Any = None
        self.turns = 0
        self.tools: dict[str, Any] = {}
        self.content = content
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.response.id": response_id,
            "gateway.stream": stream,
        }
        if backend:
            attributes["gen_ai.provider.name"] = _PROVIDERS.get(backend, backend)
            attributes["gateway.backend"] = backend
        if tenant:
            attributes["gateway.api_key_id"] = tenant  # the digest label, never the key
        if key_name:
            attributes["gateway.api_key_name"] = key_name  # GATEWAY_API_KEYS' name for it
        self.span = _tracer().start_span(f"chat {model}".strip(), context=_parent(carrier),
                                         kind=SpanKind.SERVER, attributes=attributes)

    def _child(self, name: str, kind: str, attributes: dict[str, Any]) -> Any:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        return _tracer().start_span(name, context=trace.set_span_in_context(self.span),
                                    kind=getattr(SpanKind, kind), attributes=attributes)

    # -- model turns ------------------------------------------------------------------------

    def turn_started(self, model: str) -> None:
        """The upstream request of a model turn was sent."""
        try:
            self.turn_ended(None, None)  # (one that ended without saying so)
            self.turns += 1
            self.turn = self._child(f"model_turn {self.turns}", "CLIENT", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                "gateway.turn.index": self.turns})
        except Exception:
            logger.debug("could not open a turn span", exc_info=True)

    def turn_ended(self, usage: dict[str, Any] | None, finish_reason: str | None,
                   error: str | None = None) -> None:
        """The model turn's last chunk arrived (``usage``: the upstream's, Chat shaped)."""
        span, self.turn = self.turn, None
        if span is None:
            return
        try:
            if usage:
                span.set_attribute("gateway.turn.input_tokens",
                                   int(usage.get("prompt_tokens") or 0))
                span.set_attribute("gateway.turn.output_tokens",
                                   int(usage.get("completion_tokens") or 0))
            if finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
            if error:
                _failed(span, error)
            span.end()
        except Exception:
            logger.debug("could not close a turn span", exc_info=True)

    # -- tool calls -------------------------------------------------------------------------

    def tool_started(self, call: Any, name: str) -> None:
        """``name``: the tool's, its namespace first (``server.tool``)."""
        try:
            spec = call.spec
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.type": "extension", "gen_ai.tool.call.id": call.call_id,
                "gateway.tool.kind": spec.kind}
            if self.content is not None:
                attributes["gen_ai.tool.call.arguments"] = call.arguments
            self.tools[call.call_id] = self._child(f"execute_tool {name}", "INTERNAL",
                                                   attributes)
        except Exception:
            logger.debug("could not open a tool span", exc_info=True)

    def tool_ended(self, call: Any, items: list[dict[str, Any]], error: str | None) -> None:
        span = self.tools.pop(call.call_id, None)
        if span is None:
            return
        try:
            status = next((i.get("status") for i in reversed(items) if i.get("status")), None)
            if status:
                span.set_attribute("gateway.tool.status", status)
            if error is None and status in ("failed", "incomplete"):
                error = f"tool_call_{status}"
            if error:
                _failed(span, error)
            span.end()
        except Exception:
            logger.debug("could not close a tool span", exc_info=True)

    # -- the end ----------------------------------------------------------------------------

    def finish(self, response: dict[str, Any], status: str, error_type: str | None,
               reason: str | None, ttft_ms: float | None) -> None:
        """Close what is still open, then the response span with its totals."""
        try:
            self.turn_ended(None, None, error_type)
            for call_id in list(self.tools):
                span = self.tools.pop(call_id)
                _failed(span, error_type or "cancelled")
                span.end()
            span = self.span
            usage = response.get("usage") or {}
            attributes: dict[str, Any] = {"gateway.status": status,
                                          "gateway.model_turns": self.turns}
            if response.get("model"):
                attributes["gen_ai.response.model"] = response["model"]
            if usage:
                attributes["gen_ai.usage.input_tokens"] = int(usage.get("input_tokens") or 0)
                attributes["gen_ai.usage.output_tokens"] = int(usage.get("output_tokens") or 0)
                cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
                if cached:
                    attributes["gen_ai.usage.cache_read.input_tokens"] = int(cached)
            reasons = _finish_reasons(response, status)
            if reasons:
                attributes["gen_ai.response.finish_reasons"] = reasons
            conversation = response.get("conversation")
            if isinstance(conversation, dict) and conversation.get("id"):
                attributes["gen_ai.conversation.id"] = conversation["id"]
            if ttft_ms is not None:
                attributes["gateway.time_to_first_token_ms"] = round(ttft_ms, 1)
            if self.content is not None:
                attributes["gen_ai.input.messages"] = _json(
                    self.content.get("messages") if isinstance(self.content, dict)
                    else self.content)
                attributes["gen_ai.output.messages"] = _json(response.get("output") or [])
            span.set_attributes(attributes)
            if error_type is not None:
                _failed(span, error_type, reason)
            span.end(end_time=time.time_ns())
        except Exception:
            logger.debug("could not close the response span", exc_info=True)


def _finish_reasons(response: dict[str, Any], status: str) -> list[str]:
    """Why the response stopped, as one word (OpenAI's ``incomplete_details.reason``)."""
    if status == "completed":
        return ["stop"]
    if status == "incomplete":
        return [((response.get("incomplete_details") or {}).get("reason")) or "incomplete"]
    return [status] if status else []


def _failed(span: Any, error_type: str, message: str | None = None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message or error_type))

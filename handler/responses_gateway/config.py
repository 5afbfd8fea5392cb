"""Configuration, read once from environment variables (every one is listed in README.md).

Secrets (upstream key, gateway API keys) may be given directly or, in AWS, by reference to
Secrets Manager / SSM (``*_SECRET_ARN`` / ``*_PARAMETER``); see :mod:`responses_gateway.secrets`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from responses_gateway.backends.registry import KINDS as BACKEND_KINDS
from responses_gateway.tools.hosted import policy_named


@dataclass(frozen=True, slots=True)
class Route:
    """Where one client-visible model goes: which backend, under which backend model name."""

    backend: str  # a registered kind (backends/registry.py): "openai", "bedrock"
    model: str


@dataclass(frozen=True)
class Settings:
    backend: str = "openai"
    upstream_url: str = "http://127.0.0.1:11434/v1"
    upstream_api_key: str | None = field(default=None, repr=False)  # secrets stay out of logs
    upstream_dialect: str = "auto"  # backends/dialects.py: auto, generic, openai, llama.cpp, …
    model_map: dict[str, str] = field(default_factory=dict)
    # Context windows by model name (GATEWAY_CONTEXT_WINDOWS): what truncation fits into.
    context_windows: dict[str, int] = field(default_factory=dict)
    connect_timeout: float = 10.0
    read_timeout: float = 300.0
    # Longest a response may run, start to terminal event: a function URL's Lambda stops at
    # 900 s (ApiTimeout), and the terminal write needs a moment before that. 0: no limit.
    max_response_seconds: float = 870.0
    max_retries: int = 2
    max_body_bytes: int = 20 * 1024 * 1024
    store: str = "sqlite:gateway.db"
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    retention_days: int = 30
    seal_key: str | None = field(default=None, repr=False)
    reasoning_input: str | None = None  # reasoning sent back upstream: None, "reasoning_content"
    keepalive_seconds: float = 15.0
    stream_grace_seconds: float = 0.0
    ws_idle_seconds: float = 600.0  # a WebSocket with nothing running closes after this
    ws_max_connection_seconds: float = 3600.0  # a WebSocket's age limit (OpenAI's 60 minutes)
    models: tuple[str, ...] = ()
    bedrock_region: str | None = None
    bedrock_endpoint_url: str | None = None
    bedrock_media_budget_bytes: int = 20 * 1024 * 1024  # one request's image/file downloads
    worker_function: str | None = None  # async-invoked worker Lambda (AWS); unset: in-process
    lease_seconds: float = 30.0
    queued_seconds: float | None = None  # how long a background response may wait for a worker
    debug_log_content: bool = False
    hosted_tools: str = "omit"  # tools/hosted.py: "omit" (leave out for the model) or "reject"
    # Remote MCP servers (tools/mcp.py): hosts allowed although private, each call's time
    # limit (also bounds connecting and listing), the largest tool output kept.
    mcp_allow_hosts: tuple[str, ...] = ()
    mcp_call_timeout: float = 60.0
    mcp_max_output_bytes: int = 1024 * 1024

    def route(self, model: str) -> Route:
        """The backend and backend model for a client model name.

        A model map value may name a backend, ``bedrock:anthropic.claude-...`` or
        ``openai:gpt-4o``; without a prefix it uses ``GATEWAY_BACKEND``.
        """
        target = self.model_map.get(model, model)
        prefix, sep, rest = target.partition(":")
        if sep and prefix in BACKEND_KINDS and model in self.model_map:
            return Route(prefix, rest)
        return Route(self.backend, target)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str, default: str | None = None) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else default

        def secret(name: str) -> str | None:
            """The variable, else the Secrets Manager / SSM value it references (AWS)."""
            value = get(name)
            if value is None and (get(name + "_SECRET_ARN") or get(name + "_PARAMETER")):
                from responses_gateway.secrets import resolve

                value = resolve(name, env)
            return value

        backend = (get("GATEWAY_BACKEND", "openai") or "openai").lower()
        if backend not in BACKEND_KINDS:
            raise ValueError(f"GATEWAY_BACKEND must be one of {', '.join(map(repr, BACKEND_KINDS))}"
                             f", not {backend!r}")
        models = tuple(m.strip() for m in (get("GATEWAY_MODELS") or "").split(",") if m.strip())
        return cls(
            backend=backend,
            upstream_url=(get("GATEWAY_UPSTREAM_URL", cls.upstream_url) or "").rstrip("/"),
            upstream_api_key=secret("GATEWAY_UPSTREAM_API_KEY"),
            upstream_dialect=_dialect(get("GATEWAY_UPSTREAM_DIALECT", "auto") or "auto"),
            model_map=parse_model_map(get("GATEWAY_MODEL_MAP") or ""),
            context_windows=parse_windows(get("GATEWAY_CONTEXT_WINDOWS") or ""),
            connect_timeout=float(get("GATEWAY_CONNECT_TIMEOUT", "10") or 10),
            read_timeout=float(get("GATEWAY_READ_TIMEOUT", "300") or 300),
            max_response_seconds=float(
                get("GATEWAY_MAX_RESPONSE_SECONDS", str(cls.max_response_seconds)) or 0
            ),
            max_retries=int(get("GATEWAY_MAX_RETRIES", "2") or 2),
            max_body_bytes=int(get("GATEWAY_MAX_BODY_BYTES", str(cls.max_body_bytes)) or 0),
            store=get("GATEWAY_STORE", cls.store) or cls.store,
            api_keys=tuple(
                k.strip() for k in (secret("GATEWAY_API_KEYS") or "").split(",") if k.strip()
            ),
            retention_days=int(get("GATEWAY_RETENTION_DAYS", "30") or 30),
            seal_key=secret("GATEWAY_SEAL_KEY"),
            reasoning_input=get("GATEWAY_REASONING_INPUT"),
            keepalive_seconds=float(get("GATEWAY_KEEPALIVE_SECONDS", "15") or 15),
            stream_grace_seconds=float(get("GATEWAY_STREAM_GRACE_SECONDS", "0") or 0),
            ws_idle_seconds=float(get("GATEWAY_WS_IDLE_SECONDS", "600") or 0),
            ws_max_connection_seconds=float(get("GATEWAY_WS_MAX_CONNECTION_SECONDS", "3600")
                                            or 3600),
            models=models,
            bedrock_region=get("GATEWAY_BEDROCK_REGION") or get("AWS_REGION"),
            bedrock_endpoint_url=get("GATEWAY_BEDROCK_ENDPOINT_URL"),
            bedrock_media_budget_bytes=int(get("GATEWAY_BEDROCK_MEDIA_BUDGET_BYTES")
                                           or cls.bedrock_media_budget_bytes),
            worker_function=get("GATEWAY_WORKER_FUNCTION"),
            lease_seconds=float(get("GATEWAY_LEASE_SECONDS", "30") or 30),
            queued_seconds=float(q) if (q := get("GATEWAY_QUEUED_SECONDS")) else None,
            debug_log_content=(get("GATEWAY_DEBUG_LOG_CONTENT", "false") or "").lower()
            in ("1", "true", "yes"),
            hosted_tools=policy_named(get("GATEWAY_HOSTED_TOOLS", "omit") or "omit"),
            mcp_allow_hosts=tuple(
                h.strip() for h in (get("GATEWAY_MCP_ALLOW_HOSTS") or "").split(",") if h.strip()
            ),
            mcp_call_timeout=float(get("GATEWAY_MCP_CALL_TIMEOUT", "60") or 60),
            mcp_max_output_bytes=int(get("GATEWAY_MCP_MAX_OUTPUT_BYTES")
                                     or cls.mcp_max_output_bytes),
        )


def _dialect(name: str) -> str:
    """``auto`` or a known dialect name (a typo fails at startup, not on the first request)."""
    name = name.strip().lower()
    if name != "auto":
        from responses_gateway.backends.dialects import dialect_named

        dialect_named(name)
    return name


def parse_windows(text: str) -> dict[str, int]:
    """``GATEWAY_CONTEXT_WINDOWS``: ``model=tokens,...`` (a model name may hold ``=`` only
    before the last one)."""
    windows: dict[str, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.strip().rpartition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(
                f"GATEWAY_CONTEXT_WINDOWS: {part.strip()!r} is not model=tokens (a positive "
                "integer)")
        windows[name.strip()] = int(value)
    return windows


def parse_model_map(text: str) -> dict[str, str]:
    """``{"a": "b"}`` JSON, or ``a=b,c=d``."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        value = orjson.loads(text)
        if not isinstance(value, dict):
            raise ValueError("GATEWAY_MODEL_MAP must be a JSON object")
        return {str(k): str(v) for k, v in value.items()}
    pairs = (part.split("=", 1) for part in text.split(",") if part.strip())
    return {k.strip(): v.strip() for k, v in pairs}

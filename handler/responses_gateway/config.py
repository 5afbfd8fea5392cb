"""Configuration, read once from environment variables (every one is listed in README.md).

Secrets (upstream key, gateway API keys) may be given directly or, in AWS, by reference to
Secrets Manager / SSM (``*_SECRET_ARN`` / ``*_PARAMETER``); see :mod:`responses_gateway.secrets`.

The settings object itself is settings.py (a leaf every layer may import); this module reads
it from the environment and checks each value with its feature's own format (routes, limits,
Knowledge Bases, search providers, image backends), so it sits above those features and
imports their parsers, lazily where they are heavy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import orjson

from responses_gateway.backends.kinds import KINDS as BACKEND_KINDS
from responses_gateway.settings import Route, Settings
from responses_gateway.tools.hosted import policy_named
from responses_gateway.tools.web_search.providers import (
    provider_lacks,
    provider_named,
    provider_url,
)

__all__ = ["Route", "Settings", "SettingsError", "settings_from_env"]

if TYPE_CHECKING:
    from responses_gateway.backends.route_config import Routes
    from responses_gateway.key_limits import Limits

T = TypeVar("T", int, float)


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Every setting read from ``env`` (default: the environment) and checked."""
    cls = Settings
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
    seconds = partial(_number, get, float, "a number of seconds")
    count = partial(_number, get, int, "a whole number")
    return cls(
        backend=backend,
        upstream_url=_upstream_url(get("GATEWAY_UPSTREAM_URL") or cls.upstream_url),
        upstream_api_key=secret("GATEWAY_UPSTREAM_API_KEY"),
        upstream_dialect=_parsed("GATEWAY_UPSTREAM_DIALECT", _dialect,
                                 get("GATEWAY_UPSTREAM_DIALECT") or "auto"),
        model_map=_parsed("GATEWAY_MODEL_MAP", parse_model_map,
                          get("GATEWAY_MODEL_MAP") or ""),
        routes=_parsed("GATEWAY_ROUTES", partial(_routes, backend, secret),
                       get("GATEWAY_ROUTES") or ""),
        context_windows=_parsed("GATEWAY_CONTEXT_WINDOWS", parse_windows,
                                get("GATEWAY_CONTEXT_WINDOWS") or ""),
        vision_models=tuple(m.strip() for m in (get("GATEWAY_VISION_MODELS") or "").split(",")
                            if m.strip()),
        connect_timeout=seconds("GATEWAY_CONNECT_TIMEOUT", cls.connect_timeout),
        read_timeout=seconds("GATEWAY_READ_TIMEOUT", cls.read_timeout),
        max_response_seconds=seconds("GATEWAY_MAX_RESPONSE_SECONDS",
                                     cls.max_response_seconds),
        max_retries=count("GATEWAY_MAX_RETRIES", cls.max_retries),
        max_body_bytes=count("GATEWAY_MAX_BODY_BYTES", cls.max_body_bytes),
        store=_store(get("GATEWAY_STORE") or cls.store),
        **_keys(secret),
        limits=_parsed("GATEWAY_LIMITS", _limits, get("GATEWAY_LIMITS") or "")
        if get("GATEWAY_LIMITS") else None,
        retention_days=count("GATEWAY_RETENTION_DAYS", cls.retention_days),
        seal_key=secret("GATEWAY_SEAL_KEY"),
        reasoning_input=_choice(get, "GATEWAY_REASONING_INPUT", ("reasoning_content",)),
        keepalive_seconds=seconds("GATEWAY_KEEPALIVE_SECONDS", cls.keepalive_seconds),
        stream_grace_seconds=seconds("GATEWAY_STREAM_GRACE_SECONDS",
                                     cls.stream_grace_seconds),
        ws_idle_seconds=seconds("GATEWAY_WS_IDLE_SECONDS", cls.ws_idle_seconds),
        ws_max_connection_seconds=seconds("GATEWAY_WS_MAX_CONNECTION_SECONDS",
                                          cls.ws_max_connection_seconds),
        ws_max_active_responses=count("GATEWAY_WS_MAX_ACTIVE_RESPONSES",
                                      cls.ws_max_active_responses),
        ws_max_streams=count("GATEWAY_WS_MAX_STREAMS", cls.ws_max_streams),
        ws_max_remembered_bytes=count("GATEWAY_WS_MAX_REMEMBERED_BYTES",
                                      cls.ws_max_remembered_bytes),
        models=models,
        bedrock_region=get("GATEWAY_BEDROCK_REGION") or get("AWS_REGION"),
        bedrock_endpoint_url=get("GATEWAY_BEDROCK_ENDPOINT_URL"),
        bedrock_media_budget_bytes=count("GATEWAY_BEDROCK_MEDIA_BUDGET_BYTES",
                                         cls.bedrock_media_budget_bytes),
        worker_function=get("GATEWAY_WORKER_FUNCTION"),
        lease_seconds=seconds("GATEWAY_LEASE_SECONDS", cls.lease_seconds),
        queued_seconds=seconds("GATEWAY_QUEUED_SECONDS", None),
        debug_log_content=_switch(get, "GATEWAY_DEBUG_LOG_CONTENT"),
        log_level=_choice(get, "GATEWAY_LOG_LEVEL", LOG_LEVELS) or cls.log_level,
        hosted_tools=_parsed("GATEWAY_HOSTED_TOOLS", policy_named,
                             get("GATEWAY_HOSTED_TOOLS") or "omit"),
        mcp_allow_hosts=tuple(
            h.strip() for h in (get("GATEWAY_MCP_ALLOW_HOSTS") or "").split(",") if h.strip()
        ),
        mcp_call_timeout=seconds("GATEWAY_MCP_CALL_TIMEOUT", cls.mcp_call_timeout),
        mcp_max_output_bytes=count("GATEWAY_MCP_MAX_OUTPUT_BYTES", cls.mcp_max_output_bytes),
        image_backend=_image_backend(get("GATEWAY_IMAGE_BACKEND"), get("GATEWAY_STORE"),
                                     get("GATEWAY_IMAGE_BUCKET")),
        image_model=get("GATEWAY_IMAGE_MODEL"),
        image_url=_parsed("GATEWAY_IMAGE_URL", _http_url, get("GATEWAY_IMAGE_URL") or "")
        or None,
        image_api_key=secret("GATEWAY_IMAGE_API_KEY"),
        image_timeout=seconds("GATEWAY_IMAGE_TIMEOUT", cls.image_timeout),
        image_max_bytes=count("GATEWAY_IMAGE_MAX_BYTES", cls.image_max_bytes),
        image_seed=count("GATEWAY_IMAGE_SEED", None),
        image_bucket=get("GATEWAY_IMAGE_BUCKET"),
        **_web_search(get, secret),
        web_search_timeout=seconds("GATEWAY_WEB_SEARCH_TIMEOUT", cls.web_search_timeout),
        web_search_max_answer_bytes=count("GATEWAY_WEB_SEARCH_MAX_ANSWER_BYTES",
                                          cls.web_search_max_answer_bytes),
        web_page_max_bytes=count("GATEWAY_WEB_PAGE_MAX_BYTES", cls.web_page_max_bytes),
        web_page_timeout=seconds("GATEWAY_WEB_PAGE_TIMEOUT", cls.web_page_timeout),
        web_allow_hosts=tuple(
            h.strip() for h in (get("GATEWAY_WEB_ALLOW_HOSTS") or "").split(",") if h.strip()
        ),
        max_tool_calls=count("GATEWAY_MAX_TOOL_CALLS", cls.max_tool_calls),
        max_tool_turns=count("GATEWAY_MAX_TOOL_TURNS", cls.max_tool_turns),
        max_tool_output_bytes=count("GATEWAY_MAX_TOOL_OUTPUT_BYTES",
                                    cls.max_tool_output_bytes),
        max_conversation_items=count("GATEWAY_MAX_CONVERSATION_ITEMS",
                                     cls.max_conversation_items),
        max_conversation_bytes=count("GATEWAY_MAX_CONVERSATION_BYTES",
                                     cls.max_conversation_bytes),
        max_stored_response_bytes=count("GATEWAY_MAX_STORED_RESPONSE_BYTES",
                                        cls.max_stored_response_bytes),
        max_compaction_calls=count("GATEWAY_MAX_COMPACTION_CALLS", cls.max_compaction_calls),
        max_compaction_input_bytes=count("GATEWAY_MAX_COMPACTION_INPUT_BYTES",
                                         cls.max_compaction_input_bytes),
        files_bucket=get("GATEWAY_FILES_BUCKET"),
        vector_bucket=get("GATEWAY_VECTOR_BUCKET"),
        max_file_bytes=count("GATEWAY_MAX_FILE_BYTES", cls.max_file_bytes),
        max_tenant_file_bytes=count("GATEWAY_MAX_TENANT_FILE_BYTES",
                                    cls.max_tenant_file_bytes),
        max_upload_part_bytes=count("GATEWAY_MAX_UPLOAD_PART_BYTES",
                                    cls.max_upload_part_bytes),
        max_vector_store_files=count("GATEWAY_MAX_VECTOR_STORE_FILES",
                                     cls.max_vector_store_files),
        max_name_chars=count("GATEWAY_MAX_NAME_CHARS", cls.max_name_chars),
        max_description_chars=count("GATEWAY_MAX_DESCRIPTION_CHARS",
                                    cls.max_description_chars),
        file_sweep_seconds=seconds("GATEWAY_FILE_SWEEP_SECONDS", cls.file_sweep_seconds),
        vector_cache_bytes=count("GATEWAY_VECTOR_CACHE_BYTES", cls.vector_cache_bytes),
        embedding_url=_upstream_url(get("GATEWAY_EMBEDDING_URL"))
        if get("GATEWAY_EMBEDDING_URL") else None,
        embedding_api_key=secret("GATEWAY_EMBEDDING_API_KEY"),
        embedding_model=_embedding_model(get("GATEWAY_EMBEDDING_MODEL"),
                                         get("GATEWAY_EMBEDDING_BACKEND")),
        embedding_backend=_choice(get, "GATEWAY_EMBEDDING_BACKEND", ("openai", "bedrock"))
        or cls.embedding_backend,
        knowledge_bases=_parsed("GATEWAY_KNOWLEDGE_BASES", _knowledge_bases,
                                get("GATEWAY_KNOWLEDGE_BASES") or "{}"),
        embedding_batch=max(1, count("GATEWAY_EMBEDDING_BATCH", cls.embedding_batch)),
        max_search_queries=max(1, count("GATEWAY_MAX_SEARCH_QUERIES", cls.max_search_queries)),
        max_search_embeddings=max(1, count("GATEWAY_MAX_SEARCH_EMBEDDINGS",
                                           cls.max_search_embeddings)),
        max_filter_values=count("GATEWAY_MAX_FILTER_VALUES", cls.max_filter_values),
        max_filter_conditions=max(1, count("GATEWAY_MAX_FILTER_CONDITIONS",
                                           cls.max_filter_conditions)),
        max_filter_depth=count("GATEWAY_MAX_FILTER_DEPTH", cls.max_filter_depth),
        extract_timeout=seconds("GATEWAY_EXTRACT_TIMEOUT", cls.extract_timeout),
        max_file_tokens=max(1, count("GATEWAY_MAX_FILE_TOKENS", cls.max_file_tokens)),
        embedding_retries=count("GATEWAY_EMBEDDING_RETRIES", cls.embedding_retries),
        embedding_backoff_seconds=seconds("GATEWAY_EMBEDDING_BACKOFF_SECONDS",
                                          cls.embedding_backoff_seconds),
    )


class SettingsError(ValueError):
    """A setting that cannot be used. Its message is one line that names the variable and
    what it accepts: ``responses-gateway serve`` prints it and exits with status 2."""


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_Get = Callable[[str], "str | None"]


def _number(get: _Get, kind: type[T], what: str, name: str, default: T) -> T:
    """A non-negative number; unset or empty is ``default``."""
    text = get(name)
    if text is None:
        return default
    try:
        value = kind(text.strip())
    except ValueError:
        value = None
    if value is None or value < 0 or value != value:  # (NaN)
        raise SettingsError(f"{name} must be {what} (0 or more), not {text!r}")
    return value


def _switch(get: _Get, name: str) -> bool:
    text = (get(name) or "false").strip().lower()
    if text not in _TRUE + _FALSE:
        raise SettingsError(f"{name} must be true or false, not {get(name)!r}")
    return text in _TRUE


def _choice(get: _Get, name: str, allowed: tuple[str, ...]) -> str | None:
    """One of ``allowed`` (any case), or None when unset."""
    text = get(name)
    if text is None:
        return None
    if text.strip().lower() not in allowed:
        accepts = ", ".join(allowed) if len(allowed) > 1 else f"{allowed[0]} (or unset)"
        raise SettingsError(f"{name} must be {'one of ' * (len(allowed) > 1)}{accepts}, "
                            f"not {text!r}")
    return text.strip().lower()


def _parsed(name: str, parse: Callable[[str], T], text: str) -> T:
    """``parse(text)``, its ValueError made a one-line :class:`SettingsError` naming ``name``."""
    try:
        return parse(text)
    except SettingsError:
        raise
    except ValueError as exc:
        reason = " ".join(str(exc).split())
        raise SettingsError(reason if reason.startswith(name) else f"{name}: {reason}") from None


def _limits(text: str) -> Limits:
    """GATEWAY_LIMITS (key_limits.py, imported only when it is set)."""
    from responses_gateway.key_limits import parse_limits

    return parse_limits(text)


def _upstream_url(text: str) -> str:
    """An http(s) URL with a host (a URL without a scheme fails every request later)."""
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        from responses_gateway.net.policy import shown_url

        raise SettingsError(
            "GATEWAY_UPSTREAM_URL must be an http:// or https:// URL including the path up to "
            f"/chat/completions (like http://127.0.0.1:11434/v1), not {shown_url(url)!r}")
    return url


def _knowledge_bases(text: str) -> dict[str, Any]:
    """GATEWAY_KNOWLEDGE_BASES (vectors/knowledge_bases.py, imported only when it is set)."""
    if text == "{}":
        return {}
    from responses_gateway.vectors.knowledge_bases import parse_knowledge_bases

    return parse_knowledge_bases(text)


def _embedding_model(model: str | None, backend: str | None) -> str:
    """The embedding model; on Bedrock (Titan Text Embeddings v2 by default) one whose request
    shape the gateway speaks (vectors/bedrock_embeddings.py)."""
    if (backend or "").strip().lower() != "bedrock":
        return model or Settings.embedding_model
    from responses_gateway.vectors.bedrock_embeddings import FAMILIES, family_of

    model = model or "amazon.titan-embed-text-v2:0"
    if family_of(model) is None:
        raise SettingsError(f"GATEWAY_EMBEDDING_MODEL must be a Bedrock embedding model of "
                            f"{' or '.join(FAMILIES)} when GATEWAY_EMBEDDING_BACKEND is "
                            f"bedrock, not {model!r}")
    return model


def _image_backend(name: str | None, store: str | None, bucket: str | None) -> str | None:
    """``bedrock`` or ``openai`` (tools/image_generation/backends/), or None: unset. With
    DynamoDB the images need an S3 bucket (a DynamoDB item holds 400 KB)."""
    if name is None:
        return None
    from responses_gateway.tools.image_generation.backends import KINDS as IMAGE_KINDS

    name = name.strip().lower()
    if name not in IMAGE_KINDS:
        raise SettingsError(f"GATEWAY_IMAGE_BACKEND must be one of {', '.join(IMAGE_KINDS)} "
                            f"(or unset), not {name!r}")
    if (store or "").startswith("dynamodb:") and not bucket:
        raise SettingsError("GATEWAY_IMAGE_BUCKET must name an S3 bucket for generated images "
                            "when GATEWAY_IMAGE_BACKEND is set and GATEWAY_STORE is dynamodb")
    return name


def _keys(secret: Callable[[str], str | None]) -> dict[str, tuple[str, ...]]:
    """The tenants' keys and the admin keys. A key in both lists is refused here: the admin
    routes take no tenant key (api/auth.py), so it would silently turn them off for that key
    (and for all of them when every admin key is shared). The error names the position in
    GATEWAY_ADMIN_KEYS, never the key."""
    def listed(name: str) -> tuple[str, ...]:
        return tuple(k.strip() for k in (secret(name) or "").split(",") if k.strip())

    api_keys, admin_keys = listed("GATEWAY_API_KEYS"), listed("GATEWAY_ADMIN_KEYS")
    shared = [n for n, key in enumerate(admin_keys, 1) if key in api_keys]
    if shared:
        which = ", ".join(_ordinal(n) for n in shared)
        raise SettingsError(
            f"GATEWAY_ADMIN_KEYS and GATEWAY_API_KEYS share a key (the {which} of "
            f"GATEWAY_ADMIN_KEYS): an admin key must not be an API key, or the admin routes "
            "refuse it; give the admin routes keys of their own")
    return {"api_keys": api_keys, "admin_keys": admin_keys}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _web_search(get: Callable[[str], str | None],
                secret: Callable[[str], str | None]) -> dict[str, str | None]:
    """The search provider, its URL and key; a provider lacking what it needs (SearXNG its
    URL, the others their key) refused here, naming the variable, not on every search."""
    url = _parsed("GATEWAY_WEB_SEARCH_URL", provider_url,
                  get("GATEWAY_WEB_SEARCH_URL") or "") or None
    key = secret("GATEWAY_WEB_SEARCH_API_KEY")
    name = get("GATEWAY_WEB_SEARCH_PROVIDER")
    if name is not None:
        name = _parsed("GATEWAY_WEB_SEARCH_PROVIDER", provider_named, name)
        lacks = provider_lacks(name, url, key)
        if lacks is not None:
            raise SettingsError(lacks)
    return {"web_search_provider": name, "web_search_url": url, "web_search_api_key": key}


def _http_url(text: str) -> str:
    """An http(s) URL with a host, or empty."""
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if url and (parts.scheme not in ("http", "https") or not parts.hostname):
        raise ValueError(f"must be an http:// or https:// URL (like http://127.0.0.1:8000/v1), "
                         f"not {url!r}")
    return url


def _store(text: str) -> str:
    kind, _, target = text.strip().partition(":")
    if kind not in ("sqlite", "dynamodb") or (kind == "dynamodb" and not target):
        raise SettingsError(
            f"GATEWAY_STORE must be sqlite:PATH or dynamodb:TABLE, not {text!r}")
    return text.strip()


def _dialect(name: str) -> str:
    """``auto`` or a known dialect name (a typo fails at startup, not on the first request)."""
    name = name.strip().lower()
    if name != "auto":
        from responses_gateway.backends.dialects import dialect_named

        dialect_named(name)
    return name


def _routes(default_kind: str, secret: Callable[[str], str | None], text: str) -> Routes | None:
    """``GATEWAY_ROUTES`` parsed (backends/route_config.py), or None when unset."""
    if not text.strip():
        return None
    from responses_gateway.backends.route_config import parse_routes

    return parse_routes(text, default_kind=default_kind, secret=secret) or None


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
    accepts = 'a JSON object ({"fast": "llama3.2"}) or name=model,name=model'
    if text.startswith("{"):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"GATEWAY_MODEL_MAP must be {accepts}: invalid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise ValueError(f"GATEWAY_MODEL_MAP must be {accepts}")
        return {str(k): str(v) for k, v in value.items()}
    mapped: dict[str, str] = {}
    for part in filter(str.strip, text.split(",")):
        name, sep, target = part.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ValueError(f"GATEWAY_MODEL_MAP must be {accepts}; {part.strip()!r} is not "
                             "name=model")
        mapped[name.strip()] = target.strip()
    return mapped

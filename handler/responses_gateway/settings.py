"""The gateway's settings as one frozen object: what every layer reads.

Any layer may import it; how the settings are read from the environment and checked, with
every feature's format, is config.py's (``settings_from_env``), which sits above the features
whose formats it knows. The one import here that runs up the layering is
``backends/kinds.py``, a table with no imports of its own: :meth:`Settings.route` tells a
backend prefix in the model map (``bedrock:…``) from a model name with a colon by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from responses_gateway.backends.kinds import KINDS as BACKEND_KINDS
from responses_gateway.backends.kinds import ROUTE_PREFIX


@dataclass(frozen=True, slots=True)
class Route:
    """Where one client-visible model goes: which backend, under which backend model name."""

    backend: str  # a registered kind (backends/kinds.py): "openai", "bedrock"; or "route:NAME"
    model: str


@dataclass(frozen=True, eq=False)
class Settings:
    """Every setting, read once at start; frozen, so no request can change another's.

    Compared and hashed by identity (``eq=False``): nothing compares two settings objects, a
    field-wise hash fails on the dict fields anyway, and generating both methods over every
    field was a few milliseconds of each cold start.
    """

    backend: str = "openai"
    upstream_url: str = "http://127.0.0.1:11434/v1"
    upstream_api_key: str | None = field(default=None, repr=False)  # secrets stay out of logs
    upstream_dialect: str = "auto"  # backends/dialects.py: auto, generic, openai, llama.cpp, …
    model_map: dict[str, str] = field(default_factory=dict)
    # Client models served by ordered deployments with fallback (GATEWAY_ROUTES; backends/
    # route_config.py parses, backends/router.py runs them). None: no routes.
    routes: Any = None  # backends/route_config.py Routes (GATEWAY_ROUTES), or None
    # Context windows by model name (GATEWAY_CONTEXT_WINDOWS): what truncation fits into.
    context_windows: dict[str, int] = field(default_factory=dict)
    # Chat models that read images (GATEWAY_VISION_MODELS: names or * patterns, !name for no),
    # over what the backend knows: a generated image goes back to them as an image part.
    vision_models: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    read_timeout: float = 300.0
    # Longest a response may run, start to terminal event: a function URL's Lambda stops at
    # 900 s (ApiTimeout), and the terminal write needs a moment before that. 0: no limit.
    max_response_seconds: float = 870.0
    max_retries: int = 2
    max_body_bytes: int = 20 * 1024 * 1024
    store: str = "sqlite:gateway.db"
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    # Admin keys (GATEWAY_ADMIN_KEYS): the admin routes and the dashboard, never a tenant's.
    admin_keys: tuple[str, ...] = field(default=(), repr=False)
    limits: Any = None  # key_limits.py Limits: per-key limits and budgets (GATEWAY_LIMITS)
    retention_days: int = 30
    seal_key: str | None = field(default=None, repr=False)
    reasoning_input: str | None = None  # reasoning sent back upstream: None, "reasoning_content"
    keepalive_seconds: float = 15.0
    stream_grace_seconds: float = 0.0
    ws_idle_seconds: float = 600.0  # a WebSocket with nothing running closes after this
    ws_max_connection_seconds: float = 3600.0  # a WebSocket's age limit (OpenAI's 60 minutes)
    # What one WebSocket may hold (api/ws_session.py): responses running or queued (OpenAI: 16),
    # named streams (OpenAI: 32), bytes of remembered responses (each stream's most recent).
    ws_max_active_responses: int = 16
    ws_max_streams: int = 32
    ws_max_remembered_bytes: int = 64 * 1024 * 1024
    models: tuple[str, ...] = ()
    bedrock_region: str | None = None
    bedrock_endpoint_url: str | None = None
    bedrock_media_budget_bytes: int = 20 * 1024 * 1024  # one request's image/file downloads
    worker_function: str | None = None  # async-invoked worker Lambda (AWS); unset: in-process
    lease_seconds: float = 30.0
    queued_seconds: float | None = None  # how long a background response may wait for a worker
    debug_log_content: bool = False
    log_level: str = "info"  # GATEWAY_LOG_LEVEL, for the gateway's own log lines
    hosted_tools: str = "omit"  # tools/hosted.py: "omit" (leave out for the model) or "reject"
    # Remote MCP servers (tools/mcp.py): hosts allowed although private, each call's time
    # limit (also bounds connecting and listing), the largest tool output kept.
    mcp_allow_hosts: tuple[str, ...] = ()
    mcp_call_timeout: float = 60.0
    mcp_max_output_bytes: int = 1024 * 1024
    # image_generation run by the gateway (tools/image_generation/): the image backend (unset:
    # image_generation stays a hosted tool), its model, an OpenAI-compatible server's base URL
    # and key, each image's time limit, a fixed seed (Bedrock); the S3 bucket of stored images
    # (GATEWAY_STORE=dynamodb; locally they sit beside the SQLite file: store/blobs.py).
    image_backend: str | None = None
    image_model: str | None = None
    image_url: str | None = None
    image_api_key: str | None = field(default=None, repr=False)
    image_timeout: float = 120.0
    # bytes of one generated image (decoded): a larger one is a failed call, the response
    # goes on; below GATEWAY_MAX_STORED_RESPONSE_BYTES, which counts its base64 too
    image_max_bytes: int = 20 * 1024 * 1024
    image_seed: int | None = None
    image_bucket: str | None = None
    # web_search run by the gateway (tools/web_search/): the search provider (unset: web_search
    # stays a hosted tool, GATEWAY_HOSTED_TOOLS), its base URL and key, each search's time
    # limit and its answer's size; a live page's byte and time limits, hosts allowed although
    # private.
    web_search_provider: str | None = None
    web_search_url: str | None = None
    web_search_api_key: str | None = field(default=None, repr=False)
    web_search_timeout: float = 15.0
    web_search_max_answer_bytes: int = 2 * 1024 * 1024
    web_page_max_bytes: int = 2 * 1024 * 1024
    web_page_timeout: float = 15.0
    web_allow_hosts: tuple[str, ...] = ()
    # Work the gateway's own tools may do in one response (responses/turns.py), whatever
    # max_tool_calls says: calls run, model turns with tool calls, bytes of tool output kept.
    max_tool_calls: int = 128
    max_tool_turns: int = 32
    max_tool_output_bytes: int = 8 * 1024 * 1024
    # What the store holds (store/base.py StoreLimits): items and JSON bytes per conversation
    # (every turn reads all of one), the input or Response object of one stored response.
    max_conversation_items: int = 10_000
    max_conversation_bytes: int = 64 * 1024 * 1024
    max_stored_response_bytes: int = 32 * 1024 * 1024
    # What one compaction may cost (responses/fitting/compaction_bounds.py; 0: no limit):
    # summarising calls upstream, bytes of the items it reads.
    max_compaction_calls: int = 16
    max_compaction_input_bytes: int = 20 * 1024 * 1024
    # Files and vector stores (files/, vectors/): the bucket of file bytes in AWS, the largest
    # file and a tenant's total, files per vector store, the embedding model and its endpoint.
    files_bucket: str | None = None
    vector_bucket: str | None = None  # S3 Vectors bucket of the vector stores in AWS
    max_file_bytes: int = 512 * 1024 * 1024
    max_tenant_file_bytes: int = 10 * 1024 * 1024 * 1024
    max_upload_part_bytes: int = 64 * 1024 * 1024  # one part of the Uploads API (OpenAI's)
    max_vector_store_files: int = 10_000
    # Client strings OpenAI documents no bound for (files/limits.py): a vector store's or a
    # file's name, an Upload's mime_type (Assistants' name bound), a vector store description
    # (Assistants' description bound), an object id given to look up.
    max_name_chars: int = 256
    max_description_chars: int = 512
    # How often a running gateway removes expired Files and Uploads with their bytes (local
    # store; 0: only when touched). files/service.py, api/app.py.
    file_sweep_seconds: float = 300.0
    # bytes of searched stores' vectors the local engine keeps in memory (vectors/matrix_cache)
    vector_cache_bytes: int = 256 * 1024 * 1024
    embedding_url: str | None = None  # OpenAI-compatible /v1 base; unset: GATEWAY_UPSTREAM_URL
    embedding_api_key: str | None = field(default=None, repr=False)
    embedding_model: str = "text-embedding-3-small"
    embedding_backend: str = "openai"  # or "bedrock": InvokeModel (vectors/bedrock_embeddings)
    # vector store id -> Bedrock Knowledge Base, served read-only (vectors/knowledge_bases.py)
    knowledge_bases: dict[str, Any] = field(default_factory=dict)
    embedding_batch: int = 64
    # What one vector store search may ask (vectors/service.py, vectors/filters.py): queries
    # (file_search's cap), query embeddings in flight in this process, a filter's values in
    # its in / nin lists, its comparison and compound filters, their nesting.
    max_search_queries: int = 5
    max_search_embeddings: int = 16
    max_filter_values: int = 1000
    max_filter_conditions: int = 64
    max_filter_depth: int = 8
    # Text extraction of a file attached to a vector store (vectors/extract.py): seconds in
    # its child process, and tokens a file may hold (OpenAI's 5,000,000).
    extract_timeout: float = 120.0
    max_file_tokens: int = 5_000_000
    # a failed embeddings call (connection refused or dropped, timeout, 408/429/5xx) is tried
    # again this many times, the first after this many seconds, each next after twice as long
    embedding_retries: int = 3
    embedding_backoff_seconds: float = 0.5

    def route(self, model: str) -> Route:
        """The backend and backend model for a client model name.

        A model map value may name a backend, ``bedrock:anthropic.claude-...`` or
        ``openai:gpt-4o``; without a prefix it uses ``GATEWAY_BACKEND``. A routed model
        (``GATEWAY_ROUTES``, which wins over the map) goes to its router, ``route:NAME``,
        under its first deployment's model (the router sends each deployment its own).
        """
        routes = self.routes
        if routes is not None and model in routes.routes:
            return Route(ROUTE_PREFIX + model, routes.routes[model][0].model)
        target = self.model_map.get(model, model)
        prefix, sep, rest = target.partition(":")
        if sep and prefix in BACKEND_KINDS and model in self.model_map:
            return Route(prefix, rest)
        return Route(self.backend, target)

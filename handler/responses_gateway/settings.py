"""The gateway's settings as one frozen object: what every layer reads, and where each comes from.

Each setting is declared once, as a field of :class:`Settings` made by its section
(``UPSTREAM("GATEWAY_UPSTREAM_URL", default, parse=..., doc=...)``): its variable, its
default, the format config.py parses it with (and a floor), its one-line doc (the README's
configuration table is generated from these: ``scripts/settings_table.py``), whether it may
come from Secrets Manager / SSM, and the template.yaml parameter that sets it (or why there is
none). Adding a setting is adding one field here; a new format is also one parser in config.py.

Any layer may import this module; reading the environment and checking each value with its
feature's own format is config.py's (``settings_from_env``), which sits above the features
whose formats it knows. The one import here that runs up the layering is ``backends/kinds.py``,
a table with no imports of its own: :meth:`Settings.route` tells a backend prefix in the model
map (``bedrock:…``) from a model name with a colon by it. (``records.py``, the records' bases,
imports nothing of the gateway's.)
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.kinds import KINDS as BACKEND_KINDS
from responses_gateway.backends.kinds import ROUTE_PREFIX
from responses_gateway.records import Value

if TYPE_CHECKING:  # their modules load only when the setting is used (cold start)
    from responses_gateway.backends.route_config import Routes
    from responses_gateway.key_limits import Limits
    from responses_gateway.prices import Prices

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: why template.yaml has no parameter for a secret: its ``_SECRET_ARN`` comes from SecretArn
FROM_SECRET = "a secret: from the stack's secret (its _SECRET_ARN, SecretArn)"


class Route(Value):
    """Where one client-visible model goes: which backend, under which backend model name (a
    frozen value: records.py)."""

    __slots__ = ("backend", "model")

    backend: str  # a registered kind (backends/kinds.py): "openai", "bedrock"; or "route:NAME"
    model: str

    def __init__(self, backend: str, model: str) -> None:
        object.__setattr__(self, "backend", backend)
        object.__setattr__(self, "model", model)


class ApiKeys(tuple[str, ...]):
    """``GATEWAY_API_KEYS``: the keys, a tuple as every reader wants them, and ``names``, the
    name each was given in the JSON form (key to name; empty for the comma list). Names show
    beside tenant ids (tenants.py); a plain tuple of keys is as good where none is named."""

    names: dict[str, str]

    def __new__(cls, keys: Any = (), names: dict[str, str] | None = None) -> ApiKeys:
        made = super().__new__(cls, keys)
        made.names = dict(names or {})
        return made

    @classmethod
    def named(cls, names: dict[str, str]) -> ApiKeys:
        """From ``{name: key}`` (the JSON form's shape)."""
        return cls(tuple(names.values()), {key: name for name, key in names.items()})


class Setting:
    """How one field of :class:`Settings` is read, documented and deployed, and its default
    (read-only by convention; a plain class, not a dataclass: this module is on every cold
    start)."""

    __slots__ = ("choices", "default", "doc", "env", "floor", "not_parameter", "parameter",
                 "parse", "secret", "section", "shown")

    def __init__(self, env: str, section: str, doc: str, parse: str = "text",
                 floor: int | None = None, choices: tuple[str, ...] = (), secret: bool = False,
                 parameter: str | None = None, not_parameter: str | None = None,
                 shown: str | None = None, default: Any = None) -> None:
        self.env = env  # its environment variable
        self.default = default  # the field's default (a dict one is copied per Settings)
        self.section = section  # the feature it belongs to (a Section's key)
        self.doc = doc  # one line: the README table's meaning column
        self.parse = parse  # the format config.py reads it with (config.FORMATS)
        self.floor = floor  # a value below it is raised to it (a count that must be >= 1)
        self.choices = choices  # the values of a ``parse="choice"`` setting
        # May come from Secrets Manager / SSM (``<env>_SECRET_ARN`` / ``<env>_PARAMETER``);
        # kept out of the settings' repr.
        self.secret = secret
        self.parameter = parameter  # the template.yaml parameter that sets it
        self.not_parameter = not_parameter  # else why template.yaml has none
        self.shown = shown  # the README's default, when not the default itself

    def __repr__(self) -> str:
        return f"Setting({self.env!r}, section={self.section!r}, parse={self.parse!r})"


class Section:
    """A per-feature group of settings; calling it declares one (a field of :class:`Settings`)."""

    __slots__ = ("key", "title")

    def __init__(self, key: str, title: str) -> None:
        self.key = key
        self.title = title  # the README heading of its table

    def __call__(self, env: str, default: Any, *, doc: str, secret: bool = False,
                 **how: Any) -> Any:
        """A field of :class:`Settings` with ``default``, read from ``env`` as ``how`` says
        (the other arguments of :class:`Setting`)."""
        return Setting(env, self.key, doc, secret=secret, default=default, **how)


UPSTREAM = Section("upstream", "Upstream and models")
BEDROCK = Section("bedrock", "Bedrock")
RESPONSES = Section("responses", "Responses: time, size, background")
TENANTS = Section("tenants", "Keys, tenants and limits")
STORE = Section("store", "Store and conversations")
TOOLS = Section("tools", "Tools")
MCP = Section("mcp", "Remote MCP servers")
WEB_SEARCH = Section("web_search", "Web search (the web_search tool)")
IMAGE_GENERATION = Section("image_generation", "Image generation (the image_generation tool)")
FILES = Section("files", "Files and Uploads")
VECTOR_STORES = Section("vector_stores", "Vector stores and file_search")
CODE = Section("code", "Code execution (code_interpreter, hosted shell, Containers API)")
WEBSOCKET = Section("websocket", "WebSocket mode")
OBSERVABILITY = Section("observability", "Logs")
#: in the README's order
SECTIONS = (UPSTREAM, BEDROCK, RESPONSES, TENANTS, STORE, TOOLS, MCP, WEB_SEARCH,
            IMAGE_GENERATION, FILES, VECTOR_STORES, CODE, WEBSOCKET, OBSERVABILITY)


class Settings:
    """Every setting, read once at start; frozen, so no request can change another's.

    Built with keywords only (``Settings(store="sqlite:g.db")``; an unnamed field keeps its
    default, a dict one a fresh copy), shown without its secrets, compared and hashed by
    identity (nothing compares two settings objects); :meth:`replace` is
    ``dataclasses.replace``'s stand-in. What ``@dataclass(frozen=True, eq=False)`` made it,
    written out once for every field: generating a dataclass's ``__init__`` and ``__repr__``
    over ~100 fields was ~5 ms of each cold start.
    """

    # -- upstream --------------------------------------------------------------------------------
    backend: str = UPSTREAM(
        "GATEWAY_BACKEND", "openai", parse="backend", parameter="Backend",
        doc="default backend: `openai` (any Chat Completions server) or `bedrock`")
    upstream_url: str = UPSTREAM(
        "GATEWAY_UPSTREAM_URL", "http://127.0.0.1:11434/v1", parse="url", parameter="UpstreamUrl",
        doc="base URL of the Chat Completions server, including `/v1`")
    upstream_api_key: str | None = UPSTREAM(
        "GATEWAY_UPSTREAM_API_KEY", None, secret=True, not_parameter=FROM_SECRET,
        doc="bearer key sent upstream")
    upstream_dialect: str = UPSTREAM(
        "GATEWAY_UPSTREAM_DIALECT", "auto", parse="dialect", parameter="UpstreamDialect",
        doc=("how requests are shaped for the upstream server: `auto` (from the URL, then `GET "
             "/models`), or `generic`, `openai`, `azure`, `llama.cpp`, `llama-cpp-python`, "
             "`vllm`, `sglang`, `ollama`, `lmstudio`, `tgi`, `litellm`, `openrouter`, `groq`, "
             "`deepseek`, `mistral`, `together`, `fireworks` "
             "([docs/upstreams.md](docs/upstreams.md))"))
    model_map: dict[str, str] = UPSTREAM(
        "GATEWAY_MODEL_MAP", {}, parse="model_map", parameter="ModelMap",
        doc=("client model name → backend model, JSON (`{\"fast\": \"llama3.2\"}`) or `a=b,c=d`; a "
             "value may name the backend: "
             "`claude=bedrock:anthropic.claude-sonnet-4-20250514-v1:0`. Unmapped names pass "
             "through"))
    routes: Routes | None = UPSTREAM(
        "GATEWAY_ROUTES", None, parse="routes", parameter="Routes", shown="empty",
        doc=("routed models: client model name → ordered deployments (backend, model, optional "
             "`weight`, `region`/`endpoint_url` for Bedrock, `url`/`api_key` (a variable's "
             "name)/`dialect` for OpenAI-compatible), as JSON or a JSON file's path; fallback "
             "to the next on a connect error, timeout, 429 or 5xx before any output, a "
             "cool-down for a deployment that keeps failing (`cooldown_after`, "
             "`cooldown_seconds`). The serving deployment is the `x-gateway-deployment` header "
             "of non-streamed responses ([docs/routing.md](docs/routing.md))"))
    vision_models: tuple[str, ...] = UPSTREAM(
        "GATEWAY_VISION_MODELS", (), parse="names", parameter="VisionModels",
        doc=("chat models that read images: client or backend model names, `*` patterns, "
             "`!name` for one that does not (the first match wins), comma-separated. A "
             "generated image goes back to them as an image part, to others as a text note. "
             "Unlisted: the backend's word (Bedrock's vision models: Claude 3 and later but 3.5"
             " Haiku, Nova Lite/Pro/Premier/2 Lite, Llama 3.2 11B/90B, Llama 4, Pixtral), else "
             "a note ([docs/image_generation.md](docs/image_generation.md))"))
    context_windows: dict[str, int] = UPSTREAM(
        "GATEWAY_CONTEXT_WINDOWS", {}, parse="context_windows", parameter="ContextWindows",
        doc=("context windows in tokens, `model=tokens,...` (client or backend model name): "
             "what `truncation` fits into and `context_length_exceeded` checks. Wins over what "
             "the backend reports (`/models` `max_model_len`/`n_ctx`, Bedrock model families) "
             "([docs/compaction.md](docs/compaction.md))"))
    models: tuple[str, ...] = UPSTREAM(
        "GATEWAY_MODELS", (), parse="names", parameter="Models",
        doc=("extra comma-separated model names listed by `GET /v1/models`. The list holds "
             "these and the mapped names, then the default backend's own models (the upstream's"
             " `GET /models`; Bedrock's foundation models and inference profiles), read at most"
             " every 5 minutes"))
    connect_timeout: float = UPSTREAM(
        "GATEWAY_CONNECT_TIMEOUT", 10.0, parse="seconds", parameter="ConnectTimeout",
        doc="seconds to connect upstream")
    read_timeout: float = UPSTREAM(
        "GATEWAY_READ_TIMEOUT", 300.0, parse="seconds", parameter="ReadTimeout",
        doc="seconds of upstream silence before the response fails")
    max_retries: int = UPSTREAM(
        "GATEWAY_MAX_RETRIES", 2, parse="count", parameter="MaxRetries",
        doc=("retries on connect errors, 408, 429, 502/503/504/529 and 500s that do not say the"
             " request was invalid, only before any output. A 400/422 naming a parameter the "
             "upstream does not support is sent once more without it, whatever this says "
             "([docs/upstreams.md](docs/upstreams.md))"))
    reasoning_input: str | None = UPSTREAM(
        "GATEWAY_REASONING_INPUT", None, parse="choice", choices=("reasoning_content",),
        parameter="ReasoningInput",
        doc=("send earlier reasoning back to OpenAI-compatible upstreams: unset drops it, "
             "`reasoning_content` sends `reasoning_content` + `reasoning_details`"))

    # -- bedrock ---------------------------------------------------------------------------------
    bedrock_region: str | None = BEDROCK(
        "GATEWAY_BEDROCK_REGION", None, parse="bedrock_region", parameter="BedrockRegion",
        shown="`AWS_REGION`", doc="Bedrock region")
    bedrock_endpoint_url: str | None = BEDROCK(
        "GATEWAY_BEDROCK_ENDPOINT_URL", None, not_parameter="local Bedrock stand-ins only",
        doc="Bedrock runtime endpoint override (tests, VPC endpoints)")
    bedrock_media_budget_bytes: int = BEDROCK(
        "GATEWAY_BEDROCK_MEDIA_BUDGET_BYTES", 20 * 1024 * 1024, parse="count",
        not_parameter="an internal limit; its default fits Lambda memory",
        doc=("most bytes the gateway downloads for one Bedrock request's image and file URLs "
             "together (four at a time; each also capped at Bedrock's 3.75 MB per image, 4.5 MB"
             " per document); a request over it is a 400"))

    # -- responses -------------------------------------------------------------------------------
    max_body_bytes: int = RESPONSES(
        "GATEWAY_MAX_BODY_BYTES", 20 * 1024 * 1024, parse="count",
        not_parameter="function URLs cap request bodies at 6 MB anyway",
        doc="largest request body accepted (413 above it)")
    max_response_seconds: float = RESPONSES(
        "GATEWAY_MAX_RESPONSE_SECONDS", 870.0, parse="seconds", parameter="MaxResponseSeconds",
        doc=("longest a response may run (keep-alives do not extend it), counted from the "
             "create's arrival; it then ends `failed` with its partial output kept (a "
             "compaction before it: a 504 `response_timeout`). Below the 900 s a function URL's"
             " Lambda may run; `0` means no limit"))
    keepalive_seconds: float = RESPONSES(
        "GATEWAY_KEEPALIVE_SECONDS", 15.0, parse="seconds", parameter="KeepaliveSeconds",
        doc="SSE keep-alive comment after this much upstream silence")
    send_timeout_seconds: float = RESPONSES(
        "GATEWAY_SEND_TIMEOUT_SECONDS", 60.0, parse="seconds",
        not_parameter="in Lambda the function URL takes the stream, and API Gateway the "
                      "WebSocket's messages: no client's reading holds the function",
        doc=("longest one write to a client (an SSE batch, a WebSocket message) may wait for "
             "the client to read, besides the time the message before it takes to drain at "
             "16 KiB/s. A client that stops reading is then taken as gone, as on a disconnect: "
             "its responses end `cancelled` and the gateway lets go of them and their upstream "
             "requests. `0` means no limit"))
    stream_grace_seconds: float = RESPONSES(
        "GATEWAY_STREAM_GRACE_SECONDS", 0.0, parse="seconds",
        not_parameter="an internal tuning knob",
        doc=("how long a stream may wait for the upstream's first chunk before sending "
             "`response.created`. `0`: it leaves at once, and an upstream refusal ends the "
             "stream with `response.failed`. A grace period (say `0.5`) makes a refusal that "
             "comes within it a real HTTP error (429, 400), but holds `response.created` back "
             "until the upstream's first chunk"))
    worker_function: str | None = RESPONSES(
        "GATEWAY_WORKER_FUNCTION", None, not_parameter="set by the template: the worker function",
        doc="worker Lambda for background responses (set by the template); unset = in-process task")
    lease_seconds: float = RESPONSES(
        "GATEWAY_LEASE_SECONDS", 30.0, parse="seconds", parameter="LeaseSeconds",
        doc=("a background worker's lease; a response whose lease lapses is reported `failed`. "
             "Also a vector store file's ingestion lease: a lapsed one (its process stopped) is"
             " ingested again, looked for every half lease ([docs/files.md](docs/files.md))"))
    queued_seconds: float | None = RESPONSES(
        "GATEWAY_QUEUED_SECONDS", None, parse="seconds",
        not_parameter="default fits the worker's MaximumEventAgeInSeconds (300 s)",
        shown="2 x lease; `360` with a worker function",
        doc="how long a background response may wait for its worker before it is reported `failed`")
    seal_key: str | None = RESPONSES(
        "GATEWAY_SEAL_KEY", None, secret=True, not_parameter=FROM_SECRET,
        shown="random per process",
        doc=("secret that seals reasoning signatures and compaction summaries into "
             "`encrypted_content`; set it so blobs survive restarts and are valid across Lambda"
             " instances"))

    # -- tenants ---------------------------------------------------------------------------------
    api_keys: tuple[str, ...] = TENANTS(
        "GATEWAY_API_KEYS", (), parse="api_keys", secret=True, not_parameter=FROM_SECRET,
        shown="unset",
        doc=("keys clients must send as `Authorization: Bearer`: comma-separated, or JSON "
             "naming each, `{\"team-a\": \"sk-…\"}` (names shown beside tenant ids in the "
             "dashboard, admin routes and logs); unset = no auth. Each key is its own tenant"))
    admin_keys: tuple[str, ...] = TENANTS(
        "GATEWAY_ADMIN_KEYS", (), parse="admin_keys", secret=True, not_parameter=FROM_SECRET,
        shown="unset",
        doc=("comma-separated admin keys: the admin routes (usage, every tenant's responses and"
             " conversations) and the `/dashboard` page; never a tenant key (a key also in "
             "`GATEWAY_API_KEYS` is refused at start). Unset = admin routes off "
             "([docs/dashboard.md](docs/dashboard.md))"))
    limits: Limits | None = TENANTS(
        "GATEWAY_LIMITS", None, parse="limits", parameter="Limits",
        doc=("per-key limits, JSON: `requests_per_minute`, `tokens_per_minute`, "
             "`tokens_per_period` (`period` `day`/`month`), `usd_per_day`, `usd_per_month` "
             "under `default` and per tenant id "
             "`t_…`; past one, OpenAI's 429 with `x-ratelimit-*` headers "
             "([docs/dashboard.md](docs/dashboard.md))"))
    prices: Prices | None = TENANTS(
        "GATEWAY_PRICES", None, parse="prices", parameter="Prices", shown="Bedrock's",
        doc=("per-model prices in US dollars, JSON: `input`, `cached_input`, `output` per "
             "million tokens, `image` per image, `search` per web search, per model name and "
             "under `default`; Bedrock's public on-demand prices ship for some models "
             "([docs/dashboard.md](docs/dashboard.md#prices-and-costs))"))

    # -- store -----------------------------------------------------------------------------------
    store: str = STORE(
        "GATEWAY_STORE", "sqlite:gateway.db", parse="store",
        not_parameter="set by the template: the stack's DynamoDB table",
        doc="`sqlite:PATH` (embedded) or `dynamodb:TABLE`")
    retention_days: int = STORE(
        "GATEWAY_RETENTION_DAYS", 30, parse="count", parameter="RetentionDays",
        doc="stored responses expire after this many days (DynamoDB TTL)")
    max_conversation_items: int = STORE(
        "GATEWAY_MAX_CONVERSATION_ITEMS", 10_000, parse="count", parameter="MaxConversationItems",
        doc=("most items one conversation holds; an item write or a turn that would pass it is "
             "a 400 `conversation_too_large` before anything is written"))
    max_conversation_bytes: int = STORE(
        "GATEWAY_MAX_CONVERSATION_BYTES", 64 * 1024 * 1024, parse="count",
        parameter="MaxConversationBytes",
        doc="most stored bytes of one conversation's items; as above")
    max_stored_response_bytes: int = STORE(
        "GATEWAY_MAX_STORED_RESPONSE_BYTES", 32 * 1024 * 1024, parse="count",
        parameter="MaxStoredResponseBytes",
        doc=("largest stored response (its input items, and the Response object, generated "
             "images included); a create over it is a 400 `input_too_large`, a Response that "
             "grows past it is not written (`response_too_large`)"))
    max_compaction_calls: int = STORE(
        "GATEWAY_MAX_COMPACTION_CALLS", 16, parse="count", parameter="MaxCompactionCalls",
        doc=("most summarising calls upstream in one compaction (`/responses/compact`, "
             "`context_management`, `compaction_trigger`), estimated before the first; more is "
             "a 400 `context_length_exceeded`. `0`: no bound"))
    max_compaction_input_bytes: int = STORE(
        "GATEWAY_MAX_COMPACTION_INPUT_BYTES", 20 * 1024 * 1024, parse="count",
        parameter="MaxCompactionInputBytes",
        doc=("largest JSON size of the items one compaction reads; above it a 400 "
             "`context_length_exceeded` before any upstream call. `0`: no bound"))

    # -- tools -----------------------------------------------------------------------------------
    hosted_tools: str = TOOLS(
        "GATEWAY_HOSTED_TOOLS", "omit", parse="hosted_tools", parameter="HostedTools",
        doc=("tools OpenAI runs on its servers that this gateway does not (`tool_search` with "
             "server execution, and `web_search`, `file_search`, `image_generation`, "
             "`code_interpreter`, hosted `shell` while their provider, vector stores, image "
             "backend or `GATEWAY_CODE_INTERPRETER` are not configured): `omit` leaves them out "
             "for the model (the response's `tools` lists what the model had), so agents that "
             "send them unasked (the Codex CLI) work; `reject` answers OpenAI's 400 naming the "
             "tool. Tools the client runs (`shell` with no container environment, "
             "`apply_patch`, `local_shell`, `computer`) are never affected "
             "([docs/tools.md](docs/tools.md))"))
    max_tool_calls: int = TOOLS(
        "GATEWAY_MAX_TOOL_CALLS", 128, parse="count", parameter="MaxToolCalls",
        doc=("most calls the gateway's own tools (MCP, …) run in one response, whatever "
             "`max_tool_calls` says (a lower `max_tool_calls` wins); then the model is no "
             "longer offered them and answers"))
    max_tool_output_bytes: int = TOOLS(
        "GATEWAY_MAX_TOOL_OUTPUT_BYTES", 8 * 1024 * 1024, parse="count",
        parameter="MaxToolOutputBytes",
        doc=("most bytes of tool items those calls may add to one response (the last call may "
             "pass it by its own bound); then as above"))
    max_tool_turns: int = TOOLS(
        "GATEWAY_MAX_TOOL_TURNS", 32, parse="count", parameter="MaxToolTurns",
        doc=("most model turns with tool calls in one response; the response then ends with "
             "what the last turn produced"))

    # -- mcp -------------------------------------------------------------------------------------
    mcp_allow_hosts: tuple[str, ...] = MCP(
        "GATEWAY_MCP_ALLOW_HOSTS", (), parse="names",
        not_parameter="private MCP servers only; empty (none) is the safe default",
        doc=("comma-separated hosts (names or IP literals) remote MCP servers may be reached at"
             " although they resolve to private addresses; every other `server_url` must be "
             "public ([docs/tools.md](docs/tools.md))"))
    mcp_call_timeout: float = MCP(
        "GATEWAY_MCP_CALL_TIMEOUT", 60.0, parse="seconds",
        not_parameter="an internal limit under the response's own deadline",
        doc=("seconds one MCP tool call (and connecting plus listing a server) may take; over "
             "it the call fails (`mcp_protocol_error`), the response goes on"))
    mcp_max_output_bytes: int = MCP(
        "GATEWAY_MCP_MAX_OUTPUT_BYTES", 1024 * 1024, parse="count",
        not_parameter="an internal limit; its default fits Lambda memory",
        doc="largest MCP tool output kept; a larger one is a failed call")

    # -- web_search ------------------------------------------------------------------------------
    web_search_provider: str | None = WEB_SEARCH(
        "GATEWAY_WEB_SEARCH_PROVIDER", None, parse="web_search_provider",
        parameter="WebSearchProvider",
        doc=("`searxng`, `tavily`, `brave` or `exa`: `web_search` runs in the gateway on it; "
             "unset: it stays a hosted tool (`GATEWAY_HOSTED_TOOLS`); checked at start (SearXNG"
             " without `GATEWAY_WEB_SEARCH_URL`, the others without "
             "`GATEWAY_WEB_SEARCH_API_KEY`, stop the gateway naming the variable) "
             "([docs/web_search.md](docs/web_search.md))"))
    web_search_url: str | None = WEB_SEARCH(
        "GATEWAY_WEB_SEARCH_URL", None, parse="web_search_url", parameter="WebSearchUrl",
        doc="the provider's base URL (required for SearXNG, e.g. `http://searxng:8080`)")
    web_search_api_key: str | None = WEB_SEARCH(
        "GATEWAY_WEB_SEARCH_API_KEY", None, secret=True, not_parameter=FROM_SECRET,
        doc=("the provider's key (or `GATEWAY_WEB_SEARCH_API_KEY_SECRET_ARN` / `_PARAMETER`; in"
             " AWS the secret's `web_search_api_key`)"))
    web_search_timeout: float = WEB_SEARCH(
        "GATEWAY_WEB_SEARCH_TIMEOUT", 15.0, parse="seconds",
        not_parameter="an internal limit under the response's own deadline",
        doc=("seconds one search may take; past it the `web_search_call` fails and the model "
             "goes on"))
    web_search_max_answer_bytes: int = WEB_SEARCH(
        "GATEWAY_WEB_SEARCH_MAX_ANSWER_BYTES", 2 * 1024 * 1024, parse="count",
        not_parameter="an internal limit; its default fits Lambda memory",
        doc=("largest search provider answer read; a larger one fails the `web_search_call` and"
             " the model goes on"))
    web_page_max_bytes: int = WEB_SEARCH(
        "GATEWAY_WEB_PAGE_MAX_BYTES", 2 * 1024 * 1024, parse="count",
        not_parameter="an internal limit; its default fits Lambda memory",
        doc="largest live page opened for `open_page` / `find_in_page`")
    web_page_timeout: float = WEB_SEARCH(
        "GATEWAY_WEB_PAGE_TIMEOUT", 15.0, parse="seconds",
        not_parameter="an internal limit under the response's own deadline",
        doc=("seconds a page may take to open and to read as text (its HTML is parsed in a "
             "child process, killed at this deadline)"))
    web_allow_hosts: tuple[str, ...] = WEB_SEARCH(
        "GATEWAY_WEB_ALLOW_HOSTS", (), parse="names",
        not_parameter="private web pages only; empty (none) is the safe default",
        doc=("hosts pages may be opened on although they resolve to private addresses (every "
             "other page must be public)"))

    # -- image_generation ------------------------------------------------------------------------
    image_backend: str | None = IMAGE_GENERATION(
        "GATEWAY_IMAGE_BACKEND", None, parse="image_backend", parameter="ImageBackend",
        doc=("`bedrock` (InvokeModel: Nova Canvas, Titan Image Generator v2) or `openai` (an "
             "OpenAI-compatible `/v1/images` server): `image_generation` runs in the gateway; "
             "unset: it stays a hosted tool "
             "([docs/image_generation.md](docs/image_generation.md))"))
    image_model: str | None = IMAGE_GENERATION(
        "GATEWAY_IMAGE_MODEL", None, parameter="ImageModel",
        shown="`amazon.nova-canvas-v1:0` / `gpt-image-1`",
        doc="the image model (Bedrock / images server)")
    image_url: str | None = IMAGE_GENERATION(
        "GATEWAY_IMAGE_URL", None, parse="http_url", parameter="ImageUrl",
        shown="`GATEWAY_UPSTREAM_URL`", doc="the images server's `/v1` base URL")
    image_api_key: str | None = IMAGE_GENERATION(
        "GATEWAY_IMAGE_API_KEY", None, secret=True,
        not_parameter=("a secret: set GATEWAY_IMAGE_API_KEY_SECRET_ARN by hand when the images "
                       "server needs a key"),
        doc="the images server's key (or `_SECRET_ARN` / `_PARAMETER`)")
    image_timeout: float = IMAGE_GENERATION(
        "GATEWAY_IMAGE_TIMEOUT", 120.0, parse="seconds",
        not_parameter="an internal limit under the response's own deadline",
        doc="seconds one image may take; over it the call fails (`timeout`), the response goes on")
    image_max_bytes: int = IMAGE_GENERATION(
        "GATEWAY_IMAGE_MAX_BYTES", 20 * 1024 * 1024, parse="count",
        not_parameter=("an internal limit; its default fits Lambda memory and the "
                       "stored-response bound"),
        doc=("bytes of one generated image (decoded); a larger answer is not read further and "
             "the call fails (`image_too_large`), the response goes on. Keep it under "
             "`GATEWAY_MAX_STORED_RESPONSE_BYTES`, which counts stored images too"))
    image_seed: int | None = IMAGE_GENERATION(
        "GATEWAY_IMAGE_SEED", None, parse="count",
        not_parameter="a fixed seed for reproducible images; unset (random) by default",
        doc="a fixed seed for Bedrock image models (reproducible images)")
    image_bucket: str | None = IMAGE_GENERATION(
        "GATEWAY_IMAGE_BUCKET", None, not_parameter="set by the template: the images bucket",
        doc=("S3 bucket of generated images (and other large stored values) when "
             "`GATEWAY_STORE=dynamodb:…` (set by the template); locally they live beside the "
             "SQLite file in `PATH.blobs/`"))

    # -- files -----------------------------------------------------------------------------------
    files_bucket: str | None = FILES(
        "GATEWAY_FILES_BUCKET", None, not_parameter="set by the template: the files bucket",
        doc=("S3 bucket for uploaded files' bytes when `GATEWAY_STORE=dynamodb:…` (set by the "
             "template); locally files live beside the SQLite file in `PATH.files/` "
             "([docs/files.md](docs/files.md))"))
    max_file_bytes: int = FILES(
        "GATEWAY_MAX_FILE_BYTES", 512 * 1024 * 1024, parse="count", parameter="MaxFileBytes",
        doc="largest uploaded file; larger is 413 `file_too_large`")
    max_tenant_file_bytes: int = FILES(
        "GATEWAY_MAX_TENANT_FILE_BYTES", 10 * 1024 * 1024 * 1024, parse="count",
        parameter="MaxTenantFileBytes",
        doc=("bytes of files one API key may keep, counting the parts of its pending Uploads; "
             "past it 400 `storage_limit_exceeded` (expired Files and Uploads are removed "
             "first)"))
    max_name_chars: int = FILES(
        "GATEWAY_MAX_NAME_CHARS", 256, parse="count", parameter="MaxNameChars",
        doc=("longest file name (Files, Uploads), Upload `mime_type`, vector store `name` and "
             "file id given to a vector store (OpenAI documents no bound; 256 is its Assistants"
             " `name` bound); longer is 400 `string_above_max_length` naming the param. `0`: no"
             " bound"))
    max_description_chars: int = FILES(
        "GATEWAY_MAX_DESCRIPTION_CHARS", 512, parse="count", parameter="MaxDescriptionChars",
        doc=("longest vector store `description` (OpenAI documents none; 512 is its Assistants "
             "`description` bound); as above"))
    file_sweep_seconds: float = FILES(
        "GATEWAY_FILE_SWEEP_SECONDS", 300.0, parse="seconds",
        not_parameter=("the local (SQLite) file store only; in AWS a tenant's expired files are"
                       " reclaimed as it is served"),
        doc=("local store: how often a running gateway removes every key's expired Files and "
             "Uploads with their bytes (they are also removed when touched, and before a key is"
             " refused for its total; in AWS only so). `0`: no sweep"))
    max_upload_part_bytes: int = FILES(
        "GATEWAY_MAX_UPLOAD_PART_BYTES", 64 * 1024 * 1024, parse="count",
        parameter="MaxUploadPartBytes",
        doc=("largest part of the Uploads API (`/v1/uploads/{id}/parts`); larger is 413 "
             "`part_too_large` (a function URL takes 6 MB per request)"))

    # -- code ------------------------------------------------------------------------------------
    code_interpreter: str | None = CODE(
        "GATEWAY_CODE_INTERPRETER", None, parse="choice", choices=("sandbox", "agentcore"),
        parameter="CodeInterpreter",
        doc=("where containers run code: `sandbox` (a bubblewrap jail per container on this "
             "machine) or `agentcore` (Amazon Bedrock AgentCore Code Interpreter; the engine on "
             "Lambda). Set: `code_interpreter`, hosted `shell` and `/v1/containers` are served "
             "by the gateway; unset: `code_interpreter` stays a hosted tool"))
    container_idle_seconds: float = CODE(
        "GATEWAY_CONTAINER_IDLE_SECONDS", 1200.0, parse="seconds",
        parameter="ContainerIdleSeconds",
        doc=("a container expires after this long without use (OpenAI's 20 minutes); its "
             "processes and files are then gone and its id answers 404"))
    code_timeout: float = CODE(
        "GATEWAY_CODE_TIMEOUT", 60.0, parse="seconds", parameter="CodeTimeout",
        doc=("wall-clock seconds one execution (a code_interpreter call, a shell call) may run; "
             "past it the call fails for the model and the container is reset"))
    code_memory_mb: int = CODE(
        "GATEWAY_CODE_MEMORY_MB", 1024, parse="count", floor=64,
        not_parameter="a sandbox limit; AgentCore sizes its own sessions",
        doc=("sandbox: memory (MiB) a container's processes may map; a container's "
             "`memory_limit` (`1g`…) lowers it, never raises it"))
    code_max_output_bytes: int = CODE(
        "GATEWAY_CODE_MAX_OUTPUT_BYTES", 1024 * 1024, parse="count", floor=1024,
        not_parameter="an internal bound on what the gateway holds per execution",
        doc=("bytes of stdout/stderr one execution returns; the rest is cut (the gateway's "
             "memory stays bounded whatever the code prints)"))
    sandbox_python: str | None = CODE(
        "GATEWAY_SANDBOX_PYTHON", None, not_parameter="the sandbox engine only (not on Lambda)",
        shown="the gateway's own Python",
        doc=("the Python the sandbox runs code with (an environment with numpy, pandas and "
             "matplotlib: `pip install -e '.[code]'`)"))
    container_dir: str | None = CODE(
        "GATEWAY_CONTAINER_DIR", None, not_parameter="the sandbox engine only (not on Lambda)",
        shown="`PATH.containers/` beside the SQLite file",
        doc="sandbox: where containers' `/mnt/data` folders live on this machine")
    max_containers: int = CODE(
        "GATEWAY_MAX_CONTAINERS", 100, parse="count",
        not_parameter="an internal bound per API key; its default suits most deployments",
        doc=("running containers one API key may have (`/v1/containers` and auto containers); "
             "past it 400 `container_limit_exceeded` (expired ones are reclaimed first). `0`: "
             "no bound"))
    container_max_bytes: int = CODE(
        "GATEWAY_CONTAINER_MAX_BYTES", 2 << 30, parse="count",
        not_parameter="an internal bound per container; its default suits most deployments",
        doc=("bytes a container's `/mnt/data` files may take together: an upload past it is "
             "413 `container_full`; what an execution or command wrote past it is removed "
             "(largest first) and the model is told. `0`: no bound"))
    agentcore_interpreter_id: str = CODE(
        "GATEWAY_AGENTCORE_INTERPRETER_ID", "aws.codeinterpreter.v1",
        parameter="AgentCoreInterpreterId",
        doc="agentcore: the code interpreter (AWS's managed one, or one of yours)")
    agentcore_endpoint_url: str | None = CODE(
        "GATEWAY_AGENTCORE_ENDPOINT_URL", None, parse="http_url",
        not_parameter="tests only: a local endpoint speaking AgentCore's wire format",
        doc="agentcore: an endpoint override (tests)")
    agentcore_session_seconds: int = CODE(
        "GATEWAY_AGENTCORE_SESSION_SECONDS", 3600, parse="count", floor=60,
        not_parameter="an internal choice under AgentCore's 8-hour bound",
        doc=("agentcore: `sessionTimeoutSeconds` of each session (AgentCore ends a session "
             "after it whatever its use; the gateway carries the container's files over)"))

    # -- vector_stores ---------------------------------------------------------------------------
    max_vector_store_files: int = VECTOR_STORES(
        "GATEWAY_MAX_VECTOR_STORE_FILES", 10_000, parse="count", parameter="MaxVectorStoreFiles",
        doc="files one vector store may hold; past it 400 `vector_store_full`")
    vector_bucket: str | None = VECTOR_STORES(
        "GATEWAY_VECTOR_BUCKET", None,
        not_parameter="set by the template: the stack's S3 Vectors bucket",
        doc=("S3 Vectors bucket of the vector stores when `GATEWAY_STORE=dynamodb:…` (set by "
             "the template); without it vector stores are 501 there "
             "([docs/files.md](docs/files.md))"))
    vector_cache_bytes: int = VECTOR_STORES(
        "GATEWAY_VECTOR_CACHE_BYTES", 256 * 1024 * 1024, parse="count",
        not_parameter="the local (SQLite) vector engine only; Lambda uses S3 Vectors",
        doc=("local engine (`GATEWAY_STORE=sqlite:…`) only: bytes of searched vector stores' "
             "vectors kept in memory for exact in-process search (about 1.5 KB per chunk of 384"
             " dimensions; least recently searched stores dropped first); a store larger than "
             "this, or `0`, is searched by sqlite-vec ([docs/files.md](docs/files.md))"))
    # vectors/knowledge_bases.py KnowledgeBase by store id (typed as Any: settings sit below
    # vectors/, and an import for the type alone still runs up the layering for a reader)
    knowledge_bases: dict[str, Any] = VECTOR_STORES(
        "GATEWAY_KNOWLEDGE_BASES", {}, parse="knowledge_bases", parameter="KnowledgeBases",
        shown="unset",
        doc=("Bedrock Knowledge Bases served as read-only vector stores, JSON `{\"vs_handbook\": "
             "\"KB12345678\"}` or with `\"tenants\": [...]` ([docs/files.md](docs/files.md))"))
    embedding_backend: str = VECTOR_STORES(
        "GATEWAY_EMBEDDING_BACKEND", "openai", parse="choice", choices=("openai", "bedrock"),
        parameter="EmbeddingBackend",
        doc=("`openai`: the `/v1/embeddings` above; `bedrock`: InvokeModel in "
             "`GATEWAY_BEDROCK_REGION` with Titan Text Embeddings v2 "
             "(`amazon.titan-embed-text-v2:0`, then the default `GATEWAY_EMBEDDING_MODEL`) or "
             "Cohere Embed (`cohere.embed-*`)"))
    embedding_url: str | None = VECTOR_STORES(
        "GATEWAY_EMBEDDING_URL", None, parse="url", parameter="EmbeddingUrl",
        shown="`GATEWAY_UPSTREAM_URL`",
        doc="OpenAI-compatible `/v1` base URL of the embedding model vector stores use")
    embedding_api_key: str | None = VECTOR_STORES(
        "GATEWAY_EMBEDDING_API_KEY", None, secret=True,
        not_parameter=("a secret: set GATEWAY_EMBEDDING_API_KEY_SECRET_ARN by hand when the "
                       "embedding endpoint needs a key other than the upstream's"),
        shown="the upstream key",
        doc="its bearer key (or `GATEWAY_EMBEDDING_API_KEY_SECRET_ARN` / `_PARAMETER`)")
    embedding_model: str = VECTOR_STORES(
        "GATEWAY_EMBEDDING_MODEL", "text-embedding-3-small", parse="embedding_model",
        parameter="EmbeddingModel", doc="the embedding model")
    embedding_batch: int = VECTOR_STORES(
        "GATEWAY_EMBEDDING_BATCH", 64, parse="count", floor=1, parameter="EmbeddingBatch",
        doc="chunks per embeddings request")
    embedding_retries: int = VECTOR_STORES(
        "GATEWAY_EMBEDDING_RETRIES", 3, parse="count", parameter="EmbeddingRetries",
        doc=("further attempts of an embeddings request whose connection was refused, dropped "
             "or timed out, or that answered 408/429/5xx (on Bedrock: botocore's retries)"))
    embedding_backoff_seconds: float = VECTOR_STORES(
        "GATEWAY_EMBEDDING_BACKOFF_SECONDS", 0.5, parse="seconds",
        parameter="EmbeddingBackoffSeconds",
        doc="wait before the first such retry, doubled for each next (at most 8 s, jittered)")
    extract_timeout: float = VECTOR_STORES(
        "GATEWAY_EXTRACT_TIMEOUT", 120.0, parse="seconds", parameter="ExtractTimeout",
        doc=("seconds reading one file attached to a vector store may take (in a child process,"
             " killed then); past it the file ends `failed` (`invalid_file`). `0`: no bound"))
    max_file_tokens: int = VECTOR_STORES(
        "GATEWAY_MAX_FILE_TOKENS", 5_000_000, parse="count", floor=1, parameter="MaxFileTokens",
        doc=("tokens a file attached to a vector store may hold (OpenAI's bound); past it the "
             "file ends `failed` (`invalid_file`)"))
    max_search_queries: int = VECTOR_STORES(
        "GATEWAY_MAX_SEARCH_QUERIES", 5, parse="count", floor=1, parameter="MaxSearchQueries",
        doc=("queries one vector store search may take (file_search's cap); more is a 400 "
             "`array_above_max_length`"))
    max_search_embeddings: int = VECTOR_STORES(
        "GATEWAY_MAX_SEARCH_EMBEDDINGS", 16, parse="count", floor=1,
        parameter="MaxSearchEmbeddings",
        doc="searches whose queries this process embeds at once; others wait")
    max_filter_values: int = VECTOR_STORES(
        "GATEWAY_MAX_FILTER_VALUES", 1000, parse="count", parameter="MaxFilterValues",
        doc="values in all the `in` / `nin` lists of one search's `filters`; more is a 400 "
            "(`0`: no `in` / `nin` filters at all; there is no unbounded setting)")
    max_filter_conditions: int = VECTOR_STORES(
        "GATEWAY_MAX_FILTER_CONDITIONS", 64, parse="count", floor=1,
        parameter="MaxFilterConditions",
        doc="comparison and compound filters in one search's `filters`; more is a 400")
    max_filter_depth: int = VECTOR_STORES(
        "GATEWAY_MAX_FILTER_DEPTH", 8, parse="count", parameter="MaxFilterDepth",
        doc="compound filters nested in one another in `filters`; deeper is a 400 "
            "(`0`: no compound filters)")

    # -- websocket -------------------------------------------------------------------------------
    ws_idle_seconds: float = WEBSOCKET(
        "GATEWAY_WS_IDLE_SECONDS", 600.0, parse="seconds",
        not_parameter="uvicorn only: API Gateway closes idle sockets (10 minutes)",
        doc=("a WebSocket-mode connection with nothing running closes (`1000`) after this much "
             "silence; `0`: never"))
    ws_max_connection_seconds: float = WEBSOCKET(
        "GATEWAY_WS_MAX_CONNECTION_SECONDS", 3600.0, parse="seconds",
        not_parameter="uvicorn only: API Gateway's limit is two hours",
        doc=("a WebSocket-mode connection's age limit: an `error` event "
             "`websocket_connection_limit_reached`, then close"))
    ws_max_active_responses: int = WEBSOCKET(
        "GATEWAY_WS_MAX_ACTIVE_RESPONSES", 16, parse="count", parameter="WsMaxActiveResponses",
        doc=("responses running or queued on one WebSocket (OpenAI's 16); past it an `error` "
             "event, 429 `too_many_queued_responses`. `0`: no bound"))
    ws_max_streams: int = WEBSOCKET(
        "GATEWAY_WS_MAX_STREAMS", 32, parse="count", parameter="WsMaxStreams",
        doc=("named streams (`stream_id` lanes) one WebSocket may use at once (OpenAI's 32); "
             "past it 400 `too_many_streams`. `0`: no bound"))
    ws_max_pending_steers: int = WEBSOCKET(
        "GATEWAY_WS_MAX_PENDING_STEERS", 8, parse="count", parameter="WsMaxPendingSteers",
        doc=("`response.steer` submissions queued for one response; past it "
             "`response.steer.failed` `too_many_pending_steers`. `0`: no bound"))
    ws_max_remembered_bytes: int = WEBSOCKET(
        "GATEWAY_WS_MAX_REMEMBERED_BYTES", 64 * 1024 * 1024, parse="count",
        parameter="WsMaxRememberedBytes",
        doc=("bytes of remembered responses (each lane's most recent, for `store: false` "
             "continuations) per WebSocket; past it the lanes remembered longest ago are "
             "forgotten and a continuation from them gets `previous_response_not_found`. `0`: "
             "no bound"))
    ws_management_url: str | None = WEBSOCKET(
        "GATEWAY_WS_MANAGEMENT_URL", None, parse="http_url",
        not_parameter=("derived from each event (https://{domain}/{stage}); set by hand for a "
                       "custom domain"),
        shown="derived",
        doc=("API Gateway WebSocket API only: the management endpoint events are posted to "
             "(`https://{domain}/{stage}` from the event by default; set it for a custom "
             "domain)"))

    # -- observability ---------------------------------------------------------------------------
    log_level: str = OBSERVABILITY(
        "GATEWAY_LOG_LEVEL", "info", parse="choice", choices=LOG_LEVELS, parameter="LogLevel",
        doc=("`debug`, `info`, `warning`, `error` or `critical`: the gateway's log lines (JSON,"
             " on stderr locally, CloudWatch in Lambda) and, under `responses-gateway serve`, "
             "uvicorn's (`--log-level` wins)"))
    debug_log_content: bool = OBSERVABILITY(
        "GATEWAY_DEBUG_LOG_CONTENT", False, parse="switch", parameter="DebugLogContent",
        doc=("`true`: each response's log line also holds the chat request sent upstream and "
             "the output (never keys); locally and in Lambda"))

    # -- what reading the environment found (no variable of its own) -----------------------
    # ``GATEWAY_*`` variables that are no setting, each with the closest setting's variable
    # (or None): the start line's warning (api/startup.py). A misspelt setting is not silent.
    unknown_variables: tuple[tuple[str, str | None], ...] = ()

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


    def __init__(self, **values: Any) -> None:
        unknown = values.keys() - DEFAULTS.keys()
        if unknown:
            raise TypeError(f"Settings.__init__() got an unexpected keyword argument "
                            f"{min(unknown)!r}")
        fields = self.__dict__
        for name, default in DEFAULTS.items():
            if name in values:
                fields[name] = values[name]
            else:
                fields[name] = default.copy() if default.__class__ is dict else default

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return Settings(**{**self.__dict__, **changes})

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        fields = self.__dict__
        return "Settings(" + ", ".join(f"{name}={fields[name]!r}" for name in _SHOWN) + ")"


def _fields(cls: type) -> tuple[dict[str, Any], dict[str, Setting]]:
    """Every field's default, in declaration order, and every declared setting; the class keeps
    a field's default as its attribute (a dict one: none), as a dataclass does."""
    defaults: dict[str, Any] = {}
    settings: dict[str, Setting] = {}
    for name in cls.__annotations__:
        value = cls.__dict__[name]
        if isinstance(value, Setting):
            settings[name] = value
            value = value.default
        defaults[name] = value
        if isinstance(value, dict):
            delattr(cls, name)
        else:
            type.__setattr__(cls, name, value)
    return defaults, settings


#: every field of :class:`Settings` and its default, in declaration order
DEFAULTS, _DECLARED = _fields(Settings)
#: the fields ``repr(settings)`` shows: all but the secrets
_SHOWN = tuple(name for name in DEFAULTS if not (name in _DECLARED and _DECLARED[name].secret))


def declared() -> dict[str, Setting]:
    """Every declared setting by its field name, in declaration order."""
    return dict(_DECLARED)

"""What differs between the Chat Completions servers the gateway sits in front of, in one place.

The translator builds OpenAI's own Chat Completions body (``max_completion_tokens``,
``content: null`` beside ``tool_calls``, ``response_format.json_schema``). A :class:`Dialect`
rewrites that body, once per request, into the form one server family accepts; everything else
about the request is the same for every upstream. docs/upstreams.md has the table of servers,
what each is known to reject and how that was established.

The dialect is chosen by ``GATEWAY_UPSTREAM_DIALECT`` or, when that is ``auto`` (the default),
from the base URL's host, then from the upstream's ``GET /models`` answer (``owned_by`` and the
response headers), falling back to :data:`GENERIC`: the form the most servers accept.

What no table can know is learned: an upstream that answers 400/422 (or a 500 that says the
request was invalid) naming a parameter it does not support gets that parameter dropped or
renamed and the request sent once more (:func:`adaptation_for`); the change is remembered per
upstream and model for the life of the process (:class:`Learned`). A request rejected for its
content (messages, tools, a value out of range) is never retried.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

#: Parameters the gateway may send that change nothing a client relies on when a server that
#: does not support them goes without: dropping one is how a rejection is survived.
DROPPABLE = frozenset({
    "stream_options", "parallel_tool_calls", "user", "safety_identifier", "prompt_cache_key",
    "verbosity", "reasoning_effort", "logprobs", "top_logprobs", "temperature", "top_p",
    "presence_penalty", "frequency_penalty", "seed", "service_tier", "store", "metadata",
    "prompt_cache_options", "prompt_cache_retention",
})
#: Reasoning levels for servers that know low/medium/high (vLLM, SGLang, llama.cpp and
#: Ollama's gpt-oss templates, Groq, DeepSeek...): ``none`` is left out (such a server has no
#: way to say it), the others go to the nearest level.
THREE_EFFORTS: Mapping[str, str | None] = {"none": None, "minimal": "low", "xhigh": "high",
                                            "max": "high"}
#: OpenAI's own levels: everything the Responses API names but ``max``.
OPENAI_EFFORTS: Mapping[str, str | None] = {"max": "xhigh"}
#: The output limit goes by two names; a server that rejects one is sent the other.
RENAMES = {"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one server family wants the Chat Completions body. Defaults are :data:`GENERIC`'s."""

    name: str
    #: The name the output limit is sent under.
    token_limit: str = "max_tokens"
    #: The server takes ``content: null`` beside ``tool_calls`` (else it gets ``""``).
    null_tool_content: bool = False
    #: Top-level parameters the server is known to reject.
    drops: frozenset[str] = frozenset()
    #: How structured output is asked for: ``openai`` (``json_schema``), ``schema_in_object``
    #: (llama-cpp-python: ``{"type": "json_object", "schema": …}``), ``value`` (TGI:
    #: ``{"type": "json_object", "value": …}``), ``schema_only`` (LM Studio: no ``json_object``).
    response_format: str = "openai"
    #: ``logprobs`` is refused beside tools in a stream (llama-server).
    no_logprobs_with_streamed_tools: bool = False
    #: Tool call ids must be nine letters or digits (Mistral).
    short_tool_call_ids: bool = False
    #: Every function tool is sent with ``parameters`` (an empty object schema when absent).
    tool_parameters: bool = True
    #: Header the API key also travels in (Azure's ``api-key``).
    key_header: str | None = None
    #: Content parts may carry ``prompt_cache_breakpoint`` (OpenAI's chat API); elsewhere it
    #: is taken off (a strict server would refuse the unknown field).
    cache_breakpoints: bool = False
    #: ``reasoning_effort`` levels this server does not take -> the one it is sent as (None:
    #: left out). Most servers know ``low``/``medium``/``high`` only (docs/routing.md).
    efforts: Mapping[str, str | None] = field(default_factory=lambda: THREE_EFFORTS)

    def prepare(self, body: dict[str, Any], learned: Learned | None = None) -> dict[str, Any]:
        """The body to send, a new dict: ``body`` is left as it was (a retry prepares it again)."""
        out = dict(body)
        for name in ("max_tokens", "max_completion_tokens"):
            if name != self.token_limit and name in out:
                value = out.pop(name)
                out.setdefault(self.token_limit, value)
        effort = out.get("reasoning_effort")
        if effort in self.efforts:
            if self.efforts[effort] is None:
                del out["reasoning_effort"]
            else:
                out["reasoning_effort"] = self.efforts[effort]
        drops = self.drops
        if learned is not None:
            for old, new in learned.renames.items():
                if old in out:
                    out[new] = out.pop(old)
            drops = drops | learned.drops
        if self.no_logprobs_with_streamed_tools and out.get("tools") and out.get("stream"):
            drops = drops | {"logprobs", "top_logprobs"}
        for name in drops:
            out.pop(name, None)
        if "stream_options" in out and not out.get("stream"):
            del out["stream_options"]
        if "response_format" in out:
            out["response_format"] = self._response_format(out["response_format"])
        if "tools" in out and self.tool_parameters:
            out["tools"] = [_with_parameters(tool) for tool in out["tools"]]
        if not self.null_tool_content or self.short_tool_call_ids:
            out["messages"] = [self._message(m) for m in out.get("messages") or ()]
        if not self.cache_breakpoints:
            out["messages"] = [_without_breakpoints(m) for m in out.get("messages") or ()]
        return out

    def _message(self, message: dict[str, Any]) -> dict[str, Any]:
        calls = message.get("tool_calls")
        if calls and message.get("content") is None and not self.null_tool_content:
            message = {**message, "content": ""}
        if self.short_tool_call_ids:
            if calls:
                message = {**message, "tool_calls": [
                    {**c, "id": short_id(c.get("id"))} for c in calls
                ]}
            if message.get("role") == "tool":
                message = {**message, "tool_call_id": short_id(message.get("tool_call_id"))}
        return message

    def _response_format(self, fmt: Any) -> Any:
        if not isinstance(fmt, dict) or self.response_format == "openai":
            return fmt
        kind = fmt.get("type")
        schema = (fmt.get("json_schema") or {}).get("schema") if kind == "json_schema" else None
        if self.response_format == "schema_in_object" and kind == "json_schema":
            return {"type": "json_object", "schema": schema}
        if self.response_format == "value" and kind in ("json_schema", "json_object"):
            return {"type": "json_object", "value": schema or {"type": "object"}}
        if self.response_format == "schema_only" and kind == "json_object":
            return {"type": "json_schema",
                    "json_schema": {"name": "json_object", "schema": {"type": "object"}}}
        return fmt


def _without_breakpoints(message: dict[str, Any]) -> dict[str, Any]:
    """The message without ``prompt_cache_breakpoint`` on its parts (a copy only if it had)."""
    content = message.get("content")
    if content.__class__ is not list or not any(
            isinstance(p, dict) and "prompt_cache_breakpoint" in p for p in content):
        return message
    if message.get("role") == "system":  # kept as parts only for the breakpoint (to_chat.py)
        return {**message, "content": "\n".join(p.get("text") or "" for p in content)}
    return {**message, "content": [
        {k: v for k, v in p.items() if k != "prompt_cache_breakpoint"}
        if isinstance(p, dict) else p for p in content]}


def _with_parameters(tool: Any) -> Any:
    """A function tool always carries ``parameters``: llama-cpp-python and Ollama require it,
    and an empty object schema means to every server what an absent one means to OpenAI."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if isinstance(function, dict) and "parameters" not in function:
        return {**tool, "function": {**function,
                                     "parameters": {"type": "object", "properties": {}}}}
    return tool


def short_id(call_id: Any) -> Any:
    """A tool call id as nine letters and digits, the same for the same id (Mistral's rule);
    an id that already has that shape is kept, so the server's own ids round-trip."""
    if not isinstance(call_id, str) or _SHORT_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:9])


_SHORT_ID = re.compile(r"[A-Za-z0-9]{9}")
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

GENERIC = Dialect("generic")
_OPENAI = Dialect("openai", token_limit="max_completion_tokens", null_tool_content=True,
                  tool_parameters=False, cache_breakpoints=True, efforts=OPENAI_EFFORTS)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    GENERIC,
    _OPENAI,
    replace(_OPENAI, name="azure", key_header="api-key"),
    Dialect("llama.cpp", no_logprobs_with_streamed_tools=True),
    Dialect("llama-cpp-python", response_format="schema_in_object"),
    Dialect("vllm", null_tool_content=True),
    Dialect("sglang", null_tool_content=True),
    Dialect("ollama"),
    Dialect("lmstudio", response_format="schema_only"),
    Dialect("tgi", response_format="value"),
    Dialect("litellm", null_tool_content=True),
    Dialect("openrouter", null_tool_content=True, efforts=OPENAI_EFFORTS),
    Dialect("groq", token_limit="max_completion_tokens", null_tool_content=True,
            drops=frozenset({"logprobs", "top_logprobs"})),
    Dialect("deepseek"),
    Dialect("mistral", short_tool_call_ids=True,
            drops=frozenset({"stream_options", "user", "safety_identifier", "prompt_cache_key",
                             "verbosity", "reasoning_effort", "logprobs", "top_logprobs",
                             "service_tier", "prompt_cache_options",
                             "prompt_cache_retention"})),
    Dialect("together"),
    Dialect("fireworks"),
)}

#: Base URL hosts of hosted services (suffix match).
_HOSTS = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure"),
    (".cognitiveservices.azure.com", "azure"),
    (".services.ai.azure.com", "azure"),
    ("openrouter.ai", "openrouter"),
    ("api.groq.com", "groq"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral"),
    ("api.together.xyz", "together"),
    ("api.together.ai", "together"),
    ("api.fireworks.ai", "fireworks"),
)
#: ``owned_by`` of the first model in ``GET /models``, as each self-hosted server sets it.
_OWNERS = {
    "llamacpp": "llama.cpp",
    "me": "llama-cpp-python",
    "vllm": "vllm",
    "sglang": "sglang",
    "library": "ollama",
    "ollama": "ollama",
    "organization_owner": "lmstudio",
}


def dialect_named(name: str) -> Dialect:
    try:
        return DIALECTS[name.lower()]
    except KeyError:
        known = ", ".join(["auto", *DIALECTS])
        raise ValueError(f"GATEWAY_UPSTREAM_DIALECT must be one of {known}, not {name!r}") from None


def dialect_from_url(base_url: str) -> Dialect | None:
    """The dialect a base URL names by its host (hosted services) or port (Ollama, LM Studio)."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    for suffix, name in _HOSTS:
        if host == suffix.lstrip(".") or host.endswith(suffix):
            return DIALECTS[name]
    port = parts.port
    if port == 11434:
        return DIALECTS["ollama"]
    if port == 1234:
        return DIALECTS["lmstudio"]
    return None


def dialect_from_models(body: Any, headers: Mapping[str, str]) -> Dialect | None:
    """The dialect a ``GET /models`` answer shows: LiteLLM and TGI by their headers, the
    self-hosted servers by the ``owned_by`` they give their models."""
    if any(k.lower().startswith("x-litellm") for k in headers):
        return DIALECTS["litellm"]
    data = body.get("data") if isinstance(body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    owner = first.get("owned_by")
    if isinstance(owner, str) and owner.lower() in _OWNERS:
        return DIALECTS[_OWNERS[owner.lower()]]
    if any(k.lower() in ("x-compute-type", "x-compute-time") for k in headers):
        return DIALECTS["tgi"]  # TGI's router headers; its model list itself says nothing
    return None


# -- learning from rejections --------------------------------------------------------------


@dataclass(slots=True)
class Learned:
    """What one upstream has said it rejects, for one model: applied to every later request."""

    drops: set[str] = field(default_factory=set)
    renames: dict[str, str] = field(default_factory=dict)


_NAMED = re.compile(r"""['"`‘’]([A-Za-z_][A-Za-z0-9_.]*)['"`‘’]|\b([a-z]+_[a-z_]+)\b""")
_UNSUPPORTED = re.compile(
    r"unsupported|not supported|unrecognized|unknown|not permitted|not allowed|"
    r"extra (?:inputs|fields)|does not support|is not available|no longer supported|"
    r"unexpected (?:keyword|field|argument)|invalid (?:field|parameter|argument)",
    re.I,
)


def adaptation_for(
    error: Any, message: str, body: dict[str, Any]
) -> tuple[set[str], dict[str, str]] | None:
    """(parameters to drop, parameters to rename) that answer a rejection, or None when the
    rejection is not about a parameter the gateway can do without (then it is not retried).

    ``error`` is the upstream's parsed error body; ``message`` its text. Names come from
    OpenAI's ``param``, FastAPI/pydantic ``loc`` lists, and quoted names in the message, and
    only count when they are top-level keys of the body that was sent.
    """
    names = _named_params(error)
    text = message
    if _UNSUPPORTED.search(text) or _extra_forbidden(error):
        names.update(m.group(1) or m.group(2) for m in _NAMED.finditer(text))
    names &= body.keys()
    drops = {n for n in names if n in DROPPABLE}
    renames = {n: RENAMES[n] for n in names if n in RENAMES and RENAMES[n] not in body}
    if not drops and not renames:
        return None
    return drops, renames


def _named_params(error: Any) -> set[str]:
    """Parameter names an error body points at structurally (only unsupported ones)."""
    names: set[str] = set()
    stack = [error]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            loc = node.get("loc")
            kind = str(node.get("type") or "")
            if isinstance(loc, list) and len(loc) >= 2 and loc[0] == "body" and (
                kind in ("extra_forbidden", "value_error.extra")
            ):
                names.add(str(loc[1]))
            code = str(node.get("code") or "")
            if isinstance(node.get("param"), str) and code in (
                "unsupported_parameter", "unsupported_value", "unknown_parameter"
            ):
                names.add(node["param"])
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
    return names


def _extra_forbidden(error: Any) -> bool:
    return "extra_forbidden" in str(error)

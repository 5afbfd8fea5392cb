"""Each server's request rules for ``POST /v1/chat/completions``, written down from its own source
or docs, as checks: ``CHECKS[dialect](body)`` lists what that server would reject or ignore.

Only what the gateway can send is covered. Sources (read for this file):

- llama-cpp-python 0.3.36 (PyPI sdist): ``llama_cpp/llama_types.py`` message TypedDicts and
  ``llama_cpp/server/types.py`` ``CreateChatCompletionRequest`` (pydantic; unknown fields
  ignored, validation errors answered as HTTP 500 by ``server/errors.py``). The TypedDicts below
  are transcribed from it and validated with pydantic as the server does.
- llama-server (llama.cpp, ``tools/server/server-common.cpp`` ``oaicompat_chat_params_parse``,
  ``server-schema.cpp``: ``n_predict`` aliases ``max_tokens`` and ``max_completion_tokens``).
- vLLM / SGLang: ``ChatCompletionRequest`` protocol models (extra fields allowed, both limit
  names, ``content`` optional, ``top_logprobs`` needs ``logprobs``).
- Ollama: ``openai/openai.go`` ``ChatCompletionRequest`` (``max_tokens`` only, message content
  a string or parts array, images as data URLs).
- LM Studio docs (structured output: ``response_format.type`` is ``json_schema`` or text).
- TGI router ``GrammarType`` (``{"type": "json"|"json_object"|"regex", "value": …}``).
- Mistral API (unknown fields are ``extra_forbidden``; tool call ids ``[a-zA-Z0-9]{9}``).
- Groq docs (OpenAI compatibility: ``logprobs``, ``top_logprobs``, ``logit_bias`` unsupported).
- OpenAI / Azure: the Chat Completions reference (``max_tokens`` refused by reasoning models).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, NotRequired, Union

import pydantic
from typing_extensions import TypedDict

Body = dict[str, Any]


# -- llama-cpp-python: transcribed TypedDicts ----------------------------------------------


class _Text(TypedDict):
    type: Literal["text"]
    text: str


class _ImageUrl(TypedDict):
    url: str
    detail: NotRequired[Literal["auto", "low", "high"]]


class _Image(TypedDict):
    type: Literal["image_url"]
    image_url: Union[str, _ImageUrl]  # noqa: UP007 (as in the source)


class _System(TypedDict):
    role: Literal["system"]
    content: str | None


class _User(TypedDict):
    role: Literal["user"]
    content: str | list[_Text | _Image] | None


class _Function(TypedDict):
    name: str
    arguments: str


class _ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: _Function


class _Assistant(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[str]
    tool_calls: NotRequired[list[_ToolCall]]


class _Tool(TypedDict):
    role: Literal["tool"]
    content: str | None
    tool_call_id: str


class _ToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: dict[str, Any]


class _ToolDef(TypedDict):
    type: Literal["function"]
    function: _ToolFunction


class _ResponseFormat(TypedDict):
    type: Literal["text", "json_object"]
    schema: NotRequired[Any]


class _LlamaCppPythonRequest(pydantic.BaseModel):
    messages: list[_System | _User | _Assistant | _Tool]
    tools: list[_ToolDef] | None = None
    max_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: _ResponseFormat | None = None
    stream: bool = False


def llama_cpp_python(body: Body) -> list[str]:
    problems = _ignored_limit(body, "max_tokens")
    try:
        _LlamaCppPythonRequest.model_validate(body)
    except pydantic.ValidationError as exc:
        problems.append(f"500 validation: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}")
    for i, m in enumerate(body["messages"]):
        if m.get("role") == "assistant" and not isinstance(m.get("content"), str):
            problems.append(f"500: messages[{i}] assistant content must be a string")
    return problems


# -- rule checks -----------------------------------------------------------------------------


def _ignored_limit(body: Body, accepted: str) -> list[str]:
    """A limit sent only under a name the server ignores is a limit that does nothing."""
    other = "max_completion_tokens" if accepted == "max_tokens" else "max_tokens"
    if other in body and accepted not in body:
        return [f"ignored: {other} (the server reads only {accepted})"]
    return []


def _contents(body: Body, *, null_ok: bool) -> list[str]:
    problems = []
    for i, m in enumerate(body["messages"]):
        content = m.get("content")
        if m.get("role") != "assistant" and "content" not in m:
            problems.append(f"messages[{i}] has no content")
        if content is None and not null_ok and m.get("role") in ("assistant", "user", "system"):
            problems.append(f"messages[{i}].content is null")
        if content is not None and not isinstance(content, str | list):
            problems.append(f"messages[{i}].content must be a string or an array")
    return problems


def _json_schema_format(body: Body, kinds: tuple[str, ...]) -> list[str]:
    fmt = body.get("response_format")
    if fmt is None:
        return []
    if fmt.get("type") not in kinds:
        return [f"response_format.type {fmt.get('type')!r} not one of {kinds}"]
    if fmt["type"] == "json_schema" and "schema" not in (fmt.get("json_schema") or {}):
        return ["response_format.json_schema.schema missing"]
    return []


def llama_server(body: Body) -> list[str]:
    problems = _contents(body, null_ok=True)
    if body.get("logprobs") and body.get("tools") and body.get("stream"):
        problems.append("400: logprobs is not supported with tools + stream")
    if "top_logprobs" in body and not body.get("logprobs"):
        problems.append("400: top_logprobs requires logprobs to be set to true")
    for i, m in enumerate(body["messages"]):
        if m.get("role") == "assistant" and "content" not in m and "tool_calls" not in m:
            problems.append(f"400: messages[{i}] needs content or tool_calls")
    return problems + _json_schema_format(body, ("text", "json_object", "json_schema"))


def vllm(body: Body) -> list[str]:
    problems = _contents(body, null_ok=True)
    if body.get("top_logprobs") is not None and not body.get("logprobs"):
        problems.append("400: top_logprobs requires logprobs")
    return problems + _json_schema_format(body, ("text", "json_object", "json_schema"))


def ollama(body: Body) -> list[str]:
    problems = _ignored_limit(body, "max_tokens") + _contents(body, null_ok=False)
    for m in body["messages"]:
        for part in m.get("content") if isinstance(m.get("content"), list) else ():
            if part["type"] == "image_url":
                url = part["image_url"]["url"] if isinstance(part["image_url"], dict) else ""
                if not url.startswith("data:"):
                    problems.append("400: invalid image input (only data URLs)")
    for tool in body.get("tools") or ():
        if "parameters" not in tool["function"]:
            problems.append("tool without parameters")
    return problems + _json_schema_format(body, ("json_object", "json_schema"))


def lmstudio(body: Body) -> list[str]:
    return (_ignored_limit(body, "max_tokens") + _contents(body, null_ok=False)
            + _json_schema_format(body, ("text", "json_schema")))


def tgi(body: Body) -> list[str]:
    problems = _ignored_limit(body, "max_tokens") + _contents(body, null_ok=False)
    fmt = body.get("response_format")
    if fmt is not None and (fmt.get("type") not in ("json", "json_object", "regex")
                            or "value" not in fmt):
        problems.append("422: response_format must be {type: json|regex, value}")
    return problems


_MISTRAL_FIELDS = frozenset({
    "model", "messages", "temperature", "top_p", "max_tokens", "stream", "stop", "random_seed",
    "response_format", "tools", "tool_choice", "presence_penalty", "frequency_penalty", "n",
    "prediction", "parallel_tool_calls", "prompt_mode", "safe_prompt",
})
_NINE = re.compile(r"[A-Za-z0-9]{9}")


def mistral(body: Body) -> list[str]:
    problems = [f"422 extra_forbidden: {k}" for k in body if k not in _MISTRAL_FIELDS]
    problems += _contents(body, null_ok=True)
    for m in body["messages"]:
        ids = [c["id"] for c in m.get("tool_calls") or ()]
        ids += [m["tool_call_id"]] if m.get("role") == "tool" else []
        problems += [f"400: tool call id {i!r} is not 9 letters/digits"
                     for i in ids if not _NINE.fullmatch(i)]
    return problems + _json_schema_format(body, ("text", "json_object", "json_schema"))


def groq(body: Body) -> list[str]:
    problems = [f"400: {k} is not supported" for k in ("logprobs", "top_logprobs",
                                                          "logit_bias") if k in body]
    return problems + _contents(body, null_ok=True)


def openai(body: Body) -> list[str]:
    problems = _contents(body, null_ok=True)
    if "max_tokens" in body:
        problems.append("400 on reasoning models: use max_completion_tokens")
    return problems + _json_schema_format(body, ("text", "json_object", "json_schema"))


def generic(body: Body) -> list[str]:
    """What the most servers accept: the intersection the generic dialect aims at."""
    return (_ignored_limit(body, "max_tokens") + _contents(body, null_ok=False)
            + _json_schema_format(body, ("text", "json_object", "json_schema")))


CHECKS: dict[str, Callable[[Body], list[str]]] = {
    "generic": generic,
    "openai": openai,
    "azure": openai,
    "llama.cpp": llama_server,
    "llama-cpp-python": llama_cpp_python,
    "vllm": vllm,
    "sglang": vllm,
    "ollama": ollama,
    "lmstudio": lmstudio,
    "tgi": tgi,
    "litellm": vllm,  # passes OpenAI's form on to the provider behind it
    "openrouter": vllm,
    "groq": groq,
    "deepseek": generic,
    "mistral": mistral,
    "together": generic,
    "fireworks": generic,
}

"""Chat Completions request body -> boto3 ``converse`` / ``converse_stream`` kwargs.

Follows docs/bedrock-converse-mapping.md (part 1). Pure and synchronous: URLs are fetched
beforehand (:func:`remote_media` lists them) and handed in, so the mapping is testable on its
own and the exact request can be asserted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from responses_gateway.backends.bedrock.images import Fetched, Kind
from responses_gateway.backends.bedrock.media import is_remote
from responses_gateway.backends.bedrock.messages import (
    CACHE_TTLS,
    MAX_DOCUMENTS,
    MAX_IMAGES,
    TurnBuilder,
    cache_point,
    too_many_images,
)
from responses_gateway.backends.bedrock.models import ModelInfo, model_info
from responses_gateway.backends.bedrock.names import ToolNames
from responses_gateway.errors import GatewayError

# Claude extended-thinking budgets per reasoning effort (budget_tokens >= 1024).
CLAUDE_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 24576,
                  "max": 32768}
ANSWER_TOKENS = 4096  # room left for the answer when the client set no max
NON_STREAM_MAX_TOKENS = 21333  # above this AWS requires streaming for Claude thinking
_LEVELS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high",
           "max": "high"}
# OpenAI's service_tier -> Converse's serviceTier.type; "auto" (and tiers Bedrock has no
# match for: "scale", "ultrafast") send none, so Bedrock's standard tier serves.
SERVICE_TIERS = {"priority": "priority", "fast": "priority", "default": "default",
                 "flex": "flex"}
_METADATA_VALUE = re.compile(r"[a-zA-Z0-9\s:_@$#=/+,\-.]{0,256}")
JSON_OBJECT_INSTRUCTION = "Respond with a single valid JSON object and nothing else."
DEFAULT_SCHEMA = {"type": "object", "properties": {}}


@dataclass(slots=True)
class ConverseCall:
    """Everything the backend needs for one call: kwargs plus what maps the answer back."""

    kwargs: dict[str, Any]
    model: ModelInfo
    tool_names: dict[str, str] = field(default_factory=dict)  # Bedrock name -> client name


def remote_media(body: Mapping[str, Any]) -> list[tuple[str, Kind]]:
    """http(s) URLs the request's images and files refer to, as (url, kind), to fetch up front.

    Parts are counted first, every source alike: a request with more than Bedrock takes is
    refused here, before anything is downloaded, as :class:`TurnBuilder` would refuse it after.
    Images in tool results are skipped when tool history becomes text (they would be dropped).
    """
    flatten_tools = not _uses_tools(body)
    found: dict[str, Kind] = {}
    images = files = 0
    for i, message in enumerate(body.get("messages") or ()):
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "tool", "function") or not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            param = f"messages[{i}].content[{j}]"
            if part.get("type") == "image_url" and not (role != "user" and flatten_tools):
                images += 1
                if images > MAX_IMAGES:
                    raise too_many_images(f"{param}.image_url")
                image = part.get("image_url")
                url, kind = (image.get("url") if isinstance(image, Mapping) else image), "image"
            elif part.get("type") == "file" and role == "user":
                files += 1  # an image or a document: which, only its bytes will tell
                if images + files > MAX_IMAGES + MAX_DOCUMENTS:
                    raise GatewayError(400, f"Bedrock accepts at most {MAX_IMAGES} images and "
                                       f"{MAX_DOCUMENTS} documents per request.",
                                       param=f"{param}.file")
                file = part.get("file") or {}
                url, kind = file.get("file_data") or file.get("file_url"), "document"
            else:
                continue
            if is_remote(url):
                found.setdefault(url, kind)
    return list(found.items())


def _function_tools(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in body.get("tools") or () if t.get("type", "function") == "function"]


def _uses_tools(body: Mapping[str, Any]) -> bool:
    """Whether Converse gets a toolConfig; without one, tool history is sent as text."""
    return bool(_function_tools(body)) and body.get("tool_choice") != "none"


def build_converse_request(
    body: Mapping[str, Any], *, media: Mapping[str, Fetched] | None = None, stream: bool = True
) -> ConverseCall:
    model = model_info(str(body.get("model") or ""))
    if not model.model_id:
        raise GatewayError(400, "A model is required.", param="model")
    if (body.get("n") or 1) > 1:
        raise GatewayError(400, "The Bedrock backend does not support n > 1.", param="n")

    tools = _function_tools(body)
    use_tools = _uses_tools(body)
    effort = body.get("reasoning_effort")

    names = ToolNames()
    for tool in tools:  # declared tools claim their names before history does
        names((tool.get("function") or {}).get("name") or "")
    builder = TurnBuilder(model, names, flatten_tools=not use_tools, media_urls=media or {})
    options = body.get("prompt_cache_options")
    options = options if isinstance(options, Mapping) else {}
    builder.cache_ttl = CACHE_TTLS.get(options.get("ttl") or "") or (
        CACHE_TTLS["24h"] if body.get("prompt_cache_retention") == "24h" else None)
    for i, message in enumerate(body.get("messages") or ()):
        builder.add(i, message)  # an input part's prompt_cache_breakpoint places a point

    # Where caching pays: after the system prompt and the tools, at the end of the history
    # (the next turn reads it all back). ``mode: "explicit"`` keeps only the client's points.
    cache = (bool(body.get("prompt_cache_key") or options) and model.supports_cache_point
             and options.get("mode") != "explicit")
    kwargs: dict[str, Any] = {"modelId": model.model_id}
    system = builder.system
    if _json_object(body):
        system.append({"text": JSON_OBJECT_INSTRUCTION})
    if system and cache and "cachePoint" not in system[-1] and builder.take_cache_point():
        system.append(cache_point(builder.cache_ttl))
    if system:
        kwargs["system"] = system
    kwargs["messages"] = builder.finish(cache_last_user_turn=cache)
    thinking = model.claude_thinking and effort not in (None, "none")
    if thinking and not _loop_reasoning_intact(kwargs["messages"]):
        effort = None  # Claude would refuse the request; OpenAI just answers without it
        thinking = False

    extra: dict[str, Any] = {}
    inference = _inference_config(body, model)
    if use_tools:
        kwargs["toolConfig"] = _tool_config(body, tools, names, model, extra,
                                            forced_ok=not thinking)
        if cache and model.caches_tools and builder.take_cache_point():
            kwargs["toolConfig"]["tools"].append(cache_point(builder.cache_ttl))
    if builder.cache_points:
        _non_increasing_ttls(kwargs)
    _reasoning(effort, model, inference, extra, stream=stream)
    if inference:
        kwargs["inferenceConfig"] = inference
    if extra:
        kwargs["additionalModelRequestFields"] = extra
    output = _output_config(body)
    if output:
        kwargs["outputConfig"] = output
    metadata = _request_metadata(body.get("metadata"))
    if metadata:
        kwargs["requestMetadata"] = metadata
    tier = SERVICE_TIERS.get(str(body.get("service_tier")))
    if tier is not None:
        kwargs["serviceTier"] = {"type": tier}
    return ConverseCall(kwargs=kwargs, model=model, tool_names=names.renamed())


_TTL_ORDER = {"5m": 0, "1h": 1}


def _non_increasing_ttls(kwargs: dict[str, Any]) -> None:
    """Bedrock reads cache points in the order tools, system, messages and refuses a TTL
    longer than one before it: a later point asking for more gets the earlier one's TTL."""
    blocks = [*(kwargs.get("toolConfig") or {}).get("tools", ()), *kwargs.get("system", ()),
              *(b for turn in kwargs["messages"] for b in turn["content"])]
    ceiling = "1h"
    for block in blocks:
        point = block.get("cachePoint")
        if point is None:
            continue
        ttl = point.get("ttl") or "5m"
        if _TTL_ORDER[ttl] > _TTL_ORDER[ceiling]:
            point["ttl"] = ceiling
        ceiling = point.get("ttl") or "5m"


def _loop_reasoning_intact(turns: list[dict[str, Any]]) -> bool:
    """With thinking on, Claude requires the last assistant turn, when it used tools, to start
    with its signed reasoning; a client that did not send ``encrypted_content`` back lacks it."""
    last = next((t for t in reversed(turns) if t["role"] == "assistant"), None)
    if last is None or not any("toolUse" in b for b in last["content"]):
        return True
    return "reasoningContent" in last["content"][0]


def _inference_config(body: Mapping[str, Any], model: ModelInfo) -> dict[str, Any]:
    config: dict[str, Any] = {}
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is not None:
        config["maxTokens"] = max(1, int(max_tokens))
    temperature = body.get("temperature")
    if temperature is not None:
        config["temperature"] = min(1.0, max(0.0, float(temperature)))  # Converse range is 0-1
    top_p = body.get("top_p")
    if top_p is not None and not (model.is_claude and temperature is not None):
        config["topP"] = float(top_p)  # newer Claude models refuse temperature with top_p
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    stops = [s for s in stops if s]
    if stops:
        config["stopSequences"] = stops
    return config


def _tool_config(
    body: Mapping[str, Any],
    tools: list[Mapping[str, Any]],
    names: ToolNames,
    model: ModelInfo,
    extra: dict[str, Any],
    *,
    forced_ok: bool,
) -> dict[str, Any]:
    specs = [_tool_spec(t.get("function") or {}, names, model) for t in tools]
    choice = body.get("tool_choice")
    kind, forced_name = "auto", None
    if choice == "required":
        kind = "any"
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        kind, forced_name = "tool", names((choice.get("function") or {}).get("name") or "")
        if forced_name not in {s["toolSpec"]["name"] for s in specs}:
            raise GatewayError(400, "tool_choice names a function that is not in tools.",
                               param="tool_choice")
        if not (model.is_claude or model.family in ("nova", "nova2")):
            # Specific choice is Claude/Nova only: offer just that tool and require a call.
            specs = [s for s in specs if s["toolSpec"]["name"] == forced_name]
            kind = "any"
    if not forced_ok:
        kind, forced_name = "auto", None  # Claude thinking refuses forced tool use
    config: dict[str, Any] = {"tools": specs}
    if body.get("parallel_tool_calls") is False and model.is_claude:
        # Claude's own switch; sending toolConfig.toolChoice as well is a conflict error.
        anthropic_choice: dict[str, Any] = {"type": kind, "disable_parallel_tool_use": True}
        if kind == "tool":
            anthropic_choice["name"] = forced_name
        extra["tool_choice"] = anthropic_choice
    elif kind == "any":
        config["toolChoice"] = {"any": {}}
    elif kind == "tool":
        config["toolChoice"] = {"tool": {"name": forced_name}}
    return config


def _tool_spec(fn: Mapping[str, Any], names: ToolNames, model: ModelInfo) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": names(fn.get("name") or "")}
    if fn.get("description"):
        spec["description"] = fn["description"]
    spec["inputSchema"] = {"json": fn.get("parameters") or DEFAULT_SCHEMA}
    if fn.get("strict") and model.supports_structured_output:
        spec["strict"] = True
    return {"toolSpec": spec}


def _reasoning(
    effort: str | None,
    model: ModelInfo,
    inference: dict[str, Any],
    extra: dict[str, Any],
    *,
    stream: bool,
) -> None:
    if effort in (None, "none"):
        return
    level = _LEVELS.get(effort, "medium")
    if model.claude_thinking:
        budget = CLAUDE_BUDGETS.get(effort, CLAUDE_BUDGETS["medium"])
        max_tokens = inference.get("maxTokens")
        if max_tokens is None:
            max_tokens = budget + ANSWER_TOKENS
            if not stream:
                max_tokens = min(max_tokens, NON_STREAM_MAX_TOKENS)
        if max_tokens <= budget:  # budget must stay below maxTokens (it is part of it)
            budget = max(1024, max_tokens // 2)
            if max_tokens <= budget:
                max_tokens = budget + max_tokens
        inference["maxTokens"] = max_tokens
        inference.pop("temperature", None)
        inference.pop("topP", None)
        extra["thinking"] = {"type": "enabled", "budget_tokens": budget}
    elif model.family == "nova2":
        extra["reasoningConfig"] = {"type": "enabled", "maxReasoningEffort": level}
        if level == "high":  # Nova refuses sampling and maxTokens with high effort
            for key in ("maxTokens", "temperature", "topP"):
                inference.pop(key, None)
    elif model.family == "gpt-oss":
        extra["reasoning_effort"] = level


def _json_object(body: Mapping[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") == "json_object"


def _output_config(body: Mapping[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return None
    js = fmt.get("json_schema") or {}
    schema: dict[str, Any] = {"schema": json.dumps(js.get("schema") or DEFAULT_SCHEMA)}
    if js.get("name"):
        schema["name"] = js["name"]
    if js.get("description"):
        schema["description"] = js["description"]
    return {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": schema}}}


def _request_metadata(metadata: Any) -> dict[str, str] | None:
    """Chat ``metadata`` pairs that fit Bedrock's rules (≤16, restricted charset)."""
    if not isinstance(metadata, Mapping):
        return None
    kept = {
        k: v for k, v in metadata.items()
        if isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= 256
        and _METADATA_VALUE.fullmatch(k) and _METADATA_VALUE.fullmatch(v)
    }
    return dict(list(kept.items())[:16]) or None

"""The Response object: every field the Responses API defines, echoing the request.

Built once per response; the stream translator then mutates this one dict (status, output,
usage, error) so the created/terminal events, the non-stream answer and the stored record are
the same object at different moments.
"""

from __future__ import annotations

from typing import Any

from responses_gateway.tools import registry

# Field order and defaults as OpenAI sends them (see tests/fixtures/responses-streams).
_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("background", False),
    ("completed_at", None),
    ("error", None),
    ("frequency_penalty", 0.0),
    ("incomplete_details", None),
    ("instructions", None),
    ("max_output_tokens", None),
    ("max_tool_calls", None),
    ("model", ""),
    ("moderation", None),
    ("output", None),
    ("parallel_tool_calls", True),
    ("presence_penalty", 0.0),
    ("previous_response_id", None),
    ("prompt_cache_key", None),
    ("prompt_cache_retention", None),
    ("reasoning", None),
    ("safety_identifier", None),
    ("service_tier", "default"),
    ("store", True),
    ("temperature", 1.0),
    ("text", None),
    ("tool_choice", "auto"),
    ("tool_usage", None),
    ("tools", None),
    ("top_logprobs", 0),
    ("top_p", 1.0),
    ("truncation", "disabled"),
    ("usage", None),
    ("user", None),
    ("metadata", None),
)

#: Fields a Response carries only when the request set them (openai-python 3.57):
#: translate/request_options.py and translate/reasoning_context.py.
_WHEN_SENT = ("access_programs", "image", "input_transformations")


def new_response(
    echo: dict[str, Any], *, response_id: str, created_at: int, status: str = "in_progress"
) -> dict[str, Any]:
    """A fresh Response object; ``echo`` holds the request fields the response repeats."""
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
    }
    for key, default in _DEFAULTS:
        value = echo.get(key, default)
        response[key] = default if value is None and default is not None else value
    for key in _WHEN_SENT:
        if echo.get(key):
            response[key] = echo[key]
    response["output"] = []
    if echo.get("prompt_cache_options") is not None:  # as applied, when the request set it
        response["prompt_cache_options"] = echo["prompt_cache_options"]
    if response["tools"] is None:
        response["tools"] = []
    if response["metadata"] is None:
        response["metadata"] = {}
    if response["text"] is None:
        response["text"] = {"format": {"type": "text"}, "verbosity": "medium"}
    if response["reasoning"] is None:
        response["reasoning"] = {"effort": None, "summary": None}
    if response["tool_usage"] is None:
        response["tool_usage"] = zero_tool_usage()
    return response


def zero_tool_usage() -> dict[str, Any]:
    """``tool_usage`` before any call of a tool the gateway runs: OpenAI reports every family
    with zero counts, not nothing (each server tool's registration says its own,
    tools/registry.py). The calls add theirs (:func:`sum_usage`)."""
    return registry.zero_tool_usage()


def sum_usage(before: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any]:
    """Two usage objects as one: every count added up, nested objects alike (the model turns
    of one response; the tool calls of its ``tool_usage``)."""
    if before is None or usage is None:
        return _copy(before or usage or {})  # a copy all the way down: shared constants stay
    total: dict[str, Any] = {}
    for key in {**before, **usage}:  # in order: the first object's keys, then new ones
        a, b = before.get(key), usage.get(key)
        if isinstance(a, dict) or isinstance(b, dict):
            total[key] = sum_usage(a if isinstance(a, dict) else None,
                                   b if isinstance(b, dict) else None)
        elif isinstance(a, int) or isinstance(b, int):
            total[key] = (a if isinstance(a, int) else 0) + (b if isinstance(b, int) else 0)
        else:
            total[key] = b if b is not None else a
    return total


def usage_from_chat(usage: dict[str, Any]) -> dict[str, Any]:
    """Chat ``usage`` → Responses ``usage`` (cached and reasoning tokens included).

    Upstreams are not trusted to send well-formed numbers: anything else counts as 0.
    """
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    total = _count(usage.get("total_tokens")) or prompt + completion
    prompt_details = _object(usage.get("prompt_tokens_details"))
    completion_details = _object(usage.get("completion_tokens_details"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cache_write_tokens": _count(prompt_details.get("cache_write_tokens")),
            "cached_tokens": _count(prompt_details.get("cached_tokens")),
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _count(completion_details.get("reasoning_tokens"))
        },
        "total_tokens": total,
    }


def _copy(usage: dict[str, Any]) -> dict[str, Any]:
    return {key: _copy(value) if isinstance(value, dict) else value
            for key, value in usage.items()}


def _count(value: Any) -> int:
    return value if value.__class__ is int and value > 0 else 0


def _object(value: Any) -> dict[str, Any]:
    return value if value.__class__ is dict else {}


# ``Response.error.code`` is an enum in OpenAI's API (the openai SDKs type it as a Literal);
# the gateway's own codes (upstream_timeout, store_unavailable, worker_lost...) are not in
# it, so they travel in the message and the code says ``server_error``.
RESPONSE_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch",
    "bio_policy", "misalignment_policy_violation", "vector_store_timeout", "invalid_image",
    "invalid_image_format", "invalid_base64_image", "invalid_image_url", "image_too_large",
    "image_too_small", "image_parse_error", "image_content_policy_violation",
    "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found",
})


def response_error(code: str | None, message: str) -> dict[str, str]:
    """The ``error`` of a failed Response: a documented code, the detail in the message."""
    if code in RESPONSE_ERROR_CODES:
        return {"code": code, "message": message}  # type: ignore[dict-item]
    if code and code not in message:
        message = f"{message} ({code})"
    return {"code": "server_error", "message": message}

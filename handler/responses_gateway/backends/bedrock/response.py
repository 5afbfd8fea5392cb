"""A ``converse`` (non-stream) response -> one ``chat.completion`` dict (mapping doc part 3).

Same field conventions as :mod:`.stream`, so the shared translator sees the same reasoning
details, tool ids and usage whichever way the model was called.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from responses_gateway.backends.bedrock.stream import FINISH_REASONS, usage_from
from responses_gateway.errors import UpstreamError


def completion_from_converse(
    response: dict[str, Any],
    *,
    model: str,
    tool_names: dict[str, str] | None = None,
    reasoning_format: str,
) -> dict[str, Any]:
    names = tool_names or {}
    texts: list[str] = []
    reasoning: list[str] = []
    details: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning_blocks = 0
    message_content = ((response.get("output") or {}).get("message") or {}).get("content") or ()
    for block in message_content:
        if "text" in block:
            texts.append(block["text"])
        elif "citationsContent" in block:
            texts.extend(c.get("text", "") for c in block["citationsContent"].get("content") or ())
        elif "toolUse" in block:
            tool = block["toolUse"]
            if tool.get("type") == "server_tool_use":
                continue
            calls.append({"id": tool.get("toolUseId"), "type": "function", "function": {
                "name": names.get(tool.get("name", ""), tool.get("name", "")),
                "arguments": json.dumps(tool.get("input") or {}, ensure_ascii=False)}})
        elif "reasoningContent" in block:
            content = block["reasoningContent"]
            index = reasoning_blocks
            reasoning_blocks += 1
            if "reasoningText" in content:
                rt = content["reasoningText"]
                reasoning.append(rt.get("text") or "")
                if rt.get("signature"):
                    details.append({"type": "reasoning.text", "text": rt.get("text") or "",
                                    "signature": rt["signature"], "format": reasoning_format,
                                    "index": index})
            elif "redactedContent" in content:
                details.append({"type": "reasoning.encrypted",
                                "data": base64.b64encode(content["redactedContent"]).decode(),
                                "format": reasoning_format, "index": index})

    reason = response.get("stopReason") or ""
    if reason in ("malformed_model_output", "malformed_tool_use"):
        if reason == "malformed_model_output" or not _arguments_valid(calls):
            raise UpstreamError(502, f"Bedrock stopped the response: {reason}.",
                                code="server_error")
        reason = "tool_use"
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None,
                               "refusal": None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if details:
        message["reasoning_details"] = details
    if calls:
        message["tool_calls"] = calls
    request_id = (response.get("ResponseMetadata") or {}).get("RequestId") or ""
    completion: dict[str, Any] = {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": FINISH_REASONS.get(reason, "stop")}],
        "usage": usage_from(response.get("usage") or {}),
    }
    tier = (response.get("serviceTier") or {}).get("type")
    if tier:
        completion["service_tier"] = tier
    return completion


def _arguments_valid(calls: list[dict[str, Any]]) -> bool:
    """``converse`` returns parsed input documents, so only an empty call list is suspect."""
    return bool(calls)

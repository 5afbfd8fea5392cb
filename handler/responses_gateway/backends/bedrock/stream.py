"""ConverseStream events -> ``chat.completion.chunk`` dicts (mapping doc part 2).

One :class:`StreamTranslator` per response; :meth:`StreamTranslator.feed` takes one parsed
event and returns at most one chunk, shaped as an OpenAI-compatible server streams it:

* text -> ``delta.content``; reasoning text -> ``delta.reasoning_content``;
* a reasoning signature -> ``delta.reasoning_details = [{"type": "reasoning.text",
  "signature": …, "format", "index"}]`` (no text: it went out as ``reasoning_content``
  already, and the Responses translator would show it twice) and redacted reasoning ->
  ``[{"type": "reasoning.encrypted", "data": <base64>, …}]``, as OpenRouter streams them; the
  Responses translator seals these into ``encrypted_content``, and the request mapping reads
  them back (with the text joined in) as signed reasoning blocks;
* tool calls are numbered by their own ordinal, not by ``contentBlockIndex`` (text and
  reasoning blocks use indices too); server-side tool blocks are not client calls and are
  skipped;
* ``messageStop`` -> ``finish_reason``; ``metadata`` -> a ``choices: []`` usage chunk.

Text blocks usually arrive without ``contentBlockStart``, so block state is created on demand.
Empty deltas (an empty text block before reasoning, an empty reasoning delta before the
signature) produce nothing, so no empty message item is opened downstream.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from responses_gateway.backends.bedrock.failures import error_chunk
from responses_gateway.errors import UpstreamError

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "content_filtered": "content_filter",
    "guardrail_intervened": "content_filter",
}
CLAUDE_REASONING_FORMAT = "anthropic-claude-v1"
OTHER_REASONING_FORMAT = "bedrock-converse"

_TOOL, _REASONING, _SKIP, _TEXT = 1, 2, 3, 4


class _Block:
    __slots__ = ("args", "kind", "ordinal", "text")

    def __init__(self, kind: int, ordinal: int = 0) -> None:
        self.kind = kind
        self.ordinal = ordinal  # tool-call index or reasoning-block index
        self.text: list[str] = []  # tool argument fragments
        self.args = False  # a tool block got a non-empty argument fragment


def usage_from(usage: dict[str, Any]) -> dict[str, Any]:
    """Bedrock ``inputTokens`` excludes cache traffic; OpenAI's ``prompt_tokens`` includes it."""
    cache_read = usage.get("cacheReadInputTokens") or 0
    cache_write = usage.get("cacheWriteInputTokens") or 0
    prompt = max(0, usage.get("inputTokens") or 0) + cache_read + cache_write
    completion = usage.get("outputTokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
    }


def tool_arguments_valid(fragments: list[list[str]]) -> bool:
    for parts in fragments:
        try:
            json.loads("".join(parts) or "{}")
        except ValueError:
            return False
    return True


class StreamTranslator:
    """State for one ConverseStream; ``finished`` tells whether messageStop was seen."""

    def __init__(
        self,
        *,
        chunk_id: str,
        model: str,
        created: int,
        tool_names: dict[str, str] | None = None,
        reasoning_format: str = CLAUDE_REASONING_FORMAT,
    ) -> None:
        self.id = chunk_id
        self.model = model
        self.created = created
        self.tool_names = tool_names or {}
        self.reasoning_format = reasoning_format
        self.finished = False
        self.failed = False
        self._blocks: dict[int, _Block] = {}
        self._tools: list[_Block] = []
        self._reasoning_blocks = 0

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        body = event.get("contentBlockDelta")
        if body is not None:
            return self._delta(body["contentBlockIndex"], body.get("delta") or {})
        if (body := event.get("contentBlockStart")) is not None:
            return self._start(body["contentBlockIndex"], body.get("start") or {})
        if (body := event.get("contentBlockStop")) is not None:
            return self._stop(body["contentBlockIndex"])
        if "messageStart" in event:
            return self._chunk({"role": "assistant", "content": ""})
        if (body := event.get("messageStop")) is not None:
            return self._message_stop(body.get("stopReason") or "")
        if (body := event.get("metadata")) is not None:
            chunk = self._chunk({})
            chunk["choices"] = []
            chunk["usage"] = usage_from(body.get("usage") or {})
            tier = (body.get("serviceTier") or {}).get("type")
            if tier:
                chunk["service_tier"] = tier
            return chunk
        return None  # event kinds added later are ignored, as botocore does

    def _block(self, index: int, kind: int) -> _Block:
        block = self._blocks.get(index)
        if block is None:
            if kind == _TOOL:
                block = _Block(_TOOL, len(self._tools))
                self._tools.append(block)
            elif kind == _REASONING:
                block = _Block(_REASONING, self._reasoning_blocks)
                self._reasoning_blocks += 1
            else:
                block = _Block(kind)
            self._blocks[index] = block
        return block

    def _start(self, index: int, start: dict[str, Any]) -> dict[str, Any] | None:
        tool = start.get("toolUse")
        if tool is None or tool.get("type") == "server_tool_use":
            self._blocks[index] = _Block(_SKIP)  # server-side tool call / result / image
            return None
        block = self._block(index, _TOOL)
        name = tool.get("name") or ""
        return self._chunk({"tool_calls": [{
            "index": block.ordinal,
            "id": tool.get("toolUseId") or f"tooluse_{self.id[-8:]}_{block.ordinal}",
            "type": "function",
            "function": {"name": self.tool_names.get(name, name), "arguments": ""},
        }]})

    def _delta(self, index: int, delta: dict[str, Any]) -> dict[str, Any] | None:
        text = delta.get("text")
        if text is not None:
            block = self._blocks.get(index)
            if not text or (block is not None and block.kind == _SKIP):
                return None
            return self._chunk({"content": text})
        reasoning = delta.get("reasoningContent")
        if reasoning is not None:
            return self._reasoning(self._block(index, _REASONING), reasoning)
        tool = delta.get("toolUse")
        if tool is not None:
            known = index in self._blocks
            block = self._block(index, _TOOL)
            if block.kind != _TOOL:
                return None
            fragment = tool.get("input") or ""
            if not known:  # a delta without contentBlockStart: open the call here
                block.args = bool(fragment)
                block.text.append(fragment)
                return self._chunk({"tool_calls": [{
                    "index": block.ordinal, "id": f"tooluse_{self.id[-8:]}_{block.ordinal}",
                    "type": "function", "function": {"name": "", "arguments": fragment}}]})
            if not fragment:
                return None
            block.args = True
            block.text.append(fragment)
            return self._chunk({"tool_calls": [{"index": block.ordinal,
                                                "function": {"arguments": fragment}}]})
        return None  # citation / server-side toolResult / image deltas

    def _reasoning(self, block: _Block, reasoning: dict[str, Any]) -> dict[str, Any] | None:
        if block.kind != _REASONING:
            return None
        text = reasoning.get("text")
        if text is not None:
            return self._chunk({"reasoning_content": text}) if text else None
        signature = reasoning.get("signature")
        if signature is not None:
            return self._chunk({"reasoning_details": [{
                "type": "reasoning.text", "signature": signature,
                "format": self.reasoning_format, "index": block.ordinal}]})
        redacted = reasoning.get("redactedContent")
        if redacted is not None:
            data = redacted if isinstance(redacted, str) else base64.b64encode(redacted).decode()
            return self._chunk({"reasoning_details": [{
                "type": "reasoning.encrypted", "data": data,
                "format": self.reasoning_format, "index": block.ordinal}]})
        return None

    def _stop(self, index: int) -> dict[str, Any] | None:
        block = self._blocks.get(index)
        if block is None or block.kind != _TOOL or block.args:
            return None
        block.args = True  # a call without arguments still has a JSON object
        block.text.append("{}")
        return self._chunk({"tool_calls": [{"index": block.ordinal,
                                            "function": {"arguments": "{}"}}]})

    def _message_stop(self, reason: str) -> dict[str, Any]:
        if reason == "malformed_tool_use" and tool_arguments_valid([b.text for b in self._tools]):
            reason = "tool_use"
        if reason in ("malformed_model_output", "malformed_tool_use"):
            self.failed = True
            return error_chunk(UpstreamError(
                502, f"Bedrock stopped the response: {reason}.", code="server_error"))
        self.finished = True
        return self._chunk({}, FINISH_REASONS.get(reason, "stop"))

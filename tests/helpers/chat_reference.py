"""What a chat completion stream carried, read independently of the translator.

Used as the reference the translated Responses events must reproduce: fixture files are parsed
here with their own small SSE reader (not the gateway's), and the content of choice 0 is
accumulated with the simplest rules that fit every recorded provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CHAT_STREAMS = FIXTURES / "chat-streams"
RESPONSES_STREAMS = FIXTURES / "responses-streams"


def chat_fixtures() -> list[Path]:
    return sorted(p for p in CHAT_STREAMS.iterdir() if p.suffix in (".sse", ".jsonl"))


def fixture_lines(path: Path) -> list[bytes]:
    """Upstream SSE lines as an HTTP client yields them (no newline, ``b""`` separators).

    ``.jsonl`` fixtures hold one chunk per line: each becomes ``data: <line>`` plus a blank line.
    """
    raw = path.read_bytes()
    if path.suffix == ".jsonl":
        lines: list[bytes] = []
        for line in raw.splitlines():
            if line.strip():
                lines += [b"data: " + line, b""]
        return lines
    return raw.replace(b"\r\n", b"\n").split(b"\n")


def sse_frames(raw: bytes) -> list[tuple[str | None, str]]:
    """``(event, data)`` per SSE event; a minimal reader independent of ``responses_gateway``."""
    frames: list[tuple[str | None, str]] = []
    event: str | None = None
    data: list[str] = []
    for line in [*raw.decode().replace("\r\n", "\n").split("\n"), ""]:
        if not line:
            if data:
                frames.append((event, "\n".join(data)))
            event, data = None, []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            event = line[6:].strip()
    return frames


def fixture_chunks(path: Path) -> list[dict[str, Any]]:
    """The chunks of a chat fixture; an ``event: error`` frame becomes ``{"error": ...}``."""
    raw = path.read_bytes()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in raw.splitlines() if line.strip()]
    chunks = []
    for event, data in sse_frames(raw):
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if event == "error" and "error" not in chunk:
            chunk = {"error": chunk}
        chunks.append(chunk)
    return chunks


@dataclass
class ChatContent:
    """Everything choice 0 of a chat stream carried."""

    text: str = ""
    refusal: str = ""
    reasoning: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)  # {"id", "name", "arguments"}
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    signatures: list[str] = field(default_factory=list)
    encrypted: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # choice.logprobs.content

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.finish_reason in ("length", "content_filter"):
            return "incomplete"
        return "completed"

    @property
    def incomplete_reason(self) -> str | None:
        if self.error is not None:
            return None
        return {"length": "max_output_tokens", "content_filter": "content_filter"}.get(
            self.finish_reason or ""
        )


def _details_text(details: list[dict[str, Any]] | None) -> str:
    return "".join(
        d.get("text") or d.get("summary") or ""
        for d in details or []
        if d.get("type") in ("reasoning.text", "reasoning.summary")
    )


def chat_content(chunks: list[dict[str, Any]]) -> ChatContent:
    """Accumulate choice 0; stop at the first chunk carrying ``error`` (after its choices)."""
    out = ChatContent()
    text: list[str] = []
    refusal: list[str] = []
    reasoning: list[str] = []
    by_index: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            plain = delta.get("reasoning_content") or delta.get("reasoning")
            details = delta.get("reasoning_details") or []
            from_details = _details_text(details)
            if isinstance(plain, str) and plain:
                # OpenRouter sends the same text twice, as `reasoning` and inside
                # `reasoning_details`: count it once.
                assert not from_details or from_details == plain, (plain, from_details)
                reasoning.append(plain)
            else:
                reasoning.append(from_details)
            for detail in details:
                if detail.get("signature"):
                    out.signatures.append(detail["signature"])
                if detail.get("type") == "reasoning.encrypted" and detail.get("data"):
                    out.encrypted.append(detail["data"])
            content = delta.get("content")
            if isinstance(content, str):
                text.append(content)
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, str):
                        text.append(part)
                    elif part.get("type") == "text":
                        text.append(part.get("text") or "")
                    elif part.get("type") in ("thinking", "reasoning"):
                        thinking = part.get("thinking") or part.get("text") or ""
                        if isinstance(thinking, list):
                            thinking = "".join(
                                s.get("text") or "" if isinstance(s, dict) else s for s in thinking
                            )
                        reasoning.append(thinking)
                        if part.get("signature"):
                            out.signatures.append(part["signature"])
            if isinstance(delta.get("refusal"), str):
                refusal.append(delta["refusal"])
            for tool_call in delta.get("tool_calls") or []:
                _add_tool_call(out.calls, by_index, tool_call)
            logprobs = choice.get("logprobs") or {}
            out.logprobs.extend(logprobs.get("content") or [])
            if choice.get("finish_reason"):
                out.finish_reason = choice["finish_reason"]
        if chunk.get("error") is not None:
            out.error = chunk["error"]
            break
        if chunk.get("usage"):
            out.usage = chunk["usage"]
    out.text, out.refusal, out.reasoning = "".join(text), "".join(refusal), "".join(reasoning)
    out.calls = [c for c in out.calls if c["name"] or c["arguments"]]
    return out


def _add_tool_call(
    calls: list[dict[str, str]], by_index: dict[int, dict[str, str]], tool_call: dict[str, Any]
) -> None:
    """A fragment joins the call of its ``index`` unless it names another id; fragments with
    neither index nor id continue the latest call."""
    index = tool_call.get("index")
    call_id = tool_call.get("id") or ""
    function = tool_call.get("function") or {}
    call = None
    if index is not None:
        known = by_index.get(index)
        if known is not None and (not call_id or call_id == known["id"]):
            call = known
    if call is None and call_id:
        call = next((c for c in calls if c["id"] == call_id), None)
    if call is None and index is None and not call_id and calls:
        call = calls[-1]
    if call is None:
        call = {"id": call_id, "name": "", "arguments": ""}
        calls.append(call)
    if index is not None:
        by_index[index] = call
    if function.get("name") and not call["name"]:
        call["name"] = function["name"]
    call["arguments"] += function.get("arguments") or ""


def chat_completion(content: ChatContent) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` a server would have sent for the same answer."""
    message: dict[str, Any] = {"role": "assistant", "content": content.text or None}
    if content.reasoning:
        message["reasoning_content"] = content.reasoning
    details: list[dict[str, Any]] = [
        {"type": "reasoning.text", "text": content.reasoning, "signature": signature}
        for signature in content.signatures
    ]
    details += [{"type": "reasoning.encrypted", "data": data} for data in content.encrypted]
    if details:
        message["reasoning_details"] = details  # OpenRouter's non-streaming shape
    if content.refusal:
        message["refusal"] = content.refusal
    if content.calls:
        message["tool_calls"] = [
            {
                "id": call["id"] or f"call_{i}",
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for i, call in enumerate(content.calls)
        ]
    completion: dict[str, Any] = {
        "id": "chatcmpl-nonstream",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": message, "finish_reason": content.finish_reason or "stop"}
        ],
    }
    if content.usage:
        completion["usage"] = content.usage
    return completion

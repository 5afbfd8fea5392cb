"""Chat messages -> Converse ``system`` blocks and alternating ``messages`` turns.

Converse is stricter than Chat Completions: system text lives outside the turns; roles
must alternate starting with ``user``; all ``toolResult`` blocks answering an assistant turn
sit (first) in the single user turn right after it; no empty turns or blank text; images and
documents only in user turns; a signed reasoning block must open the assistant turn that
carried it. Building turns by appending blocks to the last turn when the role repeats gives
most of that for free; :func:`_finish` enforces the rest.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from responses_gateway.backends.bedrock import media
from responses_gateway.backends.bedrock.images import Fetched
from responses_gateway.backends.bedrock.models import ModelInfo
from responses_gateway.backends.bedrock.names import CallIds, ToolNames
from responses_gateway.errors import GatewayError

Block = dict[str, Any]
Turn = dict[str, Any]  # {"role": "user" | "assistant", "content": [Block, ...]}

MAX_IMAGES = 20
MAX_DOCUMENTS = 5
MAX_CACHE_POINTS = 4
CACHE_POINT: Block = {"cachePoint": {"type": "default"}}
#: Cache lifetimes a request may ask for -> the Bedrock TTL that keeps at least that long where
#: Bedrock can (OpenAI's ``ttl`` is a minimum: "30m" needs "1h"; "12h" and the deprecated
#: ``prompt_cache_retention: "24h"`` get the longest Bedrock has). Bedrock's own values pass.
CACHE_TTLS = {"5m": "5m", "1h": "1h", "30m": "1h", "12h": "1h", "24h": "1h"}


def cache_point(ttl: str | None = None) -> Block:
    """A ``cachePoint`` block, with a ``ttl`` when one was asked for (else Bedrock's 5 m)."""
    return {"cachePoint": {"type": "default", "ttl": ttl}} if ttl else dict(CACHE_POINT)
START_TEXT = "(start of conversation)"
DOCUMENT_TEXT = "(see the attached document)"
EMPTY_RESULT = "(empty)"
# Reasoning formats whose signatures Claude on Bedrock can verify.
_CLAUDE_FORMATS = frozenset({None, "", "anthropic-claude-v1", "bedrock-converse"})


class TurnBuilder:
    """Accumulates system blocks and turns for one request."""

    def __init__(
        self,
        model: ModelInfo,
        names: ToolNames,
        *,
        flatten_tools: bool,
        media_urls: Mapping[str, Fetched],
    ) -> None:
        self.model = model
        self.names = names
        self.flatten_tools = flatten_tools  # no toolConfig: tool history becomes plain text
        self.media_urls = media_urls
        self.ids = CallIds()
        self.documents = media.DocumentNamer()
        self.system: list[Block] = []
        self.turns: list[Turn] = []
        self.images = 0
        self.document_count = 0
        self.cache_points = 0
        self.cache_ttl: str | None = None  # the request's TTL for every cache point it places

    # -- per message -----------------------------------------------------------------------

    def add(self, index: int, message: Mapping[str, Any]) -> None:
        role = message.get("role")
        param = f"messages[{index}]"
        if role in ("system", "developer"):
            self._system_blocks(message.get("content"))
        elif role == "user":
            self._append("user", self._user_blocks(message.get("content"), param))
        elif role == "assistant":
            if not self.turns or self.turns[-1]["role"] != "assistant":
                self.ids.new_turn()
            self._append("assistant", self._assistant_blocks(message))
        elif role in ("tool", "function"):
            self._append("user", [self._tool_result(message, param)])
        else:
            raise GatewayError(400, f"Unsupported message role {role!r}.", param=f"{param}.role")

    def _append(self, role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if self.turns and self.turns[-1]["role"] == role:
            self.turns[-1]["content"].extend(blocks)
        else:
            self.turns.append({"role": role, "content": blocks})

    def _user_blocks(self, content: Any, param: str) -> list[Block]:
        if isinstance(content, str):
            return [{"text": content}] if content.strip() else []
        blocks: list[Block] = []
        for j, part in enumerate(content or ()):
            p = f"{param}.content[{j}]"
            kind = part.get("type")
            if kind in ("text", "input_text"):
                text = part.get("text") or ""
                if text.strip():
                    blocks.append({"text": text})
            elif kind == "image_url":
                generated = bool(blocks) and str(blocks[-1].get("text", "")).startswith(
                    media.GENERATED_INTRO)
                blocks.append(self._image(part.get("image_url"), p, generated=generated))
            elif kind == "file":
                blocks.append(self._file(part.get("file") or {}, p))
            elif kind == "input_audio":
                raise GatewayError(400, "Audio input is not supported by the Bedrock backend.",
                                   param=p, code="unsupported_value")
            else:
                raise GatewayError(400, f"Unsupported content part type {kind!r}.", param=p)
            self._mark(blocks, part)
        return blocks

    def _system_blocks(self, content: Any) -> None:
        """System text blocks; a part marked as a cache breakpoint is followed by a point."""
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for part in parts or ():
            text = _texts([part])
            if text and text[0].strip():
                self.system.append({"text": text[0]})
            self._mark(self.system, part)

    def _mark(self, blocks: list[Block], part: Mapping[str, Any]) -> None:
        """A ``cachePoint`` after the blocks so far when ``part`` asks for a breakpoint (its
        own TTL, else the request's), if the model caches and a point is left."""
        marked = part.get("prompt_cache_breakpoint") or part.get("cache_control")
        if (marked and blocks and "cachePoint" not in blocks[-1]
                and self.take_cache_point()):
            own = marked.get("ttl") if isinstance(marked, Mapping) else None
            blocks.append(cache_point(CACHE_TTLS.get(own or "") or self.cache_ttl))

    def _assistant_blocks(self, message: Mapping[str, Any]) -> list[Block]:
        blocks: list[Block] = []
        if self.model.is_claude:
            blocks.extend(reasoning_blocks(message.get("reasoning_details")))
        text = "".join(_texts(message.get("content"))) or (message.get("refusal") or "")
        if text.strip():
            blocks.append({"text": text})
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            name = fn.get("name") or ""
            arguments = fn.get("arguments") or ""
            call_id = self.ids.for_call(call.get("id") or "", name)
            if self.flatten_tools:
                blocks.append({"text": f"[Called tool {name} with arguments: {arguments or '{}'}]"})
            else:
                blocks.append({"toolUse": {"toolUseId": call_id, "name": self.names(name),
                                           "input": _tool_input(arguments)}})
        return blocks

    def _tool_result(self, message: Mapping[str, Any], param: str) -> Block:
        original = message.get("tool_call_id") or ""
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"text": content}] if content.strip() else []
        else:
            blocks = []
            for j, part in enumerate(content or ()):
                if part.get("type") in ("text", "input_text") and (part.get("text") or "").strip():
                    blocks.append({"text": part["text"]})
                elif part.get("type") == "image_url" and not self.flatten_tools:
                    blocks.append(self._image(part.get("image_url"), f"{param}.content[{j}]"))
        if self.flatten_tools:
            name = self.ids.names.get(original) or message.get("name") or "tool"
            text = "\n".join(b["text"] for b in blocks) or EMPTY_RESULT
            return {"text": f"[Result of tool {name} (call {original})]:\n{text}"}
        return {"toolResult": {"toolUseId": self.ids.for_result(original),
                               "content": blocks or [{"text": EMPTY_RESULT}]}}

    # -- media -----------------------------------------------------------------------------

    def _image(self, image_url: Any, param: str, *, generated: bool = False) -> Block:
        url = image_url.get("url") if isinstance(image_url, Mapping) else image_url
        param = f"{param}.image_url"
        if not isinstance(url, str) or not url:
            raise GatewayError(400, "An image part needs a URL.", param=param)
        if url.startswith("data:"):
            declared, data = media.decode_data_url(url, param=param)
        elif media.is_remote(url) and url in self.media_urls:
            fetched = self.media_urls[url]
            declared, data = fetched.content_type, fetched.data
        else:
            raise GatewayError(400, "Image URLs must be http(s) or data URLs.", param=param,
                               code="invalid_image_url")
        if generated:  # the image_generation tool's, within Converse's limits
            data, declared = media.fit_generated(data, declared)
        return self._image_block(data, declared, param)

    def _image_block(self, data: bytes, declared: str | None, param: str) -> Block:
        self.images += 1
        if self.images > MAX_IMAGES:
            raise too_many_images(param)
        fmt = media.image_format(data, declared, param=param)
        return {"image": {"format": fmt, "source": {"bytes": data}}}

    def _file(self, file: Mapping[str, Any], param: str) -> Block:
        param = f"{param}.file"
        filename = file.get("filename")
        # A Responses file_url arrives as chat file_data (see translate/to_chat.py).
        source = file.get("file_data") or file.get("file_url")
        if isinstance(source, str) and source.startswith("data:"):
            declared, data = media.decode_data_url(source, param=param)
        elif media.is_remote(source):
            fetched = self.media_urls.get(source)
            if fetched is None:
                raise GatewayError(400, "This file URL was not downloaded.", param=param,
                                   code="invalid_file_url")
            declared, data = fetched.content_type, fetched.data
        elif isinstance(file.get("file_data"), str) and file["file_data"]:
            if media.has_scheme(file["file_data"]):  # a URL, not base64 (to_chat.py)
                raise GatewayError(400, "File URLs must be http(s) or data URLs.", param=param,
                                   code="invalid_file_url")
            declared, data = None, media.decode_base64(file["file_data"], param=param)
        elif file.get("file_url"):
            raise GatewayError(400, "File URLs must be http(s) or data URLs.", param=param,
                               code="invalid_file_url")
        elif file.get("file_id"):
            raise GatewayError(400, "File ids cannot be resolved by the Bedrock backend; send "
                               "the file inline as file_data.", param=param,
                               code="unsupported_value")
        else:
            raise GatewayError(400, "A file part needs file_data or file_url.", param=param)
        if media.sniff_image(data) or media.media_type(declared) in media.IMAGE_FORMATS:
            return self._image_block(data, declared, param)
        self.document_count += 1
        if self.document_count > MAX_DOCUMENTS:
            raise too_many_documents(param)
        fmt = media.document_format(data, declared, filename, param=param)
        return {"document": {"format": fmt, "name": self.documents(filename),
                             "source": {"bytes": data}}}

    def take_cache_point(self) -> bool:
        """Whether one more cachePoint may be placed (model support, at most four)."""
        if not self.model.supports_cache_point or self.cache_points >= MAX_CACHE_POINTS:
            return False
        self.cache_points += 1
        return True

    # -- whole conversation ----------------------------------------------------------------

    def finish(self, *, cache_last_user_turn: bool) -> list[Turn]:
        turns = self.turns
        for i, turn in enumerate(turns):
            content = turn["content"]
            if turn["role"] == "assistant":
                turn["content"] = _reasoning_first(content)
                continue
            answered = _tool_use_ids(turns[i - 1]) if i and turns[i - 1]["role"] == "assistant" \
                else set()
            turn["content"] = content = _results_first(content, answered)
            if any("document" in b for b in content) and not any("text" in b for b in content):
                content.append({"text": DOCUMENT_TEXT})
        if not turns or turns[0]["role"] != "user":
            turns.insert(0, {"role": "user", "content": [{"text": START_TEXT}]})
        if cache_last_user_turn:
            last_user = next(t for t in reversed(turns) if t["role"] == "user")
            if "cachePoint" not in last_user["content"][-1] and self.take_cache_point():
                last_user["content"].append(cache_point(self.cache_ttl))
        return turns


def too_many_images(param: str) -> GatewayError:
    return GatewayError(400, f"Bedrock accepts at most {MAX_IMAGES} images per request.",
                        param=param)


def too_many_documents(param: str) -> GatewayError:
    return GatewayError(400, f"Bedrock accepts at most {MAX_DOCUMENTS} documents per request.",
                        param=param)


def _texts(content: Any) -> list[str]:
    """Text of a string content or of text-like parts (text, output_text, refusal)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    out = []
    for part in content:
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            out.append(part.get("text") or "")
        elif kind == "refusal":
            out.append(part.get("refusal") or "")
    return out


def _tool_input(arguments: str) -> dict[str, Any]:
    """Converse wants a JSON object; anything else is wrapped rather than sent as a string."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def reasoning_blocks(details: Any) -> list[Block]:
    """OpenRouter-style ``reasoning_details`` -> signed ``reasoningContent`` blocks.

    Consecutive ``reasoning.text`` entries with the same ``index`` are fragments of one block
    until one carries the signature (OpenRouter streams them so); an entry with text and
    signature is a whole block. Unsigned text cannot be verified by Claude and is dropped, as
    are entries in another provider's format.
    """
    blocks: list[Block] = []
    current: dict[str, Any] | None = None

    def flush() -> None:
        if current and current["signature"]:
            blocks.append({"reasoningContent": {"reasoningText": {
                "text": "".join(current["text"]), "signature": current["signature"]}}})

    for entry in details or ():
        if not isinstance(entry, Mapping) or entry.get("format") not in _CLAUDE_FORMATS:
            continue
        kind = entry.get("type")
        if kind == "reasoning.text":
            if current is None or current["signature"] or entry.get("index") != current["index"]:
                flush()
                current = {"index": entry.get("index"), "text": [], "signature": None}
            current["text"].append(entry.get("text") or "")
            current["signature"] = entry.get("signature") or current["signature"]
        elif kind == "reasoning.encrypted" and entry.get("data"):
            flush()
            current = None
            try:
                data = base64.b64decode(entry["data"], validate=True)
            except (binascii.Error, ValueError):
                continue
            blocks.append({"reasoningContent": {"redactedContent": data}})
    flush()
    return blocks


def _tool_use_ids(turn: Turn) -> set[str]:
    return {b["toolUse"]["toolUseId"] for b in turn["content"] if "toolUse" in b}


def _reasoning_first(content: list[Block]) -> list[Block]:
    """Merged assistant messages may carry reasoning mid-turn; Claude wants it first."""
    reasoning = [b for b in content if "reasoningContent" in b]
    if not reasoning:
        return content
    return reasoning + [b for b in content if "reasoningContent" not in b]


def _results_first(content: list[Block], answered: set[str]) -> list[Block]:
    """Tool results for the previous assistant turn first; orphans become text."""
    results: list[Block] = []
    rest: list[Block] = []
    seen: set[str] = set()
    for block in content:
        result = block.get("toolResult")
        if result is None:
            rest.append(block)
        elif result["toolUseId"] in answered and result["toolUseId"] not in seen:
            seen.add(result["toolUseId"])
            results.append(block)
        else:
            text = "\n".join(c.get("text", "") for c in result["content"]).strip() or EMPTY_RESULT
            rest.append({"text": f"[Result of tool call {result['toolUseId']}]:\n{text}"})
    return results + rest if results else rest

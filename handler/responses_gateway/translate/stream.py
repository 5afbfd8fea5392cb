"""The one state machine: chat completion chunks in, Responses events out.

The Response object being built is the single source of truth (after openai-python's stream
accumulator, run in reverse): every event records one mutation of it, and the terminal event
carries that same object. Streaming and non-streaming share this code: a ``chat.completion``
is fed as one chunk whose ``message`` plays the part of ``delta``.

Rules kept here, for every provider's quirks:
- exactly one item is open at a time; starting a new one closes the open one, so events of
  different items never interleave and ``output_index`` is dense, in start order;
- reasoning (``reasoning_content``, ``reasoning``, ``reasoning_details``, thinking parts of a
  content array) becomes a ``reasoning`` item, text a ``message`` item, ``refusal`` a refusal
  part of the message, each tool call a ``function_call`` item, added once its name is known;
- the terminal event is emitted once, by :meth:`finish` or :meth:`fail`; nothing follows it.

A response may span several model turns (tools the gateway runs, tools/server.py): the turn
loop (responses/turns.py) ends each turn with :meth:`end_turn` (close what is open, keep the
usage, hand over the calls the gateway must run), lets each server tool open and close its
items through the :class:`~responses_gateway.tools.server.ItemWriter` methods
(``start_tool_item``, ``tool_item_event``, ``end_tool_item``), and feeds the next turn to this
same translator, so ids, output indexes and sequence numbers continue and usage is summed over
turns. A call's chat function name says what it stands for (``TranslateOptions.tools``): a
namespace member (``function_call`` with ``namespace``), a ``custom`` tool
(``custom_tool_call``), a server tool's function (run by the gateway).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.backends.chunks import parse_chunk
from responses_gateway.tools.catalog import ToolSpec
from responses_gateway.tools.server import ServerCall
from responses_gateway.translate.item_kinds import CALL as _CALL
from responses_gateway.translate.item_kinds import CALL_KINDS as _CALL_KINDS
from responses_gateway.translate.item_kinds import CLIENT as _CLIENT
from responses_gateway.translate.item_kinds import CUSTOM as _CUSTOM
from responses_gateway.translate.item_kinds import NONE as _NONE
from responses_gateway.translate.item_kinds import REASONING as _REASONING
from responses_gateway.translate.item_kinds import REFUSAL as _REFUSAL
from responses_gateway.translate.item_kinds import SERVER as _SERVER
from responses_gateway.translate.item_kinds import TEXT as _TEXT
from responses_gateway.translate.item_kinds import TOOL_ITEM as _TOOL_ITEM
from responses_gateway.translate.item_kinds import TranslationError
from responses_gateway.translate.response_object import (
    response_error,
    sum_usage,
    usage_from_chat,
)
from responses_gateway.translate.stream_calls import CallItems, _Call
from responses_gateway.translate.stream_options import TranslateOptions
from responses_gateway.translate.stream_reasoning import ReasoningItems
from responses_gateway.translate.stream_repeat import _Repeat

Event = dict[str, Any]

_NO_LOGPROBS: list[Any] = []  # shared by text deltas without logprobs; never mutated

_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
_NO_CHOICE: dict[str, Any] = {}
#: The tiers a Response may report (others an upstream names, "" or "on_demand", are not).
_SERVICE_TIERS = frozenset({"auto", "default", "flex", "scale", "priority"})
_TEXT_DELTA = "response.output_text.delta"
_ARGS_DELTA = "response.function_call_arguments.delta"
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_REPEAT_MAX_MISSES = 4  # repeat shapes that never matched (per-chunk nonces): stop learning


class ResponseTranslator(CallItems, ReasoningItems):
    """Feed chunks, collect events. ``response`` is the live snapshot."""

    __slots__ = (
        "_call",
        "_calls_by_id",
        "_calls_by_index",
        "_compacting",
        "_content_index",
        "_detail_text",
        "_details",
        "_finish_reason",
        "_fragment_seen",
        "_item",
        "_item_id",
        "_kind",
        "_logprobs",
        "_open_index",
        "_output_index",
        "_pieces",
        "_reasoning_delta_type",
        "_reasoning_index_key",
        "_repeat",
        "_repeat_misses",
        "_seq",
        "_tools",
        "_usage",
        "_usage_before",
        "_want_logprobs",
        "client_calls",
        "done",
        "options",
        "response",
        "sealed_reasoning",
        "server_calls",
    )

    def __init__(self, response: dict[str, Any], options: TranslateOptions | None = None) -> None:
        self.response = response
        self.options = options or TranslateOptions()
        self.done = False
        self._want_logprobs = self.options.logprobs
        summary = self.options.summary
        self._reasoning_delta_type = (
            "response.reasoning_summary_text.delta" if summary else "response.reasoning_text.delta"
        )
        self._reasoning_index_key = "summary_index" if summary else "content_index"
        #: item id -> sealed reasoning blob, kept even when the client did not ask to see it,
        #: so a stored chain can send signatures back upstream.
        self.sealed_reasoning: dict[str, str] = {}
        self._seq = 0
        self._kind = _NONE
        self._item: dict[str, Any] | None = None
        self._item_id = ""
        self._output_index = -1
        self._content_index = -1
        self._pieces: list[str] = []
        self._logprobs: list[Any] = []
        self._details: list[dict[str, Any]] = []
        self._detail_text: list[str] = []  # text of reasoning_details since the last signature
        self._call: _Call | None = None
        self._open_index: int | None = -1  # the open call's upstream index (-1: none open)
        self._calls_by_index: dict[int, _Call] = {}
        self._calls_by_id: dict[str, _Call] = {}
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._fragment_seen: str | None = None  # the last chunk was only this fragment
        self._repeat: _Repeat | None = None
        self._repeat_misses = 0
        self._tools = self.options.tools or None
        self._usage_before: dict[str, Any] | None = None  # usage of the turns already ended
        self._compacting: str | None = None  # the compaction item compacting was sent for
        #: this turn's calls the client must answer (function, custom) and the gateway's own
        self.client_calls = 0
        self.server_calls: list[ServerCall] = []

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def finish_reason(self) -> str | None:
        """The upstream's finish_reason, once a chunk carried one."""
        return self._finish_reason

    @property
    def sequence_number(self) -> int:
        """The sequence number the next event will get."""
        return self._seq

    def start(self) -> list[Event]:
        """``response.created`` and ``response.in_progress``: sent before upstream answers."""
        status = self.response["status"]
        events = [self._snapshot_event("response.created")]
        if status == "queued":
            events.append(self._snapshot_event("response.queued"))
            self.response["status"] = "in_progress"
        events.append(self._snapshot_event("response.in_progress"))
        return events

    def feed(self, chunk: dict[str, Any] | bytes) -> list[Event]:
        """Apply one chat.completion.chunk (or a whole chat.completion).

        ``chunk`` is a dict, or the chunk's JSON as the upstream sent it. Most providers send
        every fragment of an item as the same bytes around a new string (same id, created,
        model, field order): once a chunk was nothing but a fragment for the open item, the
        bytes around its string are kept (:class:`_Repeat`), and a next chunk with those same
        bytes around one JSON string is another such fragment, without parsing the rest.
        Anything else is parsed whole. See docs/translation.md.
        """
        if chunk.__class__ is not bytes:
            self._repeat = None
            return self._feed(chunk)  # type: ignore[arg-type]
        data: bytes = chunk  # type: ignore[assignment]
        repeat = self._repeat
        if repeat is not None:
            if repeat.matches(data):
                try:
                    value = _loads(data[repeat.start : len(data) - repeat.tail])
                except _JSONDecodeError:
                    value = None
                if value.__class__ is str:
                    out: list[Event] = []
                    if value:
                        self._fragment(value, out)
                    repeat.hits += 1
                    return out
            self._repeat = None
            if not repeat.hits:
                self._repeat_misses += 1
        try:
            parsed = _loads(data)
        except _JSONDecodeError:
            parsed = None
        if parsed.__class__ is not dict:
            parsed = parse_chunk(None, data)  # an error chunk; None for [DONE]
            if parsed is None:
                return []
        if self._repeat_misses >= _REPEAT_MAX_MISSES:
            return self._feed(parsed)
        self._fragment_seen = None
        out = self._feed(parsed)
        value = self._fragment_seen
        if value is not None and not self.done:
            self._repeat = _Repeat.learn(data, parsed, value, self._kind)
            if self._repeat is None:
                self._repeat_misses += 1
        return out

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if self.done:
            return out
        try:
            choices = chunk.get("choices")
            if choices:
                choice = choices[0]
                if choice.get("index"):
                    # n > 1: only choice 0 is the answer; chunks of other choices carry nothing.
                    choice = next((c for c in choices if c.get("index", 0) == 0), _NO_CHOICE)
                delta = choice.get("delta") or choice.get("message")
                if delta:
                    # Hot paths: one more fragment for the item already open, nothing else in
                    # the delta. Anything unusual takes _apply_delta.
                    kind = self._kind
                    value = None
                    if kind == _TEXT:
                        content = delta.get("content")
                        if (
                            content.__class__ is str
                            and (len(delta) == 1 or not _has_other_parts(delta.get))
                            and not self._want_logprobs
                        ):
                            value = content
                    elif kind == _REASONING:
                        get = delta.get
                        content = get("reasoning_content") or get("reasoning")
                        if (
                            content.__class__ is str
                            and self._content_index >= 0
                            and (
                                (n := len(delta)) == 1
                                or (n == 2 and get("content", 0) is None)  # DeepSeek's shape
                                or not (get("content") or get("reasoning_details")
                                        or get("refusal") or get("tool_calls"))
                            )
                        ):
                            value = content
                    elif kind == _CALL:
                        calls = delta.get("tool_calls")
                        if (
                            calls
                            and len(calls) == 1
                            and (len(delta) == 1 or not _has_other_call_parts(delta.get))
                        ):
                            call = calls[0]
                            function = call.get("function")
                            index = call.get("index")
                            if (
                                function
                                and (index is None or index == self._open_index)
                                and not call.get("id")
                                and not function.get("name")
                            ):
                                value = function.get("arguments") or ""
                                if value.__class__ is not str:
                                    raise TranslationError("tool call arguments not a string")
                    if value is None:
                        self._apply_delta(delta, choice, out)
                    else:
                        if value:
                            self._fragment(value, out)
                        if not choice.get("finish_reason"):
                            self._fragment_seen = value
                reason = choice.get("finish_reason")
                if reason:
                    self._finish_reason = reason if reason.__class__ is str else str(reason)
            if "error" in chunk:
                out.extend(self._fail_from_upstream(chunk["error"]))
                return out
            usage = chunk.get("usage")
            if usage:
                if usage.__class__ is not dict:
                    raise TypeError("usage is not an object")
                self._usage = usage
                self._fragment_seen = None
                tier = chunk.get("service_tier")
                if tier in _SERVICE_TIERS:  # the tier that served it, as the upstream says
                    self.response["service_tier"] = tier
            return out
        except TranslationError as exc:
            out.extend(self.fail("upstream_protocol_error", str(exc)))
            return out
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            # A chunk of the wrong shape ({"choices": [null]}, "usage": "x", ...): the
            # upstream broke the protocol; end the response failed, keeping what was sent.
            out.extend(self.fail(
                "upstream_protocol_error",
                f"The upstream sent a malformed chunk ({type(exc).__name__}: {exc}).",
            ))
            return out

    def _fragment(self, value: str, out: list[Event]) -> None:
        """One more fragment of the open item's text, reasoning or arguments."""
        seq = self._seq
        self._seq = seq + 1
        kind = self._kind
        if kind == _TEXT:
            self._pieces.append(value)
            out.append({"type": _TEXT_DELTA, "item_id": self._item_id,
                        "output_index": self._output_index,
                        "content_index": self._content_index,
                        "delta": value, "logprobs": _NO_LOGPROBS, "sequence_number": seq})
        elif kind == _REASONING:
            self._pieces.append(value)
            out.append({"type": self._reasoning_delta_type, "item_id": self._item_id,
                        "output_index": self._output_index,
                        self._reasoning_index_key: self._content_index,
                        "delta": value, "sequence_number": seq})
        else:
            self._call.args.append(value)  # type: ignore[union-attr]
            out.append({"type": _ARGS_DELTA, "item_id": self._item_id,
                        "output_index": self._output_index,
                        "delta": value, "sequence_number": seq})

    def finish(self) -> list[Event]:
        """The upstream ended cleanly: close what is open and emit the terminal event.

        A stream that ended with neither a ``finish_reason`` nor ``usage`` was cut off
        (llama-cpp-python ends a running stream with ``[DONE]`` alone when another request
        arrives): the model did not finish and no ``incomplete_details.reason`` says why, so
        the response fails with its partial output. ``usage`` without a ``finish_reason`` is
        a finished answer (Snowflake Cortex never sends one). See docs/upstreams.md.
        """
        if self.done:
            return []
        if self._finish_reason is None and self._usage is None:
            return self.fail(
                "upstream_no_finish_reason",
                "Upstream error: the stream ended without a finish_reason; the output may be "
                "cut off.",
            )
        out: list[Event] = []
        reason = _INCOMPLETE_REASONS.get(self._finish_reason or "")
        self._close(out, "incomplete" if reason else "completed")
        self._close_pending_calls(out)
        response = self.response
        self._set_usage()
        if reason:
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": reason}
            out.append(self._terminal("response.incomplete"))
        else:
            response["status"] = "completed"
            response["completed_at"] = int(time.time())
            out.append(self._terminal("response.completed"))
        return out

    def fail(self, code: str, message: str) -> list[Event]:
        """The upstream broke: close open items, keep the partial output, emit ``failed``."""
        if self.done:
            return []
        out: list[Event] = []
        if self._kind in _CALL_KINDS:
            self._abandon_call()
        else:
            self._close(out, "incomplete")
        response = self.response
        self._set_usage()
        response["status"] = "failed"
        response["error"] = response_error(code, message)
        out.append(self._terminal("response.failed"))
        return out

    def steered(self) -> list[Event]:
        """A ``response.steer`` stopped the response at a safe point (responses/steering.py):
        close what is open, keep the output so far, end ``incomplete`` with
        ``incomplete_details.reason: "steered"``."""
        if self.done:
            return []
        out: list[Event] = []
        self._close(out, "incomplete")
        self._set_usage()
        response = self.response
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "steered"}
        out.append(self._terminal("response.incomplete"))
        return out

    @property
    def steerable(self) -> bool:
        """No call is open or made in this turn: ending here leaves no call without its
        output (a steer's safe point)."""
        return (self._kind not in _CALL_KINDS and self._kind not in (_SERVER, _TOOL_ITEM)
                and not self.client_calls and not self.server_calls
                and self._call is None and not self._calls_by_index and not self._calls_by_id)

    def event(self, event: Event) -> Event:
        """``event`` numbered in this response's stream (an event the session adds to it)."""
        return self._event(event)

    def end_turn(self) -> list[Event]:
        """The upstream ended one model turn and the gateway runs its calls before the next:
        close what is open, keep the turn's usage, start the next turn's bookkeeping. The
        calls to run are in ``server_calls`` until the next turn starts."""
        if self.done:
            return []
        out: list[Event] = []
        self._close(out, "completed")
        self._close_pending_calls(out)
        if self._usage is not None:
            self._usage_before = sum_usage(self._usage_before, usage_from_chat(self._usage))
        self._usage = None
        self._calls_by_index = {}
        self._calls_by_id = {}
        self._open_index = -1
        self._repeat = None
        self._fragment_seen = None
        return out

    def next_turn(self) -> None:
        """The gateway ran the last turn's calls; the next model turn starts. (Without one,
        :meth:`finish` ends the response on the last turn's finish_reason.)"""
        self.client_calls = 0
        self.server_calls = []
        self._finish_reason = None

    @property
    def turn_usage(self) -> dict[str, Any] | None:
        """The upstream's (chat) usage of the model turn being fed, once a chunk carried it."""
        return self._usage

    def stop_at_output_limit(self) -> None:
        """The response's ``max_output_tokens`` is spent across its model turns
        (responses/turns.py) and no turn may follow: :meth:`finish` ends it as a turn cut at
        its cap ends, ``incomplete`` with ``incomplete_details.reason: "max_output_tokens"``."""
        self._finish_reason = "length"

    def stop_for_client(self) -> None:
        """Calls run before any model turn (a resumed program's, responses/turns.py) wait for
        the client: :meth:`finish` ends the response ``completed``, as a turn ending with the
        client's calls does, though no model turn ran."""
        self._finish_reason = "tool_calls"

    @property
    def wants_tool_turn(self) -> bool:
        """The model's turn ended with calls the gateway runs (and was not cut short)."""
        return (bool(self.server_calls) or self._kind == _SERVER) and (
            self._finish_reason not in _INCOMPLETE_REASONS
        )

    def _set_usage(self) -> None:
        usage = usage_from_chat(self._usage) if self._usage is not None else None
        if self._usage_before is not None:
            usage = sum_usage(self._usage_before, usage)
        if usage is not None:
            self.response["usage"] = usage

    # -- items of the tools the gateway runs (tools/server.py's ItemWriter) -------------------

    def start_tool_item(self, item: dict[str, Any], progress: str | None) -> list[Event]:
        out: list[Event] = []
        self._close(out, "completed")
        self._kind = _TOOL_ITEM
        self._add_item(item, out)
        if progress is not None:
            out.append(self._item_event(progress))
        return out

    def tool_item_event(self, kind: str, **fields: Any) -> Event:
        assert self._kind == _TOOL_ITEM, f"{kind} with no tool item open"
        return self._event(
            {"type": kind, "item_id": self._item_id, "output_index": self._output_index,
             **fields}
        )

    def end_tool_item(self, status: str, event: str | None) -> list[Event]:
        item = self._item
        assert self._kind == _TOOL_ITEM and item is not None, "no tool item is open"
        if "status" in item:
            item["status"] = status
        out = [] if event is None else [self._item_event(event)]
        self._close(out, status)
        return out

    @property
    def tool_item(self) -> dict[str, Any] | None:
        """The tool item open now (between ``start_tool_item`` and ``end_tool_item``)."""
        return self._item if self._kind == _TOOL_ITEM else None

    def _item_event(self, kind: str) -> Event:
        return self._event(
            {"type": kind, "item_id": self._item_id, "output_index": self._output_index}
        )

    def cancel(self) -> None:
        """Stop without a terminal event (the response was cancelled elsewhere)."""
        if self._kind in _CALL_KINDS:
            self._abandon_call()
        else:
            self._close([], "incomplete")
        self.response["status"] = "cancelled"
        self.done = True
        self._repeat = None

    # -- chunk handling --------------------------------------------------------------------

    def _apply_delta(self, delta: dict[str, Any], choice: dict[str, Any], out: list[Event]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            self._reasoning(reasoning, out)  # first: a signature below closes text up to here
        details = delta.get("reasoning_details")
        if details:
            self._reasoning_details(details, not reasoning, out)
        content = delta.get("content")
        if content:
            if content.__class__ is str:
                logprobs = None
                if self._want_logprobs:
                    lp = choice.get("logprobs")
                    logprobs = _logprobs(lp.get("content")) if lp else None
                self._text(content, logprobs, out)
            elif isinstance(content, list):
                self._content_parts(content, out)
        refusal = delta.get("refusal")
        if refusal:
            if refusal.__class__ is not str:
                raise TranslationError("a refusal that is not a string")
            self._refusal(refusal, out)
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            for tool_call in tool_calls:
                self._tool_call(tool_call, out)

    def _content_parts(self, parts: list[Any], out: list[Event]) -> None:
        """Content as an array of typed parts (Mistral magistral: thinking, then text)."""
        for part in parts:
            if isinstance(part, str):
                self._text(part, None, out)
                continue
            kind = part.get("type")
            if kind == "text":
                if part.get("text"):
                    self._text(part["text"], None, out)
            elif kind in ("thinking", "reasoning"):
                thinking = part.get("thinking") or part.get("text") or part.get("reasoning")
                if isinstance(thinking, str):
                    if thinking:
                        self._reasoning(thinking, out)
                elif isinstance(thinking, list):
                    for sub in thinking:
                        text = sub.get("text") if isinstance(sub, dict) else sub
                        if text:
                            self._reasoning(text, out)
                signature = part.get("signature")
                if signature:
                    self._open_reasoning(out)
                    self._signed_block(signature, {})

    def _text(self, text: str, logprobs: list[Any] | None, out: list[Event]) -> None:
        if text.__class__ is not str:
            raise TranslationError("text content that is not a string")
        if self._kind != _TEXT:
            self._open_message_part(_TEXT, out)
        if not logprobs:
            self._fragment(text, out)
            return
        self._pieces.append(text)
        self._logprobs.extend(logprobs)
        self._seq += 1
        out.append(
            {
                "type": "response.output_text.delta",
                "item_id": self._item_id,
                "output_index": self._output_index,
                "content_index": self._content_index,
                "delta": text,
                "logprobs": logprobs,
                "sequence_number": self._seq - 1,
            }
        )

    def _refusal(self, text: str, out: list[Event]) -> None:
        if self._kind != _REFUSAL:
            self._open_message_part(_REFUSAL, out)
        self._pieces.append(text)
        self._seq += 1
        out.append(
            {
                "type": "response.refusal.delta",
                "item_id": self._item_id,
                "output_index": self._output_index,
                "content_index": self._content_index,
                "delta": text,
                "sequence_number": self._seq - 1,
            }
        )


    # -- opening and closing items -----------------------------------------------------------

    def compacting(self, item_id: str) -> list[Event]:
        """``response.compaction.compacting`` for the compaction item about to be written at
        the next output index (openai-python 3.57: summary output is being sampled): a
        streamed create's compaction runs after it (responses/job.py)."""
        self._compacting = item_id
        return [self._event({"type": "response.compaction.compacting", "item_id": item_id,
                             "output_index": len(self.response["output"])})]

    def set_tools(self, tools: dict[str, ToolSpec] | None) -> None:
        """What the chat function names stand for, when a compaction rendered them again."""
        self.options.tools = tools
        self._tools = tools or None

    def add_finished_item(self, item: dict[str, Any]) -> list[Event]:
        """An item the gateway made whole before the model ran (a compaction item, by
        responses/fitting/): its ``output_item.added`` and ``.done`` at the next output index.

        A compaction item's summary was sampled: ``response.compaction.compacting`` comes
        before the two (once: a streamed create sent it while compacting, :meth:`compacting`;
        a compaction done before ``response.created``, in the background, sends it here)."""
        out: list[Event] = []
        self._close(out, "completed")
        output = self.response["output"]
        index = len(output)
        if item.get("type") == "compaction" and self._compacting != item["id"]:
            out.append(self._event({"type": "response.compaction.compacting",
                                    "item_id": item["id"], "output_index": index}))
        output.append(item)
        out.append(self._event({"type": "response.output_item.added", "output_index": index,
                                "item": dict(item)}))
        out.append(self._event({"type": "response.output_item.done", "output_index": index,
                                "item": dict(item)}))
        return out

    def add_usage(self, usage: dict[str, Any] | None) -> None:
        """Responses usage of work done for this response beside its model turns (a
        compaction's summarising calls): counted in the response's ``usage``."""
        if usage:
            self._usage_before = sum_usage(self._usage_before, usage)

    def add_tool_usage(self, usage: dict[str, Any] | None) -> None:
        """What a call of a tool the gateway runs reports (a search, an image's tokens):
        counted in the response's ``tool_usage``, as OpenAI counts its hosted tools'."""
        if usage:
            self.response["tool_usage"] = sum_usage(self.response.get("tool_usage"), usage)

    def _add_item(self, item: dict[str, Any], out: list[Event]) -> None:
        output = self.response["output"]
        self._output_index = len(output)
        output.append(item)
        self._item = item
        self._item_id = item["id"]
        self._pieces = []
        self._content_index = -1
        out.append(
            self._event(
                {
                    "type": "response.output_item.added",
                    "output_index": self._output_index,
                    "item": {k: [] if v.__class__ is list else v for k, v in item.items()},
                }
            )
        )


    def _open_message_part(self, kind: int, out: list[Event]) -> None:
        if self._kind == _TEXT or self._kind == _REFUSAL:
            self._close_part(out)  # text then refusal (or back): a new part of the same message
        else:
            self._close(out, "completed")
            self._add_item(
                {
                    "id": ids.new_id(ids.MESSAGE),
                    "type": "message",
                    "status": "in_progress",
                    "content": [],
                    "role": "assistant",
                },
                out,
            )
        self._kind = kind
        self._pieces = []
        self._logprobs = []
        self._content_index = len(self._item["content"])  # type: ignore[index]
        if kind == _TEXT:
            part: dict[str, Any] = {
                "type": "output_text",
                "annotations": [],
                "logprobs": [],
                "text": "",
            }
        else:
            part = {"type": "refusal", "refusal": ""}
        out.append(
            self._event(
                {
                    "type": "response.content_part.added",
                    "item_id": self._item_id,
                    "output_index": self._output_index,
                    "content_index": self._content_index,
                    "part": part,
                }
            )
        )


    def _close_part(self, out: list[Event]) -> None:
        """Close the open content part of the open message."""
        text = "".join(self._pieces)
        base = {
            "item_id": self._item_id,
            "output_index": self._output_index,
            "content_index": self._content_index,
        }
        if self._kind == _TEXT:
            logprobs = self._logprobs
            annotate = self.options.annotate
            annotations = annotate(text) if annotate is not None else []
            for index, annotation in enumerate(annotations):
                out.append(self._event({"type": "response.output_text.annotation.added", **base,
                                        "annotation_index": index, "annotation": annotation}))
            part = {"type": "output_text", "annotations": annotations, "logprobs": logprobs,
                    "text": text}
            out.append(
                self._event(
                    {
                        "type": "response.output_text.done",
                        **base,
                        "text": text,
                        "logprobs": logprobs,
                    }
                )
            )
        else:
            part = {"type": "refusal", "refusal": text}
            out.append(self._event({"type": "response.refusal.done", **base, "refusal": text}))
        self._item["content"].append(part)  # type: ignore[index]
        out.append(self._event({"type": "response.content_part.done", **base, "part": part}))

    def _close(self, out: list[Event], status: str) -> None:
        """Close the open item, if any, with ``status``."""
        kind = self._kind
        if kind == _NONE:
            return
        if kind == _SERVER:
            call = self._call
            assert call is not None and call.spec is not None
            call.state = 2
            self._call = None
            self._kind = _NONE
            self.server_calls.append(
                ServerCall(call.call_id, call.spec, call.arguments, fragments=call.args))
            return
        if kind == _CLIENT:
            self._close_client(out, status)  # stream_calls.py: the typed item, made whole
            return
        if kind in (_CALL, _CUSTOM):
            self.client_calls += 1
        item = self._item
        assert item is not None
        if kind in (_TEXT, _REFUSAL):
            self._close_part(out)
            item["status"] = status
        elif kind == _REASONING:
            self._close_reasoning(item, out)
        elif kind == _TOOL_ITEM:
            if "status" in item and item["status"] == "in_progress":
                item["status"] = status
        elif kind == _CUSTOM:
            self._close_custom(item, out)
        else:
            call = self._call
            assert call is not None
            arguments = "".join(call.args)
            item["arguments"] = arguments
            item["status"] = status
            call.state = 2
            self._call = None
            out.append(
                self._event(
                    {
                        "type": "response.function_call_arguments.done",
                        "item_id": self._item_id,
                        "output_index": self._output_index,
                        "arguments": arguments,
                    }
                )
            )
        self._kind = _NONE
        self._item = None
        self._pieces = []
        out.append(
            self._event(
                {
                    "type": "response.output_item.done",
                    "output_index": self._output_index,
                    "item": item,
                }
            )
        )


    # -- events --------------------------------------------------------------------------------

    def _event(self, event: Event) -> Event:
        event["sequence_number"] = self._seq
        self._seq += 1
        return event

    def _snapshot_event(self, kind: str) -> Event:
        snapshot = dict(self.response)
        snapshot["output"] = list(snapshot["output"])
        return self._event({"type": kind, "response": snapshot})

    def _terminal(self, kind: str) -> Event:
        self.done = True
        self._repeat = None
        return self._event({"type": kind, "response": self.response})

    def _fail_from_upstream(self, error: Any) -> list[Event]:
        if isinstance(error, dict):
            code = error.get("code") or error.get("type") or "upstream_error"
            message = error.get("message") or "The upstream model server reported an error."
        else:
            code, message = "upstream_error", str(error)
        return self.fail(str(code), f"Upstream error: {message}")


def _has_other_call_parts(get: Callable[[str], Any]) -> bool:
    return bool(
        get("content") or get("reasoning_content") or get("reasoning")
        or get("reasoning_details") or get("refusal")
    )


def _has_other_parts(get: Callable[[str], Any]) -> bool:
    """Whether a delta that carries text also carries reasoning, refusal or tool calls."""
    return bool(
        get("reasoning_content") or get("reasoning") or get("reasoning_details")
        or get("refusal") or get("tool_calls")
    )


def _logprobs(entries: Any) -> list[Any] | None:
    """Chat logprobs as the Responses schema types them: ``bytes`` is a list of ints, which
    some servers send as null (llama.cpp); the token's UTF-8 is what it means."""
    if not entries or entries.__class__ is not list:
        return None
    for entry in entries:
        if entry.__class__ is not dict:
            raise TranslationError("a logprob entry that is not an object")
        _fill_bytes(entry)
        top = entry.get("top_logprobs")
        if top.__class__ is list:
            for alternative in top:
                if alternative.__class__ is dict:
                    _fill_bytes(alternative)
        else:
            entry["top_logprobs"] = []
    return entries


def _fill_bytes(entry: dict[str, Any]) -> None:
    if entry.get("bytes").__class__ is not list:
        token = entry.get("token")
        entry["bytes"] = list(token.encode()) if token.__class__ is str else []

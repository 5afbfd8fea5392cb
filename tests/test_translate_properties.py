"""Property tests: any valid chat chunk sequence gives a valid Responses stream with its content.

Hypothesis builds an answer (reasoning, text, refusal and tool-call segments in any order), then
renders it as chunks with the quirks real providers show: calls without ``index``, a first index
of 1, every call on index 0 with distinct ids, empty-name follow-ups, trailing empty argument
deltas, single-chunk and parallel calls (fragments contiguous per call), reasoning as
``reasoning_content`` / ``reasoning`` / ``reasoning_details`` / thinking parts, usage on any chunk,
noise chunks (role only, empty strings, nulls, other choices), any finish_reason or none, and an
optional upstream error. Whatever comes out must pass the grammar and both judges, and the
content read back from the events must be exactly what was fed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from responses_gateway.sse import encode_event
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.chat_reference import chat_content
from tests.helpers.responses_validation import (
    check_grammar,
    events_from_sse,
    reconstruct,
    validate_event,
    validate_response,
)

pytestmark = pytest.mark.slow

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
PIECES = st.lists(TEXT, min_size=1, max_size=4)
NAME = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@dataclass
class Call:
    name: str
    fragments: list[str]
    start: str  # "name_first" (id+name, args ""), "single" (one chunk), "args_first"
    has_id: bool
    empty_name_followups: bool
    trailing_empty: bool


@dataclass
class Segment:
    kind: str  # "reasoning", "text", "refusal", "calls"
    pieces: list[str] = field(default_factory=list)
    style: str = ""  # reasoning: reasoning_content | reasoning | details | both | thinking
    calls: list[Call] = field(default_factory=list)
    parallel_single_chunk: bool = False


@st.composite
def calls(draw: st.DrawFn, index_mode: str) -> Call:
    # Without an index, fragments can only follow an open call: the name must come first.
    starts = ["name_first", "single"] + ["args_first"] * (index_mode != "none")
    return Call(
        name=draw(NAME),
        fragments=draw(st.lists(TEXT, max_size=4)),
        start=draw(st.sampled_from(starts)),
        has_id=index_mode != "normal" or draw(st.booleans()),
        empty_name_followups=draw(st.booleans()),
        trailing_empty=draw(st.booleans()),
    )


@st.composite
def segments(draw: st.DrawFn, index_mode: str) -> Segment:
    kind = draw(st.sampled_from(["reasoning", "text", "refusal", "calls"]))
    if kind == "calls":
        return Segment(
            kind,
            calls=draw(st.lists(calls(index_mode), min_size=1, max_size=3)),
            parallel_single_chunk=draw(st.booleans()),
        )
    style = ""
    if kind == "reasoning":
        style = draw(st.sampled_from(["reasoning_content", "reasoning", "details", "both",
                                      "thinking"]))
    return Segment(kind, pieces=draw(PIECES), style=style)


@dataclass
class Scenario:
    index_mode: str  # one provider, one style: "normal", "none" (no index), "zero" (always 0)
    segments: list[Segment]
    finish_reason: str | None
    finish_separate: bool
    usage_mode: str  # none | final_chunk | on_finish | every_chunk | middle
    usage_at: int  # for "middle": which chunk (mod len) carries the usage
    error: str | None  # None | "plain" | "with_choices"
    noise: list[int]  # positions (mod len) where noise chunks go
    first_index: int
    options: TranslateOptions


OPTIONS = [
    TranslateOptions(),
    TranslateOptions(summary=True),
    TranslateOptions(logprobs=True),
    TranslateOptions(encrypted_reasoning=True, seal=lambda payload: f"sealed:{len(str(payload))}"),
]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    index_mode = draw(st.sampled_from(["normal", "none", "zero"]))
    return Scenario(
        index_mode=index_mode,
        segments=draw(st.lists(segments(index_mode), max_size=6)),
        finish_reason=draw(st.sampled_from([None, "stop", "tool_calls", "length",
                                            "content_filter"])),
        finish_separate=draw(st.booleans()),
        usage_mode=draw(st.sampled_from(["none", "final_chunk", "on_finish", "every_chunk",
                                         "middle"])),
        usage_at=draw(st.integers(0, 50)),
        error=draw(st.sampled_from([None, None, None, "plain", "with_choices"])),
        noise=draw(st.lists(st.integers(0, 50), max_size=4)),
        first_index=draw(st.sampled_from([0, 1])),
        options=draw(st.sampled_from(OPTIONS)),
    )


# -- rendering -----------------------------------------------------------------------------------


def chunk(delta: dict[str, Any], *, index: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-prop",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": index, "delta": delta, "finish_reason": None, "logprobs": None}],
    }


NOISE = [
    {"role": "assistant"},
    {"content": ""},
    {"content": None, "refusal": None, "tool_calls": None},
    {"reasoning_content": ""},
    {"refusal": ""},
    {},
]


@dataclass
class Expected:
    text: str = ""
    refusal: str = ""
    reasoning: str = ""
    calls: list[tuple[str | None, str, str]] = field(default_factory=list)


def render(scenario: Scenario) -> tuple[list[dict[str, Any]], Expected]:
    """The chunks, and what they carry (the ground truth, from the scenario itself)."""
    chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
    expected = Expected()
    next_index = scenario.first_index
    call_number = 0
    for segment in scenario.segments:
        if segment.kind == "text":
            chunks += [chunk({"content": p}) for p in segment.pieces]
            expected.text += "".join(segment.pieces)
        elif segment.kind == "refusal":
            chunks += [chunk({"refusal": p}) for p in segment.pieces]
            expected.refusal += "".join(segment.pieces)
        elif segment.kind == "reasoning":
            chunks += [chunk(_reasoning_delta(segment.style, p)) for p in segment.pieces]
            expected.reasoning += "".join(segment.pieces)
        else:
            rendered: list[list[dict[str, Any]]] = []
            for call in segment.calls:
                call_number += 1
                call_id = f"call_up{call_number}" if call.has_id else None
                if scenario.index_mode == "normal":
                    index: int | None = next_index
                    next_index += 1
                else:
                    index = 0 if scenario.index_mode == "zero" else None
                rendered.append(_call_fragments(call, call_id, index))
                expected.calls.append((call_id, call.name, "".join(call.fragments)))
            if segment.parallel_single_chunk:
                # Every call whole, all in one delta (Groq / xAI parallel calls).
                whole = [_whole(frags) for frags in rendered]
                chunks.append(chunk({"tool_calls": whole}))
            else:
                for frags in rendered:
                    chunks += [chunk({"tool_calls": [f]}) for f in frags]
    for position in scenario.noise:
        noise = NOISE[position % len(NOISE)]
        at = 1 + position % len(chunks)
        if position % 7 == 0:
            chunks.insert(at, chunk({"content": "other choice"}, index=1))
        else:
            chunks.insert(at, chunk(dict(noise)))
    _finish(chunks, scenario)
    return chunks, expected


def _reasoning_delta(style: str, piece: str) -> dict[str, Any]:
    detail = {"type": "reasoning.text", "text": piece, "format": "anthropic-claude-v1"}
    if style == "reasoning_content":
        return {"reasoning_content": piece}
    if style == "reasoning":
        return {"reasoning": piece}
    if style == "details":
        return {"reasoning_details": [detail]}
    if style == "both":
        return {"reasoning": piece, "reasoning_details": [detail]}
    return {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": piece}]}]}


def _call_fragments(call: Call, call_id: str | None, index: int | None) -> list[dict[str, Any]]:
    def entry(**function: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"function": function}
        if index is not None:
            out["index"] = index
        return out

    first = entry(name=call.name, arguments="")
    if call.start == "single":
        first["function"]["arguments"] = "".join(call.fragments)
        rest: list[dict[str, Any]] = []
    elif call.start == "args_first" and call.fragments:
        # Arguments before the name is known; the name follows in its own fragment.
        first = entry(arguments=call.fragments[0])
        rest = [entry(name=call.name)] + [entry(arguments=f) for f in call.fragments[1:]]
    else:
        rest = [entry(arguments=f) for f in call.fragments]
    if call_id is not None:
        first["id"] = call_id
        first["type"] = "function"
    if call.empty_name_followups:
        for fragment in rest:
            fragment["function"].setdefault("name", "")
            fragment["type"] = "function"
            if index is not None:
                fragment["id"] = ""
    if call.trailing_empty:
        trailing = entry(arguments="")
        if index is not None:
            trailing["id"] = ""
        rest.append(trailing)
    return [first, *rest]


def _whole(fragments: list[dict[str, Any]]) -> dict[str, Any]:
    first = dict(fragments[0])
    function = dict(first["function"])
    for fragment in fragments[1:]:
        function["name"] = function.get("name") or fragment["function"].get("name") or ""
        function["arguments"] = (function.get("arguments") or "") + (
            fragment["function"].get("arguments") or ""
        )
    first["function"] = function
    return first


def _finish(chunks: list[dict[str, Any]], scenario: Scenario) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12,
             "prompt_tokens_details": {"cached_tokens": 3},
             "completion_tokens_details": {"reasoning_tokens": 2}}
    if scenario.usage_mode == "every_chunk":
        for n, c in enumerate(chunks):
            c["usage"] = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
    elif scenario.usage_mode == "middle":
        chunks[scenario.usage_at % len(chunks)]["usage"] = usage
    if scenario.finish_reason is not None:
        last = chunks[-1]["choices"]
        if scenario.finish_separate or len(chunks) == 1 or last[0]["index"] != 0:
            chunks.append(chunk({}))
        chunks[-1]["choices"][0]["finish_reason"] = scenario.finish_reason
    if scenario.usage_mode == "on_finish":
        chunks[-1]["usage"] = usage
    elif scenario.usage_mode == "final_chunk":
        chunks.append({"id": "chatcmpl-prop", "object": "chat.completion.chunk", "choices": [],
                       "usage": usage})
    elif scenario.usage_mode == "every_chunk":
        chunks[-1]["usage"] = usage
    if scenario.error == "plain":
        chunks.append({"error": {"message": "upstream broke", "type": "server_error",
                                 "code": "internal"}})
    elif scenario.error == "with_choices":
        error_chunk = chunk({"content": ""})
        error_chunk["error"] = {"code": 502, "message": "upstream broke"}
        chunks.append(error_chunk)


def run(chunks: list[dict[str, Any]], options: TranslateOptions) -> list[dict[str, Any]]:
    response = new_response({"model": "m"}, response_id="resp_prop", created_at=1)
    translator = ResponseTranslator(response, options)
    blobs = [encode_event(e) for e in translator.start()]
    for c in chunks:
        blobs += [encode_event(e) for e in translator.feed(c)]
    blobs += [encode_event(e) for e in translator.finish()]
    return events_from_sse(blobs)


def expected_status(scenario: Scenario) -> tuple[str, str | None]:
    if scenario.error:
        return "failed", None
    if scenario.finish_reason is None and scenario.usage_mode == "none":
        return "failed", None  # cut off: neither a finish_reason nor usage came
    reason = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(
        scenario.finish_reason or ""
    )
    return ("incomplete", reason) if reason else ("completed", None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_any_valid_chunk_sequence_gives_a_valid_stream(scenario: Scenario) -> None:
    chunks, expected = render(scenario)
    events = run(chunks, scenario.options)

    grammar = check_grammar(events)
    for event in events:
        validate_event(event)
    response = grammar.terminal["response"]
    validate_response(response)

    got = reconstruct(events)
    assert got.text == expected.text
    assert got.refusal == expected.refusal
    assert got.reasoning == expected.reasoning
    assert [(n, a) for _, n, a in got.calls] == [(n, a) for _, n, a in expected.calls]
    for (call_id, _, _), (upstream_id, _, _) in zip(got.calls, expected.calls, strict=True):
        assert call_id == upstream_id if upstream_id else call_id.startswith("call_")

    # The independent reference reader agrees with the scenario too.
    reference = chat_content(chunks)
    assert (reference.text, reference.refusal, reference.reasoning) == (
        expected.text, expected.refusal, expected.reasoning
    )

    status, reason = expected_status(scenario)
    assert response["status"] == status
    assert response["incomplete_details"] == ({"reason": reason} if reason else None)
    if status == "failed":
        assert response["error"]["code"] == "server_error"
        assert ("upstream broke" if scenario.error else "without a finish_reason") in (
            response["error"]["message"]
        )
    elif scenario.usage_mode != "none":
        assert response["usage"]["input_tokens"] == 7
        assert response["usage"]["total_tokens"] == 12
        assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
        assert response["usage"]["input_tokens_details"]["cached_tokens"] == 3
    else:
        assert response["usage"] is None


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=8), st.lists(TEXT, min_size=1, max_size=8))
def test_text_then_refusal_share_one_message(text: list[str], refusal: list[str]) -> None:
    chunks = [chunk({"content": t}) for t in text] + [chunk({"refusal": r}) for r in refusal]
    chunks.append(chunk({}))
    chunks[-1]["choices"][0]["finish_reason"] = "stop"
    events = run(chunks, TranslateOptions())
    grammar = check_grammar(events)
    messages = [t for t in grammar.items if t.type == "message"]
    has_text, has_refusal = bool("".join(text)), bool("".join(refusal))
    assert len(messages) == (1 if has_text or has_refusal else 0)
    if messages:
        kinds = [p["type"] for p in messages[0].done["content"]]  # type: ignore[index]
        assert kinds == ["output_text"] * has_text + ["refusal"] * has_refusal

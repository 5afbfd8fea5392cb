"""The grammar of OpenAI's own Responses streams, and ours for the same content.

For each real OpenAI recording in tests/fixtures/responses-streams this states the per-item event
order it shows (checked against the recording), then builds the chat stream a Chat Completions
server would have sent for the same content, translates it, and requires the same per-item order
(runs of deltas count once: delta counts depend on the upstream's chunking).

Not compared: ``openrouter-gpt-oss-20b-reasoning-text.sse`` is OpenRouter's own Responses
endpoint, not OpenAI (``rs_tmp_`` ids, its own response fields), so it is not a grammar to match.
``openai-gpt4o-incomplete-max-output-tokens.handmade.sse`` was written by hand upstream (no
sequence numbers, ids from two responses): it is checked on its own, marked as such.

The second half checks the judges themselves (tests/helpers/responses_validation.py): each
must reject a broken stream, and accept the newest real OpenAI recording.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.sse import encode_event
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.chat_reference import RESPONSES_STREAMS, sse_frames
from tests.helpers.responses_validation import (
    ValidationFailure,
    check_grammar,
    events_from_sse,
    reconstruct,
    sdk_validate_event,
    spec_validate_event,
    spec_validate_response,
    validate_event,
    validate_response,
)

# -- the grammar, stated -------------------------------------------------------------------------

ADDED, DONE = "response.output_item.added", "response.output_item.done"
TEXT = [
    ADDED,
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    DONE,
]
CALL = [
    ADDED,
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    DONE,
]
OPAQUE_REASONING = [ADDED, DONE]  # encrypted reasoning only: no part, no text events
SUMMARY_PART = [
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
]


def summary_reasoning(parts: int) -> list[str]:
    return [ADDED, *SUMMARY_PART * parts, DONE]


CREATED = ["response.created", "response.in_progress"]

# recording -> (lifecycle events, [(item type, per-item event order)])
RECORDED_GRAMMAR: dict[str, tuple[list[str], list[tuple[str, list[str]]]]] = {
    "openai-gpt4o-text.sse": (
        [*CREATED, "response.completed"], [("message", TEXT)]),
    "openai-gpt4omini-hello-world.sse": (
        [*CREATED, "response.completed"], [("message", TEXT)]),
    "openai-gpt4omini-text-logprobs.sse": (
        [*CREATED, "response.completed"], [("message", TEXT)]),
    "openai-gpt4o-function-call.sse": (
        [*CREATED, "response.completed"], [("function_call", CALL)]),
    "azure-gpt51-function-call.jsonl": (
        [*CREATED, "response.completed"], [("function_call", CALL)]),
    "openai-gpt5-encrypted-reasoning-function-call.sse": (
        [*CREATED, "response.completed"],
        [("reasoning", OPAQUE_REASONING), ("function_call", CALL)]),
    "openai-gpt51-codex-max-reasoning-summary-function-call.jsonl": (
        [*CREATED, "response.completed"],
        [("reasoning", summary_reasoning(1)), ("function_call", CALL)]),
    "openai-gpt55-reasoning-text-then-function-call-phase.sse": (
        [*CREATED, "response.completed"],
        [("reasoning", OPAQUE_REASONING), ("message", TEXT), ("function_call", CALL)]),
    "openai-o3mini-reasoning-summary-4-parts.sse": (
        [*CREATED, "response.completed"],
        [("reasoning", summary_reasoning(4)), ("message", TEXT)]),
    "openai-gpt5nano-failed-insufficient-quota.jsonl": (
        [*CREATED, "error", "response.failed"], []),
}
HANDMADE = "openai-gpt4o-incomplete-max-output-tokens.handmade.sse"
NOT_OPENAI = "openrouter-gpt-oss-20b-reasoning-text.sse"


def test_every_recording_is_classified() -> None:
    names = {p.name for p in RESPONSES_STREAMS.iterdir() if p.suffix in (".sse", ".jsonl")}
    assert names == set(RECORDED_GRAMMAR) | {HANDMADE, NOT_OPENAI}


# -- reading recordings --------------------------------------------------------------------------


def recording(name: str) -> list[dict[str, Any]]:
    raw = (RESPONSES_STREAMS / name).read_bytes()
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in raw.splitlines() if line.strip()]
    return [json.loads(data) for _, data in sse_frames(raw)]


def collapse_deltas(types: list[str]) -> list[str]:
    """Runs of the same ``*.delta`` event count once."""
    out: list[str] = []
    for kind in types:
        if not (kind.endswith(".delta") and out and out[-1] == kind):
            out.append(kind)
    return out


def shape(events: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(lifecycle event types, [(item type, collapsed per-item event types)]) of a stream."""
    lifecycle: list[str] = []
    items: dict[int, tuple[str, list[str]]] = {}
    for event in events:
        index = event.get("output_index")
        if index is None:
            lifecycle.append(event["type"])
            continue
        if event["type"] == ADDED:
            assert index not in items, f"output_index {index} added twice"
            assert index == len(items), "output_index must be dense, in start order"
            items[index] = (event["item"]["type"], [])
        items[index][1].append(event["type"])
    for index in items:
        assert items[index][1][-1] == DONE, f"item {index} not closed"
    ordered = [items[i] for i in sorted(items)]
    starts = [events.index(e) for e in events if e["type"] == ADDED]
    ends = [events.index(e) for e in events if e["type"] == DONE]
    assert all(s > e for s, e in zip(starts[1:], ends, strict=False)), "items interleave"
    return lifecycle, [(kind, collapse_deltas(types)) for kind, types in ordered]


@pytest.mark.parametrize("name", sorted(RECORDED_GRAMMAR))
def test_recording_shows_the_stated_grammar(name: str) -> None:
    assert shape(recording(name)) == RECORDED_GRAMMAR[name]


def test_handmade_incomplete_recording_grammar() -> None:
    events = recording(HANDMADE)
    assert shape(events) == ([*CREATED, "response.incomplete"], [("message", TEXT)])
    terminal = events[-1]["response"]
    assert terminal["incomplete_details"] == {"reason": "max_output_tokens"}


# -- the same content as a chat stream -----------------------------------------------------------


def _chunk(delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-rec",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None, **choice}],
    }


def equivalent_chat_stream(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks a Chat Completions server would send for the recording's content."""
    chunks: list[dict[str, Any]] = [_chunk({"role": "assistant", "content": ""})]
    items: dict[int, dict[str, Any]] = {}
    call_index = 0
    for event in events:
        kind = event["type"]
        if kind == ADDED:
            item = items[event["output_index"]] = event["item"]
            if item["type"] == "function_call":
                item["_index"] = call_index
                call_index += 1
                chunks.append(_chunk({"tool_calls": [{
                    "index": item["_index"], "id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": ""},
                }]}))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            chunks.append(_chunk({"reasoning_content": event["delta"]}))
        elif kind == "response.output_text.delta":
            logprobs = {"content": event["logprobs"]} if event.get("logprobs") else None
            chunks.append(_chunk({"content": event["delta"]}, logprobs=logprobs))
        elif kind == "response.function_call_arguments.delta":
            index = items[event["output_index"]]["_index"]
            chunks.append(_chunk({"tool_calls": [
                {"index": index, "function": {"arguments": event["delta"]}}
            ]}))
        elif kind == DONE and event["item"]["type"] == "reasoning":
            item = event["item"]
            if not item.get("summary") and not item.get("content"):
                blob = item.get("encrypted_content") or "opaque"
                chunks.append(_chunk({"reasoning_details": [
                    {"type": "reasoning.encrypted", "data": blob}
                ]}))
    terminal = events[-1]
    response = terminal["response"]
    if terminal["type"] == "response.failed":
        chunks.append({"error": response["error"]})
        return chunks
    if terminal["type"] == "response.incomplete":
        reason = "length"
    else:
        reason = "tool_calls" if call_index else "stop"
    chunks.append(_chunk({}, finish_reason=reason))
    usage = response.get("usage")
    if usage:
        chunks.append({
            "id": "chatcmpl-rec", "object": "chat.completion.chunk", "choices": [],
            "usage": {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
                "prompt_tokens_details": usage["input_tokens_details"],
                "completion_tokens_details": usage["output_tokens_details"],
            },
        })
    return chunks


def translate_chunks(
    chunks: list[dict[str, Any]], options: TranslateOptions
) -> list[dict[str, Any]]:
    response = new_response({"model": "m"}, response_id="resp_rec", created_at=1)
    translator = ResponseTranslator(response, options)
    blobs = [encode_event(e) for e in translator.start()]
    for chunk in chunks:
        blobs += [encode_event(e) for e in translator.feed(chunk)]
    blobs += [encode_event(e) for e in translator.finish()]
    return events_from_sse(blobs)


def options_for(events: list[dict[str, Any]]) -> TranslateOptions:
    types = {e["type"] for e in events}
    logprobs = any(e.get("logprobs") for e in events if e["type"] == "response.output_text.delta")
    return TranslateOptions(
        summary="response.reasoning_summary_text.delta" in types, logprobs=logprobs
    )


def collapse_summary_parts(types: list[str]) -> list[str]:
    """Several summary parts in a row as one (chat chunks carry no part boundaries)."""
    out = list(types)
    while True:
        joined = [*SUMMARY_PART, *SUMMARY_PART]
        for i in range(len(out) - len(joined) + 1):
            if out[i : i + len(joined)] == joined:
                del out[i : i + len(SUMMARY_PART)]
                break
        else:
            return out


def _ours(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    theirs = recording(name)
    ours = translate_chunks(equivalent_chat_stream(copy.deepcopy(theirs)), options_for(theirs))
    for event in ours:
        validate_event(event)
    check_grammar(ours)
    return theirs, ours


@pytest.mark.parametrize(
    "name", sorted(n for n in RECORDED_GRAMMAR if RECORDED_GRAMMAR[n][0][-1] != "response.failed")
)
def test_our_stream_follows_the_recordings_per_item_order(name: str) -> None:
    theirs, ours = _ours(name)
    lifecycle, items = RECORDED_GRAMMAR[name]
    our_lifecycle, our_items = shape(ours)
    assert our_lifecycle == lifecycle
    if name == "openai-o3mini-reasoning-summary-4-parts.sse":
        # A chat stream has no summary-part boundaries: the four parts arrive as one.
        items = [(kind, collapse_summary_parts(types)) for kind, types in items]
        assert our_items[0] == ("reasoning", summary_reasoning(1))
    assert our_items == items

    # Same content, same call ids, same usage.
    want, got = reconstruct(theirs), reconstruct(ours)
    assert (got.text, got.reasoning, got.calls) == (want.text, want.reasoning, want.calls)
    their_usage, our_usage = theirs[-1]["response"]["usage"], ours[-1]["response"]["usage"]
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert our_usage[key] == their_usage[key]
    assert our_usage["output_tokens_details"] == their_usage["output_tokens_details"]


def test_logprobs_like_openai() -> None:
    theirs, ours = _ours("openai-gpt4omini-text-logprobs.sse")
    strip = {"obfuscation"}

    def deltas(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in e.items() if k not in strip | {"item_id", "sequence_number"}}
            for e in events if e["type"] == "response.output_text.delta"
        ]

    assert deltas(ours) == deltas(theirs)


def test_failed_recording_per_item_order() -> None:
    theirs, ours = _ours("openai-gpt5nano-failed-insufficient-quota.jsonl")
    assert shape(ours)[1] == shape(theirs)[1] == []
    assert ours[-1]["response"]["output"] == []
    # Outside the SDK's documented codes: the code says server_error, the message keeps it.
    assert ours[-1]["response"]["error"]["code"] == "server_error"
    assert "insufficient_quota" in ours[-1]["response"]["error"]["message"]


def test_failed_lifecycle_is_openais_minus_the_error_event() -> None:
    """OpenAI sends ``error`` then ``response.failed``; we send ``response.failed`` only.

    Deliberate: the openai SDK raises ``APIError`` on any streamed object with an ``error``
    key, so a leading ``error`` event would hide the failed response (and its partial output)
    from every Python client. Everything else about the lifecycle is the same.
    """
    theirs, ours = _ours("openai-gpt5nano-failed-insufficient-quota.jsonl")
    their_types = [e["type"] for e in theirs]
    our_types = [e["type"] for e in ours]
    assert "error" in their_types
    assert "error" not in our_types
    assert our_types == [t for t in their_types if t != "error"]


# -- the judges must reject what is broken -------------------------------------------------------


def _good_stream() -> list[dict[str, Any]]:
    chunks = [
        _chunk({"reasoning_content": "think"}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "f", "arguments": '{"a"'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        _chunk({}, finish_reason="tool_calls"),
    ]
    events = translate_chunks(chunks, TranslateOptions())
    check_grammar(events)
    return events


def _index(events: list[dict[str, Any]], kind: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["type"] == kind][nth]


def _renumber(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, event in enumerate(events):
        event["sequence_number"] = i
    return events


def _drop(kind: str) -> Any:
    def mutate(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        del events[_index(events, kind)]
        return _renumber(events)

    return mutate


def _swap_seq(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events[3]["sequence_number"], events[4]["sequence_number"] = 4, 3
    return events


def _interleave(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The message starts before the reasoning item is done.
    done = events.pop(_index(events, DONE))
    events.insert(_index(events, ADDED, 1) + 1, done)
    return _renumber(events)


def _gap_index(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for event in events:
        if event.get("output_index") == 2:
            event["output_index"] = 3
    return events


def _wrong_done_text(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events[_index(events, "response.output_text.done")]["text"] = "Hello!"
    return events


def _bad_prefix(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index(events, ADDED, 1)
    events[i]["item"]["id"] = "item_1"
    return events


def _two_terminals(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events.insert(-1, copy.deepcopy(events[-1]))
    return _renumber(events)


def _terminal_output_differs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events[-1]["response"]["output"][1]["content"][0]["text"] = "Hi"
    return events


def _delta_after_done(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    delta = copy.deepcopy(events[_index(events, "response.output_text.delta")])
    events.insert(_index(events, "response.output_text.done") + 1, delta)
    return _renumber(events)


def _missing_created(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _renumber(events[1:])


BREAKAGES = {
    "sequence_numbers_out_of_order": _swap_seq,
    "items_interleave": _interleave,
    "output_index_gap": _gap_index,
    "missing_content_part_done": _drop("response.content_part.done"),
    "missing_arguments_done": _drop("response.function_call_arguments.done"),
    "missing_output_item_done": _drop(DONE),
    "done_text_differs_from_deltas": _wrong_done_text,
    "item_id_without_msg_prefix": _bad_prefix,
    "two_terminal_events": _two_terminals,
    "terminal_output_differs": _terminal_output_differs,
    "delta_after_done": _delta_after_done,
    "no_response_created": _missing_created,
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_check_grammar_rejects(breakage: str) -> None:
    events = BREAKAGES[breakage](_good_stream())
    with pytest.raises(ValidationFailure):
        check_grammar(events)


def _text_delta() -> dict[str, Any]:
    events = _good_stream()
    return copy.deepcopy(events[_index(events, "response.output_text.delta")])


def test_validate_event_accepts_ours() -> None:
    for event in _good_stream():
        validate_event(event)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.pop("delta"),
        lambda e: e.update(content_index="0"),
        lambda e: e.update(unknown_field=1),
        lambda e: e.update(type="response.output_text.deltas"),
    ],
    ids=["missing_field", "wrong_type", "unknown_field", "unknown_event_type"],
)
def test_sdk_validation_rejects(mutate: Any) -> None:
    event = _text_delta()
    mutate(event)
    with pytest.raises(ValidationFailure):
        sdk_validate_event(event)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.pop("item_id"),
        lambda e: e.update(output_index="0"),
        lambda e: e.update(type="response.output_text.deltas"),
    ],
    ids=["missing_field", "wrong_type", "unknown_event_type"],
)
def test_spec_validation_rejects(mutate: Any) -> None:
    event = _text_delta()
    mutate(event)
    with pytest.raises(ValidationFailure):
        spec_validate_event(event)


def test_spec_validation_rejects_response_without_a_required_field() -> None:
    response = _good_stream()[-1]["response"]
    validate_response(response)
    for key in ("error", "completed_at", "incomplete_details", "tools"):
        broken = {k: v for k, v in response.items() if k != key}
        with pytest.raises(ValidationFailure):
            spec_validate_response(broken)


def test_spec_validation_checks_items_inside_the_response() -> None:
    response = copy.deepcopy(_good_stream()[-1]["response"])
    del response["output"][2]["call_id"]
    with pytest.raises(ValidationFailure):
        spec_validate_response(response)


def test_reasoning_text_events_are_validated_against_the_spec_alias() -> None:
    events = _good_stream()
    delta = copy.deepcopy(events[_index(events, "response.reasoning_text.delta")])
    spec_validate_event(delta)
    del delta["content_index"]
    with pytest.raises(ValidationFailure):
        spec_validate_event(delta)


def test_judges_accept_the_newest_real_openai_recording() -> None:
    """gpt-5.5 (2026): every event passes both judges; ``obfuscation`` is OpenAI padding."""
    events = recording("openai-gpt55-reasoning-text-then-function-call-phase.sse")
    for event in events:
        validate_event(event, allow_extra={"obfuscation"})
    check_grammar(events, volatile=("encrypted_content",))
    validate_response(events[-1]["response"])


def test_failed_response_error_code_may_be_any_string_only_in_openais_recordings() -> None:
    events = recording("openai-gpt5nano-failed-insufficient-quota.jsonl")
    response = events[-1]["response"]
    assert response["error"]["code"] == "insufficient_quota"
    sdk_validate_event({**events[-1], "response": {**response, "usage": None}},
                       any_error_code=True)
    with pytest.raises(ValidationFailure, match="not one the SDK documents"):
        sdk_validate_event({**events[-1], "response": {**response, "usage": None}})
    with pytest.raises(ValidationFailure):
        sdk_validate_event(
            {**events[-1], "response": {**response, "error": {"code": "", "message": "x"}}},
            any_error_code=True,
        )


def test_spec_copy_is_the_shared_document() -> None:
    ours = Path(__file__).parent / "fixtures" / "spec" / "openresponses-openapi.json"
    spec = json.loads(ours.read_text())
    assert spec["info"] == {"title": "Open Responses", "version": "2026-04-24"}

"""Every recorded chat stream, translated, must be a valid OpenAI Responses stream.

For each fixture in tests/fixtures/chat-streams (29 real provider recordings) and each set of
request options: every event validates against the openai SDK and the Open Responses spec, the
grammar holds, and the content read back from our events is what the chunks carried (reference:
tests/helpers/chat_reference.py, which does not use the gateway's code). Then the openai SDK's own
stream accumulator must rebuild the terminal response, and the non-streaming path must produce the
same Response as the stream (fixtures that fail mid-stream have no non-streaming counterpart).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks.entry import translate_sse
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from responses_gateway.sse import encode_event
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.chat_reference import (
    ChatContent,
    chat_completion,
    chat_content,
    chat_fixtures,
    fixture_chunks,
    fixture_lines,
)
from tests.helpers.responses_validation import (
    check_grammar,
    events_from_sse,
    reconstruct,
    validate_event,
    validate_response,
)

FIXTURES = chat_fixtures()
ERROR_FIXTURES = {
    "groq-gpt-oss-120b-reasoning-error-midstream.sse",
    "openrouter-minimax-m2-length-then-error-chunk.sse",
}


def seal(payload: dict[str, Any]) -> str:
    """A reversible stand-in for the tenant sealer, so tests can read what was sealed."""
    return "sealed:" + base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


def unseal(blob: str) -> dict[str, Any]:
    assert blob.startswith("sealed:")
    return json.loads(base64.urlsafe_b64decode(blob[7:]))


OPTIONS = {
    "default": TranslateOptions(),
    "summary": TranslateOptions(summary=True),
    "logprobs": TranslateOptions(logprobs=True),
    "encrypted": TranslateOptions(encrypted_reasoning=True, seal=seal),
}


def translate(path: Path, options: TranslateOptions) -> list[dict[str, Any]]:
    return events_from_sse(translate_sse(fixture_lines(path), options))


def test_every_shared_fixture_is_here() -> None:
    names = {p.name for p in FIXTURES}
    assert len(names) == 29, sorted(names)
    assert names >= ERROR_FIXTURES


@pytest.mark.parametrize("option_name", list(OPTIONS))
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixture_translates_to_valid_responses_stream(path: Path, option_name: str) -> None:
    options = OPTIONS[option_name]
    events = translate(path, options)
    expected = chat_content(fixture_chunks(path))

    for event in events:
        validate_event(event)
    grammar = check_grammar(events)
    response = grammar.terminal["response"]
    validate_response(response)

    # Content read back from the deltas equals what the chunks carried.
    got = reconstruct(events)
    assert got.text == expected.text
    assert got.refusal == expected.refusal
    assert got.reasoning == expected.reasoning
    assert [(name, args) for _, name, args in got.calls] == [
        (c["name"], c["arguments"]) for c in expected.calls
    ]
    for (call_id, _, _), call in zip(got.calls, expected.calls, strict=True):
        if call["id"]:
            assert call_id == call["id"], "the upstream call id must be kept"
        else:
            assert call_id.startswith("call_")

    # The same content in the finished objects.
    output = response["output"]
    messages = [i for i in output if i["type"] == "message"]
    assert "".join(
        p["text"] for m in messages for p in m["content"] if p["type"] == "output_text"
    ) == expected.text
    assert "".join(
        p["refusal"] for m in messages for p in m["content"] if p["type"] == "refusal"
    ) == expected.refusal
    reasonings = [i for i in output if i["type"] == "reasoning"]
    for item in reasonings:
        if options.summary:
            assert "content" not in item or item["content"] == []
            assert [p["type"] for p in item["summary"]] in ([], ["summary_text"])
        else:
            assert item["summary"] == [], "reasoning is content unless a summary was asked for"
    field = "summary" if options.summary else "content"
    assert "".join(p["text"] for r in reasonings for p in r.get(field, [])) == expected.reasoning
    calls = [i for i in output if i["type"] == "function_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c["name"], c["arguments"]) for c in expected.calls
    ]

    _check_status(response, expected)
    _check_usage(response, expected)
    _check_logprobs(events, response, expected, options)
    _check_encrypted(reasonings, expected, options)


def _check_status(response: dict[str, Any], expected: ChatContent) -> None:
    assert response["status"] == expected.status
    if expected.status == "incomplete":
        assert response["incomplete_details"] == {"reason": expected.incomplete_reason}
    else:
        assert response["incomplete_details"] is None
    if expected.status == "completed":
        assert isinstance(response["completed_at"], int)
        assert response["error"] is None
    if expected.status == "failed":
        error = response["error"]
        assert isinstance(error["code"], str) and error["code"]
        assert expected.error is not None
        upstream_message = expected.error.get("message") or ""
        assert upstream_message in error["message"]
        assert response["completed_at"] is None
    if expected.status != "completed" and response["output"]:
        # The open item at the moment the stream stopped is closed as incomplete.
        last = response["output"][-1]
        if last["type"] != "reasoning":
            assert last["status"] == "incomplete"


def _check_usage(response: dict[str, Any], expected: ChatContent) -> None:
    usage = response["usage"]
    if expected.status == "failed":
        return  # usage of a failed response is best effort
    if expected.usage is None:
        assert usage is None
        return
    chat = expected.usage
    assert usage["input_tokens"] == chat["prompt_tokens"]
    assert usage["output_tokens"] == chat["completion_tokens"]
    assert usage["total_tokens"] == chat["total_tokens"]
    cached = (chat.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    assert usage["input_tokens_details"]["cached_tokens"] == cached
    reasoning = (chat.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == reasoning


def _check_logprobs(
    events: list[dict[str, Any]],
    response: dict[str, Any],
    expected: ChatContent,
    options: TranslateOptions,
) -> None:
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    parts = [
        p for i in response["output"] if i["type"] == "message"
        for p in i["content"] if p["type"] == "output_text"
    ]
    if not options.logprobs:
        assert all(e["logprobs"] == [] for e in deltas)
        assert all(p["logprobs"] == [] for p in parts)
        return
    sent = [lp for e in deltas for lp in e["logprobs"]]
    assert sent == expected.logprobs
    assert [lp for p in parts for lp in p["logprobs"]] == expected.logprobs


def _check_encrypted(
    reasonings: list[dict[str, Any]], expected: ChatContent, options: TranslateOptions
) -> None:
    blobs = [r["encrypted_content"] for r in reasonings if "encrypted_content" in r]
    if not options.encrypted_reasoning:
        assert blobs == []
        return
    sealed = json.dumps([unseal(b) for b in blobs])
    for secret in expected.signatures + expected.encrypted:
        assert secret in sealed, "signatures and encrypted blobs must survive in encrypted_content"
    if expected.signatures or expected.encrypted:
        assert blobs


def test_finish_length_is_incomplete_max_output_tokens() -> None:
    (path,) = [p for p in FIXTURES if p.name == "openai-gpt4o-finish-length.sse"]
    events = translate(path, TranslateOptions())
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["output"][0]["content"][0]["text"] == '{"'


@pytest.mark.parametrize("name", sorted(ERROR_FIXTURES))
def test_upstream_error_fails_and_keeps_partial_output(name: str) -> None:
    (path,) = [p for p in FIXTURES if p.name == name]
    events = translate(path, TranslateOptions())
    assert events[-1]["type"] == "response.failed"
    assert not any(e["type"] in ("response.completed", "response.incomplete") for e in events)
    response = events[-1]["response"]
    expected = chat_content(fixture_chunks(path))
    assert expected.error is not None
    # The upstream's own code is not one the SDK documents: it travels in the message.
    assert response["error"]["code"] == "server_error"
    assert f"({expected.error['code']})" in response["error"]["message"]
    assert expected.error["message"] in response["error"]["message"]
    # The reasoning streamed before the error is in the failed response.
    assert response["output"], "partial output must be kept"
    kept = "".join(p["text"] for i in response["output"] for p in i.get("content", []))
    assert kept == expected.reasoning != ""


# -- the openai SDK's own accumulator ------------------------------------------------------------


def _normal_items(items: list[Any]) -> list[dict[str, Any]]:
    """The parts of output items that matter, from SDK models or dicts."""
    out = []
    for item in items:
        data = item if isinstance(item, dict) else item.model_dump(mode="json")
        entry = {k: data.get(k) for k in ("id", "type", "status", "call_id", "name", "arguments")}
        entry["content"] = [
            (p["type"], p.get("text", p.get("refusal"))) for p in data.get("content") or []
        ]
        entry["summary"] = [p["text"] for p in data.get("summary") or []]
        out.append(entry)
    return out


def _strip_parsed(data: Any) -> Any:
    """ParsedResponse adds ``parsed`` / ``parsed_arguments``; nothing else may differ."""
    if isinstance(data, dict):
        return {
            k: _strip_parsed(v) for k, v in data.items() if k not in ("parsed", "parsed_arguments")
        }
    if isinstance(data, list):
        return [_strip_parsed(v) for v in data]
    return data


@pytest.mark.parametrize("option_name", ["default", "summary", "logprobs"])
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_sdk_stream_accumulator_rebuilds_the_terminal_response(
    path: Path, option_name: str
) -> None:
    events = translate(path, OPTIONS[option_name])
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        # What openai's Stream hands to the accumulator: a constructed (unvalidated) event.
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))
    terminal = events[-1]["response"]
    snapshot = state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]

    # Built from deltas alone: message texts and call arguments equal the terminal output.
    from_deltas = [
        i for i in _normal_items(snapshot.output) if i["type"] in ("message", "function_call")
    ]
    finished = [
        i for i in _normal_items(terminal["output"]) if i["type"] in ("message", "function_call")
    ]
    for built, done in zip(from_deltas, finished, strict=True):
        assert built["id"] == done["id"]
        # The SDK accumulates output_text deltas only (refusal parts keep their added text).
        assert _texts(built) == _texts(done)
        assert built["arguments"] == done["arguments"]
        assert (built["call_id"], built["name"]) == (done["call_id"], done["name"])
    # Items from output_item.done, in order, equal the terminal output.
    completed_output = [state._completed_output[i] for i in sorted(state._completed_output)]
    assert _normal_items(completed_output) == _normal_items(terminal["output"])

    if events[-1]["type"] == "response.completed":
        final = state._completed_response
        assert final is not None
        assert _strip_parsed(final.model_dump(mode="json")) == _strip_parsed(
            construct_type(type_=type(final), value=terminal).model_dump(mode="json")
        )
        assert final.output_text == "".join(
            p[1] for i in _normal_items(terminal["output"]) for p in i["content"]
            if p[0] == "output_text"
        )
    else:
        assert state._completed_response is None


def _texts(item: dict[str, Any]) -> list[str]:
    return [text for kind, text in item["content"] if kind == "output_text"]


# -- non-streaming -------------------------------------------------------------------------------


def _run(chunks: list[dict[str, Any]], options: TranslateOptions) -> list[dict[str, Any]]:
    """Drive the translator directly, encoding each event as the server would."""
    response = new_response({"model": "m"}, response_id="resp_test", created_at=1)
    translator = ResponseTranslator(response, options)
    blobs = [encode_event(e) for e in translator.start()]
    for chunk in chunks:
        blobs += [encode_event(e) for e in translator.feed(chunk)]
    blobs += [encode_event(e) for e in translator.finish()]
    return events_from_sse(blobs)


def _modulo_ids(response: dict[str, Any]) -> dict[str, Any]:
    """``response`` with ids, call ids and timestamps replaced by their position."""
    data = json.loads(json.dumps(response))
    for key in ("id", "created_at", "completed_at"):
        data[key] = key if data[key] is not None else None
    for n, item in enumerate(data["output"]):
        item["id"] = f"{item['type']}#{n}"
        if "call_id" in item:
            item["call_id"] = f"call#{n}"
    return data


@pytest.mark.parametrize("option_name", ["default", "summary"])
@pytest.mark.parametrize(
    "path",
    [p for p in FIXTURES if p.name not in ERROR_FIXTURES],
    ids=[p.name for p in FIXTURES if p.name not in ERROR_FIXTURES],
)
def test_non_stream_completion_gives_the_streams_response(path: Path, option_name: str) -> None:
    options = OPTIONS[option_name]
    chunks = fixture_chunks(path)
    streamed = _run(chunks, options)[-1]["response"]
    non_stream_events = _run([chat_completion(chat_content(chunks))], options)
    check_grammar(non_stream_events)
    single = non_stream_events[-1]["response"]
    validate_response(single)
    assert _modulo_ids(single) == _modulo_ids(streamed)

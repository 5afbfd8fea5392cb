"""The Bedrock backend against a fake endpoint speaking the real event-stream wire format.

boto3 runs for real (signing, HTTP, event-stream decoding, error parsing); the recordings in
fixtures/bedrock-streams/ are replayed frame by frame and the chat chunks must carry exactly
what the events carried.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.bedrock import BedrockBackend
from responses_gateway.backends.bedrock.names import ToolNames
from responses_gateway.errors import UpstreamError
from tests.helpers.eventstream_server import DROP, FakeBedrock, exception, hang, use_dummy_aws

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures" / "bedrock-streams"
RECORDINGS = sorted(FIXTURES.glob("*.jsonl"))
FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fake() -> Any:
    with FakeBedrock() as server:
        yield server


@pytest.fixture
def backend(fake: FakeBedrock, monkeypatch: pytest.MonkeyPatch) -> Any:
    use_dummy_aws(monkeypatch)
    return BedrockBackend(region="us-east-1", endpoint_url=fake.url, max_attempts=1,
                          read_timeout=10)


def chat(model: str, stream: bool = True, **extra: Any) -> BackendRequest:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": stream,
            **extra}
    return BackendRequest(body=body, stream=stream)


async def collect(backend: BedrockBackend, request: BackendRequest) -> list[dict[str, Any]]:
    return [chunk async for batch in backend.stream(request) for chunk in batch]


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the events carry, computed independently of the translator."""
    text, reasoning, signatures, redacted, calls = [], [], [], [], []
    server_blocks: set[int] = set()
    by_block: dict[int, dict[str, Any]] = {}
    stop = usage = None
    for event in events:
        ((name, body),) = event.items()
        if name == "contentBlockStart":
            tool = body["start"].get("toolUse")
            if tool is None or tool.get("type") == "server_tool_use":
                server_blocks.add(body["contentBlockIndex"])
            else:
                call = {"id": tool["toolUseId"], "name": tool["name"], "arguments": ""}
                by_block[body["contentBlockIndex"]] = call
                calls.append(call)
        elif name == "contentBlockDelta" and body["contentBlockIndex"] not in server_blocks:
            delta = body["delta"]
            if "text" in delta:
                text.append(delta["text"])
            elif "toolUse" in delta:
                by_block[body["contentBlockIndex"]]["arguments"] += delta["toolUse"]["input"]
            elif "reasoningContent" in delta:
                rc = delta["reasoningContent"]
                reasoning.append(rc.get("text", ""))
                if "signature" in rc:
                    signatures.append(rc["signature"])
                if "redactedContent" in rc:
                    redacted.append(rc["redactedContent"])
        elif name == "messageStop":
            stop = body["stopReason"]
        elif name == "metadata":
            usage = body["usage"]
    return {"text": "".join(text), "reasoning": "".join(reasoning), "signatures": signatures,
            "redacted": redacted, "calls": calls, "finish": FINISH[stop], "usage": usage}


def reconstruct(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    text, reasoning, signatures, redacted = [], [], [], []
    calls: dict[int, dict[str, Any]] = {}
    finishes, usage = [], None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or "")
            for detail in delta.get("reasoning_details") or ():
                if detail["type"] == "reasoning.text":
                    signatures.append(detail["signature"])
                else:
                    redacted.append(detail["data"])
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += call.get("function", {}).get("name") or ""
                slot["arguments"] += call.get("function", {}).get("arguments") or ""
            if choice["finish_reason"]:
                finishes.append(choice["finish_reason"])
    return {"text": "".join(text), "reasoning": "".join(reasoning), "signatures": signatures,
            "redacted": redacted, "calls": [calls[k] for k in sorted(calls)],
            "finishes": finishes, "usage": usage}


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
async def test_replayed_recording_chunks_carry_what_the_events_carried(
    fake: FakeBedrock, backend: BedrockBackend, path: Path
) -> None:
    events = load(path)
    model = f"replay.{path.stem}"
    fake.stream(model, events)
    chunks = await collect(backend, chat(model))

    want = expected_from_events(events)
    got = reconstruct(chunks)
    assert got["text"] == want["text"]
    assert got["reasoning"] == want["reasoning"]
    assert got["signatures"] == want["signatures"]
    assert got["redacted"] == want["redacted"]
    assert got["calls"] == want["calls"]
    assert got["finishes"] == [want["finish"]]
    u = want["usage"]
    assert got["usage"]["prompt_tokens"] == u["inputTokens"]
    assert got["usage"]["completion_tokens"] == u["outputTokens"]
    assert got["usage"]["total_tokens"] == u["inputTokens"] + u["outputTokens"]

    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert {c["id"] for c in chunks} == {"chatcmpl-fake-stream-request-id"}
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[-1]["choices"] == [] and "usage" in chunks[-1]
    # empty deltas never become chunks (no empty message item downstream)
    for chunk in chunks[1:]:
        for choice in chunk["choices"]:
            assert choice["delta"] or choice["finish_reason"]
            assert choice["delta"].get("content") != ""


async def test_redacted_reasoning_round_trips_to_the_original_bytes(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    events = load(FIXTURES / "bedrock-claude37-redacted-reasoning.jsonl")
    fake.stream("anthropic.claude-3-7-sonnet-20250219-v1:0", events)
    chunks = await collect(backend, chat("anthropic.claude-3-7-sonnet-20250219-v1:0"))
    details = [d for c in chunks for ch in c["choices"]
               for d in ch["delta"].get("reasoning_details") or ()]
    assert [d["type"] for d in details] == ["reasoning.encrypted", "reasoning.encrypted"]
    assert [d["index"] for d in details] == [0, 1]
    assert details[0]["format"] == "anthropic-claude-v1"
    raw = base64.b64decode(events[1]["contentBlockDelta"]["delta"]["reasoningContent"]
                           ["redactedContent"])
    assert base64.b64decode(details[0]["data"]) == raw


async def test_signature_detail_has_no_text_so_it_is_not_shown_twice(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("sig", load(FIXTURES / "bedrock-claude-sonnet4-reasoning-signature.jsonl"))
    chunks = await collect(backend, chat("sig"))
    sig_chunks = [c for c in chunks if c["choices"] and
                  c["choices"][0]["delta"].get("reasoning_details")]
    assert len(sig_chunks) == 1
    (detail,) = sig_chunks[0]["choices"][0]["delta"]["reasoning_details"]
    assert set(detail) == {"type", "signature", "format", "index"}
    assert "reasoning_content" not in sig_chunks[0]["choices"][0]["delta"]


def _tool_events(calls: list[tuple[str, str, list[str]]], text: str = "") -> list[dict]:
    events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    index = 0
    if text:
        events += [{"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": text}}},
                   {"contentBlockStop": {"contentBlockIndex": 0}}]
        index = 1
    for call_id, name, fragments in calls:
        events.append({"contentBlockStart": {"contentBlockIndex": index, "start": {
            "toolUse": {"toolUseId": call_id, "name": name}}}})
        events += [{"contentBlockDelta": {"contentBlockIndex": index,
                                          "delta": {"toolUse": {"input": f}}}} for f in fragments]
        events.append({"contentBlockStop": {"contentBlockIndex": index}})
        index += 1
    events += [{"messageStop": {"stopReason": "tool_use"}},
               {"metadata": {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                             "metrics": {"latencyMs": 1}}}]
    return events


async def test_multi_delta_tool_input_is_streamed_as_argument_fragments(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fragments = ['{"ci', 'ty": "Pa', 'ris", "unit', '": "C"}']
    fake.stream("multi", _tool_events([("tooluse_abc", "get_weather", fragments)], text="Hm."))
    chunks = await collect(backend, chat("multi"))
    got = reconstruct(chunks)
    assert got["calls"] == [{"id": "tooluse_abc", "name": "get_weather",
                             "arguments": "".join(fragments)}]
    arg_chunks = [c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                  for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert arg_chunks == ["", *fragments]
    # the call is index 0 although its contentBlockIndex is 1 (the text block took 0)
    assert {tc["index"] for c in chunks if c["choices"]
            for tc in c["choices"][0]["delta"].get("tool_calls") or ()} == {0}
    assert got["finishes"] == ["tool_calls"] and got["text"] == "Hm."


async def test_parallel_tool_uses_get_consecutive_indexes_and_empty_input_becomes_object(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("parallel", _tool_events([
        ("tooluse_1", "get_weather", ['{"city":', '"Paris"}']),
        ("tooluse_2", "get_time", [""]),
        ("tooluse_3", "get_weather", ['{"city":"Rome"}']),
    ]))
    got = reconstruct(await collect(backend, chat("parallel")))
    assert got["calls"] == [
        {"id": "tooluse_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"id": "tooluse_2", "name": "get_time", "arguments": "{}"},
        {"id": "tooluse_3", "name": "get_weather", "arguments": '{"city":"Rome"}'},
    ]


async def test_renamed_tool_names_are_mapped_back(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    sent_name = ToolNames()("weather.get")  # what the request mapping sends for this name
    fake.stream("renamed", _tool_events([("tooluse_9", sent_name, ["{}"])]))
    request = chat("renamed", tools=[{"type": "function", "function": {
        "name": "weather.get", "parameters": {"type": "object", "properties": {}}}}])
    got = reconstruct(await collect(backend, request))
    tool_spec = fake.requests_for("renamed")[-1].body["toolConfig"]["tools"][0]["toolSpec"]
    assert tool_spec["name"] == sent_name and "." not in sent_name
    assert got["calls"][0]["name"] == "weather.get"


async def test_in_stream_throttling_after_output_is_yielded_as_error_chunk(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("throttle-mid", [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Par"}}},
        exception("throttlingException", "Too many tokens, please wait."),
    ])
    chunks = await collect(backend, chat("throttle-mid"))
    assert chunks[1]["choices"][0]["delta"] == {"content": "Par"}
    error = chunks[-1]["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert "throttlingException" in error["message"] and "please wait" in error["message"]
    assert not any(c.get("choices") and c["choices"][0]["finish_reason"] for c in chunks)


@pytest.mark.parametrize(("member", "status", "code"), [
    ("throttlingException", 429, "rate_limit_exceeded"),
    ("modelStreamErrorException", 502, "server_error"),
    ("validationException", 400, "invalid_prompt"),
    ("serviceUnavailableException", 503, "server_error"),
    ("internalServerException", 500, "server_error"),
])
async def test_exception_frame_before_any_output_raises_http_error(
    fake: FakeBedrock, backend: BedrockBackend, member: str, status: int, code: str
) -> None:
    # right after messageStart: the role chunk is held back, so this is still an HTTP error
    fake.stream(f"early-{member}", [{"messageStart": {"role": "assistant"}},
                                    exception(member, "boom")])
    agen = backend.stream(chat(f"early-{member}"))
    with pytest.raises(UpstreamError) as info:
        await agen.__anext__()
    assert info.value.status == status
    assert info.value.code == code
    assert "Bedrock" in info.value.message and "boom" in info.value.message


async def test_dropped_connection_mid_stream_raises_upstream_error(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("drop", [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hello"}}},
        DROP,
    ])
    seen: list[dict[str, Any]] = []
    with pytest.raises(UpstreamError) as info:
        async for batch in backend.stream(chat("drop")):
            seen += batch
    assert [c["choices"][0]["delta"].get("content") for c in seen] == ["", "Hello"]
    assert info.value.status == 502
    assert "dropped" in info.value.message


async def test_stream_ending_without_message_stop_is_an_error(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("nostop", [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hel"}}},
    ])
    with pytest.raises(UpstreamError, match="messageStop"):
        await collect(backend, chat("nostop"))


@pytest.mark.parametrize(("status", "error_type", "want_status", "want_code"), [
    (400, "ValidationException", 400, None),
    (403, "AccessDeniedException", 403, None),
    (429, "ThrottlingException", 429, "rate_limit_exceeded"),
    (404, "ResourceNotFoundException", 404, "model_not_found"),
    (429, "ModelNotReadyException", 503, "model_not_ready"),
    (408, "ModelTimeoutException", 408, "model_timeout"),
    (500, "InternalServerException", 500, "server_error"),
    (503, "ServiceUnavailableException", 503, "server_error"),
])
async def test_http_errors_before_streaming_become_upstream_errors(
    fake: FakeBedrock, backend: BedrockBackend, status: int, error_type: str,
    want_status: int, want_code: str | None,
) -> None:
    model = f"http-{error_type}"
    fake.error(model, status, error_type, f"{error_type} says no")
    with pytest.raises(UpstreamError) as info:
        await collect(backend, chat(model))
    assert info.value.status == want_status
    assert info.value.code == want_code
    assert info.value.message == f"Bedrock returned {error_type}: {error_type} says no"
    if want_status == 403:
        assert info.value.type == "permission_error"


async def test_validation_error_about_input_length_is_context_length_exceeded(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.error("long", 400, "ValidationException", "Input is too long for requested model.")
    with pytest.raises(UpstreamError) as info:
        await collect(backend, chat("long"))
    assert (info.value.status, info.value.code) == (400, "context_length_exceeded")


async def test_non_stream_converse_returns_one_chat_completion(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.json("anthropic.claude-sonnet-4-20250514-v1:0", {
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Think.", "signature": "c2ln"}}},
            {"reasoningContent": {"redactedContent": base64.b64encode(b"\x00opaque").decode()}},
            {"text": "Calling."},
            {"toolUse": {"toolUseId": "tooluse_x", "name": "get_weather",
                         "input": {"city": "Paris"}}},
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120,
                  "cacheReadInputTokens": 30, "cacheWriteInputTokens": 5},
        "metrics": {"latencyMs": 10},
    })
    (completion,) = await collect(backend, chat("anthropic.claude-sonnet-4-20250514-v1:0",
                                                stream=False))
    assert completion["object"] == "chat.completion"
    assert completion["id"] == "chatcmpl-fake-request-id"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Calling."
    assert message["reasoning_content"] == "Think."
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Think.", "signature": "c2ln",
         "format": "anthropic-claude-v1", "index": 0},
        {"type": "reasoning.encrypted", "data": base64.b64encode(b"\x00opaque").decode(),
         "format": "anthropic-claude-v1", "index": 1},
    ]
    assert message["tool_calls"] == [{"id": "tooluse_x", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert completion["usage"] == {
        "prompt_tokens": 135, "completion_tokens": 20, "total_tokens": 155,
        "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 5}}
    assert fake.requests_for("anthropic.claude-sonnet-4-20250514-v1:0")[-1].operation == \
        "converse"


async def test_stream_usage_counts_cache_reads_and_writes(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("cache", [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "ok"}}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "max_tokens"}},
        {"metadata": {"usage": {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10,
                                "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 24},
                      "metrics": {"latencyMs": 1}}},
    ])
    chunks = await collect(backend, chat("cache"))
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 1031, "completion_tokens": 3, "total_tokens": 1034,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 24}}


async def test_closing_the_generator_closes_the_upstream_stream_promptly(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    fake.stream("hang", [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Once"}}},
        hang(20),
    ])
    before = {t.ident for t in threading.enumerate() if t.name == "bedrock-stream"}
    agen = backend.stream(chat("hang"))
    got: list[dict[str, Any]] = []
    while len(got) < 2:  # one batch or two, as the events happened to arrive
        got += await agen.__anext__()
    assert got[0]["choices"][0]["delta"]["role"] == "assistant"
    assert got[1]["choices"][0]["delta"]["content"] == "Once"
    started = time.monotonic()
    await agen.aclose()
    # 10 s: a thread and a socket on a loaded machine; the stream itself hangs for 20 s
    deadline = started + 10
    while time.monotonic() < deadline:
        pumps = [t for t in threading.enumerate()
                 if t.name == "bedrock-stream" and t.ident not in before]
        if not pumps and "hang" in fake.disconnects:
            break
        await asyncio.sleep(0.02)
    assert not [t for t in threading.enumerate()
                if t.name == "bedrock-stream" and t.ident not in before]
    assert "hang" in fake.disconnects
    assert time.monotonic() - started < 10


def _sealed_details(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the Responses translator seals for the reasoning item these chunks produce."""
    from responses_gateway.translate.response_object import new_response
    from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions

    translator = ResponseTranslator(
        new_response({"model": "m"}, response_id="resp_t", created_at=1),
        TranslateOptions(seal=lambda payload: json.dumps(payload), encrypted_reasoning=True))
    translator.start()
    for chunk in chunks:
        translator.feed(chunk)
    translator.finish()
    [item] = [i for i in translator.response["output"] if i["type"] == "reasoning"]
    return json.loads(item["encrypted_content"])["reasoning_details"]


def _delta(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


async def test_each_signed_block_of_one_reasoning_item_is_sealed_with_its_own_text(
    fake: FakeBedrock, backend: BedrockBackend
) -> None:
    """Two signed thinking blocks (and a redacted one) in a row form one reasoning item; each
    block keeps its own text and signature, in order, so Claude can verify them next turn."""
    events = [{"messageStart": {"role": "assistant"}}]
    for index, step in enumerate([("One, ", "two.", "sig-1"), None, ("Three.", "", "sig-2")]):
        if step is None:
            events.append({"contentBlockDelta": {"contentBlockIndex": index, "delta": {
                "reasoningContent": {"redactedContent": base64.b64encode(b"\x00r").decode()}}}})
        else:
            events += [{"contentBlockDelta": {"contentBlockIndex": index, "delta": {
                "reasoningContent": d}}} for d in ({"text": step[0]}, {"text": step[1]},
                                                     {"signature": step[2]})]
        events.append({"contentBlockStop": {"contentBlockIndex": index}})
    events += [{"contentBlockDelta": {"contentBlockIndex": 3, "delta": {"text": "Hi"}}},
               {"messageStop": {"stopReason": "end_turn"}}]
    fake.stream("anthropic.claude-two-blocks", events)
    chunks = await collect(backend, chat("anthropic.claude-two-blocks"))

    fmt = {"format": "anthropic-claude-v1"}
    assert _sealed_details(chunks) == [
        {"type": "reasoning.text", "text": "One, two.", "signature": "sig-1", **fmt},
        {"type": "reasoning.encrypted", "data": base64.b64encode(b"\x00r").decode(), **fmt},
        {"type": "reasoning.text", "text": "Three.", "signature": "sig-2", **fmt},
    ]


async def test_sealed_block_text_for_other_chunk_shapes() -> None:
    # the signature in the same delta as the block's last text (text is read first)
    assert _sealed_details([
        _delta(reasoning_content="Head, "),
        _delta(reasoning_content="tail.", reasoning_details=[
            {"type": "reasoning.text", "signature": "s1"}]),
    ]) == [{"type": "reasoning.text", "text": "Head, tail.", "signature": "s1"}]
    # OpenRouter: fragments with text in the details too; unsigned text after the last
    # signature is not sealed (it could not be verified)
    assert _sealed_details([
        _delta(reasoning="A", reasoning_details=[{"type": "reasoning.text", "text": "A"}]),
        _delta(reasoning="B", reasoning_details=[
            {"type": "reasoning.text", "text": "B", "signature": "sa"}]),
        _delta(reasoning="C", reasoning_details=[
            {"type": "reasoning.text", "text": "C", "signature": "sc"}]),
        _delta(reasoning="unsigned"),
    ]) == [{"type": "reasoning.text", "text": "AB", "signature": "sa"},
           {"type": "reasoning.text", "text": "C", "signature": "sc"}]
    # a whole chat.completion: the joined reasoning plus per-block details with their text
    completion = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "ok", "reasoning_content": "XY",
        "reasoning_details": [{"type": "reasoning.text", "text": "X", "signature": "sx"},
                              {"type": "reasoning.text", "text": "Y", "signature": "sy"}]}}]}
    assert _sealed_details([completion]) == [
        {"type": "reasoning.text", "text": "X", "signature": "sx"},
        {"type": "reasoning.text", "text": "Y", "signature": "sy"}]

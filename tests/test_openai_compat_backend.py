"""The OpenAI-compatible backend against a real scripted Chat Completions server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import orjson
import pytest

from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.chunks import parse_chunk
from responses_gateway.backends.openai_compat import OpenAICompatBackend, parse_retry_after
from responses_gateway.errors import UpstreamError
from tests.conftest import FIXTURES
from tests.helpers.scripted_upstream import (
    DEFAULT_REASONING,
    DEFAULT_REFUSAL,
    DEFAULT_TEXT,
    ScriptedUpstream,
    prompt_count,
    split_text,
)

T = TypeVar("T")
Chunk = dict[str, Any]


def as_dict(chunk: dict[str, Any] | bytes) -> Chunk:
    """Plain data events come as their JSON bytes (the translator parses them)."""
    if isinstance(chunk, bytes):
        parsed = parse_chunk(None, chunk)
        assert parsed is not None
        return parsed
    return chunk


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture
def up(upstream: ScriptedUpstream) -> ScriptedUpstream:
    upstream.reset()
    return upstream


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await factory()
    return asyncio.run(main())


def request(directive: str | None, *, stream: bool = True, **body: Any) -> BackendRequest:
    text = "Hello" + (f" [[script:{directive}]]" if directive else "")
    payload: dict[str, Any] = {"model": "gpt-test", "stream": stream,
                               "messages": [{"role": "user", "content": text}]}
    payload.update(body)
    return BackendRequest(body=payload)


def backend_for(up: ScriptedUpstream, **kwargs: Any) -> OpenAICompatBackend:
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("read_timeout", 10)
    return OpenAICompatBackend(up.base_url, "sk-test", **kwargs)


async def collect(backend: OpenAICompatBackend, req: BackendRequest) -> list[Chunk]:
    try:
        return [as_dict(chunk) async for batch in backend.stream(req) for chunk in batch]
    finally:
        await backend.aclose()


async def collect_until_error(
    backend: OpenAICompatBackend, req: BackendRequest
) -> tuple[list[Chunk], UpstreamError | None]:
    chunks: list[Chunk] = []
    try:
        async for batch in backend.stream(req):
            chunks += map(as_dict, batch)
    except UpstreamError as exc:
        return chunks, exc
    finally:
        await backend.aclose()
    return chunks, None


def stream_chunks(up: ScriptedUpstream, directive: str | None, **kwargs: Any) -> list[Chunk]:
    body = kwargs.pop("body", {})
    return run(lambda: collect(backend_for(up, **kwargs), request(directive, **body)))


def field_text(chunks: list[Chunk], name: str) -> str:
    return "".join(
        c["choices"][0]["delta"].get(name) or "" for c in chunks if c.get("choices")
    )


def finish_reason(chunks: list[Chunk]) -> str | None:
    reasons = [c["choices"][0]["finish_reason"] for c in chunks
               if c.get("choices") and c["choices"][0].get("finish_reason")]
    assert len(reasons) <= 1
    return reasons[0] if reasons else None


def tool_calls(chunks: list[Chunk]) -> dict[int, dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            for call in choice["delta"].get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.get("id") or ""
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
    return calls


# -- behaviours --------------------------------------------------------------------------


def test_text_stream_sends_key_and_body(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "text n=5")
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert len(chunks) == 7  # role chunk, 5 deltas, finish chunk
    assert finish_reason(chunks) == "stop"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert up.request_headers[0]["authorization"] == "Bearer sk-test"
    assert up.requests[0]["messages"][0]["content"] == "Hello [[script:text n=5]]"
    # The upstream's thread records the end just after its last write: the client may be first.
    assert up.wait_streams_closed(10)
    assert up.streams[0].completed and not up.streams[0].client_disconnected


def test_no_authorization_header_without_key(up: ScriptedUpstream) -> None:
    backend = OpenAICompatBackend(up.base_url, None)
    chunks = run(lambda: collect(backend, request("text")))
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert "authorization" not in up.request_headers[0]


def test_tool_call(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, """tool name=lookup args='{"q": "x y"}'""")
    assert tool_calls(chunks) == {0: {"id": "call_0_0", "name": "lookup",
                                      "arguments": '{"q": "x y"}'}}
    assert finish_reason(chunks) == "tool_calls"


def test_tool_round_trip_quotes_the_tool_output(up: ScriptedUpstream) -> None:
    messages = [
        {"role": "user", "content": "Weather? [[script:tool]]"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    req = BackendRequest(body={"model": "m", "stream": True, "messages": messages})
    chunks = run(lambda: collect(backend_for(up), req))
    assert field_text(chunks, "content") == "Tool output: sunny, 21 C"
    assert finish_reason(chunks) == "stop"


def test_tool_sequence_uses_request_tools_one_per_turn(up: ScriptedUpstream) -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}}
             for n in ("alpha", "beta")]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go [[script:tool names=alpha,beta]]"}]
    for expected in ("alpha", "beta"):
        req = BackendRequest(body={"model": "m", "stream": True, "messages": messages,
                                   "tools": tools})
        call = tool_calls(run(lambda req=req: collect(backend_for(up), req)))[0]
        assert call["name"] == expected
        messages = [*messages,
                    {"role": "assistant", "tool_calls": [{"id": call["id"], "type": "function",
                     "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                    {"role": "tool", "tool_call_id": call["id"], "content": f"{expected}-out"}]
    req = BackendRequest(body={"model": "m", "stream": True, "messages": messages})
    chunks = run(lambda: collect(backend_for(up), req))
    assert field_text(chunks, "content") == "Tool output: alpha-out | beta-out"


def test_parallel_tool_calls(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "parallel")
    calls = tool_calls(chunks)
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    assert json.loads(calls[1]["arguments"]) == {"city": "Tokyo"}
    assert calls[0]["id"] != calls[1]["id"]
    assert finish_reason(chunks) == "tool_calls"


def test_reasoning_then_text(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "reasoning")
    assert field_text(chunks, "reasoning_content") == DEFAULT_REASONING
    assert field_text(chunks, "content") == DEFAULT_TEXT
    first_text = next(i for i, c in enumerate(chunks) if c["choices"][0]["delta"].get("content"))
    last_reasoning = max(i for i, c in enumerate(chunks)
                         if c["choices"][0]["delta"].get("reasoning_content"))
    assert last_reasoning < first_text


def test_refusal(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "refusal")
    assert field_text(chunks, "refusal") == DEFAULT_REFUSAL
    assert field_text(chunks, "content") == ""


def test_length_cut(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "length")
    assert finish_reason(chunks) == "length"
    assert field_text(chunks, "content") == "This answer is cut"


def test_usage_chunk_when_asked(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "text", body={"stream_options": {"include_usage": True}})
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    assert "usage" not in chunks[-2]


def test_model_name_selects_script(up: ScriptedUpstream) -> None:
    req = BackendRequest(body={"model": "script/refusal", "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]})
    chunks = run(lambda: collect(backend_for(up), req))
    assert field_text(chunks, "refusal") == DEFAULT_REFUSAL


def test_many_deltas_in_order(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "deltas n=500")
    assert field_text(chunks, "content") == "".join(f"{i} " for i in range(500))


def test_huge_body(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "huge size=3000000 piece=100000")
    text = field_text(chunks, "content")
    assert len(text) == 3_000_000
    assert text.startswith("0123456789abc")


@pytest.mark.parametrize("directive", [
    "crlf", "multiline", "comments", "text eol=cr", "text eol=crlf multiline=1 comments=1",
])
def test_framing_variants(up: ScriptedUpstream, directive: str) -> None:
    chunks = stream_chunks(up, directive + " n=6")
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert finish_reason(chunks) == "stop"
    assert not any("error" in c for c in chunks)


@pytest.mark.parametrize("name", [
    "openai-gpt4o-parallel-tool-calls.sse",
    "openrouter-o3-encrypted-reasoning-usage-after-finish.sse",  # ": comment" lines
    "groq-llama33-single-chunk-tool-call.jsonl",
])
def test_fixture_replay_matches_the_recording(up: ScriptedUpstream, name: str) -> None:
    chunks = stream_chunks(up, f"fixture:{name}")
    raw = (FIXTURES / "chat-streams" / name).read_text()
    if name.endswith(".jsonl"):
        expected = [json.loads(line) for line in raw.splitlines() if line.strip()]
    else:
        expected = [json.loads(line[6:]) for line in raw.splitlines()
                    if line.startswith("data: ") and line != "data: [DONE]"]
    assert chunks == expected


def test_fixture_error_frame_without_done_then_the_close_is_reported(
    up: ScriptedUpstream,
) -> None:
    """The backend reports an end without [DONE]; judging it is the caller's (the error frame
    has already ended the response there)."""
    chunks, err = run(lambda: collect_until_error(
        backend_for(up), request("fixture:groq-gpt-oss-120b-reasoning-error-midstream.sse")))
    assert chunks[-1]["error"]["code"] == "tool_use_failed"
    assert all("error" not in c for c in chunks[:-1])
    assert err is not None and err.code == "upstream_connection_closed"


def test_plain_data_events_come_as_their_wire_bytes(up: ScriptedUpstream) -> None:
    async def raw() -> list[Any]:
        backend = backend_for(up)
        try:
            return [c async for batch in backend.stream(request("text n=3")) for c in batch]
        finally:
            await backend.aclose()

    chunks = run(raw)
    assert chunks and all(isinstance(c, bytes) for c in chunks)
    assert [json.loads(c) for c in chunks] == [as_dict(c) for c in chunks]


def test_echo_and_directive_in_system_message(up: ScriptedUpstream) -> None:
    req = BackendRequest(body={"model": "m", "stream": True, "messages": [
        {"role": "system", "content": "[[script:echo n=2]]"},
        {"role": "user", "content": [{"type": "text", "text": "repeat me"}]},
    ]})
    assert field_text(run(lambda: collect(backend_for(up), req)), "content") == "repeat me"


def test_bad_directive_is_a_clear_400(up: ScriptedUpstream) -> None:
    backend = backend_for(up)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request("nosuchscript")))
    assert info.value.status == 400 and info.value.code == "unknown_script"
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request("text n=many")))
    assert info.value.code == "bad_script"


# -- errors before output ----------------------------------------------------------------


async def first_chunk(backend: OpenAICompatBackend, req: BackendRequest) -> list[Chunk]:
    """What the HTTP layer does: the first chunks (or the error) before committing headers."""
    agen = backend.stream(req)
    try:
        return await anext(agen)
    finally:
        await agen.aclose()
        await backend.aclose()


def test_429_retried_then_success_honours_retry_after(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=2)
    started = time.monotonic()
    chunks = run(lambda: collect(backend, request("rate_limit times=2 retry_after=0.3 key=a")))
    elapsed = time.monotonic() - started
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert len(up.requests) == 3 and up.attempts("a") == 3
    assert 0.55 <= elapsed < 2.0  # two waits of 0.3 s, not the 0.01 s backoff


def test_429_retry_after_ms_and_cap(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=1, retry_after_cap=0.2)
    started = time.monotonic()
    run(lambda: collect(backend, request("rate_limit times=1 retry_after=100 key=b")))
    assert 0.18 <= time.monotonic() - started < 1.5  # 100 s capped at 0.2 s
    backend = backend_for(up, max_retries=1)
    started = time.monotonic()
    run(lambda: collect(backend, request(
        "rate_limit times=1 retry_after=none retry_after_ms=250 key=c")))
    assert 0.23 <= time.monotonic() - started < 1.5


def test_429_exhausted_is_a_429_before_output(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=1)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request("rate_limit retry_after=0")))
    err = info.value
    assert (err.status, err.type, err.code) == (429, "requests", "rate_limit_exceeded")
    assert err.message.startswith("Upstream error (HTTP 429): Rate limit reached")
    assert err.retry_after == 0
    assert len(up.requests) == 2


def test_429_upstream_code_kept(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=0)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request(
            'rate_limit code=insufficient_quota message="You exceeded your quota"')))
    assert (info.value.status, info.value.code) == (429, "insufficient_quota")
    assert info.value.message == "Upstream error (HTTP 429): You exceeded your quota"


def test_500_retried_then_exhausted(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "500 times=1 key=d", max_retries=1)
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert len(up.requests) == 2
    up.reset()
    backend = backend_for(up, max_retries=2)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request("error status=503")))
    err = info.value
    assert (err.status, err.type, err.code) == (503, "server_error", "server_error")
    assert err.message.startswith("Upstream error (HTTP 503): The server had an error")
    assert len(up.requests) == 3


def test_400_keeps_upstream_code_and_is_not_retried(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=2)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request(
            'error status=400 code=context_length_exceeded message="Too many tokens"')))
    err = info.value
    assert (err.status, err.type, err.code) == (400, "invalid_request_error",
                                                "context_length_exceeded")
    assert err.message == "Upstream error (HTTP 400): Too many tokens"
    assert len(up.requests) == 1


def test_non_json_error_body(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=0)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request('error status=502 raw="<h1>Bad gateway</h1>"')))
    assert info.value.status == 502
    assert info.value.code == "server_error"
    assert info.value.message == "Upstream error (HTTP 502): <h1>Bad gateway</h1>"


@pytest.mark.parametrize("status", [401, 403])
def test_upstream_refusing_the_gateways_key_is_a_502_without_the_key(status: int) -> None:
    """Issue 16: a tenant must not be told its own key is wrong, nor see the upstream key."""
    secret = "upstream-secret-key-0123456789"
    with ScriptedUpstream(api_key="right") as up:
        backend = OpenAICompatBackend(up.base_url, secret, max_retries=2)
        echo = f'message="Incorrect API key provided: {secret}. Header was Bearer {secret}"'
        with pytest.raises(UpstreamError) as info:
            run(lambda: first_chunk(backend, request(f"error status={status} {echo}")))
        err = info.value
        assert (err.status, err.type, err.code) == (502, "server_error", "upstream_auth_failed")
        assert secret not in err.message and "Incorrect API key provided" in err.message
        assert len(up.requests) == 1  # not retried
        ok = OpenAICompatBackend(up.base_url, "right")
        assert field_text(run(lambda: collect(ok, request("text"))), "content") == DEFAULT_TEXT


@pytest.mark.parametrize("leak", ["sk-proj-AbCdEf0123456789xyz", "Bearer gw-tenant-token-42"])
def test_key_shaped_text_is_redacted_from_every_upstream_message(
    up: ScriptedUpstream, leak: str
) -> None:
    backend = backend_for(up, max_retries=0)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request(
            f'error status=400 message="bad request from {leak}, see docs"')))
    assert leak.split()[-1] not in info.value.message
    assert "[redacted]" in info.value.message and "see docs" in info.value.message
    up.reset()
    chunks, _ = run(lambda: collect_until_error(backend_for(up), request(
        f'error_event after=2 code=server_error message="proxy key {leak} failed"')))
    assert chunks[-1]["error"]["message"] == (
        "proxy key " + ("Bearer " if leak.startswith("Bearer") else "") + "[redacted] failed")


def test_error_frame_in_a_plain_data_event_is_redacted(up: ScriptedUpstream) -> None:
    """An error frame sent as ``data: {"error": …}`` (what LiteLLM and OpenRouter send) comes
    off the wire as bytes; the backend parses it to redact it."""
    secret = "configured-upstream-key-000"
    backend = OpenAICompatBackend(up.base_url, secret, backoff_base=0.01)
    frame = {"error": {"message": f"auth with {secret} expired", "code": "server_error"}}
    chunks = backend._redact_errors([b'{"id": "c1", "choices": []}', orjson.dumps(frame)])
    assert chunks == [b'{"id": "c1", "choices": []}',
                      {"error": {"message": "auth with [redacted] expired",
                                 "code": "server_error"}}]


def test_500_saying_the_request_was_invalid_is_not_retried(up: ScriptedUpstream) -> None:
    """llama-cpp-python answers its request validation errors with a 500."""
    backend = backend_for(up, max_retries=2)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request(
            'error status=500 message="1 validation error for CreateChatCompletionRequest: '
            'messages.1.content Input should be a valid string"')))
    assert info.value.status == 500
    assert len(up.requests) == 1


@pytest.mark.parametrize(("status", "tries"), [(501, 1), (502, 3), (504, 3), (529, 3)])
def test_only_failures_a_retry_can_fix_are_retried(
    up: ScriptedUpstream, status: int, tries: int
) -> None:
    backend = backend_for(up, max_retries=2)
    with pytest.raises(UpstreamError):
        run(lambda: first_chunk(backend, request(f"error status={status}")))
    assert len(up.requests) == tries


def test_400_naming_an_unsupported_parameter_is_retried_once_without_it(
    up: ScriptedUpstream,
) -> None:
    backend = backend_for(up, max_retries=2)
    script = ("error status=400 times=1 then=text code=unsupported_parameter "
              "message=\"Unsupported parameter: 'logprobs' is not supported with this model.\"")

    async def two_requests() -> list[Chunk]:
        first = [as_dict(c) async for b in backend.stream(request(script, logprobs=True))
                 for c in b]
        second = [as_dict(c) async for b in backend.stream(request("text", logprobs=True))
                  for c in b]
        await backend.aclose()
        return first + second

    chunks = run(two_requests)
    assert field_text(chunks, "content") == DEFAULT_TEXT * 2
    bodies = up.requests
    assert len(bodies) == 3 and "logprobs" in bodies[0]
    assert "logprobs" not in bodies[1]  # the retry
    assert "logprobs" not in bodies[2]  # remembered for this upstream and model


def test_422_extra_forbidden_and_the_token_limit_rename(up: ScriptedUpstream) -> None:
    detail = ('{"detail": [{"type": "extra_forbidden", "loc": ["body", "stream_options"], '
              '"msg": "Extra inputs are not permitted"}]}')
    backend = backend_for(up, max_retries=0)
    chunks = run(lambda: collect(backend, request(
        f"error status=422 times=1 then=text raw='{detail}'",
        stream_options={"include_usage": True})))
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert "stream_options" in up.requests[0] and "stream_options" not in up.requests[1]
    up.reset()
    message = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
               "Use 'max_completion_tokens' instead.")
    backend = backend_for(up, max_retries=0)
    run(lambda: collect(backend, request(
        f'error status=400 times=1 then=text code=unsupported_parameter message="{message}"',
        max_completion_tokens=7)))
    assert [("max_tokens" in b, b.get("max_completion_tokens")) for b in up.requests] == [
        (True, None), (False, 7)]


def test_rejected_content_is_not_retried(up: ScriptedUpstream) -> None:
    backend = backend_for(up, max_retries=2)
    with pytest.raises(UpstreamError):
        run(lambda: first_chunk(backend, request(
            "error status=400 message=\"Invalid 'messages[0].content': unsupported\"",
            logprobs=True)))
    assert len(up.requests) == 1


def test_dialect_recognised_from_models_answer() -> None:
    """A llama-server at an address that says nothing: GET /v1/models names it (owned_by
    "llamacpp") and its body is prepared for it, once for the process."""
    with ScriptedUpstream(owned_by="llamacpp") as up:
        backend = backend_for(up)
        assert backend.dialect is None
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]

        async def twice() -> None:
            for _ in range(2):
                [c async for c in backend.stream(request(
                    "text", max_completion_tokens=9, logprobs=True, tools=tools))]
            await backend.aclose()

        run(twice)
        assert backend.dialect is not None and backend.dialect.name == "llama.cpp"
        assert up.requests[0]["max_tokens"] == 9 and "logprobs" not in up.requests[0]


def test_azure_keeps_the_api_version_and_sends_api_key(up: ScriptedUpstream) -> None:
    backend = OpenAICompatBackend(up.base_url + "?api-version=2024-10-21", "azure-key",
                                  dialect="azure")
    assert backend.url == up.base_url + "/chat/completions?api-version=2024-10-21"
    run(lambda: collect(backend, request("text", max_tokens=5)))
    assert up.request_headers[0]["api-key"] == "azure-key"
    assert up.requests[0]["max_completion_tokens"] == 5


def test_connect_error_retried_then_502() -> None:
    with ScriptedUpstream() as up:
        url = up.base_url
    backend = OpenAICompatBackend(url, "k", max_retries=2, backoff_base=0.05)
    started = time.monotonic()
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request("text")))
    assert (info.value.status, info.value.code) == (502, "upstream_unavailable")
    assert time.monotonic() - started >= 0.05 * 0.5 + 0.1 * 0.5  # two backoffs happened


def test_slow_first_byte_past_read_timeout_is_504(up: ScriptedUpstream) -> None:
    backend = backend_for(up, read_timeout=0.3, max_retries=2)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request("text first_delay=2")))
    assert (info.value.status, info.value.code) == (504, "upstream_timeout")
    assert len(up.requests) == 1


# -- failures after output ---------------------------------------------------------------


@pytest.mark.parametrize("directive", ["drop after=3", "drop after=3 clean=1"])
def test_dropped_connection_after_output_is_not_retried(
    up: ScriptedUpstream, directive: str
) -> None:
    chunks, err = run(lambda: collect_until_error(backend_for(up, max_retries=2),
                                                  request(directive)))
    assert err is not None
    assert (err.status, err.code) == (502, "upstream_connection_closed")
    assert "upstream connection closed before the response finished" in err.message
    assert len(chunks) == 4
    assert field_text(chunks, "content") == "".join(split_text(DEFAULT_TEXT, 8)[:3])
    assert len(up.requests) == 1


def test_stall_past_read_timeout_is_504(up: ScriptedUpstream) -> None:
    backend = backend_for(up, read_timeout=0.4)
    started = time.monotonic()
    chunks, err = run(lambda: collect_until_error(backend, request("stall after=2 seconds=5")))
    assert err is not None and (err.status, err.code) == (504, "upstream_timeout")
    assert len(chunks) == 3
    assert time.monotonic() - started < 2.5
    assert len(up.requests) == 1


def test_slow_stream_within_timeout_completes(up: ScriptedUpstream) -> None:
    started = time.monotonic()
    chunks = stream_chunks(up, "slow delay=0.1 n=4", read_timeout=0.5)
    assert field_text(chunks, "content") == DEFAULT_TEXT
    assert time.monotonic() - started >= 0.6  # 6 items, 0.1 s each


def test_malformed_json_chunk_becomes_error_chunk(up: ScriptedUpstream) -> None:
    chunks = stream_chunks(up, "malformed after=2")
    errors = [c for c in chunks if "error" in c]
    assert len(errors) == 1 and errors[0]["error"]["code"] == "upstream_protocol_error"
    assert chunks.index(errors[0]) == 3
    assert finish_reason(chunks) == "stop"  # the stream went on to its end


def test_event_error_frame(up: ScriptedUpstream) -> None:
    chunks, err = run(lambda: collect_until_error(
        backend_for(up), request('error_event after=2 code=overloaded message="busy"')))
    assert err is not None and err.code == "upstream_connection_closed"  # no [DONE] after it
    assert chunks[-1] == {"error": {"message": "busy", "type": "server_error", "param": None,
                                    "code": "overloaded"}}
    assert field_text(chunks[:-1], "content") == DEFAULT_TEXT[:len(field_text(chunks[:-1],
                                                                             "content"))]


# -- cancellation ------------------------------------------------------------------------


def test_consumer_aclose_closes_upstream_within_a_second(up: ScriptedUpstream) -> None:
    closed_at: list[float] = []

    async def main() -> None:
        backend = backend_for(up)
        agen = backend.stream(request("slow delay=0.2 n=50"))
        await anext(agen)
        await anext(agen)
        await agen.aclose()
        closed_at.append(time.monotonic())
        assert await asyncio.to_thread(up.wait_streams_closed, 10)
        await backend.aclose()

    run(main)
    record = up.streams[0]
    assert record.client_disconnected and not record.completed
    assert record.closed_at is not None and record.closed_at - closed_at[0] < 1.0
    assert up.active_streams == 0


def test_cancelled_task_closes_stalled_upstream_within_a_second(up: ScriptedUpstream) -> None:
    cancelled_at: list[float] = []

    async def main() -> None:
        backend = backend_for(up)
        got_first = asyncio.Event()

        async def consume() -> None:
            async for _ in backend.stream(request("stall after=1 seconds=30")):
                got_first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(got_first.wait(), 5)
        await asyncio.sleep(0.1)  # the upstream is now silent, the consumer waits on the socket
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled_at.append(time.monotonic())
        assert await asyncio.to_thread(up.wait_streams_closed, 10)
        await backend.aclose()

    run(main)
    record = up.streams[0]
    assert record.client_disconnected
    assert record.closed_at is not None and record.closed_at - cancelled_at[0] < 1.0


def test_finished_streams_reuse_the_pooled_connection(up: ScriptedUpstream) -> None:
    async def main() -> None:
        backend = backend_for(up)
        for _ in range(3):
            chunks = [as_dict(c) async for b in backend.stream(request("text")) for c in b]
            assert field_text(chunks, "content") == DEFAULT_TEXT
        await backend.aclose()

    run(main)
    clients = up.request_clients
    assert len(clients) == 3 and len(set(clients)) == 1


def test_concurrent_streams_share_a_bounded_pool(up: ScriptedUpstream) -> None:
    async def main() -> OpenAICompatBackend:
        backend = backend_for(up, max_connections=8)

        async def one() -> str:
            chunks = [as_dict(c) async for b in backend.stream(request("deltas n=50")) for c in b]
            return field_text(chunks, "content")

        texts = await asyncio.gather(*(one() for _ in range(40)))
        assert set(texts) == {"".join(f"{i} " for i in range(50))}
        for _ in range(10):  # each failure gives its connection slot back
            with pytest.raises(UpstreamError):
                await anext(backend.stream(request("error status=400")))
        texts = await asyncio.gather(*(one() for _ in range(16)))
        assert len(texts) == 16
        await backend.aclose()
        return backend

    backend = run(main)
    assert 1 < len(set(up.request_clients)) <= 8  # no more connections than the limit
    # The same backend used from another event loop gets a fresh pool (Lambda-style reuse).
    assert field_text(run(lambda: collect(backend, request("text"))), "content") == DEFAULT_TEXT


def test_redirect_is_a_502() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"location": "https://elsewhere/v1/chat/completions"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    backend = OpenAICompatBackend("http://upstream.test/v1", None, client=client)
    with pytest.raises(UpstreamError) as info:
        run(lambda: first_chunk(backend, request(None)))
    assert info.value.status == 502 and "redirect to https://elsewhere" in info.value.message


# -- stream=false ------------------------------------------------------------------------


def completion(up: ScriptedUpstream, directive: str, **kwargs: Any) -> list[Chunk]:
    return run(lambda: collect(backend_for(up, **kwargs), request(directive, stream=False)))


def test_non_stream_text(up: ScriptedUpstream) -> None:
    [body] = completion(up, "text")
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == DEFAULT_TEXT
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 4
    assert up.requests[0]["stream"] is False


@pytest.mark.parametrize(("directive", "check"), [
    ("tool", lambda m, f: m["tool_calls"][0]["function"]["name"] == "get_weather"
     and f == "tool_calls"),
    ("parallel", lambda m, f: len(m["tool_calls"]) == 2),
    ("reasoning", lambda m, f: m["reasoning_content"] == DEFAULT_REASONING
     and m["content"] == DEFAULT_TEXT),
    ("refusal", lambda m, f: m["refusal"] == DEFAULT_REFUSAL and m["content"] is None),
    ("length", lambda m, f: f == "length"),
    ("fixture:openai-gpt4o-refusal.sse", lambda m, f: m["refusal"]),
])
def test_non_stream_behaviours(
    up: ScriptedUpstream, directive: str, check: Callable[[Chunk, str], bool]
) -> None:
    [body] = completion(up, directive)
    choice = body["choices"][0]
    assert check(choice["message"], choice["finish_reason"])


@pytest.mark.parametrize(("directive", "status", "code"), [
    ("rate_limit retry_after=0", 429, "rate_limit_exceeded"),
    ("malformed", 502, "upstream_protocol_error"),
    ("error_event code=model_error", 502, "model_error"),
    ("drop", 502, "upstream_connection_closed"),
])
def test_non_stream_errors(up: ScriptedUpstream, directive: str, status: int, code: str) -> None:
    with pytest.raises(UpstreamError) as info:
        completion(up, directive, max_retries=0)
    assert (info.value.status, info.value.code) == (status, code)


def test_non_stream_stall_is_504(up: ScriptedUpstream) -> None:
    with pytest.raises(UpstreamError) as info:
        completion(up, "stall seconds=3", read_timeout=0.3)
    assert (info.value.status, info.value.code) == (504, "upstream_timeout")


# -- framing at every read boundary (exact byte splits need a mock transport) -------------


def _split_backend(pieces: list[bytes]) -> OpenAICompatBackend:
    async def body() -> Any:
        for piece in pieces:
            yield piece

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAICompatBackend("http://upstream.test/v1", None, client=client)


@pytest.mark.slow
@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_read_boundary(eol: bytes) -> None:
    events = [
        b": comment",
        b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}',
        b'data: {"choices":[{"index":0,"delta":\ndata: {"content":"b"},"finish_reason":null}]}',
        b"event: error\ndata: {\"code\": \"x\"}",  # parse_chunk wraps it in "error"
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        b"data: [DONE]",
    ]
    raw = b"".join(e.replace(b"\n", eol) + eol + eol for e in events)
    expected = None
    for cut in range(1, len(raw)):
        backend = _split_backend([raw[:cut], raw[cut:]])
        chunks = run(lambda backend=backend: collect(backend, request(None)))
        if expected is None:
            expected = chunks
            assert field_text(chunks, "content") == "ab"
            assert {"error": {"code": "x"}} in chunks and len(chunks) == 4
        assert chunks == expected, cut
    byte_by_byte = _split_backend([raw[i:i + 1] for i in range(len(raw))])
    assert run(lambda: collect(byte_by_byte, request(None))) == expected


def test_stream_request_answered_with_json_yields_the_completion() -> None:
    completion_body = {"object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion_body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    backend = OpenAICompatBackend("http://upstream.test/v1", None, client=client)
    assert run(lambda: collect(backend, request(None))) == [completion_body]


def test_parse_retry_after() -> None:
    assert parse_retry_after(httpx.Headers({"retry-after": "2"})) == 2.0
    assert parse_retry_after(httpx.Headers({"retry-after": "1.5"})) == 1.5
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx.Headers({})) is None
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 28 <= (parse_retry_after(httpx.Headers({"retry-after": date})) or 0) <= 31
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert parse_retry_after(httpx.Headers({"retry-after": past})) == 0.0


# -- what the backend declares beyond streaming (backends/base.py) -----------------------------


def test_declared_capabilities_of_an_openai_compatible_server() -> None:
    """A vLLM server: its window from GET /models, its exact count from /tokenize, its models
    listed; reasoning goes back as the operator configured."""
    with ScriptedUpstream(owned_by="vllm", context_window=8192, tokenizer="vllm") as up:
        backend = backend_for(up)
        chat = {"model": "scripted", "messages": [{"role": "user", "content": "count me"}]}

        async def ask() -> tuple[int | None, int | None, list[dict[str, Any]]]:
            try:
                return (await backend.context_window("scripted"),
                        await backend.count_tokens(chat), await backend.list_models())
            finally:
                await backend.aclose()

        window, counted, listed = run(ask)
        assert window == 8192
        assert counted == prompt_count(chat)
        assert up.tokenize_requests[-1][1]["messages"] == chat["messages"]
        assert listed[0] == {"id": "scripted", "object": "model", "created": 0,
                             "owned_by": "vllm", "max_model_len": 8192}
        assert backend.reasoning_input("reasoning_content") == "reasoning_content"
        assert backend.reasoning_input(None) is None


def test_a_server_that_cannot_count_or_list() -> None:
    """A generic server: no count (the caller estimates), no window; a listing that fails is
    the upstream's error, not an empty list."""
    with ScriptedUpstream() as up:
        backend = backend_for(up, dialect="generic")
        chat = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert run(lambda: backend.count_tokens(chat)) is None
        assert run(lambda: backend.context_window("scripted")) is None
        assert up.tokenize_requests == []
    down = OpenAICompatBackend("http://127.0.0.1:9/v1", None, max_retries=0)
    with pytest.raises(UpstreamError) as caught:
        run(down.list_models)
    assert caught.value.status == 502

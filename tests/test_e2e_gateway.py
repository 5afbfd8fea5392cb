"""End to end (issue 3): the gateway under uvicorn in front of a scripted Chat Completions server,
driven by the official ``openai`` client (sync and async) and raw httpx.

This file: generation features and the streaming transport. Stored responses and chains are in
test_e2e_store_chain.py, errors and auth in test_e2e_errors.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.helpers.e2e import (
    MODEL,
    TIME_TOOL,
    WEATHER_TOOL,
    check_response,
    check_stream,
    e2e_settings,
    request_with,
    sdk_events,
    split_frames,
    stream_raw,
)
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import reconstruct, sdk_validate_response
from tests.helpers.scripted_upstream import (
    DEFAULT_REASONING,
    DEFAULT_REFUSAL,
    DEFAULT_TEXT,
    ScriptedUpstream,
    StreamRecord,
)


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("e2e-gateway") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


# -- text ----------------------------------------------------------------------------------


def test_non_stream_text(client: OpenAI, upstream: ScriptedUpstream) -> None:
    response = client.responses.create(model=MODEL, input="nonstream-1 say hello")

    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.model == MODEL
    assert response.output_text == DEFAULT_TEXT
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert response.usage is not None and response.usage.output_tokens > 0
    check_response(response)
    sent = request_with(upstream, "nonstream-1")
    assert sent["stream"] is False
    assert sent["model"] == MODEL
    assert sent["messages"] == [{"role": "user", "content": "nonstream-1 say hello"}]


def test_stream_text(client: OpenAI, upstream: ScriptedUpstream) -> None:
    stream = client.responses.create(
        model=MODEL, input='sse-text-1 [[script:text text="Streaming works fine." n=5]]',
        stream=True,
    )
    events = sdk_events(stream)

    grammar = check_stream(events)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 5
    assert reconstruct(events).text == "Streaming works fine."
    final = grammar.terminal["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Streaming works fine."
    assert events[0]["response"]["id"] == final["id"]
    sent = request_with(upstream, "sse-text-1")
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert final["usage"]["output_tokens"] > 0


def test_stream_helper(client: OpenAI) -> None:
    deltas: list[str] = []
    with client.responses.stream(
        model=MODEL, input='helper-1 [[script:text text="From the helper." n=3]]'
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()

    assert deltas and "".join(deltas) == "From the helper."
    assert final.status == "completed"
    assert final.output_text == "From the helper."


@pytest.mark.slow
def test_async_client_non_stream_stream_and_concurrency(gateway: GatewayServer) -> None:
    async def main() -> tuple[Any, list[Any], list[Any], float]:
        async with AsyncOpenAI(
            base_url=gateway.base_url, api_key="sk-test", max_retries=0, timeout=30
        ) as aclient:
            single = await aclient.responses.create(model=MODEL, input="async-single")
            stream = await aclient.responses.create(
                model=MODEL, input='async-stream [[script:text text="Async stream." n=3]]',
                stream=True,
            )
            events = [event async for event in stream]
            started = time.monotonic()  # the six only: not the client's set-up, nor a cold start
            many = await asyncio.gather(*(
                aclient.responses.create(
                    model=MODEL, input=f'[[script:slow text="answer {i}" n=3 delay=0.1]]'
                )
                for i in range(6)
            ))
            return single, events, list(many), time.monotonic() - started

    single, events, many, elapsed = asyncio.run(main())

    assert single.output_text == DEFAULT_TEXT
    dicts = [e.to_dict(mode="json") for e in events]
    check_stream(dicts)
    assert reconstruct(dicts).text == "Async stream."
    assert [r.output_text for r in many] == [f"answer {i}" for i in range(6)]
    assert len({r.id for r in many}) == 6
    # six 0.5 s answers side by side, not one after the other (3 s)
    assert elapsed < 2.0, elapsed


# -- instructions, roles, tools ------------------------------------------------------------


def test_instructions_and_roles_reach_upstream_in_order(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    response = client.responses.create(
        model=MODEL,
        instructions="roles-1 You are terse.",
        input=[
            {"role": "developer", "content": "Developer rule."},
            {"role": "system", "content": "System rule."},
            {"role": "user", "content": "First question."},
            {"role": "assistant", "content": "First answer."},
            {"role": "user", "content": [{"type": "input_text", "text": "Second question."}]},
        ],
    )

    assert response.instructions == "roles-1 You are terse."
    sent = request_with(upstream, "roles-1")
    assert sent["messages"] == [
        {"role": "system", "content": "roles-1 You are terse."},
        {"role": "system", "content": "Developer rule."},
        {"role": "system", "content": "System rule."},
        {"role": "user", "content": "First question."},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "Second question."},
    ]


def test_function_tool_round_trip(client: OpenAI, upstream: ScriptedUpstream) -> None:
    question = {"role": "user", "content": "tool-rt [[script:tool args='{\"city\": \"Oslo\"}']]"}
    first = client.responses.create(model=MODEL, input=[question], tools=[WEATHER_TOOL])

    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call"
    assert call.id.startswith("fc_")
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Oslo"}
    assert call.call_id
    check_response(first)
    sent = request_with(upstream, "tool-rt")
    assert sent["tools"] == [{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": WEATHER_TOOL["description"],
            "parameters": WEATHER_TOOL["parameters"],
        },
    }]

    # Stateless continuation: the whole conversation goes back as input.
    upstream.reset()
    second = client.responses.create(
        model=MODEL,
        tools=[WEATHER_TOOL],
        store=False,
        input=[
            question,
            call.to_dict(mode="json"),
            {"type": "function_call_output", "call_id": call.call_id, "output": "cold, -3 C"},
        ],
    )

    assert second.output_text == "Tool output: cold, -3 C"
    [sent] = upstream.requests
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",  # the generic dialect: servers such as llama-cpp-python refuse null
            "tool_calls": [{
                "id": call.call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": call.arguments},
            }],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "cold, -3 C"},
    ]


def test_function_call_stream_events(client: OpenAI) -> None:
    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:tool n=4]]", tools=[WEATHER_TOOL], stream=True
    ))

    grammar = check_stream(events)
    [item] = grammar.items
    assert item.type == "function_call"
    assert item.events.count("response.function_call_arguments.delta") == 4
    [(call_id, name, arguments)] = reconstruct(events).calls
    assert name == "get_weather" and json.loads(arguments) == {"city": "Paris"}
    assert grammar.terminal["response"]["output"][0]["call_id"] == call_id


def test_parallel_calls(client: OpenAI, upstream: ScriptedUpstream) -> None:
    first = client.responses.create(
        model=MODEL, input="parallel-1 [[script:parallel]]", tools=[WEATHER_TOOL, TIME_TOOL],
        parallel_tool_calls=True,
    )

    calls = first.output
    assert [c.type for c in calls] == ["function_call", "function_call"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert len({c.call_id for c in calls}) == 2 and len({c.id for c in calls}) == 2
    assert request_with(upstream, "parallel-1")["parallel_tool_calls"] is True

    upstream.reset()
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[WEATHER_TOOL, TIME_TOOL],
        input=[
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
            {"type": "function_call_output", "call_id": calls[1].call_id, "output": "09:00"},
        ],
    )

    assert second.output_text == "Tool output: sunny | 09:00"
    [sent] = upstream.requests
    assistant, tool_a, tool_b = sent["messages"][-3:]
    assert [c["id"] for c in assistant["tool_calls"]] == [c.call_id for c in calls]
    assert tool_a == {"role": "tool", "tool_call_id": calls[0].call_id, "content": "sunny"}
    assert tool_b == {"role": "tool", "tool_call_id": calls[1].call_id, "content": "09:00"}


def test_parallel_calls_stream(client: OpenAI) -> None:
    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:parallel]]", tools=[WEATHER_TOOL, TIME_TOOL], stream=True
    ))

    grammar = check_stream(events)
    assert [(i.output_index, i.type) for i in grammar.items] == [
        (0, "function_call"), (1, "function_call")]
    assert [name for _, name, _ in reconstruct(events).calls] == ["get_weather", "get_time"]


# -- reasoning, refusal, structured output, images, limits ---------------------------------


def test_reasoning_item_before_message(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="[[script:reasoning]]")

    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.id.startswith("rs_")
    assert "".join(part.text for part in reasoning.content or []) == DEFAULT_REASONING
    assert response.output_text == DEFAULT_TEXT
    check_response(response)

    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:reasoning]]", stream=True
    ))
    grammar = check_stream(events)
    assert [i.type for i in grammar.items] == ["reasoning", "message"]
    types = [e["type"] for e in events]
    assert "response.reasoning_text.delta" in types
    assert "response.reasoning_summary_text.delta" not in types
    assert reconstruct(events).reasoning == DEFAULT_REASONING


def test_reasoning_summary_events_when_summary_requested(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    events = sdk_events(client.responses.create(
        model=MODEL, input="summary-1 [[script:reasoning]]", stream=True,
        reasoning={"effort": "low", "summary": "auto"},
    ))

    grammar = check_stream(events)
    types = [e["type"] for e in events]
    for kind in ("response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                 "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"):
        assert kind in types
    assert [i.type for i in grammar.items] == ["reasoning", "message"]
    summary = grammar.terminal["response"]["output"][0]["summary"]
    assert [part["text"] for part in summary] == [DEFAULT_REASONING]
    assert grammar.terminal["response"]["reasoning"]["summary"] == "auto"
    assert request_with(upstream, "summary-1")["reasoning_effort"] == "low"


def test_refusal(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="[[script:refusal]]")

    [message] = response.output
    [part] = message.content
    assert part.type == "refusal"
    assert part.refusal == DEFAULT_REFUSAL
    check_response(response)

    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:refusal]]", stream=True
    ))
    check_stream(events)
    assert reconstruct(events).refusal == DEFAULT_REFUSAL
    assert "response.output_text.delta" not in [e["type"] for e in events]


class Weather(pydantic.BaseModel):
    city: str
    temperature: int


def test_json_schema_output(client: OpenAI, upstream: ScriptedUpstream) -> None:
    answer = '{"city": "Lima", "temperature": 19}'
    parsed = client.responses.parse(
        model=MODEL, input=f"schema-1 [[script:text text='{answer}']]", text_format=Weather
    )

    assert parsed.output_parsed == Weather(city="Lima", temperature=19)
    assert parsed.text is not None and parsed.text.format.type == "json_schema"
    assert parsed.text.format.name == "Weather"
    assert parsed.text.format.strict is True
    sent = request_with(upstream, "schema-1")
    format_sent = sent["response_format"]
    assert format_sent["type"] == "json_schema"
    assert format_sent["json_schema"]["name"] == "Weather"
    assert format_sent["json_schema"]["strict"] is True
    assert format_sent["json_schema"]["schema"]["properties"].keys() == {"city", "temperature"}

    raw = client.responses.create(
        model=MODEL,
        input=f"schema-2 [[script:text text='{answer}']]",
        text={"format": {"type": "json_schema", "name": "weather", "schema": {
            "type": "object", "properties": {"city": {"type": "string"}},
        }}},
    )
    # Only the SDK model here: the Open Responses document types JsonSchemaResponseFormat's
    # ``schema`` as null-only (``anyOf: [{type: null}]``), which no real echo can satisfy.
    echoed = raw.to_dict(mode="json")["text"]["format"]
    sdk_validate_response(raw.to_dict(mode="json"))
    assert echoed["type"] == "json_schema" and echoed["name"] == "weather"
    assert echoed["schema"] == {"type": "object", "properties": {"city": {"type": "string"}}}


PNG_1x1 = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


def test_image_input_reaches_upstream_as_image_url_parts(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    data_url = f"data:image/png;base64,{PNG_1x1}"
    response = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "image-1 what is in these?"},
            {"type": "input_image", "image_url": data_url, "detail": "low"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        ]}],
    )

    assert response.status == "completed"
    [message] = request_with(upstream, "image-1")["messages"]
    assert message["role"] == "user"
    assert message["content"] == [
        {"type": "text", "text": "image-1 what is in these?"},
        {"type": "image_url", "image_url": {"url": data_url, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png",
                                            "detail": "auto"}},
    ]


def test_max_output_tokens_incomplete(client: OpenAI, upstream: ScriptedUpstream) -> None:
    response = client.responses.create(
        model=MODEL, input="length-1 [[script:length]]", max_output_tokens=16
    )

    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "This answer is cut"
    assert response.max_output_tokens == 16
    check_response(response)
    assert request_with(upstream, "length-1")["max_tokens"] == 16  # the generic dialect

    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:length]]", max_output_tokens=16, stream=True
    ))
    grammar = check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert grammar.terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


# -- the streaming transport ---------------------------------------------------------------

FRAME = re.compile(rb"event: ([a-z_.]+)\ndata: (\{[^\n]*\})\n\n\Z")


def test_stream_headers_and_sse_framing(gateway: GatewayServer) -> None:
    raw = stream_raw(gateway.base_url + "/responses", {
        "model": MODEL, "input": "[[script:reasoning n=3]]", "stream": True,
    })

    assert raw.status == 200
    assert raw.headers["content-type"].split(";")[0] == "text/event-stream"
    assert raw.headers["cache-control"] == "no-cache"
    assert b"[DONE]" not in raw.body
    assert b"\r" not in raw.body
    assert raw.event_frames
    for frame in raw.event_frames:
        match = FRAME.match(frame)
        assert match, frame[:200]
        assert json.loads(match.group(2))["type"] == match.group(1).decode()
    check_stream(raw.events)


@pytest.mark.slow
def test_created_leaves_before_the_upstream_answers(
    gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    body = {"model": MODEL, "input": "[[script:text first_delay=1.5 key=late-1]]",
            "stream": True}
    # Warm first: a process's first create builds the request models (a few hundred ms cold,
    # more on a loaded machine), which the 0.4 s bound below is not about.
    httpx.post(gateway.base_url + "/responses", json={"model": MODEL, "input": "warm"},
               timeout=30).raise_for_status()
    started = time.monotonic()
    created_at = first_delta_at = None
    upstream_items_at_created = None
    with httpx.Client(timeout=30) as http, http.stream(
        "POST", gateway.base_url + "/responses", json=body
    ) as response:
        pending = b""
        for piece in response.iter_raw():
            frames, pending = split_frames(pending + piece)
            for frame in frames:
                now = time.monotonic() - started
                if frame.startswith(b"event: response.created\n"):
                    created_at = now
                    # The upstream may not even have the request yet: then it sent nothing.
                    records = [s for s in upstream.streams if "key=late-1" in s.script]
                    upstream_items_at_created = records[0].items_sent if records else 0
                elif frame.startswith(b"event: response.output_text.delta\n") and (
                    first_delta_at is None
                ):
                    first_delta_at = now

    assert created_at is not None and first_delta_at is not None
    assert upstream_items_at_created == 0  # the upstream had not sent a single chunk yet
    assert created_at < 0.4, created_at  # no grace period by default: it left at once
    assert first_delta_at >= 1.4, first_delta_at
    assert first_delta_at - created_at > 0.5


@pytest.mark.slow
def test_keepalive_comment_after_silence(gateway: GatewayServer) -> None:
    raw = stream_raw(gateway.base_url + "/responses", {
        "model": MODEL, "input": "[[script:stall after=2 seconds=1.6]]", "stream": True,
    })

    comments = raw.comments
    assert comments, "no keep-alive comment during a 1.6 s upstream stall (keepalive 0.5 s)"
    for _, frame in comments:
        assert re.fullmatch(rb":[^\n]*\n\n", frame)
    last_delta = max(t for t, f in raw.frames
                     if f.startswith(b"event: response.output_text.delta\n"))
    first_comment = comments[0][0]
    assert first_comment < last_delta  # sent during the stall, not after it
    check_stream(raw.events)
    assert reconstruct(raw.events).text == DEFAULT_TEXT


def _upstream_stream(upstream: ScriptedUpstream, key: str, wait: float = 5.0) -> StreamRecord:
    """The upstream's record of the stream with ``key``, once it has one."""
    deadline = time.monotonic() + wait
    while True:
        records = [s for s in upstream.streams if f"key={key}" in s.script]
        if records or time.monotonic() > deadline:
            [record] = records
            return record
        time.sleep(0.01)


def _assert_upstream_closed_within_a_second(
    upstream: ScriptedUpstream, key: str, client_left_at: float
) -> None:
    record = _upstream_stream(upstream, key)
    deadline = client_left_at + 1.0
    while record.closed_at is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert record.closed_at is not None, "upstream stream still open 1 s after the client left"
    assert record.closed_at - client_left_at < 1.0
    assert record.client_disconnected and not record.completed


def _settled(client: OpenAI, response_id: str) -> Any:
    """The stored response once it left ``in_progress`` (the cancel is written on close)."""
    deadline = time.monotonic() + 10  # a store write in a thread, on a loaded machine
    stored = client.responses.retrieve(response_id)
    while stored.status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)
        stored = client.responses.retrieve(response_id)
    return stored


def _read_until(response: httpx.Response, stop: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    pending = b""
    for piece in response.iter_raw():
        frames, pending = split_frames(pending + piece)
        events += [json.loads(f.split(b"\ndata: ", 1)[1]) for f in frames
                   if f.startswith(b"event: ")]
        if stop(events):
            break
    return events


@pytest.mark.slow
def test_client_disconnect_mid_stream_cancels_upstream_and_stores_cancelled(
    gateway: GatewayServer, upstream: ScriptedUpstream, client: OpenAI
) -> None:
    full = "one two three four five six seven eight"
    body = {
        "model": MODEL,
        "input": f'[[script:slow text="{full}" n=20 delay=0.25 key=disconnect-1]]',
        "stream": True,
    }
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", gateway.base_url + "/responses", json=body) as response:
            events = _read_until(response, lambda evs: sum(
                e["type"] == "response.output_text.delta" for e in evs) >= 2)
        left_at = time.monotonic()

    _assert_upstream_closed_within_a_second(upstream, "disconnect-1", left_at)
    seen_text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    stored = _settled(client, events[0]["response"]["id"])
    assert stored.status == "cancelled"
    [message] = stored.output
    text = message.content[0].text
    assert text.startswith(seen_text) and len(text) >= len(seen_text) > 0
    assert full.startswith(text) and text != full
    check_response(stored)


def test_client_disconnect_before_the_upstream_first_chunk_cancels_upstream(
    gateway: GatewayServer, upstream: ScriptedUpstream, client: OpenAI
) -> None:
    """The client leaves after response.created while the upstream is still silent."""
    body = {"model": MODEL, "input": "[[script:text first_delay=5 key=disconnect-2]]",
            "stream": True}
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", gateway.base_url + "/responses", json=body) as response:
            events = _read_until(
                response, lambda evs: evs[-1:] and evs[-1]["type"] == "response.in_progress")
            _upstream_stream(upstream, "disconnect-2")  # the upstream has the request: leave
        left_at = time.monotonic()

    _assert_upstream_closed_within_a_second(upstream, "disconnect-2", left_at)
    stored = _settled(client, events[0]["response"]["id"])
    assert stored.status == "cancelled"
    assert stored.output == []


@pytest.mark.slow
def test_client_disconnect_before_any_byte_cancels_upstream(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """The client gives up before the gateway has sent headers, in a stream grace period
    (noticed once the grace period ends)."""
    body = {"model": MODEL, "input": "[[script:text first_delay=5 key=disconnect-3]]",
            "stream": True}
    settings = e2e_settings(upstream, tmp_path / "g.db", stream_grace_seconds=0.5)
    with GatewayServer(settings) as gateway:
        with httpx.Client(timeout=httpx.Timeout(30, read=0.2)) as http, pytest.raises(
            httpx.ReadTimeout
        ):
            http.post(gateway.base_url + "/responses", json=body)
        left_at = time.monotonic()

        _assert_upstream_closed_within_a_second(upstream, "disconnect-3", left_at)


def test_async_client_closing_a_stream_cancels_upstream(
    gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    async def main() -> tuple[list[str], float]:
        async with AsyncOpenAI(
            base_url=gateway.base_url, api_key="sk-test", max_retries=0, timeout=30
        ) as aclient:
            stream = await aclient.responses.create(
                model=MODEL, input="[[script:slow n=20 delay=0.25 key=disconnect-async]]",
                stream=True,
            )
            seen = []
            async for event in stream:
                seen.append(event.type)
                if event.type == "response.output_text.delta":
                    break
            await stream.close()
            return seen, time.monotonic()

    seen, left_at = asyncio.run(main())

    assert seen[0] == "response.created"
    _assert_upstream_closed_within_a_second(upstream, "disconnect-async", left_at)


# -- the rest of the HTTP surface ----------------------------------------------------------


def test_unknown_route_is_an_openai_shaped_404(gateway: GatewayServer) -> None:
    response = httpx.get(gateway.base_url + "/no-such-thing")

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error.keys() == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert "/v1/no-such-thing" in error["message"]

    wrong_method = httpx.put(gateway.base_url + "/responses", json={})
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"].keys() == {"message", "type", "param", "code"}


def test_models_and_health(gateway: GatewayServer, client: OpenAI) -> None:
    assert httpx.get(gateway.url + "/health").json() == {"status": "ok"}
    models = client.models.list()
    assert models.object == "list"


def test_suite_upstream_left_nothing_open(upstream: ScriptedUpstream) -> None:
    """After everything above, no upstream stream leaked (each one was read or closed)."""
    assert upstream.wait_streams_closed(10.0), [s for s in upstream.streams if s.closed_at is None]

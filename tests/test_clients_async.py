"""The openai Python client, async flavour (``AsyncOpenAI``), against the gateway (issue 7): the
scenarios of the sync end-to-end tests — text streamed and not, ``responses.stream()``, a
function tool round trip, retrieve / input_items / delete, and the errors 400, 404 and 429.

Each test runs its own event loop (``asyncio.run``) with its own client, closed at the end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import openai
import pytest
from openai import AsyncOpenAI

from tests.helpers.e2e import (
    MODEL,
    TIME_TOOL,
    WEATHER_TOOL,
    check_response,
    check_stream,
    e2e_settings,
    request_with,
)
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import reconstruct
from tests.helpers.scripted_upstream import DEFAULT_REASONING, DEFAULT_TEXT, ScriptedUpstream

T = TypeVar("T")


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("clients-async") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


def run(
    gateway: GatewayServer, body: Callable[[AsyncOpenAI], Awaitable[T]], **client_args: Any
) -> T:
    """Run ``body(client)`` in a fresh event loop with a fresh AsyncOpenAI client."""
    options: dict[str, Any] = {"max_retries": 0, "timeout": 30, **client_args}

    async def main() -> T:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-async", **options) as c:
            return await body(c)

    return asyncio.run(main())


async def collect(stream: Any) -> list[dict[str, Any]]:
    return [event.to_dict(mode="json") async for event in stream]


def error_body(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body
    assert isinstance(body, dict) and body.keys() == {"message", "type", "param", "code"}, body
    assert isinstance(body["message"], str) and body["message"]
    return body


# -- text ----------------------------------------------------------------------------------


def test_non_stream_text(gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    response = run(gateway, lambda c: c.responses.create(model=MODEL, input="async-plain hello"))

    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.output_text == DEFAULT_TEXT
    assert response.usage is not None and response.usage.output_tokens > 0
    check_response(response)
    sent = request_with(upstream, "async-plain")
    assert sent["stream"] is False
    assert sent["messages"] == [{"role": "user", "content": "async-plain hello"}]


def test_stream_text(gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    async def body(c: AsyncOpenAI) -> list[dict[str, Any]]:
        return await collect(await c.responses.create(
            model=MODEL, input='async-sse [[script:text text="Async streaming." n=5]]',
            stream=True,
        ))

    events = run(gateway, body)

    grammar = check_stream(events)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 5
    assert reconstruct(events).text == "Async streaming."
    assert grammar.terminal["response"]["id"] == events[0]["response"]["id"]
    assert request_with(upstream, "async-sse")["stream"] is True


def test_stream_helper(gateway: GatewayServer) -> None:
    async def body(c: AsyncOpenAI) -> tuple[list[str], Any]:
        deltas = []
        async with c.responses.stream(
            model=MODEL, input='[[script:text text="From the async helper." n=3]]'
        ) as stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
            return deltas, await stream.get_final_response()

    deltas, final = run(gateway, body)

    assert len(deltas) == 3 and "".join(deltas) == "From the async helper."
    assert final.status == "completed"
    assert final.output_text == "From the async helper."


def test_reasoning_stream(gateway: GatewayServer) -> None:
    async def body(c: AsyncOpenAI) -> list[dict[str, Any]]:
        return await collect(await c.responses.create(
            model=MODEL, input="[[script:reasoning]]", stream=True))

    events = run(gateway, body)

    grammar = check_stream(events)
    assert [item.type for item in grammar.items] == ["reasoning", "message"]
    assert grammar.terminal["response"]["output"][1]["content"][0]["text"] == DEFAULT_TEXT
    assert "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta") \
        == DEFAULT_REASONING


def test_concurrent_streams_stay_apart(gateway: GatewayServer) -> None:
    async def one(c: AsyncOpenAI, i: int) -> list[dict[str, Any]]:
        return await collect(await c.responses.create(
            model=MODEL, input=f'[[script:slow text="stream number {i}" n=4 delay=0.03]]',
            stream=True,
        ))

    async def body(c: AsyncOpenAI) -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(one(c, i) for i in range(6))))

    streams = run(gateway, body)

    for i, events in enumerate(streams):
        check_stream(events)
        assert reconstruct(events).text == f"stream number {i}"
    assert len({events[0]["response"]["id"] for events in streams}) == 6


# -- tools ---------------------------------------------------------------------------------


def test_function_tool_round_trip(gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    question = {"role": "user",
                "content": "async-tool [[script:tool args='{\"city\": \"Lima\"}']]"}

    async def body(c: AsyncOpenAI) -> tuple[Any, Any, Any]:
        first = await c.responses.create(model=MODEL, input=[question], tools=[WEATHER_TOOL])
        call = first.output[0]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "mild"}
        chained = await c.responses.create(
            model=MODEL, previous_response_id=first.id, input=[output], tools=[WEATHER_TOOL])
        stateless = await c.responses.create(
            model=MODEL, store=False, tools=[WEATHER_TOOL],
            input=[question, call.to_dict(mode="json"), output],
        )
        return first, chained, stateless

    first, chained, stateless = run(gateway, body)

    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.id.startswith("fc_") and call.call_id
    assert json.loads(call.arguments) == {"city": "Lima"}
    check_response(first)
    assert chained.output_text == stateless.output_text == "Tool output: mild"
    assert chained.previous_response_id == first.id
    # Both continuations sent the upstream the same conversation.
    continuations = [b for b in upstream.requests
                     if "async-tool" in str(b["messages"]) and len(b["messages"]) == 3]
    assert len(continuations) == 2
    assert continuations[0]["messages"] == continuations[1]["messages"]
    assert continuations[0]["messages"][2] == {
        "role": "tool", "tool_call_id": call.call_id, "content": "mild"}


def test_function_call_stream(gateway: GatewayServer) -> None:
    async def body(c: AsyncOpenAI) -> list[dict[str, Any]]:
        return await collect(await c.responses.create(
            model=MODEL, input="[[script:parallel]]", tools=[WEATHER_TOOL, TIME_TOOL],
            stream=True,
        ))

    events = run(gateway, body)

    grammar = check_stream(events)
    assert [item.type for item in grammar.items] == ["function_call", "function_call"]
    calls = reconstruct(events).calls
    assert [(name, json.loads(args)) for _, name, args in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]


# -- stored responses ----------------------------------------------------------------------


def test_retrieve_input_items_delete(gateway: GatewayServer) -> None:
    async def body(c: AsyncOpenAI) -> dict[str, Any]:
        created = await c.responses.create(
            model=MODEL, input=[{"role": "user", "content": "one"},
                                {"role": "user", "content": "two"}],
            metadata={"client": "async"},
        )
        fetched = await c.responses.retrieve(created.id)
        items = [item async for item in c.responses.input_items.list(
            created.id, order="asc", limit=1)]
        deleted = await c.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError) as after_delete:
            await c.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError) as delete_again:
            await c.responses.delete(created.id)
        return {"created": created, "fetched": fetched, "items": items, "deleted": deleted,
                "after_delete": after_delete.value, "delete_again": delete_again.value}

    out = run(gateway, body)

    assert out["fetched"].to_dict(mode="json") == out["created"].to_dict(mode="json")
    assert out["fetched"].metadata == {"client": "async"}
    # The async paginator followed the cursor page by page (limit=1).
    assert [item.content[0].text for item in out["items"]] == ["one", "two"]
    assert out["deleted"] is None  # the SDK returns nothing for a successful delete
    assert error_body(out["after_delete"])["param"] == "response_id"
    assert out["delete_again"].status_code == 404


def test_retrieve_after_stream_equals_terminal(gateway: GatewayServer) -> None:
    async def body(c: AsyncOpenAI) -> tuple[list[dict[str, Any]], Any]:
        events = await collect(await c.responses.create(
            model=MODEL, input="[[script:text n=2]]", stream=True))
        return events, await c.responses.retrieve(events[-1]["response"]["id"])

    events, fetched = run(gateway, body)

    assert fetched.to_dict(mode="json") == check_stream(events).terminal["response"]


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_bad_request_400(
    gateway: GatewayServer, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.reset()

    async def body(c: AsyncOpenAI) -> openai.BadRequestError:
        with pytest.raises(openai.BadRequestError) as caught:
            await c.responses.create(model=MODEL, input="hi", top_p=-1, stream=stream)
        return caught.value

    exc = run(gateway, body)

    assert exc.status_code == 400
    error = error_body(exc)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "top_p"
    assert upstream.requests == []


def test_not_found_404_and_missing_previous_400(gateway: GatewayServer) -> None:
    """A missing response is a 404; a missing previous_response_id a 400, as OpenAI answers."""

    async def body(c: AsyncOpenAI) -> list[openai.APIStatusError]:
        errors: list[openai.APIStatusError] = []
        with pytest.raises(openai.NotFoundError) as missing:
            await c.responses.retrieve("resp_asyncmissing000000000000000")
        errors.append(missing.value)
        with pytest.raises(openai.BadRequestError) as previous:
            await c.responses.create(
                model=MODEL, input="hi", previous_response_id="resp_asyncmissing0000000000000")
        errors.append(previous.value)
        return errors

    retrieve, previous = run(gateway, body)

    assert "resp_asyncmissing" in error_body(retrieve)["message"]
    assert error_body(previous)["param"] == "previous_response_id"


def test_rate_limit_429(gateway: GatewayServer) -> None:
    async def body(c: AsyncOpenAI) -> openai.RateLimitError:
        with pytest.raises(openai.RateLimitError) as caught:
            await c.responses.create(model=MODEL, input="[[script:429]]")
        return caught.value

    exc = run(gateway, body)

    assert exc.status_code == 429
    assert error_body(exc)["code"] == "rate_limit_exceeded"


def test_rate_limit_429_when_streaming_fails_the_response(gateway: GatewayServer) -> None:
    """response.created has left before the upstream refused (no stream grace period)."""
    async def body(c: AsyncOpenAI) -> list[dict[str, Any]]:
        return await collect(await c.responses.create(
            model=MODEL, input="[[script:429]]", stream=True))

    events = run(gateway, body)

    grammar = check_stream(events)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.failed"
    assert grammar.terminal["response"]["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.slow
def test_rate_limit_429_then_the_client_retry_succeeds(
    gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    """The SDK's own retry (max_retries=1) gets the answer once the upstream recovers."""
    directive = "[[script:429 times=1 retry_after=0 key=async-retry]]"
    text = run(
        gateway,
        lambda c: c.responses.create(model=MODEL, input=directive),
        max_retries=1,
    ).output_text

    assert text == DEFAULT_TEXT
    assert upstream.attempts("async-retry") == 2

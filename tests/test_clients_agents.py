"""The OpenAI Agents SDK against the gateway (issue 7, real clients): only the base URL changes.

An agent with two function tools runs through ``OpenAIResponsesModel`` (the Responses API) and
completes a multi-step tool loop: the scripted upstream calls ``get_weather``, then ``get_time``
once the first result is back, then answers with a text quoting both results. Streaming and not,
with a plain upstream and with a reasoning one (``reasoning_content`` before each turn's
output), and with server-side state (``auto_previous_response_id``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    RunContextWrapper,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI  # noqa: E402
from openai.types.shared import Reasoning  # noqa: E402

from tests.helpers.e2e import check_stream, e2e_settings  # noqa: E402
from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402

MODEL = "scripted-model"
THOUGHT = "Weather first, then the time."
ANSWER = "Tool output: sunny in Paris | 09:00 in Paris"

agents.set_tracing_disabled(True)


@dataclass
class Calls:
    """What the agent's tools were called with, in order (the run context)."""

    made: list[tuple[str, str]] = field(default_factory=list)


@function_tool
def get_weather(ctx: RunContextWrapper[Calls], city: str) -> str:
    """Current weather for a city."""
    ctx.context.made.append(("get_weather", city))
    return f"sunny in {city}"


@function_tool
def get_time(ctx: RunContextWrapper[Calls], city: str) -> str:
    """Local time in a city."""
    ctx.context.made.append(("get_time", city))
    return f"09:00 in {city}"


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("clients-agents") / "gateway.db"
    # reasoning_content: earlier reasoning goes back upstream, so the round trip is visible.
    settings = e2e_settings(upstream, db, reasoning_input="reasoning_content")
    with GatewayServer(settings) as server:
        yield server


@dataclass
class Run:
    result: Any
    calls: Calls
    events: list[Any]  # stream events (streamed runs only)


def run_agent(
    gateway: GatewayServer, prompt: str, *, stream: bool, reasoning: bool = False, **kwargs: Any
) -> Run:
    settings = ModelSettings(reasoning=Reasoning(effort="low", summary="auto")) if reasoning \
        else ModelSettings()

    async def main() -> Run:
        async with AsyncOpenAI(
            base_url=gateway.base_url, api_key="sk-agents", max_retries=0, timeout=30
        ) as client:
            agent = Agent[Calls](
                name="assistant",
                instructions="Answer with the tools' results.",
                tools=[get_weather, get_time],
                model=OpenAIResponsesModel(MODEL, client),
                model_settings=settings,
            )
            calls = Calls()
            if not stream:
                result = await Runner.run(agent, prompt, context=calls, **kwargs)
                return Run(result, calls, [])
            streamed = Runner.run_streamed(agent, prompt, context=calls, **kwargs)
            events = [event async for event in streamed.stream_events()]
            return Run(streamed, calls, events)

    return asyncio.run(main())


def item_types(run: Run) -> list[str]:
    return [item.type for item in run.result.new_items]


def expected_items(reasoning: bool) -> list[str]:
    turn = ["reasoning_item"] if reasoning else []
    return [
        *turn, "tool_call_item", "tool_call_output_item",
        *turn, "tool_call_item", "tool_call_output_item",
        *turn, "message_output_item",
    ]


def check_upstream_loop(upstream: ScriptedUpstream, marker: str, reasoning: bool) -> None:
    """Three upstream turns; the last one carries both calls and both results, in order."""
    sent = [body for body in upstream.requests if marker in str(body["messages"])]
    assert len(sent) == 3
    for body in sent:
        assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]
        assert body["messages"][0] == {
            "role": "system", "content": "Answer with the tools' results."}
    history = sent[-1]["messages"][2:]
    assert [m["role"] for m in history] == ["assistant", "tool", "assistant", "tool"]
    first, first_out, second, second_out = history
    assert first["tool_calls"][0]["function"]["name"] == "get_weather"
    assert second["tool_calls"][0]["function"]["name"] == "get_time"
    assert first_out == {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"],
                         "content": "sunny in Paris"}
    assert second_out == {"role": "tool", "tool_call_id": second["tool_calls"][0]["id"],
                          "content": "09:00 in Paris"}
    for message in (first, second):
        if reasoning:  # the SDK sent the reasoning items back; the gateway passed them on
            assert message["reasoning_content"] == THOUGHT
        else:
            assert "reasoning_content" not in message


def check_stored(gateway: GatewayServer, run: Run) -> None:
    """Each model turn is a distinct stored response, retrievable and completed."""
    ids = [raw.response_id for raw in run.result.raw_responses]
    assert len(ids) == 3 and len(set(ids)) == 3
    for response_id in ids:
        assert response_id.startswith("resp_")
        stored = httpx.get(f"{gateway.base_url}/responses/{response_id}", timeout=10).json()
        assert stored["status"] == "completed"


@pytest.mark.parametrize("reasoning", [False, True], ids=["plain", "reasoning"])
def test_agent_tool_loop(
    gateway: GatewayServer, upstream: ScriptedUpstream, reasoning: bool
) -> None:
    marker = f"agent-run-{reasoning}"
    extra = f" reasoning='{THOUGHT}'" if reasoning else ""
    run = run_agent(
        gateway, f"{marker} [[script:tool names=get_weather,get_time{extra}]]",
        stream=False, reasoning=reasoning,
    )

    assert run.result.final_output == ANSWER
    assert run.calls.made == [("get_weather", "Paris"), ("get_time", "Paris")]
    assert item_types(run) == expected_items(reasoning)
    if reasoning:
        summaries = [item.raw_item.summary[0].text for item in run.result.new_items
                     if item.type == "reasoning_item"]
        assert summaries == [THOUGHT] * 3
    check_upstream_loop(upstream, marker, reasoning)
    check_stored(gateway, run)


@pytest.mark.parametrize("reasoning", [False, True], ids=["plain", "reasoning"])
def test_agent_tool_loop_streamed(
    gateway: GatewayServer, upstream: ScriptedUpstream, reasoning: bool
) -> None:
    marker = f"agent-stream-{reasoning}"
    extra = f" reasoning='{THOUGHT}'" if reasoning else ""
    run = run_agent(
        gateway, f"{marker} [[script:tool names=get_weather,get_time{extra}]]",
        stream=True, reasoning=reasoning,
    )

    assert run.result.is_complete
    assert run.result.final_output == ANSWER
    assert run.calls.made == [("get_weather", "Paris"), ("get_time", "Paris")]
    assert item_types(run) == expected_items(reasoning)
    # The run-level events, in order.
    names = [e.name for e in run.events if e.type == "run_item_stream_event"]
    thought = ["reasoning_item_created"] if reasoning else []
    assert names == [*thought, "tool_called", "tool_output", *thought, "tool_called",
                     "tool_output", *thought, "message_output_created"]
    # The raw Responses events: three whole streams, each valid and in grammar.
    raw = [e.data.to_dict(mode="json") for e in run.events if e.type == "raw_response_event"]
    starts = [i for i, event in enumerate(raw) if event["type"] == "response.created"]
    assert len(starts) == 3
    text_deltas = []
    for begin, end in zip(starts, [*starts[1:], len(raw)], strict=True):
        grammar = check_stream(raw[begin:end])
        assert grammar.terminal["type"] == "response.completed"
        text_deltas += [e["delta"] for e in raw[begin:end]
                        if e["type"] == "response.output_text.delta"]
    assert "".join(text_deltas) == ANSWER
    if reasoning:
        summary = [e["delta"] for e in raw if e["type"] == "response.reasoning_summary_text.delta"]
        assert "".join(summary) == THOUGHT * 3
    check_upstream_loop(upstream, marker, reasoning)
    check_stored(gateway, run)


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_agent_tool_loop_with_server_side_state(
    gateway: GatewayServer, upstream: ScriptedUpstream, stream: bool
) -> None:
    """auto_previous_response_id: the SDK sends only the new items and previous_response_id;
    the gateway rebuilds the whole conversation from its store for the upstream."""
    marker = f"agent-chain-{stream}"
    run = run_agent(
        gateway, f"{marker} [[script:tool names=get_weather,get_time reasoning='{THOUGHT}']]",
        stream=stream, reasoning=True, auto_previous_response_id=True,
    )

    assert run.result.final_output == ANSWER
    assert run.calls.made == [("get_weather", "Paris"), ("get_time", "Paris")]
    check_upstream_loop(upstream, marker, reasoning=True)
    ids = [raw.response_id for raw in run.result.raw_responses]
    previous = [
        httpx.get(f"{gateway.base_url}/responses/{rid}", timeout=10).json()["previous_response_id"]
        for rid in ids
    ]
    assert previous == [None, ids[0], ids[1]]
    # Only the tool output was sent with each continuation: the chain is the gateway's.
    for rid, output in zip(ids[1:], ["sunny in Paris", "09:00 in Paris"], strict=True):
        items = httpx.get(f"{gateway.base_url}/responses/{rid}/input_items", timeout=10).json()
        assert [(i["type"], i["output"]) for i in items["data"]] == [
            ("function_call_output", output)]

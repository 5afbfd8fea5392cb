"""The OpenAI Agents SDK's ``CodeInterpreterTool`` (unmodified) through the gateway (issue 42):
the scripted upstream plays a model that runs code in the gateway's sandbox, and the run's
result holds the ``code_interpreter_call`` items (the SDK's typed model) and the answer.
Fixtures (the gateway with the sandbox engine) are test_code_interpreter's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import Agent, CodeInterpreterTool, OpenAIResponsesModel, Runner  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from openai.types.responses import ResponseCodeInterpreterToolCall  # noqa: E402

from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402
from tests.test_code_interpreter import gateway, steps, tool_messages  # noqa: E402, F401

agents.set_tracing_disabled(True)
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stream", [False, True])
def test_agents_code_interpreter_tool(gateway: GatewayServer,  # noqa: F811
                                      upstream: ScriptedUpstream, stream: bool) -> None:
    marker = f"agents-code-{stream}"
    prompt = steps(marker, "squares = [n * n for n in range(5)]", "print(sum(squares))",
                   text="The sum is 30.", quote=False)

    async def main() -> Any:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-test", max_retries=0,
                               timeout=60) as client:
            tool = CodeInterpreterTool(tool_config={
                "type": "code_interpreter", "container": {"type": "auto"}})
            agent = Agent(name="analyst", instructions="Use the python tool.", tools=[tool],
                          model=OpenAIResponsesModel("m", client))
            if not stream:
                return await Runner.run(agent, prompt)
            streamed = Runner.run_streamed(agent, prompt)
            kinds = [e.type async for e in streamed.stream_events()]
            assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
            return streamed

    result = asyncio.run(main())
    assert result.final_output == "The sum is 30."
    calls = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    assert [type(c) for c in calls] == [ResponseCodeInterpreterToolCall] * 2
    first, second = calls
    assert first.id.startswith("ci_") and first.status == second.status == "completed"
    assert first.container_id == second.container_id and first.container_id.startswith("cntr_")
    assert second.code == "print(sum(squares))"
    assert tool_messages(upstream, marker)[-1].strip() == "30"  # the state was kept
    body = next(b for b in upstream.requests if marker in str(b["messages"]))
    assert [t["function"]["name"] for t in body["tools"]] == ["python"]

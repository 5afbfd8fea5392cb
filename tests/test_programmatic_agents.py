"""The OpenAI Agents SDK's ``ProgrammaticToolCallingTool`` (unmodified) with a function tool
through the gateway (issue 47): the scripted upstream plays a model that writes one program
calling the agent's function three times; the SDK runs each call the program pauses on, sends
its output back, and the run ends with the model's answer quoting the program's result.
Fixtures (the gateway with the sandbox engine) are test_programmatic's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import (  # noqa: E402
    Agent,
    OpenAIResponsesModel,
    ProgrammaticToolCallingTool,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI  # noqa: E402

from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402
from tests.test_programmatic import LOOP, gateway, writing  # noqa: E402, F401

agents.set_tracing_disabled(True)
pytestmark = pytest.mark.slow

RESULT = "Paris: 21C in Paris; Tokyo: 21C in Tokyo; Lima: 21C in Lima"


@pytest.mark.parametrize("stream", [False, True])
def test_agents_programmatic_tool_calling(gateway: GatewayServer,  # noqa: F811
                                          upstream: ScriptedUpstream, stream: bool) -> None:
    asked: list[str] = []

    @function_tool(allowed_callers=["programmatic"])
    def get_weather(city: str) -> str:
        """Weather in a city."""
        asked.append(city)
        return f"21C in {city}"

    prompt = writing(f"agents-ptc-{stream}", LOOP)

    async def main() -> Any:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-test", max_retries=0,
                               timeout=60) as client:
            agent = Agent(name="planner", instructions="Use programs.",
                          tools=[ProgrammaticToolCallingTool(), get_weather],
                          model=OpenAIResponsesModel("m", client))
            if not stream:
                return await Runner.run(agent, prompt)
            streamed = Runner.run_streamed(agent, prompt)
            async for _ in streamed.stream_events():
                pass
            return streamed

    result = asyncio.run(main())
    assert asked == ["Paris", "Tokyo", "Lima"]
    assert result.final_output.endswith("Tool output: " + RESULT)
    raw = [getattr(i, "raw_item", None) for i in result.new_items]
    kinds = [r.get("type") if isinstance(r, dict) else getattr(r, "type", None) for r in raw]
    assert kinds == ["program", *["function_call", "function_call_output"] * 3,
                     "program_output", "message"]

"""The OpenAI Agents SDK's ``WebSearchTool`` (unmodified, its default configuration) through
the gateway (issue 30): the scripted upstream plays a model that searches, the local
SearXNG-speaking provider answers, and the run's result holds the ``web_search_call`` item and
the cited answer. Fixtures (the provider, the gateway) are test_web_search's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import Agent, OpenAIResponsesModel, Runner, WebSearchTool  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402
from tests.helpers.search_providers import RESULTS, SearchProvider  # noqa: E402
from tests.test_web_search import (  # noqa: E402, F401
    CITED,
    answer_citing,
    gateway,
    provider,
    searching,
    tool_result,
)

agents.set_tracing_disabled(True)


@pytest.mark.parametrize("stream", [False, True])
def test_agents_web_search_tool(gateway: GatewayServer, upstream: ScriptedUpstream,  # noqa: F811
                                provider: SearchProvider, stream: bool) -> None:  # noqa: F811
    marker = f"agents-search-{stream}"
    answer = answer_citing()

    async def main() -> Any:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-agents", max_retries=0,
                               timeout=30) as client:
            agent = Agent(name="researcher", instructions="Search the web, cite sources.",
                          tools=[WebSearchTool()], model=OpenAIResponsesModel("m", client))
            prompt = searching(marker, answer)
            if not stream:
                return await Runner.run(agent, prompt)
            streamed = Runner.run_streamed(agent, prompt)
            kinds = [e.type async for e in streamed.stream_events()]
            assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
            return streamed

    result = asyncio.run(main())
    assert result.final_output == answer
    [call] = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    assert call.type == "web_search_call" and call.status == "completed"
    assert call.id.startswith("ws_") and call.action.type == "search"
    assert call.action.query == "rust edition"
    [message] = [i.raw_item for i in result.new_items if i.type == "message_output_item"]
    [citation] = message.content[0].annotations
    assert (citation.type, citation.url, citation.title) == (
        "url_citation", CITED["url"], CITED["title"])
    assert answer[citation.start_index:citation.end_index] == f"[Rust]({CITED['url']})"
    # The SDK's default tool reached the gateway as it sends it, and the provider was asked.
    body = next(b for b in upstream.requests if marker in str(b["messages"]))
    assert [t["function"]["name"] for t in body["tools"]] == [
        "web_search", "open_page", "find_in_page"]
    assert any(r.params.get("q") == "rust edition" for r in provider.requests)
    assert RESULTS[0]["text"] in tool_result(upstream, marker, call.id)


def test_agents_tool_choice_web_search(gateway: GatewayServer,  # noqa: F811
                                       upstream: ScriptedUpstream) -> None:
    """``ModelSettings(tool_choice="web_search")``: the SDK sends ``{"type": "web_search"}``
    (outside OpenAI's typed choices); the gateway forces the model's first turn to search."""
    from agents import ModelSettings

    marker = "agents-choice"

    async def main() -> Any:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-agents", max_retries=0,
                               timeout=30) as client:
            agent = Agent(name="researcher", instructions="Search the web.",
                          tools=[WebSearchTool()], model=OpenAIResponsesModel("m", client),
                          model_settings=ModelSettings(tool_choice="web_search"),
                          reset_tool_choice=True)
            return await Runner.run(agent, searching(marker, "Found it."))

    result = asyncio.run(main())
    assert result.final_output == "Found it."
    [call] = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    assert call.type == "web_search_call" and call.status == "completed"
    first = next(b for b in upstream.requests if marker in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}

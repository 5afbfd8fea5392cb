"""The OpenAI Agents SDK's ``FileSearchTool`` through the gateway, unmodified but for the base
URL (issue 31): the gateway searches the store and the answer cites the document holding it,
on both vector store engines (local and AWS, test_file_search's gateway fixture). The scripted
upstream is the model; embeddings come from the DETERMINISTIC HASHING EMBEDDER
of tests/helpers/embedding_server.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.slow

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner  # noqa: E402
from openai import AsyncOpenAI, OpenAI  # noqa: E402

from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.test_file_search import (  # noqa: E402, F401
    KEY_A,
    QUESTION,
    alice,
    fresh_upstream,
    gateway,
    library,
    searching,
)

agents.set_tracing_disabled(True)


@pytest.mark.parametrize("stream", [False, True])
def test_agents_file_search_tool_cites_the_right_file(
        gateway: GatewayServer, alice: OpenAI, library: dict[str, str],  # noqa: F811
        stream: bool) -> None:
    answer = "Basalt forms when lava cools [^1]."

    async def main() -> Any:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0,
                               timeout=30) as client:
            agent = Agent(
                name="librarian", instructions="Answer from the files.",
                tools=[FileSearchTool(vector_store_ids=[library["store"]], max_num_results=3,
                                      include_search_results=True)],
                model=OpenAIResponsesModel("m", client))
            prompt = searching(f"agents-{stream}", answer)
            if not stream:
                return await Runner.run(agent, prompt)
            streamed = Runner.run_streamed(agent, prompt)
            async for _ in streamed.stream_events():
                pass
            return streamed

    result = asyncio.run(main())
    assert result.final_output == answer
    [call] = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    assert call.type == "file_search_call" and call.queries == [QUESTION]
    assert call.results is not None and call.results[0].filename == "volcano.md"
    [message] = [i.raw_item for i in result.new_items if i.type == "message_output_item"]
    [citation] = message.content[0].annotations
    assert (citation.type, citation.file_id, citation.filename, citation.index) == (
        "file_citation", library["volcano.md"], "volcano.md", answer.index("[^1]"))

"""Remote MCP through real clients and both backends (issue 22): the OpenAI Agents SDK's
``HostedMCPTool`` (streamed and not, with and without approvals), Amazon Bedrock (the local
event-stream endpoint) for the model, and the response deadline reaching into a tool call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from tests.helpers.e2e import check_response, check_stream, e2e_settings, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.mcp_server import McpTestServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_e2e_bedrock import (
    NOVA,
    bedrock_settings,
    converse_json,
    converse_stream,
    text,
    tool,
)

pytestmark = pytest.mark.slow

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")
from agents import (  # noqa: E402
    Agent,
    HostedMCPTool,
    MCPToolApprovalFunctionResult,
    MCPToolApprovalRequest,
    OpenAIResponsesModel,
    Runner,
)

agents.set_tracing_disabled(True)


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with McpTestServer() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("mcp-clients") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, mcp_allow_hosts=("127.0.0.1",))) as server:
        yield server


def config(server: McpTestServer, approval: Any = "never") -> Any:
    return {"type": "mcp", "server_label": "lab", "server_url": server.url,
            "require_approval": approval}


def agent_for(gateway: GatewayServer, tool: HostedMCPTool) -> Agent[Any]:
    client = AsyncOpenAI(base_url=gateway.base_url, api_key="sk-test", max_retries=0)
    return Agent(name="researcher", instructions="Use the lab tools.",
                 model=OpenAIResponsesModel(model="m", openai_client=client), tools=[tool])


PROMPT = "[[script:tool names=lab__search args='{\"query\": \"agents\"}']] look it up"


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_hosted_mcp_tool(gateway: GatewayServer, mcp_server: McpTestServer,
                                    stream: bool) -> None:
    agent = agent_for(gateway, HostedMCPTool(tool_config=config(mcp_server)))

    async def run() -> tuple[Any, list[dict[str, Any]]]:
        if not stream:
            return await Runner.run(agent, PROMPT), []
        result = Runner.run_streamed(agent, PROMPT)
        raw = [event.data.to_dict(mode="json") async for event in result.stream_events()
               if event.type == "raw_response_event"]
        return result, raw

    result, raw = asyncio.run(run())
    assert "3 results for agents" in result.final_output
    kinds = [item.type for item in result.new_items]
    assert "mcp_list_tools_item" in kinds
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    assert [(c.type, c.name, c.output) for c in calls] == [
        ("mcp_call", "search", "3 results for agents")]
    if stream:
        check_stream(raw)  # every event the SDK read, validated, grammar held


def test_agents_sdk_approves_through_its_callback(gateway: GatewayServer,
                                                 mcp_server: McpTestServer) -> None:
    asked: list[MCPToolApprovalRequest] = []

    def approve(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        asked.append(request)
        return {"approve": True}

    agent = agent_for(gateway, HostedMCPTool(tool_config=config(mcp_server, "always"),
                                             on_approval_request=approve))
    result = asyncio.run(Runner.run(agent, PROMPT))
    assert [r.data.name for r in asked] == ["search"]
    assert "3 results for agents" in result.final_output
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"
             and getattr(item.raw_item, "type", None) == "mcp_call"]
    assert calls and calls[0].approval_request_id == asked[0].data.id


def test_the_deadline_interrupts_a_tool_call(upstream: ScriptedUpstream,
                                             mcp_server: McpTestServer, tmp_path: Any) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db", mcp_allow_hosts=("127.0.0.1",),
                            max_response_seconds=2.0)
    with GatewayServer(settings) as short:
        client = OpenAI(base_url=short.base_url, api_key="x", max_retries=0, timeout=30)
        events = sdk_events(client.responses.create(
            model="m", stream=True, tools=[config(mcp_server)],
            input="[[script:tool names=lab__slow args='{\"seconds\": 20}']] deadline"))
    check_stream(events)
    response = events[-1]["response"]
    assert events[-1]["type"] == "response.failed"
    assert response["error"]["code"] == "server_error" or "response_timeout" in json.dumps(
        response["error"])
    call = response["output"][-1]
    assert (call["type"], call["status"]) == ("mcp_call", "incomplete")


# -- Bedrock ---------------------------------------------------------------------------------


class _Turns(dict):  # type: ignore[type-arg]
    """FakeBedrock's answers, one per request in the order set (a response of two turns)."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[Any] = []

    def __setitem__(self, key: str, value: Any) -> None:
        self.queue.append(value)

    def get(self, key: str, default: Any = None) -> Any:
        return self.queue.pop(0) if self.queue else default


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            server._answers = _Turns()  # type: ignore[assignment]
            yield server


@pytest.mark.parametrize("stream", [True, False])
def test_bedrock_model_with_an_mcp_tool(fake: FakeBedrock, mcp_server: McpTestServer,
                                        tmp_path: Any, stream: bool) -> None:
    settings = bedrock_settings(fake, tmp_path / "b.db", mcp_allow_hosts=("127.0.0.1",))
    with fake.lock:
        fake.requests.clear()
    if stream:
        fake.stream(NOVA, converse_stream(text("Let me check."),
                                          tool("tu_1", "lab__add", '{"a": 2,', ' "b": 3}'),
                                          stop="tool_use"))
        fake.stream(NOVA, converse_stream(text("It is 5.")))
    else:
        fake.json(NOVA, converse_json({"text": "Let me check."}, {"toolUse": {
            "toolUseId": "tu_1", "name": "lab__add", "input": {"a": 2, "b": 3}}},
            stop="tool_use"))
        fake.json(NOVA, converse_json({"text": "It is 5."}))
    with GatewayServer(settings) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=30)
        if stream:
            events = sdk_events(client.responses.create(
                model=NOVA, input="2 + 3?", tools=[config(mcp_server)], stream=True))
            check_stream(events)
            response = events[-1]["response"]
        else:
            response = check_response(client.responses.create(
                model=NOVA, input="2 + 3?", tools=[config(mcp_server)]))
    assert [i["type"] for i in response["output"]] == [
        "mcp_list_tools", "message", "mcp_call", "message"]
    assert response["output"][2]["output"] == "5"
    assert response["output"][3]["content"][0]["text"] == "It is 5."
    first, second = (r.body for r in fake.requests)
    assert [t["toolSpec"]["name"] for t in first["toolConfig"]["tools"]][:2] == [
        "lab__search", "lab__add"]
    assistant, results = second["messages"][-2:]
    assert assistant["content"][0] == {"text": "Let me check."}
    use = assistant["content"][1]["toolUse"]
    assert (use["name"], use["input"]) == ("lab__add", {"a": 2, "b": 3})
    assert results["content"][0]["toolResult"]["toolUseId"] == use["toolUseId"]
    assert results["content"][0]["toolResult"]["content"] == [{"text": "5"}]
    assert response["usage"]["input_tokens"] == 24  # both turns

"""The work the gateway's own tools may do in one response is bounded (issue 27, defect 6).

Without ``max_tool_calls`` a model that keeps calling an MCP tool used to run up to 64 turns of
calls, each turn re-sending a history the outputs kept growing. The bounds here are settings
(GATEWAY_MAX_TOOL_CALLS, GATEWAY_MAX_TOOL_OUTPUT_BYTES, GATEWAY_MAX_TOOL_TURNS), set small so
the tests are fast; past the first two the model is no longer offered the tools and answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.mcp_server import McpTestServer
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with McpTestServer() as server:
        yield server


def gateway(upstream: ScriptedUpstream, tmp_path: Path, **bounds: Any) -> GatewayServer:
    settings = e2e_settings(upstream, tmp_path / "g.db", mcp_allow_hosts=("127.0.0.1",),
                            mcp_max_output_bytes=200_000, **bounds)
    return GatewayServer(settings)


def tool(server: McpTestServer) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "lab", "server_url": server.url,
            "require_approval": "never", "allowed_tools": ["remember", "huge"]}


def calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "mcp_call"]


def requests_with(upstream: ScriptedUpstream, marker: str) -> list[dict[str, Any]]:
    return [b for b in upstream.requests if marker in str(b["messages"])]


@pytest.mark.parametrize("stream", [False, True])
def test_calls_stop_at_the_gateway_bound_without_max_tool_calls(
    upstream: ScriptedUpstream, mcp_server: McpTestServer, tmp_path: Path, stream: bool
) -> None:
    marker = f"bounded-calls-{stream}"
    with gateway(upstream, tmp_path, max_tool_calls=3) as server, client_for(server) as client:
        created = client.responses.create(
            model="m", input=f"[[script:facts total=50]] {marker}", tools=[tool(mcp_server)],
            stream=stream)
        if stream:
            events = sdk_events(created)
            check_stream(events)
            response = events[-1]["response"]
        else:
            response = check_response(created)
    assert response["status"] == "completed"
    assert [c["output"] for c in calls(response)] == [
        "FACT:step1", "FACT:step2", "FACT:step3"]
    assert response["output"][-1]["type"] == "message"  # the model answered at the bound
    sent = requests_with(upstream, marker)
    assert len(sent) == 4 and "tools" not in sent[-1]  # no tools offered past the bound


def test_a_lower_max_tool_calls_still_wins(
    upstream: ScriptedUpstream, mcp_server: McpTestServer, tmp_path: Path
) -> None:
    with gateway(upstream, tmp_path, max_tool_calls=3) as server, client_for(server) as client:
        response = check_response(client.responses.create(
            model="m", input="[[script:facts total=50]] lower-wins", tools=[tool(mcp_server)],
            max_tool_calls=1))
    assert len(calls(response)) == 1


def test_tool_output_bytes_are_bounded(
    upstream: ScriptedUpstream, mcp_server: McpTestServer, tmp_path: Path
) -> None:
    marker = "bounded-bytes"
    script = ("[[script:tool names=lab__huge,lab__huge,lab__huge,lab__huge,lab__huge "
              "args='{\"size\": 60000}']]")
    with gateway(upstream, tmp_path, max_tool_output_bytes=100_000) as server, \
            client_for(server) as client:
        response = check_response(client.responses.create(
            model="m", input=f"{script} {marker}", tools=[tool(mcp_server)]))
    ran = calls(response)
    assert len(ran) == 2  # 60 KB each: the second passes 100 KB, no third runs
    assert all(len(c["output"]) == 60000 for c in ran)
    assert "tools" not in requests_with(upstream, marker)[-1]


def test_model_turns_with_tool_calls_are_bounded(
    upstream: ScriptedUpstream, mcp_server: McpTestServer, tmp_path: Path
) -> None:
    marker = "bounded-turns"
    with gateway(upstream, tmp_path, max_tool_turns=4) as server, client_for(server) as client:
        response = check_response(client.responses.create(
            model="m", input=f"[[script:facts total=50]] {marker}", tools=[tool(mcp_server)]))
    assert len(calls(response)) == 4
    assert len(requests_with(upstream, marker)) == 4  # no fifth model turn

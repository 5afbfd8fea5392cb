"""Unit tests of remote MCP's pieces (issue 22): approval and allowed-tools filters, the
history sent to the model (grouped calls, denied approvals), the record's sealed headers."""

from __future__ import annotations

from typing import Any

import pytest

from responses_gateway.tools.catalog import ToolCatalog
from responses_gateway.tools.mcp.client import Limits, McpServer
from responses_gateway.tools.mcp.tool import McpServerTool
from responses_gateway.translate.request_models import parse_create_request
from responses_gateway.translate.sealing import Sealer
from responses_gateway.translate.to_chat import to_chat_request, turn_messages

SEARCH = {"name": "search", "annotations": {"readOnlyHint": True}}
WRITE = {"name": "write", "annotations": None}


@pytest.mark.parametrize(("mode", "search", "write"), [
    (None, True, True), ("always", True, True), ("never", False, False),
    ({"never": {"tool_names": ["search"]}}, False, True),
    ({"never": {"read_only": True}}, False, True),
    ({"always": {"tool_names": ["write"]}}, True, True),
])
def test_require_approval(mode: Any, search: bool, write: bool) -> None:
    server = McpServer("lab", "https://example.com/mcp", require_approval=mode)
    assert (server.needs_approval(SEARCH), server.needs_approval(WRITE)) == (search, write)


def test_allowed_tools() -> None:
    assert McpServer("l", "u", allowed_tools=["write"]).allows(WRITE)
    assert not McpServer("l", "u", allowed_tools=["write"]).allows(SEARCH)
    only_read = McpServer("l", "u", allowed_tools={"read_only": True})
    assert only_read.allows(SEARCH) and not only_read.allows(WRITE)


def call(item_id: str, name: str, output: str) -> dict[str, Any]:
    return {"id": item_id, "type": "mcp_call", "server_label": "lab", "name": name,
            "arguments": "{}", "output": output, "status": "completed"}


def test_calls_in_a_row_are_one_assistant_turn() -> None:
    text = {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "Looking."}]}
    messages = turn_messages([text, call("mcp_1", "search", "a"), call("mcp_2", "write", "b")],
                             catalog=ToolCatalog(), reasoning_input=None, unseal=None)
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool"]
    assert messages[0]["content"] == "Looking."
    assert [c["function"]["name"] for c in messages[0]["tool_calls"]] == [
        "lab__search", "lab__write"]
    assert [m["tool_call_id"] for m in messages[1:]] == ["mcp_1", "mcp_2"]


def test_a_denied_approval_is_a_call_the_model_reads_was_not_run() -> None:
    req = parse_create_request({"model": "m", "input": [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False,
         "reason": "too risky"}]})
    history = [
        {"id": "msg_u", "type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "hi"}]},
        {"id": "mcpr_1", "type": "mcp_approval_request", "server_label": "lab",
         "name": "write", "arguments": '{"x": 1}'},
        {"id": "mcpr_2", "type": "mcp_approval_request", "server_label": "lab",
         "name": "write", "arguments": "{}"},  # never answered: not a call yet
    ]
    items = [*history, {"id": "mcpa_1", "type": "mcp_approval_response",
                        "approval_request_id": "mcpr_1", "approve": False,
                        "reason": "too risky"}]
    body = to_chat_request(req, items, model="m")
    assistant, tool = body["messages"][1:]
    assert assistant["tool_calls"][0]["id"] == "mcpr_1"
    assert tool["tool_call_id"] == "mcpr_1" and "too risky" in tool["content"]


def test_the_record_keeps_headers_sealed_and_opens_them_on_connecting() -> None:
    req = parse_create_request({"model": "m", "tools": [{
        "type": "mcp", "server_label": "lab", "server_url": "https://example.com/mcp",
        "headers": {"X-Key": "sekrit"}, "authorization": "tok"}]})
    tools = McpServerTool.of(req.tools, Limits())
    sealer = Sealer.from_secret("k")
    record = tools.to_record(lambda data: sealer.seal(data, "tenant"))
    assert "sekrit" not in str(record) and "tok" not in str(record)
    again = McpServerTool.restore(record, Limits(),
                                 lambda blob: sealer.unseal(blob, "tenant"))
    assert again.headers == {} and again.sealed is not None
    opened = sealer.unseal(record["sealed_headers"], "tenant")
    assert opened == {"headers": {"lab": {"X-Key": "sekrit", "Authorization": "Bearer tok"}}}
    echoed = req.echo()["tools"][0] if isinstance(req.echo(), dict) else None
    if echoed is not None:
        assert "headers" not in echoed and "authorization" not in echoed


def test_the_mcp_models_are_configured_as_the_request_models() -> None:
    """tools/mcp/params.py keeps its own copy of the request models' config and name pattern
    (a tools package does not import translate/): the two stay equal."""
    from responses_gateway.tools.mcp import params
    from responses_gateway.translate import request_base

    assert params.CONFIG == request_base.PARAMS_CONFIG
    assert params.LABEL_PATTERN == request_base.NAME_PATTERN


def test_a_record_stored_before_the_seam_still_rebuilds_its_mcp_servers() -> None:
    """Background records written before server tools had a seam kept MCP's state under the
    tool's kind in the request (``request["mcp"]``), not under ``server_tools``: a worker
    still rebuilds the servers from it (responses/job.py ``_tools_of``)."""
    from types import SimpleNamespace

    from responses_gateway.config import Settings
    from responses_gateway.responses.job import _tools_of
    from responses_gateway.store.base import StoredResponse

    entry = {"servers": [{"label": "lab", "url": "https://mcp.example/mcp"}],
             "tools": {"lab": [SEARCH]}, "listed": [], "approved": []}
    gateway = SimpleNamespace(settings=Settings(), sealer=Sealer.from_secret(None))
    old = StoredResponse("resp_1", "t", {}, {"model": "m", "mcp": entry})
    tools = _tools_of(gateway, old)  # type: ignore[arg-type]
    assert tools is not None and list(tools.by_kind) == ["mcp"]
    assert isinstance(tools.by_kind["mcp"], McpServerTool)
    assert list(tools.by_kind["mcp"].servers) == ["lab"]
    assert _tools_of(gateway, StoredResponse("resp_2", "t", {}, {"model": "m"})) is None  # type: ignore[arg-type]

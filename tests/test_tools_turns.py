"""One translator across several model turns (issue 22, the turn loop's state machine).

A response whose model calls a tool the gateway runs (an MCP server's) spans turns: the
translator ends a turn (``end_turn``), the server tool opens and closes its items through the
translator's ItemWriter methods between turns (tools/server.py), and the next turn feeds the
same translator. Ids, output indexes and
sequence numbers continue; usage is summed over turns; exactly one terminal event. Every event
is validated against openai-python's models.
"""

from __future__ import annotations

import asyncio
from typing import Any

from responses_gateway.tools.catalog import ToolSpec
from responses_gateway.tools.mcp.client import Limits, McpServer
from responses_gateway.tools.mcp.tool import McpServerTool
from responses_gateway.tools.server import ServerCall
from responses_gateway.translate.request_models import parse_create_request
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response

SPECS = {"docs__search": ToolSpec("mcp", "search", "docs")}  # get_weather is a plain function


def new_translator() -> ResponseTranslator:
    response = new_response(parse_create_request({"model": "m"}).echo(), response_id="resp_t",
                            created_at=1, status="in_progress")
    return ResponseTranslator(response, TranslateOptions(tools=dict(SPECS)))


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}


class FakeServers(McpServerTool):
    """The MCP tool with its server calls answered from a table (no connection)."""

    answers: dict[str, Any]

    async def call(self, label: str, name: str, arguments: str) -> Any:
        return self.answers[name]


def servers(answers: dict[str, Any], approval: str = "never") -> FakeServers:
    tool = FakeServers({"docs": McpServer("docs", "https://docs.example/mcp",
                                          require_approval=approval)}, Limits())
    tool.answers = answers
    return tool


def run_call(tool: McpServerTool, call: ServerCall,
             translator: ResponseTranslator) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        async for batch in tool.run(call, translator):
            events += batch
        return events

    return asyncio.run(collect())


def server_call_turn(translator: ResponseTranslator) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    events += translator.feed(chunk({"content": "Let me look."}))
    events += translator.feed(chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {
        "name": "docs__search", "arguments": '{"q": '}}]}))
    events += translator.feed(chunk({"tool_calls": [{"index": 0, "function": {
        "arguments": '"mcp"}'}}]}, "tool_calls"))
    events += translator.feed(usage(10, 5))
    return events


def test_two_turns_continue_ids_indexes_sequence_and_sum_usage() -> None:
    translator = new_translator()
    tool = servers({"search": ("found 3 pages", None)})
    tool.listed = [{"server_label": "docs", "tools": [{"name": "search", "input_schema": {}}]}]
    events = translator.start()
    events += tool.opening_items(translator)
    turn = server_call_turn(translator)
    # The gateway-run call makes no events while the model writes it.
    assert not [e for e in turn if "mcp" in e["type"] or "function_call" in e["type"]]
    events += turn
    events += translator.end_turn()
    [call] = translator.server_calls
    assert (call.spec, call.arguments) == (SPECS["docs__search"], '{"q": "mcp"}')
    assert translator.client_calls == 0
    events += run_call(tool, call, translator)
    translator.next_turn()
    events += translator.feed(chunk({"content": "Found it."}, "stop"))
    events += translator.feed(usage(30, 4))
    events += translator.finish()

    for event in events:
        sdk_validate_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.completed") == 1
    response = events[-1]["response"]
    sdk_validate_response(response)
    assert [i["type"] for i in response["output"]] == [
        "mcp_list_tools", "message", "mcp_call", "message"]
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3]
    mcp_call = response["output"][2]
    assert mcp_call["id"].startswith("mcp_") and mcp_call["status"] == "completed"
    assert (mcp_call["output"], mcp_call["arguments"]) == ("found 3 pages", '{"q": "mcp"}')
    assert response["usage"]["input_tokens"] == 40
    assert response["usage"]["output_tokens"] == 9
    assert response["usage"]["total_tokens"] == 49
    kinds = [e["type"] for e in events if e.get("item_id") == mcp_call["id"]
             or e.get("item", {}).get("id") == mcp_call["id"]]
    assert kinds == ["response.output_item.added", "response.mcp_call.in_progress",
                     "response.mcp_call_arguments.delta", "response.mcp_call_arguments.delta",
                     "response.mcp_call_arguments.done",
                     "response.mcp_call.completed", "response.output_item.done"]
    deltas = [e["delta"] for e in events if e["type"] == "response.mcp_call_arguments.delta"]
    assert deltas == ['{"q": ', '"mcp"}']  # as the model streamed them


def test_tool_usage_adds_up_calls_and_never_changes_what_it_was_given() -> None:
    searched = {"web_search": {"num_requests": 1}}
    translator = new_translator()
    translator.response.pop("tool_usage")  # a record stored before tool_usage existed
    translator.add_tool_usage(searched)
    assert translator.response["tool_usage"]["web_search"] is not searched["web_search"]
    translator.add_tool_usage(searched)
    translator.add_tool_usage({"image_gen": {"input_tokens": 5, "total_tokens": 9}})
    translator.add_tool_usage(None)
    assert translator.response["tool_usage"] == {
        "web_search": {"num_requests": 2}, "image_gen": {"input_tokens": 5, "total_tokens": 9}}
    assert searched == {"web_search": {"num_requests": 1}}


def test_a_failed_call_and_an_approval_request_are_items() -> None:
    translator = new_translator()
    events = translator.start()
    events += server_call_turn(translator)
    events += translator.end_turn()
    [call] = translator.server_calls
    error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "boom"}]}
    events += run_call(servers({"search": (None, error)}), call, translator)
    asked = ServerCall("c2", SPECS["docs__search"], '{"q": "x"}')
    events += run_call(servers({}, approval="always"), asked, translator)
    assert asked.pauses  # the response waits for the client's approval
    events += translator.finish()
    for event in events:
        sdk_validate_event(event)
    response = events[-1]["response"]
    sdk_validate_response(response)
    failed, request = response["output"][1:]
    assert (failed["status"], failed["error"]) == ("failed", error)
    assert "response.mcp_call.failed" in [e["type"] for e in events]
    assert request["type"] == "mcp_approval_request" and request["id"].startswith("mcpr_")


def test_the_deadline_during_a_tool_call_fails_the_response_with_the_call_kept() -> None:
    translator = new_translator()
    events = translator.start()
    events += server_call_turn(translator)
    events += translator.end_turn()
    [call] = translator.server_calls

    async def started() -> list[dict[str, Any]]:
        runner = servers({}).run(call, translator)
        opened = await anext(runner)  # the item is open: the call is running
        await runner.aclose()
        return opened

    events += asyncio.run(started())
    events += translator.fail("response_timeout", "too slow")
    for event in events:
        sdk_validate_event(event)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["output"][-1]["status"] == "incomplete"


def test_a_turn_with_a_client_call_counts_it() -> None:
    translator = ResponseTranslator(
        new_response(parse_create_request({"model": "m"}).echo(), response_id="resp_c",
                     created_at=1, status="in_progress"),
        TranslateOptions(tools=dict(SPECS)))
    translator.start()
    translator.feed(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {
        "name": "get_weather", "arguments": "{}"}}]}))
    translator.feed(chunk({"tool_calls": [{"index": 1, "id": "d", "function": {
        "name": "docs__search", "arguments": "{}"}}]}, "tool_calls"))
    translator.end_turn()
    assert translator.client_calls == 1 and len(translator.server_calls) == 1


def test_server_tools_see_typed_settings_and_services() -> None:
    """What building a server tool sees is typed (issue 41): the Settings, and of the
    Gateway only the services a tool uses (``ToolServices``), not ``Any``."""
    from functools import cached_property
    from typing import get_type_hints

    from responses_gateway.responses.gateway import Gateway
    from responses_gateway.settings import Settings
    from responses_gateway.tools.server import Rebuild, RequestTools, ToolServices
    from responses_gateway.vectors.service import VectorStores

    names = {"Settings": Settings, "ToolServices": ToolServices, "VectorStores": VectorStores}
    for cls in (RequestTools, Rebuild):
        hints = get_type_hints(cls, localns=names)
        assert hints["settings"] is Settings and hints["services"] is ToolServices
    assert get_type_hints(ToolServices.vector_stores.fget, localns=names)["return"] \
        is VectorStores
    # the Gateway is what provides them (built on first use, so not asked here)
    assert isinstance(Gateway.__dict__["vector_stores"], cached_property)

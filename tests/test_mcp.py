"""Remote MCP run by the gateway (issue 22): end to end through openai-python, unmodified,
against a real MCP server (tests/helpers/mcp_server.py, the SDK's own server) and the scripted
Chat Completions upstream. Every streamed event is validated against the SDK's models and the
stream grammar (check_grammar knows the MCP items).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.helpers.e2e import WEATHER_TOOL, check_response, check_stream, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.mcp_server import McpTestServer, digest
from tests.helpers.scripted_upstream import ScriptedUpstream

SECRET = "sk-mcp-header-secret-42"
TOKEN = "oauth-token-secret-77"


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with McpTestServer() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("mcp") / "gateway.db"
    settings = e2e_settings(upstream, db, mcp_allow_hosts=("127.0.0.1",), mcp_call_timeout=3.0,
                            mcp_max_output_bytes=100_000)
    with GatewayServer(settings) as server:
        yield server


def mcp_tool(server: McpTestServer, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "lab", "server_url": server.url,
            "require_approval": "never", **extra}


def script(name: str, marker: str, **args: str) -> str:
    words = " ".join(f"{k}='{v}'" for k, v in args.items())
    return f"[[script:{name} {words}]] {marker}"


def call_search(marker: str, tool: str = "lab__search", args: str = '{"query": "mcp"}') -> str:
    return script("tool", marker, names=tool, args=args)


def items_of(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


# -- list and call, streaming and not ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False])
def test_list_call_and_answer(client: OpenAI, upstream: ScriptedUpstream,
                              mcp_server: McpTestServer, stream: bool) -> None:
    marker = f"list-call-{stream}"
    tools: Any = [mcp_tool(mcp_server, headers={"X-Api-Key": SECRET}, authorization=TOKEN)]
    if stream:
        events = sdk_events(client.responses.create(
            model="m", input=call_search(marker), tools=tools, stream=True))
        check_stream(events)
        response = events[-1]["response"]
        kinds = [e["type"] for e in events]
        assert kinds[2:6] == ["response.output_item.added", "response.mcp_list_tools.in_progress",
                              "response.mcp_list_tools.completed", "response.output_item.done"]
        call_events = [k for k in kinds if "mcp_call" in k]
        # The arguments as the model streamed them (three fragments), one delta each.
        assert call_events == ["response.mcp_call.in_progress",
                               *["response.mcp_call_arguments.delta"] * 3,
                               "response.mcp_call_arguments.done", "response.mcp_call.completed"]
        deltas = [e["delta"] for e in events if e["type"] == "response.mcp_call_arguments.delta"]
        assert "".join(deltas) == '{"query": "mcp"}'
    else:
        response = check_response(client.responses.create(model="m", input=call_search(marker),
                                                          tools=tools))
    assert items_of(response) == ["mcp_list_tools", "mcp_call", "message"]
    listed, call, message = response["output"]
    assert listed["server_label"] == "lab" and listed["id"].startswith("mcpl_")
    assert {t["name"] for t in listed["tools"]} >= {"search", "add", "fail", "slow"}
    assert (call["name"], call["server_label"], call["status"]) == ("search", "lab", "completed")
    assert call["output"] == "3 results for mcp" and json.loads(call["arguments"]) == {
        "query": "mcp"}
    assert "3 results for mcp" in message["content"][0]["text"]  # the model read the output
    # The echoed tool carries neither headers nor authorization, as OpenAI's does.
    [echoed] = response["tools"]
    assert "headers" not in echoed and "authorization" not in echoed
    assert echoed["server_url"] == mcp_server.url
    # Two upstream requests: the second carries the call and its result.
    second = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "lab__search"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": call["id"],
                                      "content": "3 results for mcp"}
    assert [t["function"]["name"] for t in second["tools"]][:2] == ["lab__search", "lab__add"]
    # The server got the headers; the usage is summed over both turns.
    assert any(h.get("x-api-key") == SECRET and h.get("authorization") == f"Bearer {TOKEN}"
               for h in mcp_server.seen())
    assert response["usage"]["input_tokens"] > 0


@pytest.mark.parametrize(("extra", "param", "message"), [
    ({"headers": {"X-Key": "a\r\nInjected: 1"}}, "tools[0].headers.X-Key",
     "Invalid 'tools[0].headers.X-Key': a header value may hold only printable ASCII "
     "characters, spaces and tabs."),
    ({"headers": {"X-Key": "clé"}}, "tools[0].headers.X-Key",
     "Invalid 'tools[0].headers.X-Key': a header value may hold only printable ASCII "
     "characters, spaces and tabs."),
    ({"headers": {"Bad Name": "a"}}, "tools[0].headers",
     "Invalid 'tools[0].headers': 'Bad Name' is not an HTTP header name."),
    ({"headers": {"Content-Length": "5"}}, "tools[0].headers.Content-Length",
     "Invalid 'tools[0].headers.Content-Length': the gateway's HTTP client sets this header "
     "itself."),
    ({"defer_loading": "x"}, "tools[0].defer_loading",  # was accepted and dropped
     "Invalid type for 'tools[0].defer_loading': expected a boolean, but got a string "
     "instead."),
    ({"authorization": "tok\nX: y"}, "tools[0].authorization",
     "Invalid 'tools[0].authorization': it may hold only printable ASCII characters, spaces "
     "and tabs."),
])
def test_headers_that_cannot_be_sent_are_400s(client: OpenAI, mcp_server: McpTestServer,
                                              extra: dict[str, Any], param: str,
                                              message: str) -> None:
    """They were a 424 naming a Python exception (LocalProtocolError, UnicodeEncodeError)
    once the server was dialled."""
    before = len(mcp_server.seen())
    with pytest.raises(BadRequestError) as caught:
        client.responses.create(model="m", input="hi", tools=[mcp_tool(mcp_server, **extra)])
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["message"]) == (param, message)
    assert error["code"] in ("invalid_value", "invalid_type")
    assert len(mcp_server.seen()) == before  # nothing was sent


def test_secrets_never_stored_or_logged(client: OpenAI, gateway: GatewayServer,
                                        mcp_server: McpTestServer,
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    response = client.responses.create(
        model="m", input=call_search("secrets", tool="lab__whoami", args="{}"),
        tools=[mcp_tool(mcp_server, headers={"X-Api-Key": SECRET}, authorization=TOKEN)])
    assert response.output[1].output == (
        f"authorization={digest('Bearer ' + TOKEN)} key={digest(SECRET)}")  # they arrived
    stored = client.responses.retrieve(response.id).to_dict()
    assert SECRET not in json.dumps(stored) and TOKEN not in json.dumps(stored)
    db = Path(gateway.settings.store.removeprefix("sqlite:"))
    for path in db.parent.iterdir():  # the database and its journal: sealed, never in clear
        data = path.read_bytes()
        assert SECRET.encode() not in data and TOKEN.encode() not in data
    assert all(SECRET not in r.getMessage() and TOKEN not in r.getMessage()
               for r in caplog.records)
    assert any("mcp" in r.name for r in caplog.records)  # the SDK's debug logs were seen


# -- failures are the mcp_call item's, never a crash ---------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("tool", "args", "error_type", "text"), [
    ("lab__fail", '{"message": "disk on fire"}', "mcp_tool_execution_error", "disk on fire"),
    ("lab__slow", '{"seconds": 10}', "mcp_protocol_error", "GATEWAY_MCP_CALL_TIMEOUT"),
    ("lab__huge", '{"size": 2000000}', "mcp_tool_execution_error",
     "GATEWAY_MCP_MAX_OUTPUT_BYTES"),
    ("lab__huge", '{"size": 150000}', "mcp_tool_execution_error",
     "GATEWAY_MCP_MAX_OUTPUT_BYTES"),
    ("lab__add", '"not an object"', "mcp_protocol_error", "not a JSON object"),
])
def test_a_failing_call_is_a_failed_item_and_the_model_goes_on(
        client: OpenAI, upstream: ScriptedUpstream, mcp_server: McpTestServer, tool: str,
        args: str, error_type: str, text: str) -> None:
    marker = f"fail-{tool}-{len(args)}"
    started = time.monotonic()
    events = sdk_events(client.responses.create(
        model="m", input=call_search(marker, tool=tool, args=args), stream=True,
        tools=[mcp_tool(mcp_server)]))
    check_stream(events)
    response = events[-1]["response"]
    assert response["status"] == "completed"
    call = response["output"][1]
    assert call["status"] == "failed" and call["error"]["type"] == error_type
    assert text in json.dumps(call["error"])
    assert "response.mcp_call.failed" in [e["type"] for e in events]
    last = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    assert last["messages"][-1]["content"].startswith("Error: ")  # the model was told
    assert time.monotonic() - started < 8


@pytest.mark.slow
def test_a_server_that_dies_mid_call(client: OpenAI) -> None:
    with McpTestServer() as doomed:
        events = sdk_events(client.responses.create(
            model="m", input=call_search("dies", tool="lab__die", args="{}"), stream=True,
            tools=[mcp_tool(doomed)]))
        assert not doomed.alive
    check_stream(events)
    response = events[-1]["response"]
    assert response["status"] == "completed"
    call = response["output"][1]
    assert call["status"] == "failed"
    assert call["error"]["type"] == "mcp_protocol_error"


def test_private_server_url_is_refused(upstream: ScriptedUpstream, mcp_server: McpTestServer,
                                       tmp_path: Path) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db")  # no GATEWAY_MCP_ALLOW_HOSTS
    with GatewayServer(settings) as strict:
        body = {"model": "m", "input": "hi", "tools": [mcp_tool(mcp_server)]}
        answer = httpx.post(strict.base_url + "/responses", json=body, timeout=30)
        assert answer.status_code == 424
        error = answer.json()["error"]
        assert error["type"] == "external_connector_error" and error["param"] == "tools"
        assert "'lab'" in error["message"] and "private" in error["message"]
        for url in ("http://169.254.169.254/latest/meta-data", "http://[::1]:9/mcp",
                    "http://0x7f.1/mcp"):
            body["tools"] = [mcp_tool(mcp_server, server_url=url)]
            answer = httpx.post(strict.base_url + "/responses", json=body, timeout=30)
            assert answer.status_code in (400, 424), (url, answer.text)
            assert "error" in answer.json()
    assert not [h for h in mcp_server.seen() if "strict" in json.dumps(h)]


def test_ipv6_spellings_of_private_addresses_are_refused(
        upstream: ScriptedUpstream, mcp_server: McpTestServer, tmp_path: Path) -> None:
    """Issue 27: 6to4, IPv4-compatible/-translated, NAT64 and site-local spellings of
    loopback or metadata addresses are refused before any connection, not tried."""
    port = httpx.URL(mcp_server.url).port
    settings = e2e_settings(upstream, tmp_path / "g.db")  # no GATEWAY_MCP_ALLOW_HOSTS
    with GatewayServer(settings) as strict:
        for host in ("2002:7f00:1::", "::7f00:1", "::ffff:0:7f00:1", "64:ff9b:1::7f00:1",
                     "2002:a9fe:a9fe::", "fec0::1"):
            body = {"model": "m", "input": "hi",
                    "tools": [mcp_tool(mcp_server, server_url=f"http://[{host}]:{port}/mcp")]}
            answer = httpx.post(strict.base_url + "/responses", json=body, timeout=30)
            assert answer.status_code == 424, (host, answer.text)
            message = answer.json()["error"]["message"]
            assert "refused to connect" in message and "non-public" in message, (host, message)


def test_an_unreachable_server_is_424(client: OpenAI) -> None:
    with pytest.raises(Exception) as info:
        client.responses.create(model="m", input="hi", tools=[{
            "type": "mcp", "server_label": "gone", "server_url": "http://127.0.0.1:9/mcp",
            "require_approval": "never"}])
    assert getattr(info.value, "status_code", None) == 424


def test_with_a_function_tool_and_the_sse_transport(
        client: OpenAI, mcp_server: McpTestServer) -> None:
    response = check_response(client.responses.create(
        model="m", input=call_search("sse", tool="lab__add", args='{"a": 2, "b": 40}'),
        tools=[WEATHER_TOOL, mcp_tool(mcp_server, server_url=mcp_server.sse_url)]))
    assert items_of(response) == ["mcp_list_tools", "mcp_call", "message"]
    assert response["output"][1]["output"] == "42"


def test_allowed_tools_and_max_tool_calls(client: OpenAI, upstream: ScriptedUpstream,
                                          mcp_server: McpTestServer) -> None:
    # The "facts" model calls the first tool once per turn until it has five facts, or
    # answers when it has no tools.
    response = check_response(client.responses.create(
        model="m", input="[[script:facts total=5]] allowed", max_tool_calls=2,
        tools=[mcp_tool(mcp_server, allowed_tools={"tool_names": ["remember", "nope"]})]))
    assert [t["name"] for t in response["output"][0]["tools"]] == ["remember"]
    assert items_of(response) == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    assert [i["output"] for i in response["output"][1:3]] == ["FACT:step1", "FACT:step2"]
    assert response["output"][3]["content"][0]["text"] == "FACTS: FACT:step1 FACT:step2"
    last = [b for b in upstream.requests if "allowed" in str(b["messages"])][-1]
    assert "tools" not in last  # the limit took the MCP tools away: the model answered


# -- approvals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("approve", [True, False])
def test_approval_round_trip(client: OpenAI, upstream: ScriptedUpstream,
                             mcp_server: McpTestServer, approve: bool) -> None:
    marker = f"approval-{approve}"
    tools: Any = [mcp_tool(mcp_server, require_approval={"never": {"tool_names": ["add"]}})]
    events = sdk_events(client.responses.create(
        model="m", input=call_search(marker), tools=tools, stream=True))
    check_stream(events)
    first = events[-1]["response"]
    assert first["status"] == "completed"
    assert items_of(first) == ["mcp_list_tools", "mcp_approval_request"]
    request = first["output"][1]
    assert request["id"].startswith("mcpr_") and request["name"] == "search"
    calls_before = len(upstream.requests)
    events = sdk_events(client.responses.create(
        model="m", previous_response_id=first["id"], tools=tools, stream=True,
        input=[{"type": "mcp_approval_response", "approval_request_id": request["id"],
                "approve": approve, "reason": "not today"}]))
    check_stream(events)
    second = events[-1]["response"]
    if approve:
        assert items_of(second) == ["mcp_call", "message"]  # listed once per conversation
        call = second["output"][0]
        assert call["approval_request_id"] == request["id"] and call["status"] == "completed"
        assert "3 results for mcp" in second["output"][1]["content"][0]["text"]
    else:
        assert items_of(second) == ["message"]
        sent = upstream.requests[-1]["messages"]
        assert "did not approve" in sent[-1]["content"] and "not today" in sent[-1]["content"]
    assert len(upstream.requests) == calls_before + 1


# -- background and cancel -----------------------------------------------------------------


def test_background_response_with_mcp(client: OpenAI, mcp_server: McpTestServer) -> None:
    job = client.responses.create(
        model="m", input=call_search("background"), background=True,
        tools=[mcp_tool(mcp_server, headers={"X-Api-Key": SECRET})])
    deadline = time.monotonic() + 30
    while job.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        job = client.responses.retrieve(job.id)
    response = check_response(job)
    assert response["status"] == "completed"
    assert items_of(response) == ["mcp_list_tools", "mcp_call", "message"]
    stream = sdk_events(client.responses.retrieve(job.id, stream=True))
    check_stream(stream)


@pytest.mark.slow
def test_cancel_during_a_tool_call(client: OpenAI, mcp_server: McpTestServer) -> None:
    job = client.responses.create(
        model="m", input=call_search("cancel", tool="lab__slow", args='{"seconds": 2.5}'),
        background=True, tools=[mcp_tool(mcp_server)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = client.responses.retrieve(job.id)
        if any(item.type == "mcp_call" for item in job.output):
            break
        time.sleep(0.05)
    started = time.monotonic()
    cancelled = client.responses.cancel(job.id)
    assert time.monotonic() - started < 2
    assert cancelled.status == "cancelled"
    assert cancelled.output[-1].type == "mcp_call" and cancelled.output[-1].status == "incomplete"


# -- tool_choice naming an MCP server's tool ------------------------------------------------


def test_tool_choice_forces_an_mcp_tool_on_the_first_turn_only(
    client: OpenAI, upstream: ScriptedUpstream, mcp_server: McpTestServer
) -> None:
    marker = "choice-mcp"
    response = check_response(client.responses.create(
        model="m", input=call_search(marker), tools=[mcp_tool(mcp_server)],
        tool_choice={"type": "mcp", "server_label": "lab", "name": "search"}))
    assert items_of(response) == ["mcp_list_tools", "mcp_call", "message"]
    assert response["tool_choice"] == {"type": "mcp", "server_label": "lab", "name": "search"}
    first, second = [b for b in upstream.requests if marker in str(b["messages"])]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "lab__search"}}
    assert second["tool_choice"] == "auto"  # forced again, the model could never answer


@pytest.mark.parametrize(("choice", "param"), [
    ({"type": "mcp", "server_label": "elsewhere"}, "tool_choice.server_label"),
    ({"type": "mcp", "server_label": "lab", "name": "no_such_tool"}, "tool_choice.name"),
])
def test_tool_choice_naming_an_unknown_mcp_server_or_tool_is_a_400(
    gateway: GatewayServer, mcp_server: McpTestServer, choice: dict[str, Any], param: str
) -> None:
    answer = httpx.post(gateway.base_url + "/responses", json={
        "model": "m", "input": "hi", "tools": [mcp_tool(mcp_server)], "tool_choice": choice})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


# -- MCP in a conversation and over a WebSocket ------------------------------------------------


def test_mcp_in_a_conversation_lists_once_and_keeps_the_calls(
    client: OpenAI, upstream: ScriptedUpstream, mcp_server: McpTestServer
) -> None:
    conversation = client.conversations.create()
    tools: Any = [mcp_tool(mcp_server)]
    first = check_response(client.responses.create(
        model="m", input=call_search("conv-mcp-1"), tools=tools, conversation=conversation.id))
    assert items_of(first) == ["mcp_list_tools", "mcp_call", "message"]
    second = check_response(client.responses.create(
        model="m", input="[[script:text]] conv-mcp-2", tools=tools,
        conversation=conversation.id))
    assert items_of(second) == ["message"]  # the conversation holds the listing: not again
    kinds = [item.type for item in client.conversations.items.list(conversation.id,
                                                                     order="asc")]
    assert kinds[:4] == ["message", "mcp_list_tools", "mcp_call", "message"]
    sent = [b for b in upstream.requests if "conv-mcp-2" in str(b["messages"])][-1]
    assert "3 results for mcp" in json.dumps(sent["messages"])  # the call's result, sent back
    assert [t["function"]["name"] for t in sent["tools"]][:2] == ["lab__search", "lab__add"]


def test_mcp_over_a_websocket(gateway: GatewayServer, mcp_server: McpTestServer) -> None:
    from websockets.sync.client import connect

    from tests.test_websocket import check_ws_event

    url = gateway.base_url.replace("http://", "ws://") + "/responses"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "m", "store": False,
                            "input": call_search("ws-mcp"), "tools": [mcp_tool(mcp_server)]}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ("response.completed", "error",
                                                       "response.failed"):
            events.append(json.loads(ws.recv(timeout=30)))
            check_ws_event(events[-1])
    check_stream(events)
    assert items_of(events[-1]["response"]) == ["mcp_list_tools", "mcp_call", "message"]


def test_defer_loading_is_echoed_as_sent(client: OpenAI, mcp_server: McpTestServer) -> None:
    """openai-python 3.57's field: kept (it was dropped from the echo) and left out when not
    sent, as a function tool's is."""
    sent = client.responses.create(model="m", input="hi",
                                   tools=[mcp_tool(mcp_server, defer_loading=True)])
    plain = client.responses.create(model="m", input="hi", tools=[mcp_tool(mcp_server)])
    assert sent.model_dump()["tools"][0]["defer_loading"] is True
    assert "defer_loading" not in plain.model_dump(exclude_unset=True)["tools"][0]

"""Tools the client runs (issue 29) through openai-python: the typed call items, their events,
their outputs going back to the model in every kind of history, tool_choice / allowed_tools,
the orphan-output check, the cut rule, and what GATEWAY_HOSTED_TOOLS no longer touches.

Every event and every response is validated against openai-python's models.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import BadRequestError

from responses_gateway.responses.fitting.cuts import cut_points
from responses_gateway.tools import client_tools
from tests.helpers.e2e import client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream

MODEL = "scripted-model"
SHELL = {"type": "shell", "environment": {"type": "local"}}
SHELL_ARGS = '{"action": {"commands": ["ls -la", "pwd"], "max_output_length": 2048}}'
OUTPUT = [{"stdout": "a.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
          {"stdout": "/work\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("client-tools") / "gateway.db"
    # reject: the client's tools are not hosted, so this policy leaves them alone
    with GatewayServer(e2e_settings(upstream, db, hosted_tools="reject",
                                    seal_key="client-tools-test-key")) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[Any]:
    with client_for(gateway) as c:
        yield c


def create(client: Any, **kwargs: Any) -> dict[str, Any]:
    response = client.responses.create(**{"model": MODEL, **kwargs}).to_dict(mode="json")
    sdk_validate_response(response)
    return response


def stream(client: Any, **kwargs: Any) -> list[dict[str, Any]]:
    with client.responses.create(model=MODEL, stream=True, **kwargs) as events:
        out = [e.to_dict(mode="json") for e in events]
    for event in out:
        sdk_validate_event(event)
    sdk_validate_response(out[-1]["response"])
    return out


def sent(upstream: ScriptedUpstream, marker: str) -> list[dict[str, Any]]:
    return [b for b in upstream.requests if marker in json.dumps(b["messages"])]


def test_shell_call_item_then_output_through_previous_response_id(
    client: Any, upstream: ScriptedUpstream
) -> None:
    first = create(client, input=f"chain [[script:call name=shell args='{SHELL_ARGS}']]",
                   tools=[SHELL], parallel_tool_calls=False)
    [call] = first["output"]
    assert call["type"] == "shell_call" and call["id"].startswith("sh_")
    assert call["status"] == "completed"
    assert call["action"] == {"commands": ["ls -la", "pwd"], "timeout_ms": None,
                              "max_output_length": 2048}
    assert first["tools"] == [SHELL]  # echoed as sent
    body = sent(upstream, "chain [[")[0]
    assert [t["function"]["name"] for t in body["tools"]] == ["shell"]
    assert body["parallel_tool_calls"] is False
    schema = body["tools"][0]["function"]["parameters"]
    assert schema["properties"]["action"]["required"] == ["commands"]

    second = create(client, previous_response_id=first["id"], tools=[SHELL], input=[
        {"type": "shell_call_output", "call_id": call["call_id"], "output": OUTPUT,
         "max_output_length": 2048}])
    assert second["output"][0]["content"][0]["text"].startswith("Tool output: [")
    history = sent(upstream, "chain [[")[-1]["messages"]
    [back] = history[-2]["tool_calls"]
    assert (back["id"], back["function"]["name"]) == (call["call_id"], "shell")
    assert json.loads(back["function"]["arguments"]) == {"action": call["action"]}
    assert history[-1]["role"] == "tool" and history[-1]["tool_call_id"] == call["call_id"]
    assert json.loads(history[-1]["content"]) == OUTPUT
    items = client.responses.input_items.list(second["id"]).to_dict(mode="json")["data"]
    assert items[0]["type"] == "shell_call_output" and items[0]["id"].startswith("sho_")


def test_shell_commands_stream_as_the_arguments_arrive(client: Any) -> None:
    """In 12 fragments: the item is announced before its arguments are whole, and each command
    streams in pieces (``ls -`` then ``la``), as OpenAI streams them."""
    events = stream(client, tools=[SHELL],
                    input=f"pieces [[script:call name=shell n=12 args='{SHELL_ARGS}']]")
    shell = [(e["type"].rsplit(".", 1)[1], e.get("command_index"), e.get("delta"),
              e.get("command")) for e in events if ".shell_call_command." in e["type"]]
    assert shell == [
        ("added", 0, None, ""), ("delta", 0, "ls -", None), ("delta", 0, "la", None),
        ("done", 0, None, "ls -la"), ("added", 1, None, ""), ("delta", 1, "pwd", None),
        ("done", 1, None, "pwd")]
    done = events[-2]["item"]
    assert done["action"] == {"commands": ["ls -la", "pwd"], "timeout_ms": None,
                              "max_output_length": 2048}
    assert events[-1]["response"]["output"] == [done]


def test_shell_call_streamed_with_its_commands(client: Any) -> None:
    events = stream(client, input=f"stream [[script:call name=shell args='{SHELL_ARGS}']]",
                    tools=[SHELL])
    kinds = [e["type"] for e in events]
    added = kinds.index("response.output_item.added")
    assert kinds[added:] == [
        "response.output_item.added",
        *["response.shell_call_command.added", "response.shell_call_command.delta",
          "response.shell_call_command.done"] * 2,
        "response.output_item.done", "response.completed"]
    assert events[added]["item"]["action"]["commands"] == []
    assert events[added]["item"]["status"] == "in_progress"
    deltas = [e["delta"] for e in events if e["type"] == "response.shell_call_command.delta"]
    assert deltas == ["ls -la", "pwd"]
    done = events[-2]["item"]
    assert done["status"] == "completed" and done["action"]["commands"] == ["ls -la", "pwd"]
    assert events[-1]["response"]["output"] == [done]


def test_apply_patch_and_local_shell_items(client: Any, upstream: ScriptedUpstream) -> None:
    patch = '{"operation": {"type": "delete_file", "path": "old.py"}}'
    first = create(client, input=f"patch [[script:call name=apply_patch args='{patch}']]",
                   tools=[{"type": "apply_patch"}])
    assert first["output"][0]["operation"] == {"type": "delete_file", "path": "old.py"}
    assert first["output"][0]["id"].startswith("apc_")
    out = create(client, previous_response_id=first["id"], input=[
        {"type": "apply_patch_call_output", "call_id": first["output"][0]["call_id"],
         "status": "failed", "output": "old.py: no such file"}])
    assert sent(upstream, "patch [[")[-1]["messages"][-1]["content"] == json.dumps(
        {"status": "failed", "output": "old.py: no such file"})
    assert out["status"] == "completed"

    run = '{"action": {"type": "exec", "command": ["ls"], "env": {"A": "1"}}}'
    first = create(client, input=f"local [[script:call name=local_shell args='{run}']]",
                   tools=[{"type": "local_shell"}])
    [call] = first["output"]
    assert call["type"] == "local_shell_call" and call["id"].startswith("lsh_")
    assert call["action"] == {"type": "exec", "command": ["ls"], "env": {"A": "1"},
                              "timeout_ms": None, "user": None, "working_directory": None}
    # openai-python's local_shell_call_output names the call by ``id``
    create(client, previous_response_id=first["id"], input=[
        {"type": "local_shell_call_output", "id": call["call_id"], "output": '{"out": "x"}'}])
    assert sent(upstream, "local [[")[-1]["messages"][-1] == {
        "role": "tool", "tool_call_id": call["call_id"], "content": '{"out": "x"}'}


def test_computer_call_screenshot_goes_to_the_model_as_an_image(
    client: Any, upstream: ScriptedUpstream
) -> None:
    tool = {"type": "computer_use_preview", "display_width": 800, "display_height": 600,
            "environment": "browser"}
    action = '{"action": {"type": "scroll", "x": 5, "y": 6, "scroll_x": 0, "scroll_y": 300}}'
    # the directive rides in the instructions: the screenshot's user message comes last
    script = f"[[script:call name=computer args='{action}']]"
    first = create(client, input="cu: scroll down", instructions=script,
                   tools=[tool], tool_choice={"type": "computer_use_preview"})
    [call] = first["output"]
    assert call["action"] == {"type": "scroll", "x": 5, "y": 6, "scroll_x": 0, "scroll_y": 300}
    assert call["pending_safety_checks"] == [] and call["id"].startswith("cu_")
    body = sent(upstream, "cu: scroll")[0]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "computer"}}
    assert "800x600 pixels (browser)" in body["tools"][0]["function"]["description"]
    url = "data:image/png;base64,iVBORw0KGgo="
    done = create(client, previous_response_id=first["id"], tools=[tool], instructions=script,
                  input=[
        {"type": "computer_call_output", "call_id": call["call_id"],
         "output": {"type": "computer_screenshot", "image_url": url}}])
    messages = sent(upstream, "cu: scroll")[-1]["messages"]
    assert messages[-2]["role"] == "tool" and messages[-2]["tool_call_id"] == call["call_id"]
    assert messages[-1] == {"role": "user", "content": [
        {"type": "text", "text": f"Screenshot returned by tool call {call['call_id']}:"},
        {"type": "image_url", "image_url": {"url": url}}]}
    assert done["output"][0]["content"][0]["text"].endswith("image:" + __import__(
        "hashlib").sha256(url.encode()).hexdigest()[:12])


def test_tool_search_on_the_client_loads_tools_the_model_then_calls(
    client: Any, upstream: ScriptedUpstream
) -> None:
    search = {"type": "tool_search", "execution": "client",
              "description": "Find tools by what they do.",
              "parameters": {"type": "object", "properties": {"goal": {"type": "string"}}}}
    first = create(client, tools=[search],
                   input="search [[script:call names=tool_search,get_stock "
                         "args1='{\"goal\": \"stocks\"}' args2='{\"symbol\": \"ACME\"}']]")
    [call] = first["output"]
    assert call == {**call, "type": "tool_search_call", "execution": "client",
                    "arguments": {"goal": "stocks"}, "status": "completed"}
    body = sent(upstream, "search [[")[0]
    assert body["tools"][0]["function"]["description"] == "Find tools by what they do."
    loaded = {"type": "function", "name": "get_stock", "description": "A stock price.",
              "parameters": {"type": "object", "properties": {"symbol": {"type": "string"}}}}
    second = create(client, previous_response_id=first["id"], tools=[search], input=[
        {"type": "tool_search_output", "execution": "client", "call_id": call["call_id"],
         "tools": [loaded]}])
    assert second["output"][0]["type"] == "function_call"
    assert second["output"][0]["name"] == "get_stock"
    body = sent(upstream, "search [[")[-1]
    assert [t["function"]["name"] for t in body["tools"]] == ["tool_search", "get_stock"]
    assert json.loads(body["messages"][-1]["content"]) == {"tools": [loaded]}


def test_tool_choice_and_allowed_tools(client: Any, upstream: ScriptedUpstream) -> None:
    weather = {"type": "function", "name": "get_weather",
               "parameters": {"type": "object", "properties": {}}}
    first = create(client, input=f"forced [[script:call name=shell args='{SHELL_ARGS}']]",
                   tools=[weather, SHELL, {"type": "apply_patch"}],
                   tool_choice={"type": "shell"})
    assert first["tool_choice"] == {"type": "shell"}
    body = sent(upstream, "forced [[")[0]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    allowed = {"type": "allowed_tools", "mode": "required",
               "tools": [{"type": "apply_patch"}, {"type": "function", "name": "get_weather"}]}
    second = create(client, input="allowed [[script:text]]",
                    tools=[weather, SHELL, {"type": "apply_patch"}], tool_choice=allowed)
    assert second["tool_choice"] == allowed
    body = sent(upstream, "allowed [[")[0]
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "apply_patch"]
    assert body["tool_choice"] == "required"
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input="x", tools=[weather],
                                tool_choice={"type": "shell"})
    assert info.value.body["param"] == "tool_choice"
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input="x", tools=[weather], tool_choice={
            "type": "allowed_tools", "mode": "auto", "tools": [{"type": "local_shell"}]})
    assert info.value.body["param"] == "tool_choice.tools[0].type"


@pytest.mark.parametrize(("environment", "param", "code", "message"), [
    ("x", "tools[0].environment", "invalid_type",
     "Invalid type for 'tools[0].environment': expected an object, but got a string instead."),
    ({"type": "mars"}, "tools[0].environment.type", "invalid_value",
     "Invalid value: 'mars'. Supported values are: 'container_auto', 'local', and "
     "'container_reference'."),
    ({"skills": []}, "tools[0].environment.type", "missing_required_parameter",
     "Missing required parameter: 'tools[0].environment.type'."),
])
def test_a_shell_environment_of_no_known_kind_is_a_400(
        client: Any, environment: Any, param: str, code: str, message: str) -> None:
    """It was read as the client's machine, silently, and the shell offered."""
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input="x",
                                tools=[{"type": "shell", "environment": environment}])
    error = info.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"], error["message"]) == (param, code, message)


def test_a_function_named_shell_keeps_its_name(client: Any, upstream: ScriptedUpstream) -> None:
    mine = {"type": "function", "name": "shell", "parameters": {"type": "object"}}
    create(client, input="clash [[script:text]]", tools=[mine, SHELL])
    names = [t["function"]["name"] for t in sent(upstream, "clash [[")[0]["tools"]]
    assert names[0] == "shell" and names[1].startswith("shell_") and len(set(names)) == 2


def test_an_output_for_no_call_is_openais_400(client: Any) -> None:
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, tools=[SHELL], input=[
            {"type": "shell_call_output", "call_id": "call_nowhere", "output": OUTPUT}])
    assert info.value.body["message"] == (
        "No tool call found for shell call output with call_id call_nowhere.")
    assert info.value.body["param"] == "input"


def test_calls_and_outputs_in_the_input_itself_and_in_a_conversation(
    client: Any, upstream: ScriptedUpstream
) -> None:
    """A client replaying the whole history (store=false), and a conversation keeping it."""
    call = {"type": "apply_patch_call", "call_id": "call_p1", "status": "completed",
            "operation": {"type": "create_file", "path": "a.md", "diff": "+hi"}}
    output = {"type": "apply_patch_call_output", "call_id": "call_p1", "status": "completed"}
    create(client, store=False, tools=[{"type": "apply_patch"}], input=[
        {"role": "user", "content": "replay [[script:text]]"}, call, output])
    messages = sent(upstream, "replay [[")[0]["messages"]
    assert messages[-2]["tool_calls"][0]["function"] == {
        "name": "apply_patch", "arguments": json.dumps({"operation": call["operation"]})}
    assert messages[-1]["content"] == '{"status": "completed"}'

    conversation = client.conversations.create()
    first = create(client, conversation=conversation.id, tools=[SHELL],
                   input=f"conv [[script:call name=shell args='{SHELL_ARGS}']]")
    create(client, conversation=conversation.id, tools=[SHELL], input=[
        {"type": "shell_call_output", "call_id": first["output"][0]["call_id"],
         "output": OUTPUT}])
    last = sent(upstream, "conv [[")[-1]["messages"]
    assert last[-1]["role"] == "tool" and json.loads(last[-1]["content"]) == OUTPUT
    items = client.conversations.items.list(conversation.id).to_dict(mode="json")["data"]
    assert {i["type"] for i in items} >= {"shell_call", "shell_call_output"}


def test_websocket_mode_round_trip(gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    with client_for(gateway) as c, c.responses.connect() as connection:
        connection.response.create(model=MODEL, tools=[SHELL], store=False,
                                   input=f"ws [[script:call name=shell args='{SHELL_ARGS}']]")
        first = _turn(connection)
        call = first["output"][0]
        assert call["type"] == "shell_call"
        connection.response.create(model=MODEL, tools=[SHELL], store=False,
                                   previous_response_id=first["id"], input=[
                                       {"type": "shell_call_output", "call_id": call["call_id"],
                                        "output": OUTPUT}])
        second = _turn(connection)
    assert second["output"][0]["type"] == "message"
    assert json.loads(sent(upstream, "ws [[")[-1]["messages"][-1]["content"]) == OUTPUT


def _turn(connection: Any) -> dict[str, Any]:
    for event in connection:
        data = event.to_dict(mode="json")
        sdk_validate_event(data)
        if event.type == "response.completed":
            return data["response"]
        assert event.type != "error", data
    raise AssertionError("no terminal event")


def test_the_cut_rule_keeps_each_client_call_with_its_output() -> None:
    items = [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "shell_call", "call_id": "a"},
        {"type": "shell_call_output", "call_id": "a"},
        {"type": "computer_call", "call_id": "b"},
        {"type": "computer_call_output", "call_id": "b"},
        {"type": "local_shell_call", "call_id": "c"},
        {"type": "local_shell_call_output", "id": "c"},  # openai-python names it by id
        {"type": "message", "role": "user", "content": "next"},
    ]
    assert cut_points(items) == [1, 3, 5, 7]
    assert set(client_tools.PAIRS) == {"shell_call", "apply_patch_call", "local_shell_call",
                                       "computer_call", "tool_search_call"}


def test_malformed_arguments_still_make_a_valid_item() -> None:
    item = client_tools.call_item("shell", "call_1", '{"action": {"commands": ["ls"', "completed")
    assert item["status"] == "incomplete" and item["action"]["commands"] == []
    patch = client_tools.call_item("apply_patch", "call_2", "nope", "completed")
    assert patch["status"] == "in_progress"  # apply_patch_call has no "incomplete"
    flat = client_tools.call_item("shell", "call_3", '{"commands": "ls"}', "completed")
    assert flat["action"]["commands"] == ["ls"]  # a flattened, single-string call
    computer = client_tools.call_item(
        "computer", "call_4", '{"actions": [{"type": "teleport"}, {"type": "wait"}]}',
        "completed")
    assert computer["actions"] == [{"type": "wait"}]


def test_compaction_summarises_client_calls_with_their_outputs(
    client: Any, upstream: ScriptedUpstream
) -> None:
    """The window is rendered as for a create: the call and its output reach the summariser,
    and what the output said survives in the summary."""
    output = [{"stdout": "FACT:disk-full\n", "stderr": "", "outcome": {"type": "exit",
                                                                      "exit_code": 1}}]
    window = [
        {"role": "user", "content": "Check the disk. FACT:asked"},
        {"type": "shell_call", "call_id": "call_df", "status": "completed",
         "action": {"commands": ["df -h"], "timeout_ms": None, "max_output_length": None}},
        {"type": "shell_call_output", "call_id": "call_df", "output": output},
    ]
    raw = client.responses.with_raw_response.compact(model="script/facts", input=window)
    body = json.loads(raw.text)
    summarising = upstream.requests[-1]["messages"]
    assert summarising[1]["tool_calls"][0]["function"]["name"] == "shell"
    assert summarising[2]["role"] == "tool" and "FACT:disk-full" in summarising[2]["content"]
    follow = create(client, model="script/facts", tools=[SHELL],
                    input=[*body["output"], {"role": "user", "content": "What happened?"}])
    assert "FACT:disk-full" in follow["output"][0]["content"][0]["text"]


# -- docs/tools.md renders the table ---------------------------------------------------------

DOCS = __import__("pathlib").Path(__file__).resolve().parent.parent / "docs" / "tools.md"
START, END = "<!-- client-tools table: start -->", "<!-- client-tools table: end -->"


def rendered_table() -> str:
    """tools/client_tools.py's table as docs/tools.md shows it."""
    lines = [START, "",
             "| `tools[].type` | chat function | call item (id) | output item (id) |",
             "|---|---|---|---|"]
    for tool in client_tools.CLIENT_TOOLS:
        types = " / ".join(f"`{t}`" for t in tool.tool_types)
        if tool.kind == "tool_search":
            types += " (`execution: \"client\"`)"
        lines.append(f"| {types} | `{tool.function}` | `{tool.call_type}` (`{tool.call_prefix}`)"
                     f" | `{tool.output_type}` (`{tool.output_prefix}`) |")
    for tool in client_tools.CLIENT_TOOLS:
        lines += ["", f"**`{tool.kind}`**: {tool.description}", "", "```json",
                  json.dumps(tool.parameters, indent=1), "```"]
    return "\n".join([*lines, "", END])


def test_docs_render_the_table() -> None:
    """RG_WRITE_DOCS=1 rewrites the section from the table."""
    text = DOCS.read_text()
    before, _, rest = text.partition(START)
    _, _, after = rest.partition(END)
    if __import__("os").environ.get("RG_WRITE_DOCS"):
        DOCS.write_text(before + rendered_table() + after)
        text = DOCS.read_text()
    assert rendered_table() in text, "docs/tools.md is out of date: run with RG_WRITE_DOCS=1"


def test_background_response_makes_the_same_item(client: Any) -> None:
    """A background response (its catalog read back from the stored request) ends with the
    typed call, as a foreground one does."""
    import time

    first = create(client, background=True, tools=[SHELL],
                   input=f"bg [[script:call name=shell args='{SHELL_ARGS}']]")
    for _ in range(100):
        done = client.responses.retrieve(first["id"]).to_dict(mode="json")
        if done["status"] not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    sdk_validate_response(done)
    assert done["status"] == "completed"
    assert [i["type"] for i in done["output"]] == ["shell_call"]
    assert done["output"][0]["action"]["commands"] == ["ls -la", "pwd"]


def _translator() -> Any:
    from responses_gateway.tools.catalog import ToolSpec
    from responses_gateway.translate.response_object import new_response
    from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions

    response = new_response({"model": "m"}, response_id="resp_cut", created_at=1)
    specs = {"shell": ToolSpec("shell", "shell"), "apply_patch": ToolSpec("apply_patch",
                                                                          "apply_patch")}
    return ResponseTranslator(response, TranslateOptions(tools=specs))


def _call_chunk(name: str | None, arguments: str) -> dict[str, Any]:
    call: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
    if name:
        call.update(id="call_cut", type="function")
        call["function"]["name"] = name
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}


def test_a_shell_call_cut_off_by_a_failure_keeps_what_streamed_and_is_never_done() -> None:
    t = _translator()
    events = t.start() + t.feed(_call_chunk("shell", '{"action": {"commands": ["make", "ma'))
    events += t.fail("upstream_connection_closed", "Upstream error: connection closed")
    for event in events:
        sdk_validate_event(event)
    kinds = [e["type"] for e in events]
    assert "response.output_item.done" not in kinds and kinds[-1] == "response.failed"
    [item] = events[-1]["response"]["output"]
    assert item["status"] == "incomplete" and item["action"]["commands"] == ["make", "ma"]
    assert t.client_calls == 0  # nothing for the client to run

    t = _translator()  # an apply_patch call cut off never became an item at all
    events = t.start() + t.feed(_call_chunk("apply_patch", '{"operation": {"type": "up'))
    events += t.fail("upstream_connection_closed", "Upstream error: connection closed")
    assert events[-1]["response"]["output"] == []


def test_the_preview_computer_tool_needs_its_display(client: Any) -> None:
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input="x", tools=[
            {"type": "computer_use_preview", "display_width": 800, "environment": "browser"}])
    assert info.value.body["param"] == "tools[0].display_height"
    assert info.value.body["code"] == "missing_required_parameter"


# -- arguments that do not fit (issue 40) -------------------------------------------------------

PREVIEW = {"type": "computer_use_preview", "display_width": 800, "display_height": 600,
           "environment": "browser"}
DEEP = '{"goal": ' + '{"a": ' * 300 + "1" + "}" * 301  # objects: "]]" would end the directive


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(("tool", "name", "args"), [
    (PREVIEW, "computer", '{"action": {"type": "click", "x": 5, "y": 1e400}}'),
    (PREVIEW, "computer", '{"action": {"type": "click", "x": 5, "y": 1e300}}'),
    (PREVIEW, "computer", '{"action": {"type": "move", "x": "99999999999999999999999", "y": 1}}'),
    ({"type": "tool_search", "execution": "client"}, "tool_search", DEEP),
    ({"type": "tool_search", "execution": "client"}, "tool_search",
     '{"goal": 123456789012345678901234567890}'),
], ids=["inf", "huge-float", "huge-string", "deep", "huge-int"])
def test_arguments_that_do_not_fit_make_a_valid_item_not_a_failure(
    client: Any, tool: dict[str, Any], name: str, args: str, streamed: bool
) -> None:
    """What a model sends that JSON or the item cannot hold (a number past a double, an
    integer past 64 bits, nesting deeper than a request may use) is an item like any other
    malformed call's: the response completes, streamed with its terminal event."""
    text = f"unfit-{name} [[script:call name={name} args='{args}']]"
    if streamed:
        events = stream(client, input=text, tools=[tool])
        assert events[-1]["type"] == "response.completed"
        response = events[-1]["response"]
    else:
        response = create(client, input=text, tools=[tool])
    assert response["status"] == "completed"
    [call] = response["output"]
    if name == "computer":
        assert call["type"] == "computer_call"
        action = call["action"]
        assert all(abs(action.get(k, 0)) < 2**53 for k in ("x", "y"))
    elif args == DEEP:
        assert call["type"] == "tool_search_call"
        assert call["status"] == "incomplete" and call["arguments"] == {}
    else:  # read as the double it is closest to, as orjson reads any JSON number
        assert call["status"] == "completed" and call["arguments"]["goal"] == 1.2345678901234568e29


def test_apply_patch_without_the_diff_it_needs_is_not_completed(
    client: Any, upstream: ScriptedUpstream
) -> None:
    """The schema offered requires ``diff`` for create_file and update_file; a model that
    still leaves it out gets an item that is not ``completed`` (``in_progress``: what an
    apply_patch_call whose arguments were cut off is), as OpenAI's types have it."""
    patch = '{"operation": {"type": "create_file", "path": "new.py"}}'
    response = create(client, input=f"nodiff [[script:call name=apply_patch args='{patch}']]",
                      tools=[{"type": "apply_patch"}])
    [call] = response["output"]
    assert call["operation"] == {"type": "create_file", "path": "new.py", "diff": ""}
    assert call["status"] == "in_progress"
    schema = sent(upstream, "nodiff [[")[0]["tools"][0]["function"]["parameters"]
    branches = schema["properties"]["operation"]["anyOf"]
    assert [b["required"] for b in branches] == [["type", "path", "diff"], ["type", "path"]]
    deleted = client_tools.call_item(
        "apply_patch", "c", '{"operation": {"type": "delete_file", "path": "a.py"}}', "completed")
    assert deleted["status"] == "completed"

"""``namespace`` and ``custom`` tools, and the hosted-tools setting (issue 22, part 1).

Unit level: the flattening of tool names (unique, within Bedrock's ``[a-zA-Z0-9_-]{1,64}``),
the function a custom tool becomes, the streaming decoder of its input, the translator's items
and events (validated against openai-python's types) and the history sent back upstream. End to
end: openai-python against the gateway in front of the scripted Chat Completions upstream and
in front of the fake Bedrock runtime.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import OpenAI

from responses_gateway.errors import GatewayError
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.custom import InputStream, arguments_for, chat_function, input_of
from responses_gateway.translate.request_models import normalize_input, parse_create_request
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from responses_gateway.translate.to_chat import to_chat_request
from tests.helpers.e2e import WEATHER_TOOL, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import (
    check_grammar,
    sdk_validate_event,
    sdk_validate_response,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

BEDROCK_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
PATCH_GRAMMAR = 'start: "*** Begin Patch" LF body "*** End Patch"\n%import common.LF\n'
APPLY_PATCH = {
    "type": "custom", "name": "apply_patch", "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
AGENTS = {
    "type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
    "tools": [
        {"type": "function", "name": "close_agent", "description": "Close one.",
         "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}},
        {"type": "custom", "name": "note"},
    ],
}


def chat_of(body: dict[str, Any], catalog: ToolCatalog | None = None) -> dict[str, Any]:
    req = parse_create_request(body, hosted_tools="omit")
    return to_chat_request(req, normalize_input(req), model="m", catalog=catalog)


# -- names ---------------------------------------------------------------------------------


def test_namespace_members_are_flattened_and_mapped_back() -> None:
    catalog = ToolCatalog()
    chat = chat_of({"model": "m", "input": "hi", "tools": [WEATHER_TOOL, AGENTS, APPLY_PATCH]},
                   catalog)
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == ["get_weather", "multi_agent_v1__close_agent", "multi_agent_v1__note",
                     "apply_patch"]
    assert catalog.specs == {
        "multi_agent_v1__close_agent": ToolSpec("function", "close_agent", "multi_agent_v1"),
        "multi_agent_v1__note": ToolSpec("custom", "note", "multi_agent_v1"),
        "apply_patch": ToolSpec("custom", "apply_patch", None),
    }


def test_flattened_names_never_collide_and_fit_bedrock() -> None:
    long_ns = {**AGENTS, "name": "n" * 60}
    clash = {"type": "function", "name": "multi_agent_v1__close_agent"}  # a client's own name
    catalog = ToolCatalog()
    chat = chat_of({"model": "m", "tools": [AGENTS, long_ns, clash]}, catalog)
    names = [t["function"]["name"] for t in chat["tools"]]
    assert len(set(names)) == len(names) == 5
    assert all(BEDROCK_NAME.fullmatch(name) for name in names)
    assert "multi_agent_v1__close_agent" in names  # the plain function keeps its own name
    flattened = {spec.name + "@" + str(spec.namespace): chat_name
                 for chat_name, spec in catalog.specs.items()}
    assert flattened["close_agent@multi_agent_v1"] != "multi_agent_v1__close_agent"
    assert flattened["close_agent@" + "n" * 60].startswith("n" * 10)


# -- custom tools ----------------------------------------------------------------------------


def test_a_regex_grammar_becomes_a_schema_pattern_and_lark_a_description() -> None:
    regex = chat_function("when", None, {"type": "grammar", "syntax": "regex",
                                         "definition": r"^\d{4}-\d{2}-\d{2}$"})
    assert regex["parameters"]["properties"]["input"]["pattern"] == r"^\d{4}-\d{2}-\d{2}$"
    assert regex["parameters"]["required"] == ["input"]
    lark = chat_function("apply_patch", "Edit files.", APPLY_PATCH["format"])
    assert "pattern" not in lark["parameters"]["properties"]["input"]
    assert lark["description"].startswith("Edit files.")
    assert "lark grammar" in lark["description"] and PATCH_GRAMMAR in lark["description"]
    free = chat_function("note", None, None)
    assert free["parameters"]["properties"]["input"] == {
        "type": "string", "description": "Raw input for the tool."}


@given(st.text(), st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=40))
def test_the_input_decoder_gives_the_input_whatever_the_fragments(
    text: str, cuts: list[int]
) -> None:
    arguments = arguments_for(text)
    decoder, pieces, at = InputStream(), [], 0
    for cut in cuts * (len(arguments) // max(1, sum(cuts)) + 1):
        pieces.append(decoder.feed(arguments[at:at + cut]))
        at += cut
        if at >= len(arguments):
            break
    pieces.append(decoder.feed(arguments[at:]))
    assert "".join(pieces) == text == input_of(arguments)


def test_input_of_forgives_models_that_skip_the_json() -> None:
    assert input_of('{"patch": "x"}') == "x"
    assert input_of("*** Begin Patch") == "*** Begin Patch"
    assert input_of('{"input": "a", "other": 1}') == "a"


def translate(chunks: list[dict[str, Any]], specs: dict[str, ToolSpec]) -> list[dict[str, Any]]:
    response = new_response(parse_create_request({"model": "m"}).echo(), response_id="resp_t",
                            created_at=1, status="in_progress")
    translator = ResponseTranslator(response, TranslateOptions(tools=specs))
    events = translator.start()
    for chunk in chunks:
        events += translator.feed(chunk)
    return events + translator.finish()


def call_chunk(index: int, *, call_id: str | None = None, name: str | None = None,
               arguments: str = "", finish: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        call["id"] = call_id
        call["function"]["name"] = name
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": finish}]}


def test_translator_reports_custom_and_namespace_calls_as_openai_does() -> None:
    specs = {"apply_patch": ToolSpec("custom", "apply_patch"),
             "multi_agent_v1__close_agent": ToolSpec("function", "close_agent", "multi_agent_v1")}
    patch_args = arguments_for("*** Begin Patch\n+é\n*** End Patch")
    events = translate([
        call_chunk(0, call_id="call_a", name="apply_patch"),
        *[call_chunk(0, arguments=patch_args[i:i + 5]) for i in range(0, len(patch_args), 5)],
        call_chunk(1, call_id="call_b", name="multi_agent_v1__close_agent",
                   arguments='{"target": "x"}', finish="tool_calls"),
    ], specs)
    for event in events:
        sdk_validate_event(event)
    kinds = [e["type"] for e in events]
    assert kinds[2:4] == ["response.output_item.added", "response.custom_tool_call_input.delta"]
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 3 and "".join(deltas) == "*** Begin Patch\n+é\n*** End Patch"
    [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == "".join(deltas)
    response = events[-1]["response"]
    sdk_validate_response(response)
    custom, function = response["output"]
    assert custom == {"id": custom["id"], "type": "custom_tool_call", "call_id": "call_a",
                      "input": "*** Begin Patch\n+é\n*** End Patch", "name": "apply_patch"}
    assert custom["id"].startswith("ctc_")
    assert (function["name"], function["namespace"]) == ("close_agent", "multi_agent_v1")
    assert function["arguments"] == '{"target": "x"}'


# -- history back upstream ------------------------------------------------------------------


def test_custom_and_namespace_calls_go_back_as_the_functions_offered() -> None:
    chat = chat_of({"model": "m", "tools": [AGENTS, APPLY_PATCH], "input": [
        {"role": "user", "content": "go"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "P"},
        {"type": "function_call", "call_id": "c2", "name": "close_agent",
         "namespace": "multi_agent_v1", "arguments": "{}"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
        {"type": "function_call_output", "call_id": "c2", "output": "closed"},
    ]})
    assert chat["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "apply_patch", "arguments": '{"input":"P"}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "multi_agent_v1__close_agent", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "Done!"},
        {"role": "tool", "tool_call_id": "c2", "content": "closed"},
    ]


def test_tool_choice_may_name_a_custom_tool() -> None:
    chat = chat_of({"model": "m", "tools": [APPLY_PATCH],
                    "tool_choice": {"type": "custom", "name": "apply_patch"}})
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    with pytest.raises(GatewayError) as info:
        chat_of({"model": "m", "tools": [APPLY_PATCH],
                 "tool_choice": {"type": "custom", "name": "nope"}})
    assert info.value.param == "tool_choice.name"


# -- hosted tools ---------------------------------------------------------------------------


def test_hosted_tools_are_left_out_or_refused_as_configured() -> None:
    # tool_search is OpenAI's unless execution is "client" (then the client runs it: issue 29)
    body = {"model": "m", "tools": [WEATHER_TOOL, {"type": "web_search", "x": 1},
                                    {"type": "tool_search", "execution": "server"}]}
    req = parse_create_request(body, hosted_tools="omit")
    assert [t["type"] for t in req.echo()["tools"]] == ["function"]
    assert [t["function"]["name"] for t in chat_of(body)["tools"]] == ["get_weather"]
    with pytest.raises(GatewayError) as info:
        parse_create_request(body, hosted_tools="reject")
    assert (info.value.status, info.value.param) == (400, "tools[1].type")
    with pytest.raises(GatewayError) as info:  # a type nobody knows is a 400 either way
        parse_create_request({"model": "m", "tools": [{"type": "teleport"}]},
                             hosted_tools="omit")
    assert info.value.param == "tools[0].type"


def test_mcp_tools_are_accepted_and_connectors_are_a_clear_400() -> None:
    tool = {"type": "mcp", "server_label": "docs", "server_url": "https://example.com/mcp"}
    req = parse_create_request({"model": "m", "tools": [WEATHER_TOOL, tool]}, hosted_tools="omit")
    assert [t.type for t in req.tools] == ["function", "mcp"]  # run by tools/mcp/
    with pytest.raises(GatewayError) as info:
        parse_create_request({"model": "m", "tools": [{**tool, "connector_id": "x"}]})
    assert info.value.param == "tools[0].connector_id"
    with pytest.raises(GatewayError) as info:
        parse_create_request({"model": "m", "tools": [{**tool, "server_url": "ftp://x/y"}]})
    assert (info.value.status, info.value.param) == (400, "tools[0].server_url")


# -- end to end -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("tools-custom") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


@pytest.mark.parametrize("stream", [True, False])
def test_openai_python_custom_tool_round_trip(client: OpenAI, upstream: ScriptedUpstream,
                                              stream: bool) -> None:
    args = json.dumps({"input": "*** Begin Patch\n*** End Patch\n"})
    marker = f"custom-e2e-{stream}"
    tools: list[Any] = [APPLY_PATCH, AGENTS, {"type": "web_search"}]
    first = client.responses.create(
        model="m", tools=tools, stream=stream,
        input=f"{marker} [[script:tool name=apply_patch args='{args}']]")
    if stream:
        events = sdk_events(first)
        for event in events:
            sdk_validate_event(event)
        assert "response.custom_tool_call_input.delta" in [e["type"] for e in events]
        response = events[-1]["response"]
    else:
        response = first.to_dict(mode="json")
    sdk_validate_response(response)
    [call] = response["output"]
    assert call["type"] == "custom_tool_call" and call["input"] == json.loads(args)["input"]
    assert [t["type"] for t in response["tools"]] == ["custom", "namespace"]

    second = client.responses.create(model="m", tools=tools, previous_response_id=response["id"],
                                     input=[{"type": "custom_tool_call_output",
                                             "call_id": call["call_id"], "output": "patched"}])
    sdk_validate_response(second.to_dict(mode="json"))  # the Open Responses spec has no custom
    assert second.output_text == "Tool output: patched"
    sent = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    assert sent["messages"][-2]["tool_calls"][0]["function"]["name"] == "apply_patch"
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "apply_patch", "multi_agent_v1__close_agent", "multi_agent_v1__note"]


def test_openai_python_namespace_call_streams_with_its_namespace(client: OpenAI) -> None:
    events = sdk_events(client.responses.create(
        model="m", tools=[AGENTS], stream=True,
        input="ns-e2e [[script:tool name=multi_agent_v1__close_agent args='{\"target\": \"a\"}']]"))
    for event in events:
        sdk_validate_event(event)
    check_grammar(events)
    [call] = events[-1]["response"]["output"]
    assert (call["name"], call["namespace"]) == ("close_agent", "multi_agent_v1")


# -- Bedrock --------------------------------------------------------------------------------


@pytest.mark.slow
def test_bedrock_namespace_and_custom_calls(tmp_path: Path) -> None:
    from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
    from tests.test_e2e_bedrock import NOVA, bedrock_settings, converse_stream, tool

    long_ns = {**AGENTS, "name": "namespace_" + "x" * 54}
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as fake, GatewayServer(
            bedrock_settings(fake, tmp_path / "g.db")
        ) as server, OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            probe = ToolCatalog()
            chat_of({"model": "m", "tools": [long_ns, APPLY_PATCH]}, probe)
            [flat] = [c for c, s in probe.specs.items() if s.name == "close_agent"]
            fake.stream(NOVA, converse_stream(
                tool("tooluse_a", flat, '{"target": "a"}'),
                tool("tooluse_b", "apply_patch", '{"input": "P"}'), stop="tool_use"))
            events = sdk_events(client.responses.create(
                model=NOVA, input="go", tools=[long_ns, APPLY_PATCH], stream=True))
            for event in events:
                sdk_validate_event(event)
            function, custom = events[-1]["response"]["output"]
            assert (function["name"], function["namespace"]) == ("close_agent", long_ns["name"])
            assert (custom["type"], custom["input"]) == ("custom_tool_call", "P")
            [sent] = fake.requests
            names = [t["toolSpec"]["name"] for t in sent.body["toolConfig"]["tools"]]
            assert flat in names and all(BEDROCK_NAME.fullmatch(n) for n in names)

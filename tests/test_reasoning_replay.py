"""Which earlier reasoning goes back to the model (``reasoning.context``, openai-python 3.57)
and what the other 3.57 request fields do to a request: unit tests beside the end-to-end ones
in test_openai_357_fields.py."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from responses_gateway.errors import GatewayError
from responses_gateway.responses.configuration import apply_updates
from responses_gateway.translate import reasoning_context
from responses_gateway.translate.request_models import normalize_input, parse_create_request
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.to_chat import to_chat_request


def reasoning(text: str, rid: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": rid, "summary": [{"type": "summary_text", "text": text}]}


#: Two user turns; the second is a tool loop (its reasoning comes after the last user message).
TWO_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "first question"},
    reasoning("EARLIER", "rs_earlier"),
    {"role": "assistant", "content": "first answer"},
    {"role": "user", "content": "second question"},
    reasoning("CURRENT", "rs_current"),
    {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "42"},
]
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}


def replayed(context: str | None, reasoning_input: str | None = "reasoning_content"
             ) -> list[str]:
    body: dict[str, Any] = {"model": "m", "input": TWO_TURNS, "tools": [TOOL]}
    if context is not None:
        body["reasoning"] = {"context": context}
    req = parse_create_request(body)
    chat = to_chat_request(req, normalize_input(req), model="up",
                           reasoning_input=reasoning_input)
    return [m["reasoning_content"] for m in chat["messages"] if "reasoning_content" in m]


def test_current_turn_replays_only_the_reasoning_after_the_last_user_message() -> None:
    assert replayed("current_turn") == ["CURRENT"]


@pytest.mark.parametrize("context", ["all_turns", "auto", None])
def test_all_turns_and_auto_replay_every_reasoning_item(context: str | None) -> None:
    assert replayed(context) == ["EARLIER", "CURRENT"]


def test_a_backend_that_takes_no_reasoning_gets_none() -> None:
    assert replayed("all_turns", reasoning_input=None) == []


@pytest.mark.parametrize(("requested", "reasoning_input", "want"), [
    ("auto", "reasoning_content", "all_turns"),
    (None, "reasoning", "all_turns"),
    ("auto", None, "current_turn"),
    ("current_turn", "reasoning_content", "current_turn"),
    ("all_turns", None, "all_turns"),
])
def test_auto_resolves_to_what_is_done(requested: str | None, reasoning_input: str | None,
                                       want: str) -> None:
    assert reasoning_context.effective(requested, reasoning_input) == want


def test_turn_boundary_is_the_last_user_message_not_a_tool_output() -> None:
    items = normalize_input(parse_create_request({"model": "m", "input": TWO_TURNS}))
    assert reasoning_context.replay_from(items, "current_turn") == 3
    assert reasoning_context.replay_from(items, "all_turns") == 0
    assert reasoning_context.replay_from(items[4:], "current_turn") == 0  # no user message
    assert reasoning_context.withheld(items, "current_turn") == [
        {"id": "rs_earlier", "type": "reasoning", "action": "removed",
         "reason": "turn_boundary"}]
    assert reasoning_context.withheld(items, "all_turns") == []


def echoed(body: dict[str, Any], reasoning_input: str | None = None) -> Response:
    req = parse_create_request({"model": "m", "input": "x", **body})
    echo = req.echo(reasoning_input)
    return Response.model_validate(new_response(echo, response_id="resp_1", created_at=1),
                                   strict=True)


def test_echo_carries_the_effective_context_and_mode() -> None:
    response = echoed({"reasoning": {"context": "auto", "mode": "standard", "effort": "low"}},
                      "reasoning_content")
    assert response.reasoning is not None
    assert (response.reasoning.context, response.reasoning.mode) == ("all_turns", "standard")
    assert response.reasoning.effort == "low"
    plain = echoed({})
    assert plain.reasoning is not None and plain.reasoning.context is None  # as OpenAI echoed


def refused(body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        parse_create_request({"model": "m", "input": "x", **body})
    return caught.value


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"reasoning": {"mode": "pro"}}, 400, "reasoning.mode"),
    ({"reasoning": {"context": "some_turns"}}, 400, "reasoning.context"),
    ({"background_options": {"completion_window": "2h"}}, 400,
     "background_options.completion_window"),
    ({"background": True, "stream": True, "background_options": {"completion_window": "8h"}},
     400, "background_options.completion_window"),
    ({"background": True, "service_tier": "flex",
      "background_options": {"completion_window": "2h"}}, 400,
     "background_options.completion_window"),
    ({"background_options": {"completion_window": "1h"}}, 400,
     "background_options.completion_window"),
    ({"background_options": {"continuation_id": 7}}, 400, "background_options.continuation_id"),
    ({"access_programs": {"cyber": "daybreak_red"}}, 403, "access_programs.cyber"),
    ({"image": {"context_compression": "enabled"}}, 400, "image.context_compression"),
    ({"moderation": {"model": "omni-moderation-latest"}}, 400, "moderation"),
    ({"input": [{"type": "configuration_update", "reasoning": {"summary": "auto"}}]}, 400,
     "input[0].reasoning.summary"),
    ({"input": [{"type": "configuration_update", "text": {"format": {"type": "json_object"}}}]},
     400, "input[0].text.format.type"),
    ({"tools": [{**TOOL, "allowed_callers": ["nobody"]}]}, 400, "tools[0].allowed_callers[0]"),
])
def test_what_the_gateway_cannot_follow_is_openais_error(body: dict[str, Any], status: int,
                                                          param: str) -> None:
    error = refused(body)
    assert (error.status, error.param) == (status, param), error.message
    if status == 403:
        assert error.type == "permission_error"


@pytest.mark.parametrize("body", [
    {"background": True, "background_options": {"completion_window": "2h",
                                                "continuation_id": "batch-7"}},
    {"background_options": {"completion_window": "soonest"}, "stream": True},
    {"access_programs": {"cyber": "standard"}},
    {"image": {"context_compression": "disabled"}},
    {"reasoning": {"mode": "standard", "context": "current_turn"}},
])
def test_what_the_gateway_can_follow_is_accepted(body: dict[str, Any]) -> None:
    echoed(body)


def test_access_programs_and_image_are_echoed_when_sent() -> None:
    response = echoed({"access_programs": {"cyber": "standard"},
                       "image": {"context_compression": "auto"}})
    assert response.access_programs is not None and response.access_programs.cyber == "standard"
    assert response.image is not None and response.image.context_compression == "disabled"
    assert echoed({}).access_programs is None


def test_function_tool_fields_are_echoed_as_sent() -> None:
    tool = {**TOOL, "async": True, "output_schema": {"type": "object"},
            "allowed_callers": ["programmatic"], "defer_loading": False}
    response = echoed({"tools": [tool]})
    echoed_tool = response.tools[0].model_dump(by_alias=True, exclude_none=True)
    assert {k: echoed_tool[k] for k in ("async", "output_schema", "allowed_callers",
                                        "defer_loading")} == {
        "async": True, "output_schema": {"type": "object"},
        "allowed_callers": ["programmatic"], "defer_loading": False}
    bare = echoed({"tools": [TOOL]}).tools[0].model_dump(by_alias=True)
    assert bare["async"] is None and bare["allowed_callers"] is None


def test_the_newest_configuration_update_wins_over_the_request() -> None:
    schema = {"type": "json_schema", "name": "answer", "schema": {"type": "object"},
              "strict": True}
    req = parse_create_request({"model": "m", "reasoning": {"effort": "low"},
                                "text": {"verbosity": "low"}, "input": [
        {"type": "configuration_update", "reasoning": {"effort": "high"}},
        {"role": "user", "content": "x"},
        {"type": "configuration_update", "text": {"format": schema}},
    ]})
    items = normalize_input(req)
    assert items[0]["id"].startswith("cfg_") and items[0]["type"] == "configuration_update"
    earlier = [{"type": "configuration_update", "id": "cfg_0", "reasoning": {"effort": "none"}}]
    apply_updates(req, earlier + items)
    assert req.effort == "high"
    chat = to_chat_request(req, items, model="up")
    assert chat["reasoning_effort"] == "high"
    assert chat["response_format"]["type"] == "json_schema"
    assert chat["verbosity"] == "low"  # not a setting an update carries
    assert [m["role"] for m in chat["messages"]] == ["user"]  # the updates are not messages
    echo = req.echo()
    assert echo["text"]["format"]["name"] == "answer"
    assert echo["reasoning"]["effort"] == "high"


def test_an_earlier_update_holds_until_replaced() -> None:
    req = parse_create_request({"model": "m", "input": "y", "reasoning": {"effort": "low"}})
    earlier = [{"type": "configuration_update", "id": "cfg_0", "reasoning": {"effort": "xhigh"}},
               {"type": "message", "role": "user", "content": "x"}]
    apply_updates(req, earlier + normalize_input(req))
    assert req.effort == "xhigh"

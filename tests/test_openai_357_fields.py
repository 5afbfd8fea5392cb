"""openai-python 3.57's request fields (issue 43), end to end: the unmodified ``openai``
client against the gateway under uvicorn, in front of the scripted Chat Completions upstream
and of a fake Bedrock runtime (every Converse request checked against botocore's model);
every Response and event validated against the SDK's types (tests/helpers/e2e.py).

- ``reasoning.context`` decides which earlier reasoning goes back upstream, echoed resolved;
- ``reasoning.mode``, ``background_options``, ``access_programs``, ``image``: followed where
  a gateway can, OpenAI's error naming the parameter where it cannot;
- ``configuration_update`` input items: kept in ``input_items``, applied to what follows;
- function tools' ``async``, ``output_schema``, ``allowed_callers``, ``defer_loading`` echoed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import BadRequestError, OpenAI, PermissionDeniedError
from openai.types.responses import ResponseConfigurationUpdateItem

from tests.helpers.converse_strict import assert_valid_converse
from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_e2e_bedrock import (
    CLAUDE,
    bedrock_settings,
    converse_json,
    signed,
)

THOUGHT = "THOUGHT-ONE"
REASONER = f"script/reasoning reasoning={THOUGHT} text=first-answer"


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("openai-357") / "gateway.db"
    # reasoning_content: earlier reasoning can go back upstream, so what goes back is visible.
    with GatewayServer(e2e_settings(upstream, db, reasoning_input="reasoning_content")) as s:
        yield s


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(gateway) as c:
        yield c


def last_request(upstream: ScriptedUpstream) -> dict[str, Any]:
    return upstream.requests[-1]


def replayed(request: dict[str, Any]) -> list[str]:
    return [m["reasoning_content"] for m in request["messages"] if m.get("reasoning_content")]


# -- reasoning.context ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_context_decides_what_goes_back_upstream(
        client: OpenAI, upstream: ScriptedUpstream, stream: bool) -> None:
    first = client.responses.create(model=REASONER, input="First question?")
    check_response(first)
    [reasoning_item] = [i for i in first.output if i.type == "reasoning"]

    def second(context: str | None) -> dict[str, Any]:
        upstream.reset()
        extra = {} if context is None else {"reasoning": {"context": context}}
        kwargs: dict[str, Any] = {"model": "script/text text=second", "input": "And then?",
                                  "previous_response_id": first.id, **extra}
        if stream:
            events = sdk_events(client.responses.create(stream=True, **kwargs))
            response = check_stream(events).terminal["response"]
            assert events[0]["response"]["reasoning"] == response["reasoning"]
        else:
            response = check_response(client.responses.create(**kwargs))
        return response

    current = second("current_turn")
    assert replayed(last_request(upstream)) == []  # the earlier turn's reasoning stays back
    assert current["reasoning"]["context"] == "current_turn"
    assert current["input_transformations"] == [
        {"id": reasoning_item.id, "type": "reasoning", "action": "removed",
         "reason": "turn_boundary"}]

    every = second("all_turns")
    assert replayed(last_request(upstream)) == [THOUGHT]
    assert every["reasoning"]["context"] == "all_turns"
    assert "input_transformations" not in every or every["input_transformations"] == []

    auto = second("auto")  # resolved to what was done: this backend takes reasoning back
    assert replayed(last_request(upstream)) == [THOUGHT]
    assert auto["reasoning"]["context"] == "all_turns"

    omitted = second(None)  # as before 3.57: everything back, nothing new in the echo
    assert replayed(last_request(upstream)) == [THOUGHT]
    assert "context" not in omitted["reasoning"]
    stored = client.responses.retrieve(current["id"])
    assert stored.reasoning is not None and stored.reasoning.context == "current_turn"


def test_current_turn_keeps_the_reasoning_of_a_tool_loop(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    items = [
        {"role": "user", "content": "Old question"},
        {"type": "reasoning", "id": "rs_old", "summary": [
            {"type": "summary_text", "text": "OLD-THOUGHT"}]},
        {"role": "assistant", "content": "Old answer"},
        {"role": "user", "content": "Call the tool"},
        {"type": "reasoning", "id": "rs_new", "summary": [
            {"type": "summary_text", "text": "NEW-THOUGHT"}]},
        {"type": "function_call", "call_id": "call_a", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "found"},
    ]
    response = client.responses.create(
        model="script/text text=done", input=items, store=False,
        tools=[{"type": "function", "name": "lookup",
                "parameters": {"type": "object", "properties": {}}}],
        reasoning={"context": "current_turn"})
    check_response(response)
    assert replayed(last_request(upstream)) == ["NEW-THOUGHT"]
    assert [t.id for t in response.input_transformations or ()] == ["rs_old"]


def test_reasoning_mode_standard_runs_and_pro_is_refused(client: OpenAI) -> None:
    response = client.responses.create(model="script/text", input="x",
                                       reasoning={"mode": "standard", "effort": "low"})
    check_response(response)
    assert response.reasoning is not None and response.reasoning.mode == "standard"
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model="script/text", input="x", reasoning={"mode": "pro"})
    assert refused.value.body["param"] == "reasoning.mode"  # type: ignore[index]


# -- configuration_update -------------------------------------------------------------------


def test_configuration_updates_apply_to_what_follows(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    first = client.responses.create(
        model="script/text text=one", reasoning={"effort": "low"},
        input=[{"role": "user", "content": "Start"},
               {"type": "configuration_update", "reasoning": {"effort": "high"}}])
    check_response(first)
    assert last_request(upstream)["reasoning_effort"] == "high"
    assert first.reasoning is not None and first.reasoning.effort == "high"
    listed = client.responses.input_items.list(first.id, order="asc")
    update = listed.data[1]
    assert isinstance(update, ResponseConfigurationUpdateItem)
    assert update.id.startswith("cfg_") and update.reasoning is not None
    assert update.reasoning.effort == "high"
    ResponseConfigurationUpdateItem.model_validate(update.model_dump(), strict=True)
    assert "configuration_update" not in json.dumps(last_request(upstream)["messages"])

    # The request keeps its base effort (OpenAI's advice); the stored update still holds.
    second = client.responses.create(model="script/text text=two", reasoning={"effort": "low"},
                                     previous_response_id=first.id, input="Go on")
    check_response(second)
    assert last_request(upstream)["reasoning_effort"] == "high"

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    with client.responses.create(
            model="script/text text=three", previous_response_id=second.id, stream=True,
            input=[{"type": "configuration_update", "reasoning": {"effort": "medium"},
                    "text": {"format": {"type": "json_schema", "name": "count",
                                        "description": "A count.", "schema": schema,
                                        "strict": True}}},
                   {"role": "user", "content": "Count"}]) as stream:
        events = sdk_events(stream)
    # SDK types only: the Open Responses spec types a json_schema format's schema as null.
    for event in events:
        sdk_validate_event(event)
    final = events[-1]["response"]
    sdk_validate_response(final)
    sent = last_request(upstream)
    assert sent["reasoning_effort"] == "medium"
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "count", "schema": schema, "description": "A count.", "strict": True}}
    assert final["text"]["format"]["name"] == "count"
    assert final["reasoning"]["effort"] == "medium"


def test_a_configuration_update_in_a_conversation_holds_for_its_responses(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "Hello"}])
    client.conversations.items.create(conversation.id, items=[
        {"type": "configuration_update", "reasoning": {"effort": "low"}}])
    upstream.reset()
    response = client.responses.create(model="script/text", input="Go",
                                       conversation=conversation.id)
    check_response(response)
    assert last_request(upstream)["reasoning_effort"] == "low"
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items][:2] == ["message", "configuration_update"]
    assert isinstance(items[1], ResponseConfigurationUpdateItem)


def test_a_configuration_update_with_more_than_it_may_set_is_refused(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model="script/text", input=[
            {"role": "user", "content": "x"},
            {"type": "configuration_update", "reasoning": {"summary": "auto"}}])
    assert refused.value.body["param"] == "input[1].reasoning.summary"  # type: ignore[index]


# -- options the gateway follows in part ------------------------------------------------------


def test_background_options(client: OpenAI) -> None:
    response = client.responses.create(
        model="script/text text=later", input="x", background=True,
        background_options={"completion_window": "2h", "continuation_id": "nightly-7"})
    assert response.status in ("queued", "in_progress", "completed")
    for refused_kwargs in (
            {"background_options": {"completion_window": "8h"}},  # not background
            {"background": True, "stream": True,
             "background_options": {"completion_window": "2h"}},
            {"background": True, "service_tier": "priority",
             "background_options": {"completion_window": "2h"}}):
        with pytest.raises(BadRequestError) as refused:
            client.responses.create(model="script/text", input="x", **refused_kwargs)
        assert refused.value.body["param"] == (  # type: ignore[index]
            "background_options.completion_window")


def test_access_programs_image_and_moderation(client: OpenAI) -> None:
    response = client.responses.create(
        model="script/text", input="x", access_programs={"cyber": "standard"},
        image={"context_compression": "auto"})
    check_response(response)
    assert response.access_programs is not None and response.access_programs.cyber == "standard"
    assert response.image is not None and response.image.context_compression == "disabled"
    with pytest.raises(PermissionDeniedError) as denied:
        client.responses.create(model="script/text", input="x",
                                access_programs={"cyber": "daybreak_blue"})
    assert denied.value.status_code == 403
    assert denied.value.body["param"] == "access_programs.cyber"  # type: ignore[index]
    for kwargs, param in (({"image": {"context_compression": "enabled"}},
                           "image.context_compression"),
                          ({"moderation": {"model": "omni-moderation-latest"}}, "moderation")):
        with pytest.raises(BadRequestError) as refused:
            client.responses.create(model="script/text", input="x", **kwargs)
        assert refused.value.body["param"] == param  # type: ignore[index]


def test_function_tool_fields_are_echoed_as_sent(client: OpenAI) -> None:
    tool = {"type": "function", "name": "lookup", "description": "Look it up.",
            "parameters": {"type": "object", "properties": {}}, "async": True,
            "output_schema": {"type": "object", "properties": {"hit": {"type": "boolean"}}},
            "allowed_callers": ["direct", "programmatic"], "defer_loading": False}
    with client.responses.create(model="script/text", input="x", tools=[tool],
                                 stream=True) as stream:
        final = check_stream(sdk_events(stream)).terminal["response"]
    echoed = final["tools"][0]
    assert {k: echoed[k] for k in ("async", "output_schema", "allowed_callers",
                                   "defer_loading")} == {
        k: tool[k] for k in ("async", "output_schema", "allowed_callers", "defer_loading")}


# -- Bedrock: reasoning replay on the strict Converse endpoint --------------------------------


@pytest.fixture(scope="module")
def fake_bedrock() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


@pytest.fixture(scope="module")
def bedrock_client(fake_bedrock: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[OpenAI]:
    db = tmp_path_factory.mktemp("openai-357-bedrock") / "gateway.db"
    with GatewayServer(bedrock_settings(fake_bedrock, db)) as server, \
            client_for(server) as c:
        yield c


def test_bedrock_replays_signed_reasoning_as_the_context_says(
        bedrock_client: OpenAI, fake_bedrock: FakeBedrock) -> None:
    fake_bedrock.json(CLAUDE, converse_json(signed("Earlier thinking.", "sig-1"),
                                            {"text": "First."}))
    question = {"role": "user", "content": "First?"}
    first = bedrock_client.responses.create(
        model=CLAUDE, input=[question], store=False, reasoning={"effort": "medium"},
        include=["reasoning.encrypted_content"])
    check_response(first)
    output = [{k: v for k, v in item.model_dump().items() if v is not None}
              for item in first.output]
    assert [i["type"] for i in output] == ["reasoning", "message"]

    def assistant_turn(context: str) -> list[dict[str, Any]]:
        with fake_bedrock.lock:
            fake_bedrock.requests.clear()
        fake_bedrock.json(CLAUDE, converse_json({"text": "Second."}))
        response = bedrock_client.responses.create(
            model=CLAUDE, store=False, reasoning={"effort": "medium", "context": context},
            input=[question, *output, {"role": "user", "content": "Second?"}])
        check_response(response)
        assert response.reasoning is not None and response.reasoning.context == context
        [sent] = fake_bedrock.requests
        assert_valid_converse(sent.body, sent.operation)
        [turn] = [m for m in sent.body["messages"] if m["role"] == "assistant"]
        return list(turn["content"])

    assert assistant_turn("all_turns") == [signed("Earlier thinking.", "sig-1"),
                                           {"text": "First."}]
    assert assistant_turn("current_turn") == [{"text": "First."}]

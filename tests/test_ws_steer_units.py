"""Unit tests of WebSocket steering's parts: a steer's checks, the ``required_input`` stubs,
the events (validated against openai-python's types), the translator's safe point."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest
from openai.types.responses import Response
from openai.types.responses.response_steer_required_input import ResponseSteerRequiredInput
from openai.types.responses.responses_server_event import ResponsesServerEvent

from responses_gateway.api import ws_steer
from responses_gateway.api.ws_session import Create, Session
from responses_gateway.config import Settings
from responses_gateway.responses.steering import Steer, Steering, input_items
from responses_gateway.translate.stream import ResponseTranslator

SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponsesServerEvent)
STUB: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseSteerRequiredInput)


@pytest.mark.parametrize("event", [
    {"input": "go left"},
    {"input": [{"role": "user", "content": "x"}]},
    {"input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "x"},
                            {"type": "input_image", "image_url": "https://x/y.png"}]}]},
])
def test_valid_steers(event: dict[str, Any]) -> None:
    assert ws_steer.check({"type": "response.steer", "previous_response_id": "resp_1",
                           **event}) is None


@pytest.mark.parametrize("event", [
    {"input": ""},
    {"input": []},
    {"input": [{"role": "system", "content": "x"}]},
    {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
    {"input": [{"role": "user", "content": "x", "id": "msg_1"}]},
    {"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
    {"input": "x", "stream_id": "a"},
    {"input": "x", "previous_response_id": 3},
])
def test_invalid_steers_are_failed_events_the_sdk_reads(event: dict[str, Any]) -> None:
    failed = ws_steer.check({"type": "response.steer", "previous_response_id": "resp_1",
                             **event})
    assert failed is not None and failed["error"]["code"] == "invalid_input"
    SERVER_EVENT.validate_python(failed)


def test_required_input_stubs_what_the_client_owes() -> None:
    output = [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "x"},
        {"type": "shell_call", "call_id": "c3"},
        {"type": "shell_call_output", "call_id": "c3"},  # the gateway ran it: nothing owed
        {"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "server_label": "s",
         "arguments": "{}"},
        {"type": "tool_search_call", "call_id": "c4", "execution": "client"},
        {"type": "message", "role": "assistant", "content": []},
    ]
    stubs = ws_steer.required_input(output)
    assert stubs == [
        {"type": "function_call_output", "call_id": "c1", "name": "f"},
        {"type": "custom_tool_call_output", "call_id": "c2"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1"},
        {"type": "tool_search_output", "call_id": "c4", "execution": "client"},
    ]
    for stub in stubs:
        STUB.validate_python(stub)
    steer = Steer("steer_1", "resp_1", "x")
    pending = dict(ws_steer.pending(steer, stubs), sequence_number=9)
    SERVER_EVENT.validate_python(pending)


def test_refusals_carry_the_input_back() -> None:
    for event in (ws_steer.not_running("resp_1", "x", None),
                  ws_steer.not_running("resp_1", "x", "completed", "lane"),
                  ws_steer.not_running("resp_1", "x", "failed"),
                  ws_steer.not_supported("resp_1", "x", None),
                  ws_steer.too_many("resp_1", "x", 2, None),
                  ws_steer.failed("successor_creation_failed", "no", Steer("steer_1", "resp_1",
                                                                           "x"))):
        SERVER_EVENT.validate_python(event)
        assert event["steer"]["input"] == "x"
    assert ws_steer.not_running("resp_1", "x", "completed", "lane")["stream_id"] == "lane"


def test_successor_inherits_settings_not_input() -> None:
    template = ws_steer.settings_of({"model": "m", "instructions": "i", "input": "old",
                                     "previous_response_id": "resp_0", "stream": True,
                                     "tools": [{"type": "function", "name": "f"}]})
    steers = [Steer("steer_1", "resp_1", "a"),
              Steer("steer_2", "resp_1", [{"role": "user", "content": "b"}])]
    body = ws_steer.successor_body(template, "resp_1", steers)
    assert body == {"model": "m", "instructions": "i", "stream": True,
                    "tools": [{"type": "function", "name": "f"}],
                    "previous_response_id": "resp_1",
                    "input": [{"type": "message", "role": "user", "content": "a"},
                              {"role": "user", "content": "b"}]}
    assert input_items("a") == [{"type": "message", "role": "user", "content": "a"}]


def _translator() -> ResponseTranslator:
    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress",
                "model": "m", "output": [], "error": None, "incomplete_details": None,
                "instructions": None, "metadata": {}, "parallel_tool_calls": True,
                "temperature": None, "tool_choice": "auto", "tools": [], "top_p": None}
    translator = ResponseTranslator(response)
    translator.start()
    return translator


def test_a_translator_steers_only_between_items_it_can_close() -> None:
    translator = _translator()
    translator.feed({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})
    assert translator.steerable
    steering = Steering()
    steering.add(Steer("steer_1", "resp_1", "x"))
    [accepted] = steering.acknowledge(translator)
    assert accepted["sequence_number"] == 5 and steering.acknowledge(translator) == []
    events = translator.steered()
    assert [e["type"] for e in events] == [
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.incomplete"]
    response = events[-1]["response"]
    assert Response.model_validate(response).incomplete_details.reason == "steered"
    assert response["incomplete_details"] == {"reason": "steered"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["output"][0]["content"][0]["text"] == "Hel"

    calling = _translator()
    calling.feed({"choices": [{"index": 0, "delta": {"tool_calls": [{
        "index": 0, "id": "call_1", "type": "function",
        "function": {"name": "f", "arguments": "{"}}]}}]})
    assert not calling.steerable, "a call's arguments are streaming"


def test_a_steer_after_the_last_safe_point_still_gets_its_successor() -> None:
    """A response that completed before it reached a safe point (the steer came during its
    last read) is followed by its successor all the same (OpenAI: "Normal completion can
    also be followed by an automatic successor"); the late ``accepted`` follows its terminal
    event in its numbering."""
    translator = _translator()
    translator.feed({"choices": [{"index": 0, "delta": {"content": "Done."},
                                  "finish_reason": "stop"}]})
    [*_, completed] = translator.finish()
    steering = Steering()
    steering.steers.append(Steer("steer_1", "resp_1", "and then?"))
    job = SimpleNamespace(translator=translator, steering=steering,
                          response=translator.response, record=SimpleNamespace(id="resp_1"))
    emitted: list[dict[str, Any]] = []

    async def emit(events: list[dict[str, Any]]) -> None:
        emitted.extend(events)

    session = Session(SimpleNamespace(settings=Settings()), "t", emit)  # type: ignore[arg-type]
    template = ws_steer.settings_of({"model": "m", "input": "x", "stream": True})
    successor = asyncio.run(session._after_steers(
        job, Create({}, "lane", True), template, steering.steers))  # type: ignore[arg-type]
    [accepted] = emitted
    assert accepted["type"] == "response.steer.accepted" and accepted["stream_id"] == "lane"
    assert accepted["sequence_number"] == completed["sequence_number"] + 1
    SERVER_EVENT.validate_python(accepted)
    assert successor is not None and successor.successor and successor.lane == "lane"
    assert successor.body == {"model": "m", "stream": True, "previous_response_id": "resp_1",
                              "input": [{"type": "message", "role": "user",
                                         "content": "and then?"}]}

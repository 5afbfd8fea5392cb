"""The Open Responses compliance suite's HTTP tests, reproduced (its WebSocket tests are in
tests/test_websocket.py).

Each test sends the suite's own request body to the gateway over plain HTTP, as the suite's
runner does (``fetch`` with a bearer key; ``stream: true`` added for the streaming test), then
applies the suite's checks: the status it expects, the answer against the Open Responses
document's schema (``ResponseResource``, ``CompactResource``; tests/fixtures/spec), and its
validators (``hasOutput``, ``completedStatus``, ``hasOutputType``, ``compactObject``,
``streamingEvents``, ``streamingSchema``). The suite's model is a setting of its runner; here it
is the scripted upstream's ``facts`` agent, which calls a tool when offered one and otherwise
answers with text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers.e2e import e2e_settings, stream_raw
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import _validator, validate_event
from tests.helpers.scripted_upstream import ScriptedUpstream

MODEL = "script/facts total=1"
KEY = "compliance-key"
RED_HEART_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAIAAAD8GO2jAAABmklEQVR42tyWAaTyUBzF"
    "e w/eG4AHz+MBSAHKBiJRGFKwIgQQJKLUIioBIhCAiCAAEizAQIAECaASqFFJq84nudjnaqvuPnxzgP9xfrq5938c"
    "sPn7PwHTKSoViCIEAYEAMhmoKsU2mUCWEQqB5xEMIp/HaGQG2G6RSuH9HQ7H34rFrtPbdz4jl6PbwmEsl3QA1mt4"
    "vcRKk8dz9eg6IpF7tt9fzGY0gCgafFRFo5Blc5vLhf3eCOj1yNhM5GRMVK0aATxPZoz09YXjkQDmczJgquGQAPp9"
    "WwCNBgG027YACgUC6HRsAZRKBDAY2AJoNv/ZnwzA6WScznG3p4UAymXGAEkyXrTFAh8fLAGqagQAyGaZpYsi7bHT"
    "NPz8MEj//LxuFPo+UBS8vb0KaLXubrRa7aX0RMLCykwmn0z3+XA4WACcTpCkh9MFAZpmuVXo+mO/w+/HZvNgbblc"
    "UCyaSo/Haenc0Ys6XXDcvfVZr79cvMZjuN2U9O9vKAqjZrfbIZ0mV4TUi9Xqz6jddNy//7+e3n8Fhf/Llo2kxi8A"
    "QyGRoDkmAhAAAAAASUVORK5CYII="
).replace(" ", "")


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("compliance") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, api_keys=(KEY,))) as server:
        yield server


def post(gateway: GatewayServer, endpoint: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.base_url + endpoint, json=body, timeout=30,
                      headers={"Authorization": f"Bearer {KEY}"})


def schema_errors(schema: str, data: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in _validator(schema).iter_errors(data)]


def check(answer: dict[str, Any], schema: str, *validators: Any) -> None:
    errors = schema_errors(schema, answer)
    for validator in validators:
        errors += validator(answer)
    assert not errors, errors


def has_output(response: dict[str, Any]) -> list[str]:
    return [] if response.get("output") else ["Response has no output items"]


def completed_status(response: dict[str, Any]) -> list[str]:
    status = response.get("status")
    return [] if status == "completed" else [f'Expected status "completed" but got "{status}"']


def has_output_type(kind: str) -> Any:
    def validator(response: dict[str, Any]) -> list[str]:
        found = any(item.get("type") == kind for item in response.get("output") or ())
        return [] if found else [f'Expected output item of type "{kind}" but none found']
    return validator


def compact_object(response: dict[str, Any]) -> list[str]:
    kind = response.get("object")
    return [] if kind == "response.compaction" else [f"Expected response.compaction: {kind}"]


def message(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content, **extra}


def test_basic_response(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses", {"model": MODEL, "input": [
        message("user", "Say hello in exactly 3 words.")]})
    assert answer.status_code == 200, answer.text
    check(answer.json(), "ResponseResource", has_output, completed_status)


def test_assistant_phase(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses", {"model": MODEL, "input": [
        message("assistant", "I should answer with the saved number.", phase="commentary"),
        message("assistant", "The number is four.", phase="final_answer"),
        message("user", "Repeat only the number."),
    ]})
    assert answer.status_code == 200, answer.text
    check(answer.json(), "ResponseResource", has_output, completed_status)


def test_response_output_phase_schema() -> None:
    # The suite's local fixture: no request is sent; the schema must accept phase labels.
    fixture = {
        "id": "resp_phase_schema", "object": "response", "created_at": 1764967971,
        "completed_at": 1764967972, "status": "completed", "incomplete_details": None,
        "model": MODEL, "previous_response_id": None, "instructions": None,
        "output": [
            {"id": "msg_phase_commentary", "type": "message", "status": "completed",
             "role": "assistant", "phase": "commentary",
             "content": [{"type": "output_text", "text": "I am checking the answer.",
                          "annotations": []}]},
            {"id": "msg_phase_final", "type": "message", "status": "completed",
             "role": "assistant", "phase": "final_answer",
             "content": [{"type": "output_text", "text": "The answer is four.",
                          "annotations": []}]},
        ],
        "error": None, "tools": [], "tool_choice": "auto", "truncation": "disabled",
        "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1,
        "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0, "temperature": 1,
        "reasoning": {"effort": None, "summary": None},
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
        "max_output_tokens": None, "max_tool_calls": None, "store": True, "background": False,
        "service_tier": "default", "metadata": {}, "safety_identifier": None,
        "prompt_cache_key": None,
    }
    check(fixture, "ResponseResource", has_output, completed_status)


def test_streaming_response(gateway: GatewayServer) -> None:
    raw = stream_raw(gateway.base_url + "/responses",
                     {"model": MODEL, "input": [message("user", "Count from 1 to 5.")],
                      "stream": True},
                     headers={"Authorization": f"Bearer {KEY}"})
    assert raw.status == 200
    events = raw.events
    assert events, "No streaming events received"
    for event in events:
        validate_event(event)
    final = events[-1]["response"]
    check(final, "ResponseResource", completed_status)


def test_system_prompt(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses", {"model": MODEL, "input": [
        message("system", "You are a pirate. Always respond in pirate speak."),
        message("user", "Say hello."),
    ]})
    assert answer.status_code == 200, answer.text
    check(answer.json(), "ResponseResource", has_output, completed_status)


def test_tool_calling(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses", {
        "model": MODEL,
        "input": [message("user", "What's the weather like in San Francisco?")],
        "tools": [{"type": "function", "name": "get_weather",
                   "description": "Get the current weather for a location",
                   "parameters": {"type": "object", "properties": {"location": {
                       "type": "string",
                       "description": "The city and state, e.g. San Francisco, CA"}},
                       "required": ["location"]}}],
    })
    assert answer.status_code == 200, answer.text
    check(answer.json(), "ResponseResource", has_output, has_output_type("function_call"))


def test_image_input(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses", {"model": MODEL, "input": [message("user", [
        {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
        {"type": "input_image", "image_url": RED_HEART_PNG},
    ])]})
    assert answer.status_code == 200, answer.text
    check(answer.json(), "ResponseResource", has_output, completed_status)


def test_multi_turn(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses", {"model": MODEL, "input": [
        message("user", "My name is Alice."),
        message("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
        message("user", "What is my name?"),
    ]})
    assert answer.status_code == 200, answer.text
    check(answer.json(), "ResponseResource", has_output, completed_status)


def test_compact_response(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses/compact", {
        "model": MODEL,
        "prompt_cache_key": "openresponses-compact-test",
        "input": [
            message("user", "We agreed to launch on Tuesday and notify support first."),
            message("assistant",
                    "Understood. The launch is Tuesday, with support notified beforehand."),
        ],
    })
    assert answer.status_code == 200, answer.text
    check(answer.json(), "CompactResource", has_output, compact_object,
          has_output_type("compaction"))


def test_compact_missing_model(gateway: GatewayServer) -> None:
    answer = post(gateway, "/responses/compact", {"input": [
        message("user", "Compact this conversation.")]})
    assert answer.status_code in (400, 422), answer.text
    assert json.loads(answer.text)["error"]["param"] == "model"

"""The session's side of WebSocket steering (``response.steer``): checking a steer, the
events that answer it, what a response's steers become when it ends.

What OpenAI's types say (openai-python's ``ResponseSteerEvent`` and its answers), which this
follows: a steer takes only ``type``, ``previous_response_id`` and ``input`` (a string or user
messages); it is ``accepted`` when queued (the successor's ``response.created`` commits it);
the response stops at a safe output boundary ``incomplete`` with ``reason: "steered"`` and an
automatic successor inherits its settings and continues from it with the queued input (a
response that completes before a safe point is followed the same way). A response that stops
for the client's tool output keeps its steers queued, ``response.steer.pending`` after its
terminal event with the ``required_input`` stubs, and the client's next create from it gets
them prepended to its input. Responses bound to a conversation or using automatic compaction
cannot be steered. Failures: ``response.steer.failed`` with the input returned and one of
``invalid_input``, ``response_not_found``, ``steering_not_supported``,
``too_many_pending_steers`` (``GATEWAY_WS_MAX_PENDING_STEERS``), ``response_already_completed``,
``response_not_active``, ``successor_creation_failed``.

The running job's side (the safe points, ``accepted``) is responses/steering.py.
"""

from __future__ import annotations

from typing import Any

import orjson

from responses_gateway.errors import GatewayError
from responses_gateway.responses.steering import Steer, input_items
from responses_gateway.status import COMPLETED
from responses_gateway.tools import registry

Event = dict[str, Any]
#: a create's fields a successor does not inherit: its input and where it continues from
_NOT_INHERITED = frozenset({"input", "previous_response_id", "conversation"})


def check(event: dict[str, Any]) -> Event | None:
    """``response.steer.failed`` (``invalid_input``) for a malformed steer, or None."""
    reason = check_input(event)
    if reason is None:
        return None
    target = event.get("previous_response_id")
    return failed_event("invalid_input", reason, target if isinstance(target, str) else "",
                        _echo(event.get("input")))


def _echo(steer_input: Any) -> Any:
    """The input to return in a failed event: as sent when it has the shape OpenAI's event
    type allows there (a string, user messages, function call outputs), else ``""`` (the
    event must stay valid for the client's SDK to read it)."""
    if isinstance(steer_input, str):
        return steer_input
    if isinstance(steer_input, list) and all(
            isinstance(item, dict) and (
                (item.get("type") == "function_call_output" and "output" in item)
                or (item.get("role") == "user" and _user_content(item.get("content"))))
            for item in steer_input) and _valid_items(steer_input) is None:
        return [dict(item, type=item.get("type", "message")) for item in steer_input]
    return ""


def _user_content(content: Any) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and all(
        isinstance(part, dict)
        and part.get("type") in ("input_text", "input_image", "input_file")
        for part in content))


def failed(code: str, message: str, steer: Steer) -> Event:
    """A steer accepted earlier that cannot be committed: its input back, with its id."""
    return failed_event(code, message, steer.previous_response_id, steer.input, steer.id)


def not_running(target: str, steer_input: Any, status: str | None,
                lane: str | None = None) -> Event:
    """The target is not running here: ended (how), or unknown to this connection."""
    if status is None:
        return _with_lane(failed_event(
            "response_not_found", f"No response with id '{target}' is running on this "
            "connection.", target, steer_input), lane)
    if status == COMPLETED:
        return _with_lane(failed_event(
            "response_already_completed", f"Response '{target}' already completed; send the "
            "input in a new 'response.create' with 'previous_response_id'.", target,
            steer_input), lane)
    return _with_lane(failed_event(
        "response_not_active", f"Response '{target}' is no longer accepting steering input "
        f"(it ended '{status}').", target, steer_input), lane)


def not_supported(target: str, steer_input: Any, lane: str | None) -> Event:
    return _with_lane(failed_event(
        "steering_not_supported", "Responses bound to a conversation or using automatic "
        "compaction cannot be steered.", target,
        steer_input), lane)


def too_many(target: str, steer_input: Any, limit: int, lane: str | None) -> Event:
    return _with_lane(failed_event(
        "too_many_pending_steers", f"Too much steering input is pending for response "
        f"'{target}' (at most {limit} submissions; GATEWAY_WS_MAX_PENDING_STEERS).", target,
        steer_input), lane)


def _with_lane(event: Event, lane: str | None) -> Event:
    if lane is not None:
        event["stream_id"] = lane
    return event


def steerable(template: dict[str, Any], job: Any) -> bool:
    """Whether a response can be steered: not bound to a conversation, no automatic
    compaction (``context_management``), and a model runs (a ``compaction_trigger``'s
    response has no model turn to stop)."""
    if job.conversation is not None or template.get("conversation") is not None:
        return False
    if not job.record.request.get("model_runs", True):
        return False
    return not any(isinstance(entry, dict) and entry.get("type") == "compaction"
                   for entry in template.get("context_management") or ())


def settings_of(body: dict[str, Any]) -> dict[str, Any]:
    """A create body's settings (all but its input and where it continues from), copied:
    what a steered response's successor inherits."""
    kept = {key: value for key, value in body.items() if key not in _NOT_INHERITED}
    kept["conversation"] = body.get("conversation")
    return orjson.loads(orjson.dumps(kept))


def successor_body(template: dict[str, Any], response_id: str,
                   steers: list[Steer]) -> dict[str, Any]:
    """The create of a steered response's successor: its settings, continuing from it, the
    queued input in submission order."""
    body = {key: value for key, value in template.items() if key != "conversation"}
    body["previous_response_id"] = response_id
    body["input"] = steers_input(steers)
    return body


def steers_input(steers: list[Steer]) -> list[dict[str, Any]]:
    return [item for steer in steers for item in input_items(steer.input)]


def as_items(create_input: Any) -> list[Any]:
    """A create's input as a list of items (a string is one user message)."""
    if create_input is None:
        return []
    if isinstance(create_input, str):
        return input_items(create_input)
    return list(create_input) if isinstance(create_input, list) else [create_input]


def pending(steer: Steer, required: list[dict[str, Any]]) -> Event:
    """``response.steer.pending`` (numbered by the caller in the response's stream)."""
    return {"type": "response.steer.pending", "reason": "waiting_for_required_input",
            "required_input": required,
            "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id}}


def failed_event(code: str, message: str, previous_response_id: Any, steer_input: Any,
                 steer_id: str | None = None) -> Event:
    steer: dict[str, Any] = {"input": steer_input, "previous_response_id": previous_response_id}
    if steer_id is not None:
        steer["id"] = steer_id
    return {"type": "response.steer.failed", "sequence_number": 0, "steer": steer,
            "error": {"type": "invalid_request_error", "code": code, "message": message}}


#: a client-owned call in a response's output -> the stub of the input that answers it
_ANSWERS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
}


def required_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the client must send before a response's successor can run: a stub for each of
    its calls without an output in it (the gateway's own calls have theirs) and each item of
    a server tool's the client answers (an MCP approval request: ``ItemType.answer``)."""
    answered = {item.get("call_id") for item in output if str(item.get("type", "")).endswith(
        "_output")}
    stubs: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type")
        call_id = item.get("call_id")
        if kind in _ANSWERS and call_id not in answered:
            stub = {"type": _ANSWERS[kind], "call_id": call_id}
            if kind == "function_call":
                stub["name"] = item.get("name")
            stubs.append(stub)
        elif (kind == "tool_search_call" and item.get("execution") == "client"
              and call_id not in answered):
            stubs.append({"type": "tool_search_output", "call_id": call_id,
                          "execution": "client"})
        elif kind in registry.ANSWERS:  # a server tool's item the client answers (approvals)
            answer, field = registry.ANSWERS[kind]
            stubs.append({"type": answer, field: item["id"]})
    return stubs


def check_input(event: dict[str, Any]) -> str | None:
    """Why a ``response.steer`` event is invalid (OpenAI: it takes only ``type``,
    ``previous_response_id`` and ``input``; input is a string or a non-empty list of user
    messages with ``type``, ``role``, ``content`` only, each valid as a create's input
    item), or None."""
    extra = sorted(set(event) - {"type", "previous_response_id", "input"})
    if extra:
        return (f"Unknown parameter: '{extra[0]}'. 'response.steer' accepts only 'type', "
                "'previous_response_id' and 'input'.")
    if not isinstance(event.get("previous_response_id"), str) or not event[
            "previous_response_id"]:
        return "'previous_response_id' must be the ID of a response running on this connection."
    steer_input = event.get("input")
    if isinstance(steer_input, str):
        return None if steer_input else "'input' must not be empty."
    if not isinstance(steer_input, list) or not steer_input:
        return "'input' must be a string or a non-empty array of user messages."
    for index, item in enumerate(steer_input):
        if not isinstance(item, dict):
            return f"'input[{index}]' must be a message object."
        unknown = set(item) - {"type", "role", "content"}
        if unknown or item.get("role") != "user" or item.get("type", "message") != "message":
            return (f"'input[{index}]': steering accepts only messages with the 'user' role "
                    "('type', 'role' and 'content').")
        if not _user_content(item.get("content")):
            return (f"'input[{index}].content' must be a string or an array of "
                    "'input_text', 'input_image' and 'input_file' parts.")
    return _valid_items(steer_input)


def _valid_items(steer_input: list[Any]) -> str | None:
    """Why the messages are not valid as a create's input items (a text part without text,
    an image URL that is no string), or None: such a steer is refused when it arrives, not
    by its successor's create after the response it targets was stopped for it. The item
    models load here, at the first steer, not with the WebSocket entry."""
    from responses_gateway.translate.request_items import validate_items

    try:
        validate_items(steer_input, None)
    except GatewayError as exc:
        return exc.message
    return None

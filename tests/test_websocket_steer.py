"""WebSocket steering (``response.steer``), end to end through openai-python's
``client.responses.connect()``: the gateway under uvicorn, a scripted upstream pacing its chunks.

Every message is validated against the SDK's server event union; each response's own events
(steer events aside) against the stream grammar.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.e2e import MODEL, check_response, check_stream, client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.test_websocket import check_ws_event

pytestmark = pytest.mark.slow

TERMINAL = ("response.completed", "response.failed", "response.incomplete")
STEER_EVENTS = ("response.steer.accepted", "response.steer.pending", "response.steer.failed")
SLOW = "[[script:slow delay=0.3 n=40]] Count slowly."
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def gateway(upstream: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("steer") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, ws_max_pending_steers=2)) as server:
        yield server


def recv(connection: Any) -> dict[str, Any]:
    event = connection.recv().to_dict(mode="json")
    check_ws_event(event)
    return event


def until(connection: Any, done: Any) -> list[dict[str, Any]]:
    """Events up to and including the first for which ``done`` holds."""
    events = []
    while True:
        events.append(recv(connection))
        if done(events[-1]):
            return events


def terminal(event: dict[str, Any]) -> bool:
    return event["type"] in TERMINAL or event["type"] == "error"


def response_events(events: list[dict[str, Any]], response_id: str) -> list[dict[str, Any]]:
    """One response's stream (its ``accepted`` events included), from ``response.created`` to
    its terminal event. A steer refused at once is not part of it (sequence number 0)."""
    start = next(i for i, e in enumerate(events) if e["type"] == "response.created"
                 and e["response"]["id"] == response_id)
    end = next(i for i, e in enumerate(events) if i > start and e["type"] in TERMINAL)
    return [e for e in events[start:end + 1] if e["type"] != "response.steer.failed"]


def check_response_stream(stream: list[dict[str, Any]]) -> dict[str, Any]:
    """Sequence numbers run on through the steer events; the rest is a valid stream."""
    assert [e["sequence_number"] for e in stream] == list(range(len(stream)))
    check_stream([dict(e, sequence_number=i) for i, e in
                  enumerate(e for e in stream if e["type"] not in STEER_EVENTS)])
    return check_response(stream[-1]["response"])


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def test_an_accepted_steer_ends_the_response_steered_and_starts_its_successor(
    gateway: GatewayServer, upstream: Any
) -> None:
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model=MODEL, input=SLOW, instructions="Be brief.")
        events = until(connection, lambda e: e["type"] == "response.output_text.delta")
        first_id = events[0]["response"]["id"]
        connection.response.steer(previous_response_id=first_id, input=[
            user("[[script:text text='Turning left now.']] Stop counting; turn left.")])
        events += until(connection, lambda e: e["type"] == "response.incomplete")
        events += until(connection, terminal)
        http = client.responses

        [accepted] = [e for e in events if e["type"] == "response.steer.accepted"]
        assert accepted["steer"]["previous_response_id"] == first_id
        assert accepted["steer"]["id"].startswith("steer_")
        first_stream = response_events(events, first_id)
        assert accepted in first_stream, "accepted in the steered response's own stream"
        steered = check_response_stream(first_stream)
        assert steered["status"] == "incomplete"
        assert steered["incomplete_details"] == {"reason": "steered"}
        [message] = steered["output"]
        partial = message["content"][0]["text"]
        assert message["status"] == "incomplete" and partial
        assert len(partial) < len("Hello from the scripted upstream.") * 2 or partial
        assert first_stream[-2]["type"] == "response.output_item.done"

        created = [e for e in events if e["type"] == "response.created"]
        assert len(created) == 2, "the gateway started the successor itself"
        successor_id = created[1]["response"]["id"]
        successor = check_response_stream(response_events(events, successor_id))
        assert successor["status"] == "completed"
        assert successor["previous_response_id"] == first_id
        assert successor["instructions"] == "Be brief.", "the successor inherits the settings"
        assert successor["output"][0]["content"][0]["text"] == "Turning left now."

        # The successor's input is the steer's message; the model saw it after the earlier turn.
        items = [i.to_dict(mode="json") for i in http.input_items.list(successor_id,
                                                                          order="asc")]
        assert [(i["role"], i["content"][0]["text"]) for i in items] == [
            ("user", "[[script:text text='Turning left now.']] Stop counting; turn left.")]
        sent = upstream.requests[-1]["messages"]
        roles = [m["role"] for m in sent]
        assert roles[-3:] == ["user", "assistant", "user"], sent
        assert "Count slowly" in json.dumps(sent[-3]) and partial in json.dumps(sent[-2])
        assert "turn left" in json.dumps(sent[-1])
        stored = http.retrieve(first_id)
        assert stored.status == "incomplete" and stored.incomplete_details.reason == "steered"

        # Both are over now: a steer of either is refused with OpenAI's codes.
        connection.response.steer(previous_response_id=first_id, input="again")
        failed = recv(connection)
        assert failed["type"] == "response.steer.failed"
        assert failed["error"]["code"] == "response_not_active"
        assert failed["steer"] == {"input": "again", "previous_response_id": first_id}
        connection.response.steer(previous_response_id=successor_id, input="again")
        assert recv(connection)["error"]["code"] == "response_already_completed"


def test_steers_wait_for_the_clients_tool_output(gateway: GatewayServer, upstream: Any) -> None:
    """A steer while a function call streams: the response completes with its call, the steers
    stay queued (``pending``, with ``required_input``), and the client's create with the tool
    output gets them prepended. A third steer passes GATEWAY_WS_MAX_PENDING_STEERS (2)."""
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(
            model=MODEL, tools=[WEATHER],
            input="[[script:tool names=get_weather n=12 delay=0.25]] Weather in Paris?")
        events = until(connection, lambda e: e["type"] == "response.function_call_arguments.delta")
        response_id = events[0]["response"]["id"]
        for text in ("Also Lima.", "And Oslo.", "And Tokyo."):
            connection.response.steer(previous_response_id=response_id, input=text)
        events += until(connection, lambda e: e["type"] == "response.completed")
        events += until(connection, lambda e: e["type"] == "response.steer.pending")
        events += until(connection, lambda e: e["type"] == "response.steer.pending")

        [too_many] = [e for e in events if e["type"] == "response.steer.failed"]
        assert too_many["error"]["code"] == "too_many_pending_steers"
        assert too_many["steer"]["input"] == "And Tokyo." and "id" not in too_many["steer"]
        accepted = [e for e in events if e["type"] == "response.steer.accepted"]
        assert len(accepted) == 2
        stream = response_events(events, response_id)
        done = check_response_stream(stream)
        assert done["status"] == "completed"
        [call] = done["output"]
        assert call["type"] == "function_call"
        pending = [e for e in events if e["type"] == "response.steer.pending"]
        assert [p["steer"]["id"] for p in pending] == [a["steer"]["id"] for a in accepted]
        for event in pending:
            assert event["reason"] == "waiting_for_required_input"
            assert event["required_input"] == [{"type": "function_call_output",
                                                "call_id": call["call_id"],
                                                "name": "get_weather"}]
        assert events.index(pending[0]) > events.index(stream[-1]), "after response.completed"

        connection.response.create(
            model=MODEL, tools=[WEATHER], previous_response_id=response_id,
            input=[{"type": "function_call_output", "call_id": call["call_id"],
                    "output": "Sunny, 21 C"}])
        after = until(connection, terminal)
        assert after[-1]["type"] == "response.completed", after[-1]
        check_stream(after)
        next_id = after[0]["response"]["id"]
        items = [i.to_dict(mode="json") for i in client.responses.input_items.list(
            next_id, order="asc")]
        assert [i["type"] for i in items] == ["message", "message", "function_call_output"]
        assert [i["content"][0]["text"] for i in items[:2]] == ["Also Lima.", "And Oslo."]
        sent = json.dumps(upstream.requests[-1]["messages"])
        assert "Sunny, 21 C" in sent and "Also Lima." in sent and "And Oslo." in sent

        # The steers were committed by that create: a later create from the same response
        # does not get them again.
        connection.response.create(
            model=MODEL, tools=[WEATHER], previous_response_id=response_id,
            input=[{"type": "function_call_output", "call_id": call["call_id"],
                    "output": "Rain"}])
        again = until(connection, terminal)
        items = list(client.responses.input_items.list(again[0]["response"]["id"]))
        assert [i.type for i in items] == ["function_call_output"]


def test_steer_refusals(gateway: GatewayServer) -> None:
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.steer(previous_response_id="resp_unknown", input="go left")
        failed = recv(connection)
        assert failed["error"]["code"] == "response_not_found"
        assert failed["steer"] == {"input": "go left", "previous_response_id": "resp_unknown"}

        # Only user messages; nothing but type, previous_response_id and input.
        for bad in ({"input": [{"role": "assistant", "content": "x"}]},
                    {"input": []},
                    {"input": "x", "stream_id": "a"},
                    {"input": [{"role": "user", "content": [{"type": "output_text",
                                                             "text": "x"}]}]}):
            connection.send({"type": "response.steer", "previous_response_id": "resp_x",
                             **bad})
            failed = recv(connection)
            assert failed["type"] == "response.steer.failed", bad
            assert failed["error"]["code"] == "invalid_input", bad

        # A response bound to a conversation cannot be steered.
        conversation = client.conversations.create()
        connection.response.create(model=MODEL, input=SLOW, conversation=conversation.id)
        events = until(connection, lambda e: e["type"] == "response.output_text.delta")
        response_id = events[0]["response"]["id"]
        connection.response.steer(previous_response_id=response_id, input="go left")
        events += until(connection, lambda e: e["type"] == "response.steer.failed")
        assert events[-1]["error"]["code"] == "steering_not_supported"
        events += until(connection, terminal)
        assert events[-1]["type"] == "response.completed"


def test_a_steer_with_a_malformed_part_is_refused_and_the_response_runs_on(
    gateway: GatewayServer,
) -> None:
    """A part a create's input would refuse (text without ``text``, an image URL that is no
    string) is ``invalid_input`` when the steer arrives: the response it targets is not
    stopped for a successor that could never be created."""
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="[[script:slow delay=0.1 n=20]] Count.")
        events = until(connection, lambda e: e["type"] == "response.output_text.delta")
        response_id = events[0]["response"]["id"]
        for part in ({"type": "input_text"}, {"type": "input_image", "image_url": 5}):
            connection.send({"type": "response.steer", "previous_response_id": response_id,
                             "input": [{"role": "user", "content": [part]}]})
            events += until(connection, lambda e: e["type"] == "response.steer.failed")
            failed = events[-1]
            assert failed["error"]["code"] == "invalid_input", failed
            assert "input[0].content[0]" in failed["error"]["message"]
            assert failed["steer"] == {"input": "", "previous_response_id": response_id}
        events += until(connection, terminal)
        assert events[-1]["type"] == "response.completed", events[-1]
        assert "response.steer.accepted" not in [e["type"] for e in events]
        assert [e["type"] for e in events].count("response.created") == 1


def test_a_laned_steer_echoes_its_lane(gateway: GatewayServer) -> None:
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.send({"type": "response.create", "model": MODEL, "input": SLOW,
                         "stream_id": "lane-a"})
        events = until(connection, lambda e: e["type"] == "response.output_text.delta")
        connection.response.steer(previous_response_id=events[0]["response"]["id"],
                                  input="[[script:text text=Left.]] left")
        events += until(connection, lambda e: e["type"] == "response.incomplete")
        events += until(connection, terminal)
        assert {e.get("stream_id") for e in events} == {"lane-a"}
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Left."


def test_a_successor_that_cannot_be_created_returns_the_steer(gateway: GatewayServer) -> None:
    """The steer's input has a part the gateway refuses (an image by ``file_id``): the steered
    response ended, its successor is refused, and the steer comes back
    ``successor_creation_failed`` with its id and input, so the client can carry it into a
    ``response.create``."""
    bad = [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Look at this."},
                         {"type": "input_image", "file_id": "file-missing", "detail": "auto"}]}]
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model=MODEL, input=SLOW)
        events = until(connection, lambda e: e["type"] == "response.output_text.delta")
        response_id = events[0]["response"]["id"]
        connection.response.steer(previous_response_id=response_id, input=bad)
        events += until(connection, lambda e: e["type"] == "response.steer.failed")
        [accepted] = [e for e in events if e["type"] == "response.steer.accepted"]
        failed = events[-1]
        assert failed["error"]["code"] == "successor_creation_failed"
        assert "file_id" in failed["error"]["message"]  # the 400 the create would get
        assert failed["steer"] == {"id": accepted["steer"]["id"], "input": bad,
                                   "previous_response_id": response_id}
        assert [e["type"] for e in events].count("response.created") == 1
        assert events[-2]["type"] == "response.incomplete"

        connection.response.create(model=MODEL, input="still here?")  # the socket goes on
        assert until(connection, terminal)[-1]["type"] == "response.completed"


@pytest.fixture(scope="module")
def one_turn(upstream: Any, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[GatewayServer]:
    """A gateway whose responses stop after one tool turn (GATEWAY_MAX_TOOL_TURNS=1)."""
    db = tmp_path_factory.mktemp("steer-one-turn") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, max_tool_turns=1,
                                    mcp_allow_hosts=("127.0.0.1",))) as server:
        yield server


def test_a_steer_past_the_last_safe_point_completes_then_starts_the_successor(
        one_turn: GatewayServer) -> None:
    """The steer comes while the response's only allowed tool call runs (an MCP tool that
    sleeps): no safe point follows (no further model turn may start), so the response
    completes normally, acknowledges the steer before its terminal event, and the gateway
    then starts the successor with the steer's input (OpenAI: "Normal completion can also be
    followed by an automatic successor")."""
    from tests.helpers.mcp_server import McpTestServer

    with (McpTestServer() as mcp, client_for(one_turn) as client,
          client.responses.connect() as connection):
        connection.response.create(
            model=MODEL, instructions="Be brief.",
            input="[[script:tool names=lab__slow args='{\"seconds\": 5}']] Wait a bit.",
            tools=[{"type": "mcp", "server_label": "lab", "server_url": mcp.url,
                    "require_approval": "never"}])
        events = until(connection, lambda e: e["type"] == "response.mcp_call.in_progress")
        first_id = events[0]["response"]["id"]
        # The tool is running (it sleeps 5 s): the steer lands before the response ends.
        connection.response.steer(previous_response_id=first_id, input=[
            user("[[script:text text='Moving on.']] Never mind; move on.")])
        events += until(connection, lambda e: e["type"] in TERMINAL)
        first_stream = response_events(events, first_id)
        [accepted] = [e for e in first_stream if e["type"] == "response.steer.accepted"]
        assert accepted["steer"]["previous_response_id"] == first_id
        assert first_stream.index(accepted) == len(first_stream) - 2, "just before the end"
        done = check_response_stream(first_stream)
        assert done["status"] == "completed" and done["incomplete_details"] is None
        assert [i["type"] for i in done["output"]] == ["mcp_list_tools", "mcp_call"]
        assert done["output"][-1]["status"] == "completed"

        events += until(connection, terminal)
        created = [e for e in events if e["type"] == "response.created"]
        assert len(created) == 2, "the gateway started the successor itself"
        successor = check_response_stream(response_events(events, created[1]["response"]["id"]))
        assert successor["status"] == "completed"
        assert successor["previous_response_id"] == first_id
        assert successor["instructions"] == "Be brief."
        assert successor["output"][-1]["content"][0]["text"] == "Moving on."

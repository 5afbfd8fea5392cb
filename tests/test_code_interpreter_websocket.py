"""code_interpreter in WebSocket mode (issue 42): the openai SDK's ``responses.connect()``
against test_code_interpreter's gateway (the sandbox engine, the scripted upstream). Every
message is the SDK's WebSocket server event and the stream grammar holds; a ``store: false``
continuation on the socket runs in the same container, its variables still there."""

from __future__ import annotations

import pytest

from tests.helpers.e2e import client_for
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_code_interpreter import (  # noqa: F401
    AUTO,
    CODE_EVENTS,
    OUTPUTS,
    calls_of,
    gateway,
    steps,
    tool_messages,
)
from tests.test_websocket import check_ws_event, completed, sdk_turn

pytestmark = pytest.mark.slow


def test_sdk_connection_runs_code_and_continues_in_its_container(
        gateway: GatewayServer, upstream: ScriptedUpstream) -> None:  # noqa: F811
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model="m", tools=AUTO, store=False, include=[OUTPUTS],
                                   input=steps("ws-code", "w = 'socket'\nprint(w)"))
        turn = sdk_turn(connection)
        for event in turn:
            check_ws_event(event)
        first = completed(turn)
        [call] = calls_of(first)
        kinds = [e["type"] for e in turn if e.get("item_id") == call["id"]
                 or e.get("item", {}).get("id") == call["id"]]
        deltas = kinds.count(CODE_EVENTS[2])
        assert kinds == [*CODE_EVENTS[:2], *[CODE_EVENTS[2]] * deltas, *CODE_EVENTS[3:]]
        assert call["outputs"] == [{"type": "logs", "logs": "socket\n"}] or (
            call["outputs"][-1]["logs"].strip() == "socket")

        # store=false: the chain lives on the socket; the container is found through it
        connection.response.create(model="m", tools=AUTO, store=False,
                                   previous_response_id=first["id"],
                                   input=steps("ws-code-2", "print(w.upper())"))
        later = completed(sdk_turn(connection))
        [again] = calls_of(later)
        assert again["container_id"] == call["container_id"]
    assert tool_messages(upstream, "ws-code-2")[-1].strip() == "SOCKET"

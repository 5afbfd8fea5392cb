"""web_search in WebSocket mode (issue 30): the openai SDK's ``responses.connect()`` against
the gateway of test_web_search (local SearXNG-speaking provider, scripted upstream). Every
message is validated as the SDK's WebSocket server event and the stream grammar holds; a
``store: false`` continuation on the socket gives the model back what the search read."""

from __future__ import annotations

import json

from tests.helpers.e2e import client_for
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.search_providers import RESULTS, SearchProvider
from tests.test_web_search import (  # noqa: F401
    CITED,
    answer_citing,
    gateway,
    provider,
    searching,
    tool_result,
    web_search_items,
)
from tests.test_websocket import check_ws_event, completed, create, read_turn, sdk_turn, ws_url

TOOLS = [{"type": "web_search"}]


def test_sdk_connection_searches_cites_and_continues(
        gateway: GatewayServer, upstream: ScriptedUpstream,  # noqa: F811
        provider: SearchProvider) -> None:  # noqa: F811
    text = answer_citing()
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model="m", input=searching("ws-search", text), tools=TOOLS,
                                   store=False, include=["web_search_call.action.sources"])
        turn = sdk_turn(connection)
        for event in turn:
            check_ws_event(event)
        first = completed(turn)
        kinds = [e["type"] for e in turn]
        at = kinds.index("response.web_search_call.in_progress")
        assert kinds[at - 1:at + 4] == [
            "response.output_item.added", "response.web_search_call.in_progress",
            "response.web_search_call.searching", "response.web_search_call.completed",
            "response.output_item.done"]
        [added] = [e for e in turn if e["type"] == "response.output_text.annotation.added"]
        assert added["annotation"]["url"] == CITED["url"]
        [call] = web_search_items(first)
        assert call["status"] == "completed" and call["action"]["query"] == "rust edition"
        assert [s["url"] for s in call["action"]["sources"]] == [r["url"] for r in RESULTS]
        assert first["output"][-1]["content"][0]["text"] == text
        assert any(r.params.get("q") == "rust edition" for r in provider.requests)
        read = tool_result(upstream, "ws-search", call["id"])
        assert CITED["text"] in read

        # store=false: the chain lives on the socket; the model reads the search's text again.
        connection.response.create(model="m", input="[[script:text text=ok]] ws-later",
                                   tools=TOOLS, store=False, previous_response_id=first["id"])
        later = completed(sdk_turn(connection))
        assert later["previous_response_id"] == first["id"]
    assert tool_result(upstream, "ws-later", call["id"]) == read


def test_raw_socket_failed_search_then_next_turn(gateway: GatewayServer) -> None:  # noqa: F811
    """A page refused by the SSRF rules is a failed call on the socket; the response and the
    socket go on."""
    from websockets.sync.client import connect

    args = json.dumps({"url": "http://169.254.169.254/latest/meta-data/"})
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create(searching("ws-refused", "Could not open it.", "open_page",
                                            args), tools=TOOLS)))
        response = completed(read_turn(ws))
        [call] = web_search_items(response)
        assert call["status"] == "failed" and call["action"]["type"] == "open_page"
        assert response["output"][-1]["content"][0]["text"] == "Could not open it."
        ws.send(json.dumps(create("[[script:text text=fine]] ws-after", tools=TOOLS)))
        assert completed(read_turn(ws))["output"][0]["content"][0]["text"] == "fine"


def test_a_steer_during_a_search_stops_between_model_turns(
        gateway: GatewayServer, upstream: ScriptedUpstream,  # noqa: F811
        provider: SearchProvider) -> None:  # noqa: F811
    """The search's item is not a safe point: the steer is acknowledged once the search ended,
    and the response stops before the model turn that would read it; the successor reads the
    search and then the steer."""
    provider.delay = 1.0
    try:
        with client_for(gateway) as client, client.responses.connect() as connection:
            connection.response.create(model="m", input=searching("ws-steer", "never said"),
                                       tools=TOOLS, store=False)
            events = []
            for event in connection:
                events.append(event.to_dict(mode="json"))
                check_ws_event(events[-1])
                if event.type == "response.web_search_call.in_progress":
                    connection.response.steer(
                        previous_response_id=events[0]["response"]["id"],
                        input="[[script:text text=Steered.]] Forget the search.")
                if event.type == "response.completed":
                    break
    finally:
        provider.delay = 0.0
    kinds = [e["type"] for e in events]
    end = kinds.index("response.incomplete")
    steered = events[end]["response"]
    assert steered["incomplete_details"] == {"reason": "steered"}
    assert [i["type"] for i in steered["output"]] == ["web_search_call"]
    assert steered["output"][0]["status"] == "completed"
    accepted = kinds.index("response.steer.accepted")
    assert kinds.index("response.web_search_call.completed") < accepted < end
    successor = events[-1]["response"]
    assert successor["previous_response_id"] == steered["id"]
    assert successor["output"][0]["content"][0]["text"] == "Steered."
    assert "never said" not in json.dumps(events)
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent][-3:] == ["assistant", "tool", "user"]
    assert CITED["text"] in json.dumps(sent[-2]) and "Forget the search" in sent[-1]["content"]

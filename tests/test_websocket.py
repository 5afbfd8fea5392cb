"""WebSocket mode of /v1/responses, end to end: the gateway under uvicorn, a scripted upstream.

Three kinds of client: the openai SDK's ``client.responses.connect()`` (what users run), a
raw ``websockets`` client (bad input the SDK would not send), and :func:`session`, which
reproduces the Open Responses compliance suite's WebSocket runner: send one ``response.create``
per turn, read until a terminal event or an ``error``, then send the next.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from openai.types.responses.responses_server_event import ResponsesServerEvent
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.helpers.e2e import MODEL, check_response, check_stream, client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import _validator

MAX_MESSAGE = 64 * 1024
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


@pytest.fixture(scope="module")
def gateway(upstream: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("ws") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, max_body_bytes=MAX_MESSAGE)) as server:
        yield server


def ws_url(server: GatewayServer) -> str:
    return server.base_url.replace("http://", "ws://") + "/responses"


@functools.cache
def _server_event() -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(ResponsesServerEvent)


def check_ws_event(event: dict[str, Any]) -> None:
    """Every server message is one of the SDK's WebSocket events; an error one also matches
    the Open Responses ``WebSocketErrorEvent`` schema."""
    _server_event().validate_python(event)
    if event["type"] == "error":
        errors = [e.message for e in _validator("WebSocketErrorEvent").iter_errors(event)]
        assert not errors, errors


def read_turn(ws: ClientConnection, timeout: float = 20) -> list[dict[str, Any]]:
    """Messages up to and including a terminal event or an ``error``."""
    events: list[dict[str, Any]] = []
    while True:
        message = ws.recv(timeout=timeout)
        assert isinstance(message, str), "events are text messages"
        event = json.loads(message)
        check_ws_event(event)
        events.append(event)
        if event["type"] in TERMINAL or event["type"] == "error":
            return events


Turns = list[list[dict[str, Any]]]
Step = dict[str, Any] | Callable[[Turns], dict[str, Any]]


def session(server: GatewayServer, steps: list[Step], **headers: str) -> Turns:
    """The compliance suite's WebSocket session: one turn per step, on one connection."""
    turns: list[list[dict[str, Any]]] = []
    with connect(ws_url(server), additional_headers=headers or None) as ws:
        for step in steps:
            body = step(turns) if callable(step) else step
            ws.send(json.dumps(body))
            turns.append(read_turn(ws))
    return turns


def final(turn: list[dict[str, Any]]) -> dict[str, Any] | None:
    return turn[-1].get("response") if turn[-1]["type"] in TERMINAL else None


def error_code(turn: list[dict[str, Any]]) -> str | None:
    last = turn[-1]
    if last["type"] == "error":
        return last["error"]["code"]
    return ((last.get("response") or {}).get("error") or {}).get("code")


def completed(turn: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn is a whole, valid stream that ended ``completed``; its Response."""
    assert turn[-1]["type"] == "response.completed", turn[-1]
    check_stream(turn)
    return check_response(turn[-1]["response"])


def create(input: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "response.create", "model": MODEL, "input": input, **fields}


# -- the openai SDK ------------------------------------------------------------------------------


def sdk_turn(connection: Any) -> list[dict[str, Any]]:
    events = []
    for event in connection:
        events.append(event.to_dict(mode="json"))
        if event.type in (*TERMINAL, "error"):
            return events
    raise AssertionError("the connection closed before a terminal event")


def test_sdk_create_continuation_and_error_event(gateway: GatewayServer, upstream: Any) -> None:
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Remember: the word is cobalt.",
                                   store=False)
        first = completed(sdk_turn(connection))
        connection.response.create(model=MODEL, input="Which word?", store=False,
                                   previous_response_id=first["id"])
        second = completed(sdk_turn(connection))
        assert second["previous_response_id"] == first["id"]
        sent = upstream.requests[-1]["messages"]  # the store:false history came from the socket
        assert "cobalt" in json.dumps(sent) and first["output"][0]["content"][0]["text"] in (
            json.dumps(sent))

        connection.response.create(model=MODEL, input="x", store=False,
                                   previous_response_id="resp_missing")
        [error] = sdk_turn(connection)
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
        assert error["error"]["param"] == "previous_response_id"

        connection.response.create(model=MODEL, input="still here?")  # the socket survived
        completed(sdk_turn(connection))


def test_sdk_async_client(gateway: GatewayServer) -> None:
    import asyncio

    from openai import AsyncOpenAI

    async def main() -> dict[str, Any]:
        client = AsyncOpenAI(base_url=gateway.base_url, api_key="x", max_retries=0)
        async with client.responses.connect() as connection:
            await connection.response.create(model=MODEL, input="hi")
            async for event in connection:
                if event.type in TERMINAL:
                    return event.to_dict(mode="json")
        raise AssertionError("no terminal event")

    terminal = asyncio.run(main())
    assert terminal["type"] == "response.completed"
    with client_for(gateway) as client:  # store defaults to true: retrievable over HTTP
        assert client.responses.retrieve(terminal["response"]["id"]).status == "completed"


def test_sdk_warm_up_then_chained_turn(gateway: GatewayServer, upstream: Any) -> None:
    """Codex's prewarm: ``generate=False`` with the turn's tools and input, wait for
    ``response.completed``, then the real turn chained on it with only the new input."""
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    before = len(upstream.requests)
    with client_for(gateway) as client, client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="The word is quartz.", tools=tools,
                                   instructions="Be brief.", store=False, generate=False)
        warm = sdk_turn(connection)
        assert [e["type"] for e in warm] == [
            "response.created", "response.in_progress", "response.completed"]
        assert completed(warm)["output"] == []
        assert len(upstream.requests) == before  # the model was not called
        connection.response.create(model=MODEL, input="Which word?", tools=tools,
                                   instructions="Be brief.", store=False,
                                   previous_response_id=warm[-1]["response"]["id"])
        turn = completed(sdk_turn(connection))
    assert turn["previous_response_id"] == warm[-1]["response"]["id"]
    assert len(upstream.requests) == before + 1
    sent = json.dumps(upstream.requests[-1]["messages"])
    assert "quartz" in sent and "Which word?" in sent


def test_warm_up_generates_nothing_and_is_chained(gateway: GatewayServer, upstream: Any) -> None:
    before = len(upstream.requests)
    warm, chained, plain = session(gateway, [
        create([{"type": "message", "role": "user", "content": "Remember: basalt."}],
               store=False, generate=False, instructions="Answer in one word."),
        lambda t: create("Which word?", store=False, previous_response_id=final(t[0])["id"]),
        create("a new chain"),
    ])
    response = completed(warm)
    assert response["status"] == "completed" and response["output"] == []
    assert response["usage"]["input_tokens"] == response["usage"]["output_tokens"] == 0
    assert response["instructions"] == "Answer in one word."  # echoed like any response
    assert "generate" not in response
    completed(chained)
    completed(plain)
    assert len(upstream.requests) == before + 2  # the chained turn and the new chain only
    chained_messages = json.dumps(upstream.requests[-2]["messages"])
    assert "basalt" in chained_messages and "Which word?" in chained_messages
    assert "basalt" not in json.dumps(upstream.requests[-1]["messages"])


def test_warm_up_store_true_is_stored_and_chains_over_http(gateway: GatewayServer,
                                                          upstream: Any) -> None:
    [warm] = session(gateway, [create("Remember: granite.", generate=False, stream_id="w")])
    assert all(e["stream_id"] == "w" for e in warm)
    warm_id = final(warm)["id"]
    with client_for(gateway) as client:
        stored = client.responses.retrieve(warm_id)
        assert stored.status == "completed" and stored.output == []
        after = client.responses.create(model=MODEL, input="Which?", previous_response_id=warm_id)
    assert after.status == "completed"
    assert "granite" in json.dumps(upstream.requests[-1]["messages"])


def test_generate_true_generates(gateway: GatewayServer, upstream: Any) -> None:
    before = len(upstream.requests)
    [turn] = session(gateway, [create("hi", generate=True)])
    assert completed(turn)["output"]
    assert len(upstream.requests) == before + 1


# -- lanes -------------------------------------------------------------------------------------


def test_stream_id_lanes_run_side_by_side_and_echo_their_lane(gateway: GatewayServer) -> None:
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("[[script:slow delay=0.1 n=5]] a", stream_id="a")))
        ws.send(json.dumps(create("b", stream_id="b")))
        events: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        done: list[str] = []
        while len(done) < 2:
            event = json.loads(ws.recv(timeout=20))
            check_ws_event(event)
            events[event["stream_id"]].append(event)
            if event["type"] in TERMINAL:
                done.append(event["stream_id"])
    assert done == ["b", "a"]  # b did not wait for the slow a
    for lane in ("a", "b"):
        completed([{k: v for k, v in e.items() if k != "stream_id"} for e in events[lane]])


def test_one_lane_is_fifo(gateway: GatewayServer) -> None:
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("[[script:slow delay=0.05 n=3]] one", stream_id="s")))
        ws.send(json.dumps(create("two", stream_id="s")))
        first, second = read_turn(ws), read_turn(ws)
    assert first[0]["type"] == "response.created" and second[0]["type"] == "response.created"
    assert first[-1]["response"]["created_at"] <= second[-1]["response"]["created_at"]
    assert [t[-1]["type"] for t in (first, second)] == ["response.completed"] * 2
    assert all(e["stream_id"] == "s" for e in first + second)


# -- bad input over the socket ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "status", "code", "param"),
    [
        ("{not json", 400, "invalid_json", None),
        ('["response.create"]', 400, "invalid_request_error", "type"),
        ('{"type": "session.update"}', 400, "invalid_value", "type"),
        ('{"model": "m"}', 400, "missing_required_parameter", "type"),
        (json.dumps(create("x", background=True)), 400, "invalid_request_error", "background"),
        (json.dumps(create("x", generate="no")), 400, "invalid_type", "generate"),
        (json.dumps(create("x" * MAX_MESSAGE)), 413, "request_too_large", None),
        # the limit is on bytes, as an HTTP body's: fewer characters than it, more UTF-8
        pytest.param(json.dumps(create("\U0001F600" * (MAX_MESSAGE // 4 + 1)),
                                ensure_ascii=False), 413, "request_too_large", None,
                     id="utf8-bytes-over-the-limit"),
        (json.dumps({"type": "response.create", "input": "no model"}), 400, None, "model"),
        ('{"type": "response.create", "model": "m", "input": "deep", "tools": [{"type": '
         '"function", "name": "f", "parameters": ' + '{"a": ' * 300 + "{}" + "}" * 300 + "}]}",
         400, None, None),
        # deeper than the JSON parser goes: still "nested too deeply", as over HTTP
        pytest.param('{"type": "response.create", "input": ' + "[" * 1100 + "]" * 1100 + "}",
                     400, "invalid_request_error", None, id="deeper-than-the-parser"),
    ],
)
def test_bad_message_is_an_error_event_and_the_socket_survives(
    gateway: GatewayServer, message: str, status: int, code: str | None, param: str | None
) -> None:
    with connect(ws_url(gateway)) as ws:
        ws.send(message)
        [error] = read_turn(ws)
        assert error["type"] == "error" and error["status"] == status
        if code is not None:
            assert error["error"]["code"] == code
        assert error["error"]["param"] == param
        ws.send(json.dumps(create("after the error")))
        completed(read_turn(ws))


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"background": True}, "background"), ({"generate": "no"}, "generate"),
     ({"model": 5}, "model")],
)
def test_an_error_about_a_laned_create_echoes_its_lane(
    gateway: GatewayServer, fields: dict[str, Any], param: str
) -> None:
    """Every event about a create sent with a ``stream_id`` carries it, its refusals too,
    whichever check refuses it: a client running lanes side by side can tell which failed."""
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("x", stream_id="lane-1", **fields)))
        [error] = read_turn(ws)
        assert error["type"] == "error" and error["error"]["param"] == param, error
        assert error.get("stream_id") == "lane-1", error


def test_second_create_while_one_runs_is_an_error(gateway: GatewayServer) -> None:
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("[[script:slow delay=0.1 n=5]] first")))
        ws.send(json.dumps(create("second")))
        events = []
        while not events or events[-1]["type"] not in TERMINAL:
            event = json.loads(ws.recv(timeout=20))
            check_ws_event(event)
            events.append(event)
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1 and errors[0]["status"] == 409
        assert errors[0]["error"]["code"] == "response_in_progress"
        completed([e for e in events if e["type"] != "error"])  # the first one, untouched


def test_disconnect_mid_response_cancels_it(gateway: GatewayServer, upstream: Any) -> None:
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("[[script:slow delay=0.2 n=50]] long")))
        created = json.loads(ws.recv(timeout=20))
        assert created["type"] == "response.created"
    response_id = created["response"]["id"]
    with client_for(gateway) as client:
        for _ in range(100):
            try:
                if client.responses.retrieve(response_id).status == "cancelled":
                    break
            except Exception:  # not written yet
                pass
            threading.Event().wait(0.05)
        assert client.responses.retrieve(response_id).status == "cancelled"


def test_handshake_is_authenticated(upstream: Any, tmp_path: Path) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db", api_keys=("gw-key",))
    with GatewayServer(settings) as server:
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(server), additional_headers={"Authorization": "Bearer wrong"})
        assert refused.value.response.status_code == 401
        body = json.loads(refused.value.response.body)
        assert body["error"]["code"] == "invalid_api_key"
        assert "wrong" not in refused.value.response.body.decode()
        [turn] = session(server, [create("hi")], Authorization="Bearer gw-key")
        completed(turn)


@pytest.mark.slow
def test_idle_and_age_limits_close_the_socket(upstream: Any, tmp_path: Path) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db", ws_idle_seconds=0.3,
                            ws_max_connection_seconds=1.0)
    with GatewayServer(settings) as server, connect(ws_url(server)) as ws:
        with pytest.raises(ConnectionClosedOK):  # idle: closed cleanly, no event
            ws.recv(timeout=5)
        assert ws.close_code == 1000
    # A 1 s idle bound here, not 0.3 s: a loaded machine could let the socket go idle between
    # the handshake and the create below. The response (1.5 s) still runs past both bounds.
    settings = e2e_settings(upstream, tmp_path / "g.db", ws_idle_seconds=1.0,
                            ws_max_connection_seconds=1.0)
    with GatewayServer(settings) as server, connect(ws_url(server)) as ws:
        # busy past the idle and age limits: the response ends first
        ws.send(json.dumps(create("[[script:slow delay=0.3 n=5]] long")))
        completed(read_turn(ws))
        [limit] = read_turn(ws)
        assert limit["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosedOK):
            ws.recv(timeout=5)
        assert ws.close_code == 1000


def test_http_routes_unchanged_on_the_same_port(gateway: GatewayServer) -> None:
    with client_for(gateway) as client:
        response = client.responses.create(model=MODEL, input="over HTTP")
        assert response.status == "completed"


# -- the Open Responses compliance suite's WebSocket tests, reproduced ------------------------


def test_compliance_websocket_response(gateway: GatewayServer) -> None:
    [turn] = session(gateway, [create([{"type": "message", "role": "user",
                                        "content": "Count from 1 to 3."}])])
    completed(turn)


def test_compliance_websocket_sequential_responses(gateway: GatewayServer) -> None:
    turns = session(gateway, [create("Reply with exactly: first", store=False),
                              create("Reply with exactly: second", store=False)])
    ids = [completed(turn)["id"] for turn in turns]
    assert len(set(ids)) == 2


def test_compliance_websocket_continuation(gateway: GatewayServer, upstream: Any) -> None:
    first, second = session(gateway, [
        create("Remember the code word: cobalt. Reply with OK.", store=False),
        lambda turns: create("What is the code word? Reply with only the code word.",
                             store=False, previous_response_id=final(turns[0])["id"]),
    ])
    completed(first)
    assert completed(second)["previous_response_id"] == final(first)["id"]
    assert "cobalt" in json.dumps(upstream.requests[-1]["messages"])


def test_compliance_websocket_reconnect_store_false_recovery(gateway: GatewayServer) -> None:
    [first] = session(gateway, [create("Remember the code word: copper. Reply with OK.",
                                       store=False)])
    previous = completed(first)["id"]
    reconnect, recovery = session(gateway, [
        create("Try to continue after reconnect. Reply with exactly: reconnected",
               store=False, previous_response_id=previous),
        create([{"type": "message", "role": "user", "content": "Start a new response and "
                 "reply with exactly: recovered"}], store=False),
    ])
    assert error_code(reconnect) == "previous_response_not_found"
    completed(recovery)


def test_compliance_websocket_previous_response_not_found(gateway: GatewayServer) -> None:
    [turn] = session(gateway, [create("This should fail.", store=False,
                                      previous_response_id="resp_openresponses_missing_1")])
    assert error_code(turn) == "previous_response_not_found"


def test_compliance_websocket_failed_continuation_evicts_cache(gateway: GatewayServer) -> None:
    # The suite's own turns: the failing one sends a tool output no call asked for, which
    # OpenAI refuses with a 400 (issue 27, defect 9); its previous response is then evicted.
    first, failed, retry = session(gateway, [
        create("Remember the code word: ember. Reply with OK.", store=False),
        lambda turns: create(
            [{"type": "function_call_output", "call_id": "call_openresponses_missing",
              "output": "No matching tool call exists in the previous response."}],
            store=False, previous_response_id=final(turns[0])["id"]),
        lambda turns: create("Try to continue after the failed turn. Reply with exactly: stale",
                             store=False, previous_response_id=final(turns[0])["id"]),
    ])
    completed(first)
    assert failed[-1]["type"] == "error" and failed[-1]["status"] == 400
    assert failed[-1]["error"]["message"] == (
        "No tool call found for function call output with call_id call_openresponses_missing.")
    assert error_code(retry) == "previous_response_not_found"


def test_compliance_websocket_compact_new_chain(gateway: GatewayServer, upstream: Any) -> None:
    # /responses/compact's output, passed back as it is, starts a new chain over WebSocket.
    compact_request = {"model": MODEL, "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Remember the compaction code word: slate."}]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "OK."}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Compress this conversation for later continuation."}]},
    ]}
    answer = httpx.post(gateway.base_url + "/responses/compact", json=compact_request,
                        headers={"Authorization": "Bearer sk-test"}, timeout=20)
    assert answer.status_code == 200, answer.text
    output = answer.json()["output"]
    assert output[-1]["type"] == "compaction"
    request = create([*output, {"type": "message", "role": "user",
                                "content": "Continue from here. Reply with exactly: compacted"}],
                     store=False, tools=[])
    assert "previous_response_id" not in request
    [turn] = session(gateway, [request])
    completed(turn)
    sent = json.dumps(upstream.requests[-1]["messages"])
    assert "slate" in sent and "were compacted" in sent  # the window and its summary


def test_evicted_response_stays_reachable_as_an_ancestor(gateway: GatewayServer,
                                                         upstream: Any) -> None:
    # 1 (lane a) <- 2 (lane b) succeeds; a fork from 1 fails (evicting 1); continuing 2 still
    # sees 1's turn; continuing 1 again is not found.
    turns = session(gateway, [
        create("one: amber", store=False, stream_id="a"),
        lambda t: create("two", store=False, stream_id="b",
                         previous_response_id=final(t[0])["id"]),
        lambda t: create("fork", model="script/error status=400", store=False, stream_id="c",
                         previous_response_id=final(t[0])["id"]),
        lambda t: create("three", store=False, stream_id="b",
                         previous_response_id=final(t[1])["id"]),
        lambda t: create("again", store=False, stream_id="a",
                         previous_response_id=final(t[0])["id"]),
    ])
    completed(strip_lane(turns[0]))
    completed(strip_lane(turns[1]))
    assert final(turns[2])["status"] == "failed"
    completed(strip_lane(turns[3]))
    assert "amber" in json.dumps(upstream.requests[-1]["messages"])
    assert error_code(turns[4]) == "previous_response_not_found"


def test_only_each_lanes_most_recent_store_false_response_is_remembered(
    gateway: GatewayServer, upstream: Any
) -> None:
    """OpenAI keeps the most recent response in the connection-local cache: a store:false
    chain goes on from its last turn (with all of its history), an older turn is gone; a
    stored one is found in the store."""
    turns = session(gateway, [
        create("one: jade", store=False),
        lambda t: create("two", store=False, previous_response_id=final(t[0])["id"]),
        lambda t: create("three", store=False, previous_response_id=final(t[1])["id"]),
        lambda t: create("fork from one", store=False, previous_response_id=final(t[0])["id"]),
        create("stored: onyx"),
        lambda t: create("four", store=False, previous_response_id=final(t[2])["id"]),
        lambda t: create("from the store", previous_response_id=final(t[4])["id"]),
    ])
    for index in (0, 1, 2, 4):
        completed(turns[index])
    assert error_code(turns[3]) == "previous_response_not_found"
    assert error_code(turns[5]) == "previous_response_not_found"  # "stored" was more recent
    completed(turns[6])
    assert "onyx" in json.dumps(upstream.requests[-1]["messages"])
    [again] = session(gateway, [create("x", store=False,
                                       previous_response_id=final(turns[2])["id"])])
    assert error_code(again) == "previous_response_not_found"  # a new connection is empty


def test_a_long_store_false_chain_keeps_all_of_its_history(gateway: GatewayServer,
                                                          upstream: Any) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    steps: list[Step] = [create(f"remember {words[0]}", store=False)]
    for index, word in enumerate(words[1:]):
        steps.append(lambda t, i=index, w=word: create(
            f"remember {w}", store=False, previous_response_id=final(t[i])["id"]))
    turns = session(gateway, steps)
    for turn in turns:
        completed(turn)
    sent = json.dumps(upstream.requests[-1]["messages"])
    assert all(f"remember {word}" in sent for word in words)
    assert sent.count("remember alpha") == 1  # each turn once, in order
    assert [sent.index(f"remember {w}") for w in words] == sorted(
        sent.index(f"remember {w}") for w in words)


def strip_lane(turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "stream_id"} for e in turn]


def test_store_true_continuation_survives_eviction(gateway: GatewayServer) -> None:
    turns = session(gateway, [
        create("stored"),
        lambda t: create("fork", model="script/error status=400",
                         previous_response_id=final(t[0])["id"]),
        lambda t: create("again", previous_response_id=final(t[0])["id"]),
    ])
    completed(turns[0])
    completed(turns[2])  # the store still has it

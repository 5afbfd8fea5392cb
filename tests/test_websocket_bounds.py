"""What one WebSocket connection may make the gateway hold or do (issue 27), and that nothing a
client does is logged as a server error.

Memory and logs are a process's: those tests run ``responses-gateway serve`` as a child
(:class:`GatewayProcess`), read its RSS from ``/proc`` and its stderr. The rest run the
gateway in-thread (:class:`GatewayServer`) in front of the scripted upstream.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.helpers.e2e import MODEL, e2e_settings
from tests.helpers.gateway_process import GatewayProcess
from tests.helpers.gateway_server import GatewayServer
from tests.test_websocket import (
    TERMINAL,
    check_ws_event,
    completed,
    create,
    error_code,
    final,
    read_turn,
    session,
    strip_lane,
    ws_url,
)

pytestmark = pytest.mark.slow

NOISE = ("ASGI callable returned without completing handshake", "Exception in ASGI application",
         "Traceback", "unhandled error", '"level":"ERROR"')


@pytest.fixture(scope="module")
def gateway(upstream: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("ws-bounds") / "gateway.db"
    settings = e2e_settings(upstream, db, ws_max_streams=4, ws_max_remembered_bytes=64 * 1024)
    with GatewayServer(settings) as server:
        yield server


def read_until(ws: ClientConnection, done: Any, timeout: float = 30) -> list[dict[str, Any]]:
    """Messages until ``done(events)`` holds."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not done(events):
        event = json.loads(ws.recv(timeout=max(deadline - time.monotonic(), 0.1)))
        check_ws_event(event)
        events.append(event)
    return events


def terminal_of(events: list[dict[str, Any]], lane: str) -> int | None:
    for index, event in enumerate(events):
        if event.get("stream_id") == lane and event["type"] in TERMINAL:
            return index
    return None


# -- lanes never block the receive loop ----------------------------------------------------------


def test_a_second_lane_and_a_steer_are_answered_while_a_lane_streams(
    gateway: GatewayServer,
) -> None:
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("[[script:slow delay=0.2 n=15]] long", stream_id="a")))
        ws.send(json.dumps(create("queued behind the long one", stream_id="a")))
        ws.send(json.dumps(create("b", stream_id="b")))
        ws.send(json.dumps({"type": "response.steer", "previous_response_id": "resp_x",
                            "input": "go left"}))
        events = read_until(ws, lambda e: terminal_of(e, "b") is not None and any(
            x["type"] == "response.steer.failed" for x in e))
        steer = next(i for i, e in enumerate(events) if e["type"] == "response.steer.failed")
        assert terminal_of(events, "a") is None, "b and the steer waited for lane a"
        events += read_until(ws, lambda e: sum(
            1 for x in e if x.get("stream_id") == "a" and x["type"] in TERMINAL) == 2)
    lane_a = [e for e in events if e.get("stream_id") == "a"]
    ends = [i for i, e in enumerate(lane_a) if e["type"] in TERMINAL]
    completed(strip_lane(lane_a[:ends[0] + 1]))  # FIFO: the first one whole, then the second
    completed(strip_lane(lane_a[ends[0] + 1:]))
    assert steer >= 0


def test_creates_past_the_active_bound_are_refused(gateway: GatewayServer) -> None:
    """OpenAI allows 16 active responses per connection: 20 creates on one lane while the
    first streams are 16 responses and 4 refusals, in order."""
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps(create("[[script:slow delay=0.1 n=20]] first", stream_id="q",
                                  store=False)))
        for index in range(19):
            ws.send(json.dumps(create(f"next {index}", stream_id="q", store=False,
                                      generate=False)))
        events = read_until(ws, lambda e: sum(
            1 for x in e if x["type"] in TERMINAL or x["type"] == "error") == 20)
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 4
    for error in errors:
        assert error["status"] == 429 and error["stream_id"] == "q"
        assert error["error"]["code"] == "too_many_queued_responses"
    assert sum(1 for e in events if e["type"] == "response.completed") == 16
    assert events.index(errors[-1]) < terminal_of(events, "q")  # refused at once


def test_named_streams_are_bounded(gateway: GatewayServer) -> None:
    # The module's gateway allows 4 named streams per connection.
    turns = session(gateway, [create(f"lane {n}", stream_id=f"s{n}", generate=False)
                              for n in range(5)] + [create("an old lane", stream_id="s0")])
    for turn in turns[:4]:
        completed(strip_lane(turn))
    [refusal] = turns[4]
    assert refusal["status"] == 400 and refusal["error"]["code"] == "too_many_streams"
    assert refusal["error"]["param"] == "stream_id"
    completed(strip_lane(turns[5]))  # a known stream still works


def test_steering_state_is_kept_for_the_lanes_in_use_only(gateway: GatewayServer) -> None:
    """A lane whose response failed is no stream any more (nothing runs or is remembered in
    it), so a client may go on with new ``stream_id`` values for ever: what the connection
    keeps to answer a late steer is kept for as many lanes as may be in use at once (4 named
    here, and the unnamed one), the most recent, not one entry per ``stream_id`` ever sent."""
    failing = "[[script:error status=500]] fail"
    with connect(ws_url(gateway)) as ws:
        ids = []
        for n in range(7):
            ws.send(json.dumps(create(failing, stream_id=f"gone-{n}")))
            turn = read_turn(ws)
            assert turn[-1]["type"] == "response.failed", turn[-1]
            ids.append(turn[-1]["response"]["id"])
        for response_id, code in ((ids[0], "response_not_found"), (ids[1], "response_not_found"),
                                  (ids[2], "response_not_active"),
                                  (ids[-1], "response_not_active")):
            ws.send(json.dumps({"type": "response.steer", "previous_response_id": response_id,
                                "input": "late"}))
            failed = json.loads(ws.recv(timeout=10))
            check_ws_event(failed)
            assert failed["type"] == "response.steer.failed", failed
            assert failed["error"]["code"] == code, (response_id, failed)


# -- what a connection remembers ----------------------------------------------------------------


def test_remembered_bytes_are_bounded(gateway: GatewayServer, upstream: Any) -> None:
    # 64 KiB remembered per connection here: a 100 KB response is not remembered; two 40 KB
    # ones in two lanes do not fit together, the one remembered longest ago is forgotten.
    big, mid = "x" * 100_000, "y" * 40_000
    turns = session(gateway, [
        create(big, store=False, generate=False),
        lambda t: create("after big", store=False, previous_response_id=final(t[0])["id"]),
        create(mid, store=False, generate=False, stream_id="m1"),
        create(mid, store=False, generate=False, stream_id="m2"),
        lambda t: create("after m1", store=False, previous_response_id=final(t[2])["id"]),
        lambda t: create("after m2", store=False, previous_response_id=final(t[3])["id"]),
    ])
    assert error_code(turns[1]) == "previous_response_not_found"
    assert error_code(turns[4]) == "previous_response_not_found"
    completed(turns[5])
    assert mid in json.dumps(upstream.requests[-1]["messages"])


# -- memory of one connection, measured ----------------------------------------------------------


def test_thousands_of_creates_hold_rss_under_a_bound(upstream: Any, tmp_path: Path) -> None:
    """Issue 27's reproduction, smaller: 2,000 ``response.create`` with a 256 KiB input,
    ``store: false, generate: false``, in 9 lanes, on one connection. Before, each response
    stayed in memory (about 500 MiB here); now each lane's most recent one: the gateway's RSS
    grows by less than 64 MiB after a warm-up."""
    env = {"GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_STORE": f"sqlite:{tmp_path}/g.db",
           "GATEWAY_MAX_RETRIES": "0", "GATEWAY_LOG_LEVEL": "warning"}
    text = "z" * (256 * 1024)
    started = time.monotonic()
    with GatewayProcess(env, tmp_path) as gw, connect(gw.ws_url, max_size=None) as ws:

        def turns(count: int, offset: int) -> None:
            for n in range(offset, offset + count):
                lane = {} if n % 9 == 0 else {"stream_id": f"lane{n % 9}"}
                ws.send(json.dumps(create([{"role": "user", "content": f"{n} {text}"}],
                                          store=False, generate=False, **lane)))
                turn = read_turn(ws)
                assert turn[-1]["type"] == "response.completed", turn[-1]

        turns(100, 0)
        baseline = gw.rss_bytes()
        turns(1900, 100)
        grown = gw.rss_bytes() - baseline
    assert grown < 64 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB"
    assert time.monotonic() - started < 240


# -- nothing a client does is a server error in the log ------------------------------------------


def test_refused_upgrades_and_clients_leaving_are_not_logged_as_errors(
    upstream: Any, tmp_path: Path
) -> None:
    env = {"GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_STORE": f"sqlite:{tmp_path}/g.db",
           "GATEWAY_MAX_RETRIES": "0", "GATEWAY_API_KEYS": "gw-key"}
    key = {"Authorization": "Bearer gw-key"}
    with GatewayProcess(env, tmp_path) as gw:
        for headers in ({}, {"Authorization": "Bearer wrong"}):  # 1: refused upgrades
            with pytest.raises(InvalidStatus) as refused:
                connect(gw.ws_url, additional_headers=headers)
            assert refused.value.response.status_code == 401
        for abrupt in (False, True):  # 2: clients leaving while events are sent
            ws = connect(gw.ws_url, additional_headers=key)
            for lane in "abc":
                ws.send(json.dumps(create("[[script:slow delay=0.002 n=2000]] x",
                                          stream_id=lane)))
            ws.recv(timeout=10)
            if abrupt:
                ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                ws.socket.close()
            else:
                ws.close()
        with socket.create_connection(("127.0.0.1", gw.port)) as raw:  # 3: an upload left
            raw.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                        b"gw-key\r\nContent-Type: application/json\r\nContent-Length: 100000"
                        b"\r\n\r\n" + b'{"model": "' + MODEL.encode() + b'", "input": "')
            time.sleep(0.3)
        time.sleep(2)
        log = gw.stderr()
    assert "rejected (401" in log and "[accepted]" in log  # the log is the gateway's
    for line in NOISE:
        assert line not in log, log

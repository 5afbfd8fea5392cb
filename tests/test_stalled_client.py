"""A client that stops reading is taken as gone (GATEWAY_SEND_TIMEOUT_SECONDS).

Writes to a client wait for it (flow control), so a reader that stops, connection still
open, would otherwise hold its response and the upstream request under it for ever: the
response's own deadline never fires while a write waits. The upstream here sends 64 MB, far
more than the socket buffers between it, the gateway and a stopped reader hold (Linux grows a
loopback socket's receive buffer up to tcp_rmem's maximum, 32 MB on this machine), so the
gateway's writes do wait; past the send timeout the upstream request must be closed and the stored
response end ``cancelled``, as on a disconnect, with no error logged for it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.helpers.e2e import MODEL, client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream, StreamRecord

pytestmark = pytest.mark.slow

SEND_TIMEOUT = 1.0
HUGE = "[[script:huge size=64000000 piece=1000 random=1 key={key}]] go"


@pytest.fixture(autouse=True)
def no_drain_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write may also wait for the message before it to drain at the slowest reading rate
    (stalled_client.write_deadline; tests/test_faults.py covers it): here a batch of this
    fast stream can be hundreds of KB, so that allowance is taken away to time the stall
    itself."""
    from responses_gateway.api import stalled_client

    monkeypatch.setattr(stalled_client, "SLOWEST_READ", 10**12)


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    settings = e2e_settings(upstream, tmp_path_factory.mktemp("stall") / "g.db",
                            send_timeout_seconds=SEND_TIMEOUT, keepalive_seconds=15.0)
    with GatewayServer(settings) as server:
        yield server


def _stopping_reader(server: GatewayServer) -> OpenAI:
    """openai-python on a socket with a small receive buffer: left to itself Linux may grow
    it up to tcp_rmem's maximum (32 MB here), and then the buffers could hold the whole
    stream: the upstream finished a 30 MB one in 0.7 s on a loaded machine once, before the
    gateway's writes ever waited."""
    small = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)])
    return client_for(server, http_client=httpx.Client(transport=small, timeout=30))


def _upstream_stream(upstream: ScriptedUpstream, key: str) -> StreamRecord:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        records = [s for s in upstream.streams if f"key={key}" in s.script]
        if records:
            return records[0]
        time.sleep(0.02)
    raise AssertionError(f"the upstream never saw {key}")


def _closed_by_the_gateway(record: StreamRecord, within: float) -> None:
    deadline = time.monotonic() + within
    while record.closed_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.closed_at is not None, "the upstream request is still open"
    assert record.client_disconnected and not record.completed


def _stored_status(client: OpenAI, response_id: str) -> str:
    deadline = time.monotonic() + 15  # written as the job closes, on a loaded machine
    status = client.responses.retrieve(response_id).status
    while status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.1)
        status = client.responses.retrieve(response_id).status
    return str(status)


def _gave_up_logged(caplog: pytest.LogCaptureFixture, seconds: float = 10) -> bool:
    """Whether the gateway said it took the client as gone, within ``seconds``: an SSE
    response says so only once its source is closed (the stored write and the upstream's
    close come first), so the test may see those before the line."""
    deadline = time.monotonic() + seconds
    while not any("read nothing for" in r.getMessage() for r in caplog.records):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _unfinished_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR or "without completing" in r.getMessage()]


def test_an_sse_client_that_stops_reading_lets_go_of_its_response(
    gateway: GatewayServer, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """openai-python, unmodified: the stream is opened, one event read, then left unread."""
    caplog.set_level(logging.WARNING)
    client = _stopping_reader(gateway)
    stream = client.responses.create(model=MODEL, input=HUGE.format(key="stall-sse"),
                                     stream=True)
    first = next(iter(stream))
    assert first.type == "response.created"
    record = _upstream_stream(upstream, "stall-sse")
    # nothing more is read: the buffers fill, the gateway's write waits, then gives up
    _closed_by_the_gateway(record, within=SEND_TIMEOUT + 15)
    assert _stored_status(client, first.response.id) == "cancelled"
    assert _gave_up_logged(caplog)
    assert _unfinished_lines(caplog) == []
    stream.close()


def test_a_reading_client_is_not_cut_by_the_send_timeout(
    gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    """A slow upstream (quiet for longer than the send timeout) is no stalled client."""
    client = client_for(gateway)
    events = list(client.responses.create(
        model=MODEL, input="[[script:text text=late first_delay=2.5]]", stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "late"


def _ws_frame(payload: bytes) -> bytes:
    """One masked text frame, as a client sends it (RFC 6455)."""
    mask = os.urandom(4)
    head = bytes([0x81])
    if len(payload) < 126:
        head += bytes([0x80 | len(payload)])
    else:
        head += bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_a_websocket_client_that_stops_reading_lets_go_of_its_response(
    gateway: GatewayServer, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw socket: the handshake, one response.create, then nothing read (a WebSocket
    library would keep reading into its own queue)."""
    caplog.set_level(logging.WARNING)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    try:
        sock.sendall(b"GET /v1/responses HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer sk-test\r\n\r\n")
        assert sock.recv(12).startswith(b"HTTP/1.1 101")
        create = {"type": "response.create", "model": MODEL,
                  "input": HUGE.format(key="stall-ws"), "store": True}
        sock.sendall(_ws_frame(json.dumps(create).encode()))
        received = b""
        while b'"resp_' not in received:  # response.created's id, then nothing more read
            received += sock.recv(4096)
        response_id = "resp_" + received.split(b'"resp_', 1)[1].split(b'"', 1)[0].decode()
        record = _upstream_stream(upstream, "stall-ws")
        _closed_by_the_gateway(record, within=SEND_TIMEOUT + 15)
    finally:
        sock.close()
    assert _gave_up_logged(caplog)
    assert _unfinished_lines(caplog) == []
    assert _stored_status(client_for(gateway), response_id) == "cancelled"


def test_no_send_timeout_means_no_limit(tmp_path: Path, upstream: ScriptedUpstream) -> None:
    """``0`` keeps the old behaviour: a write may wait for as long as the client takes."""
    settings = e2e_settings(upstream, tmp_path / "g.db", send_timeout_seconds=0.0)
    with GatewayServer(settings) as server:
        client = _stopping_reader(server)
        stream = client.responses.create(model=MODEL, input=HUGE.format(key="stall-none"),
                                         stream=True)
        next(iter(stream))
        record = _upstream_stream(upstream, "stall-none")
        time.sleep(SEND_TIMEOUT + 2)
        assert record.closed_at is None  # still held: the client may yet read
        stream.close()
        _closed_by_the_gateway(record, within=15)  # a stalled write, a loaded machine

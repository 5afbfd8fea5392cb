"""The upstream transport (backends/http11.py over backends/sockets.py) under httpx.

Raw asyncio servers on 127.0.0.1 play the upstream so each behaviour (framing, pacing, stalls,
resets, closed idle connections, a slow reader, a slow writer, TLS, the pool's bound) is exact;
the end-to-end tests at the bottom put the gateway in front of an https scripted upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import itertools
import json
import socket
import ssl
import struct
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import trustme
from hypothesis import given
from hypothesis import strategies as st
from openai import APIStatusError, OpenAI

from responses_gateway.backends import http11
from responses_gateway.backends import sockets as network
from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.http11 import Http11Transport, install, new_client
from responses_gateway.backends.openai_compat import OpenAICompatBackend
from responses_gateway.config import Settings
from tests.helpers.e2e import e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import failed_code
from tests.helpers.scripted_upstream import ScriptedUpstream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _client(**kwargs: object) -> httpx.AsyncClient:
    client = httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=1.0))
    assert install(client, Http11Transport(**kwargs)), "httpx's layout changed: not installed"  # type: ignore[arg-type]
    return client


def _connection(response: httpx.Response) -> network.Connection:
    return response.stream._stream._connection  # type: ignore[attr-defined]


async def _serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> asyncio.Server:
    return await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_context)


@contextlib.asynccontextmanager
async def _streamed(handler: Handler) -> AsyncIterator[httpx.Response]:
    """A streamed POST to a server running ``handler``, through the protocol backend."""
    server = await _serve(handler)
    async with (
        server,
        _client() as client,
        client.stream("POST", _url(server), content=b"{}") as response,
    ):
        yield response


def _url(server: asyncio.Server, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(head, body) of one request with a content-length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length) if length else b""


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def test_installs_as_the_direct_transport_and_keeps_the_proxy_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = httpx.AsyncClient()
    transport = Http11Transport()
    assert install(client, transport)
    assert client._transport is transport
    assert client._transport_for_url(httpx.URL("http://example.com/")) is transport
    assert isinstance(client._transport_for_url(httpx.URL("https://example.com/")),
                      httpx.AsyncHTTPTransport)  # the proxy's: httpx's own
    assert not install(httpx.AsyncClient(transport=httpx.MockTransport(lambda r: None)),  # type: ignore[arg-type,return-value]
                       transport)


def test_new_client_keeps_the_proxies_and_builds_no_transport_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No proxy in the environment: the transport is the client's only one (httpx builds
    none of its own, which would import httpcore on a cold start's first create). A proxy:
    httpx's transport per proxy, this one for what goes direct."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost")
    transport = Http11Transport()
    client = new_client(transport)
    assert client._transport is transport
    assert all(mounted is None for mounted in client._mounts.values())
    assert client._transport_for_url(httpx.URL("https://example.com/")) is transport

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = new_client(transport)
    assert client._transport_for_url(httpx.URL("http://example.com/")) is transport
    assert isinstance(client._transport_for_url(httpx.URL("https://example.com/")),
                      httpx.AsyncHTTPTransport)  # the proxy's: httpx's own
    assert client._transport_for_url(httpx.URL("https://localhost/")) is transport  # NO_PROXY


def test_the_gateway_backend_sends_through_it() -> None:
    async def main() -> None:
        backend = OpenAICompatBackend("http://127.0.0.1:9/v1", None, max_retries=0)
        assert isinstance(backend._http()._transport, Http11Transport)
        await backend.aclose()

    asyncio.run(main())


def test_the_completion_post_goes_straight_to_the_transport_and_replays_no_cookie() -> None:
    """The backend's POST skips httpx's client (``_post``): the same headers reach the
    upstream, and a cookie one response sets is not sent on the next (another tenant's)."""
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, _ = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            heads.append(head.lower())
            body = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"set-cookie: lb=tenant-a; Path=/\r\ntransfer-encoding: chunked\r\n\r\n"
                         + _chunk(body) + b"0\r\n\r\n")
            await writer.drain()

    async def main() -> None:
        server = await _serve(handler)
        backend = OpenAICompatBackend(_url(server) + "v1", "sk-upstream", max_retries=0,
                                      dialect="generic")
        request = BackendRequest(body={"model": "m", "stream": True, "messages": []}, tenant="t")
        async with server:
            for _ in range(2):
                chunks = [chunk async for batch in backend.stream(request) for chunk in batch]
                assert b'"hi"' in chunks[0]
            sent = backend._http()
            assert backend._direct is sent._transport  # the direct path was the one taken
        await backend.aclose()
        assert len(heads) == 2
        for head in heads:
            assert head.startswith(b"post /v1/chat/completions http/1.1\r\n")
            for header in (b"authorization: bearer sk-upstream", b"content-type: application/json",
                           b"accept: application/json", b"user-agent: python-httpx/",
                           b"content-length: ", b"host: 127.0.0.1:"):
                assert b"\r\n" + header in head, (header, head)
        assert b"cookie:" not in heads[1]

    asyncio.run(main())


def test_a_proxy_from_the_environment_still_carries_the_upstream_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request_lines: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await _read_request(reader)
        request_lines.append(head.split(b"\r\n")[0])
        body = b'data: {"choices":[{"index":0,"delta":{"content":"via proxy"}}]}\n\n'
        writer.write(CHUNKED_HEAD + _chunk(body) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await _serve(proxy)
        monkeypatch.setenv("HTTP_PROXY", _url(server).rstrip("/"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        backend = OpenAICompatBackend("http://upstream.invalid/v1", None, max_retries=0)
        request = BackendRequest(body={"model": "m", "stream": True, "messages": []}, tenant="t")
        async with server:
            chunks = [chunk async for batch in backend.stream(request) for chunk in batch]
        await backend.aclose()
        # Every request went through the proxy (absolute form), the chat completion among them.
        assert all(line.split(b" ")[1].startswith(b"http://upstream.invalid/v1/")
                   for line in request_lines)
        assert b"POST http://upstream.invalid/v1/chat/completions HTTP/1.1" in request_lines
        assert b"via proxy" in chunks[0]

    asyncio.run(main())


@pytest.mark.slow
def test_the_chunks_of_one_read_come_as_one_batch() -> None:
    """What arrives together travels together: the gateway sends it on in one write."""
    more = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        events = [b'data: {"choices":[{"index":0,"delta":{"content":"%d"}}]}\n\n' % i
                  for i in range(5)]
        writer.write(CHUNKED_HEAD + b"".join(map(_chunk, events)))  # one write
        await writer.drain()
        await more.wait()
        writer.write(_chunk(b'data: {"choices":[{"index":0,"delta":{"content":"5"}}]}\n\n'))
        await writer.drain()
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> list[list[bytes]]:
        server = await _serve(handler)
        backend = OpenAICompatBackend(_url(server).rstrip("/"), None, max_retries=0)
        request = BackendRequest(body={"model": "m", "stream": True, "messages": []})
        batches: list[list[bytes]] = []
        async with server:
            async for batch in backend.stream(request):
                batches.append(batch)  # type: ignore[arg-type]
                more.set()
        await backend.aclose()
        return batches

    batches = asyncio.run(main())
    assert [len(batch) for batch in batches] == [5, 1]
    texts = [json.loads(chunk)["choices"][0]["delta"]["content"]
             for batch in batches for chunk in batch]
    assert texts == ["0", "1", "2", "3", "4", "5"]


def test_paced_chunks_arrive_in_order_and_the_connection_is_reused() -> None:
    peers: list[tuple[str, int]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        for _ in range(2):
            await _read_request(reader)
            writer.write(CHUNKED_HEAD)
            for i in range(20):
                writer.write(_chunk(b"data: %d\n\n" % i))
                await writer.drain()
                await asyncio.sleep(0.002)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    async def main() -> None:
        server = await _serve(handler)
        async with server, _client() as client:
            for _ in range(2):
                async with client.stream("POST", _url(server), content=b"{}") as response:
                    body = b"".join([piece async for piece in response.aiter_raw()])
                assert body == b"".join(b"data: %d\n\n" % i for i in range(20))
        assert len(peers) == 1  # keep-alive: both requests on one connection

    asyncio.run(main())


@pytest.mark.slow
def test_a_stall_past_the_read_timeout_is_a_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(CHUNKED_HEAD + _chunk(b"data: 1\n\n"))
        await asyncio.sleep(3)
        writer.close()

    async def main() -> None:
        async with _streamed(handler) as response:
            pieces = response.aiter_raw()
            assert await anext(pieces) == b"data: 1\n\n"
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(httpx.ReadTimeout):
                await anext(pieces)
            assert 0.9 <= loop.time() - started < 2.5

    asyncio.run(main())


def test_a_close_mid_body_and_a_reset_are_errors_not_an_end() -> None:
    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(CHUNKED_HEAD + _chunk(b"data: 1\n\n"))
        await writer.drain()
        writer.close()

    async def resets(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(CHUNKED_HEAD + _chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # RST

    async def main() -> None:
        for handler, errors in ((closes, httpx.RemoteProtocolError),
                                (resets, (httpx.ReadError, httpx.RemoteProtocolError))):
            async with _streamed(handler) as response:
                with pytest.raises(errors):
                    async for _ in response.aiter_raw():
                        pass

    asyncio.run(main())


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    peers: list[tuple[str, int]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # an idle keep-alive connection, closed by the server

    async def main() -> None:
        server = await _serve(handler)
        async with server, _client() as client:
            assert (await client.post(_url(server), content=b"{}")).text == "ok"
            await asyncio.sleep(0.2)
            assert (await client.post(_url(server), content=b"{}")).text == "ok"
        assert len(peers) == 2 and peers[0] != peers[1]

    asyncio.run(main())


def test_a_close_the_loop_has_not_seen_yet_still_marks_the_connection_stale() -> None:
    """As after a frozen Lambda thaws: the FIN is in the kernel, no loop callback has run."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        conn.close()

    async def main() -> None:
        thread = threading.Thread(target=serve)
        thread.start()
        host, port = listener.getsockname()[:2]
        connection = await network.connect(host, port, ssl_context=None, timeout=5)
        thread.join()
        time.sleep(0.05)  # blocks the loop: eof_received has not been called
        assert not connection.eof
        assert connection.stale()
        connection.close()

    try:
        asyncio.run(main())
    finally:
        listener.close()


def test_a_slow_reader_holds_the_upstream_back_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(network, "HIGH_WATER", 64 * 1024)
    payload = bytes(range(256)) * 8 * 1024  # 2 MiB
    paused: list[bool] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload))
        for i in range(0, len(payload), 16 * 1024):
            writer.write(payload[i : i + 16 * 1024])
            await writer.drain()
        writer.close()

    async def main() -> None:
        async with _streamed(handler) as response:
            reader = _connection(response)
            got = bytearray()
            async for piece in response.aiter_raw():
                got += piece
                await asyncio.sleep(0.005)  # a slow client: the upstream runs ahead meanwhile
                paused.append(reader.paused)
                # never more than the mark plus one socket read is held
                assert reader.size <= network.HIGH_WATER + 256 * 1024
        assert bytes(got) == payload
        assert any(paused) and not reader.paused

    asyncio.run(main())


def test_a_large_request_waits_for_a_slow_server() -> None:
    body = b"x" * (8 * 1024 * 1024)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.3)  # the client's kernel buffers fill: its writes must wait
        _, received = await _read_request(reader)
        answer = str(len(received)).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await _serve(handler)
        async with server, _client() as client:
            response = await client.post(_url(server), content=body)
            assert response.text == str(len(body))

    asyncio.run(main())


def test_a_refused_connection_is_a_connect_error() -> None:
    async def main() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # bound, never listening: refused
            async with _client() as client:
                with pytest.raises(httpx.ConnectError):
                    await client.post(f"http://127.0.0.1:{port}/", content=b"{}")

    asyncio.run(main())


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_tls_verifies_the_server_and_streams(ca: trustme.CA) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(CHUNKED_HEAD)
        for i in range(50):
            writer.write(_chunk(b"data: %d\n\n" % i))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await _serve(handler, server_context)
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        async with server:
            async with _client(ssl_context=trusted) as client:
                async with client.stream("POST", _url(server, "https"), content=b"{}") as r:
                    assert _connection(r).transport.get_extra_info("ssl_object") is not None  # type: ignore[union-attr]
                    body = b"".join([piece async for piece in r.aiter_raw()])
                assert body == b"".join(b"data: %d\n\n" % i for i in range(50))
            async with _client() as untrusting:  # certifi's roots: our CA is unknown
                with pytest.raises(httpx.ConnectError):
                    await untrusting.post(_url(server, "https"), content=b"{}")

    asyncio.run(main())


def test_the_read_timeout_timer_is_cancelled_when_data_comes() -> None:
    """A read that waited and got data leaves no timer behind to fire into a later read."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        connection = network.Connection()
        connection.connection_made(_NullTransport())
        loop.call_later(0.01, connection.data_received, b"a")
        assert await connection.read(0.05) == b"a"
        await asyncio.sleep(0.1)  # past the first read's timeout
        loop.call_later(0.01, connection.data_received, b"b")
        assert await connection.read(1.0) == b"b"
        connection.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(httpx.ReadError):
            await connection.read(1.0)

    asyncio.run(main())


def test_one_timer_serves_many_reads_and_a_shorter_timeout_still_fires() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        connection = network.Connection()
        connection.connection_made(_NullTransport())
        timers = []
        for i in range(5):  # reads that wait and get data re-use the one timer
            loop.call_later(0.002, connection.data_received, b"%d" % i)
            assert await connection.read(30.0) == b"%d" % i
            timers.append(connection.timer)
        assert timers[0] is not None and all(t is timers[0] for t in timers)
        started = loop.time()
        with pytest.raises(httpx.ReadTimeout):
            await connection.read(0.1)  # armed for 30 s: a 0.1 s wait must not wait that long
        assert 0.09 <= loop.time() - started < 1.0
        connection.close()
        assert connection.timer is None

    asyncio.run(main())


def test_a_read_takes_everything_buffered() -> None:
    async def main() -> None:
        connection = network.Connection()
        connection.connection_made(_NullTransport())
        for piece in (b"abc", b"de", b"f"):
            connection.data_received(piece)
        assert await connection.read(None) == b"abcdef"
        assert connection.size == 0
        connection.data_received(b"gh")
        assert await connection.read(None) == b"gh"
        connection.eof_received()
        assert await connection.read(None) == b""

    asyncio.run(main())


# -- HTTP/1.1 framing ----------------------------------------------------------------------


class _Reads:
    """A connection whose reads return the given bytes one read at a time, then the end."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads[::-1]

    async def read(self, timeout: float | None) -> bytes:
        return self.reads.pop() if self.reads else b""


def _parse(
    reads: list[bytes], head_only: bool = False
) -> tuple[http11._Response, list[bytes], httpx.RemoteProtocolError | None]:
    """(the parsed response, the body pieces the transport yields, the error it raised)."""

    async def main() -> tuple[http11._Response, list[bytes], httpx.RemoteProtocolError | None]:
        connection = _Reads(reads)
        response, parser = await http11._read_head(connection, None, head_only)  # type: ignore[arg-type]
        body = http11._Body(None, (b"http", "h", 80), connection, response, parser, None)  # type: ignore[arg-type]
        pieces: list[bytes] = []
        try:
            async for piece in body:
                pieces.append(piece)
        except httpx.RemoteProtocolError as exc:
            return response, pieces, exc
        return response, pieces, None

    return asyncio.run(main())


def _split(wire: bytes, cuts: list[int]) -> list[bytes]:
    bounds = sorted({0, len(wire), *(c for c in cuts if c < len(wire))})
    return [wire[start:stop] for start, stop in itertools.pairwise(bounds)]


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    extension=st.sampled_from([b"", b";name=value", b';a=1;b="q u"']),
    trailers=st.sampled_from([b"", b"x-trailer: 1\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=12),
)
def test_chunked_bodies_decode_however_the_reads_split_them(
    pieces: list[bytes], extension: bytes, trailers: bytes, cuts: list[int]
) -> None:
    wire = CHUNKED_HEAD + b"".join(b"%X%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces)
    wire += b"0%s\r\n%s\r\n" % (extension, trailers)
    reads = _split(wire, cuts)
    response, got, error = _parse(reads)
    assert error is None
    assert b"".join(got) == b"".join(pieces)
    assert len(got) <= len(reads)  # at most one piece per read, however many chunks it held
    assert response.done and response.reusable
    assert response.headers == [(b"content-type", b"text/event-stream"),
                                (b"transfer-encoding", b"chunked")]  # no trailer


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=6),
    broken=st.sampled_from([b"zz\r\n", b"3\r\nabcXY", b"-1\r\n", b"3 ; x\r\nabc\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_what_came_before_a_framing_error_arrives_before_it(
    pieces: list[bytes], broken: bytes, cuts: list[int]
) -> None:
    wire = CHUNKED_HEAD + b"".join(map(_chunk, pieces)) + broken
    _, got, error = _parse(_split(wire, cuts))
    assert isinstance(error, httpx.RemoteProtocolError)
    whole = b"".join(got)
    assert whole.startswith(b"".join(pieces))  # "3\r\nabcXY" also gives its "abc"
    assert len(whole) - len(b"".join(pieces)) <= 3


@pytest.mark.parametrize("wire", [
    b"zz\r\n", b"-1\r\nx\r\n", b"3\r\nabcXY", b"0x3\r\nabc\r\n", b"1" * 5000,
])
def test_malformed_chunked_bodies_are_protocol_errors(wire: bytes) -> None:
    _, _, error = _parse([CHUNKED_HEAD + wire])
    assert isinstance(error, httpx.RemoteProtocolError)
    assert str(error).startswith("malformed response from the upstream: ")


@pytest.mark.parametrize(("wire", "body", "reusable"), [
    (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", b"ok", True),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n", b"ok", False),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokjunk", b"ok", False),
    (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nokjunk", b"ok", False),
    (CHUNKED_HEAD + _chunk(b"ok") + b"0\r\n\r\n" + CHUNKED_HEAD, b"ok", False),
    (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", b"ok", False),
    (b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok", b"ok", True),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nuntil the close", b"until the close",
     False),
    (b"HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n", b"", True),
], ids=["length", "a-second-response", "junk", "junk-after-close", "chunked-then-more",
        "http1.0", "http1.0-keep-alive", "until-close", "304"])
def test_what_follows_a_whole_response_is_never_body_and_stops_reuse(
    wire: bytes, body: bytes, reusable: bool
) -> None:
    response, got, error = _parse([wire])
    assert error is None
    assert b"".join(got) == body
    assert response.done and response.reusable is reusable


def test_a_parsed_response_is_freed_without_the_garbage_collector() -> None:
    """The parser refers to its callbacks: a cycle left to gc (run rarely here) would pile up."""
    gc.disable()
    try:
        response, got, error = _parse([CHUNKED_HEAD + _chunk(b"ok") + b"0\r\n\r\n"])
        assert (got, error) == ([b"ok"], None)
        freed = weakref.ref(response)
        del response
        assert freed() is None
    finally:
        gc.enable()


def test_a_head_response_has_no_body_whatever_it_declares() -> None:
    response, got, error = _parse([b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n"], True)
    assert (error, got, response.done, response.reusable) == (None, [], True, True)
    response, got, error = _parse([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"], True)
    assert (error, got, response.done, response.reusable) == (None, [], True, False)


def test_bodies_framed_every_way_arrive_whole_and_reuse_what_they_may() -> None:
    peers: list[tuple[str, int]] = []
    payload = b'data: {"x": 1}\n\n' * 30

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        while True:
            try:
                head, _ = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            path = head.split(b" ")[1]
            if path == b"/length":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(payload), payload))
            elif path == b"/trickle":  # a chunked body one byte per write, 100 Continue first
                wire = (b"HTTP/1.1 100 Continue\r\n\r\n" + CHUNKED_HEAD
                        + _chunk(payload[:100]) + _chunk(payload[100:]) + b"0\r\n\r\n")
                for i in range(len(wire)):
                    writer.write(wire[i:i + 1])
                    await writer.drain()
                    if i % 50 == 0:
                        await asyncio.sleep(0)
            elif path == b"/gzip":
                packed = gzip.compress(payload)
                head = CHUNKED_HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: gzip\r\n\r\n")
                writer.write(head + _chunk(packed[:10]) + _chunk(packed[10:]) + b"0\r\n\r\n")
            elif path == b"/empty":
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            elif path == b"/close-header":
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
                writer.close()
                return
            else:  # framed by the connection's close
                writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + payload)
                await writer.drain()
                writer.close()
                return
            await writer.drain()

    async def main() -> None:
        server = await _serve(handler)
        base = _url(server)
        async with server, _client() as client:
            for path in ("length", "trickle", "gzip", "empty"):  # one connection for all four
                expected = b"" if path == "empty" else payload
                response = await client.post(base + path, content=b"{}")
                assert response.content == expected, path
                # what the backend reads: straight from the transport unless httpx must decode
                async with client.stream("POST", base + path, content=b"{}") as streamed:
                    pieces = http11.body_pieces(streamed)
                    direct = getattr(pieces, "ag_code", None) is http11._Body.__aiter__.__code__
                    assert direct == (path != "gzip"), path
                    assert b"".join([piece async for piece in pieces]) == expected, path
            assert len(peers) == 1
            assert (await client.post(base + "close-header", content=b"{}")).content == b"ok"
            assert (await client.post(base + "until-close", content=b"{}")).content == payload
            assert (await client.post(base + "length", content=b"{}")).content == payload
        assert len(peers) == 3  # neither a connection: close nor a close-framed body is reused

    asyncio.run(main())


@pytest.mark.parametrize("answer", [
    b"HTTP/2 200\r\n\r\n",
    b"nonsense\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: many\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nx: " + b"y" * 70000 + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
], ids=["http2", "nonsense", "header", "length", "huge-head", "cut"])
def test_malformed_or_cut_responses_are_protocol_errors(answer: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await _serve(handler)
        async with server, _client() as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(_url(server), content=b"{}")

    asyncio.run(main())


def test_a_body_left_unread_closes_its_connection_and_frees_its_slot() -> None:
    closed = asyncio.Event()
    peers: list[tuple[str, int]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        await _read_request(reader)
        writer.write(CHUNKED_HEAD + _chunk(b"data: 1\n\n"))
        await writer.drain()
        await reader.read()  # until the client closes
        closed.set()
        writer.close()

    async def main() -> None:
        server = await _serve(handler)
        async with server, _client(max_connections=1) as client:
            for _ in range(2):  # the second request needs the slot the first gave back
                async with client.stream("POST", _url(server), content=b"{}") as response:
                    assert await anext(response.aiter_raw()) == b"data: 1\n\n"
                await asyncio.wait_for(closed.wait(), 2)
                closed.clear()
        assert len(peers) == 2

    asyncio.run(main())


def test_the_pool_bound_makes_a_request_wait_then_time_out() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                await _read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()

    async def main() -> None:
        server = await _serve(handler)
        async with server, _client(max_connections=1) as client:
            held = await client.send(client.build_request("POST", _url(server), content=b"{}"),
                                     stream=True)
            with pytest.raises(httpx.PoolTimeout):
                await client.post(_url(server), content=b"{}", timeout=httpx.Timeout(5, pool=0.2))
            waiting = asyncio.create_task(client.post(_url(server), content=b"{}"))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await held.aread()
            await held.aclose()
            assert (await asyncio.wait_for(waiting, 2)).text == "ok"

    asyncio.run(main())


class _NullTransport(asyncio.Transport):
    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def close(self) -> None:
        pass


# -- end to end: the gateway in front of an https upstream ----------------------------------


@pytest.fixture(scope="module")
def tls_upstream(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("tls")
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file, ca_file = folder / "cert.pem", folder / "key.pem", folder / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    with ScriptedUpstream(tls=(str(cert_file), str(key_file))) as up:
        yield up, ca_file


def test_the_gateway_streams_from_an_https_upstream(
    tls_upstream: tuple[ScriptedUpstream, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    up, ca_file = tls_upstream
    assert up.base_url.startswith("https://")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # how a private CA is trusted
    with GatewayServer(e2e_settings(up, tmp_path / "db.sqlite")) as gw:
        client = OpenAI(base_url=gw.base_url, api_key="x")
        with client.responses.stream(model="script/deltas n=40", input="count") as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
        assert text == "".join(f"{i} " for i in range(40))
        assert final.status == "completed" and final.output_text == text
        retrieved = client.responses.retrieve(final.id)
        assert retrieved.output_text == text


def test_an_untrusted_https_upstream_is_a_clear_502(
    tls_upstream: tuple[ScriptedUpstream, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    up, _ = tls_upstream
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with GatewayServer(e2e_settings(up, tmp_path / "db.sqlite")) as gw:
        client = OpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
        with pytest.raises(APIStatusError) as caught:
            client.responses.create(model="scripted-model", input="hi")
        assert caught.value.status_code == 502
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["code"] == "upstream_unavailable" and "ConnectError" in error["message"]
        # A stream has sent response.created by then: the same error fails the response.
        events = list(client.responses.create(model="scripted-model", input="hi", stream=True))
        assert events[-1].type == "response.failed"
        failed = events[-1].response.error
        assert failed is not None and failed_code(failed) == "upstream_unavailable"
        assert "ConnectError" in failed.message


# -- a framing error keeps what came before it -------------------------------------------------

PIECES = ("one ", "two ", "three ")


def _sse(text: str) -> bytes:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


# Three good chunks and a malformed chunk size line, all in one write: one network read.
BROKEN_CHUNKED = CHUNKED_HEAD + b"".join(_chunk(_sse(t)) for t in PIECES) + b"zz\r\n"


@contextlib.contextmanager
def _raw_upstream(answer: bytes) -> Iterator[str]:
    """A socket server in a thread that answers each POST with ``answer`` in one write (and
    anything else, such as a backend's look at ``GET /models``, with a 404)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def answer_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            if head.startswith(b"POST "):
                conn.sendall(answer)
            else:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nconnection: close\r\n"
                             b"content-length: 0\r\n\r\n")
                return
            with contextlib.suppress(OSError):
                while conn.recv(65536):  # until the gateway closes its side
                    pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_the_pieces_before_a_framing_error_are_read_before_the_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(BROKEN_CHUNKED)
        await writer.drain()
        await reader.read()

    async def main() -> None:
        got = b""
        async with _streamed(handler) as response:
            with pytest.raises(httpx.RemoteProtocolError, match="chunk size"):
                async for piece in http11.body_pieces(response):
                    got += piece
        assert got == b"".join(_sse(t) for t in PIECES)

    asyncio.run(main())


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "background"])
def test_a_framing_error_fails_the_response_with_the_output_before_it(
    tmp_path: Path, stream: bool
) -> None:
    """The terminal response keeps the three pieces (plain httpx kept them too).

    Streaming: the last event is ``response.failed`` holding them. Not streaming: a
    non-stream upstream request would be one JSON document, useless when cut, so the
    non-streaming client that can end with partial output is a background one; its stored
    response, retrieved, is the same ``failed`` response.
    """
    with _raw_upstream(BROKEN_CHUNKED) as url, GatewayServer(Settings(
        upstream_url=url, store=f"sqlite:{tmp_path / 'db.sqlite'}", max_retries=0,
        read_timeout=5.0,
    )) as gw:
        client = OpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
        if stream:
            events = list(client.responses.create(model="m", input="hi", stream=True))
            assert events[-1].type == "response.failed"
            final = events[-1].response
            deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert deltas == "".join(PIECES)
        else:
            final = client.responses.create(model="m", input="hi", background=True)
            deadline = time.monotonic() + 10
            while final.status in ("queued", "in_progress") and time.monotonic() < deadline:
                time.sleep(0.05)
                final = client.responses.retrieve(final.id)
        assert final.status == "failed"
        assert final.error is not None and "upstream connection closed" in final.error.message
        assert final.output_text == "".join(PIECES)
        assert client.responses.retrieve(final.id).output_text == "".join(PIECES)

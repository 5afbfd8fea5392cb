"""A lean HTTP/1.1 transport for httpx: the upstream requests' wire format and connection pool.

Why not httpx's own transport (httpcore + h11): it hands every HTTP chunk up through h11 and
seven generator layers, and an upstream frames each SSE event as its own chunk, so a streamed
completion paid that once per token; its pool also does bookkeeping quadratic in its size on
every request. Under load those were most of the gateway's CPU. No library offers the middle
ground: an httpx transport that un-chunks a whole network read at once.

What this module does itself: the pool, writing the request, and driving the parser once per
network read. What it does not: parse. Responses go through llhttp (Node's HTTP parser, via
``httptools``, which uvicorn already uses): it validates the head, the framing (chunked,
``Content-Length``, until the close) and keep-alive, and calls back once per span of body bytes;
those of one read leave as one piece. A framing error raises only after the pieces decoded
before it in the same read have been handed on, so the caller keeps that output.

httpx still builds the requests, applies timeouts, decodes content encodings and sends proxied
requests through its own transports (see :func:`install`). Scope: HTTP/1.1 requests with a body
known up front (what the backends send). A connection is pooled again only after a whole
response llhttp calls keep-alive, with nothing after it; anything else closes it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httptools
import httpx
from httpx._utils import get_environment_proxies  # what httpx itself reads

from responses_gateway.backends.sockets import Connection, connect

MAX_HEAD_BYTES = 64 * 1024
_PORTS = {b"http": 80, b"https": 443}
_Key = tuple[bytes, str, int]


class Http11Transport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int | None = None,
        keepalive_expiry: float = 5.0,
    ) -> None:
        self._ssl = ssl_context
        self._slots = None if max_connections is None else asyncio.Semaphore(max_connections)
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[_Key, deque[Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme.decode()!r}")
        timeouts = request.extensions.get("timeout", {})
        key = (scheme, url.host, url.port or _PORTS[scheme])
        content = await request.aread()
        head = _request_head(request)
        if "transfer-encoding" in request.headers:  # httpx chose chunked for a streamed body
            chunk = b"%x\r\n%s\r\n" % (len(content), content) if content else b""
            content = chunk + b"0\r\n\r\n"
        await self._acquire(timeouts.get("pool"))
        try:
            connection = self._take_idle(key)
            if connection is None:
                connection = await connect(
                    key[1], key[2], ssl_context=self._ssl_context() if scheme == b"https" else None,
                    timeout=timeouts.get("connect"),
                )
            try:
                await connection.write(head + content, timeouts.get("write"))
                response, parser = await _read_head(
                    connection, timeouts.get("read"), request.method == "HEAD"
                )
            except BaseException:
                connection.close()
                raise
        except BaseException:
            self._release()
            raise
        stream = _Body(self, key, connection, response, parser, timeouts.get("read"))
        return httpx.Response(
            response.status, headers=response.headers, stream=stream,
            extensions={"http_version": response.version, "reason_phrase": response.reason},
        )

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    # -- the pool --------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return self._ssl

    async def _acquire(self, timeout: float | None) -> None:
        slots = self._slots
        if slots is None:
            return
        if not slots.locked():
            await slots.acquire()  # returns at once: no task switch
            return
        try:
            async with asyncio.timeout(timeout):
                await slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no upstream connection free within the pool timeout") from None

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def _take_idle(self, key: _Key) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest = time.monotonic() - self._keepalive_expiry
        while idle and idle[0].idle_since < oldest:
            idle.popleft().close()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to be closed
            if not connection.stale():
                return connection
            connection.close()
        return None

    def _finished(self, key: _Key, connection: Connection, reusable: bool) -> None:
        if reusable:
            connection.park()
            self._idle.setdefault(key, deque()).append(connection)
        else:
            connection.close()
        self._release()


class _Body(httpx.AsyncByteStream):
    """The response body: one piece per network read, returned to the pool when read whole."""

    def __init__(
        self,
        transport: Http11Transport,
        key: _Key,
        connection: Connection,
        response: _Response,
        parser: httptools.HttpResponseParser,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._key = key
        self._connection = connection
        self._response = response
        self._parser = parser
        self._timeout = timeout
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        response = self._response
        pieces = response.pieces
        error = response.error
        if pieces:  # what came in the same read as the head
            yield _take(pieces)
        if error is not None:
            raise error
        feed = self._parser.feed_data
        read = self._connection.read
        timeout = self._timeout
        while not response.done:
            data = await read(timeout)
            if not data:
                response.end()
                break
            try:
                feed(data)  # llhttp appends this read's body bytes to ``pieces``
            except _PARSE_ERRORS as exc:
                error = response.failed(exc)
            if pieces:
                yield pieces.pop() if len(pieces) == 1 else _take(pieces)
            if error is not None:  # raised after the pieces before it: the caller keeps them
                raise error

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            whole = self._response.done and self._response.reusable
            self._transport._finished(self._key, self._connection, whole)


# -- the wire format ---------------------------------------------------------------------


def _request_head(request: httpx.Request) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    lines.extend(name + b": " + value for name, value in request.headers.raw)
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


async def _read_head(
    connection: Connection, timeout: float | None, head_only: bool
) -> tuple[_Response, httptools.HttpResponseParser]:
    """Parse up to the final response head (1xx skipped); body bytes that came with it are
    parsed too, and wait in ``pieces`` (and a framing error after them in ``error``)."""
    response = _Response(head_only)
    parser = response.parser
    assert parser is not None
    fed = 0
    while not response.status:
        data = await connection.read(timeout)
        if not data:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        fed += len(data)
        try:
            parser.feed_data(data)
        except _PARSE_ERRORS as exc:
            error = response.failed(exc)
            if error is not None and not response.status:
                raise error from exc
        if not response.status and fed > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError("the upstream's response head is too large")
    if sum(len(name) + len(value) for name, value in response.headers) > MAX_HEAD_BYTES:
        raise httpx.RemoteProtocolError("the upstream's response head is too large")
    if head_only and response.pieces:  # a body after a HEAD response's head: do not reuse
        response.reusable = False
        response.pieces.clear()
    return response, parser


_PARSE_ERRORS = (httptools.HttpParserError, httptools.HttpParserUpgrade)


class _AfterTheMessage(Exception):
    """Raised in a callback to stop llhttp at a message after the response: not ours."""


class _Response:
    """llhttp's callbacks for one response: its final head, then the body pieces of a read.

    ``on_body`` is the pieces list's own ``append``, so the call llhttp makes per span of body
    bytes (one per HTTP chunk) runs no Python code.
    """

    def __init__(self, head_only: bool) -> None:
        self.pieces: list[bytes] = []
        self.on_body = self.pieces.append  # before the parser: it looks its callbacks up once
        self.head_only = head_only  # a HEAD request's response: no body, whatever it declares
        self.status = 0  # the final (non-1xx) status, once its head is complete
        self.version = b""
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.done = False  # the message is whole
        self.reusable = False  # keep-alive, and nothing came after the message
        self.error: httpx.RemoteProtocolError | None = None  # raised once ``pieces`` are out
        # Dropped once the head is parsed: the parser refers to these callbacks, and a cycle
        # would wait for the garbage collector (which the app runs rarely) to free both.
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    # -- llhttp's callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.status:  # bytes after the whole response: never sent by a sane server
            self.reusable = False
            raise _AfterTheMessage
        self.headers = []  # a 1xx response's headers are not the final one's

    def on_status(self, reason: bytes) -> None:
        self.reason = reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # after the head: a trailer, which httpx has no place for
            self.headers.append((name, value.rstrip(b" \t")))  # llhttp strips the leading OWS

    def on_headers_complete(self) -> None:
        parser = self.parser
        assert parser is not None
        status = parser.get_status_code()
        if status < 200:  # informational: the final response follows (101 raises an upgrade)
            return
        self.status = status
        self.version = b"HTTP/" + parser.get_http_version().encode()
        self.reusable = parser.should_keep_alive()  # HTTP/1.1 without close, or 1.0 keep-alive
        self.parser = None
        if self.head_only:
            self.done = True

    def on_message_complete(self) -> None:
        if self.status:
            self.done = True

    # -- what the transport asks -----------------------------------------------------------

    def failed(self, exc: Exception) -> httpx.RemoteProtocolError | None:
        """The parser stopped: a protocol error, or None if only what followed the message
        was wrong (the connection is then not reused)."""
        self.reusable = False
        if self.done:
            return None
        if isinstance(exc, httptools.HttpParserUpgrade):
            message = "the upstream switched protocols"
        else:
            message = f"malformed response from the upstream: {exc}"
        error = self.error = httpx.RemoteProtocolError(message)
        error.__cause__ = exc
        return error

    def end(self) -> None:
        """The connection ended before the message did: whole only if the close frames it
        (llhttp's rule: no ``Content-Length`` and no chunked coding)."""
        framed = False
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"transfer-encoding":
                framed = value.lower().endswith(b"chunked")
                break
            if lowered == b"content-length":
                framed = True
        if framed:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        self.done = True


def _take(pieces: list[bytes]) -> bytes:
    piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    pieces.clear()
    return piece


def body_pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body of a streamed response as it arrives, decoded.

    A response this transport carried, without a content encoding, is read straight from the
    transport: httpx's three generator layers in between do nothing for it but cost a few
    microseconds per read. Anything else (a proxied request, gzip) goes through httpx.
    """
    stream = response.stream  # sent through the client, httpx's BoundAsyncStream wraps it
    if stream.__class__ is not _Body:
        stream = getattr(stream, "_stream", None)
    if stream.__class__ is _Body and "content-encoding" not in response.headers:
        response.is_stream_consumed = True
        return stream.__aiter__()
    return response.aiter_bytes()


def direct_transport(client: httpx.AsyncClient, url: httpx.URL) -> Http11Transport | None:
    """This transport when it carries ``url`` for ``client`` (no proxy applies), else None.

    A caller that gets it may send straight to it: the client's build and send add, per
    request, header merging, a cookie jar read and write, and auth and redirect hooks, about
    85 µs of CPU that a fixed, authenticated POST to one upstream does not need.
    """
    pick = getattr(client, "_transport_for_url", None)
    if pick is None:
        return None
    transport = pick(url)
    return transport if isinstance(transport, Http11Transport) else None


def new_client(transport: Http11Transport, **options: Any) -> httpx.AsyncClient:
    """An httpx client whose direct requests go through ``transport``.

    With no proxy in the environment (httpx's own reading of it) ``transport`` is passed as
    ``transport=``: httpx then builds no transport of its own, whose construction imports
    httpcore (90-160 ms of CPU on a fresh process's first create, for a transport no request
    would use). With a proxy the client is built as httpx builds it, a transport per proxy,
    and ``transport`` installed for what goes direct (:func:`install`).
    """
    if not any(get_environment_proxies().values()):
        return httpx.AsyncClient(transport=transport, **options)
    client = httpx.AsyncClient(**options)
    install(client, transport)
    return client


def install(client: httpx.AsyncClient, transport: Http11Transport) -> bool:
    """Make ``transport`` the client's transport for direct requests.

    Not passed as ``transport=``: httpx then ignores the environment's proxies. Built normally,
    the client keeps a transport of its own per proxy (``HTTPS_PROXY`` and the like, honouring
    ``NO_PROXY``) and this one carries every request that goes direct. False, and the client
    untouched, if httpx's layout is not the one known.
    """
    current = getattr(client, "_transport", None)
    if not isinstance(current, httpx.AsyncHTTPTransport):
        return False
    client._transport = transport
    return True

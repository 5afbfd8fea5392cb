"""A lean HTTP/1.1 transport for httpx: the upstream requests' wire format and connection pool.

Why not httpx's own transport (httpcore + h11): it hands every HTTP chunk up through h11 and
seven generator layers, and an upstream frames each SSE event as its own chunk, so a streamed
completion paid that once per token; its pool also does bookkeeping quadratic in its size on
every request. Under load those were most of the gateway's CPU. This transport parses the
response head once, then un-chunks whatever one network read brought in a single pass and yields
it as one piece. httpx still builds the requests, applies timeouts, decodes content encodings
and sends proxied requests through its own transports (see :func:`install`).

Scope: HTTP/1.1 requests with a body known up front (what the backends send), responses framed
by ``Transfer-Encoding: chunked``, ``Content-Length`` or the connection's close. A connection is
pooled again only after a whole, keep-alive response; anything else closes it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator

import httpx

from responses_gateway.backends.network import Connection, connect

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE = 4096
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
                status, reason, headers, body = await _read_head(
                    connection, timeouts.get("read"), request.method == "HEAD"
                )
            except BaseException:
                connection.close()
                raise
        except BaseException:
            self._release()
            raise
        stream = _Body(self, key, connection, body, timeouts.get("read"))
        return httpx.Response(
            status, headers=headers, stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
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
        framing: _Framing,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._key = key
        self._connection = connection
        self._framing = framing
        self._timeout = timeout
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        framing = self._framing
        read = self._connection.read
        timeout = self._timeout
        while not framing.done:
            data = await read(timeout)
            if not data:
                framing.end()
                break
            piece = framing.feed(data)
            if piece:
                yield piece

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            whole = self._framing.done and self._framing.reusable
            self._transport._finished(self._key, self._connection, whole)


# -- the wire format ---------------------------------------------------------------------


def _request_head(request: httpx.Request) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    lines.extend(name + b": " + value for name, value in request.headers.raw)
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


async def _read_head(
    connection: Connection, timeout: float | None, head_only: bool
) -> tuple[int, bytes, list[tuple[bytes, bytes]], _Framing]:
    """The final response head (1xx skipped) and the framing of the body that follows."""
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        while end < 0 and len(data) <= MAX_HEAD_BYTES:
            more = await connection.read(timeout)
            if not more:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            data += more
            end = data.find(b"\r\n\r\n")
        if end < 0 or end > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError("the upstream's response head is too large")
        lines = data[:end].split(b"\r\n")
        data = data[end + 4:]
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise httpx.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(code)
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise httpx.RemoteProtocolError(f"malformed response header: {line[:80]!r}")
            headers.append((name, value.strip()))
        if status == 101:
            raise httpx.RemoteProtocolError("the upstream switched protocols")
        if status >= 200:
            break
    if data:
        connection.unread(data)
    return status, reason, headers, _framing(version, status, headers, head_only)


def _framing(
    version: bytes, status: int, headers: list[tuple[bytes, bytes]], head_only: bool
) -> _Framing:
    encoding = length = connection = b""
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            encoding = value.lower()
        elif lowered == b"content-length":
            length = value
        elif lowered == b"connection":
            connection += b"," + value.lower()
    keep_alive = version == b"HTTP/1.1" and b"close" not in connection
    if head_only or status in (204, 304):
        framing: _Framing = _Length(0)
    elif encoding:
        if not encoding.endswith(b"chunked"):
            return _UntilClose()
        framing = _Chunked()
    elif length:
        try:
            size = int(length.split(b",")[0])
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad Content-Length {length[:40]!r}") from None
        if size < 0:
            raise httpx.RemoteProtocolError(f"bad Content-Length {length[:40]!r}")
        framing = _Length(size)
    else:
        return _UntilClose()
    framing.reusable = keep_alive
    return framing


class _Framing:
    """Turns what arrives into body bytes; ``done`` once the message is whole."""

    done = False
    reusable = False  # the connection may carry another request once ``done``

    def feed(self, data: bytes) -> bytes:
        raise NotImplementedError

    def end(self) -> None:
        """The connection ended: fine only where the close frames the body."""
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )


class _UntilClose(_Framing):
    def feed(self, data: bytes) -> bytes:
        return data

    def end(self) -> None:
        self.done = True


class _Length(_Framing):
    def __init__(self, size: int) -> None:
        self.left = size
        self.done = size == 0

    def feed(self, data: bytes) -> bytes:
        left = self.left
        if len(data) < left:
            self.left = left - len(data)
            return data
        self.left = 0
        self.done = True
        if len(data) > left:  # bytes past the body: never sent by a sane server; do not reuse
            self.reusable = False
            return data[:left]
        return data


def _no_crlf() -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError("malformed chunked body: no CRLF after a chunk")


class _Chunked(_Framing):
    """``Transfer-Encoding: chunked``, decoded across reads in one pass per read."""

    def __init__(self) -> None:
        self._left = 0  # data bytes still to come in the current chunk
        self._crlf = 0  # bytes of the CRLF after a chunk's data still to skip
        self._line = b""  # an unfinished size (or trailer) line from the previous read
        self._trailers = False  # past the last chunk: trailer lines, then an empty line

    def feed(self, data: bytes) -> bytes:
        if self._line:
            data = self._line + data
            self._line = b""
        pieces = []
        pos, end = 0, len(data)
        while pos < end:
            if self._left:
                stop = min(pos + self._left, end)
                pieces.append(data[pos:stop] if pos or stop < end else data)
                self._left -= stop - pos
                pos = stop
                if not self._left:
                    self._crlf = 2
                continue
            if self._crlf:
                take = min(self._crlf, end - pos)
                if data[pos:pos + take] != b"\r\n"[2 - self._crlf:2 - self._crlf + take]:
                    raise _no_crlf()
                self._crlf -= take
                pos += take
                continue
            newline = data.find(b"\r\n", pos)
            if newline < 0:
                self._line = data[pos:]
                if len(self._line) > MAX_CHUNK_LINE:
                    raise httpx.RemoteProtocolError("malformed chunked body: line too long")
                break
            line = data[pos:newline]
            pos = newline + 2
            if self._trailers:
                if not line:
                    self.done = True
                    if pos < end:
                        self.reusable = False
                    break
                continue
            size_text = line.split(b";", 1)[0].strip()
            if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
                raise httpx.RemoteProtocolError(f"malformed chunk size line {line[:40]!r}")
            size = int(size_text, 16)
            if not size:
                self._trailers = True
            elif newline + 4 + size <= end:  # the whole chunk and its CRLF came in this read
                stop = pos + size
                if data[stop:stop + 2] != b"\r\n":
                    raise _no_crlf()
                pieces.append(data[pos:stop])
                pos = stop + 2
            else:
                self._left = size
        if not pieces:
            return b""
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def body_pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body of a streamed response as it arrives, decoded.

    A response this transport carried, without a content encoding, is read straight from the
    transport: httpx's three generator layers in between do nothing for it but cost a few
    microseconds per read. Anything else (a proxied request, gzip) goes through httpx.
    """
    stream = getattr(response.stream, "_stream", None)  # httpx's BoundAsyncStream wraps it
    if stream.__class__ is _Body and "content-encoding" not in response.headers:
        response.is_stream_consumed = True
        return stream.__aiter__()
    return response.aiter_bytes()


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

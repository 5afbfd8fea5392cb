"""An httpcore network backend on plain asyncio protocols, for the upstream connections.

httpcore's default backend goes through anyio for every read: a cancel scope for the timeout,
an Event, and pausing then resuming the transport (two epoll_ctl calls). A streamed chat
completion is thousands of small reads, and under load those were a fifth of the gateway's CPU.
Here the transport keeps reading into a buffer (paused only past a high-water mark, so a slow
client still holds the upstream back), a read with data buffered returns at once, and only a
read that must wait arms a timer. Everything else (pooling, HTTP/1.1, TLS settings, proxies)
stays httpx's and httpcore's; :func:`use_protocol_backend` plugs this in beneath them.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import typing
from collections import deque

import httpcore
import httpx

# Pause the transport when this much is buffered and unread; resume below half of it.
HIGH_WATER = 256 * 1024


class _Reader(asyncio.Protocol):
    """Buffers what arrives; wakes the one waiting read. Write flow control for ``write``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer: deque[bytes] = deque()
        self.size = 0
        self.eof = False
        self.error: BaseException | None = None  # the connection broke (not a clean EOF)
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drained: asyncio.Future[None] | None = None  # set while writing is paused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer.append(data)
        self.size += len(data)
        if self.size >= HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.error = exc
        self.eof = True
        self._wake()
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        if self.drained is None:
            self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _socket_readable(sock: socket.socket | None) -> bool:
    """A recv would return at once (data or end of stream); asks the kernel, not the loop."""
    if sock is None or sock.fileno() < 0:
        return True
    poll = select.poll()
    poll.register(sock.fileno(), select.POLLIN)
    return bool(poll.poll(0))


def _timed_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpcore.ReadTimeout())


class ProtocolStream(httpcore.AsyncNetworkStream):
    """The reader's current transport (plain, then TLS after ``start_tls``) is the stream's."""

    def __init__(self, reader: _Reader) -> None:
        self._reader = reader

    @property
    def _transport(self) -> asyncio.Transport:
        transport = self._reader.transport
        assert transport is not None, "connection_made has run"
        return transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        reader = self._reader
        if not reader.buffer and not reader.eof:
            loop = asyncio.get_running_loop()
            waiter = reader.waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _timed_out, waiter)
            try:
                await waiter
            finally:
                reader.waiter = None
                if timer is not None:
                    timer.cancel()
        buffer = reader.buffer
        if not buffer:
            if reader.error is not None:
                raise httpcore.ReadError(str(reader.error) or type(reader.error).__name__)
            return b""  # end of stream
        data = buffer.popleft()
        if len(data) > max_bytes:
            buffer.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        elif buffer and len(data) + len(buffer[0]) <= max_bytes:
            parts, size = [data], len(data)
            while buffer and size + len(buffer[0]) <= max_bytes:
                parts.append(buffer.popleft())
                size += len(parts[-1])
            data = b"".join(parts)
        reader.size -= len(data)
        if reader.paused and reader.size < HIGH_WATER // 2:
            reader.paused = False
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        transport = self._transport
        if transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        transport.write(buffer)
        drained = self._reader.drained
        if drained is not None:  # the kernel buffer is full: wait until the peer takes it
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(drained)
            except TimeoutError:
                raise httpcore.WriteTimeout("writing to the upstream timed out") from None
        if self._reader.error is not None:
            raise httpcore.WriteError(str(self._reader.error))

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                self._transport, self._reader, ssl_context,
                server_hostname=server_hostname, ssl_handshake_timeout=timeout,
            )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except OSError as exc:  # ssl.SSLError and ConnectionError among them
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:  # the connection closed during the handshake
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._reader.transport = transport  # type: ignore[assignment]
        return ProtocolStream(self._reader)

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "is_readable":  # an idle pooled connection the server closed or wrote to
            reader = self._reader
            if reader.buffer or reader.eof:
                return True
            # What the loop has not polled yet (a close that came while a Lambda was frozen).
            return _socket_readable(self._transport.get_extra_info("socket"))
        if info in ("ssl_object", "socket"):
            return self._transport.get_extra_info(info)
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


class ProtocolBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        return await self._connect(
            loop.create_connection(_Reader, host, port, local_addr=local),
            timeout, socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await self._connect(
            loop.create_unix_connection(_Reader, path), timeout, socket_options
        )

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    @staticmethod
    async def _connect(
        connecting: typing.Awaitable[tuple[asyncio.BaseTransport, asyncio.BaseProtocol]],
        timeout: float | None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None,
    ) -> ProtocolStream:
        try:
            async with asyncio.timeout(timeout):
                transport, reader = await connecting
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc) or "connecting timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():  # asyncio already set TCP_NODELAY
            sock.setsockopt(*option)
        return ProtocolStream(reader)  # type: ignore[arg-type]


def use_protocol_backend(transport: httpx.AsyncBaseTransport) -> bool:
    """Put :class:`ProtocolBackend` under an httpx transport's connection pool.

    httpx takes no network backend of its own, so this reaches the pool it built. Only a plain
    pool is changed (a proxy pool keeps its own); False if httpx's layout is not the one known.
    """
    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = ProtocolBackend()
    return True

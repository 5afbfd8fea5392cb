"""Upstream sockets on plain asyncio protocols: buffered reads, write flow control, staleness.

Why not anyio streams (httpcore's default): for every read they open a cancel scope for the
timeout, wait on an Event and pause then resume the transport (two epoll_ctl calls). A streamed
chat completion is thousands of small reads, and under load that was a fifth of the gateway's
CPU. Here the transport keeps reading into a buffer (paused only past a high-water mark, so a
slow client still holds the upstream back), a read with data buffered returns at once, and only
a read that must wait arms a timer. Failures are httpx's transport exceptions, as httpx's own
transport would raise them.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import time
from collections import deque

import httpx

# Pause the transport when this much is buffered and unread; resume once a read takes it.
HIGH_WATER = 256 * 1024


class Connection(asyncio.Protocol):
    """One upstream connection. ``read`` returns everything buffered: one call per network read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer: deque[bytes] = deque()
        self.size = 0
        self.eof = False
        self.error: BaseException | None = None  # the connection broke (not a clean EOF)
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drained: asyncio.Future[None] | None = None  # set while writing is paused
        self.idle_since = 0.0  # when it went back to the pool
        # The read timeout: one timer per connection that re-arms itself, not one per read
        # (a streamed completion waits thousands of times, each far shorter than the timeout).
        self.timer: asyncio.TimerHandle | None = None
        self.wait_started = 0.0
        self.read_timeout = 0.0

    # -- protocol callbacks ----------------------------------------------------------------

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

    # -- what the HTTP layer uses ----------------------------------------------------------

    async def read(self, timeout: float | None) -> bytes:
        """What has arrived (waiting up to ``timeout`` for something); b"" at a clean end."""
        if not self.buffer and not self.eof:
            loop = asyncio.get_running_loop()
            waiter = self.waiter = loop.create_future()
            if timeout is not None:
                self.wait_started = now = loop.time()
                self.read_timeout = timeout
                timer = self.timer
                if timer is None or timer.when() > now + timeout:  # none, or for a longer one
                    if timer is not None:
                        timer.cancel()
                    self.timer = loop.call_at(now + timeout, self._check_timeout)
            try:
                await waiter
            finally:
                self.waiter = None
        buffer = self.buffer
        if not buffer:
            if self.error is not None:
                raise httpx.ReadError(str(self.error) or type(self.error).__name__)
            return b""
        data = buffer.popleft() if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self.size = 0
        if self.paused:
            self.paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        return data

    def _check_timeout(self) -> None:
        """The timer fired: fail the read that has waited a whole timeout, else re-arm."""
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # not waiting: the next read that waits arms it again
        loop = asyncio.get_running_loop()
        deadline = self.wait_started + self.read_timeout
        if loop.time() >= deadline - 0.001:
            waiter.set_exception(
                httpx.ReadTimeout("no data from the upstream within the read timeout")
            )
        else:
            self.timer = loop.call_at(deadline, self._check_timeout)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def write(self, data: bytes, timeout: float | None) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise httpx.WriteError("the upstream connection is closed")
        transport.write(data)
        drained = self.drained
        if drained is not None:  # the kernel buffer is full: wait until the peer takes it
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(drained)
            except TimeoutError:
                raise httpx.WriteTimeout("writing to the upstream timed out") from None
        if self.error is not None:
            raise httpx.WriteError(str(self.error))

    def close(self) -> None:
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()

    def stale(self) -> bool:
        """An idle connection the server closed or wrote to: reusing it would fail or desync.

        Asks the kernel too, not only the loop: a close that came while a Lambda environment was
        frozen has not been polled yet.
        """
        if self.buffer or self.eof or self.transport is None or self.transport.is_closing():
            return True
        sock: socket.socket | None = self.transport.get_extra_info("socket")
        if sock is None or sock.fileno() < 0:
            return True
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN)
        return bool(poll.poll(0))

    def park(self) -> None:
        self._stop_timer()
        self.idle_since = time.monotonic()


async def connect(
    host: str, port: int, *, ssl_context: ssl.SSLContext | None, timeout: float | None
) -> Connection:
    """A TCP (and TLS, given a context) connection; asyncio sets TCP_NODELAY itself."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(
                Connection, host, port, ssl=ssl_context,
                server_hostname=host if ssl_context is not None else None,
            )
    except TimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or f"connecting to {host}:{port} timed out") from exc
    except OSError as exc:  # refused, unreachable, DNS, ssl.SSLError (a failed handshake)
        raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
    return connection

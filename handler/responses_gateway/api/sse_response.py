"""An ASGI response that streams Responses events as SSE.

Unlike a plain streaming response it (1) sends a keep-alive comment after a quiet spell,
(2) notices a client disconnect at once and closes the event source, which closes the upstream
request, (3) always closes the source, so the stored record ends in a true state, (4) takes a
client that stops reading for one gone (api/stalled_client.py), and (5) sends each batch of
events the source yields as one body message: under load one upstream read brings many
chunks, and a socket write per event was a third of the gateway's CPU. The batch with the
terminal event also ends the body (the source is then closed, not drained).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive, Scope, Send

from responses_gateway.api.stalled_client import (
    ClientStalled,
    gave_up_on_client,
    write_deadline,
    written,
)
from responses_gateway.ids import request_id_header
from responses_gateway.sse import encode_comment, encode_events
from responses_gateway.status import TERMINAL_EVENTS

# A stream's last event: nothing follows it, so its batch also ends the body.

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class EventStreamResponse:
    """Plain asyncio, not an anyio task group: the group, its scopes and its repeated
    cancellation cost ~65 µs of CPU per response (benchmarks/per_request.py), and the
    gateway only ever runs on asyncio."""

    def __init__(
        self,
        batches: AsyncIterator[list[dict[str, Any]]],
        *,
        keepalive_seconds: float = 15.0,
        send_timeout: float = 0.0,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.batches = batches
        self.keepalive_seconds = keepalive_seconds
        self.send_timeout = send_timeout  # one write's longest wait for the client; 0: none
        self.headers = HEADERS + request_id_header() + (headers or [])
        self._last_write = time.monotonic()
        #: when the producer's write under way counts as stalled (None: none is under way);
        #: the watcher times it (stalled_client.py) instead of a timer per write, which would
        #: cost ~4 µs a batch
        self._sending_until: float | None = None
        self._previous_bytes = 0  # the last body message's, which a write waits to drain
        # write_deadline(now, send_timeout, n) == now + _drain_base + n * _per_byte
        self._drain_base = write_deadline(0.0, send_timeout, 0)
        self._per_byte = write_deadline(0.0, 0.0, 1) - write_deadline(0.0, 0.0, 0)
        self._ended = False  # the body's last message went out: no keep-alive after it
        self._closing = False  # the source is being closed: nothing left to interrupt
        self._disconnected = False
        self._stalled = False  # the client stopped reading: gone too

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.get_running_loop().create_task(self._watch(receive, send, task))
        try:
            await self._produce(send)  # in this task: a disconnect cancels it
        except asyncio.CancelledError:
            if not self._disconnected:
                raise
            task.uncancel()  # our own cancel: the client went away, the response just ends
        finally:
            watcher.cancel()
        if self._stalled:
            gave_up_on_client(self.send_timeout)  # in this task: uvicorn logs in it next

    async def _produce(self, send: Send) -> None:
        # Sends in this task: a slow client holds back the source (and through it the
        # upstream) instead of letting events pile up here.
        try:
            base, per_byte = self._drain_base, self._per_byte
            async for batch in self.batches:
                last = batch[-1]["type"] in TERMINAL_EVENTS
                if last:
                    self._ended = True
                body = encode_events(batch)
                # :meth:`_write`, inline: this runs per batch
                self._last_write = now = time.monotonic()
                self._sending_until = now + base + self._previous_bytes * per_byte
                try:
                    await send({"type": "http.response.body", "body": body,
                                "more_body": not last})
                finally:
                    self._sending_until = None
                self._previous_bytes = len(body)
                if last:  # the body's end rides on it: one socket write less
                    break
            if not self._ended:
                self._ended = True
                await self._write(send, b"", False)
        finally:
            # Never cancelled from here on (the watcher checks), so the source's own cleanup
            # (the stored record's last write, the upstream's close) runs whole.
            self._closing = True
            await self.batches.aclose()  # type: ignore[attr-defined]

    async def _write(self, send: Send, body: bytes, more: bool) -> None:
        """One body message, timed by the watcher while it waits for the client: the send
        timeout, and the time the message before it takes to drain (:func:`write_deadline`,
        as two numbers made once)."""
        self._last_write = now = time.monotonic()
        self._sending_until = now + self._drain_base + self._previous_bytes * self._per_byte
        try:
            await send({"type": "http.response.body", "body": body, "more_body": more})
        finally:
            self._sending_until = None
        self._previous_bytes = len(body)

    async def _watch(self, receive: Receive, send: Send, producer: asyncio.Task[Any]) -> None:
        """One task for all three: a disconnect stops the producer at once; so does a write
        that waited past the send timeout (the client stopped reading); a quiet spell gets a
        keep-alive comment (never after the body's last message, nor beside a write)."""
        interval, stall = self.keepalive_seconds, self.send_timeout
        while True:
            wait: float | None = None
            now = time.monotonic()
            until = self._sending_until
            if until is not None and stall > 0 and not self._closing:
                if now >= until:
                    self._gone(producer, stalled=True)
                    return
                wait = until - now
            elif interval > 0 and not self._ended:  # nothing awaits between this and send
                idle = now - self._last_write
                if idle >= interval:
                    self._last_write = time.monotonic()
                    try:
                        await written(send({"type": "http.response.body",
                                            "body": encode_comment(), "more_body": True}),
                                      stall)
                    except ClientStalled:
                        self._gone(producer, stalled=True)
                        return
                    idle = 0.0
                wait = interval - idle
            if stall > 0 and not self._ended:  # a write that starts meanwhile is timed too
                wait = stall if wait is None else min(wait, stall)
            try:
                async with asyncio.timeout(wait):
                    message = await receive()
            except TimeoutError:
                continue
            if message["type"] == "http.disconnect":
                self._gone(producer)
                return

    def _gone(self, producer: asyncio.Task[Any], *, stalled: bool = False) -> None:
        """The client left, or stopped reading: the producer stops where it waits (unless
        the source is already closing), and the response ends as on a disconnect. A client
        that left after the body's last message needs nothing stopped; one that stopped
        reading it holds that write, which is cut too."""
        self._disconnected = True
        self._stalled = stalled
        if not self._closing and (stalled or not self._ended):
            producer.cancel()

"""An ASGI response that streams Responses events as SSE.

Unlike a plain streaming response it (1) sends a keep-alive comment after a quiet spell,
(2) notices a client disconnect at once and closes the event source, which closes the upstream
request, (3) always closes the source, so the stored record ends in a true state, and (4)
sends each batch of events the source yields as one body message: under load one upstream
read brings many chunks, and a socket write per event was a third of the gateway's CPU. The
batch with the terminal event also ends the body (the source is then closed, not drained).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive, Scope, Send

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
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.batches = batches
        self.keepalive_seconds = keepalive_seconds
        self.headers = HEADERS + request_id_header() + (headers or [])
        self._last_write = time.monotonic()
        self._ended = False  # the body's last message went out: no keep-alive after it
        self._closing = False  # the source is being closed: nothing left to interrupt
        self._disconnected = False

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

    async def _produce(self, send: Send) -> None:
        # Sends in this task: a slow client holds back the source (and through it the
        # upstream) instead of letting events pile up here.
        try:
            async for batch in self.batches:
                self._last_write = time.monotonic()
                last = batch[-1]["type"] in TERMINAL_EVENTS
                if last:
                    self._ended = True
                await send({"type": "http.response.body", "body": encode_events(batch),
                            "more_body": not last})
                if last:  # the body's end rides on it: one socket write less
                    break
            if not self._ended:
                self._ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            # Never cancelled from here on (the watcher checks), so the source's own cleanup
            # (the stored record's last write, the upstream's close) runs whole.
            self._closing = True
            await self.batches.aclose()  # type: ignore[attr-defined]

    async def _watch(self, receive: Receive, send: Send, producer: asyncio.Task[Any]) -> None:
        """One task for both: a disconnect stops the producer at once; a quiet spell gets a
        keep-alive comment (never after the body's last message)."""
        interval = self.keepalive_seconds
        while True:
            wait: float | None = None
            if interval > 0 and not self._ended:  # nothing awaits between this and send
                idle = time.monotonic() - self._last_write
                if idle >= interval:
                    self._last_write = time.monotonic()
                    await send({"type": "http.response.body", "body": encode_comment(),
                                "more_body": True})
                    idle = 0.0
                wait = interval - idle
            try:
                async with asyncio.timeout(wait):
                    message = await receive()
            except TimeoutError:
                continue
            if message["type"] == "http.disconnect":
                self._disconnected = True
                if not (self._ended or self._closing):
                    producer.cancel()
                return

"""An ASGI response that streams Responses events as SSE.

Unlike a plain streaming response it (1) sends a keep-alive comment after a quiet spell,
(2) notices a client disconnect at once and closes the event source, which closes the upstream
request, (3) always closes the source, so the stored record ends in a true state, and (4)
sends each batch of events the source yields as one body message: under load one upstream
read brings many chunks, and a socket write per event was a third of the gateway's CPU. The
batch with the terminal event also ends the body (the source is then closed, not drained).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from responses_gateway.ids import request_id_header
from responses_gateway.sse import encode_comment, encode_events

# A stream's last event: nothing follows it, so its batch also ends the body.
TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class EventStreamResponse:
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        async with anyio.create_task_group() as group:

            async def produce() -> None:
                # Sends in this task: a slow client holds back the source (and through it
                # the upstream) instead of letting events pile up here.
                try:
                    async for batch in self.batches:
                        self._last_write = time.monotonic()
                        last = batch[-1]["type"] in TERMINAL_EVENTS
                        await send({"type": "http.response.body", "body": encode_events(batch),
                                    "more_body": not last})
                        if last:  # the body's end rides on it: one socket write less
                            self._ended = True
                            break
                    if not self._ended:
                        self._ended = True
                        await send({"type": "http.response.body", "body": b"",
                                    "more_body": False})
                    group.cancel_scope.cancel()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.batches.aclose()  # type: ignore[attr-defined]

            async def watch() -> None:
                # One task for both: a disconnect ends everything at once; a quiet spell gets
                # a keep-alive comment (never after the body's last message).
                interval = self.keepalive_seconds
                while True:
                    wait = math.inf
                    if interval > 0 and not self._ended:  # nothing awaits between this and send
                        idle = time.monotonic() - self._last_write
                        if idle >= interval:
                            self._last_write = time.monotonic()
                            await send({"type": "http.response.body", "body": encode_comment(),
                                        "more_body": True})
                            idle = 0.0
                        wait = interval - idle
                    with anyio.move_on_after(wait):
                        if (await receive())["type"] == "http.disconnect":
                            group.cancel_scope.cancel()
                            return

            group.start_soon(watch)
            await produce()  # in this task, inside the group: a disconnect cancels it too

"""An ASGI response that streams Responses events as SSE.

Unlike a plain streaming response it (1) sends a keep-alive comment after a quiet spell,
(2) notices a client disconnect at once and closes the event source, which closes the upstream
request, (3) always closes the source, so the stored record ends in a true state, and (4)
sends the events that are ready together: under load one upstream read brings many chunks,
and a socket write per event was a third of the gateway's CPU.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from responses_gateway.sse import encode_comment, encode_event

# Events the source may run ahead of the writer: the largest batch, so also the most that
# wait for one send when a read brings many chunks (~15 us of work each: ~1 ms at most).
MAX_PENDING = 64
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class EventStreamResponse:
    def __init__(
        self,
        events: AsyncIterator[dict[str, Any]],
        *,
        keepalive_seconds: float = 15.0,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.events = events
        self.keepalive_seconds = keepalive_seconds
        self.headers = HEADERS + (headers or [])
        self._last_write = time.monotonic()
        self._ended = False  # the body's last message went out: no keep-alive after it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        # The source runs ahead of the writer by up to MAX_PENDING encoded events; the writer
        # sends whatever is ready as one body message, so the events of one upstream read
        # cost one ASGI send (and one socket write), not one each.
        ready: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_PENDING)
        async with anyio.create_task_group() as group:

            async def produce() -> None:
                put = ready.put_nowait
                first = True
                try:
                    async for event in self.events:
                        data = encode_event(event)
                        if ready.full():  # the writer sends this batch while we wait
                            await ready.put(data)
                        else:
                            put(data)
                        if first:  # response.created leaves now, not with the next batch
                            first = False
                            await asyncio.sleep(0)
                    await ready.put(None)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.events.aclose()  # type: ignore[attr-defined]

            async def write() -> None:
                get = ready.get_nowait
                while True:
                    batch = [await ready.get()]
                    while not ready.empty():
                        batch.append(get())
                    end = batch[-1] is None
                    if end:
                        batch.pop()
                    if batch:
                        self._last_write = time.monotonic()
                        body = batch[0] if len(batch) == 1 else b"".join(batch)  # type: ignore[arg-type]
                        await send({"type": "http.response.body", "body": body,
                                    "more_body": True})
                    if end:
                        self._ended = True
                        await send({"type": "http.response.body", "body": b"",
                                    "more_body": False})
                        group.cancel_scope.cancel()
                        return

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        group.cancel_scope.cancel()
                        return

            async def keepalive() -> None:
                interval = self.keepalive_seconds
                while not self._ended:  # checked right before each send: nothing awaits between
                    idle = time.monotonic() - self._last_write
                    if idle >= interval:
                        self._last_write = time.monotonic()
                        await send({"type": "http.response.body", "body": encode_comment(),
                                    "more_body": True})
                        idle = 0.0
                    await anyio.sleep(interval - idle)

            group.start_soon(produce)
            group.start_soon(write)
            group.start_soon(watch_disconnect)
            if self.keepalive_seconds > 0:
                group.start_soon(keepalive)

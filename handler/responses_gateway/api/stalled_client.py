"""A client that stops reading: each write to it waits a bounded time.

A stream's writes wait for the client (uvicorn's flow control): that is how a slow reader
holds back the upstream instead of letting events pile up in memory. A client that stops
reading altogether but keeps its connection open would hold its response, the upstream
request under it, and the deadline that never fires while a write waits, for as long as it
likes. So each write waits at most ``GATEWAY_SEND_TIMEOUT_SECONDS``; past it the client
counts as gone, exactly as on a disconnect. uvicorn lets a write start once what was written
before has drained, so a write's wait is also the time the client takes to read the message
before it (a multi-MB image event to a slow link): on top of the timeout, a write may wait
for what the transport may still hold (:func:`write_deadline`) to drain at
:data:`SLOWEST_READ`. A client reading slower than that counts as stalled too.

Each stream times its own writes from one watcher (the SSE response's, the WebSocket
connection's), which notes when the write under way began: a timer per write would cost
~4 µs a batch, a third of what the gateway spends on an event.

The ASGI app cannot drop the connection itself; it returns, and uvicorn closes the transport
(what it had buffered stays bounded by its write buffer). uvicorn then logs "returned without
completing response" for an SSE stream: that line is dropped for a stalled client, whose own
warning says what happened.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable

logger = logging.getLogger("responses_gateway.stream")

_UNFINISHED_RESPONSE = "ASGI callable returned without completing response."
#: set in the task of a connection whose client stopped reading
_stalled: contextvars.ContextVar[bool] = contextvars.ContextVar("client_stalled", default=False)


#: the slowest reading waited for, in bytes a second (a message's own time to drain)
SLOWEST_READ = 16 * 1024
#: what uvicorn's transport holds before a write waits (its high-water mark)
BUFFERED = 64 * 1024


def write_deadline(now: float, seconds: float, previous_bytes: int) -> float:
    """When a write that starts ``now`` counts as stalled: the send timeout, plus the time
    to drain the message written before it (``previous_bytes``) and the transport's buffer
    at :data:`SLOWEST_READ`."""
    return now + seconds + (previous_bytes + BUFFERED) / SLOWEST_READ


class ClientStalled(Exception):
    """A write waited past the send timeout: the client stopped reading."""


class _QuietStalls(logging.Filter):
    """Drops uvicorn's "returned without completing response" for a stalled client: uvicorn
    logs it in the connection's task right after the app returns, so that task's context
    says whether the app gave up on a stalled client."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_stalled.get() and record.getMessage() == _UNFINISHED_RESPONSE)


logging.getLogger("uvicorn.error").addFilter(_QuietStalls())


def gave_up_on_client(seconds: float) -> None:
    """Say (once for the connection: its task's context) that its client read nothing for
    ``seconds`` and counts as gone; uvicorn's line about the unfinished response, logged in
    the same task next, is then dropped."""
    if not _stalled.get():
        _stalled.set(True)
        logger.warning("a client read nothing for %g s (GATEWAY_SEND_TIMEOUT_SECONDS): "
                       "taken as gone", seconds)


async def written(write: Awaitable[None], seconds: float) -> None:
    """Await ``write`` (one ASGI send) for at most ``seconds`` (``0``: no limit); past them
    :class:`ClientStalled`. For a rare write (a keep-alive): the stream's own writes are
    timed by a watcher instead, as a timer per write costs ~4 µs."""
    if seconds <= 0:
        await write
        return
    try:
        async with asyncio.timeout(seconds):
            await write
    except TimeoutError:
        raise ClientStalled from None

"""What one compaction may cost, checked before the work, and the stops that end it early.

A compaction reads a window that a client, a ``previous_response_id`` chain or a conversation
can make as long as it likes; each part of it is a summarising call upstream, one after the
other. So it has bounds (settings, 0: none):

- ``GATEWAY_MAX_COMPACTION_INPUT_BYTES``: the JSON size of the items the summary reads;
- ``GATEWAY_MAX_COMPACTION_CALLS``: the summarising calls one compaction makes. The parts a
  window needs are estimated before the first call; a window that needs more is OpenAI's 400
  ``context_length_exceeded`` (as OpenAI answers an input its model cannot read), naming the
  setting. A part the backend's exact count later splits still cannot pass the bound;
- ``GATEWAY_MAX_RESPONSE_SECONDS``: the time it may take (a 504 ``response_timeout``);

and it stops when its client leaves (``left``: a future the HTTP surface resolves, with the
error to raise, when the client disconnects); a background create's compaction has no
``left`` and runs on, bounded by the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.records import Value

T = TypeVar("T")
#: Resolves when the client that waits for the compaction leaves (its exception is raised).
Departure = asyncio.Future[None]


class CompactionLimits(Value):
    """What one compaction may cost: summarising calls, input bytes, time (a frozen value:
    records.py)."""

    __slots__ = ("calls", "input_bytes", "seconds")

    calls: int  # GATEWAY_MAX_COMPACTION_CALLS
    input_bytes: int  # GATEWAY_MAX_COMPACTION_INPUT_BYTES
    seconds: float  # GATEWAY_MAX_RESPONSE_SECONDS

    def __init__(self, calls: int = 16, input_bytes: int = 20 * 1024 * 1024,
                 seconds: float = 0.0) -> None:
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "input_bytes", input_bytes)
        object.__setattr__(self, "seconds", seconds)

    def check_input(self, size: int) -> None:
        if self.input_bytes and size > self.input_bytes:
            raise invalid_request(
                f"The input to compact is {size} bytes; this gateway compacts at most "
                f"{self.input_bytes} bytes at once (GATEWAY_MAX_COMPACTION_INPUT_BYTES). "
                "Compact more often, or send less input.",
                param="input", code="context_length_exceeded")

    def check_calls(self, calls: int, window: int | None) -> None:
        """``calls``: the summarising calls the window needs (made and still to make)."""
        if self.calls and calls > self.calls:
            raise invalid_request(
                f"The input to compact needs about {calls} summarising calls of this model "
                f"(its context window holds {window} tokens); this gateway makes at most "
                f"{self.calls} per compaction (GATEWAY_MAX_COMPACTION_CALLS). Compact more "
                "often, or send less input.",
                param="input", code="context_length_exceeded")

    def timeout(self) -> GatewayError:
        return GatewayError(
            504,
            f"The compaction took longer than this gateway allows ({self.seconds:g} s, "
            "GATEWAY_MAX_RESPONSE_SECONDS).",
            type="server_error", code="response_timeout")


async def bounded(work: Coroutine[Any, Any, T], limits: CompactionLimits,
                  left: Departure | None) -> T:
    """``work`` run to its end, unless the time runs out (the 504) or the client leaves
    (``left``'s error): then it is cancelled, which closes its upstream request, before this
    returns. A cancel of the caller cancels it too."""
    task = asyncio.ensure_future(work)
    waits: set[asyncio.Future[Any]] = {task} if left is None else {task, left}
    try:
        await asyncio.wait(waits, timeout=limits.seconds or None,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if not task.cancelled():
        return task.result()
    if left is not None and left.done():
        raise left.exception() or asyncio.CancelledError()  # the departure, as its surface says
    raise limits.timeout()


__all__ = ["CompactionLimits", "Departure", "bounded"]

"""The time a response may run, start to terminal event, as one timer.

An upstream that sends only keep-alive comments never trips the read timeout, and a tool may
hang; a Lambda would be killed mid-stream with nothing stored. So each response has at most
one deadline (the earliest set wins: ``GATEWAY_MAX_RESPONSE_SECONDS``, a worker's remaining
time): while the job waits (for the upstream, a tool, a summary) it is interrupted there and
the wait raises the deadline's error; while it waits for its consumer, the next batch ends
it. A cancel that is not the deadline's (the client left, the process stops) passes through.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from responses_gateway.errors import GatewayError

T = TypeVar("T")


class Deadline:
    __slots__ = ("_error", "_expired", "_task", "_when", "waiting")

    def __init__(self) -> None:
        self._when = float("inf")
        self._error: GatewayError | None = None
        self._expired = False
        self._task: asyncio.Task[Any] | None = None
        #: the task awaits something the deadline may interrupt (set inline by the hot loop)
        self.waiting = False

    def set(self, when: float, error: GatewayError) -> None:
        """End with ``error`` at ``when`` (epoch seconds); the earliest deadline set wins."""
        if when < self._when:
            self._when, self._error = when, error

    @property
    def expired(self) -> bool:
        return self._expired

    @property
    def error(self) -> GatewayError:
        assert self._error is not None
        return self._error

    def seconds_left(self) -> float | None:
        """Until the deadline (None: none is set)."""
        if self._error is None:
            return None
        return max(0.0, self._when - time.time())

    def arm(self, task: asyncio.Task[Any] | None) -> asyncio.TimerHandle | None:
        """Start the timer for ``task`` (the one running the response)."""
        self._task = task
        if self._error is None:
            return None
        loop = asyncio.get_running_loop()
        return loop.call_at(loop.time() + self._when - time.time(), self._expire)

    def _expire(self) -> None:
        self._expired = True
        if self.waiting and self._task is not None:
            self._task.cancel()  # the wait turns it into the deadline's failure (failure())

    def failure(self) -> GatewayError | None:
        """After a CancelledError in a wait: the deadline's error if the deadline sent it,
        None if the cancel is another's."""
        task = self._task
        if not self._expired or task is None or task.uncancel() > 0:
            return None
        return self._error

    def check(self) -> None:
        """Raise the deadline's error if it has passed (between two waits)."""
        if self._expired:
            raise self.error

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` where the deadline can interrupt it."""
        if self._expired:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # a coroutine never awaited: no "never awaited" warning
            raise self.error
        if self._task is None:
            self._task = asyncio.current_task()
        self.waiting = True
        try:
            return await awaitable
        except asyncio.CancelledError:
            error = self.failure()
            if error is None:
                raise
            raise error from None
        finally:
            self.waiting = False

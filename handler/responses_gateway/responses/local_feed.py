"""Live events of the background responses this process runs (the in-process worker).

A follower in the same process (``GET /v1/responses/{id}?stream=true``, a streaming create with
``background``) reads them here as they are produced instead of polling the store; the store
stays the truth for every other process.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

Event = dict[str, Any]
#: On shutdown, how long the cancelled workers get to record their failure.
STOP_SECONDS = 5.0


class LocalFeed:
    """Events of the background responses this process runs, for live followers here.

    Non-terminal events appear as soon as they are produced; terminal ones only once stored.
    """

    def __init__(self) -> None:
        self.events: dict[str, list[Event]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.stopping: set[str] = set()  # being cancelled here: log what was made, then stop
        self._changed: dict[str, asyncio.Event] = {}

    def open(self, response_id: str) -> None:
        self.events.setdefault(response_id, [])
        self._changed.setdefault(response_id, asyncio.Event())

    def publish(self, response_id: str, events: list[Event]) -> None:
        """Append events not published yet; the log stays in sequence order, no repeats."""
        log = self.events.get(response_id)
        if log is None or not events:
            return
        last = log[-1]["sequence_number"] if log else -1
        if events[0]["sequence_number"] <= last:
            events = [e for e in events if e["sequence_number"] > last]
        if events:
            log.extend(events)
            self._wake(response_id)

    def close(self, response_id: str) -> None:
        self.events.pop(response_id, None)
        changed = self._changed.pop(response_id, None)
        if changed is not None:
            changed.set()

    def after(self, response_id: str, seq: int) -> tuple[list[Event], asyncio.Event] | None:
        """Events after ``seq`` and the signal of the next change; None if not running here."""
        log = self.events.get(response_id)
        if log is None:
            return None
        start = bisect.bisect_right(log, seq, key=_seq_of)
        return log[start:], self._changed[response_id]

    def _wake(self, response_id: str) -> None:
        # A fresh Event per change: every waiter wakes, none can clear another's signal.
        changed = self._changed.get(response_id)
        if changed is not None:
            self._changed[response_id] = asyncio.Event()
            changed.set()

    async def stop_all(self) -> None:
        """Process shutdown: stop the responses running here; each ends ``failed``."""
        tasks = [task for task in self.tasks.values() if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_SECONDS)


def _seq_of(event: Event) -> int:
    return event["sequence_number"]

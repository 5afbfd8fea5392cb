"""Steering a running response (WebSocket ``response.steer``): what the running job sees.

A steer queues user input for a response that is running. The response ends at its next safe
point, ``incomplete`` with ``incomplete_details.reason: "steered"`` and its output so far, and
the WebSocket session starts the successor with the queued input (api/ws_session.py). A safe
point is between two upstream reads or between model turns, never inside an item the next
turn needs whole: not while a call's arguments stream, not once the turn made calls (the
gateway runs its own and the next turn needs their output; the client must answer its own,
and then the steer stays queued, ``response.steer.pending``).

:class:`Steering` is the running job's inbox. The session (or, on API Gateway, a poll of the
connection table) ``add``\\ s steers; the turn loop acknowledges each with
``response.steer.accepted`` in the response's own stream (its sequence numbers continue), and
stops at the first safe point. A job waiting for the upstream at a safe point is interrupted
there (as the deadline interrupts it), so a slow stream stops at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from responses_gateway import ids
from responses_gateway.records import Compared

Event = dict[str, Any]


class Steer(Compared):
    """One accepted steering submission: its id, the response it steers, its input as sent (a
    record: records.py)."""

    __slots__ = ("acknowledged", "id", "input", "previous_response_id")

    id: str
    previous_response_id: str
    input: Any
    acknowledged: bool

    def __init__(self, id: str, previous_response_id: str, input: Any,
                 acknowledged: bool = False) -> None:
        self.id = id
        self.previous_response_id = previous_response_id
        self.input = input
        self.acknowledged = acknowledged

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "previous_response_id": self.previous_response_id,
                "input": self.input}

    @classmethod
    def from_record(cls, data: dict[str, Any], acknowledged: bool = False) -> Steer:
        return cls(data["id"], data["previous_response_id"], data["input"], acknowledged)


def new_steer(previous_response_id: str, input: Any) -> Steer:
    return Steer(ids.new_id("steer_"), previous_response_id, input)


def input_items(steer_input: Any) -> list[dict[str, Any]]:
    """A steer's input as input items (a string is one user message)."""
    if isinstance(steer_input, str):
        return [{"type": "message", "role": "user", "content": steer_input}]
    return [dict(item) for item in steer_input]


class Steering:
    """A running response's steering inbox (see the module's docstring)."""

    __slots__ = ("_interrupting", "_task", "requested", "steers", "waiting")

    def __init__(self) -> None:
        #: every steer this response accepted, in submission order
        self.steers: list[Steer] = []
        #: a steer arrived: the turn loop stops at its next safe point (read per batch)
        self.requested = False
        #: the job awaits the upstream at a safe point: a steer may interrupt that wait
        self.waiting = False
        self._task: asyncio.Task[Any] | None = None
        self._interrupting = False

    def add(self, steer: Steer) -> None:
        self.steers.append(steer)
        self.requested = True
        if self.waiting and self._task is not None and not self._interrupting:
            self._interrupting = True
            self._task.cancel()

    def arm(self) -> None:
        """The current task runs the response (the one a steer interrupts)."""
        self._task = asyncio.current_task()

    def interrupted(self) -> bool:
        """After a CancelledError in a wait: whether this inbox sent it (then it is taken
        back, and the response ends steered)."""
        if not self._interrupting or self._task is None:
            return False
        self._interrupting = False
        return self._task.uncancel() == 0

    def acknowledge(self, translator: Any) -> list[Event]:
        """``response.steer.accepted`` for each steer not acknowledged yet, numbered in the
        response's stream."""
        out: list[Event] = []
        for steer in self.steers:
            if not steer.acknowledged:
                steer.acknowledged = True
                out.append(translator.event(accepted_event(steer)))
        return out


def accepted_event(steer: Steer) -> Event:
    return {"type": "response.steer.accepted",
            "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id}}

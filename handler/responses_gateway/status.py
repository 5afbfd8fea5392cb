"""A response's statuses and the stream events that end one: defined once, imported everywhere.

The store (which rows still run), the background worker (when a log is whole), the SSE writer
(when the body ends), the WebSocket session (what a continuation may chain from) and the logs
all ask the same questions of a status; they must not answer them from copies.
"""

from __future__ import annotations

QUEUED = "queued"
IN_PROGRESS = "in_progress"
COMPLETED = "completed"
INCOMPLETE = "incomplete"
FAILED = "failed"
CANCELLED = "cancelled"

#: Statuses of a response that has not ended (a background one may still be claimed, renewed,
#: cancelled).
RUNNING_STATUSES = frozenset({QUEUED, IN_PROGRESS})
#: Statuses a response ends in; nothing changes it after one of these.
TERMINAL_STATUSES = frozenset({COMPLETED, INCOMPLETE, FAILED, CANCELLED})
#: Ended with output the model finished: what a conversation appends and a WebSocket
#: continuation may chain from.
FINISHED_STATUSES = frozenset({COMPLETED, INCOMPLETE})

#: The stream events that end a response. There is no ``response.cancelled`` event (the SDKs
#: know none): a cancelled response's stream ends with ``response.failed`` carrying status
#: ``cancelled`` and no error.
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
TERMINAL_EVENT_OF = {
    COMPLETED: "response.completed",
    INCOMPLETE: "response.incomplete",
    FAILED: "response.failed",
    CANCELLED: "response.failed",
}

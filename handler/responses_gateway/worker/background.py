"""Background responses: start, run under a lease, follow live, cancel.

The record in the store is the truth every invocation shares:

- ``start``  writes the record ``queued`` and hands its id to a worker (an in-process task
  locally, an asynchronous Lambda invoke in AWS);
- ``run``    claims it (``queued`` -> ``in_progress``, conditional), runs the ordinary
  :class:`~responses_gateway.runner.Job`, persists events in batches (each flush one write,
  conditional on "not cancelled": a failed condition is how the worker learns of a cancel),
  renews its lease, and ends with a conditional terminal write, so a cancel always wins;
- ``follow`` replays stored events after a sequence number and then the live ones;
- ``load``   turns a record whose lease expired (worker crashed or timed out) into ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from responses_gateway.errors import invalid_request
from responses_gateway.runner import Gateway, Job
from responses_gateway.store.base import TERMINAL_STATUSES, CancelledError, StoredResponse
from responses_gateway.translate.stream import Event

logger = logging.getLogger("responses_gateway.worker")

FLUSH_SECONDS = 0.25
FLUSH_EVENTS = 256
POLL_SECONDS = 0.2
RUNNING = frozenset({"queued", "in_progress"})
_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class LocalFeed:
    """Events of the background responses this process runs, for live followers here."""

    def __init__(self) -> None:
        self.events: dict[str, list[Event]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def open(self, response_id: str) -> None:
        self.events[response_id] = []
        self._changed[response_id] = asyncio.Event()

    def publish(self, response_id: str, events: list[Event]) -> None:
        self.events[response_id].extend(events)
        self._changed[response_id].set()

    def close(self, response_id: str) -> None:
        changed = self._changed.pop(response_id, None)
        self.events.pop(response_id, None)
        if changed is not None:
            changed.set()

    async def wait(self, response_id: str, timeout: float) -> None:
        changed = self._changed.get(response_id)
        if changed is None:
            return
        with anyio.move_on_after(timeout):
            await changed.wait()
        changed.clear()


def feed_of(gateway: Gateway) -> LocalFeed:
    feed = getattr(gateway, "local_feed", None)
    if feed is None:
        feed = gateway.local_feed = LocalFeed()  # type: ignore[attr-defined]
    return feed


# -- start ----------------------------------------------------------------------------------


async def start(gateway: Gateway, job: Job) -> Any:
    """Store the record ``queued``, dispatch it, and answer as OpenAI does (stream or not)."""
    from responses_gateway.api.routes import JSON
    from responses_gateway.api.sse_response import EventStreamResponse

    record = job.record
    record.lease_until = time.time() + 2 * gateway.settings.lease_seconds
    await gateway.store.put(record)
    await dispatch(gateway, record)
    if job.backend_request.stream:
        return EventStreamResponse(
            follow(gateway, record, -1), keepalive_seconds=gateway.settings.keepalive_seconds
        )
    return JSON(record.response)


async def dispatch(gateway: Gateway, record: StoredResponse) -> None:
    function = gateway.settings.worker_function
    if function:
        from responses_gateway.worker.invoke import invoke_worker

        await invoke_worker(function, record.id, record.tenant)
        return
    feed = feed_of(gateway)
    feed.open(record.id)
    task = asyncio.ensure_future(run(gateway, record.id, record.tenant))
    feed.tasks[record.id] = task
    task.add_done_callback(lambda _: feed.tasks.pop(record.id, None))


# -- run ------------------------------------------------------------------------------------


async def run(
    gateway: Gateway, response_id: str, tenant: str, *, deadline: float | None = None
) -> None:
    """Run one background response to its end (the worker's whole job).

    ``deadline`` (epoch seconds) is when this process will be stopped: before then the
    response is ended ``failed`` rather than left ``in_progress``.
    """
    store = gateway.store
    feed = feed_of(gateway)
    if response_id not in feed.events:
        feed.open(response_id)
    try:
        record = await store.get(response_id, tenant)
        if record is None or record.status != "queued":
            return
        lease = gateway.settings.lease_seconds
        record.response["status"] = "in_progress"
        if not await store.update_response(
            response_id, record.response, expect_status={"queued"}, lease_until=time.time() + lease
        ):
            return  # cancelled before it started, or claimed by another worker
        job = gateway.job_for(record)
        log = EventLog(gateway, job)
        job.persist = log.finish  # type: ignore[method-assign]
        async with anyio.create_task_group() as group:
            group.start_soon(log.keep_flushing, lease)
            try:
                with anyio.fail_after(None if deadline is None else deadline - time.time()):
                    async for event in job.events():
                        log.add(event)
                        if len(log.pending) >= FLUSH_EVENTS:
                            await log.flush()
                await log.flush()
            except CancelledError:
                await job.close()
            except TimeoutError:
                await log.fail_unfinished(
                    "worker_timeout",
                    "The worker ran out of time before the response finished.",
                )
            finally:
                group.cancel_scope.cancel()
    except Exception:
        logger.exception("background response %s failed", response_id)
        await _fail_if_running(gateway, response_id, tenant, "server_error",
                               "The gateway failed while running this background response.")
    finally:
        feed.close(response_id)


class EventLog:
    """Batches a running response's events into the store; learns of a cancel from it."""

    def __init__(self, gateway: Gateway, job: Job) -> None:
        self.gateway = gateway
        self.job = job
        self.pending: list[Event] = []
        self.last_seq = -1
        self._lock = asyncio.Lock()
        self._feed = feed_of(gateway)

    def add(self, event: Event) -> None:
        self.pending.append(event)
        self.last_seq = event["sequence_number"]
        self._feed.publish(self.job.record.id, [event])

    async def flush(self) -> None:
        async with self._lock:
            if not self.pending:
                return
            batch, self.pending = self.pending, []
            await self.gateway.store.append_events(self.job.record.id, batch)

    async def keep_flushing(self, lease: float) -> None:
        """Flush every FLUSH_SECONDS and renew the lease, until cancelled."""
        renew_every = max(lease / 3, FLUSH_SECONDS)
        next_renewal = time.monotonic() + renew_every
        record = self.job.record
        while True:
            await anyio.sleep(FLUSH_SECONDS)
            try:
                await self.flush()
                if time.monotonic() >= next_renewal:
                    next_renewal = time.monotonic() + renew_every
                    if not await self.gateway.store.renew_lease(record.id, time.time() + lease):
                        raise CancelledError(record.id)
            except CancelledError:
                await self.job.close()
                self.job.translator.cancel()
                return

    async def finish(self) -> None:
        """The job's terminal write: events so far, then the record, both conditional."""
        if self.job.translator.response["status"] == "cancelled":
            return  # the consumer stopped: the record says whatever the canceller wrote
        await self.flush()
        ok = await self.gateway.store.update_response(
            self.job.record.id,
            self.job.response,
            expect_status={"in_progress"},
            lease_until=0,
        )
        if not ok:
            raise CancelledError(self.job.record.id)

    async def fail_unfinished(self, code: str, message: str) -> None:
        """End the response ``failed`` (time limit), if nobody ended it first."""
        await self.job.close()
        response = self.job.response
        response["status"] = "failed"
        response["error"] = {"code": code, "message": message}
        if await self.gateway.store.update_response(
            self.job.record.id, response, expect_status={"in_progress"}, lease_until=0
        ):
            self.add({"type": "response.failed", "response": response,
                      "sequence_number": self.last_seq + 1})
            await self.flush()


async def _fail_if_running(
    gateway: Gateway, response_id: str, tenant: str, code: str, message: str
) -> StoredResponse | None:
    record = await gateway.store.get(response_id, tenant)
    if record is None or record.status not in RUNNING:
        return record
    record.response["status"] = "failed"
    record.response["error"] = {"code": code, "message": message}
    if await gateway.store.update_response(
        response_id, record.response, expect_status=RUNNING, lease_until=0
    ):
        return record
    return await gateway.store.get(response_id, tenant)


# -- read side ------------------------------------------------------------------------------


async def load(gateway: Gateway, response_id: str, tenant: str) -> StoredResponse | None:
    """Get a record; a running one whose worker's lease expired is ended ``failed`` now."""
    record = await gateway.store.get(response_id, tenant)
    if record is None or not record.background or record.status not in RUNNING:
        return record
    if record.lease_until is not None and 0 < record.lease_until < time.time():
        return await _fail_if_running(
            gateway,
            response_id,
            tenant,
            "worker_lost",
            "The worker running this background response stopped (it crashed or timed out) "
            "before the response finished.",
        )
    return record


async def cancel(gateway: Gateway, record: StoredResponse) -> dict[str, Any]:
    if not record.background:
        raise invalid_request(
            "Only responses created with background=true can be cancelled.",
            param="response_id",
        )
    if record.status in RUNNING:
        response = dict(record.response, status="cancelled")
        if await gateway.store.update_response(
            record.id, response, expect_status=RUNNING, lease_until=0
        ):
            task = feed_of(gateway).tasks.get(record.id)
            if task is not None:
                task.cancel()
            return response
        current = await gateway.store.get(record.id, record.tenant)
        return current.response if current is not None else record.response
    return record.response


async def follow(gateway: Gateway, record: StoredResponse, after: int) -> AsyncIterator[Event]:
    """Stored events after ``after``, then live ones, through the terminal event."""
    feed = feed_of(gateway)
    store = gateway.store
    last = after
    stale_polls = 0
    while True:
        local = feed.events.get(record.id)
        if local is not None:
            new = local[last + 1 :]  # published in order from 0: the index is the number
        else:
            new = await store.read_events(record.id, last)
        for event in new:
            if event["sequence_number"] <= last:
                continue
            last = event["sequence_number"]
            yield event
            if event["type"] in _TERMINAL_EVENTS:
                return
        if local is not None:
            await feed.wait(record.id, POLL_SECONDS * 5)
            continue
        current = await load(gateway, record.id, record.tenant)
        if current is None or current.status == "cancelled":
            return
        if current.status in TERMINAL_STATUSES:
            stale_polls += 1
            if stale_polls > 10:  # the terminal write landed but its event never did
                kind = "response." + current.status
                yield {"type": kind, "response": current.response, "sequence_number": last + 1}
                return
        await anyio.sleep(POLL_SECONDS)


async def fail_dead_letter(gateway: Gateway, response_id: str, tenant: str) -> None:
    """The worker could not be invoked at all: end the response ``failed``."""
    await _fail_if_running(
        gateway, response_id, tenant, "worker_unavailable",
        "The background worker could not be started for this response.",
    )

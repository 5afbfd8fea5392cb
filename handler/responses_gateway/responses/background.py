"""Background responses: start, run under a lease, follow live, cancel.

The record in the store is the truth every invocation shares (docs/background.md):

- ``start``  writes the record ``queued`` and hands its id to a worker (an in-process task
  locally, an asynchronous Lambda invoke in AWS);
- ``run`` claims it (``queued`` -> ``in_progress``, conditional) and runs the ordinary
  :class:`~responses_gateway.responses.job.Job`; :class:`EventLog` persists its events in
  batches, one write per flush, conditional on the response still running (a failed condition is
  how the worker learns of a cancel), renews the lease and the readable snapshot on the way, and
  ends with the terminal events and the terminal Response in one conditional write, so a cancel
  always wins and the log never holds a terminal the record contradicts (a turn on a
  conversation appends its items in that same write, so it never ends completed without them);
- ``follow`` replays stored events after a sequence number and then the live ones;
- ``load``   turns a record whose lease expired (worker crashed or timed out) into ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from responses_gateway.errors import GatewayError, UpstreamError, invalid_request
from responses_gateway.responses import conversations
from responses_gateway.responses.gateway import Gateway
from responses_gateway.responses.job import Job
from responses_gateway.responses.local_feed import STOP_SECONDS, LocalFeed
from responses_gateway.status import (
    RUNNING_STATUSES,
    TERMINAL_EVENT_OF,
    TERMINAL_EVENTS,
    TERMINAL_STATUSES,
)
from responses_gateway.store.base import (
    CancelledError,
    Store,
    StoredResponse,
    StoreUnavailable,
)
from responses_gateway.translate.response_object import response_error
from responses_gateway.translate.stream import Event

logger = logging.getLogger("responses_gateway.worker")

FLUSH_SECONDS = 0.25  # events reach the store (and other invocations) this often
FLUSH_EVENTS = 1000  # ... or as soon as this many are waiting (a very fast stream)
SNAPSHOT_SECONDS = 1.0  # the readable Response (and the lease) ride along a flush this often
POLL_SECONDS = 0.2  # a follower without a local feed reads the store this often
QUEUED_SECONDS_AWS = 360.0


def feed_of(gateway: Gateway) -> LocalFeed:
    return gateway.local_feed


# -- start ----------------------------------------------------------------------------------


async def start(gateway: Gateway, job: Job) -> None:
    """Store the record ``queued`` and hand it to a worker (platform/worker.py): a task of
    this process, or the worker Lambda; a worker that cannot be reached is a 503 and no
    response (the record deleted, the job's conversation turn let go). The caller answers
    the client."""
    record = job.record
    # Until a worker claims it, this lease bounds how long it may stay queued. An async Lambda
    # invocation may wait in its queue up to the template's MaximumEventAgeInSeconds (300 s;
    # after that the dead letter ends it failed), so in AWS the bound is past that.
    settings, worker = gateway.settings, gateway.platform.worker()
    queued_for = settings.queued_seconds or (
        2 * settings.lease_seconds if worker.in_process else QUEUED_SECONDS_AWS
    )
    record.lease_until = time.time() + queued_for
    await gateway.store.put(record)
    if worker.in_process:
        feed = feed_of(gateway)
        feed.open(record.id)
        task = asyncio.ensure_future(run(gateway, record.id, record.tenant))
        feed.tasks[record.id] = task
        task.add_done_callback(lambda _: feed.tasks.pop(record.id, None))
        return
    try:
        await worker.queue({"response_id": record.id, "tenant": record.tenant})
    except Exception as exc:
        logger.exception("could not invoke worker %s for %s", worker.function, record.id)
        with contextlib.suppress(Exception):
            await gateway.store.delete(record.id, record.tenant)
        if job.conversation is not None:
            await job.conversation.release()  # never ran: let go
        raise GatewayError(
            503,
            "The background worker could not be started; the response was not created.",
            type="server_error",
            code="worker_unavailable",
        ) from exc


# -- run ------------------------------------------------------------------------------------


async def run(
    gateway: Gateway, response_id: str, tenant: str, *, deadline: float | None = None
) -> None:
    """Run one background response to its end (the worker's whole job).

    ``deadline`` (epoch seconds) is when this process will be stopped: the upstream stream is
    cut there and the response ends ``failed`` (``worker_timeout``), never left running.
    """
    store = gateway.store
    feed = feed_of(gateway)
    feed.open(response_id)
    log: EventLog | None = None
    try:
        record = await store.get(response_id, tenant)
        if record is None or not record.background or record.status != "queued":
            return  # gone, cancelled before it started, or another worker's
        lease = gateway.settings.lease_seconds
        claimed = dict(record.response, status="in_progress")
        if not await store.update_response(
            response_id, claimed, expect_status={"queued"}, lease_until=time.time() + lease
        ):
            return
        log = EventLog(gateway, response_id, lease)
        # record.response is still queued: response.queued first
        job = Job.from_record(gateway, record, persist=log.finish)
        if deadline is not None:
            job.set_deadline(deadline, UpstreamError(
                504,
                "The worker ran out of time before the response finished.",
                type="server_error",
                code="worker_timeout",
            ))
        try:
            await log.run(job)
        finally:
            if job.conversation is not None:
                await job.conversation.release()  # not settled (write failed, stopped): let go
    except asyncio.CancelledError:
        with anyio.CancelScope(shield=True):
            if response_id in feed.stopping:  # a cancel here: log all, the canceller ends it
                if log is not None:
                    await log.keep_pending()
            else:  # this process is stopping
                await _fail_quietly(
                    gateway, response_id, tenant, "worker_stopped",
                    "The gateway stopped while running this background response.",
                )
        raise
    except Exception as exc:
        logger.exception("background response %s failed", response_id)
        if isinstance(exc, StoreUnavailable):
            code, message = "store_unavailable", f"Storing this response failed: {exc.message}"
        else:
            code = "server_error"
            message = "The gateway failed while running this background response."
        await _fail_quietly(gateway, response_id, tenant, code, message)
    finally:
        feed.close(response_id)


class EventLog:
    """Runs a job's events into the store in batches; learns of a cancel from the store.

    One write per flush: the events since the last one, plus (every SNAPSHOT_SECONDS) the
    Response as far as it got and a renewed lease. The terminal events and the terminal
    Response go in one last write conditional on ``in_progress``, with the conversation
    turn's settle (append or release) when the response has one.
    """

    def __init__(self, gateway: Gateway, response_id: str, lease: float) -> None:
        self.store = gateway.store
        self.job: Job | None = None  # the job whose events it logs (run)
        self.id = response_id
        self.lease = lease
        self.pending: list[Event] = []
        self.progress = Progress()
        self.closing = False  # the terminal events are being produced: hold them back
        self.error: Exception | None = None
        self._feed = feed_of(gateway)
        self._lock = asyncio.Lock()
        self._consumer: anyio.CancelScope | None = None
        # The lease is renewed (by a snapshot, or alone when idle) well before it runs out.
        self._renew_every = min(lease / 3, SNAPSHOT_SECONDS)
        self._next_renewal = time.monotonic() + self._renew_every
        self._last_flush = time.monotonic()
        # Events since the last snapshot: an idle renewal (the gateway running a tool, the
        # upstream thinking) still carries the Response, so a poll sees what came before.
        self._unsnapshotted = False

    async def run(self, job: Job) -> None:
        self.job = job
        async with anyio.create_task_group() as group:
            group.start_soon(self._keep_flushing)
            try:
                with anyio.CancelScope() as self._consumer:
                    await self._consume()
            except CancelledError:
                pass  # a flush found the response cancelled (or ended elsewhere): stop
            except Exception as exc:  # kept out of the task group (no exception groups)
                self.error = self.error or exc
            finally:
                group.cancel_scope.cancel()
        if self.error is not None:
            raise self.error

    async def _consume(self) -> None:
        async with contextlib.aclosing(self.job.batches()) as batches:
            async for batch in batches:
                self.add(batch)
                if len(self.pending) >= FLUSH_EVENTS and not self.closing:
                    await self.flush()
        if self.job.response.get("status") in TERMINAL_STATUSES - {"cancelled"}:
            await self.flush(final=True)  # with the conversation turn's append, if any
            await self._keep_sealed_reasoning()

    async def _keep_sealed_reasoning(self) -> None:
        """Reasoning a later turn must send back upstream lives in the record's request (the
        foreground writes it with the record; here it follows the terminal write)."""
        sealed = self.job.translator.sealed_reasoning
        if not sealed:
            return
        try:
            record = await self.store.get(self.id, self.job.record.tenant)
            if record is not None and record.status == self.job.response["status"]:
                record.request["sealed_reasoning"] = sealed
                await self.store.put(record)
        except Exception:
            logger.warning("could not keep the sealed reasoning of %s", self.id, exc_info=True)

    def add(self, batch: list[Event]) -> None:
        self.pending += batch
        self._unsnapshotted = True
        if not self.closing:
            apply = self.progress.apply
            for event in batch:
                apply(event)
            self._feed.publish(self.id, batch)

    async def finish(self, job: Job) -> None:
        """The job's persistence: hold its terminal events for the final write."""
        if job.response.get("status") != "cancelled":
            self.closing = True

    async def flush(self, *, final: bool = False) -> None:
        async with self._lock:
            if self.closing and not final:
                return
            now = self._last_flush = time.monotonic()
            response: dict[str, Any] | None = None
            lease_until: float | None = None
            if final:
                response, lease_until = self.job.response, 0.0
            elif now >= self._next_renewal:
                self._next_renewal = now + self._renew_every
                if not self.pending and not self._unsnapshotted:
                    # idle: renew alone (also how a cancel is noticed)
                    if not await self.store.renew_lease(self.id, time.time() + self.lease):
                        raise CancelledError(self.id)
                    return
                response, lease_until = self.progress.snapshot(), time.time() + self.lease
                self._unsnapshotted = False
            if not self.pending and response is None:
                return
            batch, self.pending = self.pending, []
            # The terminal write settles the conversation turn too (one atomic write): a
            # failed append leaves nothing terminal, and ``run`` ends the response failed and
            # lets the conversation go; a cancel that won writes neither.
            turn = self.job.conversation if final else None
            settle = {} if turn is None else {"turn": turn.settle_of(self.job)}
            await self.store.append_events(
                self.id, batch, response=response, lease_until=lease_until, **settle
            )
            if final:
                if turn is not None:
                    turn.settled()
                self._feed.publish(self.id, batch)

    async def keep_pending(self) -> None:
        """Store what was produced and not flushed yet (a cancel is about to end it here)."""
        async with self._lock:
            if self.closing or not self.pending:
                return
            batch, self.pending = self.pending, []
            try:
                await self.store.append_events(self.id, batch)
            except Exception:  # cancelled meanwhile, or the store is down: those are lost
                logger.warning("could not log the last events of %s", self.id, exc_info=True)

    async def _keep_flushing(self) -> None:
        """Flush every FLUSH_SECONDS; on a cancel or a store failure, stop the consumer."""
        try:
            while not self.closing:  # once closing, the consumer makes the last write
                # FLUSH_SECONDS after the last flush, whichever triggered it
                await anyio.sleep(max(0.0, self._last_flush + FLUSH_SECONDS - time.monotonic()))
                if time.monotonic() >= self._last_flush + FLUSH_SECONDS:
                    await self.flush()
        except CancelledError:
            self._stop()
        except Exception as exc:
            self.error = exc
            self._stop()

    def _stop(self) -> None:
        if self._consumer is not None and not self.closing:
            self._consumer.cancel()


class Progress:
    """The Response as far as its events go: what a reader sees while it runs.

    The translator fills an item's text only when the item closes; this follows the deltas so
    a poll shows the output growing.
    """

    __slots__ = ("items", "open", "response")

    def __init__(self) -> None:
        self.response: dict[str, Any] = {}
        self.items: list[dict[str, Any]] = []
        self.open: dict[tuple[Any, ...], list[str]] = {}

    def apply(self, event: Event) -> None:
        kind = event["type"]
        key = _DELTA_KEYS.get(kind)
        if key is not None:
            self.open.setdefault(key(event), []).append(event["delta"])
            return
        if kind == "response.output_item.added":
            item = dict(event["item"])
            self.items.append(item)
        elif kind == "response.output_item.done":
            index = event["output_index"]
            self.items[index] = event["item"]
            for k in [k for k in self.open if k[0] == index]:
                del self.open[k]
        elif kind == "response.content_part.added":
            item = self.items[event["output_index"]]
            item["content"] = [*item.get("content", ()), dict(event["part"])]
        elif kind == "response.reasoning_summary_part.added":
            item = self.items[event["output_index"]]
            item["summary"] = [*item.get("summary", ()), dict(event["part"])]
        elif kind in ("response.created", "response.queued", "response.in_progress"):
            self.response = event["response"]

    def snapshot(self) -> dict[str, Any]:
        output = list(self.items)
        copied: set[int] = set()
        for key, pieces in self.open.items():
            index = key[0]
            if index >= len(output):
                continue
            if index not in copied:
                copied.add(index)
                output[index] = dict(output[index])
            item = output[index]
            text = "".join(pieces)
            if key[1] == "arguments":
                item["arguments"] = text
                continue
            where = key[1]
            parts = item[where] = list(item.get(where, ()))
            if key[2] < len(parts):
                part = dict(parts[key[2]])
                part["refusal" if part.get("type") == "refusal" else "text"] = text
                parts[key[2]] = part
        return dict(self.response, status="in_progress", output=output)


_DELTA_KEYS: dict[str, Any] = {
    "response.output_text.delta": lambda e: (e["output_index"], "content", e["content_index"]),
    "response.refusal.delta": lambda e: (e["output_index"], "content", e["content_index"]),
    "response.reasoning_text.delta": lambda e: (e["output_index"], "content", e["content_index"]),
    "response.reasoning_summary_text.delta": lambda e: (
        e["output_index"], "summary", e["summary_index"]
    ),
    "response.function_call_arguments.delta": lambda e: (e["output_index"], "arguments"),
}


async def _fail_if_running(
    gateway: Gateway, response_id: str, tenant: str, code: str, message: str
) -> StoredResponse | None:
    """End a queued or running response ``failed`` (conditional: a cancel or finish wins)."""
    record = await gateway.store.get(response_id, tenant)
    if record is None or record.status not in RUNNING_STATUSES:
        return record
    record.response["status"] = "failed"
    record.response["error"] = response_error(code, message)
    if await gateway.store.update_response(
        response_id, record.response, expect_status=RUNNING_STATUSES, lease_until=0
    ):
        await conversations.release_record(gateway.store, record)
        return record
    return await gateway.store.get(response_id, tenant)


async def _fail_quietly(
    gateway: Gateway, response_id: str, tenant: str, code: str, message: str
) -> None:
    """Best effort: if the store is down too, the lease expiry ends it on the next read."""
    try:
        await _fail_if_running(gateway, response_id, tenant, code, message)
    except Exception:
        logger.exception("could not mark background response %s failed", response_id)


# -- read side ------------------------------------------------------------------------------


async def load(gateway: Gateway, response_id: str, tenant: str) -> StoredResponse | None:
    """Get a record; a running one whose worker's lease expired is ended ``failed`` now."""
    record = await gateway.store.get(response_id, tenant)
    if record is None or not record.background or record.status not in RUNNING_STATUSES:
        return record
    if record.lease_until is not None and 0 < record.lease_until < time.time():
        return await _fail_if_running(
            gateway,
            response_id,
            tenant,
            "worker_lost",
            "The worker running this background response stopped (it crashed or ran out of "
            "time) before the response finished.",
        )
    return record


async def cancel(gateway: Gateway, record: StoredResponse) -> dict[str, Any]:
    """Cancel a queued or running background response; any other state is returned as is."""
    if not record.background:
        raise invalid_request(
            "Cannot cancel a synchronous response. Only responses created with "
            "background=true can be cancelled.",
            param="response_id",
        )
    if record.status not in RUNNING_STATUSES:
        return record.response
    store, feed = gateway.store, feed_of(gateway)
    task = feed.tasks.get(record.id)
    if task is not None and not task.done():
        # Running here: stop the upstream now, and have the worker log every event it made
        # (not fail the response) so that the cancelled object holds all of them.
        feed.stopping.add(record.id)
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_SECONDS)
        feed.stopping.discard(record.id)
    events = await store.read_events(record.id, -1)
    response = cancelled_response(record.response, events)
    if not await store.update_response(
        record.id, response, expect_status=RUNNING_STATUSES, lease_until=0
    ):
        current = await store.get(record.id, record.tenant)  # it ended meanwhile
        return current.response if current is not None else record.response
    await conversations.release_record(store, record)
    # A worker elsewhere learns of the cancel at its next flush; one that landed between the
    # read above and the cancel belongs in the cancelled object too (later ones fail).
    later = await store.read_events(record.id, events[-1]["sequence_number"] if events else -1)
    if later:
        response = cancelled_response(record.response, events + later)
        await store.update_response(record.id, response, expect_status={"cancelled"})
    return response


def cancelled_response(response: dict[str, Any], events: list[Event]) -> dict[str, Any]:
    """The Response as its logged events left it, ``cancelled``: the output so far, and every
    item that had not finished marked ``incomplete`` (not left ``in_progress``)."""
    progress = Progress()
    for event in events:
        progress.apply(event)
    snapshot = progress.snapshot() if progress.response else dict(response)
    output = [
        dict(item, status="incomplete") if item.get("status") == "in_progress" else item
        for item in snapshot.get("output") or ()
    ]
    return dict(snapshot, status="cancelled", output=output)


async def follow(
    gateway: Gateway, record: StoredResponse, after: int
) -> AsyncIterator[list[Event]]:
    """Stored events after ``after``, then live ones, through the terminal event, in batches
    (never empty) as they are read.

    A response ended without terminal events (lease expired, dead letter, cancelled) gets a
    synthesized one carrying the stored Response: a follower always sees the end (for a
    cancel, ``response.failed`` with status ``cancelled``: docs/background.md).
    """
    feed = feed_of(gateway)
    store = gateway.store
    last = after
    ended_as: StoredResponse | None = None  # the record, once it is terminal
    while True:
        local = None if ended_as else feed.after(record.id, last)
        if local is not None:  # running in this process: no store round trips
            events, changed = local
            if not events:
                with anyio.move_on_after(POLL_SECONDS * 5):
                    await changed.wait()
                continue
        else:
            events = await store.read_events(record.id, last)
        batch, ended = _through_terminal(events)
        if batch:
            last = batch[-1]["sequence_number"]
            yield batch
            if ended:
                return
        if local is not None:
            continue
        if ended_as is not None:  # read once more after it ended: no terminal event came
            ending = await _ending(store, ended_as, after, last)
            if ending is not None:
                yield [ending]
            return
        current = await load(gateway, record.id, record.tenant)
        if current is None:
            return
        if current.status in TERMINAL_STATUSES:
            ended_as = current  # its terminal events commit with it: read once more for them
            continue
        await anyio.sleep(POLL_SECONDS)


async def _ending(store: Store, current: StoredResponse, after: int, last: int) -> Event | None:
    """The terminal event of a response whose log has none (lease expired, dead letter), or
    None when the cursor is already past the log's end."""
    end = last
    if last == after:  # nothing after the cursor: where does the log end?
        log = await store.read_events(current.id, -1)
        if log and log[-1]["type"] in TERMINAL_EVENTS:
            return None  # the cursor is at (or past) the terminal event
        end = log[-1]["sequence_number"] if log else -1
    if end + 1 <= after:
        return None
    return {"type": TERMINAL_EVENT_OF[current.status], "response": current.response,
            "sequence_number": end + 1}


def _through_terminal(events: list[Event]) -> tuple[list[Event], bool]:
    """``events`` up to and including a terminal one, and whether there was one."""
    for index, event in enumerate(events):
        if event["type"] in TERMINAL_EVENTS:
            return events[: index + 1], True
    return events, False


async def fail_dead_letter(gateway: Gateway, response_id: str, tenant: str) -> None:
    """The worker could not be invoked at all: end the response ``failed``."""
    await _fail_if_running(
        gateway, response_id, tenant, "worker_unavailable",
        "The background worker could not be started for this response.",
    )

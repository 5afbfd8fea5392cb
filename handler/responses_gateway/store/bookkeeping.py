"""Bookkeeping never fails a response (issue 45): a response's usage is written once inline,
in one try (so whoever reads the usage after seeing the response finds it), and if that write
fails — DynamoDB throttling a hot partition, a network error — it is retried in a background
task with jittered exponential backoff, off the response's path: the client has its output
either way, without waiting for a backoff.

Retrying is safe because recording is idempotent: the ledger writes a response's counters in
one transaction with its ``USAGE#ID`` row, conditional on that row being absent
(store/usage.py), so a retry of a write that did land adds nothing.

What is still unwritten after the last attempt is logged at ERROR with the response id and the
entry itself (its log row: tenant, model, counters; no content, no key), so nothing is lost
silently and an operator can replay it. The gateway waits for the pending retries when it
closes (``drain``); in Lambda a retry pending when the instance is frozen runs when it thaws.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from responses_gateway.key_limits import Windows
    from responses_gateway.store.usage import UsageEntry, UsageStore

logger = logging.getLogger("responses_gateway")

#: Seconds before each background attempt (each drawn between half and all of it, so a fleet
#: of instances throttled together does not retry together): about two minutes in all.
RETRY_DELAYS: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)

_pending: set[asyncio.Task[None]] = set()


async def record(ledger: UsageStore, entry: UsageEntry, windows: Windows | None) -> None:
    """Count ``entry`` now, or, if that fails, in the background; never raises."""
    # One try where the ledger offers it (DynamoDB: no backoff on the response's path)
    first = getattr(ledger, "record_once", None) or ledger.record
    try:
        await first(entry, windows)
        return
    except Exception as exc:
        logger.warning("usage of %s not recorded (%s); retrying in the background",
                       entry.response_id, _reason(exc))
    task = asyncio.get_running_loop().create_task(_retry(ledger, entry, windows))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


async def _retry(ledger: UsageStore, entry: UsageEntry, windows: Windows | None,
                 delays: tuple[float, ...] | None = None) -> None:
    last: BaseException | None = None
    try:
        for delay in RETRY_DELAYS if delays is None else delays:
            await asyncio.sleep(random.uniform(delay / 2, delay))
            try:
                await ledger.record(entry, windows)
            except Exception as exc:
                last = exc
                continue
            logger.info("usage of %s recorded on a retry", entry.response_id)
            return
    except asyncio.CancelledError:  # the gateway closed first
        lost(entry, last or RuntimeError("the gateway closed before a retry"))
        raise
    lost(entry, last)


def lost(entry: UsageEntry, exc: BaseException | None) -> None:
    """The record of what could not be written: the response id and the entry itself."""
    logger.error("could not record the usage of %s: %s", entry.response_id, _reason(exc),
                 extra={"usage_lost": entry.log_row()})


def pending() -> int:
    """How many usage writes are waiting for a retry."""
    return len(_pending)


async def drain(timeout: float = 10.0) -> None:
    """Give the pending retries ``timeout`` seconds; what is still pending is cancelled and
    logged as lost (the gateway is closing)."""
    tasks = set(_pending)
    if not tasks:
        return
    _, waiting = await asyncio.wait(tasks, timeout=timeout)
    for task in waiting:
        task.cancel()
    for task in waiting:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    detail = getattr(exc, "detail", None) or str(exc)  # StoreUnavailable's says what failed
    return f"{type(exc).__name__}: {detail}"[:300]

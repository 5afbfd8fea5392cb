"""The SQLite usage ledger's steps (store/usage_sqlite.py): every response records one, so it
runs on the event loop while the file is free (a thread hop cost ~5x the CPU); its WAL is
checkpointed, under every event loop it serves. How a busy file is waited for, off the loop:
tests/test_sqlite_file.py."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from responses_gateway.store import sqlite_file, usage_sqlite
from responses_gateway.store.sqlite import SQLiteStore
from responses_gateway.store.usage import UsageEntry


def entry(n: int) -> UsageEntry:
    response = {"id": f"resp_{n}", "created_at": int(time.time()), "output": [],
                "usage": {"input_tokens": 3, "output_tokens": 5}}
    return UsageEntry.of(response, tenant="t_one", model="m", status="completed")


async def totals(ledger: usage_sqlite.SQLiteUsage) -> tuple[int, int]:
    now = int(time.time())
    rows = await ledger.buckets(now - 7200, now + 3600)
    return (sum(r.counts["requests"] for r in rows),
            sum(r.counts["output_tokens"] for r in rows))


def test_steps_run_on_the_loop_while_the_file_is_free(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(str(tmp_path / "g.db"))
        ledger = store.usage_store()
        assert isinstance(ledger, usage_sqlite.SQLiteUsage)
        assert await ledger.record(entry(0), None)  # opens the connection (in the thread)
        threads: set[int] = set()
        ledger._file.conn.set_trace_callback(lambda _: threads.add(threading.get_ident()))
        for n in range(1, 21):
            assert await ledger.record(entry(n), None)
        assert not await ledger.record(entry(5), None)  # counted once, as before
        assert threads == {threading.get_ident()}  # every statement on the loop's thread
        assert await totals(ledger) == (21, 105)
        await ledger.aclose()
        await store.aclose()

    asyncio.run(main())


@pytest.mark.slow
def test_the_ledgers_wal_is_checkpointed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own checkpoint is off on the ledger's connection (it would sync the file on
    the loop): the ledger's thread checkpoints, so a WAL of ledger writes alone stays small;
    the ledger (one per file in a process) goes on doing so under a later event loop."""
    monkeypatch.setattr(sqlite_file, "CHECKPOINT_EVERY", 20)
    path = tmp_path / "g.db"

    async def main(first: int) -> int:
        store = SQLiteStore(str(path))
        ledger = store.usage_store()
        largest = 0
        for n in range(first, first + 600):
            assert await ledger.record(entry(n), None)
            if n % 10 == 0:
                await asyncio.sleep(0.01)  # a checkpoint's thread gets its turn
            largest = max(largest, Path(str(path) + "-wal").stat().st_size)
        assert await totals(ledger) == (first + 600, (first + 600) * 5)
        await ledger.aclose()
        await store.aclose()
        return largest

    # 600 writes of a few pages each, never checkpointed, pass 4 MB; checkpointed every 20
    # the WAL is reused from its start and stays near 20 writes' worth.
    for first in (0, 600):  # one asyncio.run each, as Mangum runs each Lambda call
        largest = asyncio.run(main(first))
        assert largest < 1_000_000, (first, largest)

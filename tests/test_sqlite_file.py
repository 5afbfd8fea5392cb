"""How the gateway runs a local SQLite file (store/sqlite_file.py): on the event loop while
the file is free, in the file's one thread (never holding the loop) while another connection
writes it or when asked to; checkpoints in that thread; errors named after the caller's file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.ids import request_id
from responses_gateway.store import sqlite_file
from responses_gateway.store.base import StoreUnavailable
from responses_gateway.store.sqlite_file import SQLiteFile

pytestmark = pytest.mark.anyio

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT NOT NULL);"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def insert(k: int, v: str = "x") -> Any:
    def write(c: sqlite3.Connection) -> int:
        c.execute("INSERT INTO t VALUES (?, ?)", (k, v))
        return threading.get_ident()

    return write


def rows(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM t").fetchone()[0]


async def test_a_call_on_a_free_file_runs_on_the_loops_thread(tmp_path: Path) -> None:
    db = SQLiteFile(str(tmp_path / "f.db"), name="The test file", schema=SCHEMA)
    assert await db.run(db.transaction, insert(1)) == threading.get_ident()
    assert await db.run(lambda: threading.get_ident()) == threading.get_ident()
    await db.aclose()


async def test_a_call_asked_for_a_thread_never_runs_on_the_loop(tmp_path: Path) -> None:
    db = SQLiteFile(str(tmp_path / "f.db"), name="The test file", schema=SCHEMA)
    assert await db.run_in_thread(db.transaction, insert(1)) != threading.get_ident()
    await db.aclose()
    assert rows(str(tmp_path / "f.db")) == 1


async def test_a_busy_file_is_waited_for_in_the_thread_while_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "f.db")
    db = SQLiteFile(path, name="The test file", schema=SCHEMA)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    writing = asyncio.ensure_future(db.run(db.transaction, insert(1)))
    ticks = 0
    started = time.monotonic()
    for _ in range(20):  # another coroutine progresses while the call waits
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 20 and time.monotonic() - started < 1.0
    assert not writing.done()
    other.execute("COMMIT")
    thread = await asyncio.wait_for(writing, 5)
    assert thread != threading.get_ident()  # it ran again, waiting, in the file's thread
    assert await db.run(db.call, lambda c: c.execute("SELECT v FROM t").fetchall()) == [("x",)]
    other.close()
    await db.aclose()


async def test_errors_are_store_unavailable_naming_the_callers_file(tmp_path: Path) -> None:
    path = str(tmp_path / "f.db")
    db = SQLiteFile(path, name="The test file", schema=SCHEMA)
    await db.run(db.transaction, insert(1))
    with pytest.raises(StoreUnavailable) as raised:
        await db.run(db.transaction, insert(1))  # the same key again
    assert raised.value.status == 503
    assert raised.value.detail.startswith(f"The test file ({path}) failed: UNIQUE constraint")
    assert path not in raised.value.message  # the path goes to the log only
    with pytest.raises(StoreUnavailable) as raised:
        await db.run_in_thread(db.call, lambda c: c.execute("SELECT * FROM missing"))
    assert "no such table: missing" in raised.value.detail
    assert await db.run(db.call, lambda c: c.in_transaction) is False  # rolled back
    await db.aclose()
    with pytest.raises(StoreUnavailable) as raised:
        await db.run(db.call, lambda c: None)
    assert raised.value.detail == f"The test file ({path}) is closed."


def test_a_bad_path_fails_when_opened(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        SQLiteFile(str(tmp_path / "missing-dir" / "f.db"), name="The test file", schema=SCHEMA)
    assert raised.value.detail.startswith("The test file (")


async def test_a_lazy_file_opens_on_first_use_and_again_after_close(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    db = SQLiteFile(str(path), name="The test file", schema=SCHEMA, lazy=True)
    assert not path.exists()
    await db.run(db.transaction, insert(1))  # opened (and the schema made) in the thread
    await db.aclose()
    await db.run(db.transaction, insert(2))
    await db.aclose()
    assert rows(str(path)) == 2


async def test_checkpoints_run_in_the_files_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_file, "CHECKPOINT_EVERY", 10)
    path = tmp_path / "f.db"
    db = SQLiteFile(str(path), name="The test file", schema=SCHEMA)
    checkpoints: list[int] = []

    def traced(sql: str) -> None:
        if "wal_checkpoint" in sql:
            checkpoints.append(threading.get_ident())

    db.conn.set_trace_callback(traced)
    empty = path.stat().st_size
    for k in range(60):
        await db.run(db.transaction, insert(k, "y" * 4000))
        if k % 5 == 0:
            await asyncio.sleep(0.01)  # the file's thread gets its turn
    deadline = time.monotonic() + 5
    while len(checkpoints) < 5 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert len(checkpoints) >= 5
    assert threading.get_ident() not in checkpoints  # never on the loop
    assert path.stat().st_size > empty + 50 * 4000  # the rows reached the file itself
    wal = Path(str(path) + "-wal").stat().st_size
    assert wal < 20 * 8192, wal  # started over after a checkpoint, not 60 rows long
    await db.aclose()


async def test_an_error_in_the_thread_quotes_the_callers_request_id(tmp_path: Path) -> None:
    db = SQLiteFile(str(tmp_path / "f.db"), name="The test file", store="test store",
                    schema=SCHEMA)
    token = request_id.set("req_in_the_thread")
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await db.run_in_thread(db.call, lambda c: c.execute("SELECT * FROM missing"))
    finally:
        request_id.reset(token)
    assert raised.value.message.startswith("The test store is unavailable right now.")
    assert "quoting request id req_in_the_thread" in raised.value.message
    await db.aclose()


async def test_a_call_made_before_close_does_not_open_the_file_again(tmp_path: Path) -> None:
    path = str(tmp_path / "f.db")
    db = SQLiteFile(path, name="The test file", schema=SCHEMA, lazy=True)
    await db.run(db.transaction, insert(1))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the next write waits in the file's thread
    queued = asyncio.ensure_future(db.run(db.transaction, insert(2)))
    await asyncio.sleep(0.05)
    closing = asyncio.ensure_future(db.aclose())
    await asyncio.sleep(0.05)
    blocker.execute("ROLLBACK")
    await queued  # it held the connection before the close: it ran
    await closing
    assert db._conn is None  # closed, and nothing opened it again
    await db.run(db.transaction, insert(3))  # a call made after the close opens it again
    assert db._conn is not None
    await db.aclose()
    blocker.close()
    assert rows(path) == 3


async def test_a_call_queued_behind_the_close_is_refused_not_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "f.db")
    db = SQLiteFile(path, name="The test file", schema=SCHEMA, lazy=True)
    await db.run(db.transaction, insert(1))
    pool = db._pool()
    generation = db._generation
    await db.aclose()  # the close ran; a call handed over before it now reaches the thread
    with pytest.raises(StoreUnavailable) as raised:
        await asyncio.get_running_loop().run_in_executor(
            None, db._waiting, generation, db.transaction, insert(2))
    assert raised.value.detail.endswith("is closed.")
    assert db._conn is None and pool is not db._executor
    assert rows(path) == 1


@pytest.mark.parametrize("autocheckpoint", [False, True])
async def test_which_checkpoints_a_file_gets(tmp_path: Path, autocheckpoint: bool) -> None:
    db = SQLiteFile(str(tmp_path / "f.db"), name="The test file", schema=SCHEMA,
                    autocheckpoint=autocheckpoint)
    pages = await db.run(db.call, lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    # SQLite's own (1000 pages) only where every call runs in the thread; ours always
    assert pages == (1000 if autocheckpoint else 0)
    limit = await db.run(db.call, lambda c: c.execute("PRAGMA journal_size_limit").fetchone()[0])
    assert limit == sqlite_file.WAL_SIZE_LIMIT  # a burst's WAL is truncated afterwards
    await db.aclose()

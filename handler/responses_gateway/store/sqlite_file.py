"""One local SQLite file as the gateway uses it: opened, run, checkpointed and closed one way.

The response store (store/sqlite.py), the usage ledger (store/usage_sqlite.py), routed
deployments' health (store/health_sqlite.py), the file records (files/local.py) and the vector
engine (vectors/local.py) each keep their tables in a local SQLite file through a
:class:`SQLiteFile`.

Opening: WAL (readers run beside the writer, across processes too), ``synchronous = NORMAL``
(a WAL commit does not wait for the disk), SQLite's own checkpoint off (it would sync the file
in whichever thread commits: the event loop's), then the caller's schema script (``CREATE ...
IF NOT EXISTS``) and, in one ``BEGIN IMMEDIATE`` transaction, its ``prepare`` (migrations, a
purge), all waiting for another process's write as long as any call may. Every
read-check-write is one ``BEGIN IMMEDIATE`` transaction (:meth:`SQLiteFile.tx`), so processes
sharing the file agree.

Running, two ways:

- :meth:`SQLiteFile.run`, loop-first: a call runs right on the event loop's thread when the
  connection is free and the file is not busy (``busy_timeout = 0``), which is nearly always:
  handing a call to a thread and back costs more CPU than the call itself (a store put is
  ~70 µs; the hand-off ~100-170 µs on two cores, ~5x a usage step's CPU). The loop never waits
  for the database, though: a call that finds it busy (another process writing the file, or
  the file's thread using the connection) goes to the file's one thread, which waits up to
  ``busy_timeout``.
- :meth:`SQLiteFile.run_in_thread`: straight to that thread, for calls known to take long
  (the vector engine's searches and chunk writes: milliseconds to seconds of sqlite-vec, FTS5
  and numpy), which must not hold the loop even on a free file.

Every :data:`CHECKPOINT_EVERY` calls a passive WAL checkpoint runs on that thread, so it does
not sync the file on the loop; calls meanwhile take the thread too. A file whose calls all run
in the thread (``autocheckpoint``: the vector engine's large chunk writes) keeps SQLite's own
checkpoint as well, which never runs on the loop there and keeps its WAL small between ours.
``journal_size_limit`` truncates the WAL after a checkpoint, so a burst leaves no large file.
Calls in the thread run in the caller's context (the request id that errors quote).
An ``sqlite3`` error becomes :class:`StoreUnavailable` naming the caller's file ("The response
store (PATH) failed: ..."); the detail goes to the log, never to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from responses_gateway.store.base import StoreUnavailable

CHECKPOINT_EVERY = 500  # calls between WAL checkpoints (read when counted: tests lower it)
WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes the WAL file is truncated to after a checkpoint
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

logger = logging.getLogger("responses_gateway.store")

T = TypeVar("T")
Connection = Any  # sqlite3's, or another sqlite3-compatible module's (sqlean for sqlite-vec)


def connect(path: str) -> sqlite3.Connection:
    """The standard library's connection: autocommit (transactions are ours), any thread."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def _busy(e: sqlite3.Error) -> bool:
    return getattr(e, "sqlite_errorcode", 0) & 0xFF in _BUSY


class SQLiteFile:
    """One connection to one SQLite file (one thread at a time holds it) and the one thread
    that waits for the file when it is busy.

    ``name`` says whose file it is in the log ("The usage ledger (PATH)"), ``store`` in the
    client's error ("The usage ledger is unavailable right now"). ``lazy``: opened on
    first use (in the file's thread) and again after :meth:`aclose`; otherwise opened now, so
    a bad path fails at startup, and closed for good by :meth:`aclose`. ``connect`` makes a
    connection (the vector engine's loads sqlite-vec through sqlean; its errors are not
    ``sqlite3``'s and pass unchanged).
    """

    def __init__(
        self,
        path: str,
        *,
        name: str,
        store: str = "response store",
        schema: str = "",
        prepare: Callable[[Connection], None] | None = None,
        busy_timeout_ms: int = 10_000,
        connect: Callable[[str], Connection] = connect,
        lazy: bool = False,
        autocheckpoint: bool = False,
    ) -> None:
        self.path = path
        self.name = name
        self.store = store
        self._autocheckpoint = autocheckpoint
        #: bumped by :meth:`aclose`: a call made before it may not open the file again
        self._generation = 0
        self._schema = schema
        self._prepare = prepare
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._connect = connect
        self._lazy = lazy
        self._conn: Connection | None = None
        self._lock = threading.Lock()  # one thread at a time uses the connection
        self._executor: ThreadPoolExecutor | None = None
        self._checkpoint: Future[None] | None = None  # queued or running
        self._calls = 0
        if not lazy:
            self._guarded(self._open)

    @property
    def conn(self) -> Connection:
        """The connection, for a function :meth:`run` runs (which holds it)."""
        conn = self._conn
        if conn is None:
            raise self.failed()
        return conn

    # -- errors ------------------------------------------------------------------------------

    def failed(self, e: sqlite3.Error | None = None) -> StoreUnavailable:
        what = "is closed." if e is None else f"failed: {e}"
        return StoreUnavailable(f"{self.name} ({self.path}) {what}", store=self.store)

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except sqlite3.Error as e:
            raise self.failed(e) from e

    # -- opening and transactions ------------------------------------------------------------

    def _open(self) -> None:
        conn = self._connect(self.path)
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            if not self._autocheckpoint:
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # see _checkpoint_now
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            if self._schema:
                conn.executescript(self._schema)
            self._conn = conn
            if self._prepare is not None:
                self.transaction(self._prepare)
            conn.execute("PRAGMA busy_timeout = 0")  # from now on busy means "use the thread"
        except BaseException:
            self._conn = None
            conn.close()
            raise

    @contextmanager
    def tx(self, mode: str = "IMMEDIATE") -> Iterator[Connection]:
        """A transaction; IMMEDIATE takes the write lock first so read-check-write is atomic,
        DEFERRED reads one snapshot."""
        conn = self.conn
        conn.execute(f"BEGIN {mode}")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # a failed COMMIT too: never leave a transaction open
                conn.execute("ROLLBACK")
            raise

    def transaction(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in one IMMEDIATE transaction (give it to :meth:`run`)."""
        with self.tx() as c:
            return fn(c)

    def call(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` outside a transaction (give it to :meth:`run`)."""
        return fn(self.conn)

    # -- running -----------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-file")
        return self._executor

    def _count(self) -> None:
        """Every CHECKPOINT_EVERY calls a checkpoint is queued for the file's thread (one at
        a time)."""
        if self._conn is None and not self._lazy:
            raise self.failed()
        self._calls += 1
        if self._calls % CHECKPOINT_EVERY == 0 and (
            self._checkpoint is None or self._checkpoint.done()
        ):
            self._checkpoint = self._pool().submit(self._checkpoint_now)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` holding the connection: on the loop while the file is free, else in
        the file's thread, waiting up to ``busy_timeout``."""
        self._count()
        if self._conn is not None and self._lock.acquire(blocking=False):
            try:
                return fn(*args)
            except sqlite3.Error as e:
                if not _busy(e):
                    raise self.failed(e) from e
                # busy: rolled back (or never begun); the file's thread runs it again, waiting
            finally:
                self._lock.release()
        return await self._in_thread(fn, *args)

    async def run_in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` holding the connection, in the file's thread: never on the loop."""
        self._count()
        return await self._in_thread(fn, *args)

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the request id an error quotes
        return await loop.run_in_executor(self._pool(), functools.partial(
            context.run, self._waiting, self._generation, fn, *args))

    def _waiting(self, generation: int, fn: Callable[..., T], *args: Any) -> T:
        """On the file's thread: ``fn``, waiting up to ``busy_timeout`` for the database. A
        lazy file opens again for a call made after :meth:`aclose`, not one made before."""
        with self._lock:
            if self._conn is None:
                if not self._lazy or generation != self._generation:
                    raise self.failed()
                self._guarded(self._open)
            conn = self.conn
            self._guarded(conn.execute, f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            try:
                return self._guarded(fn, *args)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA busy_timeout = 0")

    def _checkpoint_now(self) -> None:
        """Copy the WAL into the database file, on the file's thread: a checkpoint syncs the
        file, which must not hold up the event loop. It holds the connection meanwhile (the
        loop's calls go to the thread), so no write of ours lands during it and the next write
        starts the WAL again from its beginning: a passive checkpoint beside a steady stream of
        writes would never catch up, and the WAL would grow without bound."""
        try:
            with self._lock:
                if self._conn is not None:  # closed meanwhile: nothing to do
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception:  # any module's error (sqlean's too): the next checkpoint tries again
            logger.warning("WAL checkpoint of %s failed", self.path, exc_info=True)

    # -- closing -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection once the file's thread is done with what it was given. The
        thread is let go here, on the loop, so no call can be handed to it after it stopped
        taking them; a call made meanwhile gets a thread of its own (and a lazy file opens
        again for it)."""
        self._generation += 1
        executor, self._executor = self._executor, None
        if executor is None:
            self._close_connection()
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._close_connection)
        finally:
            executor.shutdown(wait=False)

    def close(self) -> None:
        """:meth:`aclose` outside an event loop (waits for what the thread was given)."""
        self._generation += 1
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._close_connection()

    def _close_connection(self) -> None:
        """Close the connection (after a call holding it ends)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

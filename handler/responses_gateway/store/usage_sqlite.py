"""The usage ledger in the response store's SQLite file (store/usage.py says what it keeps).

A connection of its own, in the store's WAL file, opened on first use; every step is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file count one limit. Every response
makes one, so, as the store's calls do, a step runs on the event loop while the file is free
and in the file's thread, waiting, while another process writes it (store/sqlite_file.py).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from responses_gateway.store.sqlite_file import SQLiteFile
from responses_gateway.store.usage import (
    COUNTERS,
    Caps,
    Counts,
    UsageEntry,
    UsageRow,
    UsageStore,
    Windows,
    over,
    refusal,
)

T = TypeVar("T")
_BUSY_SECONDS = 10  # how long a step waits, in its thread, for another process's write

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS usage_buckets (
    hour INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    {", ".join(f"{c} INTEGER NOT NULL DEFAULT 0" for c in COUNTERS)},
    tool_calls TEXT NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (hour, tenant, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_log (
    response_id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    row TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_log_by_time ON usage_log (created_at, response_id);
CREATE TABLE IF NOT EXISTS usage_windows (
    tenant TEXT NOT NULL,
    width INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, width, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_budgets (
    tenant TEXT NOT NULL,
    period TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, period)
) WITHOUT ROWID;
"""

_instances: dict[str, SQLiteUsage] = {}
_instances_lock = threading.Lock()


class SQLiteUsage(UsageStore):
    """The ledger of one SQLite file; ``of(path)`` shares one per file in a process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = SQLiteFile(path, name="The usage ledger", store="usage ledger",
                                schema=_SCHEMA,
                                busy_timeout_ms=_BUSY_SECONDS * 1000, lazy=True)

    @classmethod
    def of(cls, path: str) -> SQLiteUsage:
        with _instances_lock:
            ledger = _instances.get(path)
            if ledger is None:
                ledger = _instances[path] = cls(path)
            return ledger

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(self._file.transaction, fn)

    async def record(self, entry: UsageEntry, windows: Windows | None) -> bool:
        def write(c: sqlite3.Connection) -> bool:
            added = c.execute(
                "INSERT OR IGNORE INTO usage_log VALUES (?, ?, ?)",
                (entry.response_id, entry.created_at,
                 orjson.dumps(entry.log_row()).decode()),
            ).rowcount
            if not added:
                return False
            key = (entry.hour, entry.tenant, entry.model)
            row = c.execute(
                "SELECT tool_calls FROM usage_buckets WHERE hour=? AND tenant=? AND model=?", key
            ).fetchone()
            tools = orjson.loads(row[0]) if row else {}
            for kind, n in entry.tool_calls.items():
                tools[kind] = tools.get(kind, 0) + n
            values = [entry.counts.get(name, 0) for name in COUNTERS]
            c.execute(
                f"INSERT INTO usage_buckets (hour, tenant, model, {', '.join(COUNTERS)},"
                f" tool_calls) VALUES (?, ?, ?, {', '.join('?' * len(COUNTERS))}, ?)"
                " ON CONFLICT (hour, tenant, model) DO UPDATE SET "
                + ", ".join(f"{n} = {n} + excluded.{n}" for n in COUNTERS)
                + ", tool_calls = excluded.tool_calls",
                (*key, *values, orjson.dumps(tools).decode()),
            )
            if windows is not None and entry.unreserved:
                _add_tokens(c, entry.tenant, windows, entry.unreserved)
            return True

        return await self._run(write)

    async def admit(self, tenant: str, caps: Caps, windows: Windows) -> Counts:
        def admit(c: sqlite3.Connection) -> Counts:
            counts = _counts(c, tenant, windows)
            refused = refusal(counts, caps)
            if refused is not None:
                counts.admitted, counts.refused_by = False, refused
                return counts
            if windows.window is None:  # a budget alone: nothing counted per window
                return counts
            c.execute(
                "INSERT INTO usage_windows (tenant, width, idx, requests) VALUES (?, ?, ?, 1)"
                " ON CONFLICT (tenant, width, idx) DO UPDATE SET requests = requests + 1",
                (tenant, windows.window_seconds, windows.window),
            )
            counts.requests += 1
            return counts

        return await self._run(admit)

    async def reserve(self, tenant: str, caps: Caps, windows: Windows, tokens: int) -> Counts:
        def reserve(c: sqlite3.Connection) -> Counts:
            counts = _counts(c, tenant, windows)
            refused = over(counts, caps, tokens)
            if refused is not None:
                counts.admitted, counts.refused_by = False, refused
                return counts
            _add_tokens(c, tenant, windows, tokens)
            counts.tokens += tokens if windows.window is not None else 0
            counts.budget_tokens += tokens if windows.period_key is not None else 0
            return counts

        return await self._run(reserve)

    async def counts(self, tenant: str, windows: Windows) -> Counts:
        return await self._run(lambda c: _counts(c, tenant, windows))

    async def buckets(self, start: int, end: int) -> list[UsageRow]:
        def read(c: sqlite3.Connection) -> list[UsageRow]:
            rows = c.execute(
                f"SELECT hour, tenant, model, {', '.join(COUNTERS)}, tool_calls"
                " FROM usage_buckets WHERE hour >= ? AND hour < ? ORDER BY hour",
                (start, end),
            ).fetchall()
            return [
                UsageRow(r[0], r[1], r[2], dict(zip(COUNTERS, r[3:-1], strict=True)),
                         orjson.loads(r[-1]))
                for r in rows
            ]

        return await self._run(read)

    async def log(self, start: int, end: int, limit: int,
                  before: tuple[int, str] | None = None) -> list[dict[str, Any]]:
        def read(c: sqlite3.Connection) -> list[dict[str, Any]]:
            sql = "SELECT row FROM usage_log WHERE created_at >= ? AND created_at < ?"
            args: list[Any] = [start, end]
            if before is not None:
                sql += " AND (created_at < ? OR (created_at = ? AND response_id < ?))"
                args += [before[0], before[0], before[1]]
            sql += " ORDER BY created_at DESC, response_id DESC LIMIT ?"
            return [orjson.loads(r[0]) for r in c.execute(sql, (*args, limit))]

        return await self._run(read)

    async def log_row(self, response_id: str) -> dict[str, Any] | None:
        def read(c: sqlite3.Connection) -> dict[str, Any] | None:
            row = c.execute("SELECT row FROM usage_log WHERE response_id = ?",
                            (response_id,)).fetchone()
            return orjson.loads(row[0]) if row else None

        return await self._run(read)

    async def conversations(self, limit: int, after: str | None = None,
                            tenant: str | None = None) -> list[dict[str, Any]]:
        """Newest first (created_at, then id, both descending), as DynamoDB's index merges
        them (store/dynamodb/usage.py); ``after``'s (created_at, id) is the cursor."""

        def read(c: sqlite3.Connection) -> list[dict[str, Any]]:
            exists = c.execute("SELECT 1 FROM sqlite_master WHERE name = 'conversations'")
            if exists.fetchone() is None:
                if after is not None:
                    raise LookupError(after)
                return []
            sql = "SELECT id, tenant, created_at, metadata FROM conversations WHERE 1"
            args: list[Any] = []
            if tenant is not None:
                sql += " AND tenant = ?"
                args.append(tenant)
            if after is not None:
                row = c.execute("SELECT created_at FROM conversations WHERE id = ?",
                                (after,)).fetchone()
                if row is None:
                    raise LookupError(after)
                sql += " AND (created_at < ? OR (created_at = ? AND id < ?))"
                args += [row[0], row[0], after]
            sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
            return [_conversation(r) for r in c.execute(sql, (*args, limit))]

        return await self._run(read)

    async def conversation(self, conversation_id: str) -> dict[str, Any] | None:
        def read(c: sqlite3.Connection) -> dict[str, Any] | None:
            if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'conversations'"
                         ).fetchone() is None:
                return None
            row = c.execute("SELECT id, tenant, created_at, metadata FROM conversations"
                            " WHERE id = ?", (conversation_id,)).fetchone()
            return None if row is None else _conversation(row)

        return await self._run(read)

    async def aclose(self) -> None:
        await self._file.aclose()


def _conversation(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "api_key_id": row[1], "created_at": row[2],
            "metadata": orjson.loads(row[3])}


def _counts(c: sqlite3.Connection, tenant: str, windows: Windows) -> Counts:
    counts = Counts()
    if windows.window is not None:
        row = c.execute(
            "SELECT requests, tokens FROM usage_windows WHERE tenant=? AND width=? AND idx=?",
            (tenant, windows.window_seconds, windows.window),
        ).fetchone()
        if row:
            counts.requests, counts.tokens = row
    if windows.period_key is not None:
        row = c.execute("SELECT tokens FROM usage_budgets WHERE tenant=? AND period=?",
                        (tenant, windows.period_key)).fetchone()
        if row:
            counts.budget_tokens = row[0]
    return counts


def _add_tokens(c: sqlite3.Connection, tenant: str, windows: Windows, tokens: int) -> None:
    if windows.window is not None:
        c.execute(
            "INSERT INTO usage_windows (tenant, width, idx, tokens) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (tenant, width, idx) DO UPDATE SET tokens = tokens + excluded.tokens",
            (tenant, windows.window_seconds, windows.window, tokens),
        )
    if windows.period_key is not None:
        c.execute(
            "INSERT INTO usage_budgets VALUES (?, ?, ?)"
            " ON CONFLICT (tenant, period) DO UPDATE SET tokens = tokens + excluded.tokens",
            (tenant, windows.period_key, tokens),
        )

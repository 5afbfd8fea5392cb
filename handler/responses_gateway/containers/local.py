"""Container records on this machine: tables ``containers`` and ``container_files`` in the
store's SQLite file, run as the file records are (files/local.py: a few rows a call, on the
event loop while the file is free, in the file's thread while another process writes).

The bound on a tenant's running containers is checked by counting them in the same
``BEGIN IMMEDIATE`` transaction that adds one, so two creates cannot pass it together.
"""

from __future__ import annotations

import sqlite3

from responses_gateway.containers.models import EXPIRED, RUNNING, ContainerFile, ContainerRecord
from responses_gateway.containers.records import ContainerRecords, TooManyContainers
from responses_gateway.store.sqlite_file import SQLiteFile, connect

_SCHEMA = """
CREATE TABLE IF NOT EXISTS containers (
    tenant TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL,
    last_active_at REAL NOT NULL, memory_limit TEXT NOT NULL, expires_minutes INTEGER,
    idle_seconds REAL NOT NULL, status TEXT NOT NULL, state TEXT, forget_at REAL,
    active_until REAL NOT NULL,
    PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS containers_by_time ON containers (tenant, created_at, id);
CREATE INDEX IF NOT EXISTS containers_running ON containers (active_until)
    WHERE status = 'running';
CREATE INDEX IF NOT EXISTS containers_forgotten ON containers (forget_at)
    WHERE status = 'expired';
CREATE TABLE IF NOT EXISTS container_files (
    tenant TEXT NOT NULL, container_id TEXT NOT NULL, id TEXT NOT NULL, path TEXT NOT NULL,
    bytes INTEGER NOT NULL, created_at INTEGER NOT NULL, source TEXT NOT NULL,
    PRIMARY KEY (tenant, container_id, id),
    UNIQUE (tenant, container_id, path));
"""
_COLUMNS = ("id", "tenant", "name", "created_at", "last_active_at", "memory_limit",
            "expires_minutes", "idle_seconds", "status", "state", "forget_at")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM containers"
_FILE_COLUMNS = ("id", "container_id", "tenant", "path", "bytes", "created_at", "source")
_SELECT_FILE = f"SELECT {', '.join(_FILE_COLUMNS)} FROM container_files"
BUSY_TIMEOUT_MS = 30_000


def _rows(path: str) -> sqlite3.Connection:
    conn = connect(path)
    conn.row_factory = sqlite3.Row
    return conn


def _record(row: sqlite3.Row | None) -> ContainerRecord | None:
    return ContainerRecord.from_row(dict(row)) if row is not None else None


class SQLiteContainerRecords(ContainerRecords):
    def __init__(self, path: str) -> None:
        self.db = SQLiteFile(path, name="The container records", store="container store",
                             schema=_SCHEMA, connect=_rows, busy_timeout_ms=BUSY_TIMEOUT_MS)

    async def add(self, record: ContainerRecord, max_running: int, now: float) -> None:
        def write(c: sqlite3.Connection) -> None:
            if max_running:
                (running,) = c.execute(
                    "SELECT COUNT(*) FROM containers WHERE tenant = ? AND status = ? AND "
                    "active_until > ?", (record.tenant, RUNNING, now)).fetchone()
                if running >= max_running:
                    raise TooManyContainers(running)
            row = record.to_row()
            row["active_until"] = record.active_until
            c.execute(f"INSERT INTO containers ({', '.join(row)}) VALUES "
                      f"({', '.join('?' * len(row))})", list(row.values()))

        await self.db.run(self.db.transaction, write)

    async def get(self, tenant: str, container_id: str) -> ContainerRecord | None:
        return _record(await self.db.run(self.db.call, lambda c: c.execute(
            f"{_SELECT} WHERE tenant = ? AND id = ?", (tenant, container_id)).fetchone()))

    async def page(self, tenant: str, *, name: str | None, order: str, after: str | None,
                   limit: int) -> tuple[list[ContainerRecord], bool]:
        def read(c: sqlite3.Connection) -> tuple[list[ContainerRecord], bool]:
            where, args = ["tenant = ?"], [tenant]
            if name is not None:
                where.append("name = ?")
                args.append(name)
            if after:
                cursor = c.execute("SELECT created_at, id FROM containers WHERE tenant = ? "
                                   "AND id = ?", (tenant, after)).fetchone()
                if cursor is not None:
                    where.append(f"(created_at, id) {'<' if order == 'desc' else '>'} (?, ?)")
                    args += [cursor["created_at"], cursor["id"]]
            direction = "DESC" if order == "desc" else "ASC"
            rows = c.execute(
                f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY created_at {direction}, "
                f"id {direction} LIMIT ?", [*args, limit + 1]).fetchall()
            return [ContainerRecord.from_row(dict(r)) for r in rows[:limit]], len(rows) > limit

        return await self.db.run(self.db.call, read)  # at most 101 rows by an index

    async def touch(self, tenant: str, container_id: str, now: float,
                    state: str | None = None) -> bool:
        sets, args = ["last_active_at = ?", "active_until = ? + idle_seconds"], [now, now]
        if state is not None:
            sets.append("state = ?")
            args.append(state)
        return await self.db.run(self.db.transaction, lambda c: c.execute(
            f"UPDATE containers SET {', '.join(sets)} WHERE tenant = ? AND id = ? AND "
            "status = ?", [*args, tenant, container_id, RUNNING]).rowcount > 0)

    async def expire(self, tenant: str, container_id: str, now: float,
                     forget_at: float) -> bool:
        def write(c: sqlite3.Connection) -> bool:
            if not c.execute(
                    "UPDATE containers SET status = ?, forget_at = ? WHERE tenant = ? AND id = ? "
                    "AND status = ? AND active_until <= ?",
                    (EXPIRED, forget_at, tenant, container_id, RUNNING, now)).rowcount:
                return False
            c.execute("DELETE FROM container_files WHERE tenant = ? AND container_id = ?",
                      (tenant, container_id))
            return True

        return await self.db.run(self.db.transaction, write)

    async def remove(self, tenant: str, container_id: str) -> ContainerRecord | None:
        def write(c: sqlite3.Connection) -> ContainerRecord | None:
            record = _record(c.execute(f"{_SELECT} WHERE tenant = ? AND id = ?",
                                       (tenant, container_id)).fetchone())
            if record is None:
                return None
            c.execute("DELETE FROM containers WHERE tenant = ? AND id = ?",
                      (tenant, container_id))
            c.execute("DELETE FROM container_files WHERE tenant = ? AND container_id = ?",
                      (tenant, container_id))
            return record

        return await self.db.run(self.db.transaction, write)

    async def expired(self, tenant: str | None, now: float, limit: int
                      ) -> list[ContainerRecord]:
        where, args = "status = ? AND active_until <= ?", [RUNNING, now]
        if tenant is not None:
            where, args = where + " AND tenant = ?", [*args, tenant]
        rows = await self.db.run_in_thread(self.db.call, lambda c: c.execute(
            f"{_SELECT} WHERE {where} LIMIT ?", [*args, limit]).fetchall())
        return [ContainerRecord.from_row(dict(r)) for r in rows]

    async def forget(self, now: float, limit: int) -> int:
        return await self.db.run_in_thread(self.db.transaction, lambda c: c.execute(
            "DELETE FROM containers WHERE rowid IN (SELECT rowid FROM containers WHERE "
            "status = ? AND forget_at <= ? LIMIT ?)", (EXPIRED, now, limit)).rowcount)

    # -- container files ------------------------------------------------------------------

    async def put_file(self, file: ContainerFile) -> ContainerFile:
        def write(c: sqlite3.Connection) -> ContainerFile:
            row = file.to_row()
            c.execute(
                f"INSERT INTO container_files ({', '.join(row)}) VALUES "
                f"({', '.join('?' * len(row))}) ON CONFLICT (tenant, container_id, path) DO "
                "UPDATE SET bytes = excluded.bytes, source = excluded.source",
                list(row.values()))
            stored = c.execute(f"{_SELECT_FILE} WHERE tenant = ? AND container_id = ? AND "
                               "path = ?", (file.tenant, file.container_id, file.path)).fetchone()
            return ContainerFile.from_row(dict(stored))

        return await self.db.run(self.db.transaction, write)

    async def get_file(self, tenant: str, container_id: str, file_id: str
                       ) -> ContainerFile | None:
        row = await self.db.run(self.db.call, lambda c: c.execute(
            f"{_SELECT_FILE} WHERE tenant = ? AND container_id = ? AND id = ?",
            (tenant, container_id, file_id)).fetchone())
        return ContainerFile.from_row(dict(row)) if row is not None else None

    async def files(self, tenant: str, container_id: str) -> list[ContainerFile]:
        rows = await self.db.run(self.db.call, lambda c: c.execute(
            f"{_SELECT_FILE} WHERE tenant = ? AND container_id = ? ORDER BY created_at, id",
            (tenant, container_id)).fetchall())
        return [ContainerFile.from_row(dict(r)) for r in rows]

    async def remove_file(self, tenant: str, container_id: str, file_id: str
                          ) -> ContainerFile | None:
        def write(c: sqlite3.Connection) -> ContainerFile | None:
            row = c.execute(f"{_SELECT_FILE} WHERE tenant = ? AND container_id = ? AND id = ?",
                            (tenant, container_id, file_id)).fetchone()
            if row is None:
                return None
            c.execute("DELETE FROM container_files WHERE tenant = ? AND container_id = ? AND "
                      "id = ?", (tenant, container_id, file_id))
            return ContainerFile.from_row(dict(row))

        return await self.db.run(self.db.transaction, write)

    async def aclose(self) -> None:
        await self.db.aclose()

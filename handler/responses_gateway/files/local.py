"""Files on this machine: bytes in a folder beside the SQLite store (``gateway.db.files/``),
records in that SQLite database (table ``files``, ``file_usage`` per tenant, and ``uploads``
for the Uploads API), run as the store's calls are (store/sqlite_file.py: a few rows each, on
the event loop while the file is free, in the file's thread while another process writes)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import BinaryIO

from responses_gateway.files.models import (
    CANCELLED,
    COMPLETING,
    EXPIRED,
    PENDING,
    FileRecord,
    UploadRecord,
)
from responses_gateway.files.store import (
    CHUNK_BYTES,
    Blobs,
    FileRecords,
    TenantFull,
    UploadRecords,
)
from responses_gateway.store.sqlite_file import SQLiteFile, connect

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    tenant TEXT NOT NULL, id TEXT NOT NULL, filename TEXT NOT NULL, bytes INTEGER NOT NULL,
    purpose TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER,
    PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS files_by_time ON files (tenant, created_at, id);
CREATE INDEX IF NOT EXISTS files_by_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS file_usage (tenant TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS uploads (
    tenant TEXT NOT NULL, id TEXT NOT NULL, filename TEXT NOT NULL, bytes INTEGER NOT NULL,
    purpose TEXT NOT NULL, mime_type TEXT NOT NULL, created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL, status TEXT NOT NULL, received INTEGER NOT NULL,
    file_id TEXT, file_expires_after INTEGER, claimed_until REAL NOT NULL,
    PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS uploads_open ON uploads (expires_at)
    WHERE status IN ('pending', 'completing');
"""
_COLUMNS = "id, tenant, filename, bytes, purpose, created_at, expires_at"


BUSY_TIMEOUT_MS = 30_000  # how long a call waits, in the file's thread, for another writer


def _rows(path: str) -> sqlite3.Connection:
    """The standard connection, rows readable by column name."""
    conn = connect(path)
    conn.row_factory = sqlite3.Row
    return conn


def _records(path: str) -> SQLiteFile:
    return SQLiteFile(path, name="The file records", store="file store", schema=_SCHEMA,
                      connect=_rows, busy_timeout_ms=BUSY_TIMEOUT_MS)


class SQLiteFileRecords(FileRecords):
    def __init__(self, path: str) -> None:
        self.db = _records(path)

    async def add(self, record: FileRecord, tenant_limit: int, credit: int = 0) -> None:
        def write(c: sqlite3.Connection) -> None:
            _count(c, record.tenant, record.bytes - credit, tenant_limit)
            row = record.to_row()
            c.execute(f"INSERT INTO files ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      [row[k] for k in _COLUMNS.split(", ")])

        await self.db.run(self.db.transaction, write)

    async def get(self, file_id: str, tenant: str) -> FileRecord | None:
        def read(c: sqlite3.Connection) -> FileRecord | None:
            row = c.execute(f"SELECT {_COLUMNS} FROM files WHERE tenant = ? AND id = ?",
                            (tenant, file_id)).fetchone()
            return FileRecord.from_row(dict(row)) if row else None

        return await self.db.run(self.db.call, read)

    async def page(
        self, tenant: str, *, purpose: str | None, order: str, after: str | None, limit: int,
    ) -> tuple[list[FileRecord], bool]:
        def read(c: sqlite3.Connection) -> tuple[list[FileRecord], bool]:
            where, args = ["tenant = ?"], [tenant]
            if purpose:
                where.append("purpose = ?")
                args.append(purpose)
            if after:
                cursor = c.execute("SELECT created_at, id FROM files WHERE tenant = ? AND id = ?",
                                   (tenant, after)).fetchone()
                if cursor is not None:
                    where.append(f"(created_at, id) {'<' if order == 'desc' else '>'} (?, ?)")
                    args += [cursor["created_at"], cursor["id"]]
            direction = "DESC" if order == "desc" else "ASC"
            rows = c.execute(
                f"SELECT {_COLUMNS} FROM files WHERE {' AND '.join(where)} "
                f"ORDER BY created_at {direction}, id {direction} LIMIT ?", [*args, limit + 1]
            ).fetchall()
            return [FileRecord.from_row(dict(r)) for r in rows[:limit]], len(rows) > limit

        # Up to 10,000 rows (OpenAI's limit): tens of milliseconds, never on the loop.
        return await self.db.run_in_thread(self.db.call, read)

    async def remove(self, file_id: str, tenant: str) -> FileRecord | None:
        def write(c: sqlite3.Connection) -> FileRecord | None:
            row = c.execute(f"SELECT {_COLUMNS} FROM files WHERE tenant = ? AND id = ?",
                            (tenant, file_id)).fetchone()
            if row is None:
                return None
            c.execute("DELETE FROM files WHERE tenant = ? AND id = ?", (tenant, file_id))
            c.execute("UPDATE file_usage SET bytes = MAX(0, bytes - ?) WHERE tenant = ?",
                      (row["bytes"], tenant))
            return FileRecord.from_row(dict(row))

        return await self.db.run(self.db.transaction, write)

    async def used_bytes(self, tenant: str) -> int:
        return await self.db.run(self.db.call, lambda c: _used(c, tenant))  # one row

    async def expired(self, tenant: str | None, now: float, limit: int) -> list[FileRecord]:
        where, args = "expires_at IS NOT NULL AND expires_at <= ?", [now]
        if tenant is not None:
            where, args = where + " AND tenant = ?", [now, tenant]
        rows = await self.db.run_in_thread(self.db.call, lambda c: c.execute(
            f"SELECT {_COLUMNS} FROM files WHERE {where} LIMIT ?", [*args, limit]).fetchall())
        return [FileRecord.from_row(dict(r)) for r in rows]

    async def aclose(self) -> None:
        await self.db.aclose()


def _used(c: sqlite3.Connection, tenant: str) -> int:
    row = c.execute("SELECT bytes FROM file_usage WHERE tenant = ?", (tenant,)).fetchone()
    return int(row["bytes"]) if row else 0


def _count(c: sqlite3.Connection, tenant: str, size: int, tenant_limit: int) -> None:
    """Move the tenant's total by ``size`` (inside the caller's transaction); TenantFull when
    it adds bytes past ``tenant_limit`` (0: no bound). Giving back never goes below 0."""
    used = _used(c, tenant)
    if size > 0 and tenant_limit and used + size > tenant_limit:
        raise TenantFull(used)
    c.execute("INSERT INTO file_usage (tenant, bytes) VALUES (?, MAX(0, ?)) ON CONFLICT(tenant) "
              "DO UPDATE SET bytes = MAX(0, bytes + ?)", (tenant, size, size))


#: An open Upload past its hour whose complete (if any) stopped: UploadRecord.expirable.
_EXPIRABLE = ("expires_at <= ? AND (status = ? OR (status = ? AND claimed_until < ?)) "
              "AND status IN ('pending', 'completing')")


class SQLiteUploadRecords(UploadRecords):
    def __init__(self, path: str) -> None:
        self.db = _records(path)

    async def add(self, record: UploadRecord) -> None:
        row = record.to_row()
        await self.db.run(self.db.transaction, lambda c: c.execute(
            f"INSERT INTO uploads ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            list(row.values())))

    async def get(self, upload_id: str, tenant: str) -> UploadRecord | None:
        row = await self.db.run(self.db.call, lambda c: c.execute(
            "SELECT * FROM uploads WHERE tenant = ? AND id = ?", (tenant, upload_id)).fetchone())
        return UploadRecord.from_row(dict(row)) if row else None

    async def _change(self, sql: str, args: list[object]) -> bool:
        return await self.db.run(self.db.transaction, lambda c: c.execute(sql, args).rowcount > 0)

    async def add_part(self, upload_id: str, tenant: str, size: int, now: float,
                       tenant_limit: int) -> bool:
        def write(c: sqlite3.Connection) -> bool:
            if not c.execute(
                    "UPDATE uploads SET received = received + ? WHERE tenant = ? AND id = ? AND "
                    "status = ? AND expires_at > ? AND received + ? <= bytes",
                    [size, tenant, upload_id, PENDING, now, size]).rowcount:
                return False
            _count(c, tenant, size, tenant_limit)  # TenantFull rolls the update back
            return True

        return await self.db.run(self.db.transaction, write)

    async def claim(self, upload_id: str, tenant: str, now: float, until: float,
                    file_id: str) -> bool:
        return await self._change(
            "UPDATE uploads SET status = ?, claimed_until = ?, file_id = ? WHERE tenant = ? "
            "AND id = ? AND expires_at > ? AND (status = ? OR (status = ? AND "
            "claimed_until < ?))",
            [COMPLETING, until, file_id, tenant, upload_id, now, PENDING, COMPLETING, now])

    async def settle(self, upload_id: str, tenant: str, status: str,
                     file_id: str | None) -> None:
        await self._change(
            "UPDATE uploads SET status = ?, file_id = ?, claimed_until = 0 WHERE tenant = ? "
            "AND id = ? AND status = ?", [status, file_id, tenant, upload_id, COMPLETING])

    async def cancel(self, upload_id: str, tenant: str, now: float) -> bool:
        return await self._end(upload_id, tenant, CANCELLED,
                               "status = ? AND expires_at > ?", [PENDING, now])

    async def expire(self, upload_id: str, tenant: str, now: float) -> bool:
        return await self._end(upload_id, tenant, EXPIRED, _EXPIRABLE, [now, PENDING,
                                                                      COMPLETING, now])

    async def _end(self, upload_id: str, tenant: str, status: str, condition: str,
                   args: list[object]) -> bool:
        """The Upload -> ``status`` under ``condition``, its parts' bytes given back."""
        def write(c: sqlite3.Connection) -> bool:
            row = c.execute(f"SELECT received FROM uploads WHERE tenant = ? AND id = ? AND "
                            f"{condition}", [tenant, upload_id, *args]).fetchone()
            if row is None:
                return False
            c.execute("UPDATE uploads SET status = ? WHERE tenant = ? AND id = ?",
                      (status, tenant, upload_id))
            _count(c, tenant, -int(row["received"]), 0)
            return True

        return await self.db.run(self.db.transaction, write)

    async def expired(self, tenant: str | None, now: float, limit: int
                      ) -> list[UploadRecord]:
        where, args = _EXPIRABLE, [now, PENDING, COMPLETING, now]
        if tenant is not None:
            where, args = where + " AND tenant = ?", [*args, tenant]
        rows = await self.db.run_in_thread(self.db.call, lambda c: c.execute(
            f"SELECT * FROM uploads WHERE {where} LIMIT ?", [*args, limit]).fetchall())
        return [UploadRecord.from_row(dict(r)) for r in rows]

    async def aclose(self) -> None:
        await self.db.aclose()


class DiskBlobs(Blobs):
    """Bytes in files under ``root``; written to a temporary file and renamed into place, so
    a reader never sees half a file."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"not a blob key: {key!r}")
        return self.root.joinpath(*parts)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, self._path(key), data)

    @staticmethod
    def _put(path: Path, data: bytes) -> None:
        _write_atomically(path, lambda out: out.write(data))

    async def put_file(self, key: str, source: BinaryIO) -> None:
        await asyncio.to_thread(self._put_file, self._path(key), source)

    @staticmethod
    def _put_file(path: Path, source: BinaryIO) -> None:
        import shutil

        _write_atomically(path, lambda out: shutil.copyfileobj(source, out, CHUNK_BYTES))

    def chunks(self, key: str) -> AsyncIterator[bytes] | None:
        return self._chunks(self._path(key))

    @staticmethod
    async def _chunks(path: Path) -> AsyncIterator[bytes]:
        """Read in the default executor a chunk at a time (FileNotFoundError on the first)."""
        handle = await asyncio.to_thread(path.open, "rb")
        try:
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield chunk
        finally:
            await asyncio.to_thread(handle.close)

    async def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return None

    async def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self._path(key).unlink)

    async def delete_prefix(self, prefix: str) -> None:
        import shutil

        folder = self._path(prefix.rstrip("/"))
        await asyncio.to_thread(shutil.rmtree, folder, True)

    async def size(self, key: str) -> int | None:
        try:
            return (await asyncio.to_thread(self._path(key).stat)).st_size
        except FileNotFoundError:
            return None

    async def join(self, keys: list[str], target: str) -> None:
        await asyncio.to_thread(self._join, [self._path(k) for k in keys], self._path(target))

    @staticmethod
    def _join(sources: list[Path], path: Path) -> None:
        """The sources copied in order into a temporary file, renamed into place."""
        import shutil

        def copy(out: BinaryIO) -> None:
            for source in sources:
                with source.open("rb") as part:
                    shutil.copyfileobj(part, out, CHUNK_BYTES)

        _write_atomically(path, copy)


def _write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write`` into a temporary file beside ``path``, renamed into place: a reader sees the
    whole blob or none, and a failure (or a crash) leaves no half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

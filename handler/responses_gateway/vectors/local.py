"""Vector stores on this machine, in their own SQLite database beside the store of
``GATEWAY_STORE`` (``PATH.vectors``, see :func:`database_path`): the catalog
(``vector_stores``, ``vs_files``, ``vs_batches``), the chunks with their vectors (float32,
unit length, ``vs_chunks``), the sqlite-vec index over them (:mod:`.vec_index`), SQLite's FTS5
index over the chunk text for the keyword half of hybrid search. The embedding cache is the
tenant's own chunks: each holds its ``cache_key`` (model and text), and a file's text already
embedded for one of the tenant's files is read from there (:meth:`cached_vectors`), so a
tenant's cached vector lives exactly as long as a chunk of its data does, and another tenant's
never answers (a hit is seconds faster than a miss: a shared cache told one tenant what
another's files hold). A search uses the in-process copy of the store's
vectors (:mod:`.matrix_cache`) while the store's ``version``, bumped with every change to its
chunks, says it is current; sqlite-vec otherwise.

The database is opened with sqlean (a second SQLite library: SQLite's own guidance is that two
copies of SQLite in one process must not open the same file, since closing one drops the
POSIX locks the other holds, hence a file of its own).
"""

from __future__ import annotations

import re
import sqlite3
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from responses_gateway.store.sqlite_file import SQLiteFile
from responses_gateway.vectors import matrix_cache, vec_index

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vector_stores (
    tenant TEXT NOT NULL, id TEXT NOT NULL, created_at INTEGER NOT NULL, name TEXT,
    description TEXT, metadata TEXT NOT NULL, expires_after TEXT, last_active_at INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0, files_version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS vector_stores_by_time ON vector_stores (tenant, created_at, id);
CREATE TABLE IF NOT EXISTS vs_files (
    tenant TEXT NOT NULL, store_id TEXT NOT NULL, file_id TEXT NOT NULL, filename TEXT NOT NULL,
    created_at INTEGER NOT NULL, status TEXT NOT NULL, last_error TEXT, usage_bytes INTEGER NOT
    NULL DEFAULT 0, attributes TEXT, chunking TEXT NOT NULL, batch_id TEXT,
    lease_until REAL NOT NULL DEFAULT 0, PRIMARY KEY (tenant, store_id, file_id));
CREATE INDEX IF NOT EXISTS vs_files_running ON vs_files (status, lease_until);
CREATE TABLE IF NOT EXISTS vs_batches (
    tenant TEXT NOT NULL, store_id TEXT NOT NULL, id TEXT NOT NULL, created_at INTEGER NOT NULL,
    status TEXT NOT NULL, PRIMARY KEY (tenant, store_id, id));
CREATE TABLE IF NOT EXISTS vs_chunks (
    id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, store_id TEXT NOT NULL, file_id TEXT NOT NULL,
    idx INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, cache_key TEXT);
CREATE INDEX IF NOT EXISTS vs_chunks_by_file ON vs_chunks (tenant, store_id, file_id, idx);
CREATE VIRTUAL TABLE IF NOT EXISTS vs_chunks_fts USING fts5(
    text, content='vs_chunks', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS vs_chunks_ai AFTER INSERT ON vs_chunks BEGIN
    INSERT INTO vs_chunks_fts(rowid, text) VALUES (new.id, new.text); END;
CREATE TRIGGER IF NOT EXISTS vs_chunks_ad AFTER DELETE ON vs_chunks BEGIN
    INSERT INTO vs_chunks_fts(vs_chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TABLE IF NOT EXISTS vs_changes (
    tenant TEXT NOT NULL, store_id TEXT NOT NULL, version INTEGER NOT NULL, file_id TEXT NOT NULL,
    PRIMARY KEY (tenant, store_id, version, file_id));
"""
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024  # GATEWAY_VECTOR_CACHE_BYTES
FILE_LISTS_KEPT = 64  # stores whose completed files a process keeps parsed
CHANGES_KEPT = 256  # generations whose changed files are logged (vs_changes)
_WORD = re.compile(r"\w+", re.UNICODE)
JSON_COLUMNS = ("metadata", "expires_after", "last_error", "attributes", "chunking")


def unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def _row(row: sqlite3.Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    out = dict(row)
    for key in JSON_COLUMNS:
        if key in out and out[key] is not None:
            out[key] = orjson.loads(out[key])
    return out


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


class LocalVectorEngine:
    """The catalog and the index of the local engine (one SQLite database)."""

    def __init__(self, path: str, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.db = SQLiteFile(database_path(path), name="The vector stores", schema=_SCHEMA,
                             store="vector store index", prepare=_migrate,
                             connect=vec_index.connect, busy_timeout_ms=30_000,
                             autocheckpoint=True)  # every call runs in the thread
        self.cache = matrix_cache.MatrixCache(cache_bytes)
        # (tenant, store id) -> (generation, its completed files): read per search, parsed once
        self._files: OrderedDict[tuple[str, str], tuple[tuple[int, ...], dict[str, Any]]] = \
            OrderedDict()
        self._pool: ThreadPoolExecutor | None = None  # the matrix scan beside FTS5

    # Every call runs in the file's thread: searches and chunk writes take milliseconds to
    # seconds, which must never hold the event loop (store/sqlite_file.py).

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.db.run_in_thread(self.db.call, fn)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in one IMMEDIATE transaction."""
        return await self.db.run_in_thread(self.db.transaction, fn)

    # -- stores ---------------------------------------------------------------------------

    async def add_store(self, tenant: str, row: dict[str, Any]) -> None:
        await self._write(lambda c: c.execute(
            "INSERT INTO vector_stores (tenant, id, created_at, name, description, metadata, "
            "expires_after, last_active_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (tenant, row["id"], row["created_at"], row["name"], row.get("description"),
             _json(row["metadata"]), _json(row["expires_after"]), row["last_active_at"])))

    async def store(self, tenant: str, store_id: str) -> dict[str, Any] | None:
        return await self._read(lambda c: _row(c.execute(
            "SELECT * FROM vector_stores WHERE tenant = ? AND id = ?", (tenant, store_id)
        ).fetchone()))

    async def store_totals(self, tenant: str, store_id: str) -> tuple[dict[str, int], int]:
        """Files by status, and the bytes the store's files use."""
        def read(c: sqlite3.Connection) -> tuple[dict[str, int], int]:
            rows = c.execute("SELECT status, COUNT(*), SUM(usage_bytes) FROM vs_files WHERE "
                             "tenant = ? AND store_id = ? GROUP BY status", (tenant, store_id))
            statuses, usage = {}, 0
            for status, count, used in rows:
                statuses[status] = count
                usage += used or 0
            return statuses, usage

        return await self._read(read)

    async def stores_page(self, tenant: str, order: str, after: str | None,
                          before: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        return await self._read(lambda c: _page(
            c, "vector_stores", "id", ("tenant = ?",), [tenant], order, after, before, limit))

    async def update_store(self, tenant: str, store_id: str, changes: dict[str, Any]) -> None:
        sets = ", ".join(f"{k} = ?" for k in changes)
        values = [_json(v) if k in JSON_COLUMNS else v for k, v in changes.items()]
        await self._write(lambda c: c.execute(
            f"UPDATE vector_stores SET {sets} WHERE tenant = ? AND id = ?",
            [*values, tenant, store_id]))

    async def delete_store(self, tenant: str, store_id: str) -> bool:
        def write(c: sqlite3.Connection) -> bool:
            gone = c.execute("DELETE FROM vector_stores WHERE tenant = ? AND id = ?",
                             (tenant, store_id)).rowcount
            for table in ("vs_files", "vs_batches", "vs_chunks", "vs_changes"):
                c.execute(f"DELETE FROM {table} WHERE tenant = ? AND store_id = ?",
                          (tenant, store_id))
            return bool(gone)

        return await self._write(write)

    # -- files and batches ------------------------------------------------------------------

    async def add_files(self, tenant: str, rows: list[dict[str, Any]], limit: int) -> bool:
        """Attach files (replacing a file attached before); False when the store would hold
        more than ``limit`` files (0: no bound)."""
        def write(c: sqlite3.Connection) -> bool:
            store_id = rows[0]["store_id"]
            held = c.execute("SELECT COUNT(*) FROM vs_files WHERE tenant = ? AND store_id = ?",
                             (tenant, store_id)).fetchone()[0]
            new = sum(1 for r in rows if c.execute(
                "SELECT 1 FROM vs_files WHERE tenant = ? AND store_id = ? AND file_id = ?",
                (tenant, store_id, r["file_id"])).fetchone() is None)
            if limit and held + new > limit:
                return False
            for r in rows:
                c.execute("DELETE FROM vs_chunks WHERE tenant = ? AND store_id = ? AND "
                          "file_id = ?", (tenant, store_id, r["file_id"]))
                c.execute(
                    "INSERT OR REPLACE INTO vs_files (tenant, store_id, file_id, filename, "
                    "created_at, status, last_error, usage_bytes, attributes, chunking, batch_id,"
                    " lease_until) VALUES (?, ?, ?, ?, ?, 'in_progress', NULL, 0, ?, ?, ?, ?)",
                    (tenant, store_id, r["file_id"], r["filename"], r["created_at"],
                     _json(r["attributes"]), _json(r["chunking"]), r.get("batch_id"),
                     r["lease_until"]))
            _bump(c, tenant, store_id, [r["file_id"] for r in rows])
            return True

        return await self._write(write)

    async def file(self, tenant: str, store_id: str, file_id: str) -> dict[str, Any] | None:
        return await self._read(lambda c: _row(c.execute(
            "SELECT * FROM vs_files WHERE tenant = ? AND store_id = ? AND file_id = ?",
            (tenant, store_id, file_id)).fetchone()))

    async def files_page(
        self, tenant: str, store_id: str, *, status: str | None, batch_id: str | None,
        order: str, after: str | None, before: str | None, limit: int,
    ) -> tuple[list[dict[str, Any]], bool]:
        where, args = ["tenant = ?", "store_id = ?"], [tenant, store_id]
        if status:
            where.append("status = ?")
            args.append(status)
        if batch_id:
            where.append("batch_id = ?")
            args.append(batch_id)
        return await self._read(lambda c: _page(
            c, "vs_files", "file_id", tuple(where), args, order, after, before, limit))

    async def completed_files(self, tenant: str, store_id: str) -> dict[str, dict[str, Any]]:
        """The store's completed files (name, attributes), kept in the process while the
        store's generation and ``files_version`` (bumped with every change to a file's
        status, name or attributes) are those read: 2,000 files cost ~10 ms to read."""
        def read(c: sqlite3.Connection) -> dict[str, dict[str, Any]]:
            c.execute("BEGIN")
            try:
                row = c.execute("SELECT created_at, version, files_version FROM vector_stores "
                                "WHERE tenant = ? AND id = ?", (tenant, store_id)).fetchone()
                generation = tuple(row) if row is not None else None
                held = self._files.get((tenant, store_id))
                if held is not None and held[0] == generation:
                    self._files.move_to_end((tenant, store_id))
                    return dict(held[1])
                files = {file_id: {"filename": filename, "attributes": orjson.loads(attributes)
                                   if attributes else None}
                         for file_id, filename, attributes in c.execute(
                    "SELECT file_id, filename, attributes FROM vs_files WHERE tenant = ? AND "
                    "store_id = ? AND status = 'completed'", (tenant, store_id))}
                if generation is not None:
                    self._files[(tenant, store_id)] = (generation, files)
                    while len(self._files) > FILE_LISTS_KEPT:
                        self._files.popitem(last=False)
                return dict(files)
            finally:
                c.execute("COMMIT")

        return await self._read(read)

    async def update_file(self, tenant: str, store_id: str, file_id: str,
                          changes: dict[str, Any], *, only_status: str | None = None) -> bool:
        """Change a file's row; with ``only_status``, only while it has that status."""
        sets = ", ".join(f"{k} = ?" for k in changes)
        values = [_json(v) if k in JSON_COLUMNS else v for k, v in changes.items()]
        cond, extra = ("", []) if only_status is None else (" AND status = ?", [only_status])

        def write(c: sqlite3.Connection) -> bool:
            done = c.execute(
                f"UPDATE vs_files SET {sets} WHERE tenant = ? AND store_id = ? AND file_id = ?"
                f"{cond}", [*values, tenant, store_id, file_id, *extra]).rowcount > 0
            if done and set(changes) & {"status", "filename", "attributes"}:
                _bump_files(c, tenant, store_id)
            return done

        return await self._write(write)

    async def remove_file(self, tenant: str, store_id: str, file_id: str) -> bool:
        def write(c: sqlite3.Connection) -> bool:
            gone = c.execute("DELETE FROM vs_files WHERE tenant = ? AND store_id = ? AND "
                             "file_id = ?", (tenant, store_id, file_id)).rowcount
            c.execute("DELETE FROM vs_chunks WHERE tenant = ? AND store_id = ? AND file_id = ?",
                      (tenant, store_id, file_id))
            _bump(c, tenant, store_id, [file_id])
            return bool(gone)

        return await self._write(write)

    async def add_batch(self, tenant: str, store_id: str, batch_id: str, created: int) -> None:
        await self._write(lambda c: c.execute(
            "INSERT INTO vs_batches (tenant, store_id, id, created_at, status) VALUES "
            "(?, ?, ?, ?, 'in_progress')", (tenant, store_id, batch_id, created)))

    async def batch(self, tenant: str, store_id: str, batch_id: str
                    ) -> tuple[dict[str, Any], dict[str, int]] | None:
        def read(c: sqlite3.Connection) -> tuple[dict[str, Any], dict[str, int]] | None:
            row = c.execute("SELECT * FROM vs_batches WHERE tenant = ? AND store_id = ? AND "
                            "id = ?", (tenant, store_id, batch_id)).fetchone()
            if row is None:
                return None
            counts = dict(c.execute(
                "SELECT status, COUNT(*) FROM vs_files WHERE tenant = ? AND store_id = ? AND "
                "batch_id = ? GROUP BY status", (tenant, store_id, batch_id)).fetchall())
            return dict(row), counts

        return await self._read(read)

    async def cancel_batch(self, tenant: str, store_id: str, batch_id: str) -> None:
        def write(c: sqlite3.Connection) -> None:
            c.execute("UPDATE vs_batches SET status = 'cancelled' WHERE tenant = ? AND "
                      "store_id = ? AND id = ?", (tenant, store_id, batch_id))
            c.execute("UPDATE vs_files SET status = 'cancelled' WHERE tenant = ? AND "
                      "store_id = ? AND batch_id = ? AND status = 'in_progress'",
                      (tenant, store_id, batch_id))
            _bump_files(c, tenant, store_id)

        await self._write(write)

    async def stale_files(self, now: float) -> list[dict[str, Any]]:
        """Files left ``in_progress`` by a process that stopped (their lease ran out)."""
        return await self._read(lambda c: [_row(r) for r in c.execute(
            "SELECT * FROM vs_files WHERE status = 'in_progress' AND lease_until < ?", (now,))])

    async def claim_file(self, tenant: str, store_id: str, file_id: str, now: float,
                         lease_until: float) -> bool:
        """The lease of an ``in_progress`` file whose lease ran out, moved to ``lease_until``."""
        return await self._write(lambda c: c.execute(
            "UPDATE vs_files SET lease_until = ? WHERE tenant = ? AND store_id = ? AND "
            "file_id = ? AND status = 'in_progress' AND lease_until < ?",
            (lease_until, tenant, store_id, file_id, now)).rowcount > 0)

    # -- chunks -----------------------------------------------------------------------------

    async def cached_vectors(self, tenant: str, keys: list[str]) -> dict[str, list[float]]:
        """The vectors of the tenant's chunks with these cache keys (at unit length)."""
        def read(c: sqlite3.Connection) -> dict[str, list[float]]:
            found: dict[str, list[float]] = {}
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                rows = c.execute(f"SELECT cache_key, vector FROM vs_chunks WHERE tenant = ? "
                                 f"AND cache_key IN ({','.join('?' * len(part))})",
                                 [tenant, *part])
                found.update((k, unpack(v)) for k, v in rows)
            return found

        return await self._read(read)

    async def write_chunks(self, tenant: str, store_id: str, file_id: str,
                           chunks: list[Any], usage: int) -> bool:
        """Replace the file's chunks and mark it completed, in one transaction, unless it is
        no longer ``in_progress`` (cancelled or removed meanwhile): then nothing is written."""
        def write(c: sqlite3.Connection) -> bool:
            status = c.execute("SELECT status FROM vs_files WHERE tenant = ? AND store_id = ? "
                               "AND file_id = ?", (tenant, store_id, file_id)).fetchone()
            if status is None or status[0] != "in_progress":
                return False
            c.execute("DELETE FROM vs_chunks WHERE tenant = ? AND store_id = ? AND file_id = ?",
                      (tenant, store_id, file_id))
            c.executemany(
                "INSERT INTO vs_chunks (tenant, store_id, file_id, idx, text, vector, cache_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(tenant, store_id, file_id, ch.index, ch.text, _unit_blob(ch.vector), ch.key)
                 for ch in chunks])
            vec_index.add(c, tenant, store_id, (
                (cid, file_id, _as_array(blob)) for cid, blob in c.execute(
                    "SELECT id, vector FROM vs_chunks WHERE tenant = ? AND store_id = ? AND "
                    "file_id = ?", (tenant, store_id, file_id))))
            c.execute("UPDATE vs_files SET status = 'completed', usage_bytes = ?, "
                      "last_error = NULL WHERE tenant = ? AND store_id = ? AND file_id = ?",
                      (usage, tenant, store_id, file_id))
            _bump(c, tenant, store_id, [file_id])
            return True

        return await self._write(write)

    async def file_text(self, tenant: str, store_id: str, file_id: str) -> list[str]:
        return await self._read(lambda c: [r[0] for r in c.execute(
            "SELECT text FROM vs_chunks WHERE tenant = ? AND store_id = ? AND file_id = ? "
            "ORDER BY idx", (tenant, store_id, file_id))])

    async def search(self, tenant: str, store_id: str, queries: list[list[float]],
                     text: str, files: set[str], want_text: bool, limit: int
                     ) -> list[tuple[int, str, str, float, float]]:
        """Candidates ``(chunk id, file id, text, best cosine similarity, keyword score)``
        among ``files``: the ``limit`` best by vector, and the ``limit`` best by keywords."""
        def read(c: sqlite3.Connection) -> list[tuple[int, str, str, float, float]]:
            c.execute("BEGIN")  # one snapshot: the generation read is that of the rows read
            try:
                return self._search(c, tenant, store_id, queries, text, files, want_text, limit)
            finally:
                c.execute("COMMIT")

        return await self._read(read)

    def _search(self, c: sqlite3.Connection, tenant: str, store_id: str,
                queries: list[list[float]], text: str, files: set[str], want_text: bool,
                limit: int) -> list[tuple[int, str, str, float, float]]:
        import numpy as np

        units = [_as_array(_unit_blob(q)) for q in queries]
        near: set[int] = set()
        narrowed: list[str] | bool | None = False  # vec0's file constraint, read when needed
        scans: list[tuple[matrix_cache.StoreMatrix, list[Any]]] = []
        for dims in sorted({len(u) for u in units}):
            group = [u for u in units if len(u) == dims]
            entry = self._matrix(c, tenant, store_id, dims)
            if entry is not None:
                scans.append((entry, group))
                continue
            if narrowed is False:
                completed = c.execute(
                    "SELECT COUNT(*) FROM vs_files WHERE tenant = ? AND store_id = ? AND "
                    "status = 'completed'", (tenant, store_id)).fetchone()[0]
                narrowed = sorted(files) if len(files) < completed else None
            for unit in group:
                near.update(vec_index.candidates(c, tenant, store_id, unit, limit, narrowed))
        keyword: dict[int, float] = {}
        words = _WORD.findall(text) if want_text else []

        def scan() -> list[int]:
            return [i for entry, group in scans for i in entry.nearest(group, files, limit)]

        # with a keyword half too, the matrix scan (numpy) runs beside FTS5 (SQLite): both
        # let go of the GIL, so the two halves take the longer one's time on two cores
        scanning = self._scanner().submit(scan) if scans and words else None
        try:
            if words:
                rows = _keyword_best(c, tenant, store_id, words, files, limit)
                top_score = max((r[1] for r in rows), default=0.0) or 1.0
                keyword = {r[0]: max(0.0, r[1] / top_score) for r in rows}
        finally:
            near.update(scanning.result() if scanning is not None else scan())
        chosen = near | set(keyword)
        if not chosen:
            return []
        scored = []
        for cid, file_id, chunk_text, blob in c.execute(
                f"SELECT id, file_id, text, vector FROM vs_chunks WHERE id IN "
                f"({','.join('?' * len(chosen))})", list(chosen)):
            if file_id not in files:
                continue
            vector = np.frombuffer(blob, dtype=np.float32)
            sims = [float(vector @ u) for u in units if len(u) == len(vector)]
            scored.append((cid, file_id, chunk_text, max(sims, default=-1.0),
                           keyword.get(cid, 0.0)))
        by_vector = sorted((s for s in scored if s[0] in near), key=lambda s: -s[3])[:limit]
        kept = {s[0] for s in by_vector} | set(keyword)
        return [s for s in scored if s[0] in kept]

    def _scanner(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="vector-scan")
        return self._pool

    def _matrix(self, c: sqlite3.Connection, tenant: str, store_id: str, dims: int
                ) -> matrix_cache.StoreMatrix | None:
        """The store's vectors of ``dims`` in memory, current as of this snapshot: the cached
        copy, or loaded now when they fit the cache; None when they do not (sqlite-vec then)."""
        if self.cache.max_bytes <= 0:
            return None
        row = c.execute("SELECT created_at, version FROM vector_stores WHERE tenant = ? AND "
                        "id = ?", (tenant, store_id)).fetchone()
        if row is None:
            return None
        key, generation = (tenant, store_id, dims), (int(row[0]), int(row[1]))
        entry = self.cache.get(key)
        if entry is not None and entry.generation == generation:
            return entry
        if entry is not None:
            entry = self._refreshed(c, key, entry, generation)
            if entry is not None:
                return entry
        self.cache.drop(key)
        count = c.execute("SELECT COUNT(*) FROM vs_chunks WHERE tenant = ? AND store_id = ?",
                          (tenant, store_id)).fetchone()[0]
        if not self.cache.fits(count * (4 * dims + matrix_cache.ROW_EXTRA)):
            return None
        entry = matrix_cache.load(c.execute(
            "SELECT id, file_id, vector FROM vs_chunks WHERE tenant = ? AND store_id = ? "
            "ORDER BY file_id, idx", (tenant, store_id)), count, dims, generation)
        self.cache.put(key, entry)
        return entry

    def _refreshed(self, c: sqlite3.Connection, key: tuple[str, str, int],
                   entry: matrix_cache.StoreMatrix, generation: tuple[int, int]
                   ) -> matrix_cache.StoreMatrix | None:
        """``entry`` brought to ``generation`` by reading the rows of the files changed since
        (a new segment), when the log holds every generation between, they are a few of the
        store's files and the entry has not gathered many segments or replaced rows; None
        otherwise (the store is loaded again, in one segment)."""
        tenant, store_id, dims = key
        since, now_at = entry.generation[1], generation[1]
        if entry.generation[0] != generation[0] or not since < now_at <= since + CHANGES_KEPT \
                or len(entry.segments) >= matrix_cache.MAX_SEGMENTS \
                or entry.dead > entry.rows // 4:
            return None
        logged = c.execute("SELECT version, file_id FROM vs_changes WHERE tenant = ? AND "
                           "store_id = ? AND version > ? AND version <= ?",
                           (tenant, store_id, since, now_at)).fetchall()
        if len({v for v, _ in logged}) != now_at - since:
            return None
        changed = {f for _, f in logged}
        if len(changed) > max(16, len(entry.files) // 4):
            return None
        marks = ",".join("?" * len(changed))
        count = c.execute(f"SELECT COUNT(*) FROM vs_chunks WHERE tenant = ? AND store_id = ? "
                          f"AND file_id IN ({marks})", (tenant, store_id, *changed)).fetchone()[0]
        fresh = matrix_cache.load(c.execute(
            f"SELECT id, file_id, vector FROM vs_chunks WHERE tenant = ? AND store_id = ? AND "
            f"file_id IN ({marks}) ORDER BY file_id, idx", (tenant, store_id, *changed)),
            count, dims, generation)
        entry = matrix_cache.refreshed(entry, changed, fresh)
        return entry if self.cache.put(key, entry) else None

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        await self.db.aclose()


def _bump_files(c: sqlite3.Connection, tenant: str, store_id: str) -> None:
    """A file's status, name or attributes changed (its chunks did not): the processes'
    copies of the completed files are out of date, their vector matrices are not."""
    c.execute("UPDATE vector_stores SET files_version = files_version + 1 WHERE tenant = ? AND "
              "id = ?", (tenant, store_id))


def _migrate(c: sqlite3.Connection) -> None:
    """A database made before ``files_version`` or the chunks' ``cache_key`` existed gets the
    columns; the embedding cache every tenant shared (``vs_embeddings``) is dropped (its rows
    belonged to no one, so no delete could ever remove them)."""
    _add_column(c, "vector_stores", "files_version", "INTEGER NOT NULL DEFAULT 0")
    _add_column(c, "vs_chunks", "cache_key", "TEXT")
    c.execute("CREATE INDEX IF NOT EXISTS vs_chunks_by_key ON vs_chunks (tenant, cache_key)")
    c.execute("DROP TABLE IF EXISTS vs_embeddings")


def _add_column(c: sqlite3.Connection, table: str, column: str, kind: str) -> None:
    if column not in {r[1] for r in c.execute(f"PRAGMA table_info({table})")}:
        try:
            c.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        except Exception as exc:  # another process added it first
            if "duplicate column" not in str(exc):
                raise


def _keyword_best(c: sqlite3.Connection, tenant: str, store_id: str, words: list[str],
                  files: set[str], limit: int) -> list[tuple[int, float]]:
    """The ``limit`` chunks of ``files`` with the best bm25 for ``words``: first among the
    database's best few (FTS5 alone, no join: half the cost when the store holds most of the
    matches, and exact then, since their order is bm25's), else from the store's matches in
    bm25's order."""
    match = " OR ".join('"' + w.replace('"', "") + '"' for w in words[:64])
    wanted = max(vec_index.MIN_CANDIDATES, vec_index.OVERSAMPLE * limit)
    best = c.execute("SELECT rowid, -bm25(vs_chunks_fts) FROM vs_chunks_fts WHERE "
                     "vs_chunks_fts MATCH ? ORDER BY rank LIMIT ?", (match, wanted)).fetchall()
    if best:
        ids = [r[0] for r in best]
        ours = {cid for cid, t, s, file_id in c.execute(  # by rowid, not the store's index
            f"SELECT id, tenant, store_id, file_id FROM vs_chunks WHERE id IN "
            f"({','.join('?' * len(ids))})", ids) if (t, s) == (tenant, store_id)
            and file_id in files}
        kept = [(cid, score) for cid, score in best if cid in ours][:limit]
        if len(kept) == limit or len(best) < wanted:
            return kept
    kept = []
    for cid, score, file_id in c.execute(  # read in bm25's order until ``limit`` are kept
            "SELECT f.rowid, -bm25(vs_chunks_fts), ch.file_id FROM vs_chunks_fts f JOIN "
            "vs_chunks ch ON ch.id = f.rowid WHERE vs_chunks_fts MATCH ? AND ch.tenant = ? "
            "AND ch.store_id = ? ORDER BY bm25(vs_chunks_fts)", (match, tenant, store_id)):
        if file_id in files:
            kept.append((cid, score))
            if len(kept) == limit:
                break
    return kept


def _bump(c: sqlite3.Connection, tenant: str, store_id: str, file_ids: list[str]) -> None:
    """A new generation of the store's chunks, in the transaction that changes those of
    ``file_ids``: every process's in-process copy is then out of date, and the log of changed
    files (the last :data:`CHANGES_KEPT` generations) says which of its rows to reload."""
    row = c.execute("UPDATE vector_stores SET version = version + 1 WHERE tenant = ? AND id = ? "
                    "RETURNING version", (tenant, store_id)).fetchone()
    if row is None:
        return
    c.executemany("INSERT OR IGNORE INTO vs_changes (tenant, store_id, version, file_id) "
                  "VALUES (?, ?, ?, ?)", [(tenant, store_id, row[0], f) for f in file_ids])
    c.execute("DELETE FROM vs_changes WHERE tenant = ? AND store_id = ? AND version <= ?",
              (tenant, store_id, row[0] - CHANGES_KEPT))


def database_path(store_path: str) -> str:
    """The vector engine's database beside the store's (``:memory:`` stays in memory)."""
    return store_path if store_path == ":memory:" else store_path + ".vectors"


def _unit_blob(vector: list[float]) -> bytes:
    """The vector at unit length, as float32 bytes (cosine similarity is then a product)."""
    import numpy as np

    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array)) or 1.0
    return (array / norm).astype(np.float32).tobytes()


def _as_array(blob: bytes) -> Any:
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32)


def _page(c: sqlite3.Connection, table: str, id_column: str, where: tuple[str, ...],
          args: list[Any], order: str, after: str | None, before: str | None, limit: int
          ) -> tuple[list[dict[str, Any]], bool]:
    """A page by (created_at, id) in ``order``, after / before the row an id names."""
    where_list, args = list(where), list(args)
    for cursor, forward in ((after, True), (before, False)):
        if not cursor:
            continue
        row = c.execute(f"SELECT created_at, {id_column} FROM {table} WHERE "
                        f"{' AND '.join(where)} AND {id_column} = ?", [*args, cursor]).fetchone()
        if row is not None:
            later = (order == "asc") == forward
            where_list.append(f"(created_at, {id_column}) {'>' if later else '<'} (?, ?)")
            args += [row[0], row[1]]
    direction = "DESC" if order == "desc" else "ASC"
    rows = c.execute(f"SELECT * FROM {table} WHERE {' AND '.join(where_list)} ORDER BY "
                     f"created_at {direction}, {id_column} {direction} LIMIT ?",
                     [*args, limit + 1]).fetchall()
    return [_row(r) for r in rows[:limit]], len(rows) > limit  # type: ignore[misc]


def now() -> int:
    return int(time.time())

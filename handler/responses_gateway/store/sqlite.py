"""Embedded store: one SQLite file, no AWS account needed (``GATEWAY_STORE=sqlite:PATH``).

How the file is opened and called lives in store/sqlite_file.py: a call runs on the event loop
while the file is free (a put is ~70 µs, less than a thread hop), in the file's thread while
another process writes it; checkpoints run in that thread; every read-check-write is one
``BEGIN IMMEDIATE`` transaction. The file is opened, and its schema made, at construction, so
a bad path fails at startup.

A heavy record is the exception: past :data:`HEAVY_ROWS` rows or :data:`HEAVY_BYTES` of JSON
it is serialized, written, parsed and deleted in the file's thread, never on the loop (a
record near GATEWAY_MAX_STORED_RESPONSE_BYTES, 100,000 small items, held the loop ~550 ms for
a put, ~700 ms for a get, ~200 ms for a delete; 32 MB in two items ~200, ~130 and ~45 ms); so
are a conversation's items and a response's events when they are many. A write tells from
what it writes; a read from a bounded first look (its rows read one at a time until past the
bounds, a conversation's counts): a loop-first read that finds its record heavy answers
:data:`_HEAVY` before reading the rest, and runs again in the thread
(:meth:`SQLiteStore._run_light`). What still holds the loop is orjson's own work on one large
JSON value (a record's chat body: ~80 ms to parse 100,000 messages), which keeps the GIL
whatever thread runs it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from responses_gateway.heavy import HEAVY_CHARS, HEAVY_ENTRIES
from responses_gateway.status import IN_PROGRESS, QUEUED, TERMINAL_STATUSES
from responses_gateway.store.base import (
    CancelledError,
    ConversationLocked,
    DuplicateItem,
    Store,
    StoredConversation,
    StoredResponse,
    StoreLimits,
    StoreUnavailable,
    TurnSettle,
)
from responses_gateway.store.sqlite_file import SQLiteFile

if TYPE_CHECKING:
    from responses_gateway.store.health import HealthStore
    from responses_gateway.store.usage import UsageStore

DEFAULT_PATH = "./gateway.db"
RUNNING_STATUSES = (QUEUED, IN_PROGRESS)  # the order the SQL placeholders take
T = TypeVar("T")
# A record as rows: its ``responses`` row and its ``items`` rows (see ``_record_rows``).
_RecordRows = tuple[tuple[Any, ...], list[tuple[Any, ...]]]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    request TEXT NOT NULL,
    previous_response_id TEXT,
    background INTEGER NOT NULL,
    lease_until REAL,
    expires_at INTEGER
);
-- Input items (kind 'in', listed in idx order) and, once a response is terminal, its output
-- items (kind 'out'), both findable by item id for item_reference.
CREATE TABLE IF NOT EXISTS items (
    response_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    idx INTEGER NOT NULL,
    item_id TEXT,
    tenant TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (response_id, kind, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_by_id ON items (tenant, item_id);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (response_id, seq)
) WITHOUT ROWID;
-- Conversations: the record (length = positions committed, a turn's lock) and one row per
-- item at its position. Conversations do not expire (OpenAI keeps them until deleted).
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    length INTEGER NOT NULL,
    lock_token TEXT,
    lock_until REAL,
    item_count INTEGER NOT NULL DEFAULT 0,
    byte_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS conversations_by_tenant ON conversations (tenant, id);
-- the admin list, newest first (store/usage_sqlite.py)
CREATE INDEX IF NOT EXISTS conversations_by_time ON conversations (created_at, id);
CREATE TABLE IF NOT EXISTS conversation_items (
    conversation_id TEXT NOT NULL,
    pos INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (conversation_id, pos)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_by_id
    ON conversation_items (conversation_id, item_id);
-- What a response's server-tool calls gave the model, by call id: visible while the response
-- is (alive, this tenant's), deleted with it.
CREATE TABLE IF NOT EXISTS tool_reads (
    tenant TEXT NOT NULL,
    call_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (tenant, call_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tool_reads_by_response ON tool_reads (response_id);
"""


#: past either, a record is handled in the file's thread (the module's docstring says why):
#: heavy.py's bounds, a row for an item and a byte of JSON for a character
HEAVY_ROWS = HEAVY_ENTRIES
HEAVY_BYTES = HEAVY_CHARS
#: what a loop-first read answers when the record it found is heavy: "run me in the thread"
_HEAVY: Any = object()


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _many_items(r: StoredResponse) -> bool:
    """Whether serializing the record's items one by one is too long for the loop."""
    return len(r.input_items) + len(r.response.get("output") or ()) > HEAVY_ROWS


def _heavy_rows(rows: _RecordRows) -> bool:
    """Whether writing these rows is too long for the loop: many, or many bytes."""
    row, items = rows
    if len(items) > HEAVY_ROWS:
        return True
    return len(row[3]) + len(row[4]) + sum(len(item[5]) for item in items) > HEAVY_BYTES


# A file written before conversations counted their items and bytes: add the columns, count.
_COUNT_COLUMNS = (
    "ALTER TABLE conversations ADD COLUMN item_count INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE conversations ADD COLUMN byte_count INTEGER NOT NULL DEFAULT 0",
    "UPDATE conversations SET"
    " item_count = (SELECT count(*) FROM conversation_items i"
    "  WHERE i.conversation_id = conversations.id AND i.pos < conversations.length),"
    " byte_count = (SELECT coalesce(sum(length(CAST(i.item AS BLOB))), 0)"
    "  FROM conversation_items i"
    "  WHERE i.conversation_id = conversations.id AND i.pos < conversations.length)",
)


def _alive(expires_at: int | None, now: float) -> bool:
    return expires_at is None or expires_at > now


class SQLiteStore(Store):
    """Every store role in a local SQLite file; ``retention_days=None`` keeps responses until
    deleted."""

    def __init__(
        self,
        path: str = DEFAULT_PATH,
        *,
        retention_days: int | None = None,
        busy_timeout_ms: int = 10_000,
        limits: StoreLimits | None = None,
    ) -> None:
        self.path = path
        self._limits = limits
        self._retention_s = None if retention_days is None else retention_days * 86400
        # Open (and create the schema) now, so a bad path fails at startup, not on a request.
        self._file = SQLiteFile(path, name="The response store", schema=_SCHEMA,
                                prepare=self._prepare, busy_timeout_ms=busy_timeout_ms)

    def usage_store(self) -> UsageStore:
        """The usage ledger's tables in this file (store/usage_sqlite.py)."""
        from responses_gateway.store.usage_sqlite import SQLiteUsage

        return SQLiteUsage.of(self.path)

    def health_store(self) -> HealthStore:
        """Routed deployments' health in this file (store/health.py)."""
        from responses_gateway.store.health_sqlite import SQLiteHealth

        return SQLiteHealth(self.path)

    # -- plumbing ----------------------------------------------------------------------------

    def _prepare(self, c: sqlite3.Connection) -> None:
        """On open, in the schema's transaction: an older file's columns, expired rows gone."""
        columns = {row[1] for row in c.execute("PRAGMA table_info(conversations)")}
        if "item_count" not in columns:
            for statement in _COUNT_COLUMNS:
                c.execute(statement)
        self._purge_expired(c)

    @staticmethod
    def _purge_expired(c: sqlite3.Connection) -> None:
        """Expired rows are invisible anyway; dropping them on open keeps the file from growing."""
        now = int(time.time())
        expired = "SELECT id FROM responses WHERE expires_at IS NOT NULL AND expires_at <= ?"
        c.execute(f"DELETE FROM items WHERE response_id IN ({expired})", (now,))
        c.execute(f"DELETE FROM events WHERE response_id IN ({expired})", (now,))
        c.execute(f"DELETE FROM tool_reads WHERE response_id IN ({expired})", (now,))
        c.execute("DELETE FROM responses WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))

    def _tx(self, mode: str = "IMMEDIATE") -> AbstractContextManager[sqlite3.Connection]:
        return self._file.tx(mode)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._file.run(fn, *args)

    async def _run_light(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args, True)`` loop-first; when it answers :data:`_HEAVY` (what it found is too
        heavy to read on the loop), ``fn(*args, False)`` in the file's thread."""
        found = await self._file.run(fn, *args, True)
        if found is _HEAVY:
            found = await self._file.run_in_thread(fn, *args, False)
        return found

    async def _run_heavy(self, heavy: bool, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: in the file's thread when what it writes is ``heavy``, else
        loop-first."""
        if heavy:
            return await self._file.run_in_thread(fn, *args)
        return await self._file.run(fn, *args)

    async def _serialized(self, r: StoredResponse) -> _RecordRows:
        """:meth:`_record_rows`, in a worker thread when the record has many items."""
        if _many_items(r):
            return await asyncio.to_thread(self._record_rows, r)
        return self._record_rows(r)

    # -- Store -------------------------------------------------------------------------------

    async def put(self, record: StoredResponse) -> None:
        rows = await self._serialized(record)
        await self._run_heavy(_heavy_rows(rows), self._put, rows)

    def _put(self, rows: _RecordRows) -> None:
        with self._tx() as c:
            self._write_record(c, rows)

    def _record_rows(self, r: StoredResponse) -> _RecordRows:
        """The ``responses`` row and the ``items`` rows of a record, serialized before the
        transaction (a turn's settle writes them inside its own)."""
        expires_at = r.expires_at
        if expires_at is None and self._retention_s is not None:
            expires_at = int(time.time()) + self._retention_s
        rows = [
            (r.id, "in", i, item.get("id"), r.tenant, _dumps(item))
            for i, item in enumerate(r.input_items)
        ]
        rows += self._output_rows(r.id, r.tenant, r.response)
        response = self._response_json(r.response)
        row = (
            r.id,
            r.tenant,
            r.status,
            response,
            _dumps(r.request),
            r.previous_response_id,
            int(r.background),
            r.lease_until,
            expires_at,
        )
        return row, rows

    def _response_json(self, response: dict[str, Any]) -> str:
        """The Response as stored, within GATEWAY_MAX_STORED_RESPONSE_BYTES (else nothing is
        written: ResponseTooLarge)."""
        data = orjson.dumps(response)
        self.limits.check_response(len(data))
        return data.decode()

    @staticmethod
    def _write_record(c: sqlite3.Connection, rows: _RecordRows) -> None:
        row, items = rows
        c.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        c.execute("DELETE FROM items WHERE response_id = ?", (row[0],))
        c.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", items)

    @staticmethod
    def _output_rows(
        response_id: str, tenant: str, response: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        return [
            (response_id, "out", i, item["id"], tenant, _dumps(item))
            for i, item in enumerate(response.get("output") or [])
            if isinstance(item, dict) and item.get("id")
        ]

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        return await self._run_light(self._get, response_id, tenant)

    def _get(self, response_id: str, tenant: str, light: bool = False) -> StoredResponse | None:
        """The record; ``light``: :data:`_HEAVY` instead for a heavy one (:meth:`_texts`)."""
        with self._tx("DEFERRED") as c:  # one snapshot for the record and its items
            row = c.execute(
                "SELECT tenant, response, request, previous_response_id, background,"
                " lease_until, expires_at FROM responses WHERE id = ?",
                (response_id,),
            ).fetchone()
            if row is None or row[0] != tenant or not _alive(row[6], time.time()):
                return None
            items = self._texts(c, light, len(row[1]) + len(row[2]), (
                "SELECT item FROM items WHERE response_id = ? AND kind = 'in' ORDER BY idx",
                (response_id,)))
        if items is None:
            return _HEAVY
        return StoredResponse(
            id=response_id,
            tenant=row[0],
            response=orjson.loads(row[1]),
            request=orjson.loads(row[2]),
            input_items=[orjson.loads(item) for item in items],
            previous_response_id=row[3],
            background=bool(row[4]),
            lease_until=row[5],
            expires_at=row[6],
        )

    @staticmethod
    def _texts(c: sqlite3.Connection, light: bool, size: int,
               query: tuple[str, tuple[Any, ...]]) -> list[str] | None:
        """The query's one column of JSON texts; ``light``: None as soon as they (with
        ``size`` bytes read before them) turn out heavy, the rest never read."""
        cursor = c.execute(*query)
        texts: list[str] = []
        try:
            for (text,) in cursor:
                texts.append(text)
                size += len(text)
                if light and (len(texts) > HEAVY_ROWS or size > HEAVY_BYTES):
                    return None
        finally:
            cursor.close()
        return None if light and size > HEAVY_BYTES else texts

    async def delete(self, response_id: str, tenant: str) -> bool:
        # in the thread: a record's rows may be many (~200 ms for 100,000), and a client's
        # delete is rare enough that the hop costs nothing that matters
        return await self._file.run_in_thread(self._delete, response_id, tenant)

    def _delete(self, response_id: str, tenant: str) -> bool:
        with self._tx() as c:
            row = c.execute(
                "SELECT tenant, expires_at FROM responses WHERE id = ?", (response_id,)
            ).fetchone()
            if row is None or row[0] != tenant:
                return False
            for table, column in (("items", "response_id"), ("events", "response_id"),
                                  ("tool_reads", "response_id")):
                c.execute(f"DELETE FROM {table} WHERE {column} = ?", (response_id,))
            c.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        return _alive(row[1], time.time())  # an expired record was already "not there"

    async def get_items(self, item_ids: list[str], tenant: str) -> dict[str, dict[str, Any]]:
        if not item_ids:
            return {}
        return await self._run(self._get_items, list(dict.fromkeys(item_ids)), tenant)

    def _get_items(self, item_ids: list[str], tenant: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        now = int(time.time())
        for start in range(0, len(item_ids), 500):  # stay under SQLite's bound-variable limit
            chunk = item_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._file.conn.execute(
                "SELECT i.item_id, i.item FROM items i JOIN responses r ON r.id = i.response_id"
                f" WHERE i.tenant = ? AND i.item_id IN ({marks})"
                " AND (r.expires_at IS NULL OR r.expires_at > ?)",
                (tenant, *chunk, now),
            ).fetchall()
            for item_id, item in rows:
                if item_id not in found:
                    found[item_id] = orjson.loads(item)
        return found

    async def put_tool_reads(
        self, tenant: str, response_id: str, reads: dict[str, str], *,
        expires_at: int | None = None,
    ) -> None:
        if reads:  # they expire with their response's row (read through it)
            await self._run(self._put_reads, tenant, response_id, reads)

    def _put_reads(self, tenant: str, response_id: str, reads: dict[str, str]) -> None:
        with self._tx() as c:
            c.executemany("INSERT OR REPLACE INTO tool_reads VALUES (?, ?, ?, ?)",
                          [(tenant, k, response_id, v) for k, v in reads.items()])

    async def get_tool_reads(self, tenant: str, call_ids: list[str]) -> dict[str, str]:
        return await self._run(self._get_reads, tenant, list(dict.fromkeys(call_ids)))

    def _get_reads(self, tenant: str, call_ids: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        now = int(time.time())
        for start in range(0, len(call_ids), 500):  # under SQLite's bound-variable limit
            chunk = call_ids[start : start + 500]
            rows = self._file.conn.execute(
                "SELECT t.call_id, t.text FROM tool_reads t JOIN responses r"
                " ON r.id = t.response_id AND r.tenant = t.tenant"
                f" WHERE t.tenant = ? AND t.call_id IN ({','.join('?' * len(chunk))})"
                " AND (r.expires_at IS NULL OR r.expires_at > ?)",
                (tenant, *chunk, now),
            ).fetchall()
            found.update(rows)
        return found

    async def update_response(
        self,
        response_id: str,
        response: dict[str, Any],
        *,
        expect_status: frozenset[str] | set[str] | None = None,
        lease_until: float | None = None,
    ) -> bool:
        expected = None if expect_status is None else tuple(expect_status)
        return await self._run_heavy(len(response.get("output") or ()) > HEAVY_ROWS,
                                     self._update, response_id, response, expected, lease_until)

    def _update(
        self,
        response_id: str,
        response: dict[str, Any],
        expected: tuple[str, ...] | None,
        lease_until: float | None,
    ) -> bool:
        with self._tx() as c:
            return self._write_response(c, response_id, response, expected, lease_until)

    def _write_response(
        self,
        c: sqlite3.Connection,
        response_id: str,
        response: dict[str, Any],
        expected: tuple[str, ...] | None,
        lease_until: float | None,
    ) -> bool:
        status = response.get("status", "")
        sql = (
            "UPDATE responses SET response = ?, status = ?, lease_until = COALESCE(?, lease_until)"
            " WHERE id = ?"
        )
        params: list[Any] = [self._response_json(response), status, lease_until, response_id]
        if expected is not None:
            sql += f" AND status IN ({','.join('?' * len(expected))})"
            params += expected
        if c.execute(sql, params).rowcount == 0:
            return False
        if status in TERMINAL_STATUSES:
            (tenant,) = c.execute(
                "SELECT tenant FROM responses WHERE id = ?", (response_id,)
            ).fetchone()
            c.execute("DELETE FROM items WHERE response_id = ? AND kind = 'out'", (response_id,))
            c.executemany(
                "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)",
                self._output_rows(response_id, tenant, response),
            )
        return True

    async def append_events(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        *,
        response: dict[str, Any] | None = None,
        lease_until: float | None = None,
        turn: TurnSettle | None = None,
    ) -> None:
        if turn is not None and response is None:
            raise ValueError("a turn settles with the terminal Response only (response=)")
        if events or response is not None:
            rows = len(events) + len((response or {}).get("output") or ())
            rows += len(turn.items or ()) if turn is not None else 0
            await self._run_heavy(rows > HEAVY_ROWS, self._append, response_id, events,
                                  response, lease_until, turn)

    def _append(
        self,
        response_id: str,
        events: list[dict[str, Any]],
        response: dict[str, Any] | None,
        lease_until: float | None,
        turn: TurnSettle | None = None,
    ) -> None:
        rows = [(response_id, int(e["sequence_number"]), _dumps(e)) for e in events]
        with self._tx() as c:
            row = c.execute("SELECT status FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None or row[0] == "cancelled":
                raise CancelledError(response_id)
            if response is not None and not self._write_response(
                c, response_id, response, ("in_progress",), lease_until
            ):
                raise CancelledError(response_id)  # ended by someone else: write nothing
            c.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?)", rows)
            if turn is None:
                return
            if turn.items is None:  # a failed turn: let go, if the lock is still its own
                self._unlock(c, turn.conversation_id, turn.token)
            else:  # the same transaction: a failed append rolls the terminal write back too
                self._append_rows(c, turn.conversation_id, turn.tenant, turn.items, turn.token,
                                  "input")

    async def read_events(self, response_id: str, after: int = -1) -> list[dict[str, Any]]:
        return await self._run_light(self._read_events, response_id, after)

    def _read_events(self, response_id: str, after: int, light: bool = False,
                     ) -> list[dict[str, Any]]:
        """The events after ``after``; ``light``: :data:`_HEAVY` instead when they are heavy
        (a stream followed from its start: thousands of them)."""
        events = self._texts(self._file.conn, light, 0, (
            "SELECT e.event FROM events e JOIN responses r ON r.id = e.response_id"
            " WHERE e.response_id = ? AND e.seq > ?"
            " AND (r.expires_at IS NULL OR r.expires_at > ?) ORDER BY e.seq",
            (response_id, after, int(time.time()))))
        if events is None:
            return _HEAVY  # type: ignore[no-any-return]
        return [orjson.loads(event) for event in events]

    async def renew_lease(self, response_id: str, lease_until: float) -> bool:
        return await self._run(self._renew, response_id, lease_until)

    def _renew(self, response_id: str, lease_until: float) -> bool:
        with self._tx() as c:
            cur = c.execute(
                "UPDATE responses SET lease_until = ? WHERE id = ? AND status IN (?, ?)",
                (lease_until, response_id, *RUNNING_STATUSES),
            )
            return cur.rowcount == 1

    # -- ConversationStore -------------------------------------------------------------------

    @staticmethod
    def _conversation(c: sqlite3.Connection, conversation_id: str, tenant: str) -> (
        StoredConversation | None
    ):
        row = c.execute(
            "SELECT tenant, created_at, metadata, length, lock_until, lock_token, item_count,"
            " byte_count FROM conversations WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        if row is None or row[0] != tenant:
            return None
        locked = row[4] is not None and row[4] > time.time()
        return StoredConversation(
            id=conversation_id,
            tenant=tenant,
            created_at=row[1],
            metadata=orjson.loads(row[2]),
            length=row[3],
            locked=locked,
            holder=row[5] if locked else None,
            item_count=row[6],
            byte_count=row[7],
        )

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        await self._run_heavy(len(items) > HEAVY_ROWS, self._create_conversation,
                              conversation, items)

    def _create_conversation(self, conv: StoredConversation, items: list[dict[str, Any]]) -> None:
        data = [orjson.dumps(item) for item in items]
        size = self.limits.check_room(conv, items, "items", sum(map(len, data)))
        with self._tx() as c:
            c.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
                (conv.id, conv.tenant, conv.created_at, _dumps(conv.metadata), len(items),
                 len(items), size),
            )
            c.executemany(
                "INSERT INTO conversation_items VALUES (?, ?, ?, ?)",
                [(conv.id, i, item["id"], d.decode()) for i, (item, d) in enumerate(zip(
                    items, data, strict=True))],
            )
        conv.length = conv.item_count = len(items)
        conv.byte_count = size

    async def get_conversation(
        self, conversation_id: str, tenant: str
    ) -> StoredConversation | None:
        return await self._run(self._get_conversation, conversation_id, tenant)

    def _get_conversation(self, conversation_id: str, tenant: str) -> StoredConversation | None:
        with self._tx("DEFERRED") as c:
            return self._conversation(c, conversation_id, tenant)

    async def update_conversation(
        self, conversation_id: str, tenant: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        return await self._run(self._update_conversation, conversation_id, tenant, metadata)

    def _update_conversation(
        self, conversation_id: str, tenant: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        with self._tx() as c:
            conv = self._conversation(c, conversation_id, tenant)
            if conv is not None:
                c.execute(
                    "UPDATE conversations SET metadata = ? WHERE id = ?",
                    (_dumps(metadata), conversation_id),
                )
                conv.metadata = dict(metadata)
            return conv

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        # in the thread, as a response's delete: up to GATEWAY_MAX_CONVERSATION_ITEMS rows
        return await self._file.run_in_thread(self._delete_conversation, conversation_id, tenant)

    def _delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        with self._tx() as c:
            if self._conversation(c, conversation_id, tenant) is None:
                return False
            c.execute(
                "DELETE FROM conversation_items WHERE conversation_id = ?", (conversation_id,)
            )
            c.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            return True

    async def conversation_items(
        self, conversation_id: str, tenant: str
    ) -> tuple[StoredConversation, list[dict[str, Any]]] | None:
        return await self._run_light(self._conversation_items, conversation_id, tenant)

    def _conversation_items(
        self, conversation_id: str, tenant: str, light: bool = False
    ) -> tuple[StoredConversation, list[dict[str, Any]]] | None:
        """The conversation and its items; ``light``: :data:`_HEAVY` instead when its counts
        say they are heavy (up to GATEWAY_MAX_CONVERSATION_ITEMS, 64 MB)."""
        with self._tx("DEFERRED") as c:  # one snapshot: the record and its items
            conv = self._conversation(c, conversation_id, tenant)
            if conv is None:
                return None
            if light and (conv.item_count > HEAVY_ROWS or conv.byte_count > HEAVY_BYTES):
                return _HEAVY
            rows = c.execute(
                "SELECT item FROM conversation_items WHERE conversation_id = ? AND pos < ?"
                " ORDER BY pos",
                (conversation_id, conv.length),
            ).fetchall()
        return conv, [orjson.loads(item) for (item,) in rows]

    async def lock_conversation(
        self, conversation_id: str, tenant: str, token: str, *, length: int, until: float
    ) -> bool | None:
        return await self._run(self._lock_conv, conversation_id, tenant, token, length, until)

    def _lock_conv(
        self, conversation_id: str, tenant: str, token: str, length: int, until: float
    ) -> bool | None:
        with self._tx() as c:
            conv = self._conversation(c, conversation_id, tenant)
            if conv is None:
                return None
            if conv.locked or conv.length != length:
                return False
            c.execute(
                "UPDATE conversations SET lock_token = ?, lock_until = ? WHERE id = ?",
                (token, until, conversation_id),
            )
            return True

    async def append_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        items: list[dict[str, Any]],
        *,
        token: str | None = None,
        length: int | None = None,
        param: str = "items",
        record: StoredResponse | None = None,
    ) -> StoredConversation | None:
        if record is not None and token is None:
            raise ValueError("a record settles with a turn's append only (token=)")
        stored = None if record is None else await self._serialized(record)
        heavy = len(items) > HEAVY_ROWS or (stored is not None and _heavy_rows(stored))
        return await self._run_heavy(
            heavy, self._append_items, conversation_id, tenant, items, token, param, stored
        )

    def _append_items(
        self,
        conversation_id: str,
        tenant: str,
        items: list[dict[str, Any]],
        token: str | None,
        param: str,
        stored: _RecordRows | None = None,
    ) -> StoredConversation | None:
        """One transaction: the checks, the rows, ``length`` moved, the lock released and the
        turn's record (``stored``), so a failure anywhere writes none of them."""
        with self._tx() as c:
            conv = self._append_rows(c, conversation_id, tenant, items, token, param)
            if stored is not None:  # (a conversation deleted while the turn ran: it stands)
                self._write_record(c, stored)
            return conv

    def _append_rows(
        self,
        c: sqlite3.Connection,
        conversation_id: str,
        tenant: str,
        items: list[dict[str, Any]],
        token: str | None,
        param: str,
    ) -> StoredConversation | None:
        """The append inside the caller's transaction; None (nothing written): no such
        conversation. Raises (the caller rolls back) on a lost lock or a duplicate id."""
        conv = self._conversation(c, conversation_id, tenant)
        if conv is None:
            return None
        (holder,) = c.execute(
            "SELECT lock_token FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if token is not None and conv.locked and holder != token:
            raise StoreUnavailable(
                f"The conversation {conversation_id} was taken over while this response ran."
            )
        if token is None and conv.locked:
            raise ConversationLocked()
        data = [orjson.dumps(item) for item in items]
        size = sum(map(len, data))
        if token is None:  # an item write; a turn's append was admitted when it began
            self.limits.check_room(conv, items, param, size)
        ids = [item["id"] for item in items]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            found = c.execute(
                "SELECT item_id FROM conversation_items WHERE conversation_id = ?"
                f" AND item_id IN ({','.join('?' * len(chunk))})",
                (conversation_id, *chunk),
            ).fetchone()
            if found is not None:
                raise DuplicateItem(found[0], param)
        c.executemany(
            "INSERT INTO conversation_items VALUES (?, ?, ?, ?)",
            [
                (conversation_id, conv.length + i, item["id"], d.decode())
                for i, (item, d) in enumerate(zip(items, data, strict=True))
            ],
        )
        conv.length += len(items)
        conv.item_count += len(items)
        conv.byte_count += size
        conv.locked = False
        c.execute(
            "UPDATE conversations SET length = ?, item_count = ?, byte_count = ?,"
            " lock_token = NULL, lock_until = NULL WHERE id = ?",
            (conv.length, conv.item_count, conv.byte_count, conversation_id),
        )
        return conv

    async def release_conversation(
        self, conversation_id: str, token: str, *, record: StoredResponse | None = None
    ) -> None:
        stored = None if record is None else await self._serialized(record)
        heavy = stored is not None and _heavy_rows(stored)
        await self._run_heavy(heavy, self._release, conversation_id, token, stored)

    def _release(
        self, conversation_id: str, token: str, stored: _RecordRows | None = None
    ) -> None:
        with self._tx() as c:
            self._unlock(c, conversation_id, token)
            if stored is not None:
                self._write_record(c, stored)

    @staticmethod
    def _unlock(c: sqlite3.Connection, conversation_id: str, token: str) -> None:
        c.execute(
            "UPDATE conversations SET lock_token = NULL, lock_until = NULL"
            " WHERE id = ? AND lock_token = ?",
            (conversation_id, token),
        )

    async def renew_conversation_lock(
        self, conversation_id: str, token: str, until: float
    ) -> bool:
        return await self._run(self._renew_lock, conversation_id, token, until)

    def _renew_lock(self, conversation_id: str, token: str, until: float) -> bool:
        with self._tx() as c:
            return c.execute(
                "UPDATE conversations SET lock_until = ? WHERE id = ? AND lock_token = ?",
                (until, conversation_id, token),
            ).rowcount == 1

    async def list_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        *,
        limit: int,
        order: str,
        after: str | None = None,
    ) -> tuple[list[dict[str, Any]], bool] | None:
        return await self._run(self._list_items, conversation_id, tenant, limit, order, after)

    def _list_items(
        self, conversation_id: str, tenant: str, limit: int, order: str, after: str | None
    ) -> tuple[list[dict[str, Any]], bool] | None:
        with self._tx("DEFERRED") as c:
            conv = self._conversation(c, conversation_id, tenant)
            if conv is None:
                return None
            bound = conv.length if order == "asc" else -1
            if after is not None:
                row = c.execute(
                    "SELECT pos FROM conversation_items WHERE conversation_id = ? AND item_id = ?"
                    " AND pos < ?",
                    (conversation_id, after, conv.length),
                ).fetchone()
                if row is None:
                    raise KeyError(after)
                bound = row[0]
            if order == "asc":
                sql = "pos > ? AND pos < ? ORDER BY pos"
                params = (bound if after is not None else -1, conv.length)
            else:
                sql = "pos < ? ORDER BY pos DESC"
                params = (bound if after is not None else conv.length,)
            rows = c.execute(
                f"SELECT item FROM conversation_items WHERE conversation_id = ? AND {sql}"
                " LIMIT ?",
                (conversation_id, *params, limit + 1),
            ).fetchall()
        return [orjson.loads(item) for (item,) in rows[:limit]], len(rows) > limit

    async def get_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, dict[str, Any] | None] | None:
        return await self._run(self._get_item, conversation_id, tenant, item_id)

    def _get_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, dict[str, Any] | None] | None:
        with self._tx("DEFERRED") as c:
            conv = self._conversation(c, conversation_id, tenant)
            if conv is None:
                return None
            row = c.execute(
                "SELECT item FROM conversation_items WHERE conversation_id = ? AND item_id = ?"
                " AND pos < ?",
                (conversation_id, item_id, conv.length),
            ).fetchone()
        return conv, None if row is None else orjson.loads(row[0])

    async def delete_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, bool] | None:
        return await self._run(self._delete_item, conversation_id, tenant, item_id)

    def _delete_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, bool] | None:
        with self._tx() as c:
            conv = self._conversation(c, conversation_id, tenant)
            if conv is None:
                return None
            where = "conversation_id = ? AND item_id = ? AND pos < ?"
            key = (conversation_id, item_id, conv.length)
            row = c.execute(
                f"SELECT length(CAST(item AS BLOB)) FROM conversation_items WHERE {where}", key
            ).fetchone()
            if row is None:
                return conv, False
            c.execute(f"DELETE FROM conversation_items WHERE {where}", key)
            conv.item_count -= 1
            conv.byte_count -= row[0]
            c.execute(
                "UPDATE conversations SET item_count = ?, byte_count = ? WHERE id = ?",
                (conv.item_count, conv.byte_count, conversation_id),
            )
        return conv, True

    async def aclose(self) -> None:
        await self._file.aclose()

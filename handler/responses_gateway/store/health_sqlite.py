"""Routed deployments' health (store/health.py) in the SQLite store's file: a table of its
own, a connection of its own, run as the store's calls are (store/sqlite_file.py: a few rows a
call, on the event loop while the file is free). Processes sharing the file share the records.
"""

from __future__ import annotations

import sqlite3
import time

from responses_gateway.store.health import FORGET_AFTER, Health, HealthStore
from responses_gateway.store.sqlite_file import SQLiteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS route_health (
    route TEXT NOT NULL,
    deployment TEXT NOT NULL,
    failures INTEGER NOT NULL,
    until REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (route, deployment)
) WITHOUT ROWID
"""
# One statement, so atomic between processes: a record past its expiry starts again at 1.
_FAILED = """
INSERT INTO route_health (route, deployment, failures, until, expires_at)
VALUES (?1, ?2, 1, ?3, ?4)
ON CONFLICT (route, deployment) DO UPDATE SET
    failures = CASE WHEN route_health.expires_at <= ?5 THEN 1 ELSE route_health.failures + 1 END,
    until = excluded.until, expires_at = excluded.expires_at
RETURNING failures, until
"""


class SQLiteHealth(HealthStore):
    """The records in the SQLite store's file: processes sharing the file share them."""

    def __init__(self, path: str, *, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self._file = SQLiteFile(path, name="The deployment health records",
                                store="routing health store", schema=_SCHEMA,
                                busy_timeout_ms=busy_timeout_ms, lazy=True)

    async def read(self, route: str) -> dict[str, Health]:
        return await self._file.run(self._read, route, time.time())

    def _read(self, route: str, now: float) -> dict[str, Health]:
        rows = self._file.conn.execute(
            "SELECT deployment, failures, until FROM route_health"
            " WHERE route = ? AND expires_at > ?", (route, now)).fetchall()
        return {name: Health(failures, until) for name, failures, until in rows}

    async def failed(self, route: str, deployment: str, until: float) -> Health:
        return await self._file.run(self._failed, route, deployment, until, time.time())

    def _failed(self, route: str, deployment: str, until: float, now: float) -> Health:
        expires = max(until, now) + FORGET_AFTER

        def count(c: sqlite3.Connection) -> Health:
            c.execute("DELETE FROM route_health WHERE expires_at <= ?", (now,))
            return Health(*c.execute(_FAILED, (route, deployment, until, expires, now)).fetchone())

        return self._file.transaction(count)

    async def cleared(self, route: str, deployment: str) -> None:
        await self._file.run(self._file.call, lambda c: c.execute(
            "DELETE FROM route_health WHERE route = ? AND deployment = ?", (route, deployment)))

    async def aclose(self) -> None:
        await self._file.aclose()

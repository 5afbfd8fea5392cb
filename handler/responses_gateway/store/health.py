"""Routed deployments' health, shared by every process on one store (backends/router.py).

A deployment that fails ``cooldown_after`` times in a row is skipped for ``cooldown_seconds``.
Kept in memory only, each process (each Lambda instance) would learn that again by sending its
own requests to the failing deployment. So the store keeps one small record per failing
``(route, deployment)``: its failures in a row and until when it is to be skipped once it has
reached the threshold, in wall-clock seconds every process reads alike. A success deletes the
record; a record no failure touched for :data:`FORGET_AFTER` seconds counts as gone (and its
TTL removes it), so old failures never add to a new one.

The threshold is the router's (``GATEWAY_ROUTES``), applied when a record is read: the store
only counts. The router reads a route's records at most once every few seconds, in the
background once it has a view, so a request whose first deployment answers makes no store call.

:class:`SQLiteHealth` keeps the records in the SQLite store's file (a table of its own, a
connection of its own, run as the store's calls are: store/sqlite_file.py);
store/dynamodb/health.py in the DynamoDB table.
"""

from __future__ import annotations

import sqlite3
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from responses_gateway.store.sqlite_file import SQLiteFile

#: A record whose last failure is older than this is forgotten (TTL).
FORGET_AFTER = 3600.0


@dataclass(frozen=True, slots=True)
class Health:
    """A deployment's failures in a row, and until when it is skipped (past the threshold)."""

    failures: int = 0
    until: float = 0.0


class HealthStore(ABC):
    """Deployment health records of one store, keyed by route and deployment name."""

    @abstractmethod
    async def read(self, route: str) -> dict[str, Health]:
        """The route's live records, by deployment name (a deployment absent: healthy)."""

    @abstractmethod
    async def failed(self, route: str, deployment: str, until: float) -> Health:
        """One more failure in a row, counted atomically (every process adds to one count);
        ``until``: when a skip it earns would end. Returns the record as it now stands."""

    @abstractmethod
    async def cleared(self, route: str, deployment: str) -> None:
        """The deployment answered: its record goes."""

    async def aclose(self) -> None:
        """Release what it holds (a connection of its own); most need nothing."""
        return None


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
        self._file = SQLiteFile(path, name="The deployment health records", schema=_SCHEMA,
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

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

store/health_sqlite.py keeps the records in the SQLite store's file; store/dynamodb/health.py
in the DynamoDB table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

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

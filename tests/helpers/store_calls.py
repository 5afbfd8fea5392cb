"""Store instruments for tests: what a store sends its database, and a settle that fails.

A turn on a conversation settles in one write (the response record with the append, or with
the lock's release); these count that write where it happens (DynamoDB requests, SQLite
transactions) and make it fail there, under the store's own code.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ClientError


def _inner(store: Any) -> Any:
    return getattr(store, "_inner", store)  # under the tracing wrapper, if any


def is_dynamodb(store: Any) -> bool:
    return hasattr(_inner(store), "table_name")


class DatabaseCalls:
    """While active, counts what ``store`` sends its database, by operation: DynamoDB requests
    (botocore's ``before-call`` hook), or SQLite transactions on the store's connection
    (``BEGIN DEFERRED`` reads, ``BEGIN IMMEDIATE`` writes)."""

    def __init__(self, store: Any) -> None:
        self.store = _inner(store)
        self.calls: Counter[str] = Counter()

    def __enter__(self) -> DatabaseCalls:
        if is_dynamodb(self.store):
            self.store.client.meta.events.register("before-call.dynamodb.*", self._request)
        else:
            self.store._file.conn.set_trace_callback(self._statement)
        return self

    def __exit__(self, *_: Any) -> None:
        if is_dynamodb(self.store):
            self.store.client.meta.events.unregister("before-call.dynamodb.*", self._request)
        else:
            self.store._file.conn.set_trace_callback(None)

    def _request(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def _statement(self, sql: str) -> None:
        if sql.startswith("BEGIN"):
            self.calls[sql] += 1


class _FailingSettle:
    """A DynamoDB client whose next TransactWriteItems carrying a response record fails, as
    if DynamoDB were unreachable; every other call goes to the real client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs: Any) -> dict[str, Any]:
        if not self.failed and any(
            "Put" in action and action["Put"]["Item"]["sk"]["S"] == "R"
            for action in kwargs["TransactItems"]
        ):
            self.failed += 1
            error = {"Error": {"Code": "InternalServerError", "Message": "injected"}}
            raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]
        return self._client.transact_write_items(**kwargs)


def fail_next_settle(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the store's next settle with a record fail inside its one write: SQLite after the
    record's rows are written in the transaction (which then rolls back), DynamoDB in its
    TransactWriteItems. Later writes succeed."""
    store = _inner(store)
    if is_dynamodb(store):
        monkeypatch.setattr(store, "_client", _FailingSettle(store.client))
        return
    write = store._write_record
    failed: list[bool] = []

    def failing(c: sqlite3.Connection, rows: Any) -> None:
        write(c, rows)
        if not failed:
            failed.append(True)
            raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setattr(store, "_write_record", failing)


class _FailingAppend(_FailingSettle):
    """A DynamoDB client whose next TransactWriteItems writing conversation item rows fails."""

    def transact_write_items(self, **kwargs: Any) -> dict[str, Any]:
        if not self.failed and any(
            "Put" in action and action["Put"]["Item"]["sk"]["S"].startswith("C#I#")
            for action in kwargs["TransactItems"]
        ):
            self.failed += 1
            error = {"Error": {"Code": "InternalServerError", "Message": "injected"}}
            raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]
        return self._client.transact_write_items(**kwargs)


@contextmanager
def fail_next_append(store: Any) -> Iterator[Callable[[], bool]]:
    """While active, make the next write of a conversation's item rows fail at the database,
    whichever store call carries it (a separate append, or one folded into another write):
    SQLite refuses its ``INSERT INTO conversation_items`` (the transaction rolls back),
    DynamoDB fails the TransactWriteItems holding ``C#I#`` rows. Later writes succeed. Yields
    a check: has the failure happened yet?"""
    store = _inner(store)
    if is_dynamodb(store):
        real = store.client
        client = _FailingAppend(real)
        store._client = client
        try:
            yield lambda: bool(client.failed)
        finally:
            store._client = real
        return
    failed: list[bool] = []

    def authorize(action: int, table: str | None, *_: Any) -> int:
        if action == sqlite3.SQLITE_INSERT and table == "conversation_items" and not failed:
            failed.append(True)
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn = store._file.conn
    conn.set_authorizer(authorize)
    try:
        yield lambda: bool(failed)
    finally:
        conn.set_authorizer(None)

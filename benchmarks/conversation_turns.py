"""A long conversation, turn by turn: what the gateway adds per turn, and its store round trips.

    python benchmarks/conversation_turns.py [--turns 50] [--store sqlite|dynamodb]

One conversation of ``--turns`` turns, three ways, all in this one run against the scripted
Chat Completions upstream (tests/helpers):

- ``conversation``: ``POST /v1/responses`` with ``conversation`` (the gateway reads the
  conversation's items before the turn and appends the turn's after it);
- ``websocket``: the same over one WebSocket (``response.create`` with ``conversation``);
- ``direct``: the very chat request the gateway sent for that turn, sent straight to the
  upstream: the baseline.

For each way: the median and p90 time per turn, the added time per turn (gateway minus direct,
same turn), and the store calls per turn split into reads and writes, counted twice: on the
gateway's store object (its methods), and under it, what reaches the database (SQLite
transactions on the store's connection, or DynamoDB requests, counted by botocore's event
hook). The issue's target (21): a constant number per turn, whatever the conversation's
length, so the first and last ten turns are printed apart. The floor is one read and two
writes: the turn's lock at create time (OpenAI answers a second create on a held
conversation with 400 ``conversation_locked``) and the settle (the response record, the
turn's items and the lock's release, one transaction).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "handler")]

from tests.helpers.e2e import MODEL, e2e_settings  # noqa: E402
from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402

READS = ("get", "get_items", "read_events", "read_conversation", "conversation_items",
         "get_conversation", "list_conversation_items")


class CountingStore:
    """Counts the calls made on the gateway's store, by method name."""

    def __init__(self, store: Any) -> None:
        self.calls: Counter[str] = Counter()
        self._store = store
        for name in dir(store):
            method = getattr(store, name)
            if name.startswith("_") or not inspect.iscoroutinefunction(method):
                continue  # only calls that go to the store (local checks are not round trips)
            setattr(self, name, self._counted(name, getattr(store, name)))

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)
        return call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class RoundTrips:
    """What the store sends its database, by operation: SQLite transactions and bare reads on
    its connection (a statement trace), or DynamoDB requests (botocore's ``before-call``)."""

    DYNAMODB_READS = ("GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems")

    def __init__(self, store: Any) -> None:
        self.calls: Counter[str] = Counter()
        self._store = getattr(store, "_inner", store)  # under the tracing wrapper, if any
        self.kind = "DynamoDB requests" if hasattr(self._store, "table_name") else (
            "SQLite transactions")
        if self.kind == "DynamoDB requests":
            self._store.client.meta.events.register("before-call.dynamodb.*", self._request)
        else:
            self._conn = self._store._conn
            self._conn.set_trace_callback(self._statement)

    def _request(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def _statement(self, sql: str) -> None:
        if sql.startswith("BEGIN"):
            self.calls[sql] += 1  # BEGIN IMMEDIATE writes, BEGIN DEFERRED reads
        elif sql.lstrip().startswith("SELECT") and not self._conn.in_transaction:
            self.calls["SELECT"] += 1  # a read outside a transaction (get_items, read_events)

    def split(self, calls: Counter[str]) -> tuple[int, int]:
        reads = sum(n for name, n in calls.items()
                    if name in self.DYNAMODB_READS or name in ("BEGIN DEFERRED", "SELECT"))
        return reads, sum(calls.values()) - reads

    def close(self) -> None:
        if self.kind == "DynamoDB requests":
            self._store.client.meta.events.unregister("before-call.dynamodb.*", self._request)
        else:
            self._conn.set_trace_callback(None)


def _split(calls: Counter[str]) -> tuple[int, int]:
    """(reads, writes) among the calls of one turn."""
    reads = sum(n for name, n in calls.items()
                if name in READS or name.startswith(("get", "read", "list")))
    return reads, sum(calls.values()) - reads


@contextlib.contextmanager
def gateway(upstream: ScriptedUpstream, tmp: Path, store: str) -> Iterator[GatewayServer]:
    overrides: dict[str, Any] = {"keepalive_seconds": 15.0}
    if store == "dynamodb":
        import os

        from tests.helpers.moto_server import aws_env, create_dynamodb_table, moto_server

        with moto_server() as endpoint:
            os.environ.update(aws_env(endpoint))  # this process only, for the run
            table = create_dynamodb_table()
            with GatewayServer(e2e_settings(upstream, tmp / "g.db", store=f"dynamodb:{table}",
                                            **overrides)) as server:
                yield server
        return
    with GatewayServer(e2e_settings(upstream, tmp / "g.db", **overrides)) as server:
        yield server


class HttpTurns:
    """Turns as ``POST /v1/responses`` with ``conversation``."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.client = httpx.Client(timeout=60)

    def turn(self, conversation: str, i: int) -> None:
        answer = self.client.post(self.base + "/responses", json={
            "model": MODEL, "conversation": conversation, "input": f"turn {i}"})
        if answer.status_code != 200 or answer.json()["status"] != "completed":
            raise RuntimeError(f"turn {i}: {answer.status_code} {answer.text[:300]}")

    def close(self) -> None:
        self.client.close()


class WebSocketTurns:
    """Turns as ``response.create`` events on one WebSocket."""

    def __init__(self, base: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(base.replace("http://", "ws://") + "/responses")

    def turn(self, conversation: str, i: int) -> None:
        self.ws.send(json.dumps({"type": "response.create", "model": MODEL,
                                 "conversation": conversation, "input": f"turn {i}"}))
        while True:
            event = json.loads(self.ws.recv(timeout=60))
            if event["type"] in ("response.completed", "response.failed", "error"):
                break
        if event["type"] != "response.completed":
            raise RuntimeError(f"turn {i}: {event}")

    def close(self) -> None:
        self.ws.close()


def direct_turns(upstream: ScriptedUpstream, bodies: list[dict[str, Any]]) -> list[float]:
    times = []
    with httpx.Client(timeout=60) as client:
        for body in bodies:
            start = time.perf_counter()
            answer = client.post(upstream.base_url + "/chat/completions", json=body)
            answer.raise_for_status()
            times.append(time.perf_counter() - start)
    return times


def measure(way: str, server: GatewayServer, upstream: ScriptedUpstream, turns: int) -> None:
    counting = CountingStore(server.gateway.store)
    trips = RoundTrips(server.gateway.store)
    server.gateway.store = counting
    conversation = httpx.post(server.base_url + "/conversations", json={}).json()["id"]
    upstream.reset()
    driver = HttpTurns(server.base_url) if way == "conversation" else WebSocketTurns(
        server.base_url)
    times: list[float] = []
    per_turn: list[tuple[int, int]] = []
    trips_per_turn: list[tuple[int, int]] = []
    last: Counter[str] = Counter()
    last_trips: Counter[str] = Counter()
    try:
        for i in range(turns):
            before, trips_before = Counter(counting.calls), Counter(trips.calls)
            start = time.perf_counter()
            driver.turn(conversation, i)
            times.append(time.perf_counter() - start)
            last, last_trips = counting.calls - before, trips.calls - trips_before
            per_turn.append(_split(last))
            trips_per_turn.append(trips.split(last_trips))
    finally:
        driver.close()
        trips.close()
        server.gateway.store = counting._store
    bodies = [dict(body, stream=False) for body in upstream.requests]
    for body in bodies:
        body.pop("stream_options", None)
    direct = direct_turns(upstream, bodies)
    added = [g - d for g, d in zip(times, direct, strict=True)]
    print(f"{way:13s} turn p50 {statistics.median(times) * 1e3:6.2f} ms  "
          f"p90 {sorted(times)[int(len(times) * 0.9)] * 1e3:6.2f} ms  "
          f"direct p50 {statistics.median(direct) * 1e3:6.2f} ms  "
          f"added p50 {statistics.median(added) * 1e3:6.2f} ms")
    for label, first, rest in (("first 10", 0, 10), ("last 10", -10, None)):
        reads, writes = _means(per_turn[first:rest])
        trip_reads, trip_writes = _means(trips_per_turn[first:rest])
        print(f"{'':13s} store calls per turn, {label} turns: {reads:.1f} reads, "
              f"{writes:.1f} writes ({trips.kind}: {trip_reads:.1f} reads, "
              f"{trip_writes:.1f} writes)")
    print(f"{'':13s} the last turn's store calls: {dict(sorted(last.items()))}")
    print(f"{'':13s} the last turn's {trips.kind}: {dict(sorted(last_trips.items()))}; "
          f"messages sent upstream: {len(bodies[-1]['messages'])}")


def _means(rows: list[tuple[int, int]]) -> tuple[float, float]:
    return statistics.mean(r for r, _ in rows), statistics.mean(w for _, w in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--store", choices=("sqlite", "dynamodb"), default="sqlite")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, ScriptedUpstream() as upstream, gateway(
        upstream, Path(tmp), args.store
    ) as server:
        print(f"{args.turns} turns, {args.store} store")
        for way in ("conversation", "websocket"):
            measure(way, server, upstream, args.turns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

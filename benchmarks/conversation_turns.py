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
same turn), and the store calls per turn split into reads and writes (counted on the gateway's
store object). The issue's target (21): one read and one write per turn, whatever the
conversation's length, so the first and last ten turns are printed apart.
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
    server.gateway.store = counting
    conversation = httpx.post(server.base_url + "/conversations", json={}).json()["id"]
    upstream.reset()
    driver = HttpTurns(server.base_url) if way == "conversation" else WebSocketTurns(
        server.base_url)
    times: list[float] = []
    per_turn: list[tuple[int, int]] = []
    last: Counter[str] = Counter()
    try:
        for i in range(turns):
            before = Counter(counting.calls)
            start = time.perf_counter()
            driver.turn(conversation, i)
            times.append(time.perf_counter() - start)
            last = counting.calls - before
            per_turn.append(_split(last))
    finally:
        driver.close()
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
    for label, rows in (("first 10", per_turn[:10]), ("last 10", per_turn[-10:])):
        reads = statistics.mean(r for r, _ in rows)
        writes = statistics.mean(w for _, w in rows)
        print(f"{'':13s} store calls per turn, {label} turns: {reads:.1f} reads, "
              f"{writes:.1f} writes")
    print(f"{'':13s} the last turn's store calls: {dict(sorted(last.items()))}; "
          f"messages sent upstream: {len(bodies[-1]['messages'])}")


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

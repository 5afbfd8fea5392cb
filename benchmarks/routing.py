"""Routing's cost per request when the first deployment answers (issue 33, docs/routing.md).

    python benchmarks/routing.py [--requests 2000] [--rounds 5]

In one process: a scripted Chat Completions upstream (tests/helpers/scripted_upstream.py) and
one OpenAI-compatible backend. Each round streams ``--requests`` short chat completions through
the backend directly, then through a backends/router.py Router whose first deployment is that
same backend instance (a second one, never needed, behind it), reading every chunk. Rounds
alternate so drift hits both alike. Prints the median time per request of each and their ratio
(1.00: routing adds nothing measurable), then the router's own overhead against a backend that
answers from memory, where nothing else hides it. "shared" is the same router with its
deployments' health shared through a SQLite store's file (store/health.py), as a gateway on a
store runs it: read once per interval, never on a request's path, nothing written while the
first deployment answers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.scripted_upstream import ScriptedUpstream

from responses_gateway.backends.base import Backend, BackendRequest, BaseBackend, Chunk
from responses_gateway.backends.openai_compat import OpenAICompatBackend
from responses_gateway.backends.route_config import Deployment
from responses_gateway.backends.router import Router
from responses_gateway.store.health import HealthStore
from responses_gateway.store.health_sqlite import SQLiteHealth

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "stream_options": {"include_usage": True}}


class _Memory(BaseBackend):
    """Answers at once with three chunks: the router's overhead alone is what remains."""

    name = "memory"
    CHUNKS: list[Chunk] = [{"choices": [{"index": 0, "delta": {"content": "x"}}]}] * 3

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        yield self.CHUNKS


def routed(backend: Backend, shared: HealthStore | None = None) -> Router:
    first = Deployment(name="first", kind="openai", model="m")
    second = Deployment(name="second", kind="openai", model="m2")
    return Router("bench", [(first, backend), (second, backend)], shared=shared)


async def per_request(backend: Backend, requests: int) -> float:
    """Seconds per request, every chunk read."""
    start = time.perf_counter()
    for _ in range(requests):
        async for _batch in backend.stream(BackendRequest(body=dict(BODY))):
            pass
    return (time.perf_counter() - start) / requests


async def compare(plain: Backend, requests: int, rounds: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        health = SQLiteHealth(str(Path(tmp) / "gateway.db"))
        router, shared = routed(plain), routed(plain, health)
        await per_request(plain, min(requests, 200))  # warm: connections, dialect, caches
        await per_request(router, min(requests, 200))
        await per_request(shared, min(requests, 200))
        direct: list[float] = []
        via: list[float] = []
        via_shared: list[float] = []
        for _ in range(rounds):
            direct.append(await per_request(plain, requests))
            via.append(await per_request(router, requests))
            via_shared.append(await per_request(shared, requests))
        await health.aclose()
    return statistics.median(direct), statistics.median(via), statistics.median(via_shared)


def report(what: str, direct: float, via: float, shared: float) -> None:
    print(f"{what}: direct {direct * 1e6:8.1f} us/request, routed {via * 1e6:8.1f} us/request"
          f" (ratio {via / direct:.3f}, {(via - direct) * 1e6:+.1f} us), shared health"
          f" {shared * 1e6:8.1f} us/request (ratio {shared / direct:.3f},"
          f" {(shared - direct) * 1e6:+.1f} us)")


async def run(requests: int, rounds: int) -> None:
    with ScriptedUpstream() as upstream:
        backend = OpenAICompatBackend(upstream.base_url, None, max_retries=0, dialect="generic")
        try:
            report("scripted upstream over HTTP", *await compare(backend, requests, rounds))
        finally:
            await backend.aclose()
    report("backend in memory         ", *await compare(_Memory(), requests * 20, rounds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    asyncio.run(run(args.requests, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())


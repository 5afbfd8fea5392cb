"""Per request: the gateway's CPU for each short streamed response, beside the upstream's.

    python benchmarks/per_request.py [--requests 2000] [--concurrency 8] [--deltas 2]

Starts the same two servers as benchmarks/load.py (the scripted upstream and one uvicorn worker
with the SQLite store), warms them, then sends ``--requests`` streaming responses of
``--deltas`` text deltas, ``--concurrency`` at a time, each checked whole. Prints the CPU time
per request of the gateway and of the upstream (the baseline: the same request answered by a
server that does only that), the request rate and the p50 time to the first event. Under a
burst of new streams it is this per-request cost that queues.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.load import _client, cpu_seconds, gateway_stream, servers


async def run(url: str, gateway_pid: int, upstream_pid: int, requests: int, concurrency: int,
              deltas: int) -> None:
    async with _client(timeout=httpx.Timeout(60.0)) as client:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> float:
            async with gate:
                stream = await gateway_stream(client, url, deltas)
                if not stream.ok:
                    raise RuntimeError(f"a stream arrived broken: {stream.problem}")
                return stream.first_event

        await asyncio.gather(*(one() for _ in range(100)))  # warm
        gw, up, start = cpu_seconds(gateway_pid), cpu_seconds(upstream_pid), time.perf_counter()
        firsts = await asyncio.gather(*(one() for _ in range(requests)))
        wall = time.perf_counter() - start
        gw, up = cpu_seconds(gateway_pid) - gw, cpu_seconds(upstream_pid) - up
    print(f"{requests} streams x {deltas} deltas, {concurrency} at a time")
    print(f"gateway CPU per request   {gw / requests * 1e3:6.3f} ms")
    print(f"upstream CPU per request  {up / requests * 1e3:6.3f} ms  "
          f"(ratio {gw / up if up else float('nan'):.1f}x)")
    print(f"rate {requests / wall:.0f} requests/s; first event p50 "
          f"{statistics.median(firsts) * 1e3:.2f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--deltas", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, servers(Path(tmp)) as (_, gw, up_pid, gw_pid):
        asyncio.run(run(gw, gw_pid, up_pid, args.requests, args.concurrency, args.deltas))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

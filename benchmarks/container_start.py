"""The sandbox engine's start: a new container's first execution, and a warm one.

    python benchmarks/container_start.py [--runs 9]

- ``new container``: ``run_code("1+1")`` on a container that has no process yet: the jail
  (bwrap), the Python inside and its runner starting, then the execution (issue 42's target:
  under 300 ms here);
- ``warm call``: the same call again on that container (one frame each way, the output read
  to its end marker, /mnt/data listed before and after);
- ``command``: ``run_commands(["true"])``, a jail of its own per command.

Figures are the median and min over ``--runs`` containers, each stopped after; nothing is
asserted. Prints the engine's own line instead when no jail can run here.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "handler"))

from responses_gateway.containers.engine import Box  # noqa: E402
from responses_gateway.containers.sandbox import SandboxEngine  # noqa: E402

TARGET_MS = 300.0


async def measure(runs: int) -> int:
    with tempfile.TemporaryDirectory() as folder:
        engine = SandboxEngine(folder)
        problem = await engine.check()
        if problem:
            print(f"no jail here: {problem}")
            return 1
        times: dict[str, list[float]] = {"new container": [], "warm call": [], "command": []}
        try:
            for n in range(runs):
                box = Box(id=f"cntr_bench{n}", memory_mb=1024)
                await engine.start(box)
                for name in ("new container", "warm call"):
                    began = time.perf_counter()
                    result = await engine.run_code(box, "1+1", timeout=60, max_output=4096)
                    times[name].append((time.perf_counter() - began) * 1000)
                    assert result.stdout == "2\n", result
                began = time.perf_counter()
                await engine.run_commands(box, ["true"], timeout=60, max_output=4096)
                times["command"].append((time.perf_counter() - began) * 1000)
                await engine.stop(box)
        finally:
            await engine.aclose()
    print(f"sandbox engine, {runs} containers (target for a new container: "
          f"{TARGET_MS:.0f} ms)")
    for name, values in times.items():
        print(f"  {name:<14} median {statistics.median(values):7.1f} ms   "
              f"min {min(values):7.1f} ms")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    return asyncio.run(measure(parser.parse_args().runs))


if __name__ == "__main__":
    raise SystemExit(main())

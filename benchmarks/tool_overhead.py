"""What a server tool's call adds beyond its own work (the search engine's, the provider's):
one report for the tool benchmarks (web_search.py, file_search.py). Target: under 2 ms of the
gateway's own time per call, at the median."""

from __future__ import annotations

import statistics

TARGET_MS = 2.0


def report(bare: list[float], whole: list[float], alone: str, call: str,
           target_ms: float = TARGET_MS) -> int:
    """Print the medians (seconds in, ms out) and the added time; the exit status: 0 when
    the added median is under ``target_ms``."""
    extra = [w - b for b, w in zip(bare, whole, strict=True)]
    ms = 1000
    own = "gateway's own"
    width = max(len(alone), len(call), len(own)) + 1
    print(f"{alone:<{width}}median {statistics.median(bare) * ms:.3f} ms")
    print(f"{call:<{width}}median {statistics.median(whole) * ms:.3f} ms")
    median = statistics.median(extra) * ms
    print(f"{own:<{width}}median {median:.3f} ms, p90 "
          f"{statistics.quantiles(extra, n=10)[-1] * ms:.3f} ms per call "
          f"(target < {target_ms:g} ms)")
    return 0 if median < target_ms else 1

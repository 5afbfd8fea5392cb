"""Search latency of the local vector store engine (SQLite + sqlite-vec + FTS5, with the
in-process matrix cache of vectors/matrix_cache.py) at 10k and 100k chunks of 384 dimensions,
filters included, and what a stored chunk costs (issue 35).

    python3 benchmarks/vector_search.py [--sizes 10000,100000] [--queries 200]

A store is filled through the engine (``write_chunks``, what ingestion calls) with 50 chunks
per file, each file with attributes ``{"topic": "t0".."t9", "year": 2000..2024}``, chunk
texts drawn from a 5,000-word vocabulary and vectors as embedding models make them
(anisotropic: a shared direction plus noise, unit length). Each query is timed through
``VectorStores.search`` (what ``POST /v1/vector_stores/{id}/search`` runs: the filters
compiled and applied to the store's files, the vec0 scan, the exact rescoring, the ranking),
with the query's embedding made in-process so that the embedding model's own time is left
out. Cases: no filter; ``topic eq`` (a tenth of the files); a compound filter (``year >=
2012`` and ``topic in`` three topics, about 15%); hybrid ranking (``text_weight`` 0.3, FTS5
too). Recall@10 of the no-filter case against numpy's exact scores is printed beside it.
Target: p50 under 50 ms at 100k chunks, filters included. Beside each wall-clock p50 the
process's CPU time per query (p50): on a shared machine the wall clock includes waiting for a
core, the CPU time does not.

The cases run warm (the store's matrix in the cache). ``cold`` is a store's first search in
the process (here the cache is emptied): its matrix is loaded from SQLite. ``after a write``
is the first search after one file of the store was replaced (50 chunks written, the store's
generation bumped): only that file's rows are read again. ``sqlite-vec only`` is the engine
with the cache off (``GATEWAY_VECTOR_CACHE_BYTES=0``, and what a store larger than the cache
gets): vec0's int8 scan and the exact rescoring.

Memory per chunk: the engine's database bytes divided by the chunks it holds, the cache's
bytes per chunk, and the process's resident set growth while searching the largest store.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from responses_gateway.vectors.ingest import Chunk
from responses_gateway.vectors.local import LocalVectorEngine, database_path
from responses_gateway.vectors.matrix_cache import MatrixCache
from responses_gateway.vectors.service import VectorStores

DIMS = 384
PER_FILE = 50
TENANT = "t_bench"


class QueryVectors:
    """The embedding of a query, made in this process (the model's time is not measured)."""

    model = "bench"

    def __init__(self) -> None:
        self.next: list[list[float]] = []

    async def embed(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        return self.next

    async def aclose(self) -> None:
        return None


def _vectors(rng: np.random.Generator, common: np.ndarray, count: int) -> np.ndarray:
    data = common * 1.5 + rng.normal(size=(count, DIMS)).astype(np.float32)
    return (data / np.linalg.norm(data, axis=1, keepdims=True)).astype(np.float32)


async def fill(engine: LocalVectorEngine, store_id: str, vectors: np.ndarray,
               words: list[str], rng: np.random.Generator) -> dict[str, int]:
    """The store's chunks written; each chunk's text -> its row in ``vectors``."""
    files = len(vectors) // PER_FILE
    await engine.add_store(TENANT, {"id": store_id, "created_at": 1, "name": store_id,
                                    "metadata": {}, "expires_after": None,
                                    "last_active_at": 1})
    rows = [{"store_id": store_id, "file_id": f"file-{f}", "filename": f"doc{f}.txt",
             "created_at": 1, "attributes": {"topic": f"t{f % 10}", "year": 2000 + f % 25},
             "chunking": {}, "batch_id": None, "lease_until": 0} for f in range(files)]
    for i in range(0, len(rows), 500):
        assert await engine.add_files(TENANT, rows[i:i + 500], 0)
    where: dict[str, int] = {}
    for f in range(files):
        chunks = []
        for i in range(PER_FILE):
            text = f"{f}.{i} " + " ".join(words[w] for w in rng.integers(0, len(words), 120))
            where[text] = f * PER_FILE + i
            chunks.append(Chunk(i, text, f"{store_id}-{f}-{i}",
                                vectors[f * PER_FILE + i].tolist()))
        assert await engine.write_chunks(TENANT, store_id, f"file-{f}", chunks, 1)
    return where


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


CASES: dict[str, dict[str, Any]] = {
    "no filter": {},
    "topic eq (10%)": {"filters": {"type": "eq", "key": "topic", "value": "t3"}},
    "year>=2012 and topic in 3 (15%)": {"filters": {"type": "and", "filters": [
        {"type": "gte", "key": "year", "value": 2012},
        {"type": "in", "key": "topic", "value": ["t1", "t4", "t7"]}]}},
    "hybrid text_weight 0.3": {"ranking_options": {"hybrid_search": {
        "embedding_weight": 0.7, "text_weight": 0.3}}},
}


async def _timed(stores: VectorStores, embedder: QueryVectors, query: np.ndarray,
                 body: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    embedder.next = [query.tolist()]
    began, began_cpu = time.perf_counter(), time.process_time()
    page = await stores.search(TENANT, "vs_bench", body)
    return time.perf_counter() - began, time.process_time() - began_cpu, page


def _line(name: str, times: list[float], cpu: list[float], note: str = "") -> None:
    p50 = statistics.median(times) * 1000
    p95 = statistics.quantiles(times, n=20)[-1] * 1000 if len(times) > 1 else p50
    print(f"  {name:34s} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  (CPU p50 "
          f"{statistics.median(cpu) * 1000:5.1f} ms){note}")


async def measure(size: int, queries: int, tmp: str) -> None:
    rng = np.random.default_rng(size)
    common = rng.normal(size=DIMS).astype(np.float32)
    common /= np.linalg.norm(common)
    vectors = _vectors(rng, common, size)
    words = [f"w{i}" for i in range(5000)]
    path = f"{tmp}/bench-{size}.db"
    engine = LocalVectorEngine(path)
    start = time.perf_counter()
    where = await fill(engine, "vs_bench", vectors, words, rng)
    took = time.perf_counter() - start
    db = database_path(path)
    disk = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
    embedder = QueryVectors()
    stores = VectorStores(engine, None, embedder, max_files=0,  # type: ignore[arg-type]
                          lease_seconds=60)
    print(f"\n{size} chunks of {DIMS} dims ({size // PER_FILE} files): written in {took:.1f} s,"
          f" database {disk / size:.0f} bytes per chunk")
    rss_before = _rss_mb()
    cache_bytes = engine.cache.max_bytes
    times, cpu = [], []
    for _ in range(5):
        engine.cache = MatrixCache(cache_bytes)
        took, took_cpu, _ = await _timed(stores, embedder, vectors[rng.integers(0, size)],
                                         {"query": "w1", "max_num_results": 10})
        times.append(took)
        cpu.append(took_cpu)
    _line("cold (matrix loaded), no filter", times, cpu)
    print(f"  cache: {engine.cache.used / size:.0f} bytes per chunk "
          f"({engine.cache.used / 2**20:.0f} MB)")
    times, cpu = [], []
    for n in range(5):
        file_id = f"file-{n}"
        assert await engine.add_files(TENANT, [{
            "store_id": "vs_bench", "file_id": file_id, "filename": f"doc{n}.txt",
            "created_at": 1, "attributes": {"topic": f"t{n % 10}", "year": 2000 + n % 25},
            "chunking": {}, "batch_id": None, "lease_until": 0}], 0)
        assert await engine.write_chunks(TENANT, "vs_bench", file_id, [
            Chunk(i, text, f"vs_bench-{n}-{i}-{n}", vectors[where[text]].tolist())
            for text in where if text.startswith(f"{n}.")
            for i in [int(text.split()[0].split(".")[1])]], 1)
        took, took_cpu, _ = await _timed(stores, embedder, vectors[rng.integers(0, size)],
                                         {"query": "w1", "max_num_results": 10})
        times.append(took)
        cpu.append(took_cpu)
    _line("after a write (1 file), no filter", times, cpu)
    for name, extra in CASES.items():
        times: list[float] = []
        cpu: list[float] = []
        recall: list[float] = []
        for q in range(queries + 10):
            target = rng.integers(0, size)
            query = vectors[target] + rng.normal(size=DIMS).astype(np.float32) * 0.05
            query /= np.linalg.norm(query)
            text = " ".join(words[w] for w in rng.integers(0, len(words), 4))
            took, took_cpu, page = await _timed(stores, embedder, query, {
                "query": text, "max_num_results": 10, **extra})
            if q >= 10:  # warm-up
                times.append(took)
                cpu.append(took_cpu)
            if not extra and q < 60:
                exact = {int(i) for i in np.argsort(-(vectors @ query))[:10]}
                got = {where[r["content"][0]["text"]] for r in page["data"]}
                recall.append(len(got & exact) / 10)
        _line(name, times, cpu, f", recall@10 {statistics.mean(recall):.3f}" if recall else "")
    print(f"  process resident set grew {_rss_mb() - rss_before:.1f} MB while searching "
          f"(max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    engine.cache = MatrixCache(0)
    times, cpu, recall = [], [], []
    for q in range(min(queries, 50) + 5):
        target = rng.integers(0, size)
        query = vectors[target] + rng.normal(size=DIMS).astype(np.float32) * 0.05
        query /= np.linalg.norm(query)
        took, took_cpu, page = await _timed(stores, embedder, query,
                                            {"query": "w1", "max_num_results": 10})
        if q >= 5:
            times.append(took)
            cpu.append(took_cpu)
            exact = {int(i) for i in np.argsort(-(vectors @ query))[:10]}
            recall.append(len({where[r["content"][0]["text"]] for r in page["data"]} & exact)
                          / 10)
    _line("sqlite-vec only (cache off)", times, cpu, f", recall@10 {statistics.mean(recall):.3f}")
    await stores.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in map(int, args.sizes.split(",")):
            asyncio.run(measure(size, args.queries, tmp))


if __name__ == "__main__":
    main()

"""The local engine's sqlite-vec index (vectors/vec_index.py): chunks land in a vec0 table of
their dimension in the engine's own database, a search scans only its store's partition and
the files filters select, and the exact float32 rescoring gives numpy's exact answer."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from responses_gateway.vectors.ingest import Chunk
from responses_gateway.vectors.local import LocalVectorEngine, database_path

DIMS = 64
FILES = 40
PER_FILE = 50


def _vectors(seed: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    common = rng.normal(size=DIMS)  # anisotropic, as real embeddings are
    data = common + rng.normal(size=(count, DIMS)) * 0.8
    return (data / np.linalg.norm(data, axis=1, keepdims=True)).astype(np.float32)


async def _filled(path: str, tenant: str, store_id: str, vectors: np.ndarray
                  ) -> LocalVectorEngine:
    engine = LocalVectorEngine(path)
    await engine.add_store(tenant, {"id": store_id, "created_at": 1, "name": "x",
                                    "metadata": {}, "expires_after": None,
                                    "last_active_at": 1})
    rows = [{"store_id": store_id, "file_id": f"file-{f}", "filename": f"{f}.txt",
             "created_at": 1, "attributes": None, "chunking": {}, "batch_id": None,
             "lease_until": 0} for f in range(FILES)]
    assert await engine.add_files(tenant, rows, 0)
    for f in range(FILES):
        chunks = [Chunk(i, f"chunk {f}-{i}", f"key-{store_id}-{f}-{i}",
                        vectors[f * PER_FILE + i].tolist()) for i in range(PER_FILE)]
        assert await engine.write_chunks(tenant, store_id, f"file-{f}", chunks, 1)
    return engine


def _exact(vectors: np.ndarray, query: np.ndarray, allowed: set[int], limit: int) -> list[str]:
    sims = vectors @ query
    order = [int(i) for i in np.argsort(-sims) if int(i) // PER_FILE in allowed]
    return [f"chunk {i // PER_FILE}-{i % PER_FILE}" for i in order[:limit]]


def test_search_matches_exact_scores_with_and_without_filters(tmp_path: Path) -> None:
    vectors = _vectors(1, FILES * PER_FILE)
    other = _vectors(2, FILES * PER_FILE)
    queries = _vectors(3, 12)

    async def run() -> None:
        path = str(tmp_path / "gateway.db")
        engine = await _filled(path, "t1", "vs_a", vectors)
        await engine.aclose()
        engine = await _filled(path, "t1", "vs_b", other)  # another store, same table
        try:
            everything = {f"file-{f}" for f in range(FILES)}
            for q, query in enumerate(queries):
                allowed = set(range(FILES)) if q % 2 else {f for f in range(FILES) if f % 7 == 0}
                found = await engine.search("t1", "vs_a", [query.tolist()], "", {
                    f"file-{f}" for f in allowed}, False, 10)
                ranked = [text for _, _, text, _, _ in sorted(found, key=lambda c: -c[3])]
                assert ranked == _exact(vectors, query, allowed, 10)
                assert all(fid in everything for _, fid, _, _, _ in found)
                for _, fid, text, sim, _ in found:
                    f, i = map(int, text.split()[1].split("-"))
                    assert fid == f"file-{f}"
                    assert sim == pytest.approx(float(vectors[f * PER_FILE + i] @ query),
                                                abs=1e-5)
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_vectors_live_in_a_vec0_table_of_their_own_database(tmp_path: Path) -> None:
    vectors = _vectors(4, FILES * PER_FILE)

    async def run() -> Any:
        path = str(tmp_path / "gateway.db")
        engine = await _filled(path, "t1", "vs_a", vectors)
        try:
            count = await engine.db.run(lambda c: c.execute(
                f"SELECT COUNT(*) FROM vs_vec_{DIMS}").fetchone()[0])
            assert count == FILES * PER_FILE
            assert await engine.remove_file("t1", "vs_a", "file-0")
            count = await engine.db.run(lambda c: c.execute(
                f"SELECT COUNT(*) FROM vs_vec_{DIMS}").fetchone()[0])
            assert count == (FILES - 1) * PER_FILE
            found = await engine.search("t1", "vs_a", [vectors[0].tolist()], "",
                                        {f"file-{f}" for f in range(FILES)}, False, 5)
            assert found and all(fid != "file-0" for _, fid, _, _, _ in found)
            assert await engine.delete_store("t1", "vs_a")
            count = await engine.db.run(lambda c: c.execute(
                f"SELECT COUNT(*) FROM vs_vec_{DIMS}").fetchone()[0])
            assert count == 0
        finally:
            await engine.aclose()
        # the response store's file holds no vector table: the engine has its own database
        assert Path(database_path(path)).exists() and database_path(path) != path
        if Path(path).exists():
            names = {r[0] for r in sqlite3.connect(path).execute(
                "SELECT name FROM sqlite_master")}
            assert not any(n.startswith("vs_") for n in names)

    asyncio.run(run())


def test_another_tenants_store_is_never_a_candidate(tmp_path: Path) -> None:
    vectors = _vectors(5, FILES * PER_FILE)

    async def run() -> None:
        path = str(tmp_path / "gateway.db")
        engine = await _filled(path, "t1", "vs_a", vectors)
        await engine.aclose()
        engine = await _filled(path, "t2", "vs_a", vectors)
        try:
            await engine.remove_file("t2", "vs_a", "file-3")
            found = await engine.search("t2", "vs_a", [vectors[3 * PER_FILE].tolist()], "",
                                        {f"file-{f}" for f in range(FILES)}, False, 5)
            assert all(fid != "file-3" for _, fid, _, _, _ in found)
        finally:
            await engine.aclose()

    asyncio.run(run())

"""The local engine's sqlite-vec index (vectors/vec_index.py) and its in-process matrix cache
(vectors/matrix_cache.py): chunks land in a vec0 table of their dimension in the engine's own
database; a search scans the store's cached matrix (or, without the cache, only its store's
vec0 partition and the files filters select) and gives numpy's exact answer; the cache follows
the store's generation, so another engine's writes are seen, and stays within its bound."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from responses_gateway.vectors import matrix_cache
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


async def _filled(path: str, tenant: str, store_id: str, vectors: np.ndarray,
                  cache_bytes: int = 1 << 30) -> LocalVectorEngine:
    engine = LocalVectorEngine(path, cache_bytes)
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


@pytest.mark.parametrize("cache_bytes", [1 << 30, 0], ids=["cache", "sqlite-vec"])
def test_search_matches_exact_scores_with_and_without_filters(tmp_path: Path,
                                                              cache_bytes: int) -> None:
    vectors = _vectors(1, FILES * PER_FILE)
    other = _vectors(2, FILES * PER_FILE)
    queries = _vectors(3, 12)

    async def run() -> None:
        path = str(tmp_path / "gateway.db")
        engine = await _filled(path, "t1", "vs_a", vectors)
        await engine.aclose()
        engine = await _filled(path, "t1", "vs_b", other, cache_bytes)  # same vec0 table
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
            assert bool(engine.cache.keys()) == bool(cache_bytes)
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_vectors_live_in_a_vec0_table_of_their_own_database(tmp_path: Path) -> None:
    vectors = _vectors(4, FILES * PER_FILE)

    async def run() -> Any:
        path = str(tmp_path / "gateway.db")
        engine = await _filled(path, "t1", "vs_a", vectors)
        try:
            count = await engine.db.run(engine.db.call, lambda c: c.execute(
                f"SELECT COUNT(*) FROM vs_vec_{DIMS}").fetchone()[0])
            assert count == FILES * PER_FILE
            assert await engine.remove_file("t1", "vs_a", "file-0")
            count = await engine.db.run(engine.db.call, lambda c: c.execute(
                f"SELECT COUNT(*) FROM vs_vec_{DIMS}").fetchone()[0])
            assert count == (FILES - 1) * PER_FILE
            found = await engine.search("t1", "vs_a", [vectors[0].tolist()], "",
                                        {f"file-{f}" for f in range(FILES)}, False, 5)
            assert found and all(fid != "file-0" for _, fid, _, _, _ in found)
            assert await engine.delete_store("t1", "vs_a")
            count = await engine.db.run(engine.db.call, lambda c: c.execute(
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


def _ranked(found: list[tuple[int, str, str, float, float]]) -> list[str]:
    return [text for _, _, text, _, _ in sorted(found, key=lambda c: -c[3])]


def _same_as_a_full_load(engine: LocalVectorEngine, path: str) -> None:
    """The engine's cached matrix holds what loading the store now gives, row for row."""
    cached = engine.cache.get(("t1", "vs_a", DIMS))
    assert cached is not None
    other = LocalVectorEngine(path)
    try:
        loaded = other._matrix(other.db.conn, "t1", "vs_a", DIMS)
    finally:
        other.db.close()
    assert loaded is not None and loaded.generation == cached.generation

    def rows(entry: matrix_cache.StoreMatrix) -> list[tuple[int, str, bytes]]:
        return sorted((int(i), entry.files[f], m.tobytes()) for seg in entry.segments
                      for i, f, m in zip(seg.ids, seg.file_of, seg.matrix, strict=True)
                      if entry.files[f] is not None)

    assert rows(cached) == rows(loaded) and len(loaded.segments) == 1


def test_a_write_by_another_engine_is_seen_by_a_cached_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two engines (two processes) on one database: the reader's cached matrix is brought up
    to date when the writer replaces or removes a file (the write bumps the store's
    generation and logs the file), by reloading only that file's rows."""
    vectors = _vectors(6, FILES * PER_FILE)
    fresh = _vectors(7, PER_FILE)
    query = fresh[3]
    loads: list[int] = []
    load = matrix_cache.load

    def counted(rows: Any, count: int, dims: int, generation: tuple[int, int]) -> Any:
        loads.append(count)
        return load(rows, count, dims, generation)

    monkeypatch.setattr(matrix_cache, "load", counted)

    async def run() -> None:
        path = str(tmp_path / "gateway.db")
        reader = await _filled(path, "t1", "vs_a", vectors)
        writer = LocalVectorEngine(path)
        every = {f"file-{f}" for f in range(FILES)}
        try:
            before = await reader.search("t1", "vs_a", [query.tolist()], "", every, False, 10)
            assert _ranked(before) == _exact(vectors, query, set(range(FILES)), 10)
            assert reader.cache.keys() == [("t1", "vs_a", DIMS)]
            # the writer replaces file-0's chunks: the query's own vector is now one of them
            assert await writer.add_files("t1", [{
                "store_id": "vs_a", "file_id": "file-0", "filename": "0.txt", "created_at": 1,
                "attributes": None, "chunking": {}, "batch_id": None, "lease_until": 0}], 0)
            assert await writer.write_chunks("t1", "vs_a", "file-0", [
                Chunk(i, f"new {i}", f"new-{i}", fresh[i].tolist()) for i in range(PER_FILE)], 1)
            after = await reader.search("t1", "vs_a", [query.tolist()], "", every, False, 10)
            merged = np.concatenate([fresh, vectors[PER_FILE:]])
            expected = [f"new {t.split('-')[1]}" if t.startswith("chunk 0-") else t
                        for t in _exact(merged, query, set(range(FILES)), 10)]
            assert _ranked(after) == expected and expected[0] == "new 3"
            assert loads == [FILES * PER_FILE, PER_FILE]  # the store once, then file-0 only
            _same_as_a_full_load(reader, path)
            loads.clear()
            # the writer removes files: the reader never returns their chunks, and still
            # returns ten (a stale matrix would name rows that are gone)
            for f in range(1, 6):
                assert await writer.remove_file("t1", "vs_a", f"file-{f}")
            gone = await reader.search("t1", "vs_a", [vectors[PER_FILE + 1].tolist()], "",
                                       every, False, 10)
            assert len(gone) == 10
            assert not {fid for _, fid, _, _, _ in gone} & {f"file-{f}" for f in range(1, 6)}
            survivors = np.concatenate([fresh, vectors[6 * PER_FILE:]])
            texts = [f"new {i}" for i in range(PER_FILE)] + [
                f"chunk {i // PER_FILE}-{i % PER_FILE}" for i in range(6 * PER_FILE, FILES *
                                                                      PER_FILE)]
            sims = survivors @ vectors[PER_FILE + 1]
            assert _ranked(gone) == [texts[int(i)] for i in np.argsort(-sims)[:10]]
            assert loads == [0]  # the removed files' rows dropped, none read
            _same_as_a_full_load(reader, path)
        finally:
            await reader.aclose()
            await writer.aclose()

    asyncio.run(run())


def test_every_write_to_a_store_bumps_its_generation_in_its_transaction(tmp_path: Path) -> None:
    vectors = _vectors(8, FILES * PER_FILE)

    async def run() -> None:
        engine = await _filled(str(tmp_path / "gateway.db"), "t1", "vs_a", vectors)

        async def version() -> int:
            row = await engine.store("t1", "vs_a")
            assert row is not None
            return int(row["version"])

        try:
            start = await version()
            assert start == 1 + FILES  # add_files, then one write_chunks per file
            assert await engine.remove_file("t1", "vs_a", "file-0")
            assert await version() == start + 1
            assert not await engine.remove_file("t1", "vs_a", "file-0")  # nothing to remove
            await engine.add_files("t1", [{
                "store_id": "vs_a", "file_id": "file-0", "filename": "0.txt", "created_at": 1,
                "attributes": None, "chunking": {}, "batch_id": None, "lease_until": 0}], 0)
            assert await version() == start + 3
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_the_cache_keeps_within_its_bound_least_recently_searched_first(tmp_path: Path) -> None:
    per_store = FILES * PER_FILE * (4 * DIMS + 12)

    async def run() -> None:
        path = str(tmp_path / "gateway.db")
        stores = {name: _vectors(10 + n, FILES * PER_FILE)
                  for n, name in enumerate(("vs_a", "vs_b", "vs_c"))}
        for name, vectors in stores.items():
            await (await _filled(path, "t1", name, vectors)).aclose()
        engine = LocalVectorEngine(path, per_store * 2 + 100)  # two stores fit, not three
        every = {f"file-{f}" for f in range(FILES)}
        query = _vectors(20, 1)[0]
        try:
            for name in ("vs_a", "vs_b", "vs_a", "vs_c"):
                found = await engine.search("t1", name, [query.tolist()], "", every, False, 10)
                assert _ranked(found) == _exact(stores[name], query, set(range(FILES)), 10)
                assert engine.cache.used <= engine.cache.max_bytes
            # vs_b was the least recently searched when vs_c came in
            assert engine.cache.keys() == [("t1", "vs_a", DIMS), ("t1", "vs_c", DIMS)]
            assert engine.cache.used == 2 * per_store
        finally:
            await engine.aclose()
        # a store larger than the bound is searched by sqlite-vec, exactly, and not kept
        small = LocalVectorEngine(path, per_store - 1)
        try:
            found = await small.search("t1", "vs_b", [query.tolist()], "", every, False, 10)
            assert _ranked(found) == _exact(stores["vs_b"], query, set(range(FILES)), 10)
            assert small.cache.keys() == [] and small.cache.used == 0
        finally:
            await small.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("word", ["apple", "banana"], ids=["others-dominate", "store-only"])
def test_the_keyword_half_is_the_best_bm25_among_the_stores_selected_files(
        tmp_path: Path, word: str) -> None:
    """FTS5 is one index over every store: the keyword candidates are the best by bm25 among
    the searched store's selected files, whether the database's best matches are another
    store's ("apple", heavy in vs_b) or the store's own ("banana", only in vs_a)."""
    vectors = _vectors(30, FILES * PER_FILE)

    async def run() -> None:
        engine = LocalVectorEngine(str(tmp_path / "gateway.db"))
        try:
            for store_id, heavy in (("vs_a", 1), ("vs_b", 6)):
                await engine.add_store("t1", {"id": store_id, "created_at": 1, "name": "x",
                                              "metadata": {}, "expires_after": None,
                                              "last_active_at": 1})
                assert await engine.add_files("t1", [{
                    "store_id": store_id, "file_id": f"file-{f}", "filename": f"{f}.txt",
                    "created_at": 1, "attributes": None, "chunking": {}, "batch_id": None,
                    "lease_until": 0} for f in range(FILES)], 0)
                for f in range(FILES):
                    chunks = []
                    for i in range(PER_FILE):
                        n = f * PER_FILE + i
                        words = ["apple"] * (heavy + n % 5) + ["filler"] * (n % 89)
                        if store_id == "vs_a" and n % 3 == 0:
                            words += ["banana"] * (1 + n % 4)
                        chunks.append(Chunk(i, f"chunk {f}-{i} " + " ".join(words),
                                            f"k-{store_id}-{n}", vectors[n].tolist()))
                    assert await engine.write_chunks("t1", store_id, f"file-{f}", chunks, 1)
            allowed = {f"file-{f}" for f in range(FILES) if f % 4 == 1}
            found = await engine.search("t1", "vs_a", [vectors[0].tolist()], word, allowed,
                                        True, 5)
            truth = await engine.db.run(engine.db.call, lambda c: [r for r in c.execute(
                "SELECT ch.file_id, -bm25(vs_chunks_fts) FROM vs_chunks_fts f JOIN vs_chunks ch"
                " ON ch.id = f.rowid WHERE vs_chunks_fts MATCH ? AND ch.tenant = 't1' AND "
                "ch.store_id = 'vs_a' ORDER BY bm25(vs_chunks_fts)", (f'"{word}"',))
                if r[0] in allowed][:5])
            assert len(truth) == 5
            got = sorted((kw for _, fid, _, _, kw in found if kw > 0), reverse=True)
            assert all(fid in allowed for _, fid, _, _, _ in found)
            assert got == pytest.approx([s / truth[0][1] for _, s in truth])
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_the_completed_files_a_process_keeps_follow_another_engines_writes(
        tmp_path: Path) -> None:
    """Attributes and statuses changed by another engine are seen by the next read of the
    store's completed files (what filters select from); a lease renewal changes nothing."""
    vectors = _vectors(40, FILES * PER_FILE)

    async def run() -> None:
        path = str(tmp_path / "gateway.db")
        reader = await _filled(path, "t1", "vs_a", vectors)
        writer = LocalVectorEngine(path)
        try:
            first = await reader.completed_files("t1", "vs_a")
            assert len(first) == FILES and first["file-2"]["attributes"] is None
            held = reader._files[("t1", "vs_a")]
            assert await writer.update_file("t1", "vs_a", "file-2", {"lease_until": 99.0})
            assert await reader.completed_files("t1", "vs_a") == first
            assert reader._files[("t1", "vs_a")] is held  # kept: nothing searched changed
            assert await writer.update_file("t1", "vs_a", "file-2", {"attributes": {"k": 1}})
            assert (await reader.completed_files("t1", "vs_a"))["file-2"]["attributes"] == \
                {"k": 1}
            assert await writer.update_file("t1", "vs_a", "file-3", {"status": "failed"})
            assert "file-3" not in await reader.completed_files("t1", "vs_a")
            assert await writer.remove_file("t1", "vs_a", "file-4")
            assert set(await reader.completed_files("t1", "vs_a")) == {
                f"file-{f}" for f in range(FILES)} - {"file-3", "file-4"}
        finally:
            await reader.aclose()
            await writer.aclose()

    asyncio.run(run())


def test_a_database_made_before_files_version_gets_the_column(tmp_path: Path) -> None:
    path = str(tmp_path / "gateway.db")
    engine = LocalVectorEngine(path)
    engine.db.call(lambda c: c.executescript(
        "DROP TABLE vector_stores; CREATE TABLE vector_stores (tenant TEXT NOT NULL, id TEXT "
        "NOT NULL, created_at INTEGER NOT NULL, name TEXT, description TEXT, metadata TEXT NOT "
        "NULL, expires_after TEXT, last_active_at INTEGER NOT NULL, version INTEGER NOT NULL "
        "DEFAULT 0, PRIMARY KEY (tenant, id));"))
    engine.db.close()
    engine = LocalVectorEngine(path)
    try:
        columns = engine.db.call(lambda c: [r[1] for r in c.execute(
            "PRAGMA table_info(vector_stores)")])
        assert "files_version" in columns
    finally:
        engine.db.close()

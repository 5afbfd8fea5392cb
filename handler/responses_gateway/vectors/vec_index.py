"""The local engine's vector index on sqlite-vec (loaded through sqlean, a sqlite3-compatible
module whose SQLite may load extensions; both imported when the engine opens its database).

One ``vec0`` table per vector dimension (``vs_vec_<dims>``, made when the first chunk of that
dimension is written): ``store`` (``<tenant>/<store id>``) is its partition key, so a search
reads only its store's vectors; ``file`` (a 64-bit hash of the file id) is a metadata column,
so ``filters`` narrow the scan before any distance is computed; ``coarse`` is the chunk's
unit vector quantised to int8 (a quarter of float32's bytes to read per query). A search asks
vec0 for a few times more candidates than it keeps and scores them again exactly with the
float32 vectors ``vs_chunks`` holds, so the int8 rounding decides only what is looked at.
A trigger per table removes a chunk's vector with its ``vs_chunks`` row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

SCALE = 254.0  # a unit vector's coordinates in -0.5..0.5 span the int8 range; larger clip
MIN_CANDIDATES = 40  # asked of vec0 per query at least (then exact scores keep the best)
OVERSAMPLE = 4  # candidates per result kept
MAX_K = 4096  # vec0's bound on k
IN_BATCH = 500  # file keys per KNN query when filters select files


def connect(path: str) -> Any:
    """A sqlean connection with sqlite-vec loaded (extension loading switched off again)."""
    import sqlean
    import sqlite_vec

    conn = sqlean.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlean.Row
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    return conn


def store_key(tenant: str, store_id: str) -> str:
    return f"{tenant}/{store_id}"


def file_key(file_id: str) -> int:
    """The file's metadata value: 64 bits of its id's hash (a search checks the id again)."""
    return int.from_bytes(hashlib.blake2b(file_id.encode(), digest_size=8).digest(), "little",
                          signed=True)


def ensure_table(c: Any, dims: int) -> str:
    table = f"vs_vec_{int(dims)}"
    c.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0(store TEXT PARTITION KEY,"
              f" file INTEGER, coarse int8[{int(dims)}])")
    c.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON vs_chunks WHEN "
              f"length(old.vector) = {4 * int(dims)} BEGIN DELETE FROM {table} WHERE rowid = "
              "old.id; END")
    return table


def has_table(c: Any, dims: int) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE name = ?",
                     (f"vs_vec_{int(dims)}",)).fetchone() is not None


def quantize(unit: Any) -> bytes:
    import numpy as np

    return np.clip(np.rint(unit * SCALE), -127, 127).astype(np.int8).tobytes()


def add(c: Any, tenant: str, store_id: str, rows: Iterable[tuple[int, str, Any]]) -> None:
    """Index chunks ``(chunk id, file id, unit float32 vector)`` of one store."""
    key = store_key(tenant, store_id)
    by_dims: dict[int, list[tuple[int, str, int, bytes]]] = {}
    for chunk_id, file_id, unit in rows:
        by_dims.setdefault(len(unit), []).append((chunk_id, key, file_key(file_id),
                                                  quantize(unit)))
    for dims, values in by_dims.items():
        table = ensure_table(c, dims)
        c.executemany(f"INSERT INTO {table} (rowid, store, file, coarse) VALUES "
                      "(?, ?, ?, vec_int8(?))", values)


def candidates(c: Any, tenant: str, store_id: str, query: Any, limit: int,
               file_ids: list[str] | None) -> list[int]:
    """Chunk ids near the unit ``query`` (int8 distance): a few times ``limit``, among the
    files ``file_ids`` names (None: every file of the store)."""
    dims = len(query)
    if not has_table(c, dims):
        return []
    k = min(MAX_K, max(MIN_CANDIDATES, OVERSAMPLE * limit))
    sql = (f"SELECT rowid FROM vs_vec_{int(dims)} WHERE coarse MATCH vec_int8(?) AND k = ? "
           "AND store = ?")
    args: list[Any] = [quantize(query), k, store_key(tenant, store_id)]
    if file_ids is None:
        return [r[0] for r in c.execute(sql, args)]
    keys = sorted({file_key(f) for f in file_ids})
    found: list[int] = []
    for i in range(0, len(keys), IN_BATCH):
        part = keys[i:i + IN_BATCH]
        found += [r[0] for r in c.execute(
            f"{sql} AND file IN ({','.join('?' * len(part))})", [*args, *part])]
    return found

"""The local engine's in-process copy of searched stores' vectors (``GATEWAY_VECTOR_CACHE_BYTES``).

sqlite-vec's scan costs about 1 µs per row whatever the element type (its per-row work, not
the arithmetic, dominates), so 100k chunks cost ~100 ms; one float32 matrix product over the
same vectors costs ~15 ms. A searched store's vectors of one dimension are therefore kept here
as one matrix (rows -> chunk ids and file indexes), loaded from ``vs_chunks`` on its first
search and used while the store's generation (its ``created_at`` and ``version``, bumped in the
same transaction as every change to its chunks, by whichever process writes) is unchanged.
Each bump also logs the files it changed (``vs_changes``), so a copy a few generations old is
brought up to date by reloading only those files' rows (:func:`refreshed`), not the store.
The bytes held are bounded; the least recently searched stores are dropped first, and a store
larger than the bound is searched by sqlite-vec (the durable index) instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

# Below this many elements numpy's own loop (einsum) beats BLAS's matrix-vector product,
# whose threads cost ~6 ms of wake-up on a busy 2-core machine (measured: 2k rows of 384
# dims 0.4 against 7.5 ms, 10k 1.7 against 6 ms; from ~30k rows BLAS is ahead).
EINSUM_MAX = 8_000_000
ROW_EXTRA = 12  # bytes per row beside the vector: its chunk id (int64) and file index (int32)


@dataclass
class StoreMatrix:
    """One store's unit vectors of one dimension, as of ``generation``."""

    generation: tuple[int, int]
    ids: Any  # int64 chunk ids, one per row
    file_of: Any  # int32 index into ``files``, one per row (a file's rows are adjacent)
    files: list[str]
    matrix: Any  # float32 (rows, dims)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.ids.nbytes + self.file_of.nbytes)

    def nearest(self, units: list[Any], files: set[str], limit: int) -> list[int]:
        """The chunk ids of the ``limit`` rows with the best cosine (the best over ``units``)
        among the rows of ``files``: an exact scan."""
        import numpy as np

        allowed = np.fromiter((f in files for f in self.files), dtype=bool, count=len(self.files))
        if not allowed.any() or not len(self.ids):
            return []
        # runs of adjacent rows whose files are allowed: products over views, no copies
        keep = np.concatenate(([False], allowed[self.file_of], [False]))
        edges = np.flatnonzero(keep[1:] != keep[:-1])
        runs = list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))
        sims = np.concatenate([self._sims(self.matrix[a:b], units) for a, b in runs])
        ids = self.ids if len(runs) == 1 and runs[0] == (0, len(self.ids)) else \
            np.concatenate([self.ids[a:b] for a, b in runs])
        if len(sims) > limit:
            best = np.argpartition(-sims, limit - 1)[:limit]
        else:
            best = np.arange(len(sims))
        return [int(i) for i in ids[best]]

    @staticmethod
    def _sims(matrix: Any, units: list[Any]) -> Any:
        import numpy as np

        def product(unit: Any) -> Any:
            return np.einsum("ij,j->i", matrix, unit) if matrix.size <= EINSUM_MAX \
                else matrix @ unit

        sims = product(units[0])
        for unit in units[1:]:
            np.maximum(sims, product(unit), out=sims)
        return sims


def load(rows: Any, count: int, dims: int, generation: tuple[int, int]) -> StoreMatrix:
    """A matrix from at most ``count`` ``(chunk id, file id, float32 blob)`` rows in file
    order (other dimensions skipped), copied row by row into one array."""
    import numpy as np

    width = 4 * dims
    matrix = np.empty((count, dims), dtype=np.float32)
    flat = memoryview(matrix.reshape(-1).view(np.uint8)) if count else memoryview(b"")
    ids = np.empty(count, dtype=np.int64)
    file_of = np.empty(count, dtype=np.int32)
    index: dict[str, int] = {}
    n = 0
    for chunk_id, file_id, blob in rows:
        if len(blob) != width or n == count:
            continue
        flat[n * width:(n + 1) * width] = blob
        ids[n] = chunk_id
        file_of[n] = index.setdefault(file_id, len(index))
        n += 1
    return StoreMatrix(generation, ids[:n].copy(), file_of[:n].copy(), list(index),
                       matrix[:n] if n == count else matrix[:n].copy())


def refreshed(entry: StoreMatrix, changed: set[str], fresh: StoreMatrix) -> StoreMatrix:
    """``entry`` with the rows of the files ``changed`` replaced by ``fresh`` (their current
    rows, of ``fresh.generation``): one copy of the kept rows, no read of them."""
    import numpy as np

    index = {f: i for i, f in enumerate(entry.files)}
    gone = np.fromiter((f in changed for f in entry.files), dtype=bool, count=len(entry.files))
    keep = ~gone[entry.file_of]
    kept = int(keep.sum())
    files = list(entry.files)
    remap = np.empty(len(fresh.files), dtype=np.int32)
    for i, f in enumerate(fresh.files):
        remap[i] = index.setdefault(f, len(files))
        if remap[i] == len(files):
            files.append(f)
    dims = entry.matrix.shape[1]
    matrix = np.empty((kept + len(fresh.ids), dims), dtype=np.float32)
    np.compress(keep, entry.matrix, axis=0, out=matrix[:kept])
    matrix[kept:] = fresh.matrix
    return StoreMatrix(fresh.generation, np.concatenate([entry.ids[keep], fresh.ids]),
                       np.concatenate([entry.file_of[keep], remap[fresh.file_of]]), files,
                       matrix)


class MatrixCache:
    """Store matrices by ``(tenant, store id, dims)``, at most ``max_bytes`` in all (LRU)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._entries: OrderedDict[tuple[str, str, int], StoreMatrix] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int]) -> StoreMatrix | None:
        """The entry, of whichever generation (the caller compares)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def drop(self, key: tuple[str, str, int]) -> None:
        with self._lock:
            if key in self._entries:
                self._drop(key)

    def fits(self, nbytes: int) -> bool:
        return 0 < nbytes <= self.max_bytes

    def put(self, key: tuple[str, str, int], entry: StoreMatrix) -> bool:
        """Keep ``entry``, dropping the least recently used ones to stay within the bound."""
        if not self.fits(entry.nbytes):
            return False
        with self._lock:
            if key in self._entries:
                self._drop(key)
            while self._entries and self.used + entry.nbytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[key] = entry
            self.used += entry.nbytes
            return True

    def keys(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return list(self._entries)

    def _drop(self, key: tuple[str, str, int]) -> None:
        self.used -= self._entries.pop(key).nbytes

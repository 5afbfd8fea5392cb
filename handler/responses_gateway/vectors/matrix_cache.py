"""The local engine's in-process copy of searched stores' vectors (``GATEWAY_VECTOR_CACHE_BYTES``).

sqlite-vec's scan costs about 1 µs per row whatever the element type (its per-row work, not
the arithmetic, dominates), so 100k chunks cost ~100 ms; one float32 matrix product over the
same vectors costs ~15 ms. A searched store's vectors of one dimension are therefore kept here
as one matrix (rows -> chunk ids and file indexes), loaded from ``vs_chunks`` on its first
search and used while the store's generation (its ``created_at`` and ``version``, bumped in the
same transaction as every change to its chunks, by whichever process writes) is unchanged.
The bytes held are bounded; the least recently searched stores are dropped first, and a store
larger than the bound is searched by sqlite-vec (the durable index) instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

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

        sims = matrix @ units[0]
        for unit in units[1:]:
            np.maximum(sims, matrix @ unit, out=sims)
        return sims


def load(rows: Any, count: int, dims: int, generation: tuple[int, int]) -> StoreMatrix:
    """A matrix from at most ``count`` ``(chunk id, file id, float32 blob)`` rows in file
    order (other dimensions skipped), copied row by row into one array."""
    import numpy as np

    width = 4 * dims
    matrix = np.empty((count, dims), dtype=np.float32)
    flat = memoryview(matrix).cast("B")
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


class MatrixCache:
    """Store matrices by ``(tenant, store id, dims)``, at most ``max_bytes`` in all (LRU)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._entries: OrderedDict[tuple[str, str, int], StoreMatrix] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int], generation: tuple[int, int]) -> StoreMatrix | None:
        """The entry if it is of ``generation`` (an older one is dropped)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.generation != generation:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return entry

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

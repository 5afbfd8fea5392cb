"""The local engine's in-process copy of searched stores' vectors (``GATEWAY_VECTOR_CACHE_BYTES``).

sqlite-vec's scan costs about 1 µs per row whatever the element type (its per-row work, not
the arithmetic, dominates), so 100k chunks of 384 dimensions cost ~120 ms; one float32
matrix-vector product over the same vectors (numpy, memory bound) ~20-40 ms of CPU. A
searched store's vectors of one dimension are therefore kept here as a matrix (rows -> chunk
ids and file indexes), loaded from ``vs_chunks`` on its first search and used while the
store's generation (its ``created_at`` and ``version``, bumped in the same transaction as
every change to its chunks, by whichever process writes) is unchanged.
Each bump also logs the files it changed (``vs_changes``), so a copy a few generations old is
brought up to date by reading only those files' rows (:func:`refreshed`: a new segment; the
replaced rows are left out by name until the store is loaded again).
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
MAX_SEGMENTS = 16  # past it (or a quarter of the rows replaced) the store is loaded again
ROW_EXTRA = 12  # bytes per row beside the vector: its chunk id (int64) and file index (int32)


@dataclass
class Segment:
    """Rows loaded together: a matrix and, per row, its chunk id and file index."""

    ids: Any  # int64 chunk ids
    file_of: Any  # int32 index into ``StoreMatrix.files`` (a file's rows are adjacent)
    matrix: Any  # float32 (rows, dims)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.ids.nbytes + self.file_of.nbytes)


@dataclass
class StoreMatrix:
    """One store's unit vectors of one dimension, as of ``generation``: the segment loaded
    first, then one per refresh (a replaced file's old rows stay, under a ``None`` name)."""

    generation: tuple[int, int]
    files: list[str | None]  # file index -> file id; None: rows of a file replaced since
    segments: list[Segment]
    dead: int = 0  # rows under a None name

    @property
    def nbytes(self) -> int:
        return sum(seg.nbytes for seg in self.segments)

    @property
    def rows(self) -> int:
        return sum(len(seg.ids) for seg in self.segments)

    def nearest(self, units: list[Any], files: set[str], limit: int) -> list[int]:
        """The chunk ids of the ``limit`` rows with the best cosine (the best over ``units``)
        among the rows of ``files``: an exact scan."""
        import numpy as np

        allowed = np.fromiter((f is not None and f in files for f in self.files), dtype=bool,
                              count=len(self.files))
        if not allowed.any():
            return []
        sims, ids = [], []
        for seg in self.segments:  # products over views of the matrices, no copies
            for a, b in _runs(allowed[seg.file_of]):
                sims.append(self._sims(seg.matrix[a:b], units))
                ids.append(seg.ids[a:b])
        if not sims:
            return []
        every, chunk_ids = np.concatenate(sims), np.concatenate(ids)
        if len(every) > limit:
            best = np.argpartition(-every, limit - 1)[:limit]
        else:
            best = np.arange(len(every))
        return [int(i) for i in chunk_ids[best]]

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


def _runs(mask: Any) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of adjacent true rows."""
    import numpy as np

    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


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
    if n < count:
        ids, file_of, matrix = ids[:n].copy(), file_of[:n].copy(), matrix[:n].copy()
    return StoreMatrix(generation, list(index), [Segment(ids, file_of, matrix)])


def refreshed(entry: StoreMatrix, changed: set[str], fresh: StoreMatrix) -> StoreMatrix:
    """``entry`` with the rows of the files ``changed`` replaced by ``fresh`` (their current
    rows, of ``fresh.generation``): the old rows are left out by name and ``fresh``'s are a
    new segment, so nothing of ``entry`` is read or copied."""
    import numpy as np

    files = list(entry.files)
    index = {f: i for i, f in enumerate(files) if f is not None}
    counts = sum(np.bincount(seg.file_of, minlength=len(files)) for seg in entry.segments)
    dead = entry.dead
    for f in changed:
        i = index.pop(f, None)
        if i is not None:
            files[i] = None
            dead += int(counts[i])
    remap = np.arange(len(files), len(files) + len(fresh.files), dtype=np.int32)
    files += fresh.files
    segments = list(entry.segments) + [Segment(seg.ids, remap[seg.file_of], seg.matrix)
                                       for seg in fresh.segments if len(seg.ids)]
    return StoreMatrix(fresh.generation, files, segments, dead)


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

"""The seam of vector storage: what :class:`~.service.VectorStores` asks of an engine. Two
implementations share one test suite: :mod:`.local` (one SQLite database, exact search with
numpy, FTS5) and :mod:`.aws` (records in DynamoDB, vectors in Amazon S3 Vectors).

Rows are plain dicts: a store ``{id, created_at, name, description, metadata, expires_after,
last_active_at}``; a file ``{store_id, file_id, filename, created_at, status, last_error,
usage_bytes, attributes, chunking, batch_id, lease_until}`` (plus ``tenant`` from
:meth:`stale_files`); a batch ``{id, store_id, created_at, status}``.
"""

from __future__ import annotations

from typing import Any, Protocol

#: one search candidate: (chunk key, file id, text, best cosine similarity, keyword score 0..1)
Candidate = tuple[Any, str, str, float, float]


class VectorEngine(Protocol):
    async def add_store(self, tenant: str, row: dict[str, Any]) -> None: ...

    async def store(self, tenant: str, store_id: str) -> dict[str, Any] | None: ...

    async def store_totals(self, tenant: str, store_id: str) -> tuple[dict[str, int], int]:
        """Files by status, and the bytes the store's files use."""
        ...

    async def stores_page(self, tenant: str, order: str, after: str | None,
                          before: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        ...

    async def update_store(self, tenant: str, store_id: str, changes: dict[str, Any]) -> None:
        ...

    async def delete_store(self, tenant: str, store_id: str) -> bool: ...

    async def add_files(self, tenant: str, rows: list[dict[str, Any]], limit: int) -> bool:
        """Attach files in_progress (replacing one attached before, its chunks dropped); False
        (nothing written) when the store would hold more than ``limit`` files (0: no bound)."""
        ...

    async def file(self, tenant: str, store_id: str, file_id: str) -> dict[str, Any] | None: ...

    async def files_page(
        self, tenant: str, store_id: str, *, status: str | None, batch_id: str | None,
        order: str, after: str | None, before: str | None, limit: int,
    ) -> tuple[list[dict[str, Any]], bool]: ...

    async def completed_files(self, tenant: str, store_id: str) -> dict[str, dict[str, Any]]:
        """The store's completed files (what a search reads): file id -> ``{filename,
        attributes}``."""
        ...

    async def update_file(self, tenant: str, store_id: str, file_id: str,
                          changes: dict[str, Any], *, only_status: str | None = None) -> bool:
        """Change a file's row; with ``only_status``, only while it has that status."""
        ...

    async def remove_file(self, tenant: str, store_id: str, file_id: str) -> bool: ...

    async def add_batch(self, tenant: str, store_id: str, batch_id: str, created: int) -> None:
        ...

    async def batch(self, tenant: str, store_id: str, batch_id: str
                    ) -> tuple[dict[str, Any], dict[str, int]] | None: ...

    async def cancel_batch(self, tenant: str, store_id: str, batch_id: str) -> None: ...

    async def stale_files(self, now: float) -> list[dict[str, Any]]:
        """Files left ``in_progress`` by a process that stopped (their lease ran out)."""
        ...

    async def claim_file(self, tenant: str, store_id: str, file_id: str, now: float,
                         lease_until: float) -> bool:
        """Set the file's lease to ``lease_until`` if it is ``in_progress`` and its lease
        ran out before ``now`` (one atomic write: of two processes claiming it, one wins)."""
        ...

    async def cached_vectors(self, tenant: str, keys: list[str]) -> dict[str, list[float]]:
        """The embedding cache: vectors the tenant's own chunks hold for these cache keys
        (model and text). Never another tenant's (a hit is faster than a miss, so a shared
        cache tells who holds what), and gone with the last chunk that held it."""
        ...

    async def write_chunks(self, tenant: str, store_id: str, file_id: str,
                           chunks: list[Any], usage: int) -> bool:
        """Replace the file's chunks and mark it completed, unless it is no longer
        ``in_progress`` (then nothing stays written)."""
        ...

    async def file_text(self, tenant: str, store_id: str, file_id: str) -> list[str]: ...

    async def search(self, tenant: str, store_id: str, queries: list[list[float]],
                     text: str, files: set[str], want_text: bool, limit: int
                     ) -> list[Candidate]:
        """Candidates among ``files``: the ``limit`` best by vector, and (``want_text``) the
        best by keywords."""
        ...

    async def aclose(self) -> None: ...

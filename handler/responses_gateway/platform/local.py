"""The local platform (``GATEWAY_STORE=sqlite:PATH``): no AWS account needed.

Responses, conversations, file and upload records and vectors (sqlite-vec) in the SQLite
file PATH; file bytes in ``PATH.files/``; images in ``PATH.blobs/`` (in memory for
``:memory:``); background work in the process; expired files swept on a timer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from responses_gateway.platform.base import Platform

if TYPE_CHECKING:
    from responses_gateway.containers.engine import ContainerEngine
    from responses_gateway.containers.local import SQLiteContainerRecords
    from responses_gateway.files.local import DiskBlobs, SQLiteFileRecords, SQLiteUploadRecords
    from responses_gateway.settings import Settings
    from responses_gateway.store.base import StoreLimits
    from responses_gateway.store.blobs import Blobs
    from responses_gateway.store.sqlite import SQLiteStore
    from responses_gateway.vectors.local import LocalVectorEngine

DEFAULT_PATH = "gateway.db"


class LocalPlatform(Platform):
    name = "local"
    sweeps_expired_files = True

    def __init__(self, settings: Settings, path: str) -> None:
        super().__init__(settings)
        self.given = path  # as configured ("" when GATEWAY_STORE=sqlite:)
        self.path = path or DEFAULT_PATH

    def response_store(self, limits: StoreLimits) -> SQLiteStore:
        from responses_gateway.store.sqlite import SQLiteStore

        return SQLiteStore(self.path, retention_days=self.settings.retention_days,
                           limits=limits)

    def file_records(self) -> SQLiteFileRecords:
        from responses_gateway.files.local import SQLiteFileRecords

        return SQLiteFileRecords(self.path)

    def file_blobs(self) -> DiskBlobs:
        from responses_gateway.files.local import DiskBlobs

        return DiskBlobs(self._files_folder)

    def upload_records(self, clock: Callable[[], float]) -> SQLiteUploadRecords:
        """SQLite's records take every time from their callers (no row expiry of their own),
        so ``clock`` is not theirs to keep."""
        from responses_gateway.files.local import SQLiteUploadRecords

        return SQLiteUploadRecords(self.path)

    @property
    def has_vector_stores(self) -> bool:
        return True

    def vector_engine(self) -> LocalVectorEngine:
        from responses_gateway.vectors.local import LocalVectorEngine

        return LocalVectorEngine(self.path, self.settings.vector_cache_bytes)

    def blobs_beside_store(self) -> Blobs:
        """``PATH.blobs/`` (expired owners swept now, as SQLite purges on open); in memory
        when the store has no file."""
        if self.given and self.given != ":memory:":
            from responses_gateway.store.blobs import DirectoryBlobs

            blobs = DirectoryBlobs(f"{self.given}.blobs")
            blobs.sweep(self.settings.retention_days)
            return blobs
        from responses_gateway.store.blobs import MemoryBlobs

        return MemoryBlobs()

    def container_records(self) -> SQLiteContainerRecords:
        from responses_gateway.containers.local import SQLiteContainerRecords

        return SQLiteContainerRecords(self.path)

    def sandbox_engine(self) -> ContainerEngine:
        """A bubblewrap jail per container, its /mnt/data in ``GATEWAY_CONTAINER_DIR`` (else
        ``PATH.containers/`` beside the SQLite file)."""
        from responses_gateway.containers.sandbox import SandboxEngine

        s = self.settings
        return SandboxEngine(self.container_folder, python=s.sandbox_python,
                             memory_mb=s.code_memory_mb)

    @property
    def container_folder(self) -> str:
        return self.settings.container_dir or self.path + ".containers"

    def files_stored(self) -> bool:
        return Path(self._files_folder).exists()

    @property
    def _files_folder(self) -> str:
        return self.path + ".files"

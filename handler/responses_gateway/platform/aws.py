"""The AWS platform (``GATEWAY_STORE=dynamodb:TABLE``).

Responses, conversations, file and upload records, vector store records and WebSocket
connections in the DynamoDB table TABLE; file bytes in S3 (``GATEWAY_FILES_BUCKET``; without it
the Files routes answer 501); vectors in S3 Vectors (``GATEWAY_VECTOR_BUCKET``; without it no
vector stores); images in S3 (``GATEWAY_IMAGE_BUCKET``, which config.py requires with an image
backend); background work in the worker Lambda (``GATEWAY_WORKER_FUNCTION``). Expired files
are reclaimed per tenant as they are served, not swept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from responses_gateway.errors import GatewayError
from responses_gateway.platform.base import Platform

if TYPE_CHECKING:
    from responses_gateway.containers.aws import DynamoDBContainerRecords
    from responses_gateway.files.aws import DynamoDBFileRecords, DynamoDBUploadRecords, S3Blobs
    from responses_gateway.settings import Settings
    from responses_gateway.store.base import StoreLimits
    from responses_gateway.store.blobs import Blobs
    from responses_gateway.store.connections import Connections
    from responses_gateway.store.dynamodb import DynamoDBStore
    from responses_gateway.vectors.aws import AWSVectorEngine


class AWSPlatform(Platform):
    name = "aws"

    def __init__(self, settings: Settings, table: str) -> None:
        super().__init__(settings)
        self.table = table

    def response_store(self, limits: StoreLimits) -> DynamoDBStore:
        from responses_gateway.store.dynamodb import DynamoDBStore

        return DynamoDBStore(self.table, retention_days=self.settings.retention_days,
                             limits=limits)

    def file_records(self) -> DynamoDBFileRecords:
        self._files_bucket()  # the 501 before any engine is made
        from responses_gateway.files.aws import DynamoDBFileRecords

        return DynamoDBFileRecords(self.table)

    def file_blobs(self) -> S3Blobs:
        from responses_gateway.files.aws import S3Blobs

        return S3Blobs(self._files_bucket())

    def upload_records(self, clock: Callable[[], float]) -> DynamoDBUploadRecords:
        from responses_gateway.files.aws import DynamoDBUploadRecords

        return DynamoDBUploadRecords(self.table, clock=clock)

    @property
    def has_vector_stores(self) -> bool:
        return bool(self.settings.vector_bucket)

    def vector_engine(self) -> AWSVectorEngine:
        from responses_gateway.vectors.aws import AWSVectorEngine

        assert self.settings.vector_bucket
        return AWSVectorEngine(self.table, self.settings.vector_bucket)

    def blobs_beside_store(self) -> Blobs:
        """In memory: a DynamoDB item holds 400 KB, so config.py asks for an image bucket."""
        from responses_gateway.store.blobs import MemoryBlobs

        return MemoryBlobs()

    def connections(self, dynamodb: Any) -> Connections:
        from responses_gateway.store.connections import Connections

        return Connections(self.table, dynamodb)

    def container_records(self) -> DynamoDBContainerRecords:
        """In the table, one partition per tenant; rows expire with the table's TTL."""
        from responses_gateway.containers.aws import DynamoDBContainerRecords

        return DynamoDBContainerRecords(self.table,
                                        keep_seconds=self.settings.retention_days * 86400.0)

    def _files_bucket(self) -> str:
        if not self.settings.files_bucket:
            raise GatewayError(
                501, "File storage is not configured on this gateway (GATEWAY_FILES_BUCKET).",
                type="server_error", code="files_not_configured")
        return self.settings.files_bucket

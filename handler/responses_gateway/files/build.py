"""The file storage ``GATEWAY_STORE`` implies: ``sqlite:PATH`` keeps bytes in ``PATH.files/``
and records in PATH; ``dynamodb:TABLE`` keeps records in TABLE and bytes in
``GATEWAY_FILES_BUCKET``. Each engine is imported only when configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from responses_gateway.errors import GatewayError

if TYPE_CHECKING:
    from responses_gateway.files.service import Files
    from responses_gateway.files.store import UploadRecords
    from responses_gateway.files.uploads import Uploads
    from responses_gateway.settings import Settings


def build_files(settings: Settings) -> Files:
    from responses_gateway.files.service import FileLimits, Files

    limits = FileLimits(file_bytes=settings.max_file_bytes,
                        tenant_bytes=settings.max_tenant_file_bytes,
                        name_chars=settings.max_name_chars,
                        description_chars=settings.max_description_chars)
    kind, _, target = settings.store.partition(":")
    if kind == "sqlite":
        from responses_gateway.files.local import DiskBlobs, SQLiteFileRecords

        path = target or "gateway.db"
        return Files(SQLiteFileRecords(path), DiskBlobs(path + ".files"), limits)
    if not settings.files_bucket:
        raise GatewayError(
            501, "File storage is not configured on this gateway (GATEWAY_FILES_BUCKET).",
            type="server_error", code="files_not_configured")
    from responses_gateway.files.aws import DynamoDBFileRecords, S3Blobs

    return Files(DynamoDBFileRecords(target), S3Blobs(settings.files_bucket), limits)


def build_uploads(settings: Settings, files: Files) -> Uploads:
    """The Uploads API beside ``files``: its records in the same engine, parts as its blobs."""
    from responses_gateway.files.uploads import Uploads

    kind, _, target = settings.store.partition(":")
    if kind == "sqlite":
        from responses_gateway.files.local import SQLiteUploadRecords

        records: UploadRecords = SQLiteUploadRecords(target or "gateway.db")
    else:
        from responses_gateway.files.aws import DynamoDBUploadRecords

        records = DynamoDBUploadRecords(target, clock=files.clock)
    return Uploads(records, files.blobs, files, settings.max_upload_part_bytes)

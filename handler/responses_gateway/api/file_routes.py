"""The Files API (``/v1/files…``): multipart upload within ``GATEWAY_MAX_FILE_BYTES`` (counted
as the body streams in; Starlette spools the file to disk past 1 MiB and the blob store copies
it in chunks, so a large file is never in memory whole; content is streamed back), list
with ``purpose`` / ``order`` / ``after`` / ``limit``, retrieve, content, delete; and the
Uploads API (``/v1/uploads…``: create, parts, complete, cancel) for files sent in parts.
Every call is scoped to the caller's tenant; another tenant's id is a 404."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from responses_gateway.api.common import JSON, gateway_of, int_param, json_body, tenant_of
from responses_gateway.errors import invalid_request, missing_parameter, out_of_range

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from responses_gateway.files.models import FileRecord
    from responses_gateway.files.service import Files
    from responses_gateway.files.uploads import Uploads

MAX_LIST_LIMIT = 10_000  # OpenAI: 1 to 10,000, default 10,000
MULTIPART_OVERHEAD = 64 * 1024  # boundaries and the small fields beside the file
logger = logging.getLogger("responses_gateway.files")


def files_of(request: Request) -> Files:
    """The app's file storage, built from its settings on first use (a deployment that never
    serves files never imports the engines)."""
    return gateway_of(request).files


async def create_file(request: Request) -> Response:
    tenant = tenant_of(request)
    files = files_of(request)
    form = await _form(request, files.check_size)
    try:
        record = await _create_file(tenant, files, form)
    finally:
        await form.close()  # the spooled temporary file, whatever was wrong with the form
    return JSON(record.to_object())


async def _create_file(tenant: str, files: Files, form: FormData) -> FileRecord:
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise missing_parameter("file")
    purpose = form.get("purpose")
    if not isinstance(purpose, str) or not purpose:
        raise missing_parameter("purpose")
    from responses_gateway.files.models import UPLOAD_PURPOSES
    from responses_gateway.files.service import parse_expiry

    if purpose not in UPLOAD_PURPOSES:
        raise invalid_request(
            f"'{purpose}' is not one of {list(UPLOAD_PURPOSES)!r} - 'purpose'",
            param="purpose", code="invalid_value")
    anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
    expires = parse_expiry(anchor if isinstance(anchor, str) else None,
                           seconds if isinstance(seconds, str) else None, form=True)
    return await files.create_from(tenant, upload.filename or "upload", upload.file,
                                   _size(upload), purpose, expires)


def _size(upload: UploadFile) -> int:
    """The spooled file's length (Starlette counts what it wrote; seek as a fallback)."""
    if upload.size is not None:
        return upload.size
    upload.file.seek(0, 2)
    size = upload.file.tell()
    upload.file.seek(0)
    return size


async def _form(request: Request, check_size: Callable[[int], None]) -> FormData:
    from starlette.formparsers import MultiPartException, MultiPartParser

    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid_request(
            "Invalid Content-Type header (expected multipart/form-data).", code="invalid_type")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit():
        check_size(max(0, int(declared) - MULTIPART_OVERHEAD))

    async def bounded() -> AsyncIterator[bytes]:
        received = 0
        async for piece in request.stream():
            received += len(piece)
            check_size(max(0, received - MULTIPART_OVERHEAD))
            yield piece

    try:
        return await MultiPartParser(request.headers, bounded(), max_files=1,
                                     max_fields=16).parse()
    except MultiPartException as exc:
        raise invalid_request(f"Invalid multipart body: {exc.message}") from None


async def list_files(request: Request) -> Response:
    tenant = tenant_of(request)
    params = request.query_params
    limit = int_param(params.get("limit"), "limit", MAX_LIST_LIMIT)
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise out_of_range("limit", 1, MAX_LIST_LIMIT, limit)
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request(f"Invalid value: '{order}'. Supported values are: 'asc' and "
                              "'desc'.", param="order", code="invalid_value")
    records, more = await files_of(request).page(
        tenant, purpose=params.get("purpose") or None, order=order,
        after=params.get("after") or None, limit=limit)
    data = [r.to_object() for r in records]
    return JSON({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                 "last_id": data[-1]["id"] if data else None, "has_more": more})


async def retrieve_file(request: Request) -> Response:
    tenant = tenant_of(request)
    record = await files_of(request).get(request.path_params["file_id"], tenant)
    return JSON(record.to_object())


async def file_content(request: Request) -> Response:
    """The bytes streamed a chunk at a time (files/store.py CHUNK_BYTES), never whole."""
    tenant = tenant_of(request)
    record, chunks = await files_of(request).stream(request.path_params["file_id"], tenant)
    return StreamingResponse(chunks, media_type="application/octet-stream",
                             headers={"content-length": str(record.bytes)})


async def delete_file(request: Request) -> Response:
    tenant = tenant_of(request)
    file_id = request.path_params["file_id"]
    await files_of(request).delete(file_id, tenant)
    return JSON({"id": file_id, "object": "file", "deleted": True})


def uploads_of(request: Request) -> Uploads:
    return uploads_for(request.app)


def uploads_for(app: Starlette) -> Uploads:
    """The app's Uploads (the gateway's, built beside its Files: responses/gateway.py)."""
    uploads: Uploads = app.state.gateway.uploads
    return uploads


async def create_upload(request: Request) -> Response:
    tenant = tenant_of(request)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_type")
    uploads = uploads_of(request)
    return JSON((await uploads.create(tenant, body)).to_object(uploads.clock()))


async def add_upload_part(request: Request) -> Response:
    tenant = tenant_of(request)
    uploads = uploads_of(request)
    form = await _form(request, uploads.check_part_size)
    try:
        data = form.get("data")
        if not isinstance(data, UploadFile):
            raise missing_parameter("data")
        part = await uploads.add_part(tenant, request.path_params["upload_id"], data.file,
                                      _size(data))
    finally:
        await form.close()
    return JSON(part)


async def complete_upload(request: Request) -> Response:
    tenant = tenant_of(request)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_type")
    uploads = uploads_of(request)
    record, file = await uploads.complete(tenant, request.path_params["upload_id"], body)
    return JSON(record.to_object(uploads.clock(), file))


async def cancel_upload(request: Request) -> Response:
    tenant = tenant_of(request)
    uploads = uploads_of(request)
    record = await uploads.cancel(tenant, request.path_params["upload_id"])
    return JSON(record.to_object(uploads.clock()))


ROUTES: list[tuple[str, Any, str]] = [
    ("/v1/files", create_file, "POST"),
    ("/v1/files", list_files, "GET"),
    ("/v1/files/{file_id}", retrieve_file, "GET"),
    ("/v1/files/{file_id}", delete_file, "DELETE"),
    ("/v1/files/{file_id}/content", file_content, "GET"),
    ("/v1/uploads", create_upload, "POST"),
    ("/v1/uploads/{upload_id}/parts", add_upload_part, "POST"),
    ("/v1/uploads/{upload_id}/complete", complete_upload, "POST"),
    ("/v1/uploads/{upload_id}/cancel", cancel_upload, "POST"),
]

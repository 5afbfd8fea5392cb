"""The Containers API (``/v1/containers…``): containers (create, list, retrieve, delete) and
their files (upload as multipart ``file`` or JSON ``file_id``, list, retrieve, content,
delete). Thin: auth, the body checked with OpenAI's 400s, one call on
:class:`~responses_gateway.containers.service.Containers` (docs/containers.md). Every call is
scoped to the caller's tenant; another tenant's id is a 404."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from responses_gateway.api.common import JSON, gateway_of, json_body, page_params, tenant_of
from responses_gateway.containers.models import MEMORY_LIMITS
from responses_gateway.errors import (
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)

if TYPE_CHECKING:

    from responses_gateway.containers.service import Containers

logger = logging.getLogger("responses_gateway.containers")
_CREATE_FIELDS = ("name", "expires_after", "file_ids", "memory_limit", "network_policy",
                  "skills")


def containers_of(request: Request) -> Containers:
    """The gateway's containers (built on first use; a 501 without an engine)."""
    return gateway_of(request).containers


async def _object(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_type")
    return body


def _create_params(body: dict[str, Any]) -> dict[str, Any]:
    """The create body as :meth:`Containers.create`'s arguments, OpenAI's 400 for each
    mistake (the service checks the values' bounds)."""
    for key in body:
        if key not in _CREATE_FIELDS:
            raise invalid_request(f"Unknown parameter: '{key}'.", param=key,
                                  code="unknown_parameter")
    if "name" not in body:
        raise missing_parameter("name")
    name = body["name"]
    if not isinstance(name, str):
        raise invalid_type("name", "a string", name)
    params: dict[str, Any] = {"name": name}
    file_ids = body.get("file_ids")
    if file_ids is not None:
        if not isinstance(file_ids, list):
            raise invalid_type("file_ids", "an array", file_ids)
        for i, file_id in enumerate(file_ids):
            if not isinstance(file_id, str):
                raise invalid_type(f"file_ids[{i}]", "a string", file_id)
        params["file_ids"] = file_ids
    memory = body.get("memory_limit")
    if memory is not None:
        if memory not in MEMORY_LIMITS:  # "" too: never taken for the default
            raise invalid_choice("memory_limit", MEMORY_LIMITS, memory)
        params["memory_limit"] = memory
    expires = body.get("expires_after")
    if expires is not None:
        params["expires_minutes"] = _expires_minutes(expires)
    _check_network_policy(body.get("network_policy"))
    skills = body.get("skills")
    if skills is not None:
        if not isinstance(skills, list):
            raise invalid_type("skills", "an array", skills)
        if skills:
            raise invalid_request(
                "Skills are not supported by this gateway's containers: send no 'skills'.",
                param="skills", code="unsupported_value")
    return params


def _expires_minutes(expires: Any) -> int:
    if not isinstance(expires, dict):
        raise invalid_type("expires_after", "an object", expires)
    if "anchor" not in expires:
        raise missing_parameter("expires_after.anchor")
    if expires["anchor"] != "last_active_at":
        raise invalid_choice("expires_after.anchor", ("last_active_at",), expires["anchor"])
    if "minutes" not in expires:
        raise missing_parameter("expires_after.minutes")
    minutes = expires["minutes"]
    if not isinstance(minutes, int) or isinstance(minutes, bool):
        raise invalid_type("expires_after.minutes", "an integer", minutes)
    return minutes


def _check_network_policy(policy: Any) -> None:
    """``disabled`` is how every container here runs; an allowlist cannot be honoured."""
    if policy is None:
        return
    if not isinstance(policy, dict):
        raise invalid_type("network_policy", "an object", policy)
    if "type" not in policy:
        raise missing_parameter("network_policy.type")
    kind = policy["type"]
    if kind == "disabled":
        return
    if kind == "allowlist":
        raise invalid_request(
            "This gateway runs containers without network access: 'network_policy' of type "
            "'allowlist' is not supported (use 'disabled').",
            param="network_policy.type", code="unsupported_value")
    raise invalid_choice("network_policy.type", ("disabled", "allowlist"), kind)


def _list(data: list[dict[str, Any]], more: bool) -> JSON:
    return JSON({"object": "list", "data": data,
                 "first_id": data[0]["id"] if data else None,
                 "last_id": data[-1]["id"] if data else None, "has_more": more})


async def create_container(request: Request) -> Response:
    tenant = tenant_of(request)
    params = _create_params(await _object(request))
    record = await containers_of(request).create(tenant, **params)
    return JSON(record.to_api())


async def list_containers(request: Request) -> Response:
    tenant = tenant_of(request)
    limit, order = page_params(request.query_params)
    params = request.query_params
    records, more = await containers_of(request).page(
        tenant, name=params.get("name") or None, order=order, after=params.get("after") or None,
        limit=limit)
    return _list([r.to_api() for r in records], more)


async def retrieve_container(request: Request) -> Response:
    tenant = tenant_of(request)
    record = await containers_of(request).retrieve(tenant, request.path_params["container_id"])
    return JSON(record.to_api())


async def delete_container(request: Request) -> Response:
    tenant = tenant_of(request)
    container_id = request.path_params["container_id"]
    await containers_of(request).delete(tenant, container_id)
    return JSON({"id": container_id, "object": "container.deleted", "deleted": True})


async def create_file(request: Request) -> Response:
    """A multipart ``file`` upload (spooled by Starlette, bounded as it streams in), or a
    JSON body ``{"file_id": ...}`` copying one of the caller's Files."""
    tenant = tenant_of(request)
    containers = containers_of(request)
    container_id = request.path_params["container_id"]
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        from responses_gateway.api.file_routes import _form, _size

        form = await _form(request, containers.check_size)
        try:
            upload = form.get("file")
            file_id = form.get("file_id")
            if file_id not in (None, "") and isinstance(upload, UploadFile):
                raise invalid_request("Provide either 'file' or 'file_id', not both.",
                                      param="file_id", code="invalid_value")
            if isinstance(file_id, str) and file_id and not isinstance(upload, UploadFile):
                added = await containers.add_file(tenant, container_id, file_id=file_id)
                return JSON(added.to_api())
            if not isinstance(upload, UploadFile):
                raise missing_parameter("file")
            containers.check_size(_size(upload))
            data = await asyncio.to_thread(upload.file.read)
            from responses_gateway.containers.service import safe_filename

            added = await containers.add_file(
                tenant, container_id, path=safe_filename(upload.filename or "upload"),
                data=data)
        finally:
            await form.close()
        return JSON(added.to_api())
    body = await _object(request)
    for key in body:
        if key != "file_id":
            raise invalid_request(f"Unknown parameter: '{key}'.", param=key,
                                  code="unknown_parameter")
    file_id = body.get("file_id")
    if file_id is None:
        raise missing_parameter("file_id")
    if not isinstance(file_id, str):
        raise invalid_type("file_id", "a string", file_id)
    added = await containers.add_file(tenant, container_id, file_id=file_id)
    return JSON(added.to_api())


async def list_files(request: Request) -> Response:
    tenant = tenant_of(request)
    limit, order = page_params(request.query_params)
    files, more = await containers_of(request).page_files(
        tenant, request.path_params["container_id"], order=order,
        after=request.query_params.get("after") or None, limit=limit)
    return _list([f.to_api() for f in files], more)


async def retrieve_file(request: Request) -> Response:
    tenant = tenant_of(request)
    found = await containers_of(request).get_file(
        tenant, request.path_params["container_id"], request.path_params["file_id"])
    return JSON(found.to_api())


async def file_content(request: Request) -> Response:
    tenant = tenant_of(request)
    _found, chunks = await containers_of(request).file_content(
        tenant, request.path_params["container_id"], request.path_params["file_id"])
    # No content-length: the file is sent as it is now, and its record's size may be older
    # (the code may have written to it since).
    return StreamingResponse(chunks, media_type="application/octet-stream")


async def delete_file(request: Request) -> Response:
    tenant = tenant_of(request)
    file_id = request.path_params["file_id"]
    await containers_of(request).delete_file(tenant, request.path_params["container_id"],
                                             file_id)
    return JSON({"id": file_id, "object": "container.file.deleted", "deleted": True})


ROUTES: list[tuple[str, Any, str]] = [
    ("/v1/containers", create_container, "POST"),
    ("/v1/containers", list_containers, "GET"),
    ("/v1/containers/{container_id}", retrieve_container, "GET"),
    ("/v1/containers/{container_id}", delete_container, "DELETE"),
    ("/v1/containers/{container_id}/files", create_file, "POST"),
    ("/v1/containers/{container_id}/files", list_files, "GET"),
    ("/v1/containers/{container_id}/files/{file_id}", retrieve_file, "GET"),
    ("/v1/containers/{container_id}/files/{file_id}", delete_file, "DELETE"),
    ("/v1/containers/{container_id}/files/{file_id}/content", file_content, "GET"),
]

"""The Vector Stores API (``/v1/vector_stores…``): stores, their files, file batches, search.
Thin: auth, parse, one call on :class:`~responses_gateway.vectors.service.VectorStores`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway.api.common import JSON, gateway_of, json_body, page_params, tenant_of
from responses_gateway.errors import invalid_request

if TYPE_CHECKING:
    from responses_gateway.vectors.service import VectorStores

def vectors_of(request: Request) -> VectorStores:
    """The gateway's vector stores (built on first use), the ones file_search searches."""
    return gateway_of(request).vector_stores


async def _body(request: Request) -> dict[str, Any]:
    """The JSON object; its client strings within their bounds (vectors/objects.py)."""
    if request.headers.get("content-length") == "0":
        return {}
    body = await json_body(request)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_type")
    from responses_gateway.vectors.objects import check_strings

    check_strings(body, gateway_of(request).files.limits)
    return body


def _list(data: list[dict[str, Any]], more: bool) -> JSON:
    return JSON({"object": "list", "data": data,
                 "first_id": data[0]["id"] if data else None,
                 "last_id": data[-1]["id"] if data else None, "has_more": more})


def _ids(request: Request) -> tuple[str, str]:
    return tenant_of(request), request.path_params["vector_store_id"]


async def create_store(request: Request) -> Response:
    tenant = tenant_of(request)
    return JSON(await vectors_of(request).create(tenant, await _body(request)))


async def list_stores(request: Request) -> Response:
    tenant = tenant_of(request)
    limit, order = page_params(request.query_params)
    params = request.query_params
    data, more = await vectors_of(request).page(tenant, order, params.get("after"),
                                                params.get("before"), limit)
    return _list(data, more)


async def retrieve_store(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).get(tenant, store_id))


async def modify_store(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).modify(tenant, store_id, await _body(request)))


async def delete_store(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).delete(tenant, store_id))


async def create_file(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).add_file(tenant, store_id, await _body(request)))


async def _files_page(request: Request, batch_id: str | None) -> Response:
    tenant, store_id = _ids(request)
    limit, order = page_params(request.query_params)
    params = request.query_params
    data, more = await vectors_of(request).files_page(
        tenant, store_id, status=params.get("filter") or None, batch_id=batch_id, order=order,
        after=params.get("after"), before=params.get("before"), limit=limit)
    return _list(data, more)


async def list_files(request: Request) -> Response:
    return await _files_page(request, None)


async def retrieve_file(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).get_file(tenant, store_id,
                                                   request.path_params["file_id"]))


async def update_file(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).update_file(
        tenant, store_id, request.path_params["file_id"], await _body(request)))


async def delete_file(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).remove_file(tenant, store_id,
                                                      request.path_params["file_id"]))


async def file_content(request: Request) -> Response:
    tenant, store_id = _ids(request)
    texts = await vectors_of(request).file_content(tenant, store_id,
                                                   request.path_params["file_id"])
    return JSON({"object": "vector_store.file_content.page",
                 "data": [{"type": "text", "text": t} for t in texts],
                 "has_more": False, "next_page": None})


async def create_batch(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).create_batch(tenant, store_id, await _body(request)))


async def retrieve_batch(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).get_batch(tenant, store_id,
                                                    request.path_params["batch_id"]))


async def cancel_batch(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).cancel_batch(tenant, store_id,
                                                       request.path_params["batch_id"]))


async def list_batch_files(request: Request) -> Response:
    tenant, store_id = _ids(request)
    batch_id = request.path_params["batch_id"]
    await vectors_of(request).get_batch(tenant, store_id, batch_id)
    return await _files_page(request, batch_id)


async def search(request: Request) -> Response:
    tenant, store_id = _ids(request)
    return JSON(await vectors_of(request).search(tenant, store_id, await _body(request)))


_S = "/v1/vector_stores/{vector_store_id}"
ROUTES: list[tuple[str, Any, str]] = [
    ("/v1/vector_stores", create_store, "POST"),
    ("/v1/vector_stores", list_stores, "GET"),
    (_S, retrieve_store, "GET"),
    (_S, modify_store, "POST"),
    (_S, delete_store, "DELETE"),
    (_S + "/search", search, "POST"),
    (_S + "/files", create_file, "POST"),
    (_S + "/files", list_files, "GET"),
    (_S + "/files/{file_id}", retrieve_file, "GET"),
    (_S + "/files/{file_id}", update_file, "POST"),
    (_S + "/files/{file_id}", delete_file, "DELETE"),
    (_S + "/files/{file_id}/content", file_content, "GET"),
    (_S + "/file_batches", create_batch, "POST"),
    (_S + "/file_batches/{batch_id}", retrieve_batch, "GET"),
    (_S + "/file_batches/{batch_id}/cancel", cancel_batch, "POST"),
    (_S + "/file_batches/{batch_id}/files", list_batch_files, "GET"),
]

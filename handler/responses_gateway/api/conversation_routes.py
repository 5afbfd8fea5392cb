"""The Conversations API routes (``/v1/conversations…``), thin as the Responses routes are:
auth, parse, one store call, render the objects OpenAI returns."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway.api.common import (
    JSON,
    gateway_of,
    include_param,
    json_body,
    page_params,
    tenant_of,
)
from responses_gateway.errors import invalid_request, invalid_type, missing_parameter
from responses_gateway.responses import conversations
from responses_gateway.store.base import ConversationStore, StoredConversation
from responses_gateway.translate.request_names import MAX_ID_LENGTH


def _store(request: Request) -> ConversationStore:
    return conversations.store_of(gateway_of(request).store)


def _object_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid_request(
            "The request body must be a JSON object.", code="invalid_type"
        )
    return body


def _conversation_id(request: Request) -> str:
    """The path's id; one longer than any id can be (a store key) is simply not found."""
    conversation_id = request.path_params["conversation_id"]
    if len(conversation_id) > MAX_ID_LENGTH:
        raise conversations.not_found(conversation_id[:64] + "…")
    return conversation_id


def _item_id(item_id: str | None, param: str = "item_id") -> str | None:
    if item_id is not None and len(item_id) > MAX_ID_LENGTH:
        raise conversations.item_not_found(item_id[:64] + "…", param=param)
    return item_id


def _found(conversation: StoredConversation | None, conversation_id: str) -> StoredConversation:
    if conversation is None:
        raise conversations.not_found(conversation_id)
    return conversation


def _item_list(items: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }


async def create_conversation(request: Request) -> Response:
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    body = _object_body(await json_body(request)) if request.headers.get(
        "content-length", "1"
    ) != "0" else {}
    metadata = conversations.parse_metadata(body.get("metadata"))
    items = await gateway.resolve_references(await conversations.read_items(body.get("items")),
                                             tenant, "items")
    conversation = StoredConversation(
        id=conversations.new_id(), tenant=tenant, created_at=int(time.time()), metadata=metadata
    )
    await _store(request).create_conversation(conversation, items)
    return JSON(conversation.to_object())


async def retrieve_conversation(request: Request) -> Response:
    conversation_id = _conversation_id(request)
    found = await _store(request).get_conversation(conversation_id, tenant_of(request))
    return JSON(_found(found, conversation_id).to_object())


async def update_conversation(request: Request) -> Response:
    tenant = tenant_of(request)
    conversation_id = _conversation_id(request)
    body = _object_body(await json_body(request))
    if "metadata" not in body:
        raise missing_parameter("metadata")
    metadata = conversations.parse_metadata(body["metadata"])
    updated = await _store(request).update_conversation(conversation_id, tenant, metadata)
    return JSON(_found(updated, conversation_id).to_object())


async def delete_conversation(request: Request) -> Response:
    conversation_id = _conversation_id(request)
    if not await _store(request).delete_conversation(conversation_id, tenant_of(request)):
        raise conversations.not_found(conversation_id)
    return JSON({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_items(request: Request) -> Response:
    tenant = tenant_of(request)
    conversation_id = _conversation_id(request)
    params = request.query_params
    include = include_param(request.query_params)
    limit, order = page_params(params)
    after = _item_id(params.get("after") or None, "after")
    try:
        page = await _store(request).list_conversation_items(
            conversation_id, tenant, limit=limit, order=order, after=after
        )
    except KeyError:  # docs/store.md: an unknown cursor is the 404 of the item it names
        raise conversations.item_not_found(after or "", param="after") from None
    if page is None:
        raise conversations.not_found(conversation_id)
    items, has_more = page
    return JSON(_item_list([conversations.for_client(i, include) for i in items], has_more))


async def create_items(request: Request) -> Response:
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    conversation_id = _conversation_id(request)
    include = include_param(request.query_params)
    body = _object_body(await json_body(request))
    if "items" not in body:
        raise missing_parameter("items")
    if body["items"] is None:  # required here (a create's may be null)
        raise invalid_type("items", "an array of input items", None)
    items = await gateway.resolve_references(await conversations.read_items(body["items"]),
                                             tenant, "items")
    if await _store(request).append_conversation_items(conversation_id, tenant, items) is None:
        raise conversations.not_found(conversation_id)
    return JSON(_item_list([conversations.for_client(i, include) for i in items], False))


async def retrieve_item(request: Request) -> Response:
    conversation_id = _conversation_id(request)
    item_id = str(_item_id(request.path_params["item_id"]))
    include = include_param(request.query_params)
    found = await _store(request).get_conversation_item(
        conversation_id, tenant_of(request), item_id)
    if found is None:
        raise conversations.not_found(conversation_id)
    if found[1] is None:
        raise conversations.item_not_found(item_id)
    return JSON(conversations.for_client(found[1], include))


async def delete_item(request: Request) -> Response:
    conversation_id = _conversation_id(request)
    item_id = str(_item_id(request.path_params["item_id"]))
    found = await _store(request).delete_conversation_item(
        conversation_id, tenant_of(request), item_id
    )
    if found is None:
        raise conversations.not_found(conversation_id)
    if not found[1]:
        raise conversations.item_not_found(item_id)
    return JSON(found[0].to_object())  # OpenAI answers with the conversation


ROUTES: list[tuple[str, Any, str]] = [
    ("/v1/conversations", create_conversation, "POST"),
    ("/v1/conversations/{conversation_id}", retrieve_conversation, "GET"),
    ("/v1/conversations/{conversation_id}", update_conversation, "POST"),
    ("/v1/conversations/{conversation_id}", delete_conversation, "DELETE"),
    ("/v1/conversations/{conversation_id}/items", list_items, "GET"),
    ("/v1/conversations/{conversation_id}/items", create_items, "POST"),
    ("/v1/conversations/{conversation_id}/items/{item_id}", retrieve_item, "GET"),
    ("/v1/conversations/{conversation_id}/items/{item_id}", delete_item, "DELETE"),
]

"""The Responses API routes. Each handler is thin: auth, parse, hand to the runner, render."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from responses_gateway.api.json_body import decode_json
from responses_gateway.api.sse_response import EventStreamResponse
from responses_gateway.errors import GatewayError, invalid_request, not_found
from responses_gateway.ids import request_id_header
from responses_gateway.responses import background
from responses_gateway.responses.gateway import Gateway
from responses_gateway.store.base import StoredResponse
from responses_gateway.translate.request_models import MAX_ID_LENGTH


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)

    def init_headers(self, headers: Mapping[str, str] | None = None) -> None:
        super().init_headers(headers)
        self.raw_headers += request_id_header()


def error_response(error: GatewayError) -> Response:
    return JSON(error.body(), status_code=error.status, headers=error.headers or None)


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def _tenant(request: Request) -> str:
    return request.app.state.auth.tenant(request.headers.get("authorization"))


async def _json_body(request: Request) -> Any:
    limit = _gateway(request).settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and limit and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if limit and len(body) > limit:
            raise _too_large(limit)
    return decode_json(body)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"The request body is larger than this gateway accepts ({limit} bytes; "
        "GATEWAY_MAX_BODY_BYTES).",
        code="request_too_large",
    )


async def create_response(request: Request) -> Response:
    tenant = _tenant(request)
    gateway = _gateway(request)
    job = await gateway.prepare(await _json_body(request), tenant)
    if job.record.background:
        await background.start(gateway, job)
        if not job.backend_request.stream:
            return JSON(job.record.response)
        return EventStreamResponse(
            background.follow(gateway, job.record, -1),
            keepalive_seconds=gateway.settings.keepalive_seconds,
        )
    try:
        await job.prepare()
    except GatewayError:
        await job.close()
        raise
    first = job.open()
    if job.backend_request.stream:
        # response.created leaves before the upstream has answered, as OpenAI sends it before
        # its model has; an upstream refusal is then a response.failed. A grace period (off by
        # default) gives a fast refusal the chance to be a real HTTP error instead.
        grace = gateway.settings.stream_grace_seconds
        if grace > 0:
            await asyncio.wait({first}, timeout=grace)
            if first.done() and isinstance(first.exception(), GatewayError):
                await job.close()
                raise first.exception()  # type: ignore[misc]
        return EventStreamResponse(
            job.batches(), keepalive_seconds=gateway.settings.keepalive_seconds
        )
    # An upstream refusal before any output is an HTTP error; a wait past the response's
    # deadline is a failed response (run_to_end ends it so, and stores it).
    await asyncio.wait({first}, timeout=job.seconds_left())
    if first.done() and isinstance(first.exception(), GatewayError):
        await job.close()
        raise first.exception()  # type: ignore[misc]
    return JSON(await job.run_to_end())


def _response_id(request: Request) -> str:
    """The path's response id; one longer than any id can be (a store key) is not found."""
    response_id = request.path_params["response_id"]
    if len(response_id) > MAX_ID_LENGTH:
        raise _response_not_found(response_id)
    return response_id


def _response_not_found(response_id: str) -> GatewayError:
    shown = response_id if len(response_id) <= MAX_ID_LENGTH else response_id[:64] + "…"
    return not_found(f"Response with id '{shown}' not found.", param="response_id")


async def _record(request: Request) -> StoredResponse:
    tenant = _tenant(request)
    response_id = _response_id(request)
    record = await background.load(_gateway(request), response_id, tenant)
    if record is None:
        raise _response_not_found(response_id)
    return record


async def retrieve_response(request: Request) -> Response:
    record = await _record(request)
    params = request.query_params
    if params.get("stream", "").lower() == "true":
        if not record.background:
            raise invalid_request(
                "Streaming a stored response is only supported for responses created with "
                "background=true.",
                param="stream",
            )
        starting_after = _int_param(params.get("starting_after"), "starting_after", -1)
        gateway = _gateway(request)
        return EventStreamResponse(
            background.follow(gateway, record, starting_after),
            keepalive_seconds=gateway.settings.keepalive_seconds,
        )
    return JSON(record.response)


async def delete_response(request: Request) -> Response:
    tenant = _tenant(request)
    response_id = _response_id(request)
    if not await _gateway(request).store.delete(response_id, tenant):
        raise _response_not_found(response_id)
    return JSON({"id": response_id, "object": "response", "deleted": True})


async def cancel_response(request: Request) -> Response:
    record = await _record(request)
    return JSON(await background.cancel(_gateway(request), record))


async def list_input_items(request: Request) -> Response:
    record = await _record(request)
    params = request.query_params
    limit, order = page_params(params)
    items = list(record.input_items)
    if order == "desc":
        items.reverse()
    for cursor, param in ((params.get("after"), "after"), (params.get("before"), "before")):
        if cursor is None:
            continue
        position = next((i for i, item in enumerate(items) if item.get("id") == cursor), None)
        if position is None:
            raise invalid_request(f"No input item found with id '{cursor}'.", param=param)
        items = items[position + 1 :] if param == "after" else items[:position]
    page = items[:limit]
    return JSON(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


async def list_models(request: Request) -> Response:
    _tenant(request)
    settings = _gateway(request).settings
    names = list(dict.fromkeys([*settings.models, *settings.model_map]))
    created = int(time.time())
    return JSON(
        {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": created, "owned_by": "responses-gateway"}
                for name in names
            ],
        }
    )


async def health(request: Request) -> Response:
    return JSON({"status": "ok"})


def page_params(params: Mapping[str, str]) -> tuple[int, str]:
    """``limit`` (1-100, default 20) and ``order`` (default ``desc``) of a list route."""
    limit = _int_param(params.get("limit"), "limit", 20)
    if not 1 <= limit <= 100:
        raise invalid_request(
            f"Invalid 'limit': integer below minimum value or above maximum value. Expected a "
            f"value between 1 and 100, but got {limit} instead.",
            param="limit",
            code="integer_out_of_range",
        )
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request(
            f"Invalid value: '{order}'. Supported values are: 'asc' and 'desc'.",
            param="order",
            code="invalid_value",
        )
    return limit, order


def _int_param(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise invalid_request(
            f"Invalid '{name}': expected an integer, but got {value!r} instead.", param=name
        ) from None
    if not -(2**62) < number < 2**62:  # stores index sequence numbers as 64-bit integers
        raise invalid_request(f"Invalid '{name}': {value} is out of range.", param=name)
    return number

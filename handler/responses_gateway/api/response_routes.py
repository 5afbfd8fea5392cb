"""The Responses API routes. Each handler is thin: auth, parse, hand to the runner, render."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway import ids
from responses_gateway import limiter as limits
from responses_gateway.api.client_watch import ClientWatch
from responses_gateway.api.common import (
    JSON,
    gateway_of,
    include_param,
    int_param,
    json_body,
    page_params,
    tenant_of,
)
from responses_gateway.api.sse_response import EventStreamResponse
from responses_gateway.backends.base import DEPLOYMENT
from responses_gateway.errors import GatewayError, invalid_request, not_found
from responses_gateway.responses import background
from responses_gateway.responses.job import Job
from responses_gateway.store.base import StoredResponse
from responses_gateway.translate.request_names import MAX_ID_LENGTH

if TYPE_CHECKING:
    from responses_gateway.responses.gateway import Gateway


async def create_response(request: Request) -> Response:
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    body = await json_body(request)
    # The key's limits before anything else runs (limiter.py): a 429 past one.
    rate = await limits.admit(gateway.store, gateway.settings.limits, tenant,
                             gateway.settings)
    return limits.with_headers(await _create(request, gateway, tenant, body, rate), rate)


async def _create(request: Request, gateway: Gateway, tenant: str, body: Any,
                  rate: dict[str, str]) -> Response:
    # Its tokens are reserved once it is rendered, before the upstream sees it (a 429 here).
    reserve = limits.reserver(gateway.store, gateway.settings.limits, tenant, rate)
    async with ClientWatch(request) as left:  # a client that leaves stops a compaction
        job = await gateway.new_job(body, tenant, client_left=left, reserve=reserve)
    if job.record.background:
        await background.start(gateway, job)
        if not job.backend_request.stream:
            return JSON(job.record.response)
        return EventStreamResponse(
            background.follow(gateway, job.record, -1),
            keepalive_seconds=gateway.settings.keepalive_seconds,
            send_timeout=gateway.settings.send_timeout_seconds,
        )
    try:
        await job.ready()
    except GatewayError:
        await job.close()
        raise
    if job.backend_request.stream:
        # response.created leaves before the upstream has answered, as OpenAI sends it before
        # its model has; an upstream refusal is then a response.failed. A grace period (off by
        # default) gives a fast refusal the chance to be a real HTTP error instead. A
        # compaction still to run goes first (the job opens the model's turn after it).
        grace = gateway.settings.stream_grace_seconds
        first = job.open() if job.compaction is None else None
        if grace > 0 and first is not None:
            await asyncio.wait({first}, timeout=grace)
            if first.done() and isinstance(first.exception(), GatewayError):
                await job.close()
                raise first.exception()  # type: ignore[misc]
        # Known only if the upstream answered within the grace period (docs/routing.md).
        return EventStreamResponse(
            job.batches(), keepalive_seconds=gateway.settings.keepalive_seconds,
            send_timeout=gateway.settings.send_timeout_seconds,
            headers=[(k.encode(), v.encode()) for k, v in _deployment(job).items()],
        )
    # An upstream refusal before any output is an HTTP error; a wait past the response's
    # deadline is a failed response (run_to_end ends it so, and stores it).
    first = job.open()
    await asyncio.wait({first}, timeout=job.seconds_left())
    if first.done() and isinstance(first.exception(), GatewayError):
        await job.close()
        raise first.exception()  # type: ignore[misc]
    response = await job.run_to_end()
    return JSON(response, headers=_deployment(job))


def _deployment(job: Job) -> dict[str, str]:
    """``x-gateway-deployment``: the deployment of a routed model that served the (last)
    model turn (backends/router.py), once it is known."""
    name = job.backend_request.extra.get(DEPLOYMENT)
    return {"x-gateway-deployment": name} if isinstance(name, str) else {}


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
    tenant = tenant_of(request)
    response_id = _response_id(request)
    record = await background.load(gateway_of(request), response_id, tenant)
    if record is None:
        raise _response_not_found(response_id)
    return record


async def retrieve_response(request: Request) -> Response:
    record = await _record(request)
    params = request.query_params
    include_param(params)  # checked as OpenAI checks it; what a stored response holds is sent
    if params.get("stream", "").lower() == "true":
        if not record.background:
            raise invalid_request(
                "Streaming a stored response is only supported for responses created with "
                "background=true.",
                param="stream",
            )
        starting_after = int_param(params.get("starting_after"), "starting_after", -1)
        gateway = gateway_of(request)
        return EventStreamResponse(
            background.follow(gateway, record, starting_after),
            keepalive_seconds=gateway.settings.keepalive_seconds,
            send_timeout=gateway.settings.send_timeout_seconds,
        )
    return JSON(record.response)


async def delete_response(request: Request) -> Response:
    tenant = tenant_of(request)
    response_id = _response_id(request)
    if not await gateway_of(request).store.delete(response_id, tenant):
        raise _response_not_found(response_id)
    return JSON({"id": response_id, "object": "response", "deleted": True})


async def cancel_response(request: Request) -> Response:
    record = await _record(request)
    return JSON(await background.cancel(gateway_of(request), record))


async def list_input_items(request: Request) -> Response:
    record = await _record(request)
    params = request.query_params
    include_param(params)
    limit, order = page_params(params)
    items = list(record.input_items)
    if order == "desc":
        items.reverse()
    for cursor, param in ((params.get("after"), "after"), (params.get("before"), "before")):
        if not cursor:  # absent or empty, as the conversation items' cursor
            continue
        position = next((i for i, item in enumerate(items) if item.get("id") == cursor), None)
        if position is None:
            raise invalid_request(f"No input item found with id '{ids.clipped(cursor)}'.",
                                  param=param)
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


async def health(request: Request) -> Response:
    return JSON({"status": "ok"})

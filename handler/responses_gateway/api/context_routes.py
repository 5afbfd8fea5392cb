"""``POST /v1/responses/compact`` and ``POST /v1/responses/input_tokens``.

Both take a subset of the create body and check it exactly as a create does (the same
parser, so the same 400s); the work is in responses/fitting/ (``gateway.fitting``), a compaction
bounded there and stopped when its client leaves (api/client_watch.py). Their paths come
before ``/v1/responses/{response_id}`` in the router and answer every method, so neither
``compact`` nor ``input_tokens`` is ever taken for a response id (a GET is a 405).

Both call the upstream (summarising turns; a backend's token count), so both pass the key's
limits at the door and are counted in the usage ledger like a response (limiter.py): a
compaction's estimated tokens are reserved before its first summarising call and settled to
what the calls spent, whatever its outcome; a token count is a request that spends no tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway import ids
from responses_gateway import limiter as limits
from responses_gateway.api.client_watch import ClientWatch
from responses_gateway.api.common import JSON, gateway_of, json_body, tenant_of
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.heavy import heavy_items
from responses_gateway.responses import conversations, history
from responses_gateway.responses.fitting import compaction
from responses_gateway.responses.gateway import Gateway
from responses_gateway.tools import reads as tool_reads
from responses_gateway.translate.request import parse_create_request, read_create

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest

#: Every method reaches these routes (only POST is allowed; the rest are 405s, not ids).
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: What ``POST /v1/responses/compact`` reads of its body (OpenAI's ResponseCompactParams).
COMPACT_FIELDS = ("model", "input", "instructions", "previous_response_id", "prompt_cache_key",
                  "prompt_cache_retention", "service_tier")
#: What ``POST /v1/responses/input_tokens`` reads (OpenAI's InputTokenCountParams).
COUNT_FIELDS = ("model", "input", "instructions", "previous_response_id", "conversation",
                "tools", "tool_choice", "parallel_tool_calls", "reasoning", "text", "truncation")


def _subset(body: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        parse_create_request(body)  # the create's own 400 for a body that is not an object
    return {k: body[k] for k in fields if k in body}


async def _parsed(gateway: Gateway, body: dict[str, Any],
                  ) -> tuple[CreateResponseRequest, list[dict[str, Any]]]:
    """The body read as a create reads it (a heavy one in a worker thread), and its input
    items: hosted tools the gateway runs are accepted."""
    req, items, _ = await read_create(body, hosted_tools=gateway.settings.hosted_tools,
                                      served=gateway.served_tools)
    return req, items


def _only_post(request: Request) -> None:
    if request.method != "POST":
        raise GatewayError(
            405, f"Method {request.method} is not allowed for {request.url.path}.")


async def _conversation_items(
    gateway: Gateway, req: CreateResponseRequest, tenant: str
) -> list[dict[str, Any]]:
    """Earlier items: a ``previous_response_id`` chain or a ``conversation``'s items."""
    if req.conversation is not None:
        found = await conversations.store_of(gateway.store).conversation_items(
            req.conversation, tenant)
        if found is None:
            raise conversations.not_found(req.conversation)
        return list(found[1])
    return await history.chain(gateway.store, req.previous_response_id, tenant)


async def compact_response(request: Request) -> Response:
    _only_post(request)
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    body = _subset(await json_body(request), COMPACT_FIELDS)
    rate = await limits.admit(gateway.store, gateway.settings.limits, tenant,
                             gateway.settings)
    return limits.with_headers(await _compact(request, gateway, tenant, body, rate), rate)


async def _compact(request: Request, gateway: Gateway, tenant: str, body: dict[str, Any],
                   rate: dict[str, str]) -> Response:
    if body.get("model") is None:
        raise missing_parameter("model")
    req, given = await _parsed(gateway, body)
    items = await gateway.resolve_references(given, tenant)
    items = await _conversation_items(gateway, req, tenant) + items
    heavy = heavy_items(items)  # its weight, once (heavy.py)
    reads = await _reads(gateway, tenant, items, heavy)
    if not items:
        raise invalid_request(
            "Nothing to compact: give 'input' or a 'previous_response_id' with items.",
            param="input")
    route = gateway.settings.route(req.model)
    reserved = None
    if limits.counts_tokens(gateway.settings.limits, tenant):  # what its calls will read
        chat = (await gateway.fitting.render(req, route, items, tenant, reads,
                                             heavy=heavy)).chat
        reserved, headers = await limits.reserve(
            gateway.store, gateway.settings.limits, tenant, await limits.estimate_of(chat),
            req.model)
        rate.update(headers)
    answer: dict[str, Any] = {"id": ids.new_id(ids.RESPONSE), "usage": {}}
    status = "failed"
    try:
        async with ClientWatch(request) as left:  # a client that leaves stops the summarising
            result = await gateway.fitting.compact(req, route, items, tenant, left=left,
                                                   reads=reads, heavy=heavy)
        answer = compaction.response_of(result)
        status = "completed"
    finally:  # counted whatever the outcome; the reservation is settled
        await _count(gateway, tenant, req.model, answer, status, "responses/compact", reserved)
    return JSON(answer)


async def _count(gateway: Gateway, tenant: str, model: str, answer: dict[str, Any],
                 status: str, endpoint: str, reserved: dict[str, Any] | None) -> None:
    from responses_gateway.store.usage import UsageEntry

    entry = UsageEntry.of(answer, tenant=tenant, model=model, status=status, endpoint=endpoint)
    await limits.count(gateway.store, gateway.settings.limits, entry, reserved)


async def _reads(gateway: Gateway, tenant: str, items: list[dict[str, Any]], heavy: bool,
                 ) -> dict[str, str]:
    """What server tools' calls among ``items`` gave the model, as a create reads it."""
    return await tool_reads.gather(gateway.store, tenant, items,
                                   gateway.settings.max_tool_output_bytes, heavy=heavy)


async def count_input_tokens(request: Request) -> Response:
    _only_post(request)
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    body = _subset(await json_body(request), COUNT_FIELDS)
    rate = await limits.admit(gateway.store, gateway.settings.limits, tenant,
                             gateway.settings)
    return limits.with_headers(await _count_tokens(gateway, tenant, body), rate)


async def _count_tokens(gateway: Gateway, tenant: str, body: dict[str, Any]) -> Response:
    body.setdefault("model", "")  # optional here: then the default backend's estimate
    req, given = await _parsed(gateway, body)
    items = await gateway.resolve_references(given, tenant)
    items = await _conversation_items(gateway, req, tenant) + items
    route = gateway.settings.route(req.model)
    heavy = heavy_items(items)  # its weight, once (heavy.py)
    reads = await _reads(gateway, tenant, items, heavy)
    if req.truncation == "auto":  # what the model would read after truncation
        fitted = await gateway.fitting.fit(req, route, items, tenant, reads=reads, heavy=heavy)
    else:
        fitted = await gateway.fitting.render(req, route, items, tenant, reads, heavy=heavy)
    counted = await gateway.fitting.count(route, fitted.chat)
    # A request to the key's usage; counting spends no tokens (OpenAI does not bill it).
    await _count(gateway, tenant, req.model, {"id": ids.new_id(ids.RESPONSE)}, "completed",
                 "responses/input_tokens", None)
    return JSON({"object": "response.input_tokens", "input_tokens": counted.tokens})

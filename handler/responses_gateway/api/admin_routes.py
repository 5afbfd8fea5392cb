"""Admin routes: usage shaped like OpenAI's usage API, stored responses and conversations of
every tenant, the limits in force. Only an admin key (GATEWAY_ADMIN_KEYS) opens them; a tenant
key gets a 403 (api/auth.py).

What they answer never holds a key: tenants appear as their ids (``t_…``, a digest label) and,
when ``GATEWAY_API_KEYS`` names the key, its name (``api_key_name``, read from the settings
as answered, so a renamed key shows its new name); the tools of a Response lose any
``headers`` or ``authorization`` (an MCP server's key).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway import ids
from responses_gateway.api.common import JSON, gateway_of, int_param
from responses_gateway.errors import GatewayError, invalid_request, not_found, out_of_range
from responses_gateway.key_limits import NO_LIMITS
from responses_gateway.responses.conversations import store_of
from responses_gateway.store.usage import COUNTERS, DAY, HOUR, UsageRow, UsageStore

if TYPE_CHECKING:
    from responses_gateway.prices import Pricing

#: bucket widths: seconds, default and maximum bucket count (OpenAI's for 1h and 1d)
WIDTHS = {"1h": (HOUR, 24, 168), "1d": (DAY, 7, 31)}
#: OpenAI's group_by values; the gateway has no projects, users, batches or tiers: those are
#: accepted and answered null
GROUPS = ("project_id", "user_id", "api_key_id", "model", "batch", "service_tier")
#: the latest time a usage read may name (2286-11-20 UTC): the ledger's keys write a time as
#: 10 digits (store/dynamodb/usage.py), which an 11-digit time would sort before
MAX_TIME = 9_999_999_999
_SECRET_FIELDS = frozenset({"headers", "authorization"})

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def names(request: Request) -> dict[str, str]:
    """The keys' names by tenant id (api/auth.py, from GATEWAY_API_KEYS' JSON form)."""
    names: dict[str, str] = request.app.state.auth.names
    return names


def named(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """``row`` with the name of its ``api_key_id`` beside it (None: the key has none)."""
    return {**row, "api_key_name": names.get(row.get("api_key_id") or "")}


def admin(request: Request) -> UsageStore:
    """Pass an admin key (else the 401/403); the store's usage ledger."""
    request.app.state.auth.admin(request.headers.get("authorization"))
    ledger = gateway_of(request).store.usage_store()
    if ledger is None:
        raise not_found("This gateway's store keeps no usage.")
    return ledger


def _pricing(request: Request) -> Pricing:
    """The gateway's prices (prices.py, loaded with the first usage or costs read), with the
    server tools' priced items."""
    from responses_gateway.priced_items import PRICED_ITEMS
    from responses_gateway.prices import pricing

    return pricing(gateway_of(request).settings, PRICED_ITEMS)


# -- usage ----------------------------------------------------------------------------------


async def usage_completions(request: Request) -> Response:
    """``GET /v1/organization/usage/completions``: buckets of ``bucket_width`` from
    ``start_time``, grouped by ``group_by`` (model, api_key_id), filtered by ``models`` and
    ``api_key_ids``, ``limit`` buckets a page, ``page`` the cursor."""
    ledger = admin(request)
    params = request.query_params
    if "start_time" not in params:
        raise invalid_request("Missing required parameter: 'start_time'.", param="start_time",
                              code="missing_required_parameter")
    start = time_param(params, "start_time", 0)
    width_name = params.get("bucket_width", "1d")
    if width_name not in WIDTHS:
        raise invalid_request(
            f"Invalid value: '{width_name}'. Supported values are: '1h' and '1d' (this gateway "
            "counts usage by the hour).", param="bucket_width", code="invalid_value")
    width, default_limit, max_limit = WIDTHS[width_name]
    limit = int_param(params.get("limit"), "limit", default_limit)
    if not 1 <= limit <= max_limit:
        raise invalid_request(
            f"Invalid 'limit': expected a value between 1 and {max_limit} for bucket_width "
            f"'{width_name}', but got {limit} instead.", param="limit",
            code="integer_out_of_range")
    groups = _listed(params, "group_by")
    for group in groups:
        if group not in GROUPS:
            raise invalid_request(
                f"Invalid value: '{group}'. Supported values are: "
                + ", ".join(f"'{g}'" for g in GROUPS) + ".",
                param="group_by", code="invalid_value")
    models, keys = set(_listed(params, "models")), set(_listed(params, "api_key_ids"))
    first = start - start % width
    page = params.get("page")
    if page:
        first = _page_start(page)
    end = time_param(params, "end_time", int(time.time()) + 1)
    stop = min(end, first + limit * width)
    rows = [r for r in await ledger.buckets(first - first % HOUR, stop)
            if (not models or r.model in models) and (not keys or r.tenant in keys)]
    prices = _pricing(request)
    buckets = []
    key_names = names(request)
    for bucket_start in range(first, stop, width):
        inside = [r for r in rows if bucket_start <= r.hour < bucket_start + width]
        buckets.append({
            "object": "bucket", "start_time": bucket_start,
            "end_time": bucket_start + width,
            "results": _results(inside, groups, prices, key_names),
        })
    more = stop < end
    return JSON({
        "object": "page", "data": buckets, "has_more": more,
        "next_page": _page_token(stop) if more else None,
    })


def time_param(params: Any, name: str, default: int) -> int:
    """A time in Unix seconds (``start_time``, ``end_time``; a page token's or cursor's):
    from the epoch to :data:`MAX_TIME`, else OpenAI's 400. The ledger keys rows by their UTC
    day and their time in 10 digits, which no earlier or later time has (DynamoDB's read
    failed on one: a 500)."""
    value = int_param(params.get(name), name, default)
    if not 0 <= value <= MAX_TIME:
        raise out_of_range(name, 0, MAX_TIME, value)
    return value


def _listed(params: Any, name: str, *, commas: bool = True) -> list[str]:
    """A list parameter: ``name=a&name=b``, ``name[]=a`` or (``commas``) ``name=a,b``."""
    values = params.getlist(name) + params.getlist(name + "[]")
    if not commas:  # a line item holds a comma ("model, input")
        return [v for v in values if v]
    return [v for value in values for v in value.split(",") if v]


def _page_token(start: int) -> str:
    return "page_" + base64.urlsafe_b64encode(str(start).encode()).decode()


def _page_start(token: str) -> int:
    """A ``next_page`` token's start time; a 400 for any other text, among them a number no
    store can hold (a 64-bit integer column: the ledger's read would fail on it)."""
    try:
        text = base64.urlsafe_b64decode(token.removeprefix("page_").encode()).decode()
        if text:
            return time_param({"page": text}, "page", 0)
    except (ValueError, GatewayError):
        pass
    raise invalid_request(f"Invalid 'page': '{token[:64]}'.", param="page")


def _results(rows: list[UsageRow], groups: list[str], prices: Any,
             key_names: dict[str, str]) -> list[dict[str, Any]]:
    totals: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for row in rows:
        key = (row.model if "model" in groups else None,
               row.tenant if "api_key_id" in groups else None)
        total = totals.setdefault(key, {c: 0 for c in COUNTERS}
                                  | {"tool_calls": {}, "cost": 0.0})
        total["cost"] += prices.cost(row.model, row.counts, row.tool_calls).total
        for name in COUNTERS:
            total[name] += row.counts.get(name, 0)
        for kind, n in row.tool_calls.items():
            total["tool_calls"][kind] = total["tool_calls"].get(kind, 0) + n
    return [
        {
            "object": "organization.usage.completions.result",
            "input_tokens": t["input_tokens"],
            "output_tokens": t["output_tokens"],
            "input_cached_tokens": t["cached_tokens"],
            "input_audio_tokens": 0,
            "output_audio_tokens": 0,
            "num_model_requests": t["requests"],
            "project_id": None,
            "user_id": None,
            "api_key_id": key,
            "model": model,
            "batch": None,
            # The gateway's own figures, beside OpenAI's (whose result has no key name; its
            # API key objects do, as ``name``):
            "api_key_name": key_names.get(key) if key is not None else None,
            "output_reasoning_tokens": t["reasoning_tokens"],
            "image_generations": t["image_generations"],
            "tool_calls": t["tool_calls"],
            "cost": {"value": t["cost"], "currency": "usd"},  # GATEWAY_PRICES (prices.py)
        }
        for (model, key), t in totals.items()
    ]


# -- costs ----------------------------------------------------------------------------------

#: OpenAI's Costs API: daily buckets only, 1-180 a page (7 by default)
COST_LIMIT = (7, 180)
COST_GROUPS = ("project_id", "user_id", "line_item", "api_key_id", "api_source")
_QUANTITY_UNITS = {"input": "tokens", "cached input": "tokens", "output": "tokens",
                   "image generation": "images", "web search": None}


async def costs(request: Request) -> Response:
    """``GET /v1/organization/costs``: what the usage ledger's counters cost under the
    configured prices (prices.py), in daily buckets from ``start_time``, grouped by
    ``group_by`` (``line_item``, ``api_key_id``; the gateway has no projects, users or API
    sources: those group to null), filtered by ``api_key_ids``, ``line_items`` and
    ``project_ids``; ``limit`` buckets a page, ``page`` the cursor."""
    ledger = admin(request)
    params = request.query_params
    if "start_time" not in params:
        raise invalid_request("Missing required parameter: 'start_time'.", param="start_time",
                              code="missing_required_parameter")
    start = time_param(params, "start_time", 0)
    width_name = params.get("bucket_width", "1d")
    if width_name != "1d":
        raise invalid_request(f"Invalid value: '{width_name}'. Supported values are: '1d'.",
                              param="bucket_width", code="invalid_value")
    default_limit, max_limit = COST_LIMIT
    limit = int_param(params.get("limit"), "limit", default_limit)
    if not 1 <= limit <= max_limit:
        raise invalid_request(
            f"Invalid 'limit': expected a value between 1 and {max_limit}, but got {limit} "
            "instead.", param="limit", code="integer_out_of_range")
    groups = _listed(params, "group_by")
    for group in groups:
        if group not in COST_GROUPS:
            raise invalid_request(
                f"Invalid value: '{group}'. Supported values are: "
                + ", ".join(f"'{g}'" for g in COST_GROUPS) + ".",
                param="group_by", code="invalid_value")
    keys = set(_listed(params, "api_key_ids"))
    items = set(_listed(params, "line_items", commas=False))
    if _listed(params, "project_ids"):
        keys = {""}  # the gateway has no projects: no cost belongs to one
    first = start - start % DAY
    page = params.get("page")
    if page:
        first = _page_start(page)
    end = time_param(params, "end_time", int(time.time()) + 1)
    stop = min(end, first + limit * DAY)
    rows = [r for r in await ledger.buckets(first, stop) if not keys or r.tenant in keys]
    prices = _pricing(request)
    buckets = []
    for bucket_start in range(first, stop, DAY):
        inside = [r for r in rows if bucket_start <= r.hour < bucket_start + DAY]
        buckets.append({
            "object": "bucket", "start_time": bucket_start, "end_time": bucket_start + DAY,
            "results": _cost_results(inside, groups, items, prices),
        })
    more = stop < end
    return JSON({
        "object": "page", "data": buckets, "has_more": more,
        "next_page": _page_token(stop) if more else None,
    })


def _cost_results(rows: list[UsageRow], groups: list[str], items: set[str],
                  prices: Any) -> list[dict[str, Any]]:
    """One result per group: its amount in USD; with ``line_item``, the quantity and unit."""
    totals: dict[tuple[str | None, str | None], list[float]] = {}
    for row in rows:
        cost = prices.cost(row.model, row.counts, row.tool_calls)
        for line, amount in cost.amounts.items():
            line_item = f"{row.model}, {line}"
            if items and line_item not in items:
                continue
            quantity = cost.quantities[line]
            if not quantity:
                continue
            key = (line_item if "line_item" in groups else None,
                   row.tenant if "api_key_id" in groups else None)
            total = totals.setdefault(key, [0.0, 0])
            total[0] += amount
            total[1] += quantity
    results = []
    for (line_item, key), (amount, quantity) in totals.items():
        result: dict[str, Any] = {
            "object": "organization.costs.result",
            "amount": {"value": amount, "currency": "usd"},
            "line_item": line_item, "project_id": None, "api_key_id": key,
        }
        if line_item is not None:
            result["quantity"] = quantity
            result["quantity_unit"] = _QUANTITY_UNITS.get(line_item.rpartition(", ")[2])
        results.append(result)
    return results


# -- responses ------------------------------------------------------------------------------


async def list_responses(request: Request) -> Response:
    """Responses of every tenant, newest first: ``model``, ``status``, ``api_key_id``,
    ``start_time``/``end_time`` filter; ``limit`` (1-100, 20) a page, ``after`` the cursor."""
    ledger = admin(request)
    params = request.query_params
    limit = int_param(params.get("limit"), "limit", 20)
    if not 1 <= limit <= 100:
        raise invalid_request("Invalid 'limit': expected a value between 1 and 100.",
                              param="limit", code="integer_out_of_range")
    now = int(time.time())
    end = time_param(params, "end_time", now + 1)
    start = time_param(params, "start_time", max(0, end - 30 * DAY))
    key_names = names(request)
    wanted = {name: params.get(name) for name in ("model", "status", "api_key_id")}
    if wanted["api_key_id"] and not wanted["api_key_id"].startswith("t_"):
        # a key's name (the dashboard's filter takes either): its tenant id
        by_name = {name: tenant for tenant, name in key_names.items()}
        wanted["api_key_id"] = by_name.get(wanted["api_key_id"], wanted["api_key_id"])
    before = _cursor(params.get("after"))
    found: list[dict[str, Any]] = []
    while len(found) <= limit:
        rows = await ledger.log(start, end, 200, before)
        found += [r for r in rows if all(not v or r.get(k) == v for k, v in wanted.items())]
        if len(rows) < 200:
            break
        before = (rows[-1]["created_at"], rows[-1]["id"])
    page = [_listed_row(row, key_names) for row in found[:limit]]
    return JSON({
        "object": "list", "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(found) > limit,
        "after": _cursor_of(page[-1]) if page and len(found) > limit else None,
    })


def _listed_row(row: dict[str, Any], key_names: dict[str, str]) -> dict[str, Any]:
    """A list's row: named, its timing without the steps (the detail has them)."""
    row = named(row, key_names)
    timing = row.get("timing")
    if timing is not None:
        row["timing"] = {k: v for k, v in timing.items() if k != "steps"}
    return row


def _cursor_of(row: dict[str, Any]) -> str:
    return f"{row['created_at']}:{row['id']}"


def _cursor(text: str | None) -> tuple[int, str] | None:
    """``after`` as (created_at, response_id); a 400 for any other text, among them a time
    no store can hold (as :func:`_page_start`)."""
    if not text:
        return None
    when, _, response_id = text.partition(":")
    try:
        if when and response_id:
            return time_param({"after": when}, "after", 0), response_id
    except GatewayError:
        pass
    raise invalid_request(f"Invalid 'after': '{text[:64]}'.", param="after")


async def get_response(request: Request) -> Response:
    """One response: its log row, and when stored its Response, input items and events."""
    ledger = admin(request)
    response_id = request.path_params["response_id"]
    row = None if ids.unknowable(response_id) else await ledger.log_row(response_id)
    if row is None:
        raise not_found(f"Response with id '{response_id[:64]}' not found.",
                        param="response_id")
    store = gateway_of(request).store
    record = await store.get(response_id, row["api_key_id"])
    events = await store.read_events(response_id) if record is not None else []
    return JSON({
        "summary": named(row, names(request)),
        "response": scrubbed(record.response) if record is not None else None,
        "input_items": record.input_items if record is not None else [],
        "events": events,
    })


def scrubbed(response: dict[str, Any]) -> dict[str, Any]:
    """The Response with any header or authorization of its tools left out."""
    tools = response.get("tools")
    if not tools:
        return response
    clean = [{k: v for k, v in tool.items() if k not in _SECRET_FIELDS}
             if isinstance(tool, dict) else tool for tool in tools]
    return {**response, "tools": clean}


# -- conversations --------------------------------------------------------------------------


async def list_conversations(request: Request) -> Response:
    """Conversations of every key, or of ``api_key_id`` only, newest first (on DynamoDB the
    sharded index's queries, merged); ``after`` is the ``last_id`` of the page before."""
    ledger = admin(request)
    params = request.query_params
    limit = int_param(params.get("limit"), "limit", 20)
    if not 1 <= limit <= 100:
        raise invalid_request("Invalid 'limit': expected a value between 1 and 100.",
                              param="limit", code="integer_out_of_range")
    after = params.get("after") or None
    try:
        if after is not None and ids.unknowable(after):
            raise LookupError(after)
        rows = await ledger.conversations(limit + 1, after, params.get("api_key_id") or None)
    except LookupError:
        raise invalid_request(f"Invalid 'after': no conversation '{(after or '')[:64]}'.",
                              param="after") from None
    key_names = names(request)
    page = [named(row, key_names) for row in rows[:limit]]
    return JSON({
        "object": "list", "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(rows) > limit,
    })


async def conversation_items(request: Request) -> Response:
    """A conversation and its items (the first 100), whichever tenant holds it."""
    ledger = admin(request)
    conversation_id = request.path_params["conversation_id"]
    conversation = None if ids.unknowable(conversation_id) else await ledger.conversation(
        conversation_id)
    page = None
    if conversation is not None:
        page = await store_of(gateway_of(request).store).list_conversation_items(
            conversation_id, conversation["api_key_id"], limit=100, order="asc")
    if conversation is None or page is None:
        raise not_found(f"Conversation with id '{conversation_id[:64]}' not found.",
                        param="conversation_id")
    items, more = page
    return JSON({"conversation": named(conversation, names(request)), "object": "list",
                 "data": items,
                 "has_more": more})


# -- limits ---------------------------------------------------------------------------------


async def limits_in_force(request: Request) -> Response:
    """The default rule, each named key's, and the current counts of the keys seen today."""
    ledger = admin(request)
    limits = gateway_of(request).settings.limits or NO_LIMITS
    now = time.time()
    rows = await ledger.buckets(int(now - DAY), int(now) + 1)
    key_names = names(request)
    tenants = sorted({r.tenant for r in rows} | set(limits.keys) | set(key_names))
    keys = []
    for tenant in tenants:
        rule = limits.for_tenant(tenant)
        counts = await ledger.counts(tenant, rule.windows(now)) if rule.counted else None
        keys.append({
            "api_key_id": tenant, "api_key_name": key_names.get(tenant),
            "limits": rule.to_json(),
            "configured": tenant in limits.keys,
            "window": None if counts is None else {
                "requests": counts.requests, "tokens": counts.tokens,
                "period_tokens": counts.budget_tokens},
        })
    return JSON({"object": "gateway.limits", "default": limits.default.to_json(),
                 "keys": keys})


ROUTES: list[tuple[str, Handler]] = [
    ("/v1/organization/usage/completions", usage_completions),
    ("/v1/organization/costs", costs),
    ("/v1/admin/responses", list_responses),
    ("/v1/admin/responses/{response_id}", get_response),
    ("/v1/admin/conversations", list_conversations),
    ("/v1/admin/conversations/{conversation_id}/items", conversation_items),
    ("/v1/admin/limits", limits_in_force),
]


def handler_for(path: str) -> Handler:
    """The handler of one of ``ROUTES``' paths (api/app.py routes them lazily)."""
    return dict(ROUTES)[path]

"""Per-key limits at the door: a create is counted in its key's rate window (the usage ledger,
store/usage.py, shared by every process on the store) before anything goes upstream; past a
limit it is OpenAI's 429 ``rate_limit_exceeded`` with the ``x-ratelimit-*`` headers and
``retry-after`` (the openai SDKs wait that long and retry).

Tokens are reserved before the upstream is called: once the request is rendered, its estimate
(token_estimate.py, plus the output cap it sets) is counted in the key's window and budget
period if it fits in what is left, atomically, so concurrent requests cannot all pass; the
response's real usage replaces it when it is counted (store/usage.py ``settlement``). An
estimate larger than a limit is OpenAI's "Request too large" 429. A response whose tools make
it span model turns reserves each further turn's input too (``reserve_turn``), in the same
windows; its output across turns is bounded by ``max_output_tokens`` (responses/turns.py),
which the create reserved.

Dollar budgets (``usd_per_day``, ``usd_per_month``) are checked at the door: what the key's
responses cost this UTC day or month (the ledger's hourly buckets priced by prices.py; the
closed hours' sum kept in the process, the current hour read again) against the budget. They
are not reserved: responses already running when the budget is reached may pass it by their
own cost, as a bill's spending limit does.

Every refusal leaves one JSON log line (``request refused by the limits``: the tenant id and
the name GATEWAY_API_KEYS gave the key, never the key; which limit, its value, the counts,
the retry delay), beside uvicorn's access line.

The rules are GATEWAY_LIMITS (key_limits.py). No rule, no store call.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from typing import TYPE_CHECKING, Any

from responses_gateway.errors import GatewayError

logger = logging.getLogger("responses_gateway")

if TYPE_CHECKING:  # loaded with GATEWAY_LIMITS, and the ledger with the first request
    from collections.abc import Awaitable, Callable

    from responses_gateway.key_limits import Limits, Rule, Windows
    from responses_gateway.prices import Pricing
    from responses_gateway.settings import Settings
    from responses_gateway.store.base import Store, StoredResponse
    from responses_gateway.store.usage import Counts, UsageEntry, UsageStore


async def admit(store: Store, limits: Limits | None, tenant: str,
                settings: Settings | None = None) -> dict[str, str]:
    """Count one request for ``tenant``; the ``x-ratelimit-*`` headers to answer with, or the
    429 (GatewayError, with those headers) when a limit is reached. ``settings`` price the
    key's spend for its dollar budgets (none checked without them)."""
    rule = limits.for_tenant(tenant) if limits is not None else None
    if rule is None or not rule.any:
        return {}
    ledger = store.usage_store()
    if ledger is None:
        return {}
    now = time.time()
    if rule.dollars and settings is not None:
        await _check_spend(ledger, rule, tenant, now, settings)
    if not rule.counted:
        return {}
    windows = rule.windows(now)
    counts = await ledger.admit(tenant, rule.caps, windows)
    headers = rate_headers(rule, windows, counts, now)
    if not counts.admitted:
        raise _logged(tenant, _refusal(rule, windows, counts, now, headers), rule, counts)
    return headers


#: per ledger, each period's spend in closed hours, by period key: (the hour summed up to,
#: USD by tenant)
_closed_spend: weakref.WeakKeyDictionary[UsageStore, dict[str, tuple[int, dict[str, float]]]] \
    = weakref.WeakKeyDictionary()


async def spent(ledger: UsageStore, pricing: Pricing, tenant: str, period: str,
                now: float) -> float:
    """What ``tenant``'s calls cost in the budget ``period`` holding ``now`` (USD)."""
    from responses_gateway.key_limits import period_of, period_start
    from responses_gateway.store.usage import HOUR

    key = f"{period}:{period_of(period, now)[0]}"
    hour = int(now) - int(now) % HOUR
    held = _closed_spend.setdefault(ledger, {})
    upto, by_tenant = held.get(key) or (period_start(period, now), {})
    if upto < hour:  # hours closed since: summed once, for every tenant
        by_tenant = dict(by_tenant)
        for row in await ledger.buckets(upto, hour):
            by_tenant[row.tenant] = (by_tenant.get(row.tenant, 0.0)
                                     + pricing.cost(row.model, row.counts, row.tool_calls).total)
        for old in [k for k in held if k.startswith(period + ":") and k != key]:
            del held[old]
        held[key] = (hour, by_tenant)
    now_hour = sum(pricing.cost(row.model, row.counts, row.tool_calls).total
                   for row in await ledger.buckets(hour, hour + HOUR) if row.tenant == tenant)
    return by_tenant.get(tenant, 0.0) + now_hour


async def _check_spend(ledger: UsageStore, rule: Rule, tenant: str, now: float,
                       settings: Settings) -> None:
    """OpenAI's 429 ``insufficient_quota`` when a dollar budget of the key is spent."""
    from responses_gateway.key_limits import period_of
    from responses_gateway.priced_items import PRICED_ITEMS
    from responses_gateway.prices import pricing

    prices = pricing(settings, PRICED_ITEMS)
    for period, cap in rule.dollars:
        used = await spent(ledger, prices, tenant, period, now)
        if used < cap:
            continue
        wait = max(1, math.ceil(period_of(period, now)[1] - now))
        error = GatewayError(
            429,
            f"You exceeded this key's spending limit for the {period} (${cap:g}, spent "
            f"${used:.4f}; GATEWAY_LIMITS usd_per_{period}, priced by GATEWAY_PRICES).",
            type="insufficient_quota", code="insufficient_quota",
            headers={"retry-after": str(wait)},
        )
        raise _logged(tenant, error, rule, None, limit=f"usd_per_{period}", value=cap,
                      used=round(used, 6))


def _logged(tenant: str, error: GatewayError, rule: Rule, counts: Counts | None, *,
            limit: str | None = None, value: float | None = None, used: float | None = None,
            requested: int | None = None) -> GatewayError:
    """Log one JSON line for a request the limits refused; ``error``, to raise."""
    if limit is None and counts is not None:
        limit, value, used = {
            "budget": ("tokens_per_period", rule.tokens_per_period, counts.budget_tokens),
            "tokens": ("tokens_per_minute", rule.tokens_per_minute, counts.tokens),
        }.get(counts.refused_by or "", ("requests_per_minute", rule.requests_per_minute,
                                        counts.requests))
    from responses_gateway.observability import key_name

    line: dict[str, Any] = {
        "api_key_id": tenant, "api_key_name": key_name(tenant), "limit": limit,
        "limit_value": value, "used": used,
        "requested": requested, "status": error.status, "code": error.code,
        "retry_after": (error.headers or {}).get("retry-after"),
    }
    if counts is not None:
        line["counts"] = {"requests": counts.requests, "tokens": counts.tokens,
                          "period_tokens": counts.budget_tokens}
    logger.warning("request refused by the limits", extra={"refused": line})
    return error


async def reserve(store: Store, limits: Limits | None, tenant: str, tokens: int,
                  model: str) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """Reserve ``tokens`` (a call's estimate) in ``tenant``'s token window and budget: the
    reservation (its JSON form, for ``settlement``; None when no token limit applies) and the
    ``x-ratelimit-*`` headers; the 429 when the estimate does not fit in what is left."""
    rule = limits.for_tenant(tenant) if limits is not None else None
    if rule is None or not (rule.tokens_per_minute or rule.tokens_per_period):
        return None, {}
    ledger = store.usage_store()
    if ledger is None:
        return None, {}
    from responses_gateway.store.usage import Reservation

    now = time.time()
    windows = rule.windows(now)
    tokens = max(0, tokens)
    if ((rule.tokens_per_minute and tokens > rule.tokens_per_minute)
            or (rule.tokens_per_period and tokens > rule.tokens_per_period)):
        counts = await ledger.counts(tenant, windows)
        too_large = _too_large(rule, tokens, model, rate_headers(rule, windows, counts, now))
        which = ("tokens_per_minute" if too_large.type == "tokens" else "tokens_per_period")
        raise _logged(tenant, too_large, rule, counts, limit=which,
                      value=getattr(rule, which), used=None, requested=tokens)
    counts = await ledger.reserve(tenant, rule.caps, windows, tokens)
    headers = rate_headers(rule, windows, counts, now)
    if not counts.admitted:
        raise _logged(tenant, _refusal(rule, windows, counts, now, headers, requested=tokens,
                                       model=model), rule, counts, requested=tokens)
    return Reservation(tokens, windows).to_json(), headers


async def reserve_turn(store: Store, limits: Limits | None, tenant: str,
                       reserved: dict[str, Any], tokens: int, model: str) -> dict[str, Any]:
    """Reserve ``tokens`` more for a response its create reserved ``reserved`` for: a further
    model turn's input (its history grown by the tools' outputs), in the reservation's own
    windows, so the response's settle replaces all of it with what the response spent. The
    reservation grown; when ``tokens`` do not fit in what is left, nothing is counted and
    this raises the error the response fails with: ``rate_limit_exceeded`` (the code OpenAI's
    SDKs know a failed response by; the message says which limit), never a limit passed."""
    from responses_gateway.store.usage import Reservation

    reservation = Reservation.from_json(reserved)
    rule = limits.for_tenant(tenant) if limits is not None else None
    ledger = store.usage_store()
    if reservation is None or rule is None or ledger is None or tokens <= 0:
        return reserved
    windows = reservation.windows
    counts = await ledger.reserve(tenant, rule.caps, windows, tokens)
    if not counts.admitted:
        refused = _refusal(rule, windows, counts, time.time(), {}, requested=tokens,
                           model=model)
        _logged(tenant, refused, rule, counts, requested=tokens)
        raise GatewayError(
            429, f"{refused.message} The response stopped before its next model turn; its "
            "output so far is kept.", type=refused.type, code="rate_limit_exceeded")
    return Reservation(reservation.tokens + tokens, windows).to_json()


def reserver(store: Store, limits: Limits | None, tenant: str, headers: dict[str, str]
             ) -> Callable[[StoredResponse], Awaitable[dict[str, Any] | None]] | None:
    """``Gateway.new_job``'s ``reserve`` for a key's create: the rendered request's estimate
    reserved (its headers merged into ``headers``, the answer's); None without token limits."""
    if not counts_tokens(limits, tenant):
        return None

    async def reserve_record(record: StoredResponse) -> dict[str, Any] | None:
        reserved, more = await reserve(store, limits, tenant,
                                       await estimate_of(record.request["chat"]),
                                       record.response.get("model") or "")
        headers.update(more)
        return reserved

    return reserve_record


def counts_tokens(limits: Limits | None, tenant: str) -> bool:
    """Whether ``tenant`` has a token limit (its calls' tokens are then reserved)."""
    rule = limits.for_tenant(tenant) if limits is not None else None
    return rule is not None and bool(rule.tokens_per_minute or rule.tokens_per_period)


async def estimate_of(chat: dict[str, Any]) -> int:
    """What a chat request may spend, as OpenAI's limits count it: its input's estimate
    (token_estimate.py; a heavy chat body's in a worker thread) plus the output cap it sets,
    if any."""
    from responses_gateway.token_estimate import estimate_chat_off_loop

    return await estimate_chat_off_loop(chat) + _cap(chat)


def _cap(chat: dict[str, Any]) -> int:
    cap = chat.get("max_completion_tokens") or chat.get("max_tokens")
    return cap if isinstance(cap, int) and cap > 0 else 0


async def count(store: Store, limits: Limits | None, entry: UsageEntry,
                reserved: dict[str, Any] | None) -> None:
    """Count a call that is not a response (a compaction, a token count) in the ledger, its
    reservation settled; a failed write is retried in the background (store/bookkeeping.py),
    never the call's failure."""
    ledger = store.usage_store()
    if ledger is None:
        return
    from responses_gateway.store import bookkeeping
    from responses_gateway.store.usage import settlement

    entry, windows = settlement(entry, limits, reserved)
    await bookkeeping.record(ledger, entry, windows)  # retried off the path if need be


def with_headers(response: Any, headers: dict[str, str]) -> Any:
    """``response`` (a Starlette Response, or api/sse_response.py's raw header list) with
    ``headers`` added."""
    if isinstance(response.headers, list):
        response.headers = response.headers + [
            (k.encode(), v.encode()) for k, v in headers.items()]
    else:
        response.headers.update(headers)
    return response


def rate_headers(rule: Rule, windows: Windows, counts: Counts, now: float) -> dict[str, str]:
    """OpenAI's headers: limit, remaining and time to reset, for requests and tokens."""
    headers: dict[str, str] = {}
    reset = _window_reset(windows, now)
    if rule.requests_per_minute:
        headers["x-ratelimit-limit-requests"] = str(rule.requests_per_minute)
        headers["x-ratelimit-remaining-requests"] = str(
            max(0, rule.requests_per_minute - counts.requests))
        headers["x-ratelimit-reset-requests"] = duration(reset)
    tokens_limit, tokens_used, tokens_reset = _tokens(rule, windows, counts, now)
    if tokens_limit:
        headers["x-ratelimit-limit-tokens"] = str(tokens_limit)
        headers["x-ratelimit-remaining-tokens"] = str(max(0, tokens_limit - tokens_used))
        headers["x-ratelimit-reset-tokens"] = duration(tokens_reset)
    return headers


def _tokens(rule: Rule, windows: Windows, counts: Counts, now: float
            ) -> tuple[int, int, float]:
    """The token limit the headers show: the per-minute one, else the budget's."""
    if rule.tokens_per_minute:
        return rule.tokens_per_minute, counts.tokens, _window_reset(windows, now)
    if rule.tokens_per_period:
        return (rule.tokens_per_period, counts.budget_tokens,
                max(0.0, (windows.period_end or now) - now))
    return 0, 0, 0.0


def _window_reset(windows: Windows, now: float) -> float:
    if windows.window is None:
        return 0.0
    return max(0.0, (windows.window + 1) * windows.window_seconds - now)


def duration(seconds: float) -> str:
    """OpenAI's spelling of a reset time: ``20ms``, ``1s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _refusal(rule: Rule, windows: Windows, counts: Counts, now: float,
             headers: dict[str, str], *, requested: int = 1, model: str = "") -> GatewayError:
    if counts.refused_by == "budget":
        wait = max(1, math.ceil((windows.period_end or now) - now))
        return GatewayError(
            429,
            f"You exceeded this key's token budget for the {rule.period} "
            f"({rule.tokens_per_period} tokens, used {counts.budget_tokens}"
            + (f", requested {requested}" if requested > 1 else "")
            + "; GATEWAY_LIMITS tokens_per_period).",
            type="insufficient_quota", code="insufficient_quota",
            headers={**headers, "retry-after": str(wait)},
        )
    wait = max(1, math.ceil(_window_reset(windows, now)))
    if counts.refused_by == "tokens":
        what, limit, used = "tokens per min (TPM)", rule.tokens_per_minute, counts.tokens
    else:
        what, limit, used = "requests per min (RPM)", rule.requests_per_minute, counts.requests
    return GatewayError(
        429,
        f"Rate limit reached for {_whom(model)} on {what}: Limit {limit}, Used {used}, "
        f"Requested {requested}. Please try again in {wait}s.",
        type=counts.refused_by or "requests", code="rate_limit_exceeded",
        headers={**headers, "retry-after": str(wait)},
    )


def _too_large(rule: Rule, requested: int, model: str, headers: dict[str, str]
               ) -> GatewayError:
    """OpenAI's 429 for a request no window could hold (no retry-after: waiting cannot help;
    the SDKs still retry a 429, and get it again)."""
    if rule.tokens_per_minute and requested > rule.tokens_per_minute:
        return GatewayError(
            429,
            f"Request too large for {_whom(model)} on tokens per min (TPM): Limit "
            f"{rule.tokens_per_minute}, Requested {requested}. The input or output tokens "
            "must be reduced in order to run successfully.",
            type="tokens", code="rate_limit_exceeded", headers=headers,
        )
    return GatewayError(
        429,
        f"Request too large for this key's token budget for the {rule.period}: Limit "
        f"{rule.tokens_per_period}, Requested {requested}. The input or output tokens must "
        "be reduced in order to run successfully.",
        type="insufficient_quota", code="insufficient_quota", headers=headers,
    )


def _whom(model: str) -> str:
    """OpenAI names the model and the organization; the gateway, the model and the key."""
    return f"{model} with this key" if model else "this key"

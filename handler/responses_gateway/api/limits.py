"""Per-key limits at the door: a create is counted in its key's rate window (the usage ledger,
store/usage.py, shared by every process on the store) before anything goes upstream; past a
limit it is OpenAI's 429 ``rate_limit_exceeded`` with the ``x-ratelimit-*`` headers and
``retry-after`` (the openai SDKs wait that long and retry).

The rules are GATEWAY_LIMITS (limits.py). No rule, no store call.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from responses_gateway.errors import GatewayError

if TYPE_CHECKING:  # loaded with GATEWAY_LIMITS, and the ledger with the first request
    from responses_gateway.limits import Limits, Rule, Windows
    from responses_gateway.store.base import Store
    from responses_gateway.store.usage import Counts


async def admit(store: Store, limits: Limits | None, tenant: str) -> dict[str, str]:
    """Count one request for ``tenant``; the ``x-ratelimit-*`` headers to answer with, or the
    429 (GatewayError, with those headers) when a limit is reached."""
    rule = limits.for_tenant(tenant) if limits is not None else None
    if rule is None or not rule.any:
        return {}
    ledger = store.usage_store()
    if ledger is None:
        return {}
    now = time.time()
    windows = rule.windows(now)
    counts = await ledger.admit(tenant, rule.caps, windows)
    headers = rate_headers(rule, windows, counts, now)
    if not counts.admitted:
        raise _refusal(rule, windows, counts, now, headers)
    return headers


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
             headers: dict[str, str]) -> GatewayError:
    if counts.refused_by == "budget":
        wait = max(1, math.ceil((windows.period_end or now) - now))
        return GatewayError(
            429,
            f"You exceeded this key's token budget for the {rule.period} "
            f"({rule.tokens_per_period} tokens, used {counts.budget_tokens}; "
            "GATEWAY_LIMITS tokens_per_period).",
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
        f"Rate limit reached for this key on {what}: Limit {limit}, Used {used}, "
        f"Requested 1. Please try again in {wait}s.",
        type=counts.refused_by or "requests", code="rate_limit_exceeded",
        headers={**headers, "retry-after": str(wait)},
    )

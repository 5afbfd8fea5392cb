"""The usage ledger: what each key spent, by model and hour, its rate windows and budget, and a
log line per response for the admin views (issue 34).

One :class:`UsageStore` lives beside each response store (``Store.usage_store()``): a table set
in the same SQLite file (store/usage_sqlite.py), rows in the same DynamoDB table
(store/dynamodb/usage.py). Both count once per response: the response's log row is written
with a condition (absent), in the same atomic write as its counters, so a worker that runs a
response again, or a write retried, adds nothing.

Keys are never stored: a tenant is the digest label api/auth.py derives from its key.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from responses_gateway.key_limits import Caps, Limits, Windows

HOUR = 3600
DAY = 86400
#: the counters server tools' output items add to (``ItemType.counter``, tools/declaration.py)
TOOL_COUNTERS = ("image_generations",)
#: the counters of a usage bucket, in the order SQLite's columns take
COUNTERS = (
    "requests", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens",
    *TOOL_COUNTERS,
)


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """One response's spend, as its job ended (observability.ResponseMetrics.finish)."""

    response_id: str
    tenant: str
    model: str
    status: str
    created_at: int  # the response's created_at: its bucket and its log row's key
    finished_at: float  # its rate window's time
    stored: bool = False
    background: bool = False
    counts: dict[str, int] = field(default_factory=dict)  # COUNTERS
    tool_calls: dict[str, int] = field(default_factory=dict)  # by item type
    #: what the call was: a response, or a compaction or token count (api/context_routes.py)
    endpoint: str = "responses"
    #: tokens reserved at admission (Reservation): the windows get ``tokens - reserved``
    reserved: int = 0
    #: where its time went (observability.ResponseMetrics.timing): start, first output,
    #: duration, steps; None for calls that are no response (a token count)
    timing: dict[str, Any] | None = None
    #: why it did not complete: ``{"code", "message"}`` (failed, incomplete, cancelled)
    error: dict[str, Any] | None = None

    @classmethod
    def of(cls, response: dict[str, Any], *, tenant: str, model: str, status: str,
           stored: bool = False, endpoint: str = "responses",
           counters: Mapping[str, str] | None = None, timing: dict[str, Any] | None = None,
           error: dict[str, Any] | None = None) -> UsageEntry:
        """``counters``: the counters (:data:`COUNTERS`) output items add one to, by item type
        (the server tools' registrations say theirs: tools/registry.py ``ITEM_COUNTERS``,
        which the caller passes, the store sitting below the tools)."""
        usage = response.get("usage") or {}
        tools: dict[str, int] = {}  # the tool calls, counted by type
        for item in response.get("output") or ():
            kind = item.get("type") or ""
            if kind.endswith("_call"):
                tools[kind] = tools.get(kind, 0) + 1
        counted = dict.fromkeys(TOOL_COUNTERS, 0)
        for kind, counter in (counters or {}).items():
            counted[counter] = counted.get(counter, 0) + tools.get(kind, 0)
        now = time.time()
        return cls(
            response_id=response.get("id") or "",
            tenant=tenant,
            model=model or response.get("model") or "",
            status=status,
            created_at=int(response.get("created_at") or now),
            finished_at=now,
            stored=stored,
            background=bool(response.get("background")),
            counts={
                "requests": 1,
                "input_tokens": _int(usage.get("input_tokens")),
                "cached_tokens": _int((usage.get("input_tokens_details") or {})
                                      .get("cached_tokens")),
                "output_tokens": _int(usage.get("output_tokens")),
                "reasoning_tokens": _int((usage.get("output_tokens_details") or {})
                                         .get("reasoning_tokens")),
                **counted,
            },
            tool_calls=tools,
            endpoint=endpoint,
            timing=timing,
            error=error,
        )

    @property
    def tokens(self) -> int:
        """What the rate limits and the budget count: input plus output tokens."""
        return self.counts.get("input_tokens", 0) + self.counts.get("output_tokens", 0)

    @property
    def unreserved(self) -> int:
        """What recording adds to the windows: the real tokens less those reserved (negative
        when the estimate was high: the difference goes back)."""
        return self.tokens - self.reserved

    @property
    def hour(self) -> int:
        return self.created_at - self.created_at % HOUR

    def log_row(self) -> dict[str, Any]:
        """The admin list's view of it (no content: that stays in the response store). Its
        ``timing`` and ``error`` are what the dashboard's detail shows of a response's time
        and failure, kept here because every response has a log row, stored or not."""
        row = {
            "id": self.response_id, "created_at": self.created_at, "api_key_id": self.tenant,
            "model": self.model, "status": self.status, "stored": self.stored,
            "background": self.background, "usage": dict(self.counts),
            "tool_calls": dict(self.tool_calls), "endpoint": self.endpoint,
            "error": self.error,
        }
        if self.timing is not None:
            row["timing"] = self.timing
        return row


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


@dataclass(slots=True)
class UsageRow:
    """One (hour, tenant, model) bucket's counters."""

    hour: int
    tenant: str
    model: str
    counts: dict[str, int]
    tool_calls: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Tokens counted in a key's windows when a call was admitted (limiter.py), before the
    upstream saw it; its usage is settled in the same windows when it ends. Kept in a
    response's record (``request["reserved"]``), so a background worker settles it too."""

    tokens: int
    windows: Windows

    def to_json(self) -> dict[str, Any]:
        w = self.windows
        return {"tokens": self.tokens, "window_seconds": w.window_seconds, "window": w.window,
                "period_key": w.period_key, "period_end": w.period_end}

    @classmethod
    def from_json(cls, data: Any) -> Reservation | None:
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), int):
            return None
        return cls(data["tokens"], Windows(int(data.get("window_seconds") or 60),
                                           data.get("window"), data.get("period_key"),
                                           data.get("period_end")))


def settlement(entry: UsageEntry, limits: Limits | None, reserved: Any = None
               ) -> tuple[UsageEntry, Windows | None]:
    """The entry to record and the windows its tokens go to: those of its reservation (its
    estimate replaced by what it spent), else the key's windows as it ended (None: no limit)."""
    reservation = Reservation.from_json(reserved)
    if reservation is not None:
        return replace(entry, reserved=reservation.tokens), reservation.windows
    rule = limits.for_tenant(entry.tenant) if limits is not None else None
    return entry, rule.windows(entry.finished_at) if rule is not None and rule.counted else None


@dataclass(slots=True)
class Counts:
    """A key's counts in its current window and period, after an admission (or a look)."""

    requests: int = 0
    tokens: int = 0
    budget_tokens: int = 0
    admitted: bool = True
    refused_by: str | None = None  # "requests", "tokens" or "budget"


class UsageStore(ABC):
    """Counters and log rows beside a response store; every method is one atomic step."""

    @abstractmethod
    async def record(self, entry: UsageEntry, windows: Windows | None) -> bool:
        """Count ``entry`` once (bucket, log row, and the window's and period's tokens when
        ``windows``): False when its response was counted before."""

    @abstractmethod
    async def admit(self, tenant: str, caps: Caps, windows: Windows) -> Counts:
        """Count one request in the key's window unless a cap is reached (then nothing is
        counted and ``refused_by`` says which); the counts as they are after."""

    @abstractmethod
    async def reserve(self, tenant: str, caps: Caps, windows: Windows, tokens: int) -> Counts:
        """Count ``tokens`` (a call's estimate) in the key's window and period unless that
        would pass the tokens-per-window cap or the budget (then nothing is counted and
        ``refused_by`` says which); the counts as they are after."""

    @abstractmethod
    async def counts(self, tenant: str, windows: Windows) -> Counts:
        """The key's counts in ``windows`` (no change)."""

    @abstractmethod
    async def buckets(self, start: int, end: int) -> list[UsageRow]:
        """Every hourly bucket with ``start <= hour < end``."""

    @abstractmethod
    async def log(self, start: int, end: int, limit: int,
                  before: tuple[int, str] | None = None) -> list[dict[str, Any]]:
        """Log rows created in ``[start, end)``, newest first, up to ``limit`` rows, those
        strictly before ``before`` (created_at, id) when paging."""

    @abstractmethod
    async def log_row(self, response_id: str) -> dict[str, Any] | None:
        """One response's log row (its tenant, to read it from the response store)."""

    @abstractmethod
    async def conversations(self, limit: int, after: str | None = None,
                            tenant: str | None = None) -> list[dict[str, Any]]:
        """Conversations (id, tenant, created_at, metadata) of every tenant, or of ``tenant``
        only, by tenant then id, those after the conversation ``after``; a LookupError when
        ``after`` is no conversation (its tenant places it)."""

    @abstractmethod
    async def conversation(self, conversation_id: str) -> dict[str, Any] | None:
        """One conversation of any tenant (id, tenant, created_at, metadata), or None."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections."""


def refusal(counts: Counts, caps: Caps) -> str | None:
    """Which cap a new request would pass (the budget first: it lasts longest)."""
    if caps.budget and counts.budget_tokens >= caps.budget:
        return "budget"
    if caps.requests and counts.requests >= caps.requests:
        return "requests"
    if caps.tokens and counts.tokens >= caps.tokens:
        return "tokens"
    return None


def over(counts: Counts, caps: Caps, tokens: int) -> str | None:
    """Which token cap ``tokens`` more would pass: the budget first, then the window's."""
    if caps.budget and counts.budget_tokens + tokens > caps.budget:
        return "budget"
    if caps.tokens and counts.tokens + tokens > caps.tokens:
        return "tokens"
    return None


def day_of(epoch: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch))

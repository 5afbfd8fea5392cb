"""Per-key limits as configured (``GATEWAY_LIMITS``): plain data, read once by config.py.

    {"default": {"requests_per_minute": 60, "tokens_per_minute": 100000,
                 "tokens_per_period": 5000000, "period": "month", "usd_per_day": 20},
     "t_0123…": {"requests_per_minute": 600}}

A key is named by its tenant id (``t_`` + the first 32 hex digits of the key's SHA-256, what
api/auth.py derives): the setting never holds a key. A key's entry overrides the default's
fields; 0 or absent = no such limit. ``window_seconds`` (default 60) is the length of the
rate window the per-minute figures are counted in. ``usd_per_day`` and ``usd_per_month`` are
budgets in US dollars: what the key's responses cost this UTC day or month under the prices
(GATEWAY_PRICES, prices.py). The counting is limiter.py's, in the usage ledger
(store/usage.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

PERIODS = ("day", "month")
_FIELDS = ("requests_per_minute", "tokens_per_minute", "tokens_per_period")
_DOLLARS = ("usd_per_day", "usd_per_month")


@dataclass(frozen=True, slots=True)
class Windows:
    """Where a key's counts go: its rate window (``window_seconds`` long, by index) and its
    budget period (``period_key``); None where no limit asks for them."""

    window_seconds: int
    window: int | None = None
    period_key: str | None = None
    period_end: int | None = None


@dataclass(frozen=True, slots=True)
class Caps:
    """One key's limits, 0 = none (limiter.py reads them from GATEWAY_LIMITS)."""

    requests: int = 0
    tokens: int = 0
    budget: int = 0


@dataclass(frozen=True, slots=True)
class Rule:
    """One key's limits; 0 = none."""

    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    tokens_per_period: int = 0
    period: str = "month"
    window_seconds: int = 60
    usd_per_day: float = 0.0
    usd_per_month: float = 0.0

    @property
    def caps(self) -> Caps:
        return Caps(self.requests_per_minute, self.tokens_per_minute, self.tokens_per_period)

    @property
    def counted(self) -> bool:
        """Whether a request is counted in the ledger's windows (a request or token limit)."""
        return bool(self.requests_per_minute or self.tokens_per_minute
                    or self.tokens_per_period)

    @property
    def dollars(self) -> tuple[tuple[str, float], ...]:
        """The dollar budgets set: (period, USD)."""
        return tuple((period, cap) for period, cap in (("day", self.usd_per_day),
                                                       ("month", self.usd_per_month)) if cap)

    @property
    def any(self) -> bool:
        return self.counted or bool(self.usd_per_day or self.usd_per_month)

    def windows(self, now: float) -> Windows:
        """Where counts go at ``now``: the rate window's index, the budget period's key."""
        window = None
        if self.requests_per_minute or self.tokens_per_minute:
            window = int(now // self.window_seconds)
        period_key = period_end = None
        if self.tokens_per_period:
            period_key, period_end = period_of(self.period, now)
        return Windows(self.window_seconds, window, period_key, period_end)

    def to_json(self) -> dict[str, Any]:
        return {"requests_per_minute": self.requests_per_minute,
                "tokens_per_minute": self.tokens_per_minute,
                "tokens_per_period": self.tokens_per_period, "period": self.period,
                "window_seconds": self.window_seconds, "usd_per_day": self.usd_per_day,
                "usd_per_month": self.usd_per_month}


@dataclass(frozen=True, slots=True)
class Limits:
    """The default rule and each named key's."""

    default: Rule = field(default_factory=Rule)
    keys: dict[str, Rule] = field(default_factory=dict)

    def for_tenant(self, tenant: str) -> Rule:
        return self.keys.get(tenant, self.default)

    @property
    def any(self) -> bool:
        return self.default.any or any(rule.any for rule in self.keys.values())


NO_LIMITS = Limits()


def period_start(period: str, now: float) -> int:
    """The start (epoch) of the budget period holding ``now`` (UTC)."""
    import calendar
    t = time.gmtime(now)
    return calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday if period == "day" else 1,
                            0, 0, 0))


def period_of(period: str, now: float) -> tuple[str, int]:
    """The key and end (epoch) of the budget period holding ``now`` (UTC)."""
    import calendar
    t = time.gmtime(now)
    if period == "day":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
        return time.strftime("%Y-%m-%d", t), start + 86400
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return time.strftime("%Y-%m", t), calendar.timegm((year, month, 1, 0, 0, 0))


def parse_limits(text: str) -> Limits:
    """``GATEWAY_LIMITS`` (JSON); a ValueError names what is wrong."""
    import orjson

    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError('expected an object: {"default": {...}, "t_…": {...}}')
    default = _rule(Rule(), data.get("default") or {}, "default")
    keys = {}
    for name, value in data.items():
        if name == "default":
            continue
        if not name.startswith("t_"):
            raise ValueError(f"{name!r}: name a key by its tenant id (t_…), never the key")
        keys[name] = _rule(default, value, name)
    return Limits(default, keys)


def _rule(base: Rule, value: Any, where: str) -> Rule:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object")
    changes: dict[str, Any] = {}
    for name, setting in value.items():
        if name in _FIELDS or name == "window_seconds":
            if not isinstance(setting, int) or isinstance(setting, bool) or setting < 0:
                raise ValueError(f"{where}.{name}: expected a whole number >= 0")
            if name == "window_seconds" and setting < 1:
                raise ValueError(f"{where}.window_seconds: expected at least 1")
            changes[name] = setting
        elif name in _DOLLARS:
            if (not isinstance(setting, int | float) or isinstance(setting, bool)
                    or setting < 0):
                raise ValueError(f"{where}.{name}: expected a number of US dollars >= 0")
            changes[name] = float(setting)
        elif name == "period":
            if setting not in PERIODS:
                raise ValueError(f"{where}.period: expected one of {', '.join(PERIODS)}")
            changes[name] = setting
        else:
            raise ValueError(f"{where}: unknown field {name!r}")
    return replace(base, **changes)

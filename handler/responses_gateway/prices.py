"""What a response cost, in US dollars: per-model prices (``GATEWAY_PRICES``) applied to the
usage ledger's counters (store/usage.py). The Costs API (api/admin_routes.py), the dashboard's
usage tab and the per-key dollar budgets (limiter.py) all price through :class:`Pricing`.

    {"default": {"image": 0.04, "search": 0.01},
     "my-model": {"input": 0.5, "cached_input": 0.05, "output": 1.5}}

Token prices are US dollars per million tokens (``input`` for input tokens not read from a
cache, ``cached_input`` for cached ones, default ``input``; ``output`` includes reasoning);
``image`` is per image the response generated (image_generation), ``search`` per web search
call. A model is found by its client name, then (for a Bedrock model) by the Bedrock model id it
routes to, its cross-region prefix (``us.``, ``eu.``, ``apac.``, ``global.``) dropped; the
``default`` entry fills the fields a model's entry does not set. A model with no price costs 0.

:data:`BEDROCK_ON_DEMAND` ships Bedrock's public on-demand prices for some models (US East,
N. Virginia), as published on https://aws.amazon.com/bedrock/pricing/ as known on
:data:`BEDROCK_PRICES_AS_OF`: a convenience, not a bill (regions, batch, provisioned
throughput and newer price changes differ). ``GATEWAY_PRICES`` wins over them, field by
field.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

#: when the shipped Bedrock prices were taken from AWS's public pricing page
BEDROCK_PRICES_AS_OF = "2025-10-01"
MILLION = 1_000_000
_FIELDS = ("input", "cached_input", "output", "image", "search")
_REGION_PREFIXES = ("us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au.")
#: the line items of the Costs API, by the counter they price
LINE_ITEMS = ("input", "cached input", "output", "image generation", "web search")


@dataclass(frozen=True, slots=True)
class Price:
    """One model's prices; None = not set (the default entry's, else 0)."""

    input: float | None = None
    cached_input: float | None = None
    output: float | None = None
    image: float | None = None
    search: float | None = None

    def over(self, base: Price) -> Price:
        """These prices, ``base``'s where these are not set."""
        return replace(base, **{f.name: getattr(self, f.name) for f in fields(self)
                                if getattr(self, f.name) is not None})

    def to_json(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _p(input: float, output: float, cached: float | None = None) -> Price:
    return Price(input=input, output=output, cached_input=cached)


#: Bedrock on-demand, US East (N. Virginia), USD per million tokens, as of
#: BEDROCK_PRICES_AS_OF (cache reads where Bedrock prompt caching prices them).
BEDROCK_ON_DEMAND: dict[str, Price] = {
    "anthropic.claude-3-haiku-20240307-v1:0": _p(0.25, 1.25),
    "anthropic.claude-3-5-haiku-20241022-v1:0": _p(0.80, 4.00, 0.08),
    "anthropic.claude-haiku-4-5-20251001-v1:0": _p(1.00, 5.00, 0.10),
    "anthropic.claude-3-5-sonnet-20240620-v1:0": _p(3.00, 15.00),
    "anthropic.claude-3-5-sonnet-20241022-v2:0": _p(3.00, 15.00, 0.30),
    "anthropic.claude-3-7-sonnet-20250219-v1:0": _p(3.00, 15.00, 0.30),
    "anthropic.claude-sonnet-4-20250514-v1:0": _p(3.00, 15.00, 0.30),
    "anthropic.claude-sonnet-4-5-20250929-v1:0": _p(3.00, 15.00, 0.30),
    "anthropic.claude-opus-4-20250514-v1:0": _p(15.00, 75.00, 1.50),
    "anthropic.claude-opus-4-1-20250805-v1:0": _p(15.00, 75.00, 1.50),
    "amazon.nova-micro-v1:0": _p(0.035, 0.14, 0.00875),
    "amazon.nova-lite-v1:0": _p(0.06, 0.24, 0.015),
    "amazon.nova-pro-v1:0": _p(0.80, 3.20, 0.20),
    "amazon.nova-premier-v1:0": _p(2.50, 12.50, 0.625),
    "meta.llama3-1-8b-instruct-v1:0": _p(0.22, 0.22),
    "meta.llama3-1-70b-instruct-v1:0": _p(0.72, 0.72),
    "meta.llama3-3-70b-instruct-v1:0": _p(0.72, 0.72),
}


@dataclass(frozen=True, slots=True)
class Prices:
    """``GATEWAY_PRICES`` as configured: the default entry and each model's."""

    default: Price = Price()
    models: Mapping[str, Price] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.models is None:
            object.__setattr__(self, "models", {})


def parse_prices(text: str) -> Prices:
    """``GATEWAY_PRICES`` (JSON); a ValueError names what is wrong."""
    import orjson

    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError('expected an object: {"model": {"input": 0.5, "output": 1.5}, ...}')
    default = _price(data.get("default") or {}, "default")
    models = {name: _price(value, name) for name, value in data.items() if name != "default"}
    return Prices(default, models)


def _price(value: Any, where: str) -> Price:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object of prices")
    for name, setting in value.items():
        if name not in _FIELDS:
            raise ValueError(f"{where}: unknown field {name!r} (expected one of "
                             f"{', '.join(_FIELDS)})")
        if (not isinstance(setting, int | float) or isinstance(setting, bool)
                or setting < 0):
            raise ValueError(f"{where}.{name}: expected a number of US dollars >= 0")
    return Price(**{k: float(v) for k, v in value.items()})


@dataclass(frozen=True, slots=True)
class Cost:
    """One bucket's cost by line item (:data:`LINE_ITEMS`), in USD, with the quantities."""

    amounts: dict[str, float]
    quantities: dict[str, int]

    @property
    def total(self) -> float:
        return sum(self.amounts.values())


class Pricing:
    """Prices each (model, counters) as configured, the shipped Bedrock prices beneath.

    ``route`` is ``Settings.route`` (a client model name to its backend and backend model):
    a Bedrock model is found by its model id when its client name has no entry.
    ``priced_items``: output items priced each (a web search call), by item type: the
    :class:`Price` field and the line item (priced_items.py, the server tools' declarations)."""

    __slots__ = ("_found", "configured", "priced_items", "route")

    def __init__(self, configured: Prices | None, route: Callable[[str], Any] | None = None,
                 priced_items: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.configured = configured or Prices()
        self.route = route
        self.priced_items = priced_items or {}
        self._found: dict[str, Price] = {}

    def price(self, model: str) -> Price:
        """The prices of ``model`` (its client name): every field set (0 when unknown)."""
        found = self._found.get(model)
        if found is None:
            found = self._found[model] = self._look_up(model)
        return found

    def _look_up(self, model: str) -> Price:
        configured = self.configured
        shipped = None
        target = model
        if self.route is not None:
            with contextlib.suppress(Exception):
                route = self.route(model)
                if route.backend == "bedrock":
                    target = route.model
                    shipped = BEDROCK_ON_DEMAND.get(_bare(target))
        own = configured.models.get(model) or configured.models.get(target) \
            or configured.models.get(_bare(target))
        price = Price(0.0, None, 0.0, 0.0, 0.0)
        if shipped is not None:
            price = shipped.over(price)
        price = configured.default.over(price)
        if own is not None:
            price = own.over(price)
        if price.cached_input is None:
            price = replace(price, cached_input=price.input)
        return price

    def cost(self, model: str, counts: Mapping[str, int],
             tool_calls: Mapping[str, int] | None = None) -> Cost:
        """What a bucket's (or a response's) counters cost, by line item."""
        price = self.price(model)
        cached = counts.get("cached_tokens", 0)
        fresh = max(0, counts.get("input_tokens", 0) - cached)
        quantities = {
            "input": fresh, "cached input": cached, "output": counts.get("output_tokens", 0),
            "image generation": counts.get("image_generations", 0),
        }
        amounts = {
            "input": fresh * (price.input or 0.0) / MILLION,
            "cached input": cached * (price.cached_input or 0.0) / MILLION,
            "output": quantities["output"] * (price.output or 0.0) / MILLION,
            "image generation": quantities["image generation"] * (price.image or 0.0),
        }
        for item_type, (name, line) in self.priced_items.items():
            n = (tool_calls or {}).get(item_type, 0)
            quantities[line] = quantities.get(line, 0) + n
            amounts[line] = amounts.get(line, 0.0) + n * (getattr(price, name) or 0.0)
        return Cost(amounts, quantities)

    def summary(self) -> dict[str, Any]:
        """The start line's view: how many models are priced, from where."""
        return {"configured": len(self.configured.models)
                + (self.configured.default != Price()),
                "bedrock_defaults_as_of": BEDROCK_PRICES_AS_OF}


def _bare(model_id: str) -> str:
    """A Bedrock model id without its cross-region inference prefix."""
    for prefix in _REGION_PREFIXES:
        if model_id.startswith(prefix):
            return model_id[len(prefix):]
    return model_id


_pricings: dict[int, tuple[Any, Pricing]] = {}


def pricing(settings: Any, priced_items: Mapping[str, tuple[str, str]]) -> Pricing:
    """The settings' pricing, built once per settings object; ``priced_items`` as
    :class:`Pricing` takes them (the callers sit above the tools that declare them)."""
    held = _pricings.get(id(settings))
    if held is None or held[0] is not settings:
        held = (settings, Pricing(settings.prices, settings.route, priced_items))
        if len(_pricings) > 32:  # a test suite builds many settings; a process, one
            _pricings.clear()
        _pricings[id(settings)] = held
    return held[1]

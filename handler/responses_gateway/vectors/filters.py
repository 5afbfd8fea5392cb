"""``filters`` of a search (and of file_search): OpenAI's comparison filters (``eq``, ``ne``,
``gt``, ``gte``, ``lt``, ``lte``, ``in``, ``nin``) and compound ones (``and``, ``or``) over a
file's ``attributes``, validated once and compiled to a predicate.

A filter is a client's: its size is bounded before any of it is compiled (issue 40: a ``nin``
list of a million strings held the event loop 99 s over a 300-file store). OpenAI documents no
bound on a filter itself, so the bounds are settings (:class:`FilterLimits`): values in the
``in`` / ``nin`` lists of one filter, filters (comparison and compound) in one, nesting depth.
A key or a string value longer than an attribute's may never match one (OpenAI: keys up to 64
characters, string values up to 512), so it is refused too. Each overflow is a 400
``invalid_request_error`` naming the param. An ``in`` / ``nin`` list becomes a set once, so a
row costs one lookup per comparison however long the list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from responses_gateway.errors import (
    GatewayError,
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)

Attributes = dict[str, Any]
Predicate = Callable[[Attributes], bool]
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_KEY_CHARS = 64  # OpenAI's bound on an attribute's key
MAX_STRING_CHARS = 512  # OpenAI's bound on an attribute's string value


@dataclass(frozen=True, slots=True)
class FilterLimits:
    """How large one ``filters`` may be (GATEWAY_MAX_FILTER_VALUES, _CONDITIONS, _DEPTH)."""

    values: int = 1000  # values in the in / nin lists of one filter, all lists together
    conditions: int = 64  # comparison and compound filters in one filter
    depth: int = 8  # compound filters nested in one another

    @classmethod
    def of(cls, settings: Any) -> FilterLimits:
        return cls(settings.max_filter_values, settings.max_filter_conditions,
                   settings.max_filter_depth)


@dataclass(frozen=True, slots=True)
class Filter:
    """A compiled filter: ``test(attributes)``, and ``size`` (its comparisons and compounds:
    what testing one row costs, to tell whether a store's rows are few enough to test on the
    event loop)."""

    test: Predicate
    size: int

    def __call__(self, attrs: Attributes) -> bool:
        return self.test(attrs)


class _Budget:
    """What is left of the limits while one filter compiles."""

    def __init__(self, limits: FilterLimits) -> None:
        self.limits = limits
        self.values = limits.values
        self.conditions = limits.conditions

    def condition(self, param: str, count: int = 1) -> None:
        self.conditions -= count
        if self.conditions < 0:
            raise invalid_request(
                f"Invalid '{param}': a filter may hold at most {self.limits.conditions} "
                "comparison and compound filters (GATEWAY_MAX_FILTER_CONDITIONS).",
                param=param, code="invalid_value")

    def take(self, count: int, param: str) -> None:
        self.values -= count
        if self.values < 0:
            raise invalid_request(
                f"Invalid '{param}': the 'in' and 'nin' lists of a filter may hold at most "
                f"{self.limits.values} values in all (GATEWAY_MAX_FILTER_VALUES).",
                param=param, code="invalid_value")


def compile_filter(value: Any, param: str = "filters",
                   limits: FilterLimits | None = None) -> Filter:
    """``value`` checked against OpenAI's filter schema and ``limits``, compiled."""
    budget = _Budget(limits or FilterLimits())
    test = _compile(value, param, 0, budget)
    return Filter(test, budget.limits.conditions - budget.conditions)


def _compile(value: Any, param: str, depth: int, budget: _Budget) -> Predicate:
    if not isinstance(value, dict):
        raise invalid_request(f"Invalid '{param}': expected an object.", param=param,
                              code="invalid_type")
    budget.condition(param)
    kind = value.get("type")
    if kind in COMPOUNDS:
        return _compound(kind, value.get("filters"), param, depth, budget)
    if kind is None:
        raise missing_parameter(f"{param}.type")
    if kind not in COMPARISONS:
        raise invalid_choice(f"{param}.type", COMPARISONS + COMPOUNDS, kind)
    key, target = value.get("key"), value.get("value")
    if key is None:
        raise missing_parameter(f"{param}.key")
    if not isinstance(key, str):
        raise invalid_type(f"{param}.key", "a string", key)
    if "value" not in value:
        raise missing_parameter(f"{param}.value")
    if len(key) > MAX_KEY_CHARS:
        raise invalid_request(
            f"Invalid '{param}.key': string too long. Expected a string with maximum length "
            f"{MAX_KEY_CHARS}, but got a string with length {len(key)} instead.",
            param=f"{param}.key", code="string_above_max_length")
    if kind in ("in", "nin"):
        if not isinstance(target, list):
            raise _bad_list(param)
        budget.take(len(target), f"{param}.value")  # before looking at any of them
        if not all(_scalar(v) for v in target):
            raise _bad_list(param)
        return _membership(kind == "in", key, target, f"{param}.value")
    if not _scalar(target):
        raise invalid_request(f"Invalid '{param}.value': expected a string, number or boolean.",
                              param=f"{param}.value", code="invalid_type")
    _check_length(target, f"{param}.value")
    return _comparison(kind, key, target)


def _compound(kind: str, parts: Any, param: str, depth: int, budget: _Budget) -> Predicate:
    if depth >= budget.limits.depth:
        raise invalid_request(
            f"Invalid '{param}': compound filters may be nested at most "
            f"{budget.limits.depth} deep (GATEWAY_MAX_FILTER_DEPTH).", param=param,
            code="invalid_value")
    if not isinstance(parts, list) or not parts:
        raise invalid_request(f"Invalid '{param}.filters': expected a non-empty array.",
                              param=f"{param}.filters", code="invalid_value")
    if len(parts) > budget.conditions:  # refused before compiling any of them
        budget.condition(f"{param}.filters", len(parts))
    compiled = [_compile(p, f"{param}.filters[{i}]", depth + 1, budget)
                for i, p in enumerate(parts)]
    combine = all if kind == "and" else any
    return lambda attrs: combine(p(attrs) for p in compiled)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _bad_list(param: str) -> GatewayError:
    return invalid_request(f"Invalid '{param}.value': expected an array of strings, numbers "
                           "or booleans.", param=f"{param}.value", code="invalid_type")


def _check_length(value: Any, param: str) -> None:
    if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
        raise invalid_request(
            f"Invalid '{param}': string too long. Expected a string with maximum length "
            f"{MAX_STRING_CHARS}, but got a string with length {len(value)} instead.",
            param=param, code="string_above_max_length")


def _tagged(value: Any) -> tuple[str, Any]:
    """A value as :func:`_same` compares it: a boolean is never equal to a number (Python's
    ``True == 1`` is), a number equals a number of the same value whatever its type."""
    if isinstance(value, bool):
        return ("b", value)
    return ("s", value) if isinstance(value, str) else ("n", value)


def _membership(inside: bool, key: str, target: list[Any], param: str) -> Predicate:
    """``in`` / ``nin``: the list made a set once, so a row costs one lookup."""
    for i, v in enumerate(target):
        _check_length(v, f"{param}[{i}]")
    members = frozenset(_tagged(v) for v in target)

    def test(attrs: Attributes) -> bool:
        if key not in attrs:
            return not inside
        have = attrs[key]
        if not _scalar(have):
            return not inside
        return (_tagged(have) in members) == inside

    return test


def _comparison(kind: str, key: str, target: Any) -> Predicate:
    def test(attrs: Attributes) -> bool:
        if key not in attrs:
            return kind == "ne"
        have = attrs[key]
        if kind == "eq":
            return _same(have, target)
        if kind == "ne":
            return not _same(have, target)
        if isinstance(have, bool) or isinstance(target, bool) or (
                isinstance(have, str) != isinstance(target, str)):
            return False  # ordering compares numbers with numbers, strings with strings
        return {"gt": have > target, "gte": have >= target,
                "lt": have < target, "lte": have <= target}[kind]

    return test


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) \
        else a == b

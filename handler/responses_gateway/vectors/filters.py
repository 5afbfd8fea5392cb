"""``filters`` of a search (and of file_search): OpenAI's comparison filters (``eq``, ``ne``,
``gt``, ``gte``, ``lt``, ``lte``, ``in``, ``nin``) and compound ones (``and``, ``or``) over a
file's ``attributes``, validated once and compiled to a predicate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from responses_gateway.errors import invalid_request

Attributes = dict[str, Any]
Predicate = Callable[[Attributes], bool]
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 8


def compile_filter(value: Any, param: str = "filters", depth: int = 0) -> Predicate:
    if not isinstance(value, dict):
        raise invalid_request(f"Invalid '{param}': expected an object.", param=param,
                              code="invalid_type")
    kind = value.get("type")
    if kind in COMPOUNDS and depth < MAX_DEPTH:
        parts = value.get("filters")
        if not isinstance(parts, list) or not parts:
            raise invalid_request(f"Invalid '{param}.filters': expected a non-empty array.",
                                  param=f"{param}.filters", code="invalid_value")
        compiled = [compile_filter(p, f"{param}.filters[{i}]", depth + 1)
                    for i, p in enumerate(parts)]
        combine = all if kind == "and" else any
        return lambda attrs: combine(p(attrs) for p in compiled)
    if kind not in COMPARISONS:
        raise invalid_request(
            f"Invalid '{param}.type': expected one of {', '.join(COMPARISONS + COMPOUNDS)}, "
            f"but got {kind!r}.", param=f"{param}.type", code="invalid_value")
    key, target = value.get("key"), value.get("value")
    if not isinstance(key, str):
        raise invalid_request(f"Missing required parameter: '{param}.key'.",
                              param=f"{param}.key", code="missing_required_parameter")
    scalar = (str, int, float, bool)
    if kind in ("in", "nin"):
        if not isinstance(target, list) or not all(isinstance(v, scalar) for v in target):
            raise invalid_request(f"Invalid '{param}.value': expected an array of strings, "
                                  "numbers or booleans.", param=f"{param}.value",
                                  code="invalid_type")
    elif not isinstance(target, scalar):
        raise invalid_request(f"Invalid '{param}.value': expected a string, number or boolean.",
                              param=f"{param}.value", code="invalid_type")
    return _comparison(kind, key, target)


def _comparison(kind: str, key: str, target: Any) -> Predicate:
    def test(attrs: Attributes) -> bool:
        if key not in attrs:
            return kind in ("ne", "nin")
        have = attrs[key]
        if kind == "eq":
            return _same(have, target)
        if kind == "ne":
            return not _same(have, target)
        if kind == "in":
            return any(_same(have, t) for t in target)
        if kind == "nin":
            return not any(_same(have, t) for t in target)
        if isinstance(have, bool) or isinstance(target, bool) or (
                isinstance(have, str) != isinstance(target, str)):
            return False  # ordering compares numbers with numbers, strings with strings
        return {"gt": have > target, "gte": have >= target,
                "lt": have < target, "lte": have <= target}[kind]

    return test


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) \
        else a == b

"""Pydantic's errors about a create body as OpenAI's 400s (:func:`from_validation`), and the
wording the create checks share (:func:`invalid_type`, :func:`unsupported`...).

A location maps onto OpenAI's ``param`` by dropping the ``~`` union tags
(translate/request_base.py).
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Tag, ValidationError
from pydantic.fields import FieldInfo

from responses_gateway.errors import (
    GatewayError,
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)
from responses_gateway.tools import registry

_TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a decimal",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}
_BOUNDS = {
    "greater_than_equal": ("below minimum", "below_min", ">="),
    "greater_than": ("below minimum", "below_min", ">"),
    "less_than_equal": ("above maximum", "above_max", "<="),
    "less_than": ("above maximum", "above_max", "<"),
}
# The declared constraint each error type broke.
_LIMITS = {
    "greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt",
    "string_too_long": "max_length", "too_long": "max_length",
    "string_too_short": "min_length", "too_short": "min_length",
    "string_pattern_mismatch": "pattern",
}
#: The input item types named when one is not supported: the server tools' that have a model
#: (tools/registry.py) among the rest.
_SUPPORTED_ITEMS = ", ".join(f"'{kind}'" for kind in (
    "message", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "reasoning",
    *(kind for kind, item in registry.ITEMS.items() if item.input_fields is not None),
    "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
    "local_shell_call", "local_shell_call_output", "computer_call", "computer_call_output",
    "tool_search_call", "tool_search_output", "item_reference", "compaction",
    "compaction_trigger", "configuration_update",
))


def from_validation(
    exc: ValidationError, model: type[BaseModel], at: tuple[Any, ...] = ()
) -> GatewayError:
    """Pydantic's first error as OpenAI's 400. Only the error's public ``type``, ``loc`` and
    ``input`` are read; limits and allowed values come from ``model``'s declarations at ``loc``
    (:func:`_declared`), lengths from the input: pydantic's ``ctx`` differs between versions
    (2.14 stopped reporting a dict's length: "got None properties"). ``at``: where ``model``
    sits in the body, for a part validated on its own (an input item: request_items.py)."""
    error = exc.errors(include_url=False)[0]
    kind, value = error["type"], error.get("input")
    inner = error["loc"]
    loc = at + inner
    param = _param(loc)
    if kind == "missing":
        return missing_parameter(param)
    if kind in _TYPE_NAMES or kind == "invalid_type":
        expected = _TYPE_NAMES.get(kind) or error["msg"]  # the message is ours (Discriminator)
        return invalid_type(param, expected, value)
    if kind == "union_tag_not_found":
        if not isinstance(value, dict):
            return invalid_type(param, "an object", value)
        return missing_parameter(f"{param}.type")
    if kind == "extra_forbidden":
        return invalid_request(f"Unknown parameter: '{param}'.", param=param,
                               code="unknown_parameter")
    if kind in ("invalid_value", "string_above_max_length"):  # our own PydanticCustomErrors
        return invalid_request(error["msg"], param=param, code=kind)
    if kind == "finite_number":
        return invalid_request(
            f"Invalid '{param}': expected a finite number.", param=param, code="invalid_value"
        )
    declared, constraints = _declared(model, inner)
    if kind == "union_tag_invalid":
        return _invalid_tag(param, loc, value, _tags(declared))
    if kind == "literal_error" and get_origin(declared) is Literal:
        return invalid_choice(param, tuple(str(v) for v in get_args(declared)), value)
    limit = _constraint(constraints, _LIMITS.get(kind, ""))
    if limit is None:
        return invalid_request(f"Invalid '{param}': {error['msg']}.", param=param)
    if kind in _BOUNDS:
        words, short, op = _BOUNDS[kind]
        number = "decimal" if isinstance(limit, float) else "integer"
        return invalid_request(
            f"Invalid '{param}': {number} {words} value. Expected a value {op} "
            f"{_num(limit)}, but got {_num(value)} instead.",
            param=param,
            code=f"{number}_{short}_value",
        )
    if kind in ("string_too_long", "string_too_short"):
        longer = kind == "string_too_long"
        return invalid_request(
            f"Invalid '{param}': string too {'long' if longer else 'short'}. Expected a string "
            f"with {'maximum' if longer else 'minimum'} length {limit}, but got a string with "
            f"length {len(value) if isinstance(value, str) else '?'} instead.",
            param=param,
            code=f"string_{'above_max' if longer else 'below_min'}_length",
        )
    if kind in ("too_long", "too_short"):
        longer = kind == "too_long"
        noun = "object" if isinstance(value, dict) else "array"
        unit = " properties" if noun == "object" else ""
        size = len(value) if isinstance(value, (dict, list)) else "?"
        return invalid_request(
            f"Invalid '{param}': {noun} too {'long' if longer else 'short'}. Expected an {noun} "
            f"with {'maximum' if longer else 'minimum'} length {limit}{unit}, but got "
            f"{size}{unit} instead.",
            param=param,
            code=f"{noun}_{'above_max' if longer else 'below_min'}_length",
        )
    return invalid_request(  # string_pattern_mismatch
        f"Invalid '{param}': string does not match pattern. Expected a string that matches "
        f"the pattern '{limit}'.",
        param=param,
        code="invalid_value",
    )


def unknown_item_type(index: int, value: Any) -> GatewayError:
    """An input item whose ``type`` the gateway does not take (request_items.py)."""
    return _invalid_tag(f"input[{index}]", ("input", "~list", index), value, [])


def _invalid_tag(param: str, loc: tuple[Any, ...], value: Any, tags: list[str]) -> GatewayError:
    tag = value.get("type") if isinstance(value, dict) else value
    type_param = f"{param}.type"
    if not isinstance(tag, str):  # quoted it read 'True', '1', '{}': Python's, not JSON's
        return invalid_type(type_param, "a string", tag)
    if loc[0] == "tools" and len(loc) == 2:
        supported = quoted(("function", "custom", "namespace", *registry.own_tool_types()))
        message = (
            f"Tool type '{tag}' is not supported by this gateway. Supported values are: "
            f"{supported} and OpenAI's hosted tools (left out for the model, or refused, as "
            f"GATEWAY_HOSTED_TOOLS says)."
        )
    elif loc[0] == "tool_choice" and len(loc) == 1:
        message = (
            f"Tool choice type '{tag}' is not supported by this gateway. Supported values "
            f"are: 'none', 'auto', 'required', a 'function' or 'allowed_tools'."
        )
    elif loc[0] == "input" and len(loc) == 3:
        message = (
            f"Input items of type '{tag}' are not supported by this gateway. Supported "
            f"values are: {_SUPPORTED_ITEMS}."
        )
    else:
        return invalid_choice(type_param, tuple(dict.fromkeys(tags)), tag)
    return invalid_request(message, param=type_param, code="invalid_value")


def _declared(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """The type ``model`` declares at an error's ``loc``, and the constraints declared on it
    (``annotated_types`` objects: ``MaxLen``, ``Ge``, ...; a ``pattern``); ``(None, [])``
    where the path leaves the declarations."""
    declared, constraints = _unwrap(model, [])
    for seg in loc:
        if isinstance(declared, type) and issubclass(declared, BaseModel):
            field = declared.model_fields.get(seg) or next(
                (f for f in declared.model_fields.values() if f.alias == seg), None)
            if field is None:
                return None, []
            declared, constraints = _unwrap(field.annotation, list(field.metadata))
        elif isinstance(seg, str) and seg.startswith("~"):
            arm = next((a for a in get_args(declared) if seg in _tags_of(a)), None)
            if arm is None:
                return None, []
            declared, constraints = _unwrap(arm, [])
        elif get_origin(declared) is list and isinstance(seg, int):
            declared, constraints = _unwrap(get_args(declared)[0], [])
        elif get_origin(declared) is dict and isinstance(seg, str):
            declared, constraints = _unwrap(get_args(declared)[1], [])
        else:
            return None, []
    return declared, constraints


def _unwrap(declared: Any, constraints: list[Any]) -> tuple[Any, list[Any]]:
    """``declared`` without ``Annotated`` (its constraints collected) or an ``| None``."""
    while True:
        if get_origin(declared) is Annotated:
            declared, *extras = get_args(declared)
            for extra in extras:
                constraints.extend(extra.metadata if isinstance(extra, FieldInfo) else [extra])
        elif get_origin(declared) in (Union, UnionType) and type(None) in get_args(declared):
            arms = [arm for arm in get_args(declared) if arm is not type(None)]
            declared = arms[0] if len(arms) == 1 else Union[tuple(arms)]  # noqa: UP007
        else:
            return declared, constraints


def _tags_of(arm: Any) -> list[str]:
    extras = get_args(arm)[1:] if get_origin(arm) is Annotated else ()
    return [extra.tag for extra in extras if isinstance(extra, Tag)]


def _tags(union: Any) -> list[str]:
    """A tagged union's tags as a client writes them (no ``~``)."""
    return [tag.removeprefix("~") for arm in get_args(union) for tag in _tags_of(arm)]


def _constraint(constraints: list[Any], name: str) -> Any:
    """The declared value of one constraint (``max_length``, ``ge``, ``pattern``...)."""
    found = (getattr(c, name, None) for c in constraints)
    return next((value for value in found if value is not None), None)


def unsupported(param: str, message: str) -> GatewayError:
    """A parameter OpenAI accepts that this gateway cannot honour."""
    return invalid_request(message, param=param, code="unsupported_parameter")


def _param(loc: tuple[Any, ...]) -> str:
    """``('input', '~list', 2, '~message', 'content')`` -> ``input[2].content``."""
    out = ""
    for seg in loc:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif not str(seg).startswith("~"):
            out += f".{seg}" if out else str(seg)
    return out


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def quoted(values: tuple[str, ...]) -> str:
    """``'a', 'b', 'c'``: allowed values as a message lists them."""
    return ", ".join(f"'{v}'" for v in values)


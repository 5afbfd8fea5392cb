"""Strict check of a Converse request as it went over the wire, against botocore's own model.

botocore validates parameters before sending; this checks what arrived at the fake (the JSON
body, blobs base64-encoded): every key is a member of its structure, no member is unknown,
required members are there, enum strings are among the model's values. A field Bedrock would
refuse (a misspelt ``serviceTier``, a ``ttl`` it does not know) fails here.
"""

from __future__ import annotations

from typing import Any

import botocore.session

_MODEL: Any = None


def _model() -> Any:
    global _MODEL
    if _MODEL is None:
        _MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
    return _MODEL


def assert_valid_converse(body: dict[str, Any], operation: str = "converse-stream") -> None:
    name = "ConverseStream" if operation == "converse-stream" else "Converse"
    shape = _model().operation_model(name).input_shape
    # modelId travels in the URL path, not the body.
    _check(body, shape, "", skip={"modelId"})


def _check(value: Any, shape: Any, path: str, skip: frozenset[str] | set[str] = frozenset()
           ) -> None:
    kind = shape.type_name
    if getattr(shape, "is_document_type", False):
        return  # free-form JSON (a tool's input schema)
    if kind == "structure":
        assert isinstance(value, dict), f"{path or 'body'}: expected an object, got {value!r}"
        unknown = set(value) - set(shape.members)
        assert not unknown, f"{path or 'body'}: unknown member(s) {sorted(unknown)}"
        missing = set(shape.required_members) - set(value) - set(skip)
        assert not missing, f"{path or 'body'}: missing required {sorted(missing)}"
        for key, item in value.items():
            _check(item, shape.members[key], f"{path}.{key}" if path else key)
    elif kind == "list":
        assert isinstance(value, list), f"{path}: expected a list"
        for i, item in enumerate(value):
            _check(item, shape.member, f"{path}[{i}]")
    elif kind == "map":
        assert isinstance(value, dict), f"{path}: expected a map"
    elif kind == "string":
        assert isinstance(value, str), f"{path}: expected a string, got {value!r}"
        enum = getattr(shape, "enum", None)
        assert not enum or value in enum, f"{path}: {value!r} is not one of {enum}"

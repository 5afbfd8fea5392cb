"""The request's ``code_interpreter`` tool, checked once with OpenAI's words and params.

``container`` is required: a container's id (``cntr_…``, made by ``POST /v1/containers`` or an
earlier ``auto``), or ``{"type": "auto", "file_ids": [...], "memory_limit": "1g"|"4g"|"16g"|
"64g", "network_policy": ...}``: a container made on first use, holding those files. The
gateway's containers have no network, so a ``network_policy`` other than ``disabled`` is
refused rather than silently not honoured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from responses_gateway.containers.models import MAX_FILE_IDS, MEMORY_LIMITS
from responses_gateway.errors import (
    array_too_long,
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)
from responses_gateway.tools.server import tool_fields


@dataclass(frozen=True, slots=True)
class ContainerParams:
    """What the client asked of the tool's container."""

    param: str = "tools[0]"  # where the tool sits in the request, for a 400's param
    container_id: str | None = None  # an explicit container; None: ``auto``
    file_ids: tuple[str, ...] = ()
    memory_limit: str | None = None
    echo: Any = field(default=None, compare=False)  # ``container`` as sent

    @property
    def auto(self) -> bool:
        return self.container_id is None

    @classmethod
    def of(cls, tool: Any, param: str) -> ContainerParams:
        fields = tool_fields(tool)
        where = f"{param}.container"
        container = fields.get("container")
        if container is None:
            raise missing_parameter(where)
        if isinstance(container, str):
            if not container.strip():
                raise invalid_request(f"Invalid '{where}': empty string. Expected a container "
                                      f"id or an object.", param=where, code="invalid_value")
            return cls(param, container_id=container, echo=container)
        if not isinstance(container, Mapping):
            raise invalid_type(where, "a string or an object", container)
        kind = container.get("type")
        if kind is None:
            raise missing_parameter(f"{where}.type")
        if kind != "auto":
            raise invalid_choice(f"{where}.type", ("auto",), kind)
        unknown = sorted(set(container) - {"type", "file_ids", "memory_limit", "network_policy"})
        if unknown:
            raise invalid_request(f"Unknown parameter: '{where}.{unknown[0]}'.",
                                  param=f"{where}.{unknown[0]}", code="unknown_parameter")
        return cls(param, file_ids=_file_ids(container.get("file_ids"), f"{where}.file_ids"),
                   memory_limit=_memory_limit(container.get("memory_limit"),
                                              f"{where}.memory_limit"),
                   echo=dict(container))._checked_network(container.get("network_policy"),
                                                           f"{where}.network_policy")

    def _checked_network(self, policy: Any, where: str) -> ContainerParams:
        if policy is None:
            return self
        if not isinstance(policy, Mapping):
            raise invalid_type(where, "an object", policy)
        if "type" not in policy:
            raise missing_parameter(f"{where}.type")
        kind = policy["type"]
        if kind == "disabled":
            return self
        if kind == "allowlist":
            raise invalid_request(
                "This gateway's containers have no network access: only a network_policy of "
                "type 'disabled' is supported.", param=f"{where}.type", code="invalid_value")
        raise invalid_choice(f"{where}.type", ("disabled", "allowlist"), kind)

    def to_record(self) -> dict[str, Any]:
        data = asdict(self)
        data["file_ids"] = list(self.file_ids)
        data.pop("echo", None)
        return data

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> ContainerParams:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "echo"}
        known["file_ids"] = tuple(known.get("file_ids") or ())
        return cls(**known)


def _file_ids(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid_type(where, "an array", value)
    if len(value) > MAX_FILE_IDS:
        raise array_too_long(where, MAX_FILE_IDS, len(value))
    for index, file_id in enumerate(value):
        if not isinstance(file_id, str):
            raise invalid_type(f"{where}[{index}]", "a string", file_id)
    return tuple(dict.fromkeys(value))


def _memory_limit(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in MEMORY_LIMITS:
        raise invalid_choice(where, MEMORY_LIMITS, value)
    return str(value)


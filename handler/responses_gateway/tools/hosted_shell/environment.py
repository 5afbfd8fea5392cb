"""Which ``shell`` tools are hosted, and the container their environment names.

A ``shell`` tool param whose ``environment`` is ``container_auto`` or ``container_reference``
is hosted shell's (:func:`in_container`, the registration's ``serves``); any other (none,
``local``) is the client's. This module is imported with the first request naming a
``shell`` tool: it holds nothing heavy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from responses_gateway.errors import invalid_request, missing_parameter

AUTO, REFERENCE = "container_auto", "container_reference"
CONTAINERS = (AUTO, REFERENCE)
#: OpenAI's ``memory_limit`` values for an auto container
MEMORY_LIMITS = ("1g", "4g", "16g", "64g")


def _field(value: Any, name: str) -> Any:
    """A field of the tool param (a model keeps unknown fields as extras) or of a dict."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def in_container(tool: Any) -> bool:
    """The ``shell`` tool param runs in a container (hosted shell), not on the client."""
    environment = _field(tool, "environment")
    return isinstance(environment, Mapping) and environment.get("type") in CONTAINERS


@dataclass
class Environment:
    """The request's container environment, as the tool keeps it (JSON-safe)."""

    auto: bool
    #: the referenced container, or (auto) the one made or found for this response
    container_id: str | None = None
    file_ids: list[str] = field(default_factory=list)
    memory_limit: str | None = None

    @classmethod
    def of(cls, tool: Any, param: str) -> Environment:
        """The environment of a hosted ``shell`` param; a malformed one is OpenAI's 400
        naming ``param`` (``tools[i].environment``)."""
        raw = _field(tool, "environment")
        assert isinstance(raw, Mapping)
        if raw.get("type") == REFERENCE:
            container_id = raw.get("container_id")
            if container_id is None:
                raise missing_parameter(f"{param}.container_id")
            if not isinstance(container_id, str) or not container_id:
                raise invalid_request(f"Invalid '{param}.container_id': expected a container "
                                      f"id.", param=f"{param}.container_id",
                                      code="invalid_type")
            return cls(auto=False, container_id=container_id)
        file_ids = raw.get("file_ids") or []
        if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
            raise invalid_request(f"Invalid '{param}.file_ids': expected an array of file ids.",
                                  param=f"{param}.file_ids", code="invalid_type")
        memory = raw.get("memory_limit")
        if memory is not None and memory not in MEMORY_LIMITS:
            raise invalid_request(
                f"Invalid '{param}.memory_limit': expected one of "
                f"{', '.join(repr(m) for m in MEMORY_LIMITS)}.",
                param=f"{param}.memory_limit", code="invalid_value")
        policy = raw.get("network_policy")
        if policy is not None and _field(policy, "type") != "disabled":
            raise invalid_request(
                f"'{param}.network_policy' other than 'disabled' is not supported by this "
                f"gateway: its containers have no network.",
                param=f"{param}.network_policy", code="invalid_value")
        if raw.get("skills"):
            raise invalid_request(f"'{param}.skills' is not supported by this gateway.",
                                  param=f"{param}.skills", code="invalid_value")
        return cls(auto=True, file_ids=list(file_ids), memory_limit=memory)


def container_of(item: Mapping[str, Any]) -> str | None:
    """The container a ``shell_call`` item ran in (hosted shell's say so in ``environment``:
    ``container_reference``, even for an auto container), else None (the client's)."""
    environment = item.get("environment")
    if isinstance(environment, Mapping) and environment.get("type") == REFERENCE:
        container_id = environment.get("container_id")
        return container_id if isinstance(container_id, str) and container_id else None
    return None

"""The request's ``web_search`` tool checked with OpenAI's words and params, before the model
runs: the request models keep a hosted tool as sent, and tool.py's :class:`Options` reads only
what it can use, so without this a wrong value (``search_context_size: "huge"``, a
``user_location`` that is a string, ``allowed_domains: "a.com"``) was accepted and dropped.

The fields and values are openai-python 3.57's ``WebSearchToolParam`` and
``WebSearchPreviewToolParam``; ``allowed_domains`` holds up to 100 domains, as OpenAI documents.
A null stays what it is to the gateway: the field left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from responses_gateway.errors import (
    array_too_long,
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)
from responses_gateway.tools.server import tool_fields

CONTEXT_SIZES = ("low", "medium", "high")
CONTENT_TYPES = ("text", "image")
LOCATION_FIELDS = ("city", "country", "region", "timezone")
MAX_DOMAINS = 100


def check(tool: Any, param: str) -> None:
    """``tool``'s fields, each a 400 naming ``param.<field>`` when it is not what OpenAI
    takes."""
    fields = tool_fields(tool)
    size = fields.get("search_context_size")
    if size is not None and size not in CONTEXT_SIZES:
        raise invalid_choice(f"{param}.search_context_size", CONTEXT_SIZES, size)
    external = fields.get("external_web_access")
    if external is not None and not isinstance(external, bool):
        raise invalid_type(f"{param}.external_web_access", "a boolean", external)
    _location(fields.get("user_location"), f"{param}.user_location",
              str(fields.get("type", "")).startswith("web_search_preview"))
    _filters(fields.get("filters"), f"{param}.filters")
    types = fields.get("search_content_types")
    if types is not None:
        where = f"{param}.search_content_types"
        if not isinstance(types, list):
            raise invalid_type(where, "an array", types)
        for index, kind in enumerate(types):
            if kind not in CONTENT_TYPES:
                raise invalid_choice(f"{where}[{index}]", CONTENT_TYPES, kind)


def _location(where: Any, param: str, preview: bool) -> None:
    """A location's ``type`` is required of the preview tool, optional of ``web_search``."""
    if where is None:
        return
    if not isinstance(where, Mapping):
        raise invalid_type(param, "an object", where)
    kind = where.get("type")
    if kind is None and preview:
        raise missing_parameter(f"{param}.type")
    if kind is not None and kind != "approximate":
        raise invalid_choice(f"{param}.type", ("approximate",), kind)
    for name in LOCATION_FIELDS:
        value = where.get(name)
        if value is not None and not isinstance(value, str):
            raise invalid_type(f"{param}.{name}", "a string", value)


def _filters(filters: Any, param: str) -> None:
    if filters is None:
        return
    if not isinstance(filters, Mapping):
        raise invalid_type(param, "an object", filters)
    domains = filters.get("allowed_domains")
    if domains is None:
        return
    where = f"{param}.allowed_domains"
    if not isinstance(domains, list):
        raise invalid_type(where, "an array", domains)
    if len(domains) > MAX_DOMAINS:
        raise array_too_long(where, MAX_DOMAINS, len(domains))
    for index, domain in enumerate(domains):
        if not isinstance(domain, str):
            raise invalid_type(f"{where}[{index}]", "a string", domain)
        if not domain_of(domain):  # "", "  ", "https://": no domain, and no filter left
            raise invalid_request(
                f"Invalid '{where}[{index}]': expected a domain such as 'openai.com', but got "
                f"'{domain[:100]}'.", param=f"{where}[{index}]", code="invalid_value")


def domain_of(text: str) -> str:
    """The domain an ``allowed_domains`` entry names: no scheme, path, ``www.`` or case."""
    text = text.strip().lower()
    text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text)
    return text.split("/", 1)[0].removeprefix("www.").rstrip(".")


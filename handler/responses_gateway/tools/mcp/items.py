"""MCP's items a client sends back as input (``REGISTRATION``, tools/mcp/__init__.py): their
fields, which translate/request_items.py makes into the items' models. Imported with the
request models, on the first create."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

Fields = dict[str, tuple[Any, Any]]

LIST_TOOLS: Fields = {
    "server_label": (str, ...),
    "tools": (list[dict[str, Any]], ...),
    "error": (str | None, None),
}
CALL: Fields = {
    "server_label": (str, ...),
    "name": (str, ...),
    "arguments": (str, ...),
    "output": (str | None, None),
    "error": (Any, None),
    "status": (Literal["in_progress", "completed", "incomplete", "calling", "failed"] | None,
               None),
    "approval_request_id": (str | None, None),
}
APPROVAL_REQUEST: Fields = {
    "server_label": (str, ...),
    "name": (str, ...),
    "arguments": (str, ...),
}
APPROVAL_RESPONSE: Fields = {
    "approval_request_id": (str, Field(min_length=1)),
    "approve": (bool, ...),
    "reason": (str | None, None),
}

"""The create body as the rest of the gateway calls it: validation loaded on first use.

:func:`parse_create_request` and :func:`normalize_input` are request_models.py's, imported on
the first call: pydantic and the request's 65 model classes are most of an entry point's
cold import, and the worker Lambda, the WebSocket API's connect and disconnect and every
route but create and its kin never validate a create body (tests/test_entry_imports.py).
After the first call each costs one module lookup.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest


def parse_create_request(
    body: Any, *, hosted_tools: str = "reject", served: Collection[str] = ()
) -> CreateResponseRequest:
    """request_models.parse_create_request: a 400 naming the param for any problem."""
    from responses_gateway.translate import request_models

    return request_models.parse_create_request(body, hosted_tools=hosted_tools, served=served)


def normalize_input(req: CreateResponseRequest) -> list[dict[str, Any]]:
    """request_models.normalize_input: this turn's input as stored Responses items."""
    from responses_gateway.translate import request_models

    return request_models.normalize_input(req)

"""The create body as the rest of the gateway calls it: validation loaded on first use.

:func:`parse_create_request` and :func:`normalize_input` are request_models.py's, imported on
the first call: pydantic and the request's 65 model classes are most of an entry point's
cold import, and the worker Lambda, the WebSocket API's connect and disconnect and every
route but create and its kin never validate a create body (tests/test_entry_imports.py).
After the first call each costs one module lookup.

:func:`read_create` is both, off the event loop for a heavy body (heavy.py): validating and
normalizing costs ~18 µs per input item or content part, so a body near
``GATEWAY_MAX_BODY_BYTES`` (20 MB of small messages: ~175,000 items) held the loop ~2.8 s,
stalling every other tenant's streams. A light body (~5 ms at most) stays on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from responses_gateway.heavy import heavy_items

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


def heavy(body: Any) -> bool:
    """Whether validating ``body`` may hold the event loop: its input items, entries of their
    lists and tools are :func:`~responses_gateway.heavy.heavy_items`."""
    if not isinstance(body, dict):
        return False
    tools = body.get("tools")
    return heavy_items(body.get("input"), len(tools) if isinstance(tools, list) else 0)


def _read(body: Any, hosted_tools: str, served: Collection[str],
          ) -> tuple[CreateResponseRequest, list[dict[str, Any]]]:
    req = parse_create_request(body, hosted_tools=hosted_tools, served=served)
    return req, normalize_input(req)


async def read_create(
    body: Any, *, hosted_tools: str = "reject", served: Collection[str] = ()
) -> tuple[CreateResponseRequest, list[dict[str, Any]], bool]:
    """:func:`parse_create_request` and :func:`normalize_input` of ``body``; in a worker
    thread when it is :func:`heavy`, so the event loop goes on serving meanwhile. Its weight
    comes back too: what walks the input next (the store's size check) asks no one again."""
    if heavy(body):
        return *await asyncio.to_thread(_read, body, hosted_tools, served), True
    return *_read(body, hosted_tools, served), False

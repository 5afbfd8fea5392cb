"""What came before this turn's input: earlier responses in a chain, and referenced items.

Both read the store for the tenant only: an id of another tenant is not found, exactly like
an id that never existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from responses_gateway.errors import invalid_request, not_found
from responses_gateway.store.base import Store, StoredResponse
from responses_gateway.translate.sealing import with_sealed_reasoning

#: ``item_reference`` inputs one request may hold (each is a store lookup).
MAX_ITEM_REFERENCES = 1000


async def resolve_references(
    store: Store, items: list[dict[str, Any]], tenant: str, param: str = "input"
) -> list[dict[str, Any]]:
    """``item_reference`` inputs replaced by the stored items they name, in a new list (the
    same one when there are none); ``param``: the field the items came in (a conversation's
    are ``items``), which a refusal names."""
    wanted = [item["id"] for item in items if item.get("type") == "item_reference"]
    if not wanted:
        return items
    if len(set(wanted)) > MAX_ITEM_REFERENCES:
        raise invalid_request(
            f"Too many item references: {len(set(wanted))}; at most {MAX_ITEM_REFERENCES} "
            "per request.",
            param=param,
        )
    found = await store.get_items(wanted, tenant)
    resolved = []
    for index, item in enumerate(items):
        if item.get("type") != "item_reference":
            resolved.append(item)
        elif item["id"] in found:
            resolved.append(found[item["id"]])
        else:
            raise not_found(f"Item with id '{item['id']}' not found.", param=f"{param}[{index}]")
    return resolved


async def chain(
    store: Store,
    previous_id: str | None,
    tenant: str,
    cached: Mapping[str, StoredResponse] | None = None,
) -> list[dict[str, Any]]:
    """Inputs and outputs of every earlier turn, oldest first (instructions not inherited).

    ``cached``: responses a WebSocket connection holds, found before the store (they may be
    ``store: false``).
    """
    records: list[StoredResponse] = []
    seen: set[str] = set()
    while previous_id and previous_id not in seen:
        seen.add(previous_id)
        record = cached.get(previous_id) if cached else None
        if record is None:
            record = await store.get(previous_id, tenant)
        if record is None:
            # OpenAI answers 400 here, not 404 (the id is a parameter, not the resource).
            raise invalid_request(
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        records.append(record)
        previous_id = record.previous_response_id
    history: list[dict[str, Any]] = []
    for record in reversed(records):
        history.extend(record.input_items)
        history.extend(with_sealed_reasoning(record.response.get("output", ()),
                                             record.request.get("sealed_reasoning") or {}))
    return history

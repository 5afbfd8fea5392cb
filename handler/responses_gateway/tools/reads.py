"""What server tools' calls gave the model, kept past their response (issues 30, 31).

A ``web_search_call`` or ``file_search_call`` item says what was done (the query, the
sources); the text the model read (the results, a page, the passages) is the tool's ``reads``
(tools/server.py). When a response ends, :func:`keep` keeps them by tenant and call id in this
process (bounded, oldest forgotten first) and, for a stored response, in the store with it
(``Store.put_tool_reads``: deleted and expiring with the response; nothing for ``store:
false``, as OpenAI keeps nothing then). Before a request's history is rendered, :func:`gather`
finds the reads of the calls it holds (``previous_response_id`` chain, conversation, items
given back in ``input``): this process's first, the rest in one store call, the request's
tenant's only, so a follow-up in another process (another Lambda instance, the background
worker, a restarted gateway) gives the model back what it read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from responses_gateway.store.base import Store, StoredResponse, StoreUnavailable
from responses_gateway.tools.registry import READ_ITEM_TYPES, ServerTools

logger = logging.getLogger("responses_gateway")


class ReadOutputs:
    """What the model read of tools' calls, kept in this process past their responses, by
    tenant and call id; bounded in entries and, with ``most_bytes`` at ``keep``, in UTF-8
    bytes, oldest forgotten first (the newest is always kept)."""

    def __init__(self, most: int = 4096) -> None:
        self._read: dict[tuple[str, str], str] = {}
        self._most = most
        self._bytes = 0

    def keep(self, tenant: str, item_id: str, output: str, most_bytes: int | None = None
             ) -> None:
        self._drop((tenant, item_id))
        size = len(output.encode())
        while self._read and (len(self._read) >= self._most or (
                most_bytes is not None and self._bytes + size > most_bytes)):
            self._drop(next(iter(self._read)))
        self._read[tenant, item_id] = output
        self._bytes += size

    def get(self, tenant: str, item_id: str) -> str | None:
        return self._read.get((tenant, item_id))

    def _drop(self, key: tuple[str, str]) -> None:
        gone = self._read.pop(key, None)
        if gone is not None:
            self._bytes -= len(gone.encode())


#: Reads kept in this process, by (tenant, call id).
KEPT = ReadOutputs()


async def gather(
    store: Store | None, tenant: str, items: Iterable[Mapping[str, Any]],
    most_bytes: int | None = None, *, heavy: bool,
) -> dict[str, str]:
    """The reads of the server-tool calls among ``items`` that are kept, by call id; what
    this process lacks is asked of ``store`` in one call (and kept here, within
    ``most_bytes``). No call among them, no store call. ``heavy``: the items' weight as their
    caller decided it (heavy.py): then they are walked in a worker thread (~35 ms for
    175,000)."""
    wanted = await asyncio.to_thread(_call_ids, items) if heavy else _call_ids(items)
    found: dict[str, str] = {}
    missing = []
    for call_id in wanted:
        text = KEPT.get(tenant, call_id)
        if text is None:
            missing.append(call_id)
        else:
            found[call_id] = text
    if missing and store is not None:
        fetched = await store.get_tool_reads(tenant, missing)
        for call_id, text in fetched.items():
            KEPT.keep(tenant, call_id, text, most_bytes)
        found.update(fetched)
    return found


def _call_ids(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ids of the server-tool calls among ``items``, once each, in order."""
    return list(dict.fromkeys(
        item["id"] for item in items
        if isinstance(item, Mapping) and item.get("type") in READ_ITEM_TYPES
        and isinstance(item.get("id"), str)))


async def keep(
    store: Store, record: StoredResponse, tools: ServerTools | None, *, stored: bool,
    most_bytes: int | None = None,
) -> None:
    """A response's reads kept as it is persisted (before its record is written): in this
    process, and with a stored response in ``store``. A response that ran no server tool's
    call costs nothing. A store failure here is logged and the response goes on (a later
    request in another process then reads the items' summaries)."""
    reads = tools.reads() if tools is not None else None
    if not reads:
        return
    for call_id, text in reads.items():
        KEPT.keep(record.tenant, call_id, text, most_bytes)
    if not stored:
        return
    try:
        await store.put_tool_reads(record.tenant, record.id, dict(reads),
                                   expires_at=record.expires_at)
    except StoreUnavailable as exc:
        logger.warning("the tool reads of %d call(s) of response %s were not stored: %s; a "
                       "later request in another process reads their items' summaries",
                       len(reads), record.id, exc.detail)

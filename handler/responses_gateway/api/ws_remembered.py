"""What a WebSocket connection remembers for continuations: each lane's most recent response.

OpenAI keeps connection-local state in memory so that a continuation (``previous_response_id``)
needs no store, which is what makes ``store: false`` chains work over a socket; it keeps the
most recent response, and a lane (``stream_id``) may fork from another lane's. So here: per
lane, the most recent response that ended well, nothing older. Memory per connection is then
bounded by the number of lanes (``GATEWAY_WS_MAX_STREAMS``) and by a byte bound
(``GATEWAY_WS_MAX_REMEMBERED_BYTES``) over all of them: past it the lanes remembered
longest ago are forgotten, and a response larger than the whole bound is not remembered.

A remembered response is *flattened*: it carries the history it continued (the turn before
it, already flattened, with its output) in its input items, and points back only to a
response that was not remembered here (the store has it, or none). Forgetting a response
therefore never breaks the chains that grew from it.

A remembered record holds its whole history twice (its items and its chat body), so its size
is counted a piece at a time, and for a heavy one in a worker thread (:meth:`Remembered.keep`):
one encode of it whole (45 MB at a 175,000-item history) held the event loop ~43 ms a turn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator, Mapping

import orjson

from responses_gateway.heavy import heavy_items
from responses_gateway.store.base import StoredResponse
from responses_gateway.translate.sealing import with_sealed_reasoning

Lane = str | None


class Remembered(Mapping[str, StoredResponse]):
    """Lanes' most recent responses, found by response id (a ``cached`` mapping for
    :meth:`Gateway.new_job`)."""

    def __init__(self, max_bytes: int = 0,
                 lanes: Mapping[Lane, StoredResponse] | None = None) -> None:
        self.max_bytes = max_bytes  # 0: no bound
        self.bytes = 0
        self._lanes: OrderedDict[Lane, tuple[StoredResponse, int]] = OrderedDict()
        for lane, record in (lanes or {}).items():
            self.put(lane, record)

    # -- Mapping: response id -> record --

    def __getitem__(self, response_id: str) -> StoredResponse:
        for record, _ in self._lanes.values():
            if record.id == response_id:
                return record
        raise KeyError(response_id)

    def __iter__(self) -> Iterator[str]:
        return (record.id for record, _ in self._lanes.values())

    def __len__(self) -> int:
        return len(self._lanes)

    # -- lanes --

    def lanes(self) -> list[Lane]:
        return list(self._lanes)

    async def keep(self, lane: Lane, record: StoredResponse) -> list[Lane]:
        """:meth:`put`, a heavy record's size counted in a worker thread."""
        heavy = heavy_items(record.input_items)
        size = await asyncio.to_thread(_size, record) if heavy else _size(record)
        return self.put(lane, record, size)

    def put(self, lane: Lane, record: StoredResponse, size: int | None = None) -> list[Lane]:
        """``record`` is ``lane``'s most recent response; the lanes forgotten to make room
        (``lane`` itself when ``record`` alone is over the bound). ``size``: its
        :func:`_size`, when counted already."""
        self._drop(lane)
        size = _size(record) if size is None else size
        if self.max_bytes and size > self.max_bytes:
            return [lane]
        forgotten: list[Lane] = []
        while self.max_bytes and self._lanes and self.bytes + size > self.max_bytes:
            oldest = next(iter(self._lanes))
            self._drop(oldest)
            forgotten.append(oldest)
        self._lanes[lane] = (record, size)
        self.bytes += size
        return forgotten

    def forget(self, response_id: str) -> list[Lane]:
        """Forget ``response_id`` (a failed continuation named it); the lane that held it."""
        for lane, (record, _) in list(self._lanes.items()):
            if record.id == response_id:
                self._drop(lane)
                return [lane]
        return []

    def _drop(self, lane: Lane) -> None:
        entry = self._lanes.pop(lane, None)
        if entry is not None:
            self.bytes -= entry[1]


def flattened(record: StoredResponse, base: StoredResponse | None) -> StoredResponse:
    """``record`` carrying the history of ``base``, the remembered response it continued."""
    if base is None:
        return record
    history = [
        *base.input_items,
        *with_sealed_reasoning(base.response.get("output", ()),
                               base.request.get("sealed_reasoning") or {}),
    ]
    return record.replace(input_items=[*history, *record.input_items],
                          previous_response_id=base.previous_response_id)


def _size(record: StoredResponse) -> int:
    """Bytes a record holds, as JSON (what it costs in memory, within a small factor): its
    Response, its request without the chat body's messages, then each message and each input
    item alone, so no one encode is long."""
    request = record.request
    chat = request.get("chat")
    messages = chat.get("messages") if isinstance(chat, dict) else None
    if isinstance(messages, list):
        request = {**request, "chat": {**chat, "messages": []}}
    else:
        messages = []
    return (len(orjson.dumps([record.response, request]))
            + sum(len(orjson.dumps(m)) for m in messages)
            + sum(len(orjson.dumps(i)) for i in record.input_items))

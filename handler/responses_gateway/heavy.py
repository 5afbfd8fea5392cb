"""Whether work over a list of items (input items, chat messages) is too long for the event loop.

The gateway's rule: CPU-heavy or size-unbounded work never runs on the event loop, where one
blocked request stalls every tenant's streams. What a request carries is walked in Python
several times (validated, normalized, rendered for the model, prepared for the upstream), at
a few microseconds an item or content part each: a body near ``GATEWAY_MAX_BODY_BYTES`` (20 MB
of small messages, ~175,000 items) held the loop for seconds. Such work runs in a worker thread
(``asyncio.to_thread``) when its items are :func:`heavy_items`; a light list (nearly every
request) stays on the loop, where a thread hop (~100-170 µs) would cost more than the work.
Each stage says so itself, ``await asyncio.to_thread(work, ...) if heavy else work(...)``:
the work and the choice stay with the stage that owns them (a helper taking the work as a
callback sent every stage's data down to this bottom module and back up again).

:func:`heavy_json` asks the same of any JSON value that is walked whole (a stored record's
strings moved to blobs and back: store/blobs.py): its entries, and its strings' characters
(hashed, encoded), counted up to :data:`HEAVY_NODES` and :data:`HEAVY_CHARS`.
"""

from __future__ import annotations

from typing import Any

#: items and entries of their lists (content parts, outputs) past which work over them leaves
#: the loop: a few milliseconds of it at most stays there
HEAVY_ENTRIES = 256
#: entries of a JSON value's objects and arrays, and characters of its strings, past which a
#: walk over it leaves the loop (~1 µs an entry: ~4 ms; ~1 MB hashed and encoded: ~3 ms)
HEAVY_NODES = 4096
HEAVY_CHARS = 1024 * 1024


def heavy_items(items: Any, count: int = 0) -> bool:
    """Whether ``items`` (a list of dicts: input items, raw or normalized, or chat messages),
    with ``count`` entries besides, hold more than :data:`HEAVY_ENTRIES` items and entries of
    their lists. Counted only up to the bound, so telling costs microseconds."""
    for item in items if isinstance(items, list) else ():
        count += 1
        if isinstance(item, dict):
            count += sum(len(v) for v in item.values() if isinstance(v, list))
        if count > HEAVY_ENTRIES:
            return True
    return count > HEAVY_ENTRIES


def heavy_json(*values: Any) -> bool:
    """Whether walking ``values`` whole is too long for the event loop: more than
    :data:`HEAVY_NODES` entries of their objects and arrays, or :data:`HEAVY_CHARS`
    characters of their strings. Counted only up to the bounds."""
    stack = list(values)
    entries = chars = 0
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            chars += len(value)
            if chars > HEAVY_CHARS:
                return True
        elif isinstance(value, dict | list):
            entries += len(value)
            if entries > HEAVY_NODES:
                return True
            stack.extend(value.values() if isinstance(value, dict) else value)
    return False

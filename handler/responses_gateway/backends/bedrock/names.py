"""Tool names and tool-call ids in the shapes Bedrock accepts, reversibly per request.

Bedrock checks server-side that tool names match ``[a-zA-Z0-9_-]{1,64}`` and ``toolUseId``
matches ``[a-zA-Z0-9_.:-]{1,64}`` and is unique within an assistant turn; OpenAI allows more.
Conforming values (including Bedrock's own ``tooluse_…`` ids) pass through unchanged so round
trips are the identity; others get a deterministic rewrite, and renamed tools are mapped back
on the way out.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque

_NAME_OK = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_-]")
_ID_OK = re.compile(r"[a-zA-Z0-9_.:-]{1,64}")
_ID_BAD = re.compile(r"[^a-zA-Z0-9_.:-]")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


class ToolNames:
    """Client tool name <-> Bedrock tool name, unique on the Bedrock side."""

    def __init__(self) -> None:
        self.to_bedrock: dict[str, str] = {}
        self.from_bedrock: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        known = self.to_bedrock.get(name)
        if known is not None:
            return known
        if _NAME_OK.fullmatch(name):
            candidate = name
        else:
            cleaned = _NAME_BAD.sub("_", name)[:51] or "tool"
            candidate = f"{cleaned}_{_digest(name)}"
        while candidate in self.from_bedrock:  # a conforming name already took it
            candidate = f"{candidate[:51]}_{_digest(candidate)}"
        self.to_bedrock[name] = candidate
        self.from_bedrock[candidate] = name
        return candidate

    def renamed(self) -> dict[str, str]:
        """Bedrock name -> client name, only where they differ (what the stream needs)."""
        return {b: c for b, c in self.from_bedrock.items() if b != c}


def normalise_id(call_id: str) -> str:
    if _ID_OK.fullmatch(call_id):
        return call_id
    return f"{_ID_BAD.sub('_', call_id)[:47]}_{_digest(call_id)}"


class CallIds:
    """Maps tool-call ids of one conversation; tool results look up the id their call got.

    Duplicate ids inside one assistant turn get suffixes; results that repeat such an id are
    matched to the calls in order.
    """

    def __init__(self) -> None:
        self._by_original: dict[str, deque[str]] = {}
        self._turn: set[str] = set()
        self.names: dict[str, str] = {}  # original id -> tool name, for flattened history
        self._blank = 0

    def new_turn(self) -> None:
        """Results only ever answer the assistant turn right before them."""
        self._turn = set()
        self._by_original = {}

    def for_call(self, original: str, name: str) -> str:
        if not original:
            self._blank += 1
            nid = f"call_blank_{self._blank}"
        else:
            nid = normalise_id(original)
        base, n = nid, 1
        while nid in self._turn:
            n += 1
            nid = f"{base[:58]}_{n}"
        self._turn.add(nid)
        queue = self._by_original.setdefault(original, deque())
        queue.append(nid)
        self.names[original] = name
        return nid

    def for_result(self, original: str) -> str:
        queue = self._by_original.get(original)
        if not queue:
            return normalise_id(original) if original else "call_blank_0"
        return queue.popleft() if len(queue) > 1 else queue[0]

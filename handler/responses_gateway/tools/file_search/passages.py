"""What a search returns, what the model reads, and the citations of what it writes.

Each passage a response's searches return gets the next number, and the model reads it as
``[^n]`` with its file's name: it is asked to cite a passage by writing that marker after the
statement it supports. When a text part of its answer closes, every marker ``[^n]`` naming a
passage of this response becomes a ``file_citation`` annotation (``file_id``, ``filename``,
``index`` = where the marker starts, i.e. right after the cited words). A marker naming no
passage is left alone: no citation is ever made up.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MARKER = re.compile(r"\[\^(\d{1,5})\]")
CITE = ("Cite each passage you use by writing its marker, e.g. [^1], right after the "
        "statement it supports. Use only these passages' markers.")


@dataclass(frozen=True, slots=True)
class Passage:
    file_id: str
    filename: str
    score: float
    text: str
    attributes: dict[str, Any]

    def result(self) -> dict[str, Any]:
        """As a ``file_search_call``'s ``results`` entry."""
        return {"file_id": self.file_id, "filename": self.filename, "score": self.score,
                "text": self.text, "attributes": self.attributes}


async def search(stores: Any, tenant: str, store_ids: Sequence[str], body: dict[str, Any],
                 limit: int) -> list[Passage]:
    """Every store searched at once (the same call as the search endpoint, so only files
    whose ingestion completed are searched), merged by score, the best ``limit`` kept."""
    pages = await asyncio.gather(*(stores.search(tenant, store_id, body)
                                   for store_id in store_ids))
    found = [Passage(hit["file_id"], hit["filename"], hit["score"],
                     "\n".join(part["text"] for part in hit["content"]),
                     hit.get("attributes") or {})
             for page in pages for hit in page["data"]]
    found.sort(key=lambda p: -p.score)
    return found[:limit]


class Citations:
    """The passages of one response, numbered as the model reads them."""

    def __init__(self) -> None:
        self.passages: list[Passage] = []

    def read(self, queries: Sequence[str], found: Sequence[Passage]) -> str:
        """The call's answer as the model reads it (numbers continue across calls)."""
        shown = ", ".join(repr(q) for q in queries)
        if not found:
            return f"No passage of the searched files matches {shown}."
        lines = [f"{len(found)} passage(s) for {shown}:"]
        for passage in found:
            self.passages.append(passage)
            lines.append(f"\n[^{len(self.passages)}] from {passage.filename!r} "
                         f"(score {passage.score:.3f}):\n{passage.text}")
        lines.append("\n" + CITE)
        return "\n".join(lines)

    def annotate(self, text: str) -> list[dict[str, Any]]:
        if not self.passages or "[^" not in text:
            return []
        found = []
        for marker in MARKER.finditer(text):
            number = int(marker.group(1))
            if 1 <= number <= len(self.passages):
                passage = self.passages[number - 1]
                found.append({"type": "file_citation", "file_id": passage.file_id,
                              "filename": passage.filename, "index": marker.start()})
        return found


def earlier_results(results: Any) -> str | None:
    """A ``file_search_call``'s kept ``results`` as the model reads them in a later response
    (no markers: those passages are not citable there)."""
    if not isinstance(results, list) or not results:
        return None
    parts = [f"From {r.get('filename')!r}:\n{r.get('text')}" for r in results
             if isinstance(r, dict) and isinstance(r.get("text"), str)]
    return "\n\n".join(parts) or None

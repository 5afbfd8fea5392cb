"""One file's way into a vector store, engine-agnostic: extract its text and chunk it per its
strategy (in a child process, under a time and a size bound: extract.py), embed the chunks
(those already embedded by the same model are taken from the engine's cache, never embedded
again). The engine writes the result."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from responses_gateway.vectors.embeddings import Embedder
from responses_gateway.vectors.extract import ExtractLimits, extract_chunks

CachedVectors = Callable[[list[str]], Awaitable[dict[str, list[float]]]]


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    text: str
    key: str  # the embedding cache key: model and text
    vector: list[float]


def cache_key(model: str, text: str) -> str:
    return hashlib.sha256(f"{model}\0{text}".encode()).hexdigest()


async def prepare(
    filename: str, data: bytes, strategy: dict[str, Any], embedder: Embedder,
    cached: CachedVectors, limits: ExtractLimits | None = None,
) -> list[Chunk]:
    """The file's chunks with their vectors; extract.Unsupported / Invalid / Failed or
    embeddings.EmbeddingError when it cannot be done."""
    texts = await extract_chunks(filename, data, strategy, limits or ExtractLimits())
    keys = [cache_key(embedder.model, t) for t in texts]
    known = await cached(list(dict.fromkeys(keys)))
    missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in known))
    if missing:
        fresh = await embedder.embed(missing)
        for text, vector in zip(missing, fresh, strict=True):
            known[cache_key(embedder.model, text)] = vector
    return [Chunk(i, t, k, known[k]) for i, (t, k) in enumerate(zip(texts, keys, strict=True))]

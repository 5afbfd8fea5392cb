"""Embeddings from the configured model over an OpenAI-compatible ``POST /embeddings``
(OpenAI, Ollama, llama.cpp, vLLM, TEI): batched, retried on what a retry can fix, and every
answer checked (one finite vector per input, all of one dimension) before anything is cached
or stored: a vector of NaN or infinity would poison every later use of the same text."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Protocol

import httpx

_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
MAX_BACKOFF = 8.0  # seconds: the longest wait between two attempts


class EmbeddingError(Exception):
    """The embedding model failed for good; the message is safe to show (no secrets)."""


class Embedder(Protocol):
    model: str

    async def embed(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        """One vector per text; ``query``: the texts are search queries, not documents (some
        models, Cohere Embed, embed the two differently)."""
        ...

    async def aclose(self) -> None: ...


class OpenAICompatEmbedder:
    """``retries``: further attempts after a transient failure (the connection refused,
    dropped or timed out, 408 / 429 / 5xx), waiting ``backoff`` seconds before the first and
    twice as long before each next (at most :data:`MAX_BACKOFF`, with jitter)."""

    def __init__(self, base_url: str, api_key: str | None, model: str, *, batch: int = 64,
                 retries: int = 3, backoff: float = 0.5, timeout: float = 120.0) -> None:
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.batch = max(1, batch)
        self.retries = max(0, retries)
        self.backoff = max(0.0, backoff)
        self.dimensions = Dimensions()
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._secrets = (api_key,)  # never in an error a client or a file record gets
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def embed(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        batches = [texts[i:i + self.batch] for i in range(0, len(texts), self.batch)]
        results = await asyncio.gather(*(self._one(b) for b in batches))
        return [vector for result in results for vector in result]

    async def _one(self, texts: list[str]) -> list[list[float]]:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                answer = await self._client.post(self.url, json={
                    "model": self.model, "input": texts, "encoding_format": "float"})
            except httpx.TransportError as exc:  # refused, dropped, timed out: transient
                if last:
                    raise EmbeddingError(f"The embedding model could not be reached "
                                         f"({type(exc).__name__}).") from None
            else:
                if answer.status_code == 200:
                    return self.dimensions.check(_vectors(answer, len(texts)))
                if answer.status_code not in _RETRY_STATUSES or last:
                    from responses_gateway.redaction import redact

                    raise EmbeddingError(
                        f"The embedding model answered {answer.status_code}: "
                        f"{redact(answer.text[:300], self._secrets)}")
            await asyncio.sleep(backoff_seconds(self.backoff, attempt))
        raise EmbeddingError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self._client.aclose()


def backoff_seconds(first: float, attempt: int) -> float:
    """The wait before attempt ``attempt + 1``: ``first`` doubled per attempt, jittered."""
    return min(MAX_BACKOFF, first * 2 ** attempt) * (0.5 + random.random() / 2)


def _vectors(answer: httpx.Response, count: int) -> list[list[float]]:
    try:
        body = answer.json()
        data = sorted(body["data"], key=lambda d: d["index"])
        vectors = [list(map(float, d["embedding"])) for d in data]
    except (KeyError, TypeError, ValueError):  # ValueError: not JSON, or not numbers
        raise EmbeddingError("The embedding model's answer is not an embeddings list.") from None
    if len(vectors) != count:
        raise EmbeddingError(f"The embedding model returned {len(vectors)} vectors for "
                             f"{count} inputs.")
    return vectors


class Dimensions:
    """The check every answer passes before its vectors are used: finite numbers, and one
    dimension, the first answer's (a model keeps its dimension; a vector of another one could
    never be compared with the store's)."""

    def __init__(self) -> None:
        self.size: int | None = None

    def check(self, vectors: list[list[float]]) -> list[list[float]]:
        for vector in vectors:
            if not vector:
                raise EmbeddingError("The embedding model returned an empty vector.")
            if not all(math.isfinite(x) for x in vector):
                raise EmbeddingError("The embedding model returned a vector that is not "
                                     "finite numbers (NaN or infinity).")
            if self.size is None:
                self.size = len(vector)
            elif len(vector) != self.size:
                raise EmbeddingError(f"The embedding model returned a vector of "
                                     f"{len(vector)} dimensions, not {self.size}.")
        return vectors

"""Embeddings from the configured model over an OpenAI-compatible ``POST /embeddings``
(OpenAI, Ollama, llama.cpp, vLLM, TEI): batched, retried on what a retry can fix."""

from __future__ import annotations

import asyncio
import random
from typing import Any, Protocol

import httpx

_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})


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
    def __init__(self, base_url: str, api_key: str | None, model: str, *, batch: int = 64,
                 max_retries: int = 2, timeout: float = 120.0) -> None:
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.batch = max(1, batch)
        self.max_retries = max_retries
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def embed(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        batches = [texts[i:i + self.batch] for i in range(0, len(texts), self.batch)]
        results = await asyncio.gather(*(self._one(b) for b in batches))
        return [vector for result in results for vector in result]

    async def _one(self, texts: list[str]) -> list[list[float]]:
        for attempt in range(self.max_retries + 1):
            try:
                answer = await self._client.post(self.url, json={
                    "model": self.model, "input": texts, "encoding_format": "float"})
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout) as exc:
                if attempt == self.max_retries:
                    raise EmbeddingError(f"The embedding model could not be reached "
                                         f"({type(exc).__name__}).") from None
            else:
                if answer.status_code == 200:
                    return _vectors(answer.json(), len(texts))
                if answer.status_code not in _RETRY_STATUSES or attempt == self.max_retries:
                    raise EmbeddingError(
                        f"The embedding model answered {answer.status_code}: "
                        f"{answer.text[:300]}")
            await asyncio.sleep(min(8.0, 0.5 * 2 ** attempt) * (0.5 + random.random() / 2))
        raise EmbeddingError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self._client.aclose()


def _vectors(body: Any, count: int) -> list[list[float]]:
    try:
        data = sorted(body["data"], key=lambda d: d["index"])
        vectors = [list(map(float, d["embedding"])) for d in data]
    except (KeyError, TypeError, ValueError):
        raise EmbeddingError("The embedding model's answer is not an embeddings list.") from None
    if len(vectors) != count:
        raise EmbeddingError(f"The embedding model returned {len(vectors)} vectors for "
                             f"{count} inputs.")
    return vectors

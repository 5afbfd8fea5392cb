"""A backend traced with X-Ray: its ``stream`` in an ``upstream`` subsegment.

Only when tracing is on (observability.tracing_enabled); every other capability the Backend
protocol declares passes straight through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from responses_gateway.backends.base import Backend, BackendRequest, Chunk
from responses_gateway.observability import subsegment, tracing_enabled


def trace_backend(backend: Backend) -> Backend:
    """The backend, its ``stream`` a subsegment when tracing (else the backend itself)."""
    return _TracedBackend(backend) if tracing_enabled() else backend


class _TracedBackend:
    """The backend, its ``stream`` in an ``upstream`` subsegment; every other capability the
    Backend protocol declares passes straight through."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.name = inner.name

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        chunks = self._inner.stream(request)
        async with subsegment("upstream", backend=self.name):
            try:
                async for chunk in chunks:
                    yield chunk
            finally:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def prepare(self, request: BackendRequest) -> None:
        await self._inner.prepare(request)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        return await self._inner.count_tokens(body)

    async def context_window(self, model: str) -> int | None:
        return await self._inner.context_window(model)

    def reasoning_input(self, configured: str | None) -> str | None:
        return self._inner.reasoning_input(configured)

    def takes_images(self, model: str) -> bool | None:
        return self._inner.takes_images(model)

    async def list_models(self) -> list[dict[str, Any]]:
        return await self._inner.list_models()

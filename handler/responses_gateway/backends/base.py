"""What every backend promises, so everything after it is shared.

A backend takes the chat request the translator built and yields ``chat.completion.chunk``
dicts exactly as an OpenAI-compatible server would stream them (``choices[0].delta`` with
``content`` / ``reasoning_content`` / ``reasoning_details`` / ``refusal`` / ``tool_calls``,
``finish_reason``, ``usage``). An upstream error frame mid-stream is yielded as
``{"error": {...}}``; the translator turns it into ``response.failed``.

Failures raise :class:`~responses_gateway.errors.UpstreamError`: before the first chunk it
becomes an HTTP error, after it the response ends ``failed``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class BackendRequest:
    """A chat request on its way upstream, with what a backend may need beyond the body."""

    body: dict[str, Any]  # Chat Completions body; body["model"] is already the backend's model
    tenant: str = "default"
    stream: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def stream(self, request: BackendRequest) -> AsyncIterator[dict[str, Any]]:
        """Yield chat.completion.chunk dicts; raise UpstreamError on failure."""
        ...

    async def aclose(self) -> None: ...

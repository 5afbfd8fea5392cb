"""What every backend promises, so everything after it is shared.

A backend takes the chat request the translator built and yields lists of ``chat.completion.chunk``
dicts exactly as an OpenAI-compatible server would stream them (``choices[0].delta`` with
``content`` / ``reasoning_content`` / ``reasoning_details`` / ``refusal`` / ``tool_calls``,
``finish_reason``, ``usage``), or such a chunk's JSON bytes as they came off the wire (the
translator parses those, cheaply when they repeat). An upstream error frame mid-stream is yielded
as ``{"error": {...}}``; the translator turns it into ``response.failed``. Each list (never empty)
holds the chunks that arrived together, one network read's worth: they travel on as one batch of
events and leave in one write to the client, which is what keeps a fast stream's cost per token
low.

Failures raise :class:`~responses_gateway.errors.UpstreamError`: once ``response.created``
has left (at once, unless a stream grace period is set) the response ends ``failed``, except
that a stream closing early (``upstream_connection_closed``) after a ``finish_reason`` is
complete all the same. A backend with local work that can fail for the client's reason (Bedrock
fetching image URLs) does it in an optional ``async prepare(request)``, which runs before
``response.created``, so its errors are HTTP errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from responses_gateway.translate.upstream_sse import Chunk


@dataclass(slots=True)
class BackendRequest:
    """A chat request on its way upstream, with what a backend may need beyond the body."""

    body: dict[str, Any]  # Chat Completions body; body["model"] is already the backend's model
    tenant: str = "default"
    stream: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        """Yield lists of chat.completion.chunk dicts (or their JSON bytes); raise
        UpstreamError."""
        ...

    async def aclose(self) -> None: ...

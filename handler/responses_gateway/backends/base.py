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
complete all the same.

Beyond streaming, :class:`Backend` declares every capability a backend may offer, and
:class:`BaseBackend` gives each its "not offered" default, so an implementation overrides only
what it has and callers never ask which backend they hold:

- ``prepare``: local work that can fail for the client's reason (Bedrock fetching image URLs),
  run before ``response.created``, so its errors are HTTP errors;
- ``count_tokens``: the exact input tokens of a chat body, where the upstream counts;
- ``context_window``: how many tokens a backend model reads;
- ``reasoning_input``: how reasoning goes back upstream in history (translate/to_chat.py);
- ``takes_images``: whether a backend model reads image parts (a generated image goes back
  to it as one; GATEWAY_VISION_MODELS overrules it);
- ``list_models``: the upstream's models, as OpenAI model objects.

A new backend is one module with a class that has ``from_settings``, registered by one line in
backends/instances.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from responses_gateway.backends.chunks import Chunk
from responses_gateway.records import Compared

if TYPE_CHECKING:
    from responses_gateway.settings import Settings

__all__ = ["Backend", "BackendRequest", "BaseBackend", "Chunk"]


#: The text part translate/to_chat.py puts right before an image the gateway's own
#: image_generation made, in a model turn's messages: a backend may treat that image as the
#: gateway's (Bedrock re-encodes one over its size limits; a client's own image goes as sent).
GENERATED_IMAGE_INTRO = "Image made by "
#: Where BackendRequest.extra names the deployment that answered (x-gateway-deployment): set
#: by backends/router.py, read by the HTTP layer; here so that layer need not import the router
DEPLOYMENT = "deployment"


class BackendRequest(Compared):
    """A chat request on its way upstream, with what a backend may need beyond the body (a
    record: records.py)."""

    __slots__ = ("body", "extra", "stream", "tenant")

    body: dict[str, Any]  # Chat Completions body; body["model"] is already the backend's model
    tenant: str
    stream: bool
    extra: dict[str, Any]

    def __init__(self, body: dict[str, Any], tenant: str = "default", stream: bool = True,
                 extra: dict[str, Any] | None = None) -> None:
        self.body = body
        self.tenant = tenant
        self.stream = stream
        self.extra = {} if extra is None else extra


class Backend(Protocol):
    name: str

    def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        """Yield lists of chat.completion.chunk dicts (or their JSON bytes); raise
        UpstreamError."""
        ...

    async def aclose(self) -> None: ...

    async def prepare(self, request: BackendRequest) -> None:
        """Local work before the upstream call; a client's mistake raises its 4xx here."""
        ...

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """The input tokens of a Chat Completions body as the upstream counts them; None:
        this upstream cannot count (the caller estimates)."""
        ...

    async def context_window(self, model: str) -> int | None:
        """The context window of a backend model in tokens; None: unknown."""
        ...

    def reasoning_input(self, configured: str | None) -> str | None:
        """The chat field reasoning goes back upstream in (``reasoning_content``), or None to
        leave it out; ``configured`` is the operator's ``GATEWAY_REASONING_INPUT``."""
        ...

    def takes_images(self, model: str) -> bool | None:
        """Whether a backend model reads image parts; None: this backend cannot say."""
        ...

    async def list_models(self) -> list[dict[str, Any]]:
        """The upstream's models as OpenAI model objects (``id``, ``object``, ``created``,
        ``owned_by``); raises UpstreamError when the upstream cannot say."""
        ...


class BaseBackend:
    """Every optional capability, not offered: inherit it and override what the backend has."""

    name = "backend"

    @classmethod
    def from_settings(cls, settings: Settings) -> BaseBackend:
        """The backend configured by ``settings`` (what backends/instances.py calls)."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from settings")

    def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None

    async def prepare(self, request: BackendRequest) -> None:
        return None

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        return None

    async def context_window(self, model: str) -> int | None:
        return None

    def reasoning_input(self, configured: str | None) -> str | None:
        return configured

    def takes_images(self, model: str) -> bool | None:
        return None

    async def list_models(self) -> list[dict[str, Any]]:
        return []

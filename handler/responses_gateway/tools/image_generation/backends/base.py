"""The one interface every image backend offers the image_generation tool.

A backend says what it cannot do before the response starts (``check``: OpenAI's 400 naming
the parameter), then draws one image (``draw``: an async generator of intermediate images,
when it has them, and the final :class:`Drawn`). A failure of the image model is an
:class:`ImageFailure` (its message redacted), which the tool turns into a failed
``image_generation_call``; nothing a backend raises reaches the client as a 500.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.redaction import redact
from responses_gateway.tools.image_generation.params import ImageParams


@dataclass(frozen=True, slots=True)
class Drawing:
    """One image to make: from the prompt alone, or an edit of ``image`` (under ``mask``)."""

    prompt: str
    params: ImageParams
    image: bytes | None = None
    mask: bytes | None = None

    @property
    def action(self) -> str:
        return "edit" if self.image is not None else "generate"


@dataclass(frozen=True, slots=True)
class Partial:
    """An intermediate image (``partial_images`` > 0 and a backend that streams them)."""

    b64: str
    index: int


@dataclass(frozen=True, slots=True)
class Drawn:
    """The final image and the parameters it was made with (OpenAI reports them)."""

    b64: str
    size: str
    quality: str
    output_format: str
    background: str
    revised_prompt: str | None = None
    #: the image model's tokens as the Images API reports them (``image_usage``); None when
    #: it reports none (Bedrock's models): the call then counts nothing in ``tool_usage``
    usage: dict[str, Any] | None = None


class ImageFailure(Exception):
    """The image model did not draw: a content filter, throttling, a timeout, an error. The
    tool makes it the item's ``error`` ({code, message, param, type})."""

    def __init__(self, message: str, *, code: str, type: str = "image_generation_error",
                 secrets: tuple[str | None, ...] = (), param: str | None = None) -> None:
        super().__init__(message)
        self.message = redact(message, secrets)
        self.code = code
        self.type = type
        # the request field an image server refused (its 400's), as guarded as the message
        self.param = None if param is None else redact(param, secrets)

    def to_error(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param,
                "type": self.type}


_COUNTS = ("input_tokens", "output_tokens", "total_tokens")
_DETAILS = ("image_tokens", "text_tokens")


def image_usage(reported: Any) -> dict[str, Any] | None:
    """An Images API ``usage`` as ``tool_usage.image_gen`` counts it: its token counts and
    their image/text details, each a non-negative integer (anything else from the image
    server is left out); None when it reported no tokens."""
    if not isinstance(reported, dict):
        return None
    usage: dict[str, Any] = _counts(reported, _COUNTS)
    if not usage:
        return None
    for name in ("input_tokens_details", "output_tokens_details"):
        details = reported.get(name)
        if isinstance(details, dict) and (kept := _counts(details, _DETAILS)):
            usage[name] = kept
    return usage


def _counts(reported: dict[str, Any], names: tuple[str, ...]) -> dict[str, int]:
    return {name: value for name in names
            if type(value := reported.get(name)) is int and value >= 0}


def unsupported(params: ImageParams, field: str, value: Any, backend: str, why: str = ""
                ) -> GatewayError:
    """OpenAI's 400 for a value this backend cannot honour, naming the parameter."""
    return invalid_request(
        f"Invalid value for '{params.named(field)}': {value!r} is not supported by the "
        f"gateway's image backend ({backend}){': ' + why if why else ''}.",
        param=params.named(field), code="unsupported_value")


class ImageBackend:
    """One image model. Subclasses set ``name`` and implement ``draw``; ``check`` refuses
    what they cannot do (the default refuses nothing)."""

    name = "image"
    #: whether ``draw`` can yield intermediate images (``partial_images``)
    partials = False
    #: whether it can edit an image (else the model is never offered ``edit``)
    edits = True

    def check(self, params: ImageParams, *, editing: bool) -> None:
        """Raise OpenAI's 400 for a parameter this backend cannot honour."""

    def draw(self, drawing: Drawing) -> AsyncIterator[Partial | Drawn]:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections."""

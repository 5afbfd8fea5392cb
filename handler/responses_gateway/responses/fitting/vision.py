"""Whether a chat model reads images: what decides how a generated image goes back to it (an
image part, or a short text note: tools/image_generation/tool.py, translate/to_chat.py).

In this order, the first that knows, as for context windows (windows.py):

1. ``GATEWAY_VISION_MODELS`` (config.py): client or backend model names or ``*`` patterns,
   ``!name`` for a model that does not read images; the first entry that matches wins;
2. the backend (``Backend.takes_images``): Bedrock's documented vision families
   (backends/bedrock/models.py); an OpenAI-compatible server cannot say.

Unknown means no: a model that cannot read an image part would fail the whole turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from responses_gateway.backends.base import Backend


def configured(patterns: Sequence[str], names: Sequence[str]) -> bool | None:
    """What ``GATEWAY_VISION_MODELS`` says of a model known by ``names``; None: nothing."""
    for entry in patterns:
        negated = entry.startswith("!")
        pattern = entry[1:] if negated else entry
        if any(fnmatchcase(name, pattern) for name in names if name):
            return not negated
    return None


def takes_images(patterns: Sequence[str], client_model: str, backend_model: str,
                 backend: Backend) -> bool:
    """Whether the model behind ``client_model`` (``backend_model`` on ``backend``) reads
    image parts."""
    said = configured(patterns, (client_model, backend_model))
    if said is None:
        said = backend.takes_images(backend_model)
    return bool(said)

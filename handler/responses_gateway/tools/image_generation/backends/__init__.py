"""Image backends, one module each, chosen by ``GATEWAY_IMAGE_BACKEND``.

One line per backend in :data:`REGISTERED`; a backend's module (boto3, httpx) loads only
when a request uses the tool. One backend per process, built on first use and reused.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from responses_gateway.tools.image_generation.backends.base import ImageBackend

#: GATEWAY_IMAGE_BACKEND -> "module:Class" with ``from_settings(settings)``.
REGISTERED: dict[str, str] = {
    "bedrock": "responses_gateway.tools.image_generation.backends.bedrock:BedrockImages",
    "openai": "responses_gateway.tools.image_generation.backends.openai_images:OpenAIImages",
}
KINDS = tuple(REGISTERED)
#: Bedrock's Stability models speak their own InvokeModel bodies (a model id, or a Region's
#: inference profile of one, names the family).
STABILITY = "responses_gateway.tools.image_generation.backends.bedrock_stability:StabilityImages"

_built: dict[tuple[Any, ...], ImageBackend] = {}
_lock = threading.Lock()


def image_backend(settings: Any) -> ImageBackend:
    """The configured backend (one per settings, shared by every response)."""
    key = (settings.image_backend, settings.image_model, settings.image_url,
           settings.bedrock_region, settings.bedrock_endpoint_url, settings.image_max_bytes)
    with _lock:
        backend = _built.get(key)
        if backend is None:
            target = REGISTERED[settings.image_backend]
            if settings.image_backend == "bedrock" and "stability." in (settings.image_model
                                                                         or ""):
                target = STABILITY
            module, _, name = target.partition(":")
            cls = getattr(importlib.import_module(module), name)
            backend = _built[key] = cls.from_settings(settings)
        return backend


def forget_backends() -> None:
    """Drop the built backends (tests that change settings)."""
    with _lock:
        _built.clear()

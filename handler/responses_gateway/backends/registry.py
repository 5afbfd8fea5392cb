"""Backends by kind, the names ``GATEWAY_BACKEND`` and model-map prefixes (``bedrock:…``) use.

One line per backend: its kind and the class that builds it (``from_settings``), imported on
first use, so boto3 loads only when a request goes to Bedrock. Adding a backend is one module
and one line here; config.py checks kinds against this table.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from responses_gateway.backends.base import Backend
    from responses_gateway.config import Settings

#: kind -> "module:Class" of a :class:`~responses_gateway.backends.base.BaseBackend`.
REGISTERED: dict[str, str] = {
    "openai": "responses_gateway.backends.openai_compat:OpenAICompatBackend",
    "bedrock": "responses_gateway.backends.bedrock:BedrockBackend",
}
KINDS: tuple[str, ...] = tuple(REGISTERED)


def make(kind: str, settings: Settings) -> Backend:
    """A new backend of ``kind`` configured by ``settings``."""
    module, _, name = REGISTERED[kind].partition(":")
    backend: Backend = getattr(importlib.import_module(module), name).from_settings(settings)
    return backend


class Backends:
    """One backend instance per kind, created on first use and closed with the app."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._made: dict[str, Backend] = {}

    def __call__(self, kind: str) -> Backend:
        backend = self._made.get(kind)
        if backend is None:
            from responses_gateway import observability

            backend = self._made[kind] = observability.trace_backend(make(kind, self._settings))
        return backend

    async def aclose(self) -> None:
        for backend in self._made.values():
            await backend.aclose()
        self._made.clear()

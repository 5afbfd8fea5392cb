"""Backends by kind, the names ``GATEWAY_BACKEND`` and model-map prefixes (``bedrock:…``) use.

Each backend's class (one line per backend in backends/kinds.py) is imported on first use, so
boto3 loads only when a request goes to Bedrock. Adding a backend is one module and one line
in kinds.py; config.py checks kinds against that table.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from responses_gateway.backends.kinds import KINDS, REGISTERED

__all__ = ["KINDS", "Backends", "make"]

if TYPE_CHECKING:
    from responses_gateway.backends.base import Backend
    from responses_gateway.config import Settings



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
            from responses_gateway.backends.traced import trace_backend

            backend = self._made[kind] = trace_backend(make(kind, self._settings))
        return backend

    async def aclose(self) -> None:
        for backend in self._made.values():
            await backend.aclose()
        self._made.clear()

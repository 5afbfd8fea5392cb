"""Backends by kind, the names ``GATEWAY_BACKEND`` and model-map prefixes (``bedrock:…``) use,
and routed models by ``route:NAME`` (GATEWAY_ROUTES).

Each backend's class (one line per backend in backends/kinds.py) is imported on first use, so
boto3 loads only when a request goes to Bedrock. Adding a backend is one module and one line
in kinds.py; config.py checks kinds against that table. A routed model's backend is a
backends/router.py Router over one instance per distinct deployment (its kind and options):
two routes naming the same Bedrock Region share that Region's client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from responses_gateway.backends.kinds import KINDS, REGISTERED, ROUTE_PREFIX

__all__ = ["KINDS", "Backends", "make"]

if TYPE_CHECKING:
    from responses_gateway.backends.base import Backend
    from responses_gateway.settings import Settings
    from responses_gateway.store.health import HealthStore


def make(kind: str, settings: Settings) -> Backend:
    """A new backend of ``kind`` configured by ``settings``."""
    module, _, name = REGISTERED[kind].partition(":")
    backend: Backend = getattr(importlib.import_module(module), name).from_settings(settings)
    return backend


class Backends:
    """One backend instance per kind (and per distinct routed deployment), and one router per
    routed model, created on first use and closed with the app. ``health``: the store's
    shared deployment health (``Store.health_store``), asked when the first router is made."""

    def __init__(self, settings: Settings,
                 health: Callable[[], HealthStore | None] | None = None) -> None:
        self._settings = settings
        self._health = health
        self._shared: HealthStore | None = None
        self._made: dict[str, Backend] = {}
        self._routers: dict[str, Backend] = {}

    def __call__(self, kind: str) -> Backend:
        backend = self._made.get(kind)
        if backend is None:
            if kind.startswith(ROUTE_PREFIX):
                return self._router(kind)
            from responses_gateway.backends.traced import trace_backend

            backend = self._made[kind] = trace_backend(make(kind, self._settings))
        return backend

    def _router(self, key: str) -> Backend:
        router = self._routers.get(key)
        if router is not None:
            return router
        from responses_gateway.backends.router import Router, deployment_settings
        from responses_gateway.backends.traced import trace_backend
        from responses_gateway.errors import UpstreamError

        routes = self._settings.routes
        name = key[len(ROUTE_PREFIX):]
        listed = routes.routes.get(name) if routes is not None else None
        if not listed:  # a stored background response whose route was since removed
            raise UpstreamError(502, f"The model {name!r} is no longer routed by this gateway "
                                "(GATEWAY_ROUTES).", code="upstream_misconfigured")
        deployments = []
        for deployment in listed:
            settings = deployment_settings(self._settings, deployment, alone=len(listed) == 1)
            instance = f"{deployment.instance_key}|{settings.max_retries}"
            backend = self._made.get(instance)
            if backend is None:
                backend = self._made[instance] = trace_backend(make(deployment.kind, settings))
            deployments.append((deployment, backend))
        if self._health is not None and self._shared is None:
            self._shared = self._health()
        router = self._routers[key] = Router(
            name, deployments, cooldown_after=routes.cooldown_after,  # type: ignore[union-attr]
            cooldown_seconds=routes.cooldown_seconds,  # type: ignore[union-attr]
            shared=self._shared)
        return router

    async def aclose(self) -> None:
        for backend in self._made.values():
            await backend.aclose()
        self._made.clear()
        self._routers.clear()
        if self._shared is not None:
            await self._shared.aclose()
            self._shared = None

"""What the gateway says when it starts: one summary line of how it is set up, and (under
``responses-gateway serve``) a check that the upstream URL points at a Chat Completions API.

Both only log: a dead or misnamed upstream must not stop the gateway from starting (the
upstream may come up later), but the first thing a newcomer reads should name the cause.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from responses_gateway.config import Settings
from responses_gateway.observability import scrub
from responses_gateway.platform import platform_for
from responses_gateway.tools import registry

logger = logging.getLogger("responses_gateway.startup")
_CHECK_SECONDS = 5.0
_said: set[str] = set()  # what was already logged in this process (Mangum restarts per call)


def shown_upstream(settings: Settings) -> str:
    """The upstream URL as logs and error messages show it: no user, password or key."""
    return _shown(settings.upstream_url)


def _shown(url: str) -> str:
    from responses_gateway.net.policy import shown_url

    return scrub(shown_url(url))


def summary(settings: Settings) -> dict[str, Any]:
    return {
        "backend": settings.backend,
        "upstream_url": shown_upstream(settings),
        "upstream_dialect": settings.upstream_dialect,
        "bedrock_region": settings.bedrock_region,
        "store": platform_for(settings).shown,
        "auth": "on" if settings.api_keys else "off",
        "api_keys": len(settings.api_keys),
        "mapped_models": sorted(settings.model_map),
        "hosted_tools": settings.hosted_tools,
        **registry.start_line(settings),
        "container_engine": settings.code_interpreter,
        "background": platform_for(settings).worker().shown,
        **_capabilities(settings),
        "log_level": settings.log_level,
        "debug_log_content": settings.debug_log_content,
    }


def _capabilities(settings: Settings) -> dict[str, Any]:
    """What else is on: the admin routes, the limits, the routes, the prices, tracing (no
    key, no header: an OTLP endpoint's headers may hold one)."""
    from responses_gateway import otel
    from responses_gateway.observability import tracing_enabled

    limits = settings.limits
    routes = settings.routes
    return {
        "admin": "on (/v1/organization/*, /v1/admin/*, /dashboard)" if settings.admin_keys
        else "off",
        "limits": None if limits is None or not limits.any else {
            "default": {k: v for k, v in limits.default.to_json().items()
                        if v and k not in ("period", "window_seconds")},
            "keys": len(limits.keys)},
        "routes": {} if not routes else {
            name: [f"{d.kind}:{d.model}" for d in deployments]
            for name, deployments in sorted(routes.routes.items())},
        "prices": ({"models": sorted(settings.prices.models),
                    "default": settings.prices.default != _no_price()}
                   if settings.prices is not None else "Bedrock on-demand defaults only"),
        "tracing": {"opentelemetry": _shown(otel.endpoint() or "") or None
                    if otel.enabled() else None,
                    "xray": tracing_enabled()},
    }


def _no_price() -> Any:
    from responses_gateway.prices import Price

    return Price()


def log_summary(settings: Settings) -> None:
    """The start-up line, once per process; then a warning naming any ``GATEWAY_*`` variable
    that is no setting (a misspelt one would otherwise be silently ignored)."""
    if "summary" in _said:
        return
    _said.add("summary")
    logger.info("gateway started", extra={"settings": summary(settings)})
    if settings.unknown_variables:
        logger.warning("ignored unknown settings: %s", unknown_settings(settings),
                       extra={"unknown_settings": dict(settings.unknown_variables)})


def unknown_settings(settings: Settings) -> str:
    """``GATEWAY_UPSTREAM_ULR (did you mean GATEWAY_UPSTREAM_URL?)``, ... (names, no values)."""
    return ", ".join(name + (f" (did you mean {closest}?)" if closest else "")
                     for name, closest in settings.unknown_variables)


async def check_upstream(settings: Settings) -> str | None:
    """Ask the upstream's ``GET /models`` once; log (and return) what is wrong, if anything.

    Catches the usual mistakes: nothing listening, a base URL missing its ``/v1`` (the
    server then answers 404 for ``/models`` and for ``/chat/completions``), a key refused.
    """
    if settings.backend != "openai":
        return None
    import httpx

    base = settings.upstream_url
    shown = shown_upstream(settings)
    headers = {"authorization": f"Bearer {settings.upstream_api_key}"} \
        if settings.upstream_api_key else {}
    problem: str | None = None
    async with httpx.AsyncClient(timeout=_CHECK_SECONDS, headers=headers) as client:
        try:
            status = (await client.get(_join(base, "models"))).status_code
        except httpx.HTTPError as exc:
            problem = (f"could not reach the upstream at GATEWAY_UPSTREAM_URL={shown} "
                       f"({type(exc).__name__}); requests will fail with 502 until it answers")
        else:
            if status in (401, 403):
                problem = (f"the upstream at GATEWAY_UPSTREAM_URL={shown} refused the key "
                           f"(HTTP {status}): check GATEWAY_UPSTREAM_API_KEY")
            elif status == 404 and not base.partition("?")[0].endswith("/v1"):
                with_v1 = _join(base, "v1")
                try:
                    found = (await client.get(_join(with_v1, "models"))).status_code == 200
                except httpx.HTTPError:
                    found = False
                if found:
                    problem = (f"GATEWAY_UPSTREAM_URL={shown} answers GET /models with 404, "
                               f"but {_shown(with_v1)}/models answers: set "
                               f"GATEWAY_UPSTREAM_URL={_shown(with_v1)}")
    if problem is not None:
        logger.warning("upstream check: %s", problem)
    return problem


def check_containers(gateway: Any) -> asyncio.Task[None] | None:
    """Whether the container engine (``GATEWAY_CODE_INTERPRETER``) can run containers here,
    checked once per process in the background; one warning line saying why not (the gateway
    still starts: the Containers API and the tools then answer the engine's error)."""
    if gateway.settings.code_interpreter is None or "containers" in _said:
        return None
    _said.add("containers")

    async def run() -> None:
        try:
            problem = await gateway.containers.check()
        except Exception as exc:  # the engine could not even be built
            problem = str(exc)
        if problem is not None:
            logger.warning("code execution (%s) cannot run containers here: %s",
                           gateway.settings.code_interpreter, problem)

    return asyncio.get_running_loop().create_task(run(), name="check-containers")


def reclaim_vector_files(gateway: Any) -> asyncio.Task[None] | None:
    """The periodic task that ingests again vector store files whose process stopped before
    they were done (their lease ran out: vectors/service.py), while the gateway runs; None
    when this storage has no vector stores. It sleeps first: the vector stores are built on
    its first look, not while the gateway starts, and a lifespan run per call (Mangum) ends
    before it looks (there, vector store requests look instead)."""
    if not gateway.platform.has_vector_stores:
        return None

    async def run() -> None:
        await asyncio.sleep(max(0.5, gateway.settings.lease_seconds / 2))
        try:
            stores = gateway.vector_stores
        except Exception:  # the routes answer why; nothing to reclaim here
            logger.exception("the vector stores could not be opened to reclaim their files")
            return
        await stores.reclaim_forever()

    return asyncio.get_running_loop().create_task(run(), name="reclaim-vector-files")


def sweep_expired(gateway: Any) -> asyncio.Task[None] | None:
    """The periodic task that removes every tenant's expired Files and Uploads with their
    bytes, and ends its expired containers (their processes and files), every
    ``GATEWAY_FILE_SWEEP_SECONDS``; None where the platform does not sweep (AWS reclaims a
    tenant's as it is served, and TTLs drop the rest). It builds nothing before there is
    something to look at."""
    settings = gateway.settings
    if settings.file_sweep_seconds <= 0 or not gateway.platform.sweeps_expired_files:
        return None

    async def run() -> None:
        while True:
            await asyncio.sleep(settings.file_sweep_seconds)
            if gateway.platform.files_stored():  # else no engine to build for it
                await _swept("files and uploads", lambda: gateway.uploads.files.reclaim(None))
            if settings.code_interpreter is not None:
                await _swept("containers", lambda: gateway.containers.reclaim(None))

    return asyncio.get_running_loop().create_task(run(), name="sweep-expired")


async def _swept(what: str, sweep: Callable[[], Awaitable[int]]) -> None:
    try:
        removed = await sweep()
    except Exception:
        logger.exception("expired %s sweep failed", what)
        return
    if removed:
        logger.info("removed %d expired %s", removed, what)


def _join(base: str, path: str) -> str:
    """``{base}/{path}``, keeping a query the base URL carries (Azure's api-version)."""
    head, sep, query = base.partition("?")
    return f"{head.rstrip('/')}/{path}{sep}{query}"

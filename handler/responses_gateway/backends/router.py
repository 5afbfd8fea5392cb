"""A routed model: one Backend in front of an ordered list of deployments, with fallback.

:class:`Router` implements the Backend protocol, so a job runs a routed model as it runs any
backend. ``stream`` tries the deployments in turn until one yields its first batch of chunks;
a deployment that fails before that with a failure another deployment may not share (connect
error, timeout, 429, 5xx: :func:`falls_back`) hands the request to the next one, with one log
line naming both and the reason. Once a batch has been yielded the deployment is committed: a
failure later ends the response ``failed`` with its partial output, as with one backend
(sending it again elsewhere would show the client its output twice).

Order: the list order, unless weights are given; then a weighted draw picks the order among
the deployments with a weight above 0 (the others follow, in list order): weights spread load,
the list still names the last resort. A deployment that failed ``cooldown_after`` times in a
row is skipped for ``cooldown_seconds`` (unless every deployment is cooling down); one success
clears it. With a store that shares it (store/health.py), every process counts one failure
count and skips alike: each writes its failures and successes of a failing deployment there,
and reads the route's records when its view is older than :data:`HEALTH_REFRESH_SECONDS`:
inline when it has none yet (a new Lambda instance must not try a deployment all others
skip), in the background after that, so a request whose first deployment answers waits for
no store call. A store that fails leaves the process with its own view, as without one.

Retries: a deployment that has another behind it is built with ``max_retries`` 0 unless its
route entry sets one (the next deployment is the retry, and a 429's ``Retry-After`` wait would
hold the request for nothing); a route of one deployment keeps ``GATEWAY_MAX_RETRIES``.

Which deployment served a model turn goes into ``request.extra["deployment"]``: the HTTP layer
sends it as ``x-gateway-deployment`` when it is known before the headers leave (docs/routing.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import (
    DEPLOYMENT,
    Backend,
    BackendRequest,
    BaseBackend,
    Chunk,
)
from responses_gateway.backends.route_config import COOLDOWN_AFTER, COOLDOWN_SECONDS, Deployment
from responses_gateway.errors import GatewayError, UpstreamError

if TYPE_CHECKING:
    from responses_gateway.settings import Settings
    from responses_gateway.store.health import Health, HealthStore

logger = logging.getLogger("responses_gateway.router")

_REASON_CHARS = 200
_URL_SETTING = "GATEWAY_UPSTREAM_URL"
#: How old this process's view of the shared health may grow before it is read again.
HEALTH_REFRESH_SECONDS = 2.0


def falls_back(exc: BaseException) -> bool:
    """Whether another deployment may succeed where this one failed before any output: it
    could not be reached or timed out, was rate limited (429) or failed on its side (5xx,
    including the gateway's 502s for an unreachable or misconfigured upstream). A 4xx about
    the request itself would fail everywhere."""
    return isinstance(exc, UpstreamError) and (exc.status >= 500 or exc.status in (408, 429))


def deployment_settings(settings: Settings, deployment: Deployment, *, alone: bool) -> Settings:
    """The settings a deployment's backend is built from: the ``GATEWAY_*`` ones, with what the
    deployment sets instead. A deployment with its own ``url`` gets only its own key."""
    options = dict(deployment.options)
    changes: dict[str, Any] = {"backend": deployment.kind}
    if "url" in options:
        changes.update(upstream_url=options["url"], upstream_api_key=deployment.api_key,
                       upstream_dialect="auto")
    elif deployment.api_key:
        changes["upstream_api_key"] = deployment.api_key
    if "dialect" in options:
        changes["upstream_dialect"] = options["dialect"].lower()
    if "region" in options:
        changes["bedrock_region"] = options["region"]
    if "endpoint_url" in options:
        changes["bedrock_endpoint_url"] = options["endpoint_url"]
    for key in ("connect_timeout", "read_timeout", "max_retries"):
        if key in options:
            changes[key] = options[key]
    if "max_retries" not in options and not alone:
        changes["max_retries"] = 0
    return settings.replace(**changes)


class _Health:
    """One deployment's failures in a row, and until when it is skipped."""

    __slots__ = ("failures", "until")

    def __init__(self) -> None:
        self.failures = 0
        self.until = 0.0


@dataclass(slots=True)
class Routed:
    """A deployment with its backend and its health."""

    deployment: Deployment
    backend: Backend
    health: _Health


class Router(BaseBackend):
    """The deployments of one routed model, tried in turn until one answers."""

    name = "router"

    def __init__(
        self,
        route: str,
        deployments: Sequence[tuple[Deployment, Backend]],
        *,
        cooldown_after: int = COOLDOWN_AFTER,
        cooldown_seconds: float = COOLDOWN_SECONDS,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
        shared: HealthStore | None = None,
        refresh_seconds: float = HEALTH_REFRESH_SECONDS,
    ) -> None:
        if not deployments:
            raise ValueError(f"route {route!r} has no deployments")
        self.route = route
        self.deployments = [Routed(d, b, _Health()) for d, b in deployments]
        self._weighted = any(d.weight is not None for d, _ in deployments)
        self.cooldown_after = cooldown_after
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock  # wall clock: a shared ``until`` means the same in every process
        self._rng = rng
        self.shared = shared
        self.refresh_seconds = refresh_seconds
        self._read_at: float | None = None  # when the shared view was last read
        self._refreshing: asyncio.Task[None] | None = None
        self._writes = 0  # a read that began before a write must not undo it

    # -- the order of one request's attempts ------------------------------------------------

    def order(self) -> list[Routed]:
        """This request's attempts: weighted or listed order, cooling deployments left out
        (all of them, if every one is cooling down: better a try than a certain failure)."""
        ranked = self._drawn() if self._weighted else list(self.deployments)
        now = self._clock()
        ready = [r for r in ranked if r.health.until <= now]
        return ready or ranked

    def _drawn(self) -> list[Routed]:
        """Weighted random order (Efraimidis-Spirakis keys) of the weighted deployments, then
        the rest in list order."""
        keyed: list[tuple[float, int]] = []
        rest: list[Routed] = []
        for i, routed in enumerate(self.deployments):
            weight = routed.deployment.weight
            if weight:  # None (unweighted beside weighted ones) and 0 go last
                keyed.append((self._rng() ** (1.0 / weight), i))
            else:
                rest.append(routed)
        keyed.sort(reverse=True)
        return [self.deployments[i] for _, i in keyed] + rest

    # -- health, this process's and the shared one ------------------------------------------

    async def _failed(self, routed: Routed) -> None:
        health = routed.health
        health.failures += 1
        until = self._clock() + self.cooldown_seconds
        if health.failures >= self.cooldown_after:
            health.until = until
        if self.shared is not None:
            self._writes += 1
            try:
                self._adopt(routed, await self.shared.failed(self.route, routed.deployment.name,
                                                             until))
            except Exception as exc:  # sharing must never fail a request
                _store_failed(exc)

    async def _answered(self, routed: Routed) -> None:
        health = routed.health
        if not (health.failures or health.until):
            return  # the happy path: nothing to clear, no store call
        health.failures, health.until = 0, 0.0
        if self.shared is not None:
            self._writes += 1
            try:
                await self.shared.cleared(self.route, routed.deployment.name)
            except Exception as exc:
                _store_failed(exc)

    def _adopt(self, routed: Routed, record: Health | None) -> None:
        """A deployment's shared record (None: healthy) as this process's view."""
        failures = record.failures if record is not None else 0
        routed.health.failures = failures
        routed.health.until = (record.until if record is not None
                               and failures >= self.cooldown_after else 0.0)

    async def _refresh(self) -> None:
        """Bring the shared view up to date when it is stale: inline the first time, in the
        background after that (one read at a time)."""
        if self.shared is None:
            return
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self.refresh_seconds:
            return
        if self._read_at is None:
            await self._read(now)
        elif (self._refreshing is None or self._refreshing.done()
              or self._refreshing.get_loop() is not asyncio.get_running_loop()):
            self._refreshing = asyncio.create_task(self._read(now))

    async def _read(self, now: float) -> None:
        assert self.shared is not None
        self._read_at = now  # a failing store is asked again only after the interval
        writes = self._writes
        try:
            records = await self.shared.read(self.route)
        except Exception as exc:
            _store_failed(exc)
            return
        if writes != self._writes:
            return  # this process wrote meanwhile: its view is newer than what was read
        for routed in self.deployments:
            self._adopt(routed, records.get(routed.deployment.name))

    # -- streaming --------------------------------------------------------------------------

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        await self._refresh()
        attempts = self.order()
        for number, routed in enumerate(attempts):
            deployment = routed.deployment
            attempt = BackendRequest(body={**request.body, "model": deployment.model},
                                     tenant=request.tenant, stream=request.stream,
                                     extra=request.extra)
            chunks = routed.backend.stream(attempt)
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                first = None
            except BaseException as exc:
                await _close(chunks)
                _blame(exc, self.route, deployment)
                if not falls_back(exc):
                    raise
                await self._failed(routed)
                if number + 1 == len(attempts):
                    logger.warning(
                        "routed model %r: its last deployment %r failed", self.route,
                        deployment.name, extra={"route": self.route,
                                                "deployment": deployment.name, **_reason(exc)})
                    raise
                following = attempts[number + 1].deployment.name
                logger.warning(
                    "routed model %r: deployment %r failed before any output, falling back "
                    "to %r", self.route, deployment.name, following,
                    extra={"route": self.route, "deployment": deployment.name,
                           "next_deployment": following, **_reason(exc)})
                continue
            await self._answered(routed)
            request.extra[DEPLOYMENT] = deployment.name
            try:
                if first is not None:
                    yield first
                    async for batch in chunks:
                        yield batch
            finally:
                await _close(chunks)
            return

    # -- everything else the protocol declares, asked of the deployments --------------------

    async def prepare(self, request: BackendRequest) -> None:
        """Each backend's local work, once per backend kind (Bedrock's fetched media are
        shared through ``request.extra`` by every Bedrock deployment)."""
        done: set[type] = set()
        for routed in self.deployments:
            kind = type(routed.backend)
            if kind not in done:
                done.add(kind)
                await routed.backend.prepare(request)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """Counted by the deployment that would be tried first."""
        routed = self.order()[0]
        return await routed.backend.count_tokens({**body, "model": routed.deployment.model})

    async def context_window(self, model: str) -> int | None:
        """The smallest window among the deployments that report one: any of them may serve
        the request, so the input must fit each."""
        windows = [await r.backend.context_window(r.deployment.model) for r in self.deployments]
        known = [w for w in windows if w]
        return min(known) if known else None

    def reasoning_input(self, configured: str | None) -> str | None:
        """What every deployment agrees on; otherwise the operator's setting (history is
        rendered once, before it is known which deployment serves it)."""
        answers = {r.backend.reasoning_input(configured) for r in self.deployments}
        return answers.pop() if len(answers) == 1 else configured

    def takes_images(self, model: str) -> bool | None:
        """True only when every deployment reads images (any of them may serve the turn)."""
        answers = {r.backend.takes_images(r.deployment.model) for r in self.deployments}
        return answers.pop() if len(answers) == 1 else (False if False in answers else None)

    async def list_models(self) -> list[dict[str, Any]]:
        return []

    async def aclose(self) -> None:
        return None  # the deployments' backends belong to Backends, which closes them


async def _close(chunks: AsyncIterator[list[Chunk]]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


def _store_failed(exc: Exception) -> None:
    logger.warning("routed model: the shared deployment health could not be read or written; "
                   "this process goes on with its own view", extra={"reason": repr(exc)[:200]})


def _blame(exc: BaseException, route: str, deployment: Deployment) -> None:
    """A backend names the setting its URL comes from, GATEWAY_UPSTREAM_URL ("is
    GATEWAY_UPSTREAM_URL right?"); a deployment with its own ``url`` has it from
    GATEWAY_ROUTES, so its failure names that route's deployment instead, in the log line
    and in the error a client may get."""
    if (isinstance(exc, GatewayError) and deployment.option("url") is not None
            and _URL_SETTING in exc.message):
        exc.message = exc.message.replace(
            _URL_SETTING, f"the url of route {route!r} deployment {deployment.name!r} "
            "(GATEWAY_ROUTES)")
        exc.args = (exc.message,)


def _reason(exc: BaseException) -> dict[str, Any]:
    """The failure as log fields: status, code, the (already redacted) message, shortened."""
    if isinstance(exc, GatewayError):
        return {"upstream_status": exc.status, "error_code": exc.code,
                "reason": exc.message[:_REASON_CHARS]}
    return {"reason": type(exc).__name__}

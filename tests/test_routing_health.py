"""Routed deployments' health shared through the store (issue 33; store/health.py).

A deployment that keeps failing is skipped for a cool-down by every process on the store, not
only the one that saw it fail: two gateways (two Gateway instances under uvicorn, the official
``openai`` client in front of each) on one SQLite file, and on one DynamoDB table (moto over
HTTP); a failure seen by one makes the other skip the deployment from its first request on,
and a success clears it for both. The store's records themselves are checked on both stores.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.backends.base import BackendRequest, BaseBackend
from responses_gateway.backends.route_config import Deployment, parse_routes
from responses_gateway.backends.router import Router
from responses_gateway.errors import UpstreamError
from responses_gateway.store.health import FORGET_AFTER, Health, HealthStore
from responses_gateway.store.health_sqlite import SQLiteHealth
from tests.helpers.e2e import client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.helpers.scripted_upstream import ScriptedUpstream

ROUTE = "shared"


@pytest.fixture(params=["sqlite", "dynamodb"])
def store_setting(request: pytest.FixtureRequest, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> str:
    """``GATEWAY_STORE`` for a fresh database both gateways of a test share."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'gateway.db'}"
    use_moto(monkeypatch, request.getfixturevalue("moto_endpoint"))
    return f"dynamodb:{create_dynamodb_table()}"


def health_store(setting: str) -> HealthStore:
    kind, _, target = setting.partition(":")
    if kind == "sqlite":
        return SQLiteHealth(target)
    from responses_gateway.store.dynamodb.health import DynamoDBHealth

    return DynamoDBHealth(target)


# -- two gateways on one store -----------------------------------------------------------------


@pytest.fixture
def upstreams() -> Iterator[tuple[ScriptedUpstream, ScriptedUpstream]]:
    with ScriptedUpstream() as first, ScriptedUpstream() as second:
        yield first, second


@pytest.mark.slow
def test_failures_one_gateway_saw_make_the_other_skip_the_deployment(
    store_setting: str, upstreams: tuple[ScriptedUpstream, ScriptedUpstream],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = upstreams
    routes = parse_routes(json.dumps({"routes": {ROUTE: [
        {"backend": "openai", "model": "script/500", "name": "first", "url": first.base_url},
        {"backend": "openai", "model": "m-second", "name": "second", "url": second.base_url},
    ]}, "cooldown_after": 2, "cooldown_seconds": 120}), default_kind="openai",
        secret=lambda name: None)
    settings = e2e_settings(first, Path("unused.db"), store=store_setting, routes=routes)
    caplog.set_level(logging.WARNING, logger="responses_gateway.router")

    with GatewayServer(settings) as one, GatewayServer(settings) as other:
        assert one.gateway.store is not other.gateway.store  # two gateways, one database
        with client_for(one) as c:
            for _ in range(2):
                assert c.responses.create(model=ROUTE, input="Hi").status == "completed"
        assert len(first.requests) == 2  # the first deployment failed twice: cooling down
        fallbacks = [r for r in caplog.records if "falling back" in r.getMessage()]
        assert len(fallbacks) == 2

        with client_for(other) as c:  # its very first request already skips it
            raw = c.responses.with_raw_response.create(model=ROUTE, input="Hi")
        assert raw.parse().status == "completed"
        assert raw.headers["x-gateway-deployment"] == "second"
        assert len(first.requests) == 2
        assert len(second.requests) == 3
        assert len([r for r in caplog.records if "falling back" in r.getMessage()]) == 2

        # The store's record says so, for any third process to read.
        [record] = asyncio.run(health_store(store_setting).read(ROUTE)).items()
        assert record[0] == "first"
        assert record[1].failures == 2
        assert 100 < record[1].until - time.time() <= 120


# -- the router over a shared store --------------------------------------------------------------


class _Answers(BaseBackend):
    """Fails with ``error`` while it is set, else answers; counts its calls."""

    name = "answers"

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls = 0

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Any]]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        yield [{"choices": [{"index": 0, "delta": {"content": "ok"}}]}]


def _router(shared: HealthStore, flaky: _Answers, spare: _Answers, **kwargs: Any) -> Router:
    return Router(ROUTE, [(Deployment(name="flaky", kind="openai", model="m-a"), flaky),
                          (Deployment(name="spare", kind="openai", model="m-b"), spare)],
                  cooldown_after=2, cooldown_seconds=60, shared=shared, **kwargs)


async def _served(router: Router) -> str:
    request = BackendRequest(body={"model": ROUTE, "messages": []})
    async for _ in router.stream(request):
        pass
    return request.extra["deployment"]


@pytest.mark.slow
def test_routers_share_failures_and_a_success_clears_them_for_both(store_setting: str) -> None:
    async def scenario() -> None:
        flaky_here, flaky_there = (_Answers(UpstreamError(503, "busy")),
                                   _Answers(UpstreamError(503, "busy")))
        here = _router(health_store(store_setting), flaky_here, _Answers(), refresh_seconds=0)
        assert [await _served(here) for _ in range(3)] == ["spare"] * 3
        assert flaky_here.calls == 2  # cooling down here after two failures

        # A new process (a new Lambda instance) reads before its first request: it skips it.
        there = _router(health_store(store_setting), flaky_there, _Answers(), refresh_seconds=0)
        assert [await _served(there) for _ in range(3)] == ["spare"] * 3
        assert flaky_there.calls == 0

        # The deployment recovers; a process that tries it (nothing else to try) clears it.
        flaky_here.error = None
        lonely = Router(ROUTE, [(Deployment(name="flaky", kind="openai", model="m-a"),
                                 flaky_here)], cooldown_after=2, cooldown_seconds=60,
                        shared=health_store(store_setting))
        assert await _served(lonely) == "flaky"
        assert await here.shared.read(ROUTE) == {}  # type: ignore[union-attr]
        # ``there`` still had it cooling: its view is read again in the background ...
        flaky_there.error = None
        assert await _served(there) == "spare"
        deadline = time.monotonic() + 15  # a store read in the background (moto: a round trip)
        while there.deployments[0].health.until and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert await _served(there) == "flaky"  # ... and the deployment is tried again

    asyncio.run(scenario())


def test_the_happy_path_reads_the_store_once_per_interval(tmp_path: Path) -> None:
    """A new process reads before its first request; later, at most once per interval and
    never on the request's path; an answering deployment writes nothing."""

    class Counting(SQLiteHealth):
        reads = writes = 0

        async def read(self, route: str) -> dict[str, Health]:
            Counting.reads += 1
            return await super().read(route)

        async def cleared(self, route: str, deployment: str) -> None:
            Counting.writes += 1

    async def scenario() -> None:
        now = [1000.0]
        router = _router(Counting(str(tmp_path / "h.db")), _Answers(), _Answers(),
                         clock=lambda: now[0], refresh_seconds=2)
        for _ in range(50):
            assert await _served(router) == "flaky"
        assert (Counting.reads, Counting.writes) == (1, 0)
        now[0] += 2.5
        for _ in range(50):
            await _served(router)
        await asyncio.sleep(0.05)
        assert (Counting.reads, Counting.writes) == (2, 0)

    asyncio.run(scenario())


def test_a_failing_health_store_leaves_routing_to_the_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(HealthStore):
        async def read(self, route: str) -> dict[str, Health]:
            raise OSError("store down")

        async def failed(self, route: str, deployment: str, until: float) -> Health:
            raise OSError("store down")

        async def cleared(self, route: str, deployment: str) -> None:
            raise OSError("store down")

    flaky, spare = _Answers(UpstreamError(503, "busy")), _Answers()
    router = _router(Broken(), flaky, spare)
    caplog.set_level(logging.WARNING, logger="responses_gateway.router")
    served = [asyncio.run(_served(router)) for _ in range(3)]
    assert served == ["spare"] * 3
    assert flaky.calls == 2  # the process's own count still cools it down
    assert any("shared deployment health" in r.getMessage() for r in caplog.records)


def test_records_count_atomically_and_are_forgotten_when_old(store_setting: str) -> None:
    async def scenario() -> None:
        store = health_store(store_setting)
        now = time.time()
        counts = await asyncio.gather(*(store.failed("r", "d", now + 30) for _ in range(6)))
        assert sorted(h.failures for h in counts) == [1, 2, 3, 4, 5, 6]
        assert (await store.read("r"))["d"] == Health(6, now + 30)
        assert await store.read("other") == {}
        await store.cleared("r", "d")
        assert await store.read("r") == {}
        # A record whose last failure is older than FORGET_AFTER counts as gone.
        past = now - FORGET_AFTER - 60
        await asyncio.to_thread(store._failed, "r", "old", past, past)  # type: ignore[attr-defined]
        assert await store.read("r") == {}
        assert (await store.failed("r", "old", now + 30)).failures == 1
        await store.aclose()

    asyncio.run(scenario())


def test_the_store_wrappers_hand_on_the_shared_health(tmp_path: Path) -> None:
    """The store a gateway is given may be wrapped (tracing, large values beside it): the
    wrapper must not answer the base class's None."""
    from responses_gateway.store.blobs import BlobbedStore, MemoryBlobs
    from responses_gateway.store.sqlite import SQLiteStore
    from responses_gateway.traced_store import TracedStore as _TracedStore

    store = SQLiteStore(str(tmp_path / "gateway.db"))
    try:
        for wrapped in (store, _TracedStore(store), BlobbedStore(store, MemoryBlobs()),
                        _TracedStore(BlobbedStore(store, MemoryBlobs()))):
            health = wrapped.health_store()
            assert isinstance(health, SQLiteHealth)
            assert health.path == store.path
    finally:
        asyncio.run(store.aclose())

"""The container engines the shared suite (tests/test_container_engines.py) runs over.

One entry per engine in :data:`ENGINES`: a name and a function building the engine for one
test (it may ask pytest for fixtures through ``request``). Adding an engine is one line
here. An engine whose ``check()`` answers a line (no jail on this machine, no endpoint) is
skipped with that line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from responses_gateway.containers.engine import ContainerEngine

T = TypeVar("T")
Factory = Callable[[pytest.FixtureRequest, Path], ContainerEngine]


def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> ContainerEngine:
    from responses_gateway.containers.sandbox import SandboxEngine

    return SandboxEngine(tmp_path / "containers", memory_mb=1024)


def agentcore(request: pytest.FixtureRequest, tmp_path: Path) -> ContainerEngine:
    """The AgentCore engine on the fake AgentCore (tests/helpers/agentcore_server.py), its
    files' S3 copy in a fresh bucket on moto."""
    import uuid

    import boto3

    from responses_gateway.containers.agentcore import AgentCoreEngine
    from tests.helpers.agentcore_server import FakeAgentCore
    from tests.helpers.moto_server import use_moto

    endpoint = request.getfixturevalue("moto_endpoint")
    use_moto(request.getfixturevalue("monkeypatch"), endpoint)
    bucket = f"containers-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    fake = FakeAgentCore().start()
    request.addfinalizer(fake.stop)
    return AgentCoreEngine(bucket=bucket, region="us-east-1", endpoint_url=fake.url,
                           session_seconds=900, s3_endpoint_url=endpoint)


ENGINES: dict[str, Factory] = {
    "sandbox": sandbox,
    "agentcore": agentcore,
}

#: Engines that answer an execution whole when it ends (AgentCore's InvokeCodeInterpreter
#: sends one ``result`` event): of one stopped at its timeout nothing comes back, where the
#: sandbox returns what it printed before. The tests that check that output skip it for them.
WHOLE_ANSWERS = frozenset({"agentcore"})


class Harness:
    """An engine and the one event loop a test drives it on."""

    def __init__(self, engine: ContainerEngine, runner: asyncio.Runner) -> None:
        self.engine = engine
        self._runner = runner

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wrapped() -> Any:
            return await awaitable

        return self._runner.run(wrapped())


def harness(engine: ContainerEngine) -> Iterator[Harness]:
    """Yield a harness over ``engine`` (skipped when its check fails); close it after."""
    runner = asyncio.Runner()
    try:
        why = runner.run(engine.check())
        if why:
            pytest.skip(why)
        yield Harness(engine, runner)
    finally:
        try:
            runner.run(engine.aclose())
        finally:
            runner.close()


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """Each engine of :data:`ENGINES` in turn."""
    yield from harness(ENGINES[request.param](request, tmp_path))

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


ENGINES: dict[str, Factory] = {
    "sandbox": sandbox,
}


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

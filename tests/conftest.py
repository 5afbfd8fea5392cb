"""Shared test setup: the package and the repo root importable, fixtures located."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

for path in (ROOT, ROOT / "handler"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


# -- tiers ---------------------------------------------------------------------------------------
# ``-m "not slow"`` is the fast tier (README, "Run the tests"); the markers are declared in
# pyproject.toml. A test that needs Node.js, a browser or the deployment tools is slow as well:
# the fast tier must run on a machine without them.

#: Marks that stand for a slow test: each must come with ``slow`` beside it.
SLOW_KINDS = ("node", "browser", "deploy")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a node/browser/deploy test not marked ``slow`` (it would land in the fast tier)."""
    unmarked = [f"{item.nodeid} ({kind})" for item in items for kind in SLOW_KINDS
                if item.get_closest_marker(kind) and not item.get_closest_marker("slow")]
    if unmarked:
        raise pytest.UsageError("marked as needing a slow tool but not `slow`: "
                                + ", ".join(unmarked))


# -- shared end-to-end fixtures --------------------------------------------------------------
# A module defines its own ``gateway`` fixture (its settings); these build on it.

@pytest.fixture(scope="module")
def upstream() -> Iterator[object]:
    """A scripted Chat Completions server (real HTTP/SSE) for the module's gateway."""
    from tests.helpers.scripted_upstream import ScriptedUpstream

    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    """moto in server mode on 127.0.0.1 (DynamoDB, S3, ...), one per session: tests isolate
    by unique table and bucket names (helpers/moto_server.py)."""
    from tests.helpers.moto_server import shared_endpoint

    return shared_endpoint()


@pytest.fixture(scope="session")
def embedding_server() -> Iterator[object]:
    """The hashing embedder (helpers/embedding_server.py) over HTTP, one per session."""
    from tests.helpers.embedding_server import EmbeddingServer

    with EmbeddingServer().running() as server:
        yield server


@pytest.fixture(scope="module")
def embeddings(embedding_server: Any) -> Iterator[object]:
    """The session's embedding server, handed to the next module with no stall or fault
    left (its counters go on: tests compare them before and after)."""
    yield embedding_server
    embedding_server.settle()


@pytest.fixture(scope="module")
def client(gateway: object) -> Iterator[object]:
    """The official openai client pointed at the module's gateway."""
    from tests.helpers.e2e import client_for

    with client_for(gateway) as c:  # type: ignore[arg-type]
        yield c

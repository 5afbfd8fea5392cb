"""Shared test setup: the package and the repo root importable, fixtures located."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

for path in (ROOT, ROOT / "handler"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


# -- shared end-to-end fixtures --------------------------------------------------------------
# A module defines its own ``gateway`` fixture (its settings); these build on it.

@pytest.fixture(scope="module")
def upstream() -> Iterator[object]:
    """A scripted Chat Completions server (real HTTP/SSE) for the module's gateway."""
    from tests.helpers.scripted_upstream import ScriptedUpstream

    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """moto in server mode on 127.0.0.1 (DynamoDB, S3, ...), one per module."""
    from tests.helpers.moto_server import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def client(gateway: object) -> Iterator[object]:
    """The official openai client pointed at the module's gateway."""
    from tests.helpers.e2e import client_for

    with client_for(gateway) as c:  # type: ignore[arg-type]
        yield c

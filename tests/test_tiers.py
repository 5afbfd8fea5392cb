"""The test tiers: the markers pyproject.toml declares, the README's two commands, CI running
everything, and conftest refusing a node/browser/deploy test that is not also ``slow``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parent.parent
FULL = ("scripts/test-deps.sh && python3 -m pip install --no-deps -r requirements-test.lock "
        "-e . && python3 -m pytest -n 4 --dist worksteal")
FAST = 'python3 -m pytest -m "not slow"'


def _pytest_config() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_markers_are_declared_and_strict() -> None:
    config = _pytest_config()
    declared = {line.split(":", 1)[0] for line in config["markers"]}
    assert {"slow", *conftest.SLOW_KINDS} <= declared
    assert "--strict-markers" in config["addopts"].split()


def test_the_readme_gives_both_commands_and_every_marker() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run the tests", 1)[1].split("\n## ", 1)[0]
    assert FULL in section and FAST in section
    for line in _pytest_config()["markers"]:
        name = line.split(":", 1)[0]
        assert re.search(rf"^\| `{name}` \|", section, re.M), f"README: no row for {name}"


def test_ci_runs_the_whole_suite_with_the_readme_command() -> None:
    run = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert run[-1] == FULL


class _Item:
    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid = nodeid
        self.marks = marks

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


@pytest.mark.parametrize("kind", conftest.SLOW_KINDS)
def test_a_tool_needing_test_not_marked_slow_is_refused(kind: str) -> None:
    items: list[Any] = [_Item("t.py::ok", kind, "slow"), _Item("t.py::fast"),
                        _Item("t.py::bad", kind)]
    with pytest.raises(pytest.UsageError, match=rf"t\.py::bad \({kind}\)"):
        conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    conftest.pytest_collection_modifyitems(None, items[:2])  # type: ignore[arg-type]

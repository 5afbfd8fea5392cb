"""scripts/test-deps.sh (issue 40): it installs only the package that is missing, never
upgrading one already installed. Run against a PATH of fakes: ``chromium`` / ``chromedriver``
present or not, and an ``apt-get`` that writes down how it was called."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "test-deps.sh"
BASH = shutil.which("bash") or "/bin/bash"


def run(tmp_path: Path, present: tuple[str, ...], *, chromium_version: str | None = None,
        apt_fails: bool = False) -> list[list[str]]:
    """The script under a PATH holding only ``present`` and the fakes; apt-get's calls.
    ``chromium_version``: what dpkg-query says of the installed chromium (None: no dpkg);
    ``apt_fails``: apt-get's install exits 100, as when a pinned version is gone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls"
    fakes = {name: "#!/bin/sh\nexit 0\n" for name in present}
    fakes["id"] = "#!/bin/sh\necho 0\n"  # root: no sudo
    fail = 'case "$1" in install) exit 100;; esac\n' if apt_fails else ""
    fakes["apt-get"] = f'#!/bin/sh\necho "$*" >> "{calls}"\n{fail}'
    if chromium_version is not None:
        fakes["dpkg-query"] = f"#!/bin/sh\necho -n '{chromium_version}'\n"
    for name, text in fakes.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    subprocess.run([BASH, str(SCRIPT)], env={"PATH": str(bin_dir)}, check=True, timeout=30)
    return [line.split() for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.mark.parametrize(("present", "installed"), [
    (("chromium",), ["chromium-driver"]),
    (("chromedriver",), ["chromium"]),
    ((), ["chromium", "chromium-driver"]),
])
def test_only_what_is_missing_is_installed(tmp_path: Path, present: tuple[str, ...],
                                           installed: list[str]) -> None:
    update, install = run(tmp_path, present)
    assert update == ["update", "-qq"]
    assert install[:2] == ["install", "-y"]
    assert {"--no-install-recommends", "--no-upgrade"} <= set(install)
    assert [word for word in install if not word.startswith("-")][1:] == installed


def test_nothing_runs_when_both_are_there(tmp_path: Path) -> None:
    assert run(tmp_path, ("chromium", "chromedriver")) == []


def test_the_driver_beside_an_installed_chromium_is_pinned_to_its_version(
        tmp_path: Path) -> None:
    """Debian's chromium-driver depends on its own chromium version exactly: unpinned, apt
    would upgrade the installed chromium to match (--no-upgrade protects only the packages
    named). Pinned to the installed version, chromium stays as it is."""
    _, install = run(tmp_path, ("chromium",), chromium_version="156.0.8078.114-1~deb12u1")
    assert install[-1] == "chromium-driver=156.0.8078.114-1~deb12u1"


def test_a_driver_that_cannot_be_had_is_said_not_fatal(tmp_path: Path) -> None:
    """The pinned version gone from the archive: nothing installed, the script still ends 0
    (the browser test is skipped and says why)."""
    _, install = run(tmp_path, ("chromium",), chromium_version="1.0", apt_fails=True)
    assert install[-1] == "chromium-driver=1.0"

"""A pids cgroup per jail, when this machine lets the gateway make one.

RLIMIT_NPROC bounds a jail's processes only when the gateway is not root: the kernel does not
apply it to processes whose real user is root, even inside a user namespace. So where the
gateway can create a cgroup with the ``pids`` controller (cgroup v1's ``pids`` hierarchy, or a
v2 cgroup whose ``cgroup.subtree_control`` has ``pids``), each jail gets one with ``pids.max``
set, and the jail's outer process enters it before bwrap starts (a fork storm then stops at
the bound whoever runs the gateway). Elsewhere it is None and RLIMIT_NPROC is the bound.
Blocking (a few file writes): run it off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "responses-gateway-sandbox"


def _own_pids_folder() -> Path | None:
    """The folder of this process's pids cgroup, if it is one the gateway may write in."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):  # cgroup v1
            folder = ROOT / "pids" / path.lstrip("/")
            return folder if os.access(folder, os.W_OK) else None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":  # cgroup v2
            folder = ROOT / path.lstrip("/")
            try:
                enabled = (folder / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            return folder if "pids" in enabled and os.access(folder, os.W_OK) else None
    return None


class PidsCgroup:
    """One jail's cgroup: ``pids.max`` processes at most."""

    _base: Path | bool | None = False  # False: not looked for yet

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def create(cls, name: str, limit: int) -> PidsCgroup | None:
        if cls._base is False:
            cls._base = _own_pids_folder()
        base = cls._base
        if not isinstance(base, Path):
            return None
        folder = base / PARENT / f"{name}-{secrets.token_hex(4)}"
        try:
            folder.mkdir(parents=True)
            (folder / "pids.max").write_text(f"{int(limit)}\n")
        except OSError:
            with contextlib.suppress(OSError):
                folder.rmdir()
            cls._base = None  # not writable after all: RLIMIT_NPROC only from now on
            return None
        return cls(folder)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the cgroup, then execs."""
        script = 'echo $$ > "$0" && exec "$@"'
        return ["/bin/sh", "-c", script, str(self.folder / "cgroup.procs"), *argv]

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (they die with the jail)."""
        for _ in range(50):
            try:
                self.folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)

"""A cgroup per container bounding its processes and its memory, when this machine lets the
gateway make one.

RLIMIT_NPROC bounds a jail's processes only when the gateway is not root: the kernel does not
apply it to processes whose real user is root, even inside a user namespace. And RLIMIT_AS
bounds each process, not their sum. So where the gateway may create cgroups below its own
(cgroup v1's ``pids`` and ``memory`` hierarchies, or a v2 cgroup whose
``cgroup.subtree_control`` enables them), each container gets one with ``pids.max`` and a
memory limit (its ``memory_mb``, tmpfs pages included; past it the kernel's OOM killer ends a
process of that container only). Every jail of the container enters it before bwrap starts.
Where none can be made it is None, and the rlimits are the bound. Blocking (file writes): run
it off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "responses-gateway-sandbox"
CONTROLLERS = ("pids", "memory")


def _own_folders() -> dict[str, tuple[Path, bool]]:
    """Per controller, the folder of this process's cgroup where the gateway may make
    cgroups, and whether it is cgroup v1."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, tuple[Path, bool]] = {}
    unified: Path | None = None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            unified = ROOT / path.lstrip("/")
            continue
        for name in controllers.split(","):  # cgroup v1
            folder = ROOT / name / path.lstrip("/")
            if name in CONTROLLERS and os.access(folder, os.W_OK):
                found[name] = (folder, True)
    if not found and unified is not None and os.access(unified, os.W_OK):
        try:
            enabled = (unified / "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        found = {name: (unified, False) for name in CONTROLLERS if name in enabled}
    return found


#: (file, required) per controller and cgroup version, in the order they are written
_LIMITS = {
    ("pids", True): [("pids.max", True)],
    ("pids", False): [("pids.max", True)],
    ("memory", True): [("memory.limit_in_bytes", True), ("memory.memsw.limit_in_bytes", False)],
    ("memory", False): [("memory.max", True), ("memory.swap.max", False)],
}


class ContainerCgroup:
    """One container's cgroup (a folder per v1 hierarchy, or one v2 folder)."""

    _bases: dict[str, tuple[Path, bool]] | None = None

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @classmethod
    def create(cls, name: str, *, pids: int, memory_bytes: int) -> ContainerCgroup | None:
        if cls._bases is None:
            cls._bases = _own_folders()
        values = {"pids.max": str(int(pids)), "memory.limit_in_bytes": str(memory_bytes),
                  "memory.memsw.limit_in_bytes": str(memory_bytes),
                  "memory.max": str(memory_bytes), "memory.swap.max": "0"}
        suffix = secrets.token_hex(4)
        made = cls([])
        try:
            for controller, (base, v1) in cls._bases.items():
                folder = base / PARENT / f"{name}-{suffix}"
                if folder not in made.folders:
                    folder.mkdir(parents=True)
                    made.folders.append(folder)
                for key, required in _LIMITS[(controller, v1)]:
                    if required or (folder / key).exists():
                        (folder / key).write_text(values[key] + "\n")
        except OSError:
            made.remove()
            cls._bases = {}  # not writable after all: the rlimits only from now on
            return None
        return made if made.folders else None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the cgroup, then execs."""
        script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; '
                  'shift; n=$((n - 1)); done; exec "$@"')
        procs = [str(folder / "cgroup.procs") for folder in self.folders]
        return ["/bin/sh", "-c", script, "sh", str(len(procs)), *procs, *argv]

    def remove(self) -> None:
        """Kill what is left in the cgroup (its jails' processes die with them; this catches
        any that did not), then remove it."""
        for folder in self.folders:
            for attempt in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt % 10 == 0:
                        self._kill(folder)
                    time.sleep(0.02)
        self.folders = []

    @staticmethod
    def _kill(folder: Path) -> None:
        with contextlib.suppress(OSError, ValueError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)

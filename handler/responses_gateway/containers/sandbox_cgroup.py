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


def _started(pid: int | str) -> str | None:
    """When process ``pid`` started (clock ticks since boot), None if there is none: with
    the pid, what tells one process from a later one that got its number."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


class ContainerCgroup:
    """One container's cgroup (a folder per v1 hierarchy, or one v2 folder), under a folder
    of the gateway process that made it: ``responses-gateway-sandbox/<pid>.<start>/<id>-…``.
    A gateway that died (killed outright: nothing removed its cgroups) is found out by the
    next one to start a jail, which kills what is left in them and removes them."""

    _bases: dict[str, tuple[Path, bool]] | None = None
    _owner = f"{os.getpid()}.{_started(os.getpid())}"

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @classmethod
    def _prepare(cls) -> dict[str, tuple[Path, bool]]:
        if cls._bases is None or cls._owner != f"{os.getpid()}.{_started(os.getpid())}":
            cls._owner = f"{os.getpid()}.{_started(os.getpid())}"  # a forked child is anew
            bases = _own_folders()
            for base, v1 in set(bases.values()):
                parent = base / PARENT
                with contextlib.suppress(OSError):
                    (parent / cls._owner).mkdir(parents=True, exist_ok=True)
                    if not v1:  # v2: the controllers pass down each level
                        enable = " ".join(f"+{c}" for c in CONTROLLERS if bases.get(c))
                        for folder in (parent, parent / cls._owner):
                            (folder / "cgroup.subtree_control").write_text(enable)
                _reclaim(parent, cls._owner)
            cls._bases = bases
        return cls._bases

    @classmethod
    def create(cls, name: str, *, pids: int, memory_bytes: int) -> ContainerCgroup | None:
        bases = cls._prepare()
        if any(not (base / PARENT / cls._owner).is_dir() for base, _ in bases.values()):
            cls._bases = None  # released when an engine closed: made again
            bases = cls._prepare()
        values = {"pids.max": str(int(pids)), "memory.limit_in_bytes": str(memory_bytes),
                  "memory.memsw.limit_in_bytes": str(memory_bytes),
                  "memory.max": str(memory_bytes), "memory.swap.max": "0"}
        suffix = secrets.token_hex(4)
        made = cls([])
        try:
            for controller, (base, v1) in bases.items():
                folder = base / PARENT / cls._owner / f"{name}-{suffix}"
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

    @classmethod
    def release(cls) -> None:
        """Remove this process's folder if no cgroup is left in it (an engine closed)."""
        for base, _ in (cls._bases or {}).values():
            with contextlib.suppress(OSError):
                (base / PARENT / cls._owner).rmdir()

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


def _reclaim(parent: Path, own: str) -> None:
    """Kill what is left in the cgroups of gateway processes that are gone, remove them."""
    try:
        owners = [d for d in parent.iterdir() if d.is_dir() and d.name != own]
    except OSError:
        return
    for owner in owners:
        pid, _, started = owner.name.partition(".")
        if not pid.isdigit() or not started or _started(pid) == started:
            continue  # not one of ours, or its gateway still runs
        with contextlib.suppress(OSError):
            ContainerCgroup([d for d in owner.iterdir() if d.is_dir()]).remove()
            owner.rmdir()

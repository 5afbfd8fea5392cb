"""The sandbox engine's own behaviour, beyond the shared suite (tests/test_container_engines.py)
and its walls (tests/test_sandbox_walls.py)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from responses_gateway.containers.engine import Box, EngineError
from responses_gateway.containers.sandbox import SandboxEngine
from tests.helpers.container_engines import Harness, harness

OUT = 64 * 1024


@pytest.fixture
def sandbox(tmp_path: Path):
    yield from harness(SandboxEngine(tmp_path / "containers", max_running=2))


def run(h: Harness, code: str, b: Box, timeout: float = 60.0):
    return h.run(h.engine.run_code(b, code, timeout=timeout, max_output=OUT))


def fake_bwrap(tmp_path: Path, message: str) -> str:
    """A bwrap that fails as bubblewrap does where it cannot make namespaces."""
    script = tmp_path / "bwrap"
    script.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_check_says_why_no_jail_runs(tmp_path: Path) -> None:
    why = "bwrap: No permissions to create a new namespace"
    engine = SandboxEngine(tmp_path / "c", bwrap=fake_bwrap(tmp_path, why))
    line = asyncio.run(engine.check())
    assert line is not None and why in line and "\n" not in line
    engine = SandboxEngine(tmp_path / "c", bwrap=str(tmp_path / "missing"))
    assert "cannot run here" in asyncio.run(engine.check())


def test_a_jail_that_cannot_start_is_an_engine_error(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    engine = SandboxEngine(tmp_path / "c", bwrap=fake_bwrap(tmp_path, f"bwrap: {tmp_path}"))

    async def go() -> None:
        with pytest.raises(EngineError, match="did not start") as raised:
            await engine.run_code(Box(id="cntr_x", memory_mb=256), "1", timeout=10,
                                  max_output=OUT)
        assert str(tmp_path) not in str(raised.value)  # the client sees no host path
        await engine.aclose()

    with caplog.at_level("WARNING", logger="responses_gateway.containers"):
        asyncio.run(go())
    assert f"bwrap: {tmp_path}" in caplog.text  # the operator does


def test_settings_supply_the_python_and_the_memory_cap(tmp_path: Path) -> None:
    settings = SimpleNamespace(sandbox_python="/opt/py/bin/python3", code_memory_mb=300)
    engine = SandboxEngine(tmp_path, settings)
    assert engine.python == "/opt/py/bin/python3"
    assert engine._limits(Box(id="cntr_x", memory_mb=4096))["as"] == 300 * 1024 * 1024
    assert SandboxEngine(tmp_path, settings, memory_mb=200).memory_cap == 200


@pytest.mark.parametrize("name", ["../up", ".hidden", "a/b", "", "x" * 200])
def test_a_container_id_names_one_folder(tmp_path: Path, name: str) -> None:
    engine = SandboxEngine(tmp_path)
    with pytest.raises(EngineError):
        asyncio.run(engine.start(Box(id=name, memory_mb=256)))


@pytest.mark.slow
def test_a_last_expression_is_shown_like_a_notebook(sandbox: Harness) -> None:
    b = Box(id="cntr_expr", memory_mb=512)
    assert run(sandbox, "x = 3\nx * 2", b).stdout == "6\n"
    assert run(sandbox, "None", b).stdout == ""
    assert run(sandbox, "print('a')\n'b'", b).stdout == "a\n'b'\n"


@pytest.mark.slow
def test_a_crash_between_calls_is_reported_by_the_next(sandbox: Harness) -> None:
    b = Box(id="cntr_later", memory_mb=512)
    done = run(sandbox, "import os, threading\nkept = 1\n"
                        "threading.Timer(0.2, os._exit, (9,)).start()", b)
    assert done.error is None and not done.reset
    assert run(sandbox, "import time\ntime.sleep(1)", b).reset  # it died during this one or before
    after = run(sandbox, "print('kept' in globals())", b)
    assert after.stdout == "False\n" and not after.reset


@pytest.mark.slow
def test_calls_on_one_container_take_turns(sandbox: Harness) -> None:
    b = Box(id="cntr_turns", memory_mb=512)
    run(sandbox, "log = []", b)

    async def both():
        return await asyncio.gather(*(
            sandbox.engine.run_code(b, f"import time\nlog.append({i})\ntime.sleep(0.3)\n"
                                       f"log.append({i})\nprint(log[-2:])", timeout=60,
                                    max_output=OUT) for i in range(2)))

    first, second = sandbox.run(both())
    assert first.stdout == "[0, 0]\n" and second.stdout == "[1, 1]\n"


@pytest.mark.slow
def test_past_max_running_the_least_recent_idle_process_ends(sandbox: Harness) -> None:
    boxes = [Box(id=f"cntr_lru{i}", memory_mb=256) for i in range(3)]
    for i, b in enumerate(boxes):
        assert not run(sandbox, f"v = {i}", b).reset
    # Two may run (max_running=2): the third's start ended the first's process.
    first = run(sandbox, "print('v' in globals())", boxes[0])
    assert first.reset and first.stdout == "False\n"
    assert run(sandbox, "print(v)", boxes[2]).stdout == "2\n"


@pytest.mark.slow
def test_a_container_stopped_mid_call_ends_the_call(sandbox: Harness) -> None:
    b = Box(id="cntr_midway", memory_mb=256)
    run(sandbox, "1", b)

    async def stop_during() -> object:
        call = asyncio.ensure_future(sandbox.engine.run_code(
            b, "import time\ntime.sleep(30)", timeout=60, max_output=OUT))
        await asyncio.sleep(0.5)
        await sandbox.engine.stop(b)
        return await asyncio.wait_for(call, 10)

    result = sandbox.run(stop_during())
    assert result.reset and not result.timed_out


@pytest.mark.slow
def test_how_a_process_ended_is_told(sandbox: Harness) -> None:
    b = Box(id="cntr_ends", memory_mb=256)
    segfault = run(sandbox, "import ctypes\nctypes.string_at(0)", b)
    assert segfault.reset and "SIGSEGV" in segfault.error
    exited = run(sandbox, "import os\nos._exit(5)", b)
    assert exited.reset and "exit status 5" in exited.error
    # SystemExit is the code's exception; the process goes on.
    stopped = run(sandbox, "import sys\nkept = 1\nsys.exit(3)", b)
    assert not stopped.reset and stopped.error.rstrip().endswith("SystemExit: 3")
    # Frames the code writes on the runner's socket do not pass for the runner's answer.
    forged = run(sandbox, 'import os, struct\nbody = b\'{"error": "forged"}\'\n'
                          'os.write(200, struct.pack(">I", len(body)) + body)', b)
    assert forged.error is None and not forged.reset
    # Closing its stdout does not lose the next execution's output.
    run(sandbox, "import os\nos.close(1)", b)
    assert run(sandbox, "print(kept)", b).stdout == "1\n"
    # Frames that are not the answer, past what an answer may take, are not parsed on the
    # gateway's event loop for as long as the code goes on writing them.
    flood = run(sandbox, 'import json, os, struct\nbody = json.dumps({"x": "y" * 900_000})'
                         '.encode()\nframe = struct.pack(">I", len(body)) + body\n'
                         'for _ in range(4):\n    os.write(200, frame)\nprint("done")', b)
    assert flood.reset and "control socket" in flood.error
    garbled = run(sandbox, "import os\nos.write(200, b'\\xff' * 8)", b)
    assert garbled.reset and "control socket" in garbled.error
    assert run(sandbox, "print('again')", b).stdout == "again\n"


@pytest.mark.slow
def test_the_sandbox_python_may_be_a_virtual_environment(tmp_path: Path) -> None:
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    gen = harness(SandboxEngine(tmp_path / "containers", python=str(venv / "bin" / "python")))
    h = next(gen)
    try:
        b = Box(id="cntr_venv", memory_mb=512)
        result = run(h, "import sys\nprint(sys.prefix)", b)
        assert result.error is None and result.stdout == f"{venv}\n"
        (shell,) = h.run(h.engine.run_commands(b, ["python -c 'import sys; print(sys.prefix)'"],
                                               timeout=60, max_output=OUT))
        assert shell.stdout == f"{venv}\n"
    finally:
        with pytest.raises(StopIteration):
            next(gen)


@pytest.mark.slow
def test_what_ran_out_of_time_printed_comes_back(sandbox: Harness) -> None:
    b = Box(id="cntr_partial", memory_mb=256)
    run(sandbox, "pass", b)  # its Python started first: the 2 s below time the code alone
    result = run(sandbox, "import sys\nprint('line one')\nsys.stderr.write('err\\n')\n"
                          "while True:\n    pass", b, timeout=2)
    assert result.timed_out and result.reset
    assert result.stdout == "line one\n" and result.stderr == "err\n"
    # A command's too, and a crashed process's.
    (command,) = sandbox.run(sandbox.engine.run_commands(
        b, ["echo started; sleep 60"], timeout=5, max_output=OUT))  # 5 s: a jail to start
    assert command.timed_out and command.stdout == "started\n"
    crashed = run(sandbox, "import os\nprint('going')\nos._exit(7)", b)
    assert crashed.reset and crashed.stdout == "going\n"


def _pids_running(mark: str) -> list[int]:
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_a_cancelled_call_leaves_no_process(sandbox: Harness) -> None:
    """A call whose request went away (the task cancelled: a client that disconnected) ends
    the commands it started; they do not run on unbounded, out of the container's reach."""
    b = Box(id="cntr_cancel", memory_mb=256)

    async def cancel_during() -> None:
        call = asyncio.ensure_future(sandbox.engine.run_commands(
            b, ["sleep 987654"], timeout=60, max_output=OUT))
        for _ in range(200):  # until the command runs
            if _pids_running("sleep 987654"):
                break
            await asyncio.sleep(0.05)
        assert _pids_running("sleep 987654")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    sandbox.run(cancel_during())
    for _ in range(200):  # a generous wait: the kill is asynchronous
        if not _pids_running("sleep 987654"):
            break
        sandbox.run(asyncio.sleep(0.05))
    assert not _pids_running("sleep 987654")


@pytest.mark.slow
def test_a_cancelled_execution_ends_its_process(sandbox: Harness) -> None:
    """An execution whose call went away does not keep the container's Python busy for
    the next call: its process ends and the next call says so (reset)."""
    b = Box(id="cntr_cancel_code", memory_mb=256)
    run(sandbox, "1", b)

    async def cancel_during() -> None:
        call = asyncio.ensure_future(sandbox.engine.run_code(
            b, "import time\ntime.sleep(987)", timeout=60, max_output=OUT))
        await asyncio.sleep(0.5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    sandbox.run(cancel_during())
    after = run(sandbox, "print('next')", b, timeout=10)
    assert not after.timed_out and after.reset and after.stdout == "next\n"


@pytest.mark.slow
def test_a_command_with_a_nul_is_its_own_failure(sandbox: Harness) -> None:
    """A command the model wrote with a NUL byte (``\\u0000`` in its JSON) cannot be run by
    any shell: that command fails, as a command, and the others run."""
    b = Box(id="cntr_nul", memory_mb=256)
    first, second = sandbox.run(sandbox.engine.run_commands(
        b, ["echo a\x00b", "echo fine"], timeout=60, max_output=OUT))
    assert first.exit_code not in (0, None) and "NUL" in first.stderr
    assert second.exit_code == 0 and second.stdout == "fine\n"


@pytest.mark.slow
def test_an_exception_of_any_text_comes_back_as_json_can_carry_it(sandbox: Harness) -> None:
    """An exception whose message holds a lone surrogate (``ValueError("\\udce9")``) is
    the code's failure, told in text that the response's JSON can hold."""
    import orjson

    b = Box(id="cntr_surrogate", memory_mb=256)
    failed = run(sandbox, 'raise ValueError("\\udce9")', b)
    assert failed.error is not None and "ValueError" in failed.error
    orjson.dumps(failed.error)

"""The shared suite of container engines (containers/engine.py): every engine in
tests/helpers/container_engines.py's ENGINES passes the same tests."""

from __future__ import annotations

import pytest

from responses_gateway.containers.engine import Box, EngineError
from tests.helpers.container_engines import (
    WHOLE_ANSWERS,
    engine,  # noqa: F401 (the fixture)
)

pytestmark = pytest.mark.slow  # a jail (or an endpoint) per test

TIMEOUT = 60.0
OUT = 64 * 1024


def box(name: str = "cntr_suite", memory_mb: int = 512) -> Box:
    return Box(id=name, memory_mb=memory_mb)


def run(engine, code: str, *, b: Box | None = None, timeout: float = TIMEOUT,  # noqa: F811
        max_output: int = OUT):
    b = b or box()
    engine.run(engine.engine.start(b))
    return engine.run(engine.engine.run_code(b, code, timeout=timeout, max_output=max_output))


def test_state_persists_across_calls(engine) -> None:  # noqa: F811
    first = run(engine, "import json\ncounter = 41\nprint('set')")
    assert first.error is None and first.stdout == "set\n" and not first.reset
    second = run(engine, "counter += 1\nprint(json.dumps({'counter': counter}))")
    assert second.error is None, second.error
    assert second.stdout == '{"counter": 42}\n'
    assert not second.reset and not second.timed_out


def test_stderr_is_its_own(engine) -> None:  # noqa: F811
    result = run(engine, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert result.stdout == "out\n" and result.stderr == "err\n"


def test_an_exception_comes_back_as_its_traceback(engine) -> None:  # noqa: F811
    run(engine, "kept = 'still here'")
    result = run(engine, "def f():\n    return 1 / 0\nprint('before')\nf()")
    assert result.stdout == "before\n"
    assert result.error is not None
    assert result.error.startswith("Traceback (most recent call last):")
    assert result.error.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "return 1 / 0" in result.error
    assert not result.reset
    # The failure kept the container's state.
    assert run(engine, "print(kept)").stdout == "still here\n"


def test_a_syntax_error_is_an_error(engine) -> None:  # noqa: F811
    result = run(engine, "def broken(:\n    pass")
    assert result.error is not None and "SyntaxError" in result.error


def test_files_written_read_listed_and_removed(engine) -> None:  # noqa: F811
    b = box("cntr_files")
    e = engine.engine
    engine.run(e.start(b))
    engine.run(e.write_file(b, "/mnt/data/in/data.csv", b"a,b\n1,2\n3,4\n"))
    result = run(engine, "import os\nrows = open('/mnt/data/in/data.csv').read().split()\n"
                         "print(len(rows), os.getcwd())\n"
                         "open('/mnt/data/out.txt', 'w').write('made by code')", b=b)
    assert result.error is None, result.error
    assert result.stdout.startswith("3 /mnt/data")
    assert result.files == ["/mnt/data/out.txt"]
    assert engine.run(e.read_file(b, "/mnt/data/out.txt", limit=100)) == b"made by code"
    listed = {f.path: f.bytes for f in engine.run(e.list_files(b))}
    assert listed == {"/mnt/data/in/data.csv": 12, "/mnt/data/out.txt": 12}
    # A file changed by the code counts as well, one left alone does not.
    changed = run(engine, "open('/mnt/data/in/data.csv', 'a').write('5,6\\n')", b=b)
    assert changed.files == ["/mnt/data/in/data.csv"]
    engine.run(e.remove_file(b, "/mnt/data/out.txt"))
    engine.run(e.remove_file(b, "/mnt/data/out.txt"))  # gone already: no error
    assert [f.path for f in engine.run(e.list_files(b))] == ["/mnt/data/in/data.csv"]
    with pytest.raises(FileNotFoundError):
        engine.run(e.read_file(b, "/mnt/data/out.txt", limit=100))
    with pytest.raises(EngineError):
        engine.run(e.read_file(b, "/mnt/data/in/data.csv", limit=4))
    # Replacing a file replaces it whole.
    engine.run(e.write_file(b, "/mnt/data/in/data.csv", b"x"))
    assert engine.run(e.read_file(b, "/mnt/data/in/data.csv", limit=100)) == b"x"


@pytest.mark.parametrize("path", ["/etc/passwd", "/mnt/data/../etc/passwd", "/mnt/database",
                                  "/mnt/data", ""])
def test_paths_outside_mnt_data_are_refused(engine, path: str) -> None:  # noqa: F811
    b = box("cntr_paths")
    engine.run(engine.engine.start(b))
    with pytest.raises(EngineError):
        engine.run(engine.engine.write_file(b, path, b"x"))
    with pytest.raises(EngineError):
        engine.run(engine.engine.read_file(b, path, limit=100))


def test_open_figures_are_saved_as_png(engine) -> None:  # noqa: F811
    pytest.importorskip("matplotlib")
    b = box("cntr_plot")
    result = run(engine, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\n"
                         "plt.title('three points')\nprint('plotted')", b=b)
    assert result.error is None, result.error
    pngs = [f for f in result.files if f.endswith(".png")]
    assert len(pngs) == 1 and pngs[0].startswith("/mnt/data/")
    data = engine.run(engine.engine.read_file(b, pngs[0], limit=10_000_000))
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    # Saved figures are closed: the next execution saves nothing again.
    assert run(engine, "print(len(plt.get_fignums()))", b=b).stdout == "0\n"
    assert run(engine, "print(1)", b=b).files == []


def test_pandas_and_numpy_are_there(engine) -> None:  # noqa: F811
    pytest.importorskip("pandas")
    b = box("cntr_pandas")
    engine.run(engine.engine.start(b))
    engine.run(engine.engine.write_file(b, "/mnt/data/t.csv", b"x,y\n1,2\n3,4\n"))
    result = run(engine, "import pandas as pd, numpy as np\ndf = pd.read_csv('/mnt/data/t.csv')"
                         "\nprint(int(np.sum(df['y'])))", b=b)
    assert result.error is None, result.error
    assert result.stdout == "6\n"


def test_commands_run_in_mnt_data_with_their_exit_codes(engine) -> None:  # noqa: F811
    b = box("cntr_shell")
    e = engine.engine
    engine.run(e.start(b))
    engine.run(e.write_file(b, "/mnt/data/hello.txt", b"hello\n"))
    results = engine.run(e.run_commands(
        b, ["pwd && cat hello.txt", "echo oops >&2; exit 3", "cat missing.txt",
            "echo made > made.txt"], timeout=TIMEOUT, max_output=OUT))
    assert [r.exit_code for r in results[:2]] == [0, 3]
    assert results[0].stdout == "/mnt/data\nhello\n"
    assert results[1].stderr == "oops\n"
    assert results[2].exit_code not in (0, None) and "missing.txt" in results[2].stderr
    assert results[3].exit_code == 0
    assert not any(r.timed_out for r in results)
    assert engine.run(e.read_file(b, "/mnt/data/made.txt", limit=100)) == b"made\n"


def test_commands_past_the_timeout_time_out(engine) -> None:  # noqa: F811
    b = box("cntr_shell_slow")
    engine.run(engine.engine.start(b))
    results = engine.run(engine.engine.run_commands(
        b, ["echo first", "echo started; sleep 60", "echo never"], timeout=5, max_output=OUT))
    assert results[0].exit_code == 0 and results[0].stdout == "first\n"
    assert results[1].timed_out and results[1].exit_code is None
    if engine.engine.name not in WHOLE_ANSWERS:  # AgentCore: nothing of a cut command
        assert results[1].stdout == "started\n"
    assert results[2].timed_out and results[2].exit_code is None and results[2].stdout == ""


def test_command_output_is_cut_at_max_output(engine) -> None:  # noqa: F811
    b = box("cntr_shell_big")
    engine.run(engine.engine.start(b))
    (result,) = engine.run(engine.engine.run_commands(
        b, ["head -c 100000 /dev/zero | tr '\\0' x"], timeout=TIMEOUT, max_output=1000))
    assert result.exit_code == 0
    assert result.stdout == "x" * 1000 and result.dropped == 99_000


def test_a_timeout_resets_the_container_which_works_after(engine) -> None:  # noqa: F811
    b = box("cntr_loop")
    run(engine, "before = 1", b=b)
    result = run(engine, "print('looping')\nwhile True:\n    pass", b=b, timeout=2)
    assert result.timed_out and result.reset
    if engine.engine.name not in WHOLE_ANSWERS:  # AgentCore: nothing of a cut execution
        assert result.stdout == "looping\n"
    after = run(engine, "print('back')\nprint('before' in globals())", b=b)
    assert after.error is None and after.stdout == "back\nFalse\n"
    assert not after.timed_out


def test_output_is_cut_at_max_output(engine) -> None:  # noqa: F811
    result = run(engine, "import sys\nfor _ in range(100):\n    sys.stdout.write('y' * 1000)\n"
                         "print('E' * 500, file=sys.stderr)", max_output=2000)
    assert result.error is None
    assert len(result.stdout) + len(result.stderr) <= 2000
    assert set(result.stdout) <= {"y"} and set(result.stderr) <= {"E", "\n"}
    assert len(result.stdout) + len(result.stderr) + result.dropped == 100_501
    # The next execution's output is its own.
    assert run(engine, "print('next')").stdout == "next\n"


def test_a_crash_resets_the_container(engine) -> None:  # noqa: F811
    b = box("cntr_crash")
    run(engine, "lost = True", b=b)
    crashed = run(engine, "import os\nprint('going', flush=True)\nos._exit(7)", b=b)
    assert crashed.reset and not crashed.timed_out
    after = run(engine, "print('lost' in globals())", b=b)
    assert after.error is None and after.stdout == "False\n"


def test_stop_removes_the_files_and_a_started_box_works_again(engine) -> None:  # noqa: F811
    b = box("cntr_stop")
    e = engine.engine
    run(engine, "open('/mnt/data/f.txt', 'w').write('x')\nv = 1", b=b)
    engine.run(e.stop(b))
    engine.run(e.stop(b))  # idempotent
    engine.run(e.start(b))
    assert engine.run(e.list_files(b)) == []
    again = run(engine, "print('v' in globals())", b=b)
    assert again.stdout == "False\n"
    engine.run(e.stop(b))


def test_containers_are_apart(engine) -> None:  # noqa: F811
    one, two = box("cntr_one"), box("cntr_two")
    run(engine, "secret = 'one'\nopen('/mnt/data/one.txt', 'w').write('1')", b=one)
    result = run(engine, "import os\nprint('secret' in globals(), os.listdir('/mnt/data'))",
                 b=two)
    assert result.stdout == "False []\n"

"""Update the lock files from pyproject.toml: the one source of every pinned version.

    python3 -m pip install uv && python3 scripts/lock.py [--upgrade | --upgrade-package NAME]

- ``requirements-test.lock``: the runtime, the Lambda, code and test extras, for every
  platform (``uv pip compile --universal``). CI and the README's test command install it.
- ``requirements.lock``: the runtime and the Lambda extra only, resolved under the test lock
  as a constraint, so every version is the one the tests ran with. The README's run command
  installs it.
- ``layers/dependencies/requirements.txt``: ``requirements.lock`` for the Lambda functions'
  platform (Python 3.12 on arm64 Linux), written by this script, never by hand.
  ``tests/test_running_it.py`` fails when it differs from what this script would write.

Versions already in a lock are kept unless ``--upgrade`` (all) or ``--upgrade-package NAME``
is given, or pyproject.toml no longer allows them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = ROOT / "requirements.lock"
TEST_LOCK = ROOT / "requirements-test.lock"
LAYER = ROOT / "layers" / "dependencies" / "requirements.txt"
PYTHON = "3.11"  # the oldest Python pyproject.toml allows: the lock holds for it and later
# What the Lambda functions run on (template.yaml: python3.12, arm64).
LAMBDA_ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
LAYER_HEADER = """\
# The dependency layer of both functions (/opt/python), built by `sam build` for arm64.
# Written by scripts/lock.py from requirements.lock (pyproject.toml's runtime dependencies and
# its `lambda` extra, the X-Ray SDK for the Powertools Tracer), for Python 3.12 on arm64
# Linux: the versions the tests run with. Do not edit; run `python3 scripts/lock.py`.
"""


def pins(lock_text: str) -> list[tuple[str, str, str]]:
    """(name, version, marker) of each ``name==version ; marker`` line of a lock."""
    found = []
    for line in lock_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, _, marker = line.partition(";")
        name, sep, version = requirement.partition("==")
        if not sep:
            raise ValueError(f"{line!r} is not pinned with ==")
        found.append((normal(name), version.strip(), marker.strip()))
    return found


def normal(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower().strip()


def layer_text(runtime_lock: str) -> str:
    """The layer's requirements.txt: the runtime lock's pins that apply on Lambda."""
    from packaging.markers import Marker

    lines = [LAYER_HEADER]
    for name, version, marker in pins(runtime_lock):
        if marker and not Marker(marker).evaluate(LAMBDA_ENVIRONMENT):
            continue
        lines.append(f"{name}=={version}\n")
    return "".join(lines)


def _compile(output: Path, *args: str) -> None:
    command = [sys.executable, "-m", "uv", "pip", "compile", "pyproject.toml", "--universal",
               "--python-version", PYTHON, "--quiet", "-o", str(output.name), *args]
    env = {**os.environ, "UV_CUSTOM_COMPILE_COMMAND": "python3 scripts/lock.py"}
    subprocess.run(command, cwd=ROOT, env=env, check=True)


def main(argv: list[str]) -> int:
    upgrade = list(argv)
    _compile(TEST_LOCK, "--extra", "lambda", "--extra", "code", "--extra", "test", *upgrade)
    # Under the test lock: the same versions, whatever a fresh resolution would pick.
    _compile(RUNTIME_LOCK, "--extra", "lambda", "-c", TEST_LOCK.name)
    LAYER.write_text(layer_text(RUNTIME_LOCK.read_text()))
    print(f"wrote {TEST_LOCK.name}, {RUNTIME_LOCK.name} and {LAYER.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

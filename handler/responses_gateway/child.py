"""A Python child process for work whose cost what a tenant sends decides: killed at its bound.

Reading a PDF or an HTML page is CPU work that the bytes decide, and some bytes make the
parsers worse than linear (issue 40: a 7 kB PDF took pypdf 84 s, 100 kB of unclosed ``<a``
took html2text 20 s). On the event loop that holds every other request; in a thread it still
takes the GIL from the loop and cannot be stopped once it is given up. A child process can be
killed, so its time bound is real. This module is the one way the gateway starts such a child
(text extraction for vector stores, page reading for web_search):

- ``python -m MODULE ARGS...`` with asyncio's subprocess support, so no thread waits for it;
  the input goes on stdin and the answer comes back on stdout.
- The child gets an environment of its own (:func:`child_env`): where the gateway finds its
  interpreter, its libraries and its packages and nothing else, so no upstream key, tenant
  key or other secret of the gateway's reaches code that parses a tenant's bytes.
- The child is killed and reaped when its ``timeout`` passes and whenever the task waiting for
  it is cancelled (the caller's own deadline), and it bounds its own CPU time and dies with
  its parent (:func:`limit_cpu`) should its parent be gone before it could kill it.
- A child that could not even start (the interpreter's loader failing, exit 127) is
  :class:`ChildUnavailable`, an ``OSError`` as a failed spawn is: the caller falls back to a
  thread instead of failing every page or file.

multiprocessing is not used: its fork server starts a child in ~15 ms against ~100 ms for a
fresh interpreter, but each of its children runs the parent's ``__main__`` again (uvicorn's,
Lambda's bootstrap), and a plain fork of this process, which runs threads, is unsafe.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ChildResult", "ChildTimeout", "ChildUnavailable", "child_env", "limit_cpu",
           "run_module"]
#: what a child may see of this process's environment: how to run Python here, no secret
_PASSED = ("PATH", "LD_LIBRARY_PATH", "PYTHONHOME", "TMPDIR")
_NOT_STARTED = 127  # the exit status of a program its loader could not start


class ChildTimeout(Exception):
    """The child did not answer within its time; it was killed."""


class ChildUnavailable(OSError):
    """No child process could run here (it could not be started, or its interpreter could
    not load)."""


@dataclass(frozen=True, slots=True)
class ChildResult:
    """How a child ended: its exit status (negative: the signal that ended it) and output."""

    returncode: int
    stdout: bytes
    stderr: bytes


def child_env() -> dict[str, str]:
    """A child's environment: where this process finds its interpreter, libraries (Lambda's
    runtime needs ``LD_LIBRARY_PATH``) and packages, nothing else (no secret of the
    gateway's reaches it)."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8"}
    for name in _PASSED:
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


async def run_module(module: str, args: Sequence[str], data: bytes,
                     timeout: float | None = None) -> ChildResult:
    """Run ``python -m module *args`` with ``data`` on its stdin and wait for it to end:
    :class:`ChildTimeout` past ``timeout`` seconds (None or 0: only the caller's own deadline).
    The child is killed and reaped however the wait ends. ``OSError`` (:class:`ChildUnavailable`
    and the like) when no child can run here: the caller decides what to do without one."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env())
    try:
        out, err = await asyncio.wait_for(child.communicate(data), timeout or None)
    except TimeoutError:
        raise ChildTimeout from None
    finally:
        if child.returncode is None:  # timed out or cancelled: end it, and reap it
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
    if child.returncode == _NOT_STARTED:
        raise ChildUnavailable(err[-300:].decode(errors="replace"))
    return ChildResult(child.returncode if child.returncode is not None else -9, out, err)


def limit_cpu(seconds: float | None) -> None:
    """In the child: end this process after ``seconds`` (rounded up, plus a little) of CPU time
    (None or 0: no such bound), and when its parent dies (Linux), backstops to the parent's
    kill. Nothing where the platform has neither."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if not seconds:
        return
    try:
        import resource

        cpu = math.ceil(seconds) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not on this platform
        pass

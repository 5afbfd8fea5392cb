"""One writer at a time for a cache directory shared between test processes.

The npm installs into ``.cache/`` (openai-node, the Vercel AI SDK, the Codex CLI) and the
``sam build`` cache outlive a run and are shared by every process that runs the tests: the
workers of one ``pytest -n`` run (each has its own session fixtures) and other runs on the
same clone. Two ``npm install`` into one prefix at once leave a broken ``node_modules``; the
lock makes the second wait, then find the first one's install.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(directory: Path) -> Iterator[Path]:
    """``directory`` (created if missing), locked against other processes until exit.

    The lock file sits beside it (``<directory>.lock``), so emptying the directory never
    removes a lock another process holds."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield directory
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

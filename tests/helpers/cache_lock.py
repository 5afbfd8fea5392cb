"""One writer at a time for a cache directory shared between test processes.

The npm installs into ``.cache/`` (openai-node, the Vercel AI SDK, the Codex CLI) and the
``sam build`` cache outlive a run and are shared by every process that runs the tests: the
workers of one ``pytest -n`` run (each has its own session fixtures) and other runs on the
same clone. Two ``npm install`` into one prefix at once leave a broken ``node_modules``; the
lock makes the second wait, then find the first one's install. The scripts the node tests
write beside those installs are shared the same way, and run while another worker may be
writing them again: :func:`put` replaces one whole.
"""

from __future__ import annotations

import fcntl
import os
import threading
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


def put(path: Path, text: str) -> Path:
    """``path`` holding ``text``, replaced whole (written beside it, then renamed over it).

    ``Path.write_text`` truncates the file first: a node process of another xdist worker
    reading the same script then could find it empty or half written, and run that."""
    part = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        part.write_text(text)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path

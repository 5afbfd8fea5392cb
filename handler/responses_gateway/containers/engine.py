"""Where a container's code runs: one interface, an engine per platform.

A container (OpenAI's ``cntr_…``) is a place where code keeps its state: a Python process whose
variables and imports live across calls, and a folder, ``/mnt/data``, whose files live as long
as the container does. Two engines keep containers, chosen by ``GATEWAY_CODE_INTERPRETER``:

- ``sandbox`` (containers/sandbox.py): on this machine, one long-lived Python process per
  container inside a bubblewrap jail (no network, no host files, no gateway secret, bounded
  CPU, memory, processes and output);
- ``agentcore`` (containers/agentcore.py): an Amazon Bedrock AgentCore Code Interpreter
  session per container, carried over to a new session when AgentCore ends one.

An engine knows nothing of tenants, expiry or the Containers API's records: that is
containers/service.py's, which calls the engine with a :class:`Box` it keeps. Every path an
engine takes or returns is absolute inside the container (``/mnt/data/plot.png``); how the
engine maps it (a host folder, AgentCore's working directory) is its own business.

Every call is bounded: ``timeout`` (wall seconds) and ``max_output`` (bytes of stdout and
stderr kept; the rest is counted, not held). A failure of the code is a result, never an
exception; an exception means the engine itself failed (:class:`EngineError`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

#: the folder the model's code reads its files from and writes them to
DATA = "/mnt/data"
#: what a file's content is read and sent in
CHUNK_BYTES = 1 << 20


class EngineError(Exception):
    """The engine could not do what it was asked (not the code's own failure): the jail
    would not start, AgentCore refused. The message is safe to show a client."""


class BadPath(EngineError):
    """The path cannot be a container file: too long for the file system, through a
    symbolic link or a file, a folder, not a regular file. The client's (or the code's)
    doing, not the engine's failure: a 400 (or a 404 for a file that is no longer one)."""


@dataclass(frozen=True, slots=True)
class Box:
    """One container as an engine sees it."""

    id: str  # the container's id (cntr_…)
    memory_mb: int  # its memory bound (``memory_limit``, capped by GATEWAY_CODE_MEMORY_MB)
    #: what the engine keeps about it between processes (an AgentCore session id), as the
    #: service stored it; the engine returns a new value from :meth:`ContainerEngine.start`
    state: str | None = None


@dataclass(slots=True)
class CodeResult:
    """What one execution of Python did."""

    stdout: str = ""
    stderr: str = ""
    #: the exception the code raised, as Python prints it (traceback), else None
    error: str | None = None
    timed_out: bool = False
    #: the container's process was started again (it crashed, ran out of memory or time):
    #: its variables are gone, its files are not
    reset: bool = False
    #: bytes of output dropped past ``max_output``
    dropped: int = 0
    #: files under /mnt/data the execution created or changed (absolute paths), in order;
    #: figures the code left open are saved there as PNG first
    files: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CommandResult:
    """What one shell command did (hosted shell)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None  # None: it timed out
    timed_out: bool = False
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # absolute: /mnt/data/sub/name.csv
    bytes: int


def nameable(path: str) -> bool:
    """Whether ``path`` can be a container file's path: a name the code made of bytes that
    are not UTF-8 (Python hands them over as lone surrogates) cannot be stored or sent as
    JSON, so such a file is not listed."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ContainerEngine(ABC):
    """Keeps containers' processes and files. Methods are coroutines and never block the
    event loop (subprocess pipes, boto3 in a thread)."""

    #: ``sandbox`` or ``agentcore``
    name: str

    async def check(self) -> str | None:
        """None when the engine can run containers here, else one line saying why not
        (the start line prints it)."""
        return None

    @abstractmethod
    async def start(self, box: Box) -> str | None:
        """Make the container ready to run code (idempotent: a started box is left as it is);
        returns the state to keep for it (:attr:`Box.state`)."""

    @abstractmethod
    async def run_code(self, box: Box, code: str, *, timeout: float,
                       max_output: int) -> CodeResult:
        """Run ``code`` in the container's Python, whose globals persist between calls."""

    @abstractmethod
    async def run_commands(self, box: Box, commands: Sequence[str], *, timeout: float,
                           max_output: int) -> list[CommandResult]:
        """Run each shell command in turn (working directory /mnt/data), ``timeout`` for
        all of them; a command past it and the ones after it time out."""

    async def run_javascript(self, box: Box, source: str, *, timeout: float,
                             max_output: int) -> CommandResult:
        """Run ``source`` as a Node.js script (CommonJS) in the container, once: a program of
        programmatic tool calling (tools/programmatic/). By default it is written to a file
        under /mnt/data and run by ``node`` (on the jail's PATH: /usr/bin/node, a distribution
        package), ``--jitless``: V8's JIT reserves more address space than the jail's memory
        bound allows, and an orchestration script needs no JIT."""
        path = f"{DATA}/.program.js"
        await self.write_file(box, path, source.encode())
        heap = max(16, box.memory_mb // 2)
        [ran] = await self.run_commands(
            box, [f"node --jitless --max-old-space-size={heap} {path}"], timeout=timeout,
            max_output=max_output)
        return ran

    @abstractmethod
    async def write_file(self, box: Box, path: str, data: bytes) -> None:
        """Put ``data`` at ``path`` (under /mnt/data), replacing what is there."""

    @abstractmethod
    async def read_file(self, box: Box, path: str, *, limit: int) -> bytes:
        """The bytes at ``path``; more than ``limit`` bytes raises :class:`EngineError`;
        a missing file raises ``FileNotFoundError``."""

    async def read_chunks(self, box: Box, path: str, *, limit: int) -> AsyncIterator[bytes]:
        """The bytes at ``path`` in pieces, errors as :meth:`read_file`'s raised before the
        first piece is asked for. This default reads the file whole (within ``limit``);
        an engine that can read it piece by piece does (the sandbox)."""
        data = await self.read_file(box, path, limit=limit)

        async def pieces() -> AsyncIterator[bytes]:
            for start in range(0, len(data), CHUNK_BYTES):
                yield data[start:start + CHUNK_BYTES]

        return pieces()

    @abstractmethod
    async def list_files(self, box: Box) -> list[FileEntry]:
        """Every file under /mnt/data."""

    @abstractmethod
    async def remove_file(self, box: Box, path: str) -> None:
        """Remove ``path`` (no error when it is gone)."""

    @abstractmethod
    async def stop(self, box: Box) -> None:
        """End the container: its processes and files are gone (idempotent)."""

    async def aclose(self) -> None:
        """Release what the engine holds (at shutdown)."""
        return None

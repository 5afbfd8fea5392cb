"""The program that runs inside a sandbox jail (containers/sandbox.py starts it).

It is bound read-only into the jail and run by the container's own Python, so it imports
only the standard library and nothing of the gateway. Two modes:

``serve LIMITS FD``
    The container's long-lived interpreter. It applies the limits to itself (its children
    inherit them), then reads requests from the socket ``FD`` and answers on it, one frame
    each: a 4-byte big-endian length and a JSON object. ``{"op": "run", "code", "nonce",
    "timeout"}`` executes ``code`` in globals kept across requests; the code's stdout and
    stderr are the process's own fds 1 and 2 (pipes the gateway reads as they fill, so output
    of the code's subprocesses counts too), each ended by an end marker carrying the nonce so
    the gateway knows which bytes belong to this execution; then the answer ``{"error":
    traceback or null}``. The first frame it sends is ``{"ready": true}``.
``exec LIMITS -- ARGV...``
    Applies the limits and execs ARGV (a shell command of hosted shell).

``LIMITS`` is a JSON object: ``as`` (bytes of address space), ``nproc``, ``fsize`` (bytes),
``cpu`` (seconds of CPU, the hard bound of the process's life), ``nofile``.
"""

from __future__ import annotations

import ast
import contextlib
import json
import linecache
import os
import resource
import struct
import sys
import traceback
import types

DATA = "/mnt/data"
#: what an error's text may hold (a recursion error's traceback can be long)
MAX_ERROR = 64 * 1024
MAX_FRAME = 16 * 1024 * 1024


def marker(nonce: str) -> bytes:
    """The bytes that end one execution's output on each stream (the gateway strips them)."""
    return b"\x00\x1e<end " + nonce.encode("ascii") + b">\x1e\x00"


def apply_limits(limits: dict) -> None:
    pairs = (("as", resource.RLIMIT_AS), ("nproc", resource.RLIMIT_NPROC),
             ("fsize", resource.RLIMIT_FSIZE), ("cpu", resource.RLIMIT_CPU),
             ("nofile", resource.RLIMIT_NOFILE))
    for key, which in pairs:
        value = limits.get(key)
        if value:
            resource.setrlimit(which, (int(value), int(value)))
    # No core files in /mnt/data when the code crashes.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Server:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        # The pipes the gateway reads, kept aside: an execution that closes or replaces its
        # fd 1 or 2 has them back at the next, and the end markers always reach the gateway.
        self.pipes = (os.dup(1), os.dup(2))
        for saved in self.pipes:
            os.set_inheritable(saved, False)
        # The code's globals are a fresh __main__ module's (classes it defines pickle).
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        self.globals: dict = main_module.__dict__
        self.cells = 0
        self.figures = 0

    # -- frames --------------------------------------------------------------------------
    def _read_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = os.read(self.fd, min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self) -> dict | None:
        head = self._read_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">I", head)
        if size > MAX_FRAME:
            return None
        body = self._read_exact(size)
        return None if body is None else json.loads(body)

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        data = struct.pack(">I", len(body)) + body
        while data:
            data = data[os.write(self.fd, data):]

    # -- executions ----------------------------------------------------------------------
    def serve(self) -> None:
        self.send({"ready": True})
        while True:
            request = self.receive()
            if request is None:
                return
            if request.get("op") == "run":
                self.send(self.run(request["code"], request["nonce"],
                                   float(request.get("timeout") or 60)))

    def run(self, code: str, nonce: str, timeout: float) -> dict:
        for fd, saved in zip((1, 2), self.pipes):  # noqa: B905 (any Python 3)
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
        # CPU time: the hard limit bounds the process's life; the soft one, past which the
        # kernel sends SIGXCPU (the process dies, the gateway reports a reset), this run's.
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(_cpu_used() + timeout + 2)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        error = self.execute(code)
        notes = self.save_figures()
        if notes:
            sys.stderr.write(notes)
        marked = self.end_streams(nonce)
        return {"nonce": nonce, "error": error, "marked": marked}

    def execute(self, code: str) -> str | None:
        self.cells += 1
        name = f"<cell-{self.cells}>"
        # Tracebacks show the code's lines, as Python shows a file's.
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        try:
            tree = ast.parse(code, name, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                # Like a notebook: the value of a last expression is shown.
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, "exec"), self.globals)
            if last is not None:
                sys.displayhook(eval(compile(last, name, "eval"), self.globals))
            return None
        except BaseException as exc:  # the code's failure, whatever it is, is a result
            return self.format_error(exc)

    def format_error(self, exc: BaseException) -> str:
        tb = exc.__traceback__
        # Leave out this file's frames (the exec line): the traceback starts in the code.
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        if isinstance(exc, SyntaxError) and tb is None:
            text = "".join(traceback.format_exception_only(type(exc), exc))
        else:
            text = "".join(traceback.format_exception(type(exc), exc, tb))
        if len(text) > MAX_ERROR:
            text = text[: MAX_ERROR // 2] + "\n...\n" + text[-MAX_ERROR // 2:]
        return text

    def save_figures(self) -> str:
        """Save the matplotlib figures the code left open under /mnt/data, then close them."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return ""
        notes = []
        try:
            numbers = list(plt.get_fignums())
        except Exception:
            return ""
        for number in numbers:
            try:
                figure = plt.figure(number)
                while True:
                    self.figures += 1
                    path = f"{DATA}/figure_{self.figures}.png"
                    if not os.path.lexists(path):
                        break
                figure.savefig(path, format="png")
            except Exception as exc:
                notes.append(f"figure {number} could not be saved: {exc!r}\n")
        with contextlib.suppress(Exception):
            plt.close("all")
        return "".join(notes)

    def end_streams(self, nonce: str) -> list[bool]:
        end = marker(nonce)
        marked = []
        for stream, fd in ((sys.stdout, 0), (sys.stderr, 1)):
            for candidate in (stream, sys.__stdout__ if fd == 0 else sys.__stderr__):
                with contextlib.suppress(Exception):
                    candidate.flush()
            try:
                data = end
                while data:
                    data = data[os.write(self.pipes[fd], data):]
                marked.append(True)
            except OSError:
                marked.append(False)
        return marked


def main(argv: list[str]) -> int:
    mode, limits = argv[0], json.loads(argv[1])
    if mode == "exec":
        apply_limits(limits)
        command = argv[argv.index("--") + 1:]
        os.execv(command[0], command)
    fd = int(argv[2])
    # The code reads no requests: its stdin is empty, the socket sits on a high fd.
    high = os.dup2(fd, 200) if fd != 200 else fd
    if fd != high:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.set_inheritable(high, False)
    apply_limits(limits)
    os.chdir(DATA)
    sys.path.insert(0, DATA)
    # Line by line, as on a terminal: what an execution printed before it ran out of time
    # has reached the gateway when the process is killed.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.reconfigure(line_buffering=True)
    sys.argv = [""]
    Server(high).serve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

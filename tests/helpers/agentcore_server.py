"""A fake Amazon Bedrock AgentCore Code Interpreter on 127.0.0.1, on its real wire format.

boto3's ``bedrock-agentcore`` client is pointed at it (``endpoint_url``) so botocore's own
serializer, event-stream decoder and error parser run. Everything about the wire comes from
botocore's service model (``bedrock-agentcore``), never from the engine's request code:

- the operation is found by the model's HTTP method and ``requestUri``; its members are read
  from where the model puts them (URI, query string, headers, JSON body) and checked against
  their shapes: required members, types, enums, lengths, ranges, patterns, unions, and no
  member the shape does not have (a misnamed member fails). A failure is AWS's
  ``ValidationException`` (400, ``x-amzn-ErrorType``, a JSON body with ``message``,
  ``reason``, ``fieldList``). What the fake answers is checked against the output shape.
- ``InvokeCodeInterpreter`` answers ``application/vnd.amazon.eventstream``: one ``result``
  event (``content`` blocks, ``structuredContent`` with ``stdout``/``stderr``/``exitCode``/
  ``executionTime``, ``isError``), frames from tests/helpers/eventstream_server.py.
- A session ends ``sessionTimeoutSeconds`` after it started whatever its use (the clock is
  injectable: a test moves it to end a session) or when stopped; it is then
  ``ResourceNotFoundException`` to ``InvokeCodeInterpreter`` and ``TERMINATED`` to
  ``GetCodeInterpreterSession``. An unknown interpreter is ``ResourceNotFoundException``.
- Behind it, a real interpreter, as AgentCore has: one plain Python subprocess per session
  whose globals persist (``executeCode``), a shell for ``executeCommand``, and a working
  directory that is NOT /mnt/data (``writeFiles``/``readFiles``/``removeFiles``/``listFiles``
  take paths relative to it; an absolute path is refused). The fake never touches /mnt.

The tool-level checks (``executeCode`` needs ``code``...) follow AgentCore's documented
arguments; ``startCommandExecution``, ``getTask`` and ``stopTask`` are not served.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from botocore.model import OperationModel, Shape

from tests.helpers.eventstream_server import event_frame

SERVICE = "bedrock-agentcore"
OPERATIONS = ("StartCodeInterpreterSession", "InvokeCodeInterpreter",
              "StopCodeInterpreterSession", "GetCodeInterpreterSession")


class Failure(Exception):
    """An AWS error answer: status, error type, JSON body."""

    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind
        self.body = {"message": message, **extra}


def invalid(message: str, name: str = "", reason: str = "FieldValidationFailed") -> Failure:
    fields = [{"name": name, "message": message}] if name else []
    return Failure(400, "ValidationException", message, reason=reason, fieldList=fields)


def not_found(message: str) -> Failure:
    return Failure(404, "ResourceNotFoundException", message)


# -- validation from the service model ----------------------------------------------------

def check(shape: Shape, value: Any, where: str) -> None:
    """Raise ValidationException where ``value`` (as JSON gives it) does not fit ``shape``."""
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure":
        if not isinstance(value, dict):
            raise invalid(f"{where} must be an object", where)
        members = shape.members
        for name in value:
            if name not in members:
                raise invalid(f"Unknown member {name!r} in {shape.name}",
                              f"{where}.{name}".lstrip("."), "CannotParse")
        for name in shape.required_members:
            if value.get(name) is None:
                raise invalid(f"{(where + '.' + name).lstrip('.')} is required",
                              f"{where}.{name}".lstrip("."))
        present = [n for n, v in value.items() if v is not None]
        if (getattr(shape, "is_tagged_union", False) or meta.get("union")) and len(
                present) != 1:
            raise invalid(f"{where} must set exactly one member", where)
        for name in present:
            check(members[name], value[name], f"{where}.{name}".lstrip("."))
        return
    if kind == "list":
        if not isinstance(value, list):
            raise invalid(f"{where} must be a list", where)
        _bounds(len(value), meta, where, "length")
        for i, item in enumerate(value):
            check(shape.member, item, f"{where}[{i}]")
        return
    if kind == "map":
        if not isinstance(value, dict):
            raise invalid(f"{where} must be a map", where)
        for k, v in value.items():
            check(shape.key, k, where)
            check(shape.value, v, f"{where}.{k}")
        return
    if kind == "string":
        if not isinstance(value, str):
            raise invalid(f"{where} must be a string", where)
        if shape.enum and value not in shape.enum:
            raise invalid(f"{where} must be one of {list(shape.enum)}", where)
        _bounds(len(value), meta, where, "length")
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            raise invalid(f"{where} does not match {meta['pattern']}", where)
        return
    if kind in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise invalid(f"{where} must be an integer", where)
        _bounds(value, meta, where, "value")
        return
    if kind in ("double", "float"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise invalid(f"{where} must be a number", where)
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            raise invalid(f"{where} must be a boolean", where)
        return
    if kind == "blob":
        if not isinstance(value, str):
            raise invalid(f"{where} must be base64", where)
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"{where} is not valid base64", where, "CannotParse") from None
        _bounds(len(data), meta, where, "length")
        return
    if kind == "timestamp":
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise invalid(f"{where} must be a timestamp", where)
        return
    raise AssertionError(f"shape type {kind} not handled")


def _bounds(n: int, meta: dict[str, Any], where: str, what: str) -> None:
    if "min" in meta and n < meta["min"]:
        raise invalid(f"{where}: {what} {n} is below {meta['min']}", where)
    if "max" in meta and n > meta["max"]:
        raise invalid(f"{where}: {what} {n} is above {meta['max']}", where)


def _scalar(shape: Shape, text: str, where: str) -> Any:
    """A member carried as text (URI, query, header) in its shape's type."""
    if shape.type_name in ("integer", "long"):
        try:
            return int(text)
        except ValueError:
            raise invalid(f"{where} must be an integer", where) from None
    if shape.type_name == "boolean":
        return text == "true"
    return text


@dataclass
class Route:
    operation: OperationModel
    method: str
    pattern: re.Pattern[str]


def routes() -> list[Route]:
    import botocore.session

    model = botocore.session.get_session().get_service_model(SERVICE)
    found = []
    for name in OPERATIONS:
        op = model.operation_model(name)
        uri = op.http["requestUri"].split("?")[0]
        pieces = re.split(r"\{(\w+)\+?\}", uri)  # literal, name, literal, ...
        regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)"
                        for i, p in enumerate(pieces))
        found.append(Route(op, op.http["method"], re.compile(f"^{regex}$")))
    return found


def parse_request(route: Route, match: re.Match[str], query: str, headers: dict[str, str],
                  raw: bytes) -> dict[str, Any]:
    """The request's members, read from where the model puts them, checked."""
    shape = route.operation.input_shape
    params: dict[str, Any] = {}
    body: dict[str, Any] = {}
    if raw.strip():
        try:
            body = json.loads(raw)
        except ValueError:
            raise invalid("The request body is not valid JSON", reason="CannotParse") from None
        if not isinstance(body, dict):
            raise invalid("The request body must be a JSON object", reason="CannotParse")
    located = {n: m for n, m in shape.members.items() if m.serialization.get("location")}
    for name in body:
        if name in located:
            raise invalid(f"Unknown member {name!r} in the body", name, "CannotParse")
    queries = parse_qs(query, keep_blank_values=True)
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, member in located.items():
        where = member.serialization["location"]
        wire = member.serialization.get("name", name)
        text: str | None
        if where == "uri":
            text = unquote(match.group(wire)) if wire in match.groupdict() else None
        elif where == "querystring":
            text = queries[wire][0] if wire in queries else None
        elif where == "header":
            text = lowered.get(wire.lower())
        else:
            text = None
        if text is not None:
            params[name] = _scalar(member, text, name)
    values = {**body, **params}
    check(shape, values, "")
    return values


# -- the interpreter behind it -------------------------------------------------------------

# A Python whose globals persist, one JSON line in per execution; what the code prints is
# sent out as it is written (as a Jupyter kernel does), so output before a crash is kept.
KERNEL = r"""
import io, json, linecache, os, sys, time, traceback
proto = os.fdopen(os.dup(1), "w")
quiet = os.open(os.devnull, os.O_WRONLY)
os.dup2(quiet, 1)
os.dup2(quiet, 2)

class Stream(io.TextIOBase):
    def __init__(self, name):
        self.name = name
    def writable(self):
        return True
    def write(self, text):
        proto.write(json.dumps({"stream": self.name, "text": text}) + "\n")
        proto.flush()
        return len(text)

space = {"__name__": "__main__", "__builtins__": __builtins__}
for cell, line in enumerate(sys.stdin, 1):
    request = json.loads(line)
    name = "<cell %d>" % cell  # its lines show in tracebacks, as a notebook cell's do
    linecache.cache[name] = (len(request["code"]), None, request["code"].splitlines(True), name)
    sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
    failed, began = False, time.monotonic()
    try:
        exec(compile(request["code"], name, "exec"), space)
    except SystemExit:
        pass
    except BaseException as exc:
        failed = True
        sys.stderr.write("".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    proto.write(json.dumps({"done": True, "failed": failed,
                            "ms": (time.monotonic() - began) * 1000}) + "\n")
    proto.flush()
"""


@dataclass
class FakeSession:
    id: str
    interpreter: str
    name: str | None
    created: float
    timeout: int
    workdir: Path
    stopped: bool = False
    kernel: subprocess.Popen[str] | None = None
    commands: list[subprocess.Popen[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ended(self, now: float) -> bool:
        return self.stopped or now >= self.created + self.timeout

    def kill(self) -> None:
        for proc in [self.kernel, *self.commands]:
            if proc is not None and proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


class FakeAgentCore:
    def __init__(self, *, clock: Callable[[], float] = time.time,
                 interpreters: tuple[str, ...] = ("aws.codeinterpreter.v1",),
                 python: str = sys.executable) -> None:
        self.clock = clock
        self.interpreters = set(interpreters)
        self.python = python
        self.sessions: dict[str, FakeSession] = {}
        #: (operation, members) of every request that passed validation
        self.requests: list[tuple[str, dict[str, Any]]] = []
        #: (operation or path, error type) of every refused request
        self.refused: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.routes = routes()
        self._home = Path(tempfile.mkdtemp(prefix="fake-agentcore-"))
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeAgentCore:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        for session in list(self.sessions.values()):
            session.kill()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self) -> FakeAgentCore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def calls(self, operation: str, tool: str | None = None) -> list[dict[str, Any]]:
        return [m for op, m in self.requests
                if op == operation and (tool is None or m.get("name") == tool)]

    def live(self) -> list[FakeSession]:
        now = self.clock()
        return [s for s in self.sessions.values() if not s.ended(now)]

    # -- operations ----------------------------------------------------------------------

    def _interpreter(self, values: dict[str, Any]) -> str:
        ident = values["codeInterpreterIdentifier"]
        if ident not in self.interpreters:
            raise not_found(f"Code interpreter {ident} not found")
        return str(ident)

    def _session(self, values: dict[str, Any]) -> FakeSession:
        ident = self._interpreter(values)
        session = self.sessions.get(values.get("sessionId") or "")
        if session is None or session.interpreter != ident:
            raise not_found(f"Session {values.get('sessionId')} not found")
        return session

    def _reap(self, session: FakeSession) -> None:
        if session.ended(self.clock()):
            session.kill()

    def StartCodeInterpreterSession(self, values: dict[str, Any]) -> dict[str, Any]:
        ident = self._interpreter(values)
        session_id = uuid.uuid4().hex[:26].upper()
        workdir = self._home / session_id / "opt" / "amazon" / "genesis1p-tools" / "var"
        workdir.mkdir(parents=True)
        self.sessions[session_id] = FakeSession(
            session_id, ident, values.get("name"), self.clock(),
            int(values.get("sessionTimeoutSeconds") or 900), workdir)
        return {"codeInterpreterIdentifier": ident, "sessionId": session_id,
                "createdAt": _iso(self.clock())}

    def StopCodeInterpreterSession(self, values: dict[str, Any]) -> dict[str, Any]:
        session = self._session(values)
        if session.ended(self.clock()):
            session.kill()
            raise not_found(f"Session {session.id} not found")
        session.stopped = True
        session.kill()
        return {"codeInterpreterIdentifier": session.interpreter, "sessionId": session.id,
                "lastUpdatedAt": _iso(self.clock())}

    def GetCodeInterpreterSession(self, values: dict[str, Any]) -> dict[str, Any]:
        session = self._session(values)
        self._reap(session)
        answer = {"codeInterpreterIdentifier": session.interpreter, "sessionId": session.id,
                  "createdAt": _iso(session.created), "sessionTimeoutSeconds": session.timeout,
                  "status": "TERMINATED" if session.ended(self.clock()) else "READY"}
        if session.name:
            answer["name"] = session.name
        return answer

    def InvokeCodeInterpreter(self, values: dict[str, Any]) -> dict[str, Any]:
        session = self._session(values)
        if session.ended(self.clock()):
            session.kill()
            raise not_found(f"Session {session.id} not found")
        arguments = values.get("arguments") or {}
        tool = values["name"]
        handler = getattr(self, "_tool_" + tool, None)
        if handler is None:
            raise invalid(f"Tool {tool} is not served by this fake", "name")
        return dict(handler(session, arguments))

    # -- tools ---------------------------------------------------------------------------

    def _tool_executeCode(self, session: FakeSession, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("code") is None:
            raise invalid("arguments.code is required for executeCode", "arguments.code")
        if args.get("language", "python") == "javascript" and args.get("runtime") == "nodejs":
            return _node(session, args["code"])
        if args.get("language", "python") != "python":
            raise invalid("this fake runs python, and javascript on nodejs, only",
                          "arguments.language")
        with session.lock:
            if args.get("clearContext") and session.kernel is not None:
                session.kill()
                session.kernel = None
            if session.kernel is None or session.kernel.poll() is not None:
                session.kernel = subprocess.Popen(
                    [self.python, "-I", "-c", KERNEL], cwd=session.workdir, text=True,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    start_new_session=True, env=_clean_env())
            kernel = session.kernel
            assert kernel.stdin is not None and kernel.stdout is not None
            began = time.monotonic()
            printed = {"stdout": [], "stderr": []}
            done: dict[str, Any] | None = None
            try:
                kernel.stdin.write(json.dumps({"code": args["code"]}) + "\n")
                kernel.stdin.flush()
                while done is None and (line := kernel.stdout.readline()):
                    message = json.loads(line)
                    if message.get("done"):
                        done = message
                    else:
                        printed[message["stream"]].append(message["text"])
            except (BrokenPipeError, OSError):
                pass
            if done is None:
                session.kernel = None  # it died; the next execution starts another
        stdout, stderr = "".join(printed["stdout"]), "".join(printed["stderr"])
        if done is None:
            if session.ended(self.clock()):  # killed with its session
                raise not_found(f"Session {session.id} not found")
            stderr += "The Python kernel died; it was restarted.\n"
            return _result(stdout, stderr, 1, (time.monotonic() - began) * 1000, text=stderr)
        return _result(stdout, stderr, 1 if done["failed"] else 0, done["ms"],
                       text=stderr if done["failed"] else stdout)

    def _tool_executeCommand(self, session: FakeSession,
                             args: dict[str, Any]) -> dict[str, Any]:
        if args.get("command") is None:
            raise invalid("arguments.command is required for executeCommand",
                          "arguments.command")
        began = time.monotonic()
        proc = subprocess.Popen(["/bin/sh", "-c", args["command"]], cwd=session.workdir,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=_clean_env())
        session.commands.append(proc)
        out, err = proc.communicate()
        session.commands.remove(proc)
        if proc.returncode < 0 and session.ended(self.clock()):
            raise not_found(f"Session {session.id} not found")
        return _result(out, err, proc.returncode, (time.monotonic() - began) * 1000,
                       text=out if proc.returncode == 0 else out + err)

    def _path(self, session: FakeSession, path: str, where: str) -> Path:
        if path.startswith("/"):
            raise _ToolError(f"{where}: absolute paths are not allowed: {path}")
        resolved = (session.workdir / path).resolve()
        if not resolved.is_relative_to(session.workdir.resolve()):
            raise _ToolError(f"{where}: path escapes the working directory: {path}")
        return resolved

    def _tool_writeFiles(self, session: FakeSession, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("content") is None:
            raise invalid("arguments.content is required for writeFiles", "arguments.content")
        try:
            for block in args["content"]:
                target = self._path(session, block["path"], "writeFiles")
                target.parent.mkdir(parents=True, exist_ok=True)
                if block.get("blob") is not None:
                    target.write_bytes(base64.b64decode(block["blob"]))
                else:
                    target.write_text(block.get("text") or "")
        except _ToolError as exc:
            return _error(str(exc))
        return {"content": [{"type": "text",
                             "text": f"Successfully wrote {len(args['content'])} files"}],
                "isError": False}

    def _tool_readFiles(self, session: FakeSession, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("paths") is None:
            raise invalid("arguments.paths is required for readFiles", "arguments.paths")
        blocks = []
        try:
            for path in args["paths"]:
                target = self._path(session, path, "readFiles")
                if not target.is_file():
                    return _error(f"File not found: {path}")
                data = target.read_bytes()
                mime = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
                resource: dict[str, Any] = {"uri": target.as_uri(), "mimeType": mime}
                try:
                    resource.update(type="text", text=data.decode("utf-8"))
                except UnicodeDecodeError:
                    resource.update(type="blob", blob=base64.b64encode(data).decode())
                blocks.append({"type": "resource", "resource": resource})
        except _ToolError as exc:
            return _error(str(exc))
        return {"content": blocks, "isError": False}

    def _tool_listFiles(self, session: FakeSession, args: dict[str, Any]) -> dict[str, Any]:
        try:
            top = self._path(session, args.get("directoryPath") or args.get("path") or ".",
                             "listFiles")
        except _ToolError as exc:
            return _error(str(exc))
        if not top.is_dir():
            return _error(f"Directory not found: {args.get('directoryPath')}")
        blocks = [{"type": "resource_link", "uri": p.as_uri(), "name": p.name,
                   "description": "Directory" if p.is_dir() else "File",
                   **({"size": p.stat().st_size} if p.is_file() else {})}
                  for p in sorted(top.iterdir())]
        return {"content": blocks, "isError": False}

    def _tool_removeFiles(self, session: FakeSession, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("paths") is None:
            raise invalid("arguments.paths is required for removeFiles", "arguments.paths")
        try:
            for path in args["paths"]:
                self._path(session, path, "removeFiles").unlink(missing_ok=True)
        except _ToolError as exc:
            return _error(str(exc))
        return {"content": [{"type": "text", "text": "Removed"}], "isError": False}


class _ToolError(Exception):
    pass


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _node(session: FakeSession, code: str) -> dict[str, Any]:
    """``executeCode`` in JavaScript on the ``nodejs`` runtime: the code as a CommonJS script
    of its own (a fresh context), in the session's folder; the caller's read timeout bounds
    it, as AgentCore's session does."""
    began = time.monotonic()
    script = Path(session.workdir) / ".executed.js"
    script.write_text(code)
    try:
        done = subprocess.run(["node", str(script)], cwd=session.workdir, text=True,
                              capture_output=True, timeout=120, env=_clean_env())
    except subprocess.TimeoutExpired:
        return _result("", "timed out", 1, 120_000, text="timed out")
    finally:
        script.unlink(missing_ok=True)
    return _result(done.stdout, done.stderr, done.returncode,
                   (time.monotonic() - began) * 1000,
                   text=done.stderr if done.returncode else done.stdout)


def _result(stdout: str, stderr: str, code: int, ms: float, *, text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}],
            "structuredContent": {"stdout": stdout, "stderr": stderr, "exitCode": code,
                                  "executionTime": ms},
            "isError": code != 0}


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def _clean_env() -> dict[str, str]:
    """What the session's processes see: no credentials of this machine."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FakeAgentCore

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urlsplit(self.path)
        operation = parts.path
        try:
            for route in self.owner.routes:
                match = route.pattern.match(parts.path)
                if match and route.method == method:
                    break
            else:
                raise Failure(404, "UnknownOperationException", f"no route {self.path}")
            operation = route.operation.name
            values = parse_request(route, match, parts.query, dict(self.headers.items()), raw)
            with self.owner.lock:
                self.owner.requests.append((operation, values))
            answer = getattr(self.owner, operation)(values)
            if operation == "InvokeCodeInterpreter":
                output = route.operation.output_shape.members["stream"].members["result"]
                check(output, answer, "result")
                self._send_stream(values["sessionId"], answer)
            else:
                check(route.operation.output_shape, answer, "output")
                self._send_json(200, answer)
        except Failure as failure:
            with self.owner.lock:
                self.owner.refused.append((operation, failure.kind))
            self._send_json(failure.status, failure.body, failure.kind)

    def _send_json(self, status: int, payload: Any, error_type: str | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        if error_type:
            self.send_header("x-amzn-ErrorType", error_type)
        self.end_headers()
        self.wfile.write(body)

    def _send_stream(self, session_id: str, result: dict[str, Any]) -> None:
        data = event_frame("result", result)
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("x-amzn-code-interpreter-session-id", session_id)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class Clock:
    """A clock a test moves: ``clock.advance(seconds)``."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def fake_agentcore(**kwargs: Any) -> Iterator[FakeAgentCore]:
    with FakeAgentCore(**kwargs) as fake:
        yield fake

"""The ``agentcore`` engine: containers on Amazon Bedrock AgentCore Code Interpreter.

One AgentCore session per container (``StartCodeInterpreterSession``), code and commands run
with ``InvokeCodeInterpreter`` (``executeCode`` with ``clearContext`` false, so globals
persist; ``executeCommand``; ``writeFiles``, ``readFiles``, ``removeFiles``), ended with
``StopCodeInterpreterSession``. boto3 loads on first use and every call runs in a thread.

Built as ``AgentCoreEngine(interpreter_id=..., region=..., endpoint_url=..., bucket=...,
session_seconds=..., s3_endpoint_url=None)``: the settings ``agentcore_interpreter_id``,
``bedrock_region``, ``agentcore_endpoint_url``, ``files_bucket`` and
``agentcore_session_seconds`` (platform/ wires it; nothing here reads settings).

Three things differ from a container as OpenAI keeps it, and this module carries them:

- **A session lives a fixed time** (``sessionTimeoutSeconds``) whatever its use, less than a
  container's idle life. The container's files are therefore copied to S3
  (``s3://BUCKET/containers/<cntr_id>/<path under /mnt/data>``) after every execution that
  created or changed them (at most ``sync_max_files`` files and ``sync_max_bytes`` bytes an
  execution), and when a session has ended (AgentCore answers that it is not found or
  terminated, or its time is past, or too little of it is left for the call's timeout) the
  engine starts a new session, writes the files back and goes on: variables are lost, so the
  result says ``reset=True``. An execution that AgentCore refused because its session had
  just ended is run again in the new one (it never ran).
- **The working directory is not /mnt/data**, and the code runs unprivileged: ``/mnt`` is
  not writable there, so neither a folder nor a symlink at ``/mnt/data`` can be made (and a
  prelude that tried would, on a machine where it could, write outside the sandbox). The
  engine instead keeps the container's files in ``<working directory>/mnt/data`` (a prelude
  run once per session makes it, goes into it, so relative paths land there as in the
  sandbox, and reports the working directory), rewrites the literal ``/mnt/data`` in the
  model's code and commands to that folder, and rewrites the folder back to ``/mnt/data`` in
  what it returns (stdout, stderr, tracebacks, paths). ``writeFiles``, ``readFiles`` and
  ``removeFiles`` take the folder relative to the session's working directory (their base,
  which the prelude's ``chdir`` in the Python does not move). A path the code builds from
  pieces (``os.path.join("/mnt", "data")``) is not mapped; models write the literal path.
  After a failed execution the engine asks whether the session's Python is still the one the
  prelude ran in (code that crashed it is answered ``reset``, and the prelude runs again).
- **Bounds**: a call is bounded by ``timeout`` with ``asyncio.wait_for``; past it the engine
  stops the session (which ends what hangs in it), starts a new one with the container's
  files and answers ``timed_out`` and ``reset``; AgentCore answers an execution whole at its
  end, so nothing of what a cut execution printed comes back. Output is cut at
  ``max_output`` bytes (AgentCore bounds what it returns itself). Each execution costs one
  more ``executeCode`` call, the scan of the folder that finds the files it made or changed
  (and saves the figures it left open as PNG).

State kept for a container (:attr:`Box.state`): JSON ``{"session", "started", "root"}``. The
engine also remembers the current session of each container it served, so a session it
carried over inside ``run_code`` is used by the next call (:meth:`start` returns it), and
notes it in S3 (``containers/<cntr_id>.session``) so another process (another Lambda
instance) with the service's older state goes to it rather than start one more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import posixpath
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from responses_gateway.containers.engine import (
    DATA,
    BadPath,
    Box,
    CodeResult,
    CommandResult,
    ContainerEngine,
    EngineError,
    FileEntry,
    nameable,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: the container's folder, relative to the session's working directory
FOLDER = "mnt/data"
#: seconds of a session kept in hand when no call timeout says how much is needed
MARGIN = 5.0
#: a ``writeFiles`` call carries at most this many bytes when files are restored
WRITE_BATCH_BYTES = 8 * 1024 * 1024
#: seconds a StopCodeInterpreterSession may take before the engine goes on without it
STOP_SECONDS = 15.0
#: the files bucket's lifecycle rule (template.yaml ``ContainerCopies``) drops objects under
#: ``containers/`` this many days after they were written: the copies of containers nobody
#: touches again (their records go by the table's TTL, never reclaimed) do not stay for ever
COPY_DAYS = 7
#: a live container's copies older than this are written again when a new session restores
#: them (at least every session's life, at most 8 hours, while the container is used)
REFRESH_SECONDS = 3 * 86400.0

_PATH = re.compile(r"/mnt/data(?=$|[/'\"\s\\)\]},;:`])")
_ENDED = ("not found", "terminated", "expired", "stopped", "no longer", "inactive")

# Snippets run in the session's Python. They share the model's globals (clearContext false),
# so each defines one function under a dunder name, calls it and deletes it.
_PRELUDE = """
def __gw_prelude(root, folder):
    import json, os
    root = root or os.getcwd()
    top = os.path.join(root, folder)
    os.makedirs(top, exist_ok=True)
    os.chdir(top)
    print(json.dumps({{"root": root}}))
__gw_prelude({root!r}, {folder!r})
del __gw_prelude
__gw_kernel__ = True
"""

#: prints whether the Python that runs the code is still the one the prelude ran in
_KERNEL = "print('__gw_kernel__' in globals())"

_SCAN = """
def __gw_scan(top, most):
    import json, os, sys, uuid
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        for number in list(plt.get_fignums()):
            try:
                plt.figure(number).savefig(
                    os.path.join(top, "figure_%s.png" % uuid.uuid4().hex[:8]))
            finally:
                plt.close(number)
    seen = {{}}
    for base, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(base, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            seen[os.path.relpath(path, top)] = [info.st_size, info.st_mtime_ns]
            if len(seen) >= most:
                dirs.clear()
                break
    print(json.dumps(seen))
__gw_scan({top!r}, {most!r})
del __gw_scan
"""


class _Ended(Exception):
    """AgentCore says the session is gone (expired, stopped, unknown)."""


@dataclass(slots=True)
class _Result:
    """One ``result`` event of InvokeCodeInterpreter (the last when there are several)."""

    content: list[dict[str, Any]] = field(default_factory=list)
    structured: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False

    @property
    def text(self) -> str:
        return "".join(str(b.get("text") or "") for b in self.content if b.get("type") == "text")

    @property
    def stdout(self) -> str:
        out = self.structured.get("stdout")
        return str(out) if out is not None else ("" if self.is_error else self.text)

    @property
    def stderr(self) -> str:
        err = self.structured.get("stderr")
        return str(err) if err is not None else (self.text if self.is_error else "")


@dataclass(slots=True)
class _Session:
    id: str
    started: float  # the engine's clock when it was started
    root: str  # its working directory
    #: relative path -> [size, mtime_ns] of the folder's files as last seen; None: unknown
    snapshot: dict[str, list[int]] | None = None
    #: the snapshot is what the folder holds now (nothing ran since it was taken), so
    #: list_files (which the service calls after every execution) needs no call
    exact: bool = False

    @property
    def data(self) -> str:
        return posixpath.join(self.root, FOLDER)

    def state(self) -> str:
        return json.dumps({"session": self.id, "started": self.started, "root": self.root})

    def to_box(self, text: str) -> str:
        return _PATH.sub(lambda _m: self.data, text)

    def from_box(self, text: str) -> str:
        return text.replace(self.data, DATA) if text else text


def _parse_state(state: str | None) -> _Session | None:
    if not state:
        return None
    try:
        value = json.loads(state)
        return _Session(str(value["session"]), float(value["started"]), str(value["root"]))
    except (ValueError, KeyError, TypeError):
        return None


def _relative(path: str) -> str:
    """``/mnt/data/sub/x.csv`` -> ``sub/x.csv``; anything else is refused."""
    normal = posixpath.normpath(path)
    if not normal.startswith(DATA + "/") or "\x00" in normal:
        raise BadPath(f"a container path is under {DATA}/: {path!r}")
    return normal[len(DATA) + 1:]


def _cut(text: str, room: int) -> tuple[str, int]:
    """``text`` within ``room`` UTF-8 bytes, and the bytes dropped."""
    data = text.encode("utf-8", "replace")
    if len(data) <= room:
        return text, 0
    return data[:max(room, 0)].decode("utf-8", "ignore"), len(data) - max(room, 0)


def _split_traceback(stderr: str) -> tuple[str, str | None]:
    at = stderr.rfind("Traceback (most recent call last):")
    if at < 0:
        return stderr, None
    return stderr[:at], stderr[at:].rstrip("\n")


class AgentCoreEngine(ContainerEngine):
    name = "agentcore"

    def __init__(self, *, bucket: str, interpreter_id: str = "aws.codeinterpreter.v1",
                 region: str | None = None, endpoint_url: str | None = None,
                 session_seconds: int = 3600, s3_endpoint_url: str | None = None,
                 prefix: str = "containers/", sync_max_files: int = 100,
                 sync_max_bytes: int = 64 * 1024 * 1024,
                 restore_max_bytes: int = 512 * 1024 * 1024,
                 clock: Callable[[], float] = time.time, client: Any = None,
                 s3_client: Any = None, refresh_seconds: float = REFRESH_SECONDS) -> None:
        """``bucket`` (with ``prefix``) holds the containers' S3 copies; ``region`` is
        AgentCore's (the Bedrock region; the bucket's is the function's own);
        ``sync_max_files``/``sync_max_bytes`` bound what one execution copies to S3 and
        ``restore_max_bytes`` what a new session gets back; ``clock``, ``client`` and
        ``s3_client`` are for tests."""
        self.bucket = bucket
        self.interpreter_id = interpreter_id
        self.region = region
        self.endpoint_url = endpoint_url
        self.session_seconds = session_seconds
        self.s3_endpoint_url = s3_endpoint_url
        self.prefix = prefix
        self.sync_max_files = sync_max_files
        self.sync_max_bytes = sync_max_bytes
        self.restore_max_bytes = restore_max_bytes
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._client = client
        self._s3 = s3_client
        self._client_lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def check(self) -> str | None:
        if not self.bucket:
            return "the agentcore engine keeps containers' files in S3: no bucket is set"

        def knows() -> bool:
            import botocore.session

            return "bedrock-agentcore" in botocore.session.get_session(
                ).get_available_services()

        if not await asyncio.to_thread(knows):
            return "this botocore has no bedrock-agentcore client: upgrade boto3"
        return None

    # -- clients ---------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                # One attempt: executeCode is not idempotent, a retry could run code twice.
                self._client = boto3.session.Session().client(
                    "bedrock-agentcore", region_name=self.region, endpoint_url=self.endpoint_url,
                    config=Config(retries={"total_max_attempts": 1}, connect_timeout=10,
                                  read_timeout=max(900, self.session_seconds)))
            return self._client

    @property
    def s3(self) -> Any:
        with self._client_lock:
            if self._s3 is None:
                import boto3
                from botocore.config import Config

                # The bucket is the stack's (the function's region, not Bedrock's); a
                # configured endpoint (local S3, tests) is addressed by path, as files/ does.
                local = (self.s3_endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
                         or os.environ.get("AWS_ENDPOINT_URL"))
                self._s3 = boto3.session.Session().client(
                    "s3", endpoint_url=self.s3_endpoint_url,
                    config=Config(retries={"mode": "standard", "max_attempts": 5},
                                  s3={"addressing_style": "path" if local else "auto"}))
            return self._s3

    def _key(self, box: Box, rel: str = "") -> str:
        return f"{self.prefix}{box.id}/{rel}"

    def _lock(self, box: Box) -> asyncio.Lock:
        return self._locks.setdefault(box.id, asyncio.Lock())

    # -- AgentCore calls (in a thread) -----------------------------------------------------

    def _invoke_sync(self, session: _Session, name: str, arguments: dict[str, Any]) -> _Result:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.invoke_code_interpreter(
                codeInterpreterIdentifier=self.interpreter_id, sessionId=session.id,
                name=name, arguments=arguments)
            result = _Result()
            for event in response["stream"]:
                if "result" in event:
                    got = event["result"]
                    result = _Result(list(got.get("content") or []),
                                     dict(got.get("structuredContent") or {}),
                                     bool(got.get("isError")))
            return result
        except ClientError as exc:
            if self._ended(exc):
                raise _Ended(session.id) from None
            raise self._engine_error(exc, "run in") from None
        except BotoCoreError as exc:
            log.warning("agentcore %s failed: %s", name, type(exc).__name__)
            raise EngineError("AgentCore could not be reached") from None

    async def _invoke(self, session: _Session, name: str, arguments: dict[str, Any]) -> _Result:
        return await asyncio.to_thread(self._invoke_sync, session, name, arguments)

    @staticmethod
    def _ended(exc: Any) -> bool:
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "")
        message = str(error.get("Message") or "").lower()
        if code in ("ResourceNotFoundException", "resourceNotFoundException"):
            return True
        return (code in ("ValidationException", "ConflictException", "validationException",
                         "conflictException")
                and "session" in message and any(word in message for word in _ENDED))

    def _engine_error(self, exc: Any, doing: str) -> EngineError:
        """A safe message (no ARN, account or AWS text) for a refused call; the log keeps
        the error code."""
        code = str(exc.response.get("Error", {}).get("Code") or "")
        log.warning("agentcore refused to %s a session: %s", doing, code)
        lowered = code[:1].upper() + code[1:]
        if lowered == "ResourceNotFoundException":
            return EngineError("the AgentCore code interpreter configured for containers "
                               "(GATEWAY_AGENTCORE_INTERPRETER_ID) was not found")
        if lowered == "AccessDeniedException":
            return EngineError("the gateway is not allowed to use the AgentCore code "
                               "interpreter")
        if lowered in ("ThrottlingException", "ServiceQuotaExceededException"):
            return EngineError("AgentCore is busy (throttled or out of sessions); try again "
                               "later")
        if lowered == "ValidationException":
            return EngineError(f"AgentCore refused the request to {doing} a session")
        return EngineError(f"AgentCore failed to {doing} a session")

    def _start_sync(self, box: Box) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return str(self.client.start_code_interpreter_session(
                codeInterpreterIdentifier=self.interpreter_id, name=box.id[:100],
                sessionTimeoutSeconds=self.session_seconds)["sessionId"])
        except ClientError as exc:
            raise self._engine_error(exc, "start") from None
        except BotoCoreError as exc:
            log.warning("agentcore start failed: %s", type(exc).__name__)
            raise EngineError("AgentCore could not be reached") from None

    def _stop_sync(self, session_id: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.stop_code_interpreter_session(
                codeInterpreterIdentifier=self.interpreter_id, sessionId=session_id)
        except ClientError as exc:
            if not self._ended(exc):
                log.warning("agentcore stop failed: %s",
                            exc.response.get("Error", {}).get("Code"))
        except BotoCoreError as exc:
            log.warning("agentcore stop failed: %s", type(exc).__name__)

    async def _stop(self, session_id: str) -> None:
        """Stop a session, waiting at most ``STOP_SECONDS`` (a session that hangs is left
        to its own timeout)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(self._stop_sync, session_id), STOP_SECONDS)

    def _alive_sync(self, session: _Session) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.get_code_interpreter_session(
                codeInterpreterIdentifier=self.interpreter_id, sessionId=session.id)
        except ClientError as exc:
            if self._ended(exc):
                return False
            raise self._engine_error(exc, "look up") from None
        except BotoCoreError as exc:
            log.warning("agentcore get failed: %s", type(exc).__name__)
            raise EngineError("AgentCore could not be reached") from None
        return answer.get("status") == "READY"

    # -- sessions --------------------------------------------------------------------------

    def _fresh(self, session: _Session, need: float) -> bool:
        """The session will live ``need`` more seconds (at most half its life: a call's
        timeout longer than a session would otherwise start a new one every time)."""
        need = min(need, self.session_seconds / 2)
        return self._clock() + need < session.started + self.session_seconds

    async def _ensure(self, box: Box, need: float = MARGIN) -> tuple[_Session, bool]:
        """The container's session, started (and its files restored) when it has none that
        will live ``need`` more seconds; True when that lost a previous session's state."""
        cached = self._sessions.get(box.id)
        if cached is not None and self._fresh(cached, need):
            return cached, False
        previous = cached or await self._last_known(box)
        if (cached is None and previous is not None and self._fresh(previous, need)
                and await asyncio.to_thread(self._alive_sync, previous)):
            self._sessions[box.id] = previous
            return previous, False
        return await self._replace(box, previous), previous is not None

    async def _last_known(self, box: Box) -> _Session | None:
        """The latest session known for ``box``: the pointer in S3 (every session started
        for it is noted there, by whichever process started it), else the service's state."""
        raw = await asyncio.to_thread(self._get_object, self._pointer(box))
        return (_parse_state(raw.decode("utf-8", "replace")) if raw else None) or _parse_state(
            box.state)

    def _pointer(self, box: Box) -> str:
        """Where the container's current session is noted (beside its files' prefix)."""
        return f"{self.prefix}{box.id}.session"

    async def _replace(self, box: Box, previous: _Session | None) -> _Session:
        """A new session for ``box`` with the container's files; ``previous`` is stopped."""
        self._sessions.pop(box.id, None)
        if previous is not None:
            await self._stop(previous.id)
        session_id = await asyncio.to_thread(self._start_sync, box)
        session = _Session(session_id, self._clock(), "")
        try:
            await self._prelude(session)
            await self._restore(box, session)
        except (_Ended, ValueError, KeyError, IndexError) as exc:
            await self._stop(session_id)
            log.warning("agentcore session did not start: %s", type(exc).__name__)
            raise EngineError("AgentCore's new session did not answer as expected") from None
        except BaseException:
            await self._stop(session_id)
            raise
        self._sessions[box.id] = session
        await asyncio.to_thread(self._put_object, self._pointer(box), session.state().encode())
        return session

    async def _prelude(self, session: _Session) -> None:
        """Make the session's folder, go into it (relative paths land in /mnt/data, as in
        the sandbox) and learn the working directory (``writeFiles``' base)."""
        ran = await self._invoke(session, "executeCode", {
            "language": "python", "clearContext": False,
            "code": _PRELUDE.format(root=session.root or None, folder=FOLDER)})
        session.root = str(json.loads(ran.stdout.strip().splitlines()[-1])["root"])

    async def _kernel_lost(self, session: _Session) -> bool:
        """After a failed execution: was the session's Python started again (the code
        crashed it)? Then its variables are gone and the prelude runs again."""
        ran = await self._invoke(session, "executeCode", {
            "language": "python", "clearContext": False, "code": _KERNEL})
        if ran.stdout.strip() == "True":
            return False
        await self._prelude(session)
        return True

    async def _restore(self, box: Box, session: _Session) -> None:
        """Write the container's S3 copy into the new session (in batches)."""
        objects = await asyncio.to_thread(self._list_objects, box)
        batch: list[dict[str, Any]] = []
        size, budget = 0, self.restore_max_bytes
        for key, length, written in objects:
            if length > budget:
                log.info("agentcore: %s not restored (bounds)", key)
                continue
            budget -= length
            data = await asyncio.to_thread(self._get_object, key)
            if data is None:
                continue
            if time.time() - written >= self.refresh_seconds:  # before the lifecycle drops it
                await asyncio.to_thread(self._put_object, key, data)
            rel = key[len(self._key(box)):]
            if batch and size + len(data) > WRITE_BATCH_BYTES:
                await self._write(session, batch)
                batch, size = [], 0
            batch.append({"path": f"{FOLDER}/{rel}", "blob": data})
            size += len(data)
        if batch:
            await self._write(session, batch)

    async def _write(self, session: _Session, content: list[dict[str, Any]]) -> None:
        result = await self._invoke(session, "writeFiles", {"content": content})
        if result.is_error:
            log.warning("agentcore writeFiles failed: %s", result.text[:200])
            raise EngineError("AgentCore could not write the container's files")

    # -- S3 copy (sync, in a thread) -------------------------------------------------------

    def _list_objects(self, box: Box) -> list[tuple[str, int, float]]:
        """The container's copies: key, size and when each was written (epoch seconds)."""
        found: list[tuple[str, int, float]] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(box)):
            found.extend((o["Key"], int(o["Size"]), o["LastModified"].timestamp())
                         for o in page.get("Contents") or ())
        return found

    def _get_object(self, key: str) -> bytes | None:
        try:
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            return None

    def _put_object(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def _delete_objects(self, keys: Sequence[str]) -> None:
        for at in range(0, len(keys), 1000):
            self.s3.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in keys[at:at + 1000]], "Quiet": True})

    # -- files in the session --------------------------------------------------------------

    async def _scan(self, session: _Session) -> dict[str, list[int]]:
        session.exact = False
        ran = await self._invoke(session, "executeCode", {
            "language": "python", "clearContext": False,
            "code": _SCAN.format(top=session.data, most=10_000)})
        try:
            return {str(k): [int(v[0]), int(v[1])]
                    for k, v in json.loads(ran.stdout.strip().splitlines()[-1]).items()
                    if nameable(str(k))}
        except (ValueError, IndexError, TypeError, AttributeError):
            log.warning("agentcore scan answered %r", ran.stderr[:200])
            raise EngineError("AgentCore did not list the container's files") from None

    async def _read(self, session: _Session, rel: str) -> bytes:
        result = await self._invoke(session, "readFiles", {"paths": [f"{FOLDER}/{rel}"]})
        if result.is_error:
            raise FileNotFoundError(f"{DATA}/{rel}")
        for block in result.content:
            resource = block.get("resource") or {}
            if resource.get("blob") is not None:
                return bytes(resource["blob"])
            if resource.get("text") is not None:
                return str(resource["text"]).encode()
            if block.get("data") is not None:
                return bytes(block["data"])
        return b""

    async def _sync(self, box: Box, session: _Session) -> list[str]:
        """Copy what changed under the folder since the last scan to S3 (bounded), drop what
        was removed; the changed paths, absolute."""
        before = session.snapshot or {}
        try:
            after = await self._scan(session)
        except _Ended:  # it ended just now: the next call carries the container over
            if self._sessions.get(box.id) is session:
                del self._sessions[box.id]
            return []
        session.snapshot, session.exact = after, True
        changed = [rel for rel, seen in after.items() if before.get(rel) != seen]
        removed = [rel for rel in before if rel not in after]
        budget, count = self.sync_max_bytes, 0
        for rel in changed:
            size = after[rel][0]
            if count >= self.sync_max_files or size > budget:
                log.info("agentcore: %s not copied to S3 (bounds)", rel)
                continue
            try:
                data = await self._read(session, rel)
            except (FileNotFoundError, _Ended):
                continue
            await asyncio.to_thread(self._put_object, self._key(box, rel), data)
            budget -= len(data)
            count += 1
        if removed:
            await asyncio.to_thread(self._delete_objects, [self._key(box, r) for r in removed])
        return [f"{DATA}/{rel}" for rel in changed]

    # -- the interface ---------------------------------------------------------------------

    async def start(self, box: Box) -> str | None:
        async with self._lock(box):
            session, _reset = await self._ensure(box)
            return session.state()

    async def _attempt(self, box: Box, need: float,
                       work: Callable[[_Session], Awaitable[_T]]) -> tuple[_T, _Session, bool]:
        """``work`` on the container's session; when AgentCore says that session has ended,
        on a new one (the work never ran). Returns its value, the session and whether the
        container's variables were lost on the way."""
        session, reset = await self._ensure(box, need)
        try:
            return await work(session), session, reset
        except _Ended:
            session = await self._replace(box, session)
        try:
            return await work(session), session, True
        except _Ended:
            self._sessions.pop(box.id, None)
            raise EngineError("AgentCore ended the container's new session at once") from None

    async def _timed_out(self, box: Box) -> None:
        """A call hangs: stop its session (ending what runs) and carry the container."""
        await self._replace(box, self._sessions.pop(box.id, None))

    async def run_code(self, box: Box, code: str, *, timeout: float,
                       max_output: int) -> CodeResult:
        async def execute(session: _Session) -> _Result:
            if session.snapshot is None:
                session.snapshot = await self._scan(session)
            session.exact = False
            return await asyncio.wait_for(self._invoke(session, "executeCode", {
                "language": "python", "code": session.to_box(code), "clearContext": False}),
                timeout)

        async with self._lock(box):
            try:
                ran, session, reset = await self._attempt(box, timeout + MARGIN, execute)
            except TimeoutError:
                await self._timed_out(box)
                return CodeResult(timed_out=True, reset=True,
                                  error=f"TimeoutError: the code ran past {timeout:g} seconds")
            if ran.is_error and not reset:
                try:
                    reset = await self._kernel_lost(session)
                except _Ended:
                    self._sessions.pop(box.id, None)  # the next call carries it over
                    reset = True
            stderr, error = _split_traceback(session.from_box(ran.stderr))
            if ran.is_error and error is None:
                error, stderr = (stderr or session.from_box(ran.text) or "error").rstrip(), ""
            stdout, dropped = _cut(session.from_box(ran.stdout), max_output)
            stderr, dropped_err = _cut(stderr, max_output - len(stdout.encode()))
            files = await self._sync(box, session)
            return CodeResult(stdout=stdout, stderr=stderr, error=error, reset=reset,
                              dropped=dropped + dropped_err, files=files)

    async def run_javascript(self, box: Box, source: str, *, timeout: float,
                             max_output: int) -> CommandResult:
        """AgentCore's own JavaScript: ``executeCode`` with ``language: javascript`` on its
        ``nodejs`` runtime (CommonJS), a fresh context."""
        async def execute(session: _Session) -> _Result:
            return await asyncio.wait_for(self._invoke(session, "executeCode", {
                "language": "javascript", "runtime": "nodejs", "code": source,
                "clearContext": True}), timeout)

        async with self._lock(box):
            try:
                ran, _session, _reset = await self._attempt(box, timeout + MARGIN, execute)
            except TimeoutError:
                await self._timed_out(box)
                return CommandResult(timed_out=True)
            stdout, dropped = _cut(ran.stdout, max_output)
            stderr = str(ran.structured.get("stderr") or (ran.text if ran.is_error else ""))
            stderr, dropped_err = _cut(stderr, max_output - len(stdout.encode()))
            return CommandResult(stdout=stdout, stderr=stderr, dropped=dropped + dropped_err,
                                 exit_code=1 if ran.is_error else 0)

    async def run_commands(self, box: Box, commands: Sequence[str], *, timeout: float,
                           max_output: int) -> list[CommandResult]:
        deadline = time.monotonic() + timeout

        def one(command: str) -> Callable[[_Session], Awaitable[_Result]]:
            async def execute(session: _Session) -> _Result:
                if session.snapshot is None:
                    session.snapshot = await self._scan(session)
                session.exact = False
                line = f"cd {_quote(session.data)} && {session.to_box(command)}"
                return await asyncio.wait_for(
                    self._invoke(session, "executeCommand", {"command": line}),
                    max(deadline - time.monotonic(), 0.001))
            return execute

        async with self._lock(box):
            results: list[CommandResult] = []
            session: _Session | None = None
            for command in commands:
                if deadline <= time.monotonic():
                    results.append(CommandResult(timed_out=True))
                    continue
                try:
                    ran, session, _reset = await self._attempt(box, timeout + MARGIN,
                                                               one(command))
                except TimeoutError:
                    await self._timed_out(box)
                    session = None
                    results.extend(CommandResult(timed_out=True)
                                   for _ in commands[len(results):])
                    break
                stdout, dropped = _cut(session.from_box(ran.stdout), max_output)
                stderr, dropped_err = _cut(session.from_box(ran.stderr),
                                           max_output - len(stdout.encode()))
                code = ran.structured.get("exitCode")
                results.append(CommandResult(
                    stdout=stdout, stderr=stderr, dropped=dropped + dropped_err,
                    exit_code=int(code) if code is not None else (1 if ran.is_error else 0)))
            if session is not None:
                await self._sync(box, session)
            return results
    async def write_file(self, box: Box, path: str, data: bytes) -> None:
        rel = _relative(path)
        async def write(session: _Session) -> None:
            await self._write(session, [{"path": f"{FOLDER}/{rel}", "blob": data}])

        async with self._lock(box):
            _none, session, _reset = await self._attempt(box, MARGIN, write)
            await asyncio.to_thread(self._put_object, self._key(box, rel), data)
            session.snapshot = None  # not the code's: the next run looks again first

    async def read_file(self, box: Box, path: str, *, limit: int) -> bytes:
        rel = _relative(path)
        async with self._lock(box):
            session = self._sessions.get(box.id) or await self._last_known(box)
            data: bytes | None = None
            if session is not None and self._fresh(session, MARGIN):
                try:
                    data = await self._read(session, rel)
                except _Ended:
                    data = None
            if data is None:  # no live session: the S3 copy
                data = await asyncio.to_thread(self._get_object, self._key(box, rel))
                if data is None:
                    raise FileNotFoundError(path)
            if len(data) > limit:
                raise EngineError(f"{path} is larger than {limit} bytes")
            return data

    async def list_files(self, box: Box) -> list[FileEntry]:
        async def scan(session: _Session) -> dict[str, list[int]]:
            if session.exact and session.snapshot is not None:
                return session.snapshot
            session.snapshot = await self._scan(session)
            session.exact = True
            return session.snapshot

        async with self._lock(box):
            seen, _session, _reset = await self._attempt(box, MARGIN, scan)
            return [FileEntry(f"{DATA}/{rel}", size) for rel, (size, _m) in sorted(seen.items())]

    async def remove_file(self, box: Box, path: str) -> None:
        rel = _relative(path)
        async with self._lock(box):
            session, _reset = await self._ensure(box)
            # an ended session: the next one is restored from S3, which forgets it below
            with contextlib.suppress(_Ended):
                await self._invoke(session, "removeFiles", {"paths": [f"{FOLDER}/{rel}"]})
            if session.snapshot is not None:
                session.snapshot.pop(rel, None)
            await asyncio.to_thread(self._delete_objects, [self._key(box, rel)])

    async def stop(self, box: Box) -> None:
        async with self._lock(box):
            sessions = {s.id for s in (self._sessions.pop(box.id, None),
                                       _parse_state(box.state), await self._last_known(box))
                        if s is not None}
            for session_id in sessions:
                await self._stop(session_id)
            keys = [key for key, _size, _written in
                    await asyncio.to_thread(self._list_objects, box)]
            await asyncio.to_thread(self._delete_objects, [*keys, self._pointer(box)])
        self._locks.pop(box.id, None)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


__all__ = ["FOLDER", "AgentCoreEngine"]

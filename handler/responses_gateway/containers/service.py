"""Containers as OpenAI serves them, over one :class:`~.engine.ContainerEngine`: records per
tenant (records.py), expiry, container files, and running code in them. The Containers API
(api/container_routes.py) and the tools (code_interpreter, hosted shell) use only this.

- A container is ``running`` from ``create`` until it is deleted or goes ``idle_seconds``
  without use (``expires_after.minutes``, else ``GATEWAY_CONTAINER_IDLE_SECONDS``). Using it
  (running code or commands, adding a file, creating it) moves ``last_active_at``.
- An expired container's engine box is stopped (its processes and files are gone) and its
  files' records removed; its record answers ``GET /v1/containers/{id}`` with status
  ``expired`` (as OpenAI's do) for ``GATEWAY_RETENTION_DAYS``, then goes; using it is OpenAI's
  400 ``Container is expired.`` (:class:`ContainerExpired`). Expired containers are reclaimed
  when touched, when their tenant's list is read, before a create is refused for the bound,
  and (locally) by the gateway's periodic sweep (api/app.py).
- Calls on one container never interleave in this process (an asyncio lock per container);
  two processes (two Lambdas) may run calls on one container at once: the engine serves
  both in turn or side by side as it can (docs/containers.md).
"""

from __future__ import annotations

import logging
import posixpath
import time
import weakref
from asyncio import Lock
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from responses_gateway import ids
from responses_gateway.containers.engine import (
    DATA,
    BadPath,
    Box,
    CodeResult,
    CommandResult,
    ContainerEngine,
    EngineError,
    FileEntry,
)
from responses_gateway.containers.models import (
    MAX_FILE_IDS,
    MEMORY_LIMITS,
    RUNNING,
    ContainerFile,
    ContainerRecord,
    memory_mb,
)
from responses_gateway.containers.records import ContainerRecords, TooManyContainers
from responses_gateway.errors import (
    GatewayError,
    array_too_long,
    invalid_request,
    not_found,
    out_of_range,
)

if TYPE_CHECKING:
    from responses_gateway.files.service import Files

__all__ = ["ContainerExpired", "ContainerFile", "ContainerLimits", "ContainerRecord",
           "Containers", "Ran"]

#: ``expires_after.minutes``: OpenAI documents no bound; at least a minute, at most a day
MIN_EXPIRES_MINUTES, MAX_EXPIRES_MINUTES = 1, 24 * 60
RECLAIM_BATCH = 100
MAX_NAME_BYTES = 255  # a file name on Linux's file systems
logger = logging.getLogger("responses_gateway.containers")


class ContainerExpired(GatewayError):
    """OpenAI's answer for a container that expired: 400 ``Container is expired.``"""

    def __init__(self, container_id: str) -> None:
        super().__init__(400, "Container is expired.")
        self.container_id = container_id


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    idle_seconds: float = 1200.0  # GATEWAY_CONTAINER_IDLE_SECONDS
    code_timeout: float = 60.0  # GATEWAY_CODE_TIMEOUT
    memory_mb: int = 1024  # GATEWAY_CODE_MEMORY_MB: a box never gets more
    max_output: int = 1 << 20  # GATEWAY_CODE_MAX_OUTPUT_BYTES
    file_bytes: int = 512 << 20  # GATEWAY_MAX_FILE_BYTES: one container file (0: no bound)
    name_chars: int = 256  # GATEWAY_MAX_NAME_CHARS
    max_running: int = 100  # GATEWAY_MAX_CONTAINERS per tenant (0: no bound)
    keep_expired_seconds: float = 30 * 86400  # GATEWAY_RETENTION_DAYS
    disk_bytes: int = 2 << 30  # GATEWAY_CONTAINER_MAX_BYTES: a container's files (0: no bound)


@dataclass(slots=True)
class Ran:
    """What one ``run_code`` did: the engine's result, and the container files the code
    created or changed (recorded with source ``assistant``), in the engine's order."""

    result: CodeResult
    files: list[ContainerFile]


class Containers:
    def __init__(self, records: ContainerRecords, engine: ContainerEngine,
                 files: Files | None, limits: ContainerLimits,
                 clock: Callable[[], float] = time.time) -> None:
        self.records = records
        self.engine = engine
        self.files_api = files  # the Files API, for ``file_ids`` (None: not configured)
        self.limits = limits
        #: what "now" is for expiry: tests move it, not time.time
        self.clock = clock
        self._locks: weakref.WeakValueDictionary[str, Lock] = weakref.WeakValueDictionary()

    # -- containers -------------------------------------------------------------------------

    async def create(self, tenant: str, *, name: str, file_ids: Sequence[str] = (),
                     memory_limit: str | None = None, expires_minutes: int | None = None
                     ) -> ContainerRecord:
        """A running container with the Files ``file_ids`` copied into /mnt/data under their
        filenames; OpenAI's 400s for bad input, 404 for a file the tenant does not have."""
        from responses_gateway.files.service import check_length

        if not isinstance(name, str) or not name:
            raise invalid_request("Missing required parameter: 'name'.", param="name",
                                  code="missing_required_parameter")
        check_length(name, "name", self.limits.name_chars, "GATEWAY_MAX_NAME_CHARS")
        limit = MEMORY_LIMITS[0] if memory_limit is None else memory_limit
        if limit not in MEMORY_LIMITS:
            raise invalid_request(
                f"Invalid value: '{limit}'. Supported values are: '1g', '4g', '16g', and "
                "'64g'.", param="memory_limit", code="invalid_value")
        if expires_minutes is not None and not (
                MIN_EXPIRES_MINUTES <= expires_minutes <= MAX_EXPIRES_MINUTES):
            raise out_of_range("expires_after.minutes", MIN_EXPIRES_MINUTES,
                               MAX_EXPIRES_MINUTES, expires_minutes)
        if len(file_ids) > MAX_FILE_IDS:  # each is a read of the Files API and a copy
            raise array_too_long("file_ids", MAX_FILE_IDS, len(file_ids))
        sources = [await self._source_file(tenant, file_id, f"file_ids[{i}]")
                   for i, file_id in enumerate(file_ids)]
        now = self.clock()
        record = ContainerRecord(
            id=ids.new_id(ids.CONTAINER), tenant=tenant, name=name, created_at=int(now),
            last_active_at=now, memory_limit=limit, expires_minutes=expires_minutes,
            idle_seconds=float(expires_minutes * 60) if expires_minutes is not None
            else self.limits.idle_seconds)
        await self._add(record)
        async with self._lock(record.id):
            try:
                box = await self._started(record)
                for filename, file_id in sources:
                    await self._copy_file(record, box, file_id, f"{DATA}/{filename}", "user")
            except BaseException:
                await self.records.remove(tenant, record.id)
                await self._stop(record)
                raise
        return record

    async def _add(self, record: ContainerRecord) -> None:
        """The record within the tenant's bound (its expired containers reclaimed first
        when the bound refuses it)."""
        for attempt in range(2):
            try:
                await self.records.add(record, self.limits.max_running, self.clock())
                return
            except TooManyContainers as full:
                if attempt or not await self.reclaim(record.tenant):
                    raise GatewayError(
                        400,
                        f"You have {full.running} running containers, the most this gateway "
                        f"allows per API key ({self.limits.max_running}; "
                        "GATEWAY_MAX_CONTAINERS). Delete containers you no longer need.",
                        param=None, code="container_limit_exceeded") from None

    async def retrieve(self, tenant: str, container_id: str) -> ContainerRecord:
        """The container as ``GET /v1/containers/{id}`` shows it: an expired one too (status
        ``expired``, reclaimed now if it just expired); 404 for an unknown or deleted one."""
        if ids.unknowable(container_id):
            raise container_not_found(ids.clipped(container_id))
        record = await self.records.get(tenant, container_id)
        if record is None:
            raise container_not_found(container_id)
        if record.status == RUNNING and record.expired(self.clock()):
            async with self._lock(container_id):
                await self._end(record)
            record = await self.records.get(tenant, container_id)
            if record is None:
                raise container_not_found(container_id)
        return record

    async def get(self, tenant: str, container_id: str) -> ContainerRecord:
        """The running container (what tools use): 404 unknown or deleted,
        :class:`ContainerExpired` (OpenAI's 400) when it expired."""
        record = await self.retrieve(tenant, container_id)
        if record.status != RUNNING:
            raise ContainerExpired(container_id)
        return record

    async def page(self, tenant: str, *, name: str | None = None, order: str = "desc",
                   after: str | None = None, limit: int = 20
                   ) -> tuple[list[ContainerRecord], bool]:
        """A page of the tenant's containers (expired ones as ``expired``: those that just
        expired are reclaimed first)."""
        await self.reclaim(tenant)
        return await self.records.page(tenant, name=name, order=order, after=after,
                                       limit=limit)

    async def delete(self, tenant: str, container_id: str) -> None:
        """End the container (its processes and files) and forget it; 404 if unknown."""
        if ids.unknowable(container_id):
            raise container_not_found(ids.clipped(container_id))
        async with self._lock(container_id):
            record = await self.records.remove(tenant, container_id)
            if record is None:
                raise container_not_found(container_id)
            await self._stop(record)

    # -- running ----------------------------------------------------------------------------

    async def run_code(self, tenant: str, container_id: str, code: str) -> Ran:
        """Run Python in the container (its globals persist), within GATEWAY_CODE_TIMEOUT
        and GATEWAY_CODE_MAX_OUTPUT_BYTES; the files it made or changed are recorded.
        :class:`EngineError` when the engine itself failed."""
        async with self._lock(container_id):
            record = await self._live(tenant, container_id)
            box = await self._started(record)
            result = await self.engine.run_code(box, code, timeout=self.limits.code_timeout,
                                                max_output=self.limits.max_output)
            await self.records.touch(tenant, container_id, self.clock())
            files, removed = await self._sync(record, box, result.files)
        if removed:
            result.stderr = _with_line(result.stderr, self._removed_note(removed))
        return Ran(result=result, files=files)

    async def run_commands(self, tenant: str, container_id: str, commands: Sequence[str],
                           *, timeout: float | None = None, max_output: int | None = None
                           ) -> list[CommandResult]:
        """Run shell commands in turn in the container (hosted shell), bounded by
        ``timeout`` / ``max_output`` (default: the code settings, never above them); files
        they left under /mnt/data are recorded (source ``assistant``)."""
        limits = self.limits
        timeout = min(timeout, limits.code_timeout) if timeout else limits.code_timeout
        max_output = min(max_output, limits.max_output) if max_output else limits.max_output
        async with self._lock(container_id):
            record = await self._live(tenant, container_id)
            box = await self._started(record)
            results = await self.engine.run_commands(box, commands, timeout=timeout,
                                                     max_output=max_output)
            await self.records.touch(tenant, container_id, self.clock())
            _files, removed = await self._sync(record, box, ())
        if removed and results:
            results[-1].stderr = _with_line(results[-1].stderr, self._removed_note(removed))
        return results

    # -- container files --------------------------------------------------------------------

    async def add_file(self, tenant: str, container_id: str, *, path: str | None = None,
                       data: bytes | None = None, file_id: str | None = None,
                       source: str = "user") -> ContainerFile:
        """Put ``data`` at ``path`` (under /mnt/data; a relative path is taken there), or
        copy the File ``file_id`` (at ``path``, else /mnt/data/<its filename>)."""
        if (data is None) == (file_id is None):
            raise invalid_request("Provide either 'file' or 'file_id', not both.",
                                  param="file" if data is None else "file_id")
        if data is not None:
            self.check_size(len(data))
            target = data_path(path or "", "file")
        else:
            assert file_id is not None
            filename, file_id = await self._source_file(tenant, file_id, "file_id")
            target = data_path(path or filename, "file_id")
        async with self._lock(container_id):
            record = await self._live(tenant, container_id)
            box = await self._started(record)
            if data is not None:
                await self._check_room(record, target, len(data))
                await self._write(box, target, data)
                added = await self._record_file(record, target, len(data), source)
            else:
                assert file_id is not None
                added = await self._copy_file(record, box, file_id, target, source)
            await self.records.touch(tenant, container_id, self.clock())
        return added

    async def files(self, tenant: str, container_id: str) -> list[ContainerFile]:
        """The container's files (by creation), what the engine holds now."""
        async with self._lock(container_id):
            record = await self._live(tenant, container_id)
            box = await self._started(record)
            await self._sync(record, box, ())
        return await self.records.files(tenant, container_id)

    async def page_files(self, tenant: str, container_id: str, *, order: str = "desc",
                         after: str | None = None, limit: int = 20
                         ) -> tuple[list[ContainerFile], bool]:
        every = await self.files(tenant, container_id)
        if order == "desc":
            every.reverse()
        if after:
            positions = [f.id for f in every]
            if after in positions:
                every = every[positions.index(after) + 1:]
        return every[:limit], len(every) > limit

    async def get_file(self, tenant: str, container_id: str, file_id: str) -> ContainerFile:
        return (await self._live_file(tenant, container_id, file_id))[1]

    async def _live_file(self, tenant: str, container_id: str, file_id: str
                         ) -> tuple[ContainerRecord, ContainerFile]:
        """The tenant's live container and its file ``file_id``; OpenAI's 404 for either."""
        record = await self._live(tenant, container_id)
        if ids.unknowable(file_id):
            raise file_not_found(ids.clipped(file_id))
        found = await self.records.get_file(tenant, container_id, file_id)
        if found is None:
            raise file_not_found(file_id)
        return record, found

    async def file_content(self, tenant: str, container_id: str, file_id: str
                           ) -> tuple[ContainerFile, AsyncIterator[bytes]]:
        """The file and its bytes in chunks, as the file is now (its record's ``bytes`` may
        be older): the sandbox reads it piece by piece; an engine that cannot reads it whole
        within GATEWAY_MAX_FILE_BYTES before the answer starts."""
        async with self._lock(container_id):
            record, found = await self._live_file(tenant, container_id, file_id)
            box = await self._started(record)
            try:
                chunks = await self.engine.read_chunks(
                    box, found.path, limit=self.limits.file_bytes or 1 << 62)
            except (FileNotFoundError, BadPath):  # gone, or no longer a file (a link now)
                await self.records.remove_file(tenant, container_id, file_id)
                raise file_not_found(file_id) from None
            except EngineError as exc:
                raise engine_failed(exc) from None
        return found, chunks

    async def delete_file(self, tenant: str, container_id: str, file_id: str) -> None:
        async with self._lock(container_id):
            record, found = await self._live_file(tenant, container_id, file_id)
            box = await self._started(record)
            try:
                await self.engine.remove_file(box, found.path)
            except BadPath as exc:  # the code made a folder of it
                raise invalid_request(f"Invalid path: {exc}.", param="file_id",
                                      code="invalid_value") from None
            except EngineError as exc:
                raise engine_failed(exc) from None
            await self.records.remove_file(tenant, container_id, file_id)

    def check_size(self, size: int) -> None:
        """A container file over ``GATEWAY_MAX_FILE_BYTES`` is refused (as the Files API's)."""
        if self.limits.file_bytes and size > self.limits.file_bytes:
            raise GatewayError(
                413,
                f"File is too large: {size} bytes, more than the {self.limits.file_bytes} bytes "
                "this gateway accepts per file (GATEWAY_MAX_FILE_BYTES).",
                param="file", code="file_too_large")

    # -- expiry -----------------------------------------------------------------------------

    async def reclaim(self, tenant: str | None) -> int:
        """End the tenant's (``None``: every tenant's, where the records can find them)
        expired containers, and drop expired records past their keeping; how many ended."""
        ended = 0
        while found := await self.records.expired(tenant, self.clock(), RECLAIM_BATCH):
            batch = 0
            for record in found:
                async with self._lock(record.id):
                    batch += await self._end(record)
            ended += batch
            if len(found) < RECLAIM_BATCH or not batch:
                break
        if tenant is None:
            await self.records.forget(self.clock(), RECLAIM_BATCH)
        return ended

    async def _end(self, record: ContainerRecord) -> int:
        """Expire a running container past its time (the caller holds its lock): the record
        first (one caller wins), then its box; 1 if this call ended it."""
        now = self.clock()
        if not await self.records.expire(record.tenant, record.id, now,
                                         now + self.limits.keep_expired_seconds):
            return 0
        await self._stop(record)
        logger.info("container %s expired", record.id)
        return 1

    async def _live(self, tenant: str, container_id: str) -> ContainerRecord:
        """The running container (the caller holds its lock); an expired one is ended now
        and answers :class:`ContainerExpired`."""
        if ids.unknowable(container_id):
            raise container_not_found(ids.clipped(container_id))
        record = await self.records.get(tenant, container_id)
        if record is None:
            raise container_not_found(container_id)
        if record.status == RUNNING and record.expired(self.clock()):
            await self._end(record)
            raise ContainerExpired(container_id)
        if record.status != RUNNING:
            raise ContainerExpired(container_id)
        return record

    # -- engine -----------------------------------------------------------------------------

    def box(self, record: ContainerRecord) -> Box:
        return Box(id=record.id, state=record.state,
                   memory_mb=min(memory_mb(record.memory_limit), self.limits.memory_mb))

    async def _started(self, record: ContainerRecord) -> Box:
        """The record's box, started (a new process after a reset or a restart); the use
        counts as activity, and a new engine state is kept."""
        try:
            state = await self.engine.start(self.box(record))
        except EngineError as exc:
            raise engine_failed(exc) from None
        changed = state is not None and state != record.state
        if changed:
            record.state = state
        if not await self.records.touch(record.tenant, record.id, self.clock(),
                                        state if changed else None):
            raise ContainerExpired(record.id)  # expired or deleted by another process
        return self.box(record)

    async def _stop(self, record: ContainerRecord) -> None:
        try:
            await self.engine.stop(self.box(record))
        except Exception:
            logger.exception("stopping container %s failed", record.id)

    async def _write(self, box: Box, path: str, data: bytes) -> None:
        try:
            await self.engine.write_file(box, path, data)
        except BadPath as exc:  # a folder the code made there, a link on the way
            raise invalid_request(f"Invalid path: {exc}.", param="file",
                                  code="invalid_value") from None
        except EngineError as exc:
            raise engine_failed(exc) from None

    async def _source_file(self, tenant: str, file_id: str, param: str) -> tuple[str, str]:
        """(a safe filename, the id) of the tenant's File ``file_id``; OpenAI's 404 else."""
        if not isinstance(file_id, str) or not file_id:
            raise invalid_request(f"Invalid '{param}': expected a file id.", param=param,
                                  code="invalid_type")
        if self.files_api is None:
            raise GatewayError(501, "File storage is not configured on this gateway.",
                               type="server_error", code="files_not_configured")
        try:
            found = await self.files_api.get(file_id, tenant)
        except GatewayError as exc:
            if exc.status == 404:  # (a long id quoted cut, as the Files API quotes it)
                raise not_found(f"No such File object: {ids.clipped(file_id)}",
                                param=param) from None
            raise
        self.check_size(found.bytes)
        return safe_filename(found.filename), file_id

    async def _copy_file(self, record: ContainerRecord, box: Box, file_id: str, path: str,
                         source: str) -> ContainerFile:
        """The File's bytes (read whole, within GATEWAY_MAX_FILE_BYTES) at ``path``."""
        assert self.files_api is not None
        _, data = await self.files_api.content(file_id, record.tenant)
        self.check_size(len(data))
        await self._check_room(record, path, len(data))
        await self._write(box, path, data)
        return await self._record_file(record, path, len(data), source)

    async def _record_file(self, record: ContainerRecord, path: str, size: int,
                           source: str) -> ContainerFile:
        return await self.records.put_file(ContainerFile(
            id=ids.new_id(ids.CONTAINER_FILE), container_id=record.id, tenant=record.tenant,
            path=path, bytes=size, created_at=int(self.clock()), source=source))

    async def _check_room(self, record: ContainerRecord, path: str, size: int) -> None:
        """A file of ``size`` bytes at ``path`` keeps the container's files within
        GATEWAY_CONTAINER_MAX_BYTES (what its records hold; a file it replaces does not
        count), else OpenAI's 413."""
        bound = self.limits.disk_bytes
        if not bound:
            return
        held = sum(f.bytes for f in await self.records.files(record.tenant, record.id)
                   if f.path != path)
        if held + size > bound:
            raise GatewayError(
                413,
                f"The container's files would take {held + size} bytes, more than the "
                f"{bound} bytes this gateway allows per container (GATEWAY_CONTAINER_MAX_BYTES)"
                ". Delete files you no longer need.", param="file", code="container_full")

    def _removed_note(self, removed: Sequence[str]) -> str:
        return (f"[The container's files went past the {self.limits.disk_bytes} bytes this "
                f"gateway allows per container (GATEWAY_CONTAINER_MAX_BYTES): removed "
                f"{', '.join(removed)}]")

    async def _trim(self, box: Box, entries: list[FileEntry], fresh: Sequence[str]
                    ) -> tuple[list[FileEntry], list[str]]:
        """Files of ``fresh`` (what the call made or changed) removed, the largest first,
        until the container's files are within GATEWAY_CONTAINER_MAX_BYTES; the entries
        left and the paths removed. Files older than the call are never removed."""
        bound = self.limits.disk_bytes
        total = sum(e.bytes for e in entries)
        if not bound or total <= bound:
            return entries, []
        sizes = {e.path: e.bytes for e in entries}
        removed: list[str] = []
        for path in sorted((p for p in set(fresh) if p in sizes), key=lambda p: -sizes[p]):
            if total <= bound:
                break
            try:
                await self.engine.remove_file(box, path)
            except EngineError:
                logger.exception("removing %s past the container's bound failed", path)
                continue
            total -= sizes[path]
            removed.append(path)
        gone = set(removed)
        return [e for e in entries if e.path not in gone], removed

    async def _sync(self, record: ContainerRecord, box: Box, changed: Sequence[str]
                    ) -> tuple[list[ContainerFile], list[str]]:
        """Bring the records in line with the files the engine holds (new ones recorded as
        the assistant's, removed ones dropped, sizes moved), what the call made past the
        container's bound removed first; the records of ``changed``, and what was removed."""
        try:
            entries = await self.engine.list_files(box)
        except EngineError:
            logger.exception("listing container %s's files failed", record.id)
            return [], []
        known = {f.path: f for f in await self.records.files(record.tenant, record.id)}
        grown = [e.path for e in entries
                 if e.path not in known or known[e.path].bytes != e.bytes]
        entries, removed = await self._trim(box, entries, [*changed, *grown])
        now = int(self.clock())
        current: dict[str, ContainerFile] = {}
        for entry in entries:
            had = known.pop(entry.path, None)
            if had is None or had.bytes != entry.bytes:
                current[entry.path] = await self.records.put_file(ContainerFile(
                    id=had.id if had else ids.new_id(ids.CONTAINER_FILE), container_id=record.id,
                    tenant=record.tenant, path=entry.path, bytes=entry.bytes,
                    created_at=had.created_at if had else now,
                    source=had.source if had else "assistant"))
            else:
                current[entry.path] = had
        for gone in known.values():
            await self.records.remove_file(record.tenant, record.id, gone.id)
        return [current[path] for path in dict.fromkeys(changed) if path in current], removed

    def _lock(self, container_id: str) -> Lock:
        lock = self._locks.get(container_id)
        if lock is None:
            lock = self._locks[container_id] = Lock()
        return lock

    async def check(self) -> str | None:
        """None when the engine can run containers here, else why not (the start line)."""
        return await self.engine.check()

    async def aclose(self) -> None:
        """The engine's processes end (no sandbox process outlives the gateway; a container
        starts a new one when used again) and the records close."""
        try:
            await self.engine.aclose()
        finally:
            await self.records.aclose()


def _with_line(text: str, line: str) -> str:
    """``line`` after ``text``, on a line of its own."""
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}{line}\n"


def data_path(path: str, param: str) -> str:
    """``path`` as an absolute path under /mnt/data (a relative one is taken there); a 400
    for one that leaves it."""
    full = posixpath.normpath(posixpath.join(DATA, path)) if path else ""
    if not full.startswith(DATA + "/") or "\x00" in full:
        raise invalid_request(f"Invalid path '{path}': a container file lives under {DATA}/.",
                              param=param, code="invalid_value")
    return full


def safe_filename(name: str) -> str:
    """A File's name as a file under /mnt/data: its last path part, never ``.``/``..``,
    within the file system's 255 bytes (shortened before its extension)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].replace("\x00", "")
    if base in ("", ".", ".."):
        return "file"
    if len(base.encode()) > MAX_NAME_BYTES:
        stem, dot, ext = base.rpartition(".")
        ext = dot + ext if dot and stem and len(ext.encode()) < 32 else ""
        stem = base[:len(base) - len(ext)]
        room = MAX_NAME_BYTES - len(ext.encode())
        base = stem.encode()[:room].decode("utf-8", "ignore") + ext
    return base


def container_not_found(container_id: str) -> GatewayError:
    return not_found(f"No such Container object: {container_id}", param="container_id")


def file_not_found(file_id: str) -> GatewayError:
    return not_found(f"No such Container File object: {file_id}", param="file_id")


def engine_failed(exc: EngineError) -> GatewayError:
    return GatewayError(500, f"The container engine failed: {exc}", type="server_error",
                        code="container_engine_error")

"""A container's /mnt/data as the gateway touches it: the host folder, never past it.

The container's code writes what it likes in its folder, symlinks included (a link to
``/etc/passwd`` is a dangling link inside the jail, but the same link on the host points at the
host's file). So every path is walked one component at a time from the folder's own
descriptor with ``O_NOFOLLOW``: a symlink anywhere on the way is refused, never followed, and
``..`` is refused before that. Listings walk without following links either. Blocking: run
these in a thread.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import posixpath
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from .engine import DATA, BadPath, EngineError, FileEntry, nameable

#: files a listing or a before/after comparison looks at (the rest are not listed)
MAX_ENTRIES = 10_000
#: components of a path under /mnt/data the gateway takes (a deeper file is not listed)
MAX_PARTS = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parts_of(path: str) -> list[str]:
    """The components of ``path`` under /mnt/data (absolute, or relative to it)."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise BadPath("a container file's path must be a non-empty string")
    full = path if path.startswith("/") else f"{DATA}/{path}"
    if not (full + "/").startswith(DATA + "/"):
        raise BadPath(f"a container file's path must be under {DATA}: {path!r}")
    parts = [p for p in full[len(DATA):].split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadPath(f"a container file's path may not contain '..': {path!r}")
    if not parts:
        raise BadPath(f"{path!r} is the folder {DATA}, not a file in it")
    if len(parts) > MAX_PARTS or any(len(p.encode()) > 255 for p in parts):
        raise BadPath(f"a container file's path is too long: {path[:80]!r}")
    return parts


def _open_folder(root: Path, parts: list[str], *, create: bool) -> int:
    """A descriptor of the folder holding ``parts[-1]``, walked without following links."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise _missing(parts) from None  # the container has no files at all
    try:
        for name in parts[:-1]:
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return fd
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, FileNotFoundError):
            raise _missing(parts) from None
        raise _refused(exc, parts) from None


def _missing(parts: list[str]) -> FileNotFoundError:
    """The error for a missing file, naming its path inside the container (not the host's)."""
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), posixpath.join(DATA, *parts))


def _refused(exc: OSError, parts: list[str]) -> EngineError:
    where = posixpath.join(DATA, *parts)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return BadPath(f"{where} goes through a symbolic link or a file: refused")
    if exc.errno == errno.EISDIR:
        return BadPath(f"{where} is a folder")
    if exc.errno == errno.ENAMETOOLONG:
        return BadPath(f"{where} is too long a path")
    return EngineError(f"{where}: {os.strerror(exc.errno or 0)}")


def write(root: Path, path: str, data: bytes) -> None:
    parts = parts_of(path)
    folder = _open_folder(root, parts, create=True)
    try:
        name = parts[-1]
        try:
            existing = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise BadPath(f"{posixpath.join(DATA, *parts)} is a folder")
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            os.unlink(name, dir_fd=folder)  # a link (or fifo) the code made: replaced
        # Written beside, then renamed over: a reader never sees half a file. A new file of
        # a name the code cannot guess (O_EXCL): nothing it left there (a FIFO would block
        # the open for ever) is opened.
        temporary = f".{secrets.token_hex(8)}.partial"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644, dir_fd=folder)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
    except OSError as exc:
        raise _refused(exc, parts) from None
    finally:
        os.close(folder)


def open_regular(root: Path, path: str) -> int:
    """A descriptor of the regular file at ``path`` (the caller closes it); a link on the
    way, a folder or anything but a regular file is refused."""
    parts = parts_of(path)
    folder = _open_folder(root, parts, create=False)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=folder)
        except FileNotFoundError:
            raise _missing(parts) from None
        except OSError as exc:
            raise _refused(exc, parts) from None
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise BadPath(f"{posixpath.join(DATA, *parts)} is a folder")
        if not stat.S_ISREG(info.st_mode):
            raise BadPath(f"{posixpath.join(DATA, *parts)} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read(root: Path, path: str, limit: int) -> bytes:
    fd = open_regular(root, path)
    where = posixpath.join(DATA, *parts_of(path))
    try:
        if os.fstat(fd).st_size > limit:
            raise EngineError(f"{where} is larger than {limit} bytes")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while read
                raise EngineError(f"{where} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove(root: Path, path: str) -> None:
    parts = parts_of(path)
    try:
        folder = _open_folder(root, parts, create=False)
    except FileNotFoundError:
        return
    try:
        os.unlink(parts[-1], dir_fd=folder)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise BadPath(f"{posixpath.join(DATA, *parts)} is a folder") from None
    except OSError as exc:
        if exc.errno == errno.EISDIR or exc.errno == errno.EPERM:
            raise BadPath(f"{posixpath.join(DATA, *parts)} is a folder") from None
        raise _refused(exc, parts) from None
    finally:
        os.close(folder)


def walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(path under /mnt/data, stat) of each regular file, links not followed, at most
    MAX_ENTRIES entries looked at. Each folder is opened from its parent's descriptor with
    ``O_NOFOLLOW``: a folder the code swaps for a link between the look at it and its
    listing is refused there, never followed to the host's files."""
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    try:
        yield from _walk(top, DATA, 1, [0])
    finally:
        os.close(top)


def _walk(fd: int, inside: str, depth: int, seen: list[int]
          ) -> Iterator[tuple[str, os.stat_result]]:
    """The files under the folder ``fd`` (``inside`` in the container), depth first; no
    deeper than a path :func:`parts_of` takes (one descriptor open per level)."""
    try:
        with os.scandir(fd) as found:
            entries = list(itertools.islice(found, MAX_ENTRIES + 1 - seen[0]))
    except OSError:
        return
    entries.sort(key=lambda e: e.name)
    for entry in entries:
        seen[0] += 1
        if seen[0] > MAX_ENTRIES:
            return
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        path = f"{inside}/{entry.name}"
        if stat.S_ISDIR(info.st_mode):
            if depth >= MAX_PARTS:
                continue
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:  # swapped for a link (ELOOP) or gone since
                continue
            try:
                yield from _walk(child, path, depth + 1, seen)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode):
            yield path, info


def listing(root: Path) -> list[FileEntry]:
    return sorted((FileEntry(path=path, bytes=info.st_size) for path, info in walk(root)
                   if nameable(path)), key=lambda e: e.path)


Snapshot = dict[str, tuple[int, int, int]]


def snapshot(root: Path) -> Snapshot:
    """What tells a file changed: size, modification time, inode."""
    return {path: (info.st_size, info.st_mtime_ns, info.st_ino) for path, info in walk(root)
            if nameable(path)}


def changed(before: Snapshot, after: Snapshot, *, limit: int = 1000) -> list[str]:
    """Files of ``after`` new or different since ``before``, oldest change first."""
    fresh = [(state[1], path) for path, state in after.items() if before.get(path) != state]
    return [path for _, path in sorted(fresh)[:limit]]

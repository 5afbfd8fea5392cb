"""The sandbox's host-side file walls (containers/sandbox_files.py), tried directly on a
folder as the container's code could leave it: what the code does between two of the
gateway's steps (a folder swapped for a link, a FIFO where the gateway writes) never takes
the gateway past the folder or blocks one of its threads."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from responses_gateway.containers import sandbox_files as files
from responses_gateway.containers.engine import EngineError


def test_a_folder_swapped_for_a_link_mid_walk_is_not_followed(tmp_path: Path) -> None:
    """The code (a thread it left running) may turn a folder into a link to the host's
    ``/`` between the walk's look at it and its listing: the host's names stay unseen."""
    root, host = tmp_path / "box", tmp_path / "host"
    (root / "d").mkdir(parents=True)
    (root / "a").write_text("a")
    host.mkdir()
    (host / "secret.txt").write_text("host")
    seen = []
    for path, _info in files.walk(root):
        seen.append(path)
        if path == "/mnt/data/a":  # "d" was looked at (a folder): now swapped
            (root / "d").rmdir()
            (root / "d").symlink_to(host)
    assert "/mnt/data/d/secret.txt" not in seen
    assert seen == ["/mnt/data/a"]


def test_a_deep_tree_is_walked_within_the_paths_the_files_take(tmp_path: Path) -> None:
    root = tmp_path / "box"
    deep = root.joinpath(*["n"] * 63)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    (root / "top").write_text("y")
    assert [e.path for e in files.listing(root)] == [
        "/mnt/data/" + "n/" * 63 + "f", "/mnt/data/top"]


def test_a_fifo_where_the_gateway_writes_never_blocks_it(tmp_path: Path) -> None:
    """Whatever the code leaves where the gateway writes (a FIFO at a name it could
    guess), a write ends: a blocked thread would hold the container and the gateway's
    thread pool for ever."""
    root = tmp_path / "box"
    root.mkdir()
    fifos = [root / f".x.csv.{os.getpid()}.partial"]
    for fifo in fifos:
        os.mkfifo(fifo)
    done: list[object] = []

    def write() -> None:
        try:
            files.write(root, "/mnt/data/x.csv", b"data")
            done.append(True)
        except EngineError as exc:
            done.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(10)
    try:
        assert not thread.is_alive(), "the write blocked on the code's FIFO"
        assert done == [True]
        assert (root / "x.csv").read_bytes() == b"data"
    finally:
        for fifo in fifos:  # a blocked writer is let go
            if thread.is_alive():
                fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
                os.close(fd)
        thread.join(5)


@pytest.mark.parametrize("name", ["a" * 256, "é" * 128])
def test_a_name_past_the_file_systems_bound_is_refused_as_a_path(name: str) -> None:
    with pytest.raises(files.BadPath):
        files.parts_of(f"/mnt/data/{name}")


def test_content_is_read_piece_by_piece(tmp_path: Path) -> None:
    """The sandbox sends a container file as it reads it: never more than a piece held,
    whatever its size (``limit`` bounds only whole reads), and a link is refused."""
    from responses_gateway.containers.engine import CHUNK_BYTES, Box
    from responses_gateway.containers.sandbox import SandboxEngine

    engine = SandboxEngine(tmp_path)
    box = Box("cntr_big", 1024)
    (tmp_path / box.id).mkdir()
    data = os.urandom(3 * CHUNK_BYTES + 5)
    (tmp_path / box.id / "big.bin").write_bytes(data)
    (tmp_path / box.id / "link").symlink_to("/etc/passwd")

    async def read() -> list[bytes]:
        chunks = await engine.read_chunks(box, "/mnt/data/big.bin", limit=10)
        return [chunk async for chunk in chunks]

    pieces = asyncio.run(read())
    assert b"".join(pieces) == data
    assert len(pieces) == 4 and max(map(len, pieces)) <= CHUNK_BYTES
    with pytest.raises(files.BadPath):
        asyncio.run(engine.read_chunks(box, "/mnt/data/link", limit=10))


def test_a_read_cut_short_closes_its_descriptor_only_once_the_read_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A content read whose request went away (cancelled) may still run in its thread:
    its descriptor is closed after that read, never under it (the number, reused by the
    next open, would have the late read take another file's or socket's bytes)."""
    from responses_gateway.containers.engine import Box
    from responses_gateway.containers.sandbox import SandboxEngine

    engine = SandboxEngine(tmp_path)
    box = Box("cntr_cut", 1024)
    (tmp_path / box.id).mkdir()
    (tmp_path / box.id / "f.bin").write_bytes(b"x" * 10)
    entered, release = threading.Event(), threading.Event()
    real_read = os.read
    fds: list[int] = []

    def slow_read(fd: int, n: int) -> bytes:
        if fd in fds:
            entered.set()
            release.wait(10)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", slow_read)

    async def cut() -> None:
        chunks = await engine.read_chunks(box, "/mnt/data/f.bin", limit=100)
        fds.append(chunks._fd)
        task = asyncio.ensure_future(chunks.__anext__())
        while not entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        os.fstat(fds[0])  # still open: the read in its thread has not ended
        release.set()
        for _ in range(500):
            try:
                os.fstat(fds[0])
            except OSError:
                return  # closed once the read ended
            await asyncio.sleep(0.01)
        raise AssertionError("the descriptor stayed open")

    asyncio.run(cut())

"""The Containers service (containers/service.py) over a fake engine (tests/helpers/
fake_container_engine.py), SQLite records and the local Files API: what it does around an
engine — bounds, OpenAI's errors, expiry, container files, one call at a time per container."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from responses_gateway.containers.local import SQLiteContainerRecords
from responses_gateway.containers.service import (
    ContainerExpired,
    ContainerLimits,
    Containers,
    data_path,
    safe_filename,
)
from responses_gateway.errors import GatewayError
from responses_gateway.files.local import DiskBlobs, SQLiteFileRecords
from responses_gateway.files.service import FileLimits, Files
from tests.helpers.fake_container_engine import FakeContainerEngine

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(tmp_path: Path) -> FakeContainerEngine:
    return FakeContainerEngine(tmp_path / "boxes")


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(SQLiteFileRecords(str(tmp_path / "g.db")), DiskBlobs(str(tmp_path / "blobs")),
                 FileLimits(file_bytes=1000, tenant_bytes=0))


@pytest.fixture
def service(tmp_path: Path, engine: FakeContainerEngine, files: Files,
            clock: Clock) -> Iterator[Containers]:
    made = Containers(SQLiteContainerRecords(str(tmp_path / "g.db")), engine, files,
                      ContainerLimits(idle_seconds=600, memory_mb=2048, file_bytes=1000,
                                      max_running=3, name_chars=20, keep_expired_seconds=100),
                      clock=clock)
    yield made
    run(made.aclose())


def status(exc: pytest.ExceptionInfo[GatewayError]) -> tuple[int, str | None, str | None]:
    return exc.value.status, exc.value.param, exc.value.code


def test_create_copies_files_and_shows_openai_object(service: Containers, files: Files,
                                                     engine: FakeContainerEngine) -> None:
    upload = run(files.create("t1", "data.csv", b"a,b\n1,2\n", "user_data"))
    record = run(service.create("t1", name="analysis", file_ids=[upload.id],
                                memory_limit="4g"))
    assert record.id.startswith("cntr_") and len(record.id) == 5 + 48
    shown = record.to_api()
    assert shown["status"] == "running" and shown["memory_limit"] == "4g"
    assert shown["expires_after"] == {"anchor": "last_active_at", "minutes": 10}
    listed = run(service.files("t1", record.id))
    assert [(f.path, f.bytes, f.source) for f in listed] == [("/mnt/data/data.csv", 8, "user")]
    assert listed[0].id.startswith("cfile_")
    assert service.box(record).memory_mb == 2048  # 4g capped by GATEWAY_CODE_MEMORY_MB
    assert engine.starts == 1


def test_bad_input_is_openai_400s(service: Containers, files: Files) -> None:
    with pytest.raises(GatewayError) as bad:
        run(service.create("t1", name=""))
    assert status(bad) == (400, "name", "missing_required_parameter")
    with pytest.raises(GatewayError) as bad:
        run(service.create("t1", name="x" * 21))
    assert status(bad) == (400, "name", "string_above_max_length")
    with pytest.raises(GatewayError) as bad:
        run(service.create("t1", name="x", memory_limit="2g"))
    assert status(bad) == (400, "memory_limit", "invalid_value")
    with pytest.raises(GatewayError) as bad:
        run(service.create("t1", name="x", expires_minutes=0))
    assert status(bad) == (400, "expires_after.minutes", "integer_out_of_range")
    other = run(files.create("t2", "theirs.txt", b"x", "user_data"))
    with pytest.raises(GatewayError) as bad:  # another tenant's file is not found
        run(service.create("t1", name="x", file_ids=[other.id]))
    assert status(bad)[:2] == (404, "file_ids[0]")
    assert run(service.page("t1"))[0] == []  # nothing was made


def test_tenants_see_only_their_own(service: Containers) -> None:
    record = run(service.create("t1", name="mine"))
    for call in (service.get("t2", record.id), service.retrieve("t2", record.id),
                 service.delete("t2", record.id), service.run_code("t2", record.id, "1"),
                 service.files("t2", record.id)):
        with pytest.raises(GatewayError) as missing:
            run(call)
        assert missing.value.status == 404
    assert run(service.page("t2"))[0] == []
    assert run(service.get("t1", record.id)).id == record.id


def test_run_code_keeps_state_and_records_files(service: Containers, clock: Clock) -> None:
    record = run(service.create("t1", name="x"))
    clock.now += 30
    run(service.run_code("t1", record.id, "x = 41"))
    ran = run(service.run_code(
        "t1", record.id, "x += 1\nprint(x)\nopen(DATA + '/out.txt', 'w').write('hi')"))
    assert ran.result.stdout == "42\n" and ran.result.error is None
    assert [(f.path, f.bytes, f.source) for f in ran.files] == [
        ("/mnt/data/out.txt", 2, "assistant")]
    again = run(service.run_code("t1", record.id, "open(DATA + '/out.txt', 'w').write('hey')"))
    assert again.files[0].id == ran.files[0].id and again.files[0].bytes == 3
    assert run(service.get("t1", record.id)).last_active_at == clock.now
    run(service.run_code("t1", record.id, "import os; os.remove(DATA + '/out.txt')"))
    assert run(service.files("t1", record.id)) == []


def test_a_containers_files_stay_within_their_bound(tmp_path: Path, engine: FakeContainerEngine,
                                                    files: Files, clock: Clock) -> None:
    """GATEWAY_CONTAINER_MAX_BYTES: an upload past it is OpenAI's 413; what an execution
    wrote past it is removed (largest first) and the code is told."""
    service = Containers(SQLiteContainerRecords(str(tmp_path / "g.db")), engine, files,
                         ContainerLimits(file_bytes=1000, disk_bytes=100), clock=clock)
    try:
        record = run(service.create("t1", name="x"))
        run(service.add_file("t1", record.id, path="a.txt", data=b"a" * 60))
        with pytest.raises(GatewayError) as full:
            run(service.add_file("t1", record.id, path="b.txt", data=b"b" * 60))
        assert status(full) == (413, "file", "container_full")
        assert "GATEWAY_CONTAINER_MAX_BYTES" in full.value.message
        # the same path replaced: its old size does not count
        run(service.add_file("t1", record.id, path="a.txt", data=b"A" * 70))
        ran = run(service.run_code("t1", record.id, (
            "open(DATA + '/small.txt', 'w').write('s' * 10)\n"
            "open(DATA + '/big.txt', 'w').write('b' * 50)")))
        assert [f.path for f in ran.files] == ["/mnt/data/small.txt"]
        assert "big.txt" in ran.result.stderr and "GATEWAY_CONTAINER_MAX_BYTES" in \
            ran.result.stderr
        assert sorted(f.path for f in run(service.files("t1", record.id))) == [
            "/mnt/data/a.txt", "/mnt/data/small.txt"]
        assert not (tmp_path / "boxes" / record.id / "big.txt").exists()
    finally:
        run(service.aclose())


def test_run_commands_records_what_they_left(service: Containers) -> None:
    record = run(service.create("t1", name="x"))
    results = run(service.run_commands("t1", record.id, ["echo hi", "touch made.txt"]))
    assert [r.stdout for r in results] == ["hi\n", ""]
    assert [f.path for f in run(service.files("t1", record.id))] == ["/mnt/data/made.txt"]


def test_add_file_bytes_or_file_id(service: Containers, files: Files) -> None:
    record = run(service.create("t1", name="x"))
    added = run(service.add_file("t1", record.id, path="notes.txt", data=b"abc"))
    assert (added.path, added.bytes, added.source) == ("/mnt/data/notes.txt", 3, "user")
    upload = run(files.create("t1", "../../etc/passwd", b"12345", "user_data"))
    copied = run(service.add_file("t1", record.id, file_id=upload.id))
    assert copied.path == "/mnt/data/passwd"  # its name, never a path out of /mnt/data
    _, chunks = run(service.file_content("t1", record.id, copied.id))

    async def read() -> bytes:
        return b"".join([c async for c in chunks])

    assert run(read()) == b"12345"
    with pytest.raises(GatewayError) as big:
        run(service.add_file("t1", record.id, path="big", data=b"x" * 1001))
    assert status(big) == (413, "file", "file_too_large")
    with pytest.raises(GatewayError) as both:
        run(service.add_file("t1", record.id, path="a", data=b"x", file_id=upload.id))
    assert both.value.status == 400
    run(service.delete_file("t1", record.id, added.id))
    with pytest.raises(GatewayError) as gone:
        run(service.get_file("t1", record.id, added.id))
    assert gone.value.status == 404


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "/mnt/data", "/mnt/data/../x", ""])
def test_paths_stay_under_mnt_data(path: str) -> None:
    with pytest.raises(GatewayError) as bad:
        data_path(path, "file")
    assert bad.value.status == 400


@pytest.mark.parametrize(("name", "expected"), [
    ("../../etc/passwd", "passwd"), ("..", "file"), ("a" * 300 + ".csv", "a" * 251 + ".csv"),
    ("é" * 200, "é" * 127)])
def test_a_files_name_fits_the_folder(name: str, expected: str) -> None:
    assert safe_filename(name) == expected


def test_expiry_stops_the_box_and_answers_as_openai(service: Containers, clock: Clock,
                                                    engine: FakeContainerEngine) -> None:
    record = run(service.create("t1", name="x"))
    run(service.add_file("t1", record.id, path="a.txt", data=b"abc"))
    short = run(service.create("t1", name="short", expires_minutes=1))
    clock.now += 61
    assert run(service.get("t1", record.id)).status == "running"  # 10 minutes: not yet
    shown = run(service.retrieve("t1", short.id))  # 1 minute: past it
    assert shown.status == "expired" and shown.to_api()["status"] == "expired"
    assert short.id not in engine.running
    assert not (engine.root / short.id).exists()  # its files are gone
    with pytest.raises(ContainerExpired) as expired:
        run(service.run_code("t1", short.id, "1"))
    assert expired.value.status == 400 and expired.value.message == "Container is expired."
    clock.now += 600
    listed, _ = run(service.page("t1"))  # a list reclaims what expired meanwhile
    assert {r.status for r in listed} == {"expired"} and engine.running == {}
    clock.now += 100  # past the keeping: the sweep forgets them
    run(service.reclaim(None))
    with pytest.raises(GatewayError) as gone:
        run(service.retrieve("t1", record.id))
    assert gone.value.status == 404


def test_use_keeps_it_alive(service: Containers, clock: Clock) -> None:
    record = run(service.create("t1", name="x"))
    for _ in range(3):
        clock.now += 500
        run(service.run_code("t1", record.id, "1"))
    assert run(service.get("t1", record.id)).status == "running"


def test_bound_on_running_containers(service: Containers, clock: Clock) -> None:
    made = [run(service.create("t1", name="x", expires_minutes=1)) for _ in range(3)]
    with pytest.raises(GatewayError) as full:
        run(service.create("t1", name="x"))
    assert status(full) == (400, None, "container_limit_exceeded")
    assert run(service.create("t2", name="x")).tenant == "t2"  # per tenant
    run(service.delete("t1", made[0].id))
    run(service.create("t1", name="x"))
    clock.now += 61  # the two short ones expired: reclaimed before refusing
    run(service.create("t1", name="x"))
    run(service.create("t1", name="x"))


def test_delete_stops_and_forgets(service: Containers, engine: FakeContainerEngine) -> None:
    record = run(service.create("t1", name="x"))
    run(service.delete("t1", record.id))
    assert record.id not in engine.running and ("stop", record.id) in engine.calls
    with pytest.raises(GatewayError) as gone:
        run(service.get("t1", record.id))
    assert gone.value.status == 404


def test_calls_on_one_container_do_not_interleave(service: Containers,
                                                  engine: FakeContainerEngine) -> None:
    record = run(service.create("t1", name="x"))
    inside: list[int] = []
    seen: list[int] = []
    real = engine.run_code

    async def slow(box: Any, code: str, **kw: Any) -> Any:
        inside.append(1)
        seen.append(len(inside))
        await asyncio.sleep(0.01)
        inside.pop()
        return await real(box, code, **kw)

    engine.run_code = slow  # type: ignore[method-assign]

    async def both() -> None:
        await asyncio.gather(*(service.run_code("t1", record.id, "1") for _ in range(4)))

    run(both())
    assert seen == [1, 1, 1, 1]


def test_close_ends_the_engine(tmp_path: Path, engine: FakeContainerEngine) -> None:
    made = Containers(SQLiteContainerRecords(str(tmp_path / "c.db")), engine, None,
                      ContainerLimits())
    run(made.aclose())
    assert engine.closed

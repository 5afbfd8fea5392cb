"""The Containers API's records, one suite over both engines: SQLite (the store's file) and
DynamoDB (the store's table, on the session's moto server)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from responses_gateway.containers.models import EXPIRED, RUNNING, ContainerFile, ContainerRecord
from responses_gateway.containers.records import ContainerRecords, TooManyContainers

T = TypeVar("T")
NOW = 1_800_000_000.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(params=["sqlite", "dynamodb"])
def records(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ContainerRecords]:
    if request.param == "sqlite":
        from responses_gateway.containers.local import SQLiteContainerRecords

        made: ContainerRecords = SQLiteContainerRecords(str(tmp_path / "g.db"))
    else:
        from responses_gateway.containers.aws import DynamoDBContainerRecords
        from tests.helpers.moto_server import create_dynamodb_table, use_moto

        use_moto(request.getfixturevalue("monkeypatch"),
                 request.getfixturevalue("moto_endpoint"))
        made = DynamoDBContainerRecords(create_dynamodb_table(), keep_seconds=3600)
    yield made
    run(made.aclose())


def container(cid: str, tenant: str = "t1", *, created: int = 0, name: str = "box",
              idle: float = 600) -> ContainerRecord:
    return ContainerRecord(id=cid, tenant=tenant, name=name, created_at=int(NOW) + created,
                           last_active_at=NOW + created, idle_seconds=idle)


def cfile(fid: str, cid: str, path: str, *, size: int = 3, tenant: str = "t1",
          created: int = 0) -> ContainerFile:
    return ContainerFile(id=fid, container_id=cid, tenant=tenant, path=path, bytes=size,
                         created_at=int(NOW) + created)


def test_add_get_and_tenancy(records: ContainerRecords) -> None:
    record = container("cntr_a")
    record.expires_minutes, record.memory_limit, record.state = 5, "4g", "s1"
    run(records.add(record, 0, NOW))
    got = run(records.get("t1", "cntr_a"))
    assert got == record
    assert run(records.get("t2", "cntr_a")) is None  # another tenant's id is not there
    assert got is not None and got.to_api()["expires_after"] == {"anchor": "last_active_at",
                                                                 "minutes": 5}


def test_bound_counts_running_unexpired(records: ContainerRecords) -> None:
    run(records.add(container("cntr_1"), 2, NOW))
    run(records.add(container("cntr_2"), 2, NOW))
    with pytest.raises(TooManyContainers) as full:
        run(records.add(container("cntr_3"), 2, NOW))
    assert full.value.running == 2
    assert run(records.get("t1", "cntr_3")) is None
    run(records.add(container("cntr_x", "t2"), 2, NOW))  # per tenant
    # one past its expiry no longer counts, expired or not yet reclaimed
    later = NOW + 601
    run(records.add(container("cntr_4", created=601), 2, later))
    assert run(records.get("t1", "cntr_4")) is not None


def test_page_orders_filters_and_cursors(records: ContainerRecords) -> None:
    for i in range(5):
        run(records.add(container(f"cntr_{i}", created=i, name="odd" if i % 2 else "even"),
                        0, NOW))
    run(records.add(container("cntr_other", "t2"), 0, NOW))
    page, more = run(records.page("t1", name=None, order="desc", after=None, limit=2))
    assert [r.id for r in page] == ["cntr_4", "cntr_3"] and more
    page, more = run(records.page("t1", name=None, order="desc", after="cntr_3", limit=10))
    assert [r.id for r in page] == ["cntr_2", "cntr_1", "cntr_0"] and not more
    page, more = run(records.page("t1", name="odd", order="asc", after=None, limit=10))
    assert [r.id for r in page] == ["cntr_1", "cntr_3"] and not more
    # a cursor the filter leaves out still names its place: both engines go on from there
    page, more = run(records.page("t1", name="odd", order="asc", after="cntr_2", limit=10))
    assert [r.id for r in page] == ["cntr_3"] and not more


def test_touch_moves_expiry_and_keeps_state(records: ContainerRecords) -> None:
    run(records.add(container("cntr_a", idle=10), 0, NOW))
    assert run(records.touch("t1", "cntr_a", NOW + 8, "session-2"))
    got = run(records.get("t1", "cntr_a"))
    assert got is not None and got.last_active_at == NOW + 8 and got.state == "session-2"
    assert got.active_until == NOW + 18
    assert run(records.expired("t1", NOW + 15, 10)) == []
    assert [r.id for r in run(records.expired("t1", NOW + 18, 10))] == ["cntr_a"]
    assert not run(records.touch("t2", "cntr_a", NOW + 9))  # not another tenant's


def test_expire_once_drops_files_keeps_record(records: ContainerRecords) -> None:
    run(records.add(container("cntr_a", idle=10), 0, NOW))
    run(records.put_file(cfile("cfile_1", "cntr_a", "/mnt/data/a.txt")))
    assert not run(records.expire("t1", "cntr_a", NOW + 5, NOW + 100))  # not yet
    assert run(records.expire("t1", "cntr_a", NOW + 10, NOW + 100))
    assert not run(records.expire("t1", "cntr_a", NOW + 10, NOW + 100))  # one caller wins
    got = run(records.get("t1", "cntr_a"))
    assert got is not None and got.status == EXPIRED and got.forget_at == NOW + 100
    assert run(records.files("t1", "cntr_a")) == []
    assert not run(records.touch("t1", "cntr_a", NOW + 11))  # an expired one is not used
    assert run(records.expired("t1", NOW + 50, 10)) == []


def test_remove_takes_files_along(records: ContainerRecords) -> None:
    run(records.add(container("cntr_a"), 0, NOW))
    run(records.add(container("cntr_b"), 0, NOW))
    run(records.put_file(cfile("cfile_1", "cntr_a", "/mnt/data/a.txt")))
    run(records.put_file(cfile("cfile_2", "cntr_b", "/mnt/data/a.txt")))
    assert run(records.remove("t2", "cntr_a")) is None
    removed = run(records.remove("t1", "cntr_a"))
    assert removed is not None and removed.status == RUNNING
    assert run(records.get("t1", "cntr_a")) is None
    assert run(records.files("t1", "cntr_a")) == []
    assert [f.id for f in run(records.files("t1", "cntr_b"))] == ["cfile_2"]
    assert run(records.remove("t1", "cntr_a")) is None


def test_files_upsert_by_path(records: ContainerRecords) -> None:
    run(records.add(container("cntr_a"), 0, NOW))
    first = run(records.put_file(cfile("cfile_1", "cntr_a", "/mnt/data/a.txt", size=3)))
    assert first.id == "cfile_1"
    run(records.put_file(cfile("cfile_2", "cntr_a", "/mnt/data/b.txt", created=1)))
    again = run(records.put_file(ContainerFile(
        id="cfile_3", container_id="cntr_a", tenant="t1", path="/mnt/data/a.txt", bytes=9,
        created_at=int(NOW) + 5, source="assistant")))
    assert (again.id, again.bytes, again.created_at, again.source) == (
        "cfile_1", 9, int(NOW), "assistant")
    assert [(f.id, f.bytes) for f in run(records.files("t1", "cntr_a"))] == [
        ("cfile_1", 9), ("cfile_2", 3)]
    assert run(records.get_file("t2", "cntr_a", "cfile_1")) is None
    assert run(records.get_file("t1", "cntr_a", "cfile_2")) is not None
    assert run(records.remove_file("t1", "cntr_a", "cfile_2")) is not None
    assert run(records.remove_file("t1", "cntr_a", "cfile_2")) is None
    assert [f.id for f in run(records.files("t1", "cntr_a"))] == ["cfile_1"]


def test_forget_drops_expired_records_past_keeping(records: ContainerRecords,
                                                   request: pytest.FixtureRequest) -> None:
    run(records.add(container("cntr_a", idle=1), 0, NOW))
    assert run(records.expire("t1", "cntr_a", NOW + 1, NOW + 10))
    dropped = run(records.forget(NOW + 10, 10))
    if "sqlite" in request.node.callspec.id:
        assert dropped == 1 and run(records.get("t1", "cntr_a")) is None
    else:  # the table's TTL does it
        assert dropped == 0


@pytest.fixture
def dynamodb(request: pytest.FixtureRequest) -> Iterator[Any]:
    from responses_gateway.containers.aws import DynamoDBContainerRecords
    from tests.helpers.moto_server import create_dynamodb_table, use_moto

    use_moto(request.getfixturevalue("monkeypatch"), request.getfixturevalue("moto_endpoint"))
    made = DynamoDBContainerRecords(create_dynamodb_table(), keep_seconds=3600)
    yield made
    run(made.aclose())


def test_two_creates_at_once_in_two_processes_keep_the_bound(dynamodb: Any) -> None:
    """Two instances each count the tenant's running containers before either writes
    (both see room for one): the one written second finds itself past the bound once
    written, and takes its record back."""
    from responses_gateway.containers.aws import DynamoDBContainerRecords

    other = DynamoDBContainerRecords(dynamodb.table, dynamodb.client, keep_seconds=3600)
    for instance in (dynamodb, other):  # the count both read before either wrote
        real = instance._running
        calls: list[int] = []

        def first_sees_none(tenant: str, now: float, real: Any = real,
                            calls: list[int] = calls) -> list[Any]:
            calls.append(1)
            return [] if len(calls) == 1 else real(tenant, now)

        instance._running = first_sees_none
    run(dynamodb.add(container("cntr_a"), 1, NOW))
    with pytest.raises(TooManyContainers):
        run(other.add(container("cntr_b", created=1), 1, NOW + 1))
    assert run(dynamodb.get("t1", "cntr_b")) is None
    assert run(dynamodb.get("t1", "cntr_a")) is not None


def test_file_rows_leave_the_table_by_themselves(dynamodb: Any) -> None:
    """A container's row goes by the table's TTL when nobody touches it again; its files'
    rows carry a TTL too (beyond the container's keeping, moved on when listed)."""
    import time

    run(dynamodb.add(container("cntr_a"), 0, NOW))
    run(dynamodb.put_file(cfile("cfile_1", "cntr_a", "/mnt/data/a.txt")))

    def ttl() -> int:
        from responses_gateway.containers.aws import _fsk, _pk

        item = dynamodb.client.get_item(TableName=dynamodb.table, Key={
            "pk": _pk("t1"), "sk": _fsk("cntr_a", "cfile_1")}, ConsistentRead=True)["Item"]
        return int(item["expires_at"]["N"])

    assert ttl() >= time.time() + 3600
    from responses_gateway.containers.aws import _fsk, _pk

    dynamodb.client.update_item(TableName=dynamodb.table, Key={
        "pk": _pk("t1"), "sk": _fsk("cntr_a", "cfile_1")},
        UpdateExpression="SET expires_at = :t", ExpressionAttributeValues={
            ":t": {"N": str(int(time.time()) + 60)}})
    assert [f.id for f in run(dynamodb.files("t1", "cntr_a"))] == ["cfile_1"]
    assert ttl() >= time.time() + 3600  # listed: moved on

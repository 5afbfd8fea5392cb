"""One store suite, run against the embedded SQLite store and DynamoDB (moto server over HTTP)."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from responses_gateway.errors import GatewayError
from responses_gateway.store.base import (
    CancelledError,
    Store,
    StoredResponse,
    StoreUnavailable,
    TurnSettle,
)
from responses_gateway.store.dynamodb import (
    INPUT_ITEM_LIMIT,
    DynamoDBStore,
    _pack,
    make_client,
)
from responses_gateway.store.dynamodb_schema import table_definition
from responses_gateway.store.sqlite import SQLiteStore
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.helpers.store_calls import fail_next_append, fail_next_settle

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
WRITE_OPERATIONS = (
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    use_moto(monkeypatch, moto_endpoint)
    return moto_endpoint


StoreFactory = Callable[..., Store]


@pytest.fixture(params=["sqlite", "dynamodb"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of stores of one kind sharing one database (file or table)."""
    created: list[Store] = []
    if request.param == "sqlite":
        path = str(tmp_path / "gateway.db")

        def factory(**kwargs: Any) -> Store:
            created.append(SQLiteStore(path, **kwargs))
            return created[-1]
    else:
        request.getfixturevalue("aws")
        table = create_dynamodb_table()

        def factory(**kwargs: Any) -> Store:
            created.append(DynamoDBStore(table, **kwargs))
            return created[-1]

    yield factory
    for store in created:
        await store.aclose()


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()


def new_id(prefix: str = "resp_") -> str:
    return prefix + os.urandom(12).hex()


def message(text: str, role: str = "user", item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("msg_"),
        "type": "message",
        "role": role,
        "content": [{"type": "input_text", "text": text}],
    }


def output_message(text: str) -> dict[str, Any]:
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def record(
    *,
    tenant: str = "tenant-a",
    status: str = "completed",
    inputs: list[dict[str, Any]] | None = None,
    output: list[dict[str, Any]] | None = None,
    **kwargs: Any,
) -> StoredResponse:
    rid = new_id()
    inputs = [message("hello")] if inputs is None else inputs
    return StoredResponse(
        id=rid,
        tenant=tenant,
        response={"id": rid, "object": "response", "status": status, "output": output or []},
        request={"model": "gpt-test", "input": inputs},
        input_items=inputs,
        **kwargs,
    )


def events(first: int, count: int, text: str = "x") -> list[dict[str, Any]]:
    return [
        {"type": "response.output_text.delta", "sequence_number": n, "delta": f"{text}{n}"}
        for n in range(first, first + count)
    ]


def words(n_bytes: int, seed: int) -> str:
    """Text that compresses like prose (a few times), not like a repeated string."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(3000)
    ]
    out: list[str] = []
    size = 0
    while size < n_bytes:
        word = rng.choice(vocabulary)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def incompressible(n_bytes: int) -> str:
    return base64.b64encode(os.urandom(n_bytes * 3 // 4)).decode()


# -- the shared suite ---------------------------------------------------------------------------


async def test_put_get_round_trip(store: Store) -> None:
    r = record(
        status="in_progress",
        inputs=[message("first"), message("second", role="developer")],
        previous_response_id=new_id(),
        background=True,
        lease_until=time.time() + 30.5,
    )
    r.request["tools"] = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    await store.put(r)

    got = await store.get(r.id, r.tenant)
    assert got is not None
    assert got.response == r.response
    assert got.request == r.request
    assert got.input_items == r.input_items
    assert got.previous_response_id == r.previous_response_id
    assert got.background is True
    assert got.lease_until == pytest.approx(r.lease_until)
    assert got.status == "in_progress"
    assert await store.get(new_id(), r.tenant) is None


async def test_put_overwrites_same_id(store: Store) -> None:
    r = record(status="queued", inputs=[message(str(i)) for i in range(5)])
    await store.put(r)
    r.input_items = r.input_items[:2]
    r.response["status"] = "completed"
    await store.put(r)
    got = await store.get(r.id, r.tenant)
    assert got is not None
    assert got.input_items == r.input_items
    assert got.status == "completed"


async def test_delete_removes_everything(store: Store) -> None:
    r = record(status="in_progress")
    await store.put(r)
    await store.append_events(r.id, events(0, 3))
    assert await store.delete(r.id, r.tenant) is True
    assert await store.get(r.id, r.tenant) is None
    assert await store.read_events(r.id) == []
    assert await store.get_items([r.input_items[0]["id"]], r.tenant) == {}
    assert await store.delete(r.id, r.tenant) is False


async def test_tenant_isolation(store: Store) -> None:
    r = record(tenant="tenant-a", output=[output_message("secret")])
    await store.put(r)
    ids = [r.input_items[0]["id"], r.response["output"][0]["id"]]

    assert await store.get(r.id, "tenant-b") is None
    assert await store.get_items(ids, "tenant-b") == {}
    assert await store.delete(r.id, "tenant-b") is False
    # ...and the owner still has all of it.
    assert await store.get(r.id, "tenant-a") is not None
    assert set(await store.get_items(ids, "tenant-a")) == set(ids)


async def test_many_input_items_keep_their_order(store: Store) -> None:
    inputs = [message(f"item {i} " + "pad " * 1000) for i in range(260)]  # > 1 MB: several pages
    r = record(inputs=inputs)
    await store.put(r)
    got = await store.get(r.id, r.tenant)
    assert got is not None
    assert [i["id"] for i in got.input_items] == [i["id"] for i in inputs]
    assert got.input_items == inputs


@pytest.mark.slow
async def test_get_items_across_responses(store: Store) -> None:
    first = record(output=[output_message("answer one")])
    second = record(status="in_progress", inputs=[message("again")])
    await store.put(first)
    await store.put(second)
    finished = {**second.response, "status": "completed", "output": [output_message("two")]}
    assert await store.update_response(second.id, finished, expect_status={"in_progress"})

    wanted = {
        first.input_items[0]["id"]: first.input_items[0],
        first.response["output"][0]["id"]: first.response["output"][0],
        second.input_items[0]["id"]: second.input_items[0],
        finished["output"][0]["id"]: finished["output"][0],
    }
    found = await store.get_items([*wanted, "msg_unknown"], "tenant-a")
    assert found == wanted
    assert await store.get_items([], "tenant-a") == {}


async def test_item_shared_by_two_responses_survives_deleting_one(store: Store) -> None:
    shared = message("referenced twice")
    a = record(inputs=[shared])
    b = record(inputs=[shared, message("more")])
    await store.put(a)
    await store.put(b)
    assert await store.delete(b.id, "tenant-a")
    assert await store.get_items([shared["id"]], "tenant-a") == {shared["id"]: shared}


async def test_update_response_is_conditional(store: Store) -> None:
    r = record(status="in_progress")
    await store.put(r)
    completed = {**r.response, "status": "completed", "output": [output_message("done")]}

    assert await store.update_response(r.id, completed, expect_status={"queued"}) is False
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.response == r.response  # nothing written
    assert await store.update_response(r.id, completed, expect_status=set()) is False

    lease = time.time() + 60
    progress = {**r.response, "output": [output_message("partial")]}
    assert await store.update_response(
        r.id, progress, expect_status={"queued", "in_progress"}, lease_until=lease
    )
    got = await store.get(r.id, r.tenant)
    assert got is not None
    assert got.response == progress and got.lease_until == pytest.approx(lease)

    assert await store.update_response(r.id, completed) is True  # unconditional
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.status == "completed"
    assert got.lease_until == pytest.approx(lease)  # kept when not given
    assert await store.update_response(new_id(), completed) is False  # never creates


async def test_events_in_order_after_any_point(store: Store) -> None:
    r = record(status="in_progress")
    await store.put(r)
    await store.append_events(r.id, events(0, 4))
    await store.append_events(r.id, events(4, 1))
    await store.append_events(r.id, events(5, 10))
    await store.append_events(r.id, [])

    every = await store.read_events(r.id)
    assert [e["sequence_number"] for e in every] == list(range(15))
    assert every == events(0, 15)
    for after in (-1, 0, 2, 3, 4, 5, 9, 13):
        got = await store.read_events(r.id, after=after)
        assert [e["sequence_number"] for e in got] == list(range(after + 1, 15))
    assert await store.read_events(r.id, after=14) == []
    assert await store.read_events(new_id()) == []


async def test_append_after_cancel_raises_and_writes_nothing(store: Store) -> None:
    r = record(status="in_progress")
    await store.put(r)
    await store.append_events(r.id, events(0, 2))
    cancelled = {**r.response, "status": "cancelled"}
    assert await store.update_response(r.id, cancelled, expect_status={"queued", "in_progress"})

    with pytest.raises(CancelledError):
        await store.append_events(r.id, events(2, 3))
    assert [e["sequence_number"] for e in await store.read_events(r.id)] == [0, 1]
    with pytest.raises(CancelledError):  # a deleted (or never stored) response stops it too
        await store.append_events(new_id(), events(0, 1))


async def test_renew_lease_only_while_running(store: Store) -> None:
    r = record(status="queued", background=True, lease_until=time.time())
    await store.put(r)
    later = time.time() + 120
    assert await store.renew_lease(r.id, later) is True
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.lease_until == pytest.approx(later)

    assert await store.update_response(r.id, {**r.response, "status": "completed"})
    assert await store.renew_lease(r.id, later + 100) is False
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.lease_until == pytest.approx(later)
    assert await store.renew_lease(new_id(), later) is False


async def test_expired_records_are_absent(store: Store) -> None:
    r = record(output=[output_message("old")], expires_at=int(time.time()) - 5)
    await store.put(r)
    ids = [r.input_items[0]["id"], r.response["output"][0]["id"]]
    assert await store.get(r.id, r.tenant) is None
    assert await store.get_items(ids, r.tenant) == {}
    assert await store.delete(r.id, r.tenant) is False

    fresh = record(expires_at=int(time.time()) + 3600)
    await store.put(fresh)
    got = await store.get(fresh.id, fresh.tenant)
    assert got is not None and got.expires_at == fresh.expires_at


async def test_retention_applies_to_record_and_events(make_store: StoreFactory) -> None:
    store = make_store(retention_days=0)  # everything expires at once
    r = record(status="in_progress")
    await store.put(r)
    await store.append_events(r.id, events(0, 2))
    assert await store.get(r.id, r.tenant) is None
    assert await store.read_events(r.id) == []


@pytest.mark.slow
async def test_large_inputs_are_kept_whole(store: Store) -> None:
    inputs = [message(words(500_000, seed)) for seed in range(3)]  # 1.5 MB across 3 items
    inputs.append(message(words(600_000, 7)))  # one 600 KB item (compresses below 400 KB)
    r = record(inputs=inputs)
    store.check_input_items(inputs)
    await store.put(r)
    got = await store.get(r.id, r.tenant)
    assert got is not None
    assert got.input_items == inputs
    assert got.request == r.request  # the create body holds all 2.1 MB as well
    if isinstance(store, DynamoDBStore):  # ...in several part items
        parts = store.client.query(
            TableName=store.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": r.id}, ":p": {"S": "R#RQ#"}},
        )["Items"]
        assert len(parts) >= 2
    assert await store.get_items([inputs[3]["id"]], r.tenant) == {inputs[3]["id"]: inputs[3]}


async def test_incompressible_huge_input_item(store: Store) -> None:
    inputs = [message("small"), message(incompressible(600_000))]
    r = record(inputs=inputs)
    if isinstance(store, DynamoDBStore):
        with pytest.raises(GatewayError) as raised:
            store.check_input_items(inputs)
        assert raised.value.status == 400 and raised.value.param == "input[1]"
        with pytest.raises(GatewayError) as raised:
            await store.put(r)
        assert raised.value.status == 400
        assert "Input item 1" in raised.value.message
        assert raised.value.param == "input[1]"
        # Up front: not a single item of this response was written.
        page = store.client.query(
            TableName=store.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": r.id}},
        )
        assert page["Items"] == []
        assert await store.get_items([inputs[0]["id"]], r.tenant) == {}
    else:  # no item limit in SQLite: it is simply kept
        store.check_input_items(inputs)
        await store.put(r)
        got = await store.get(r.id, r.tenant)
        assert got is not None and got.input_items == inputs


def item_packing_to(target: int) -> dict[str, Any]:
    """An input item whose stored (compressed) size is the largest not above ``target``."""
    pool = incompressible(700_000)
    lo, hi = 1, len(pool)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _pack(message(pool[:mid], item_id="msg_edge"))[1] <= target:
            lo = mid
        else:
            hi = mid - 1
    return message(pool[:lo], item_id="msg_edge")


@pytest.mark.slow
async def test_dynamodb_input_item_size_boundary(aws: str) -> None:
    store = DynamoDBStore(create_dynamodb_table())
    fits = item_packing_to(INPUT_ITEM_LIMIT)
    r = record(inputs=[fits])
    r.request = {"model": "gpt-test"}
    await store.put(r)  # the largest allowed item really fits, with its keys and attributes
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.input_items == [fits]

    too_big = item_packing_to(INPUT_ITEM_LIMIT + 64)
    with pytest.raises(GatewayError) as raised:
        store.check_input_items([message("ok"), message("ok"), too_big])
    assert raised.value.status == 400 and raised.value.param == "input[2]"


async def test_dynamodb_torn_read_is_detected(aws: str) -> None:
    store = DynamoDBStore(create_dynamodb_table())
    r = record(status="in_progress")
    await store.put(r)
    big = {**r.response, "output": [output_message(incompressible(600_000))]}
    assert await store.update_response(r.id, big)
    parts = store.client.query(
        TableName=store.table_name,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": {"S": r.id}, ":p": {"S": "R#RS#"}},
    )["Items"]
    assert len(parts) == 2  # the response really was split
    # A part left by another write (different version) must never be stitched in.
    store.client.update_item(
        TableName=store.table_name,
        Key={"pk": parts[1]["pk"], "sk": parts[1]["sk"]},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"S": "other-write"}},
    )
    with pytest.raises(StoreUnavailable):
        await store.get(r.id, r.tenant)


async def test_large_response_and_event_batch(store: Store) -> None:
    r = record(status="in_progress")
    await store.put(r)
    big = output_message(incompressible(600_000))  # beyond one item even compressed
    big_response = {**r.response, "output": [big]}
    assert await store.update_response(r.id, big_response, expect_status={"in_progress"})
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.response == big_response

    done = {**big_response, "status": "completed"}
    assert await store.update_response(r.id, done, expect_status={"in_progress"})
    assert await store.get_items([big["id"]], r.tenant) == {big["id"]: big}

    batch = events(0, 3)
    batch.append({"type": "response.completed", "sequence_number": 3, "response": done})
    await store.append_events(r.id, batch)
    assert await store.read_events(r.id) == batch
    assert await store.read_events(r.id, after=2) == batch[3:]

    small = {**r.response, "status": "completed", "output": [output_message("short")]}
    assert await store.update_response(r.id, small)  # back to inline
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.response == small


@pytest.mark.slow
async def test_cancel_versus_complete_race(store: Store) -> None:
    for _ in range(15):
        r = record(status="in_progress", background=True)
        await store.put(r)
        cancelled = {**r.response, "status": "cancelled"}
        completed = {**r.response, "status": "completed", "output": [output_message("done")]}
        attempts = [("cancelled", cancelled, {"queued", "in_progress"})] * 8
        attempts += [("completed", completed, {"in_progress"})] * 8
        random.shuffle(attempts)
        results = await asyncio.gather(
            *(store.update_response(r.id, body, expect_status=exp) for _, body, exp in attempts)
        )
        winners = [status for (status, _, _), won in zip(attempts, results, strict=True) if won]
        assert len(winners) == 1, winners
        got = await store.get(r.id, r.tenant)
        assert got is not None and got.status == winners[0]


async def test_concurrent_appends_and_reads(store: Store) -> None:
    r = record(status="in_progress")
    await store.put(r)

    async def writer() -> None:
        for start in range(0, 100, 10):
            await store.append_events(r.id, events(start, 10))

    async def reader() -> list[int]:
        seen = []
        for _ in range(10):
            seen.append(len(await store.read_events(r.id)))
        return seen

    _, counts = await asyncio.gather(writer(), reader())
    assert counts == sorted(counts)  # the log only grows, whole batches at a time
    assert all(c % 10 == 0 for c in counts)
    assert [e["sequence_number"] for e in await store.read_events(r.id)] == list(range(100))


# -- SQLite only ---------------------------------------------------------------------------------


async def test_sqlite_two_processes_race_on_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    store = SQLiteStore(path)
    ids = []
    for _ in range(40):
        r = record(status="in_progress")
        await store.put(r)
        ids.append(r.id)
    script = textwrap.dedent(
        """
        import asyncio, sys
        from responses_gateway.store.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore(sys.argv[1])
            won = []
            for rid in sys.argv[2:]:
                if await store.update_response(
                    rid, {"id": rid, "status": "cancelled"}, expect_status={"in_progress"}
                ):
                    won.append(rid)
            print("\\n".join(won))
            await store.aclose()

        asyncio.run(main())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "handler")}
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, path, *ids, stdout=subprocess.PIPE, env=env
    )
    mine = []
    for rid in reversed(ids):
        body = {"id": rid, "status": "completed"}
        if await store.update_response(rid, body, expect_status={"in_progress"}):
            mine.append(rid)
    out, _ = await other.communicate()
    assert other.returncode == 0
    theirs = out.decode().split()
    assert sorted(mine + theirs) == sorted(ids)  # each id won exactly once
    for rid in ids:
        got = await store.get(rid, "tenant-a")
        assert got is not None
        assert got.status == ("completed" if rid in mine else "cancelled")
    await store.aclose()


async def test_sqlite_a_busy_file_is_waited_for_off_the_event_loop(tmp_path: Path) -> None:
    path = str(tmp_path / "busy.db")
    store = SQLiteStore(path)
    await store.put(record())
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process is writing the file
    r = record()
    put = asyncio.ensure_future(store.put(r))
    started = time.monotonic()
    for _ in range(20):
        await asyncio.sleep(0.01)  # the loop is not held up by the wait
    assert time.monotonic() - started < 1.0
    assert not put.done()
    other.execute("COMMIT")
    await asyncio.wait_for(put, 5)
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.response == r.response
    other.close()
    await store.aclose()


async def test_sqlite_a_file_busy_past_the_timeout_is_store_unavailable(tmp_path: Path) -> None:
    path = str(tmp_path / "busy.db")
    store = SQLiteStore(path, busy_timeout_ms=200)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as raised:
        await store.put(record())
    assert 0.15 < time.monotonic() - started < 3
    assert raised.value.status == 503 and "locked" in raised.value.detail  # the log's
    assert "locked" not in raised.value.message and str(path) not in raised.value.message
    other.execute("ROLLBACK")
    r = record()
    await store.put(r)  # free again: nothing was left half-done
    assert await store.get(r.id, r.tenant) is not None
    other.close()
    await store.aclose()


def test_sqlite_opening_waits_for_another_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    asyncio.run(SQLiteStore(path).aclose())  # the file and its schema exist
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process is writing the file
    threading.Timer(0.3, other.execute, ("COMMIT",)).start()
    started = time.monotonic()
    store = SQLiteStore(path)  # a second gateway process starting meanwhile
    assert time.monotonic() - started >= 0.2
    asyncio.run(store.aclose())
    other.close()


async def test_sqlite_calls_after_close_are_store_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "closed.db"))
    await store.aclose()
    with pytest.raises(StoreUnavailable):
        await store.get("resp_x", "tenant-a")
    with pytest.raises(StoreUnavailable):
        await store.put(record())


def test_sqlite_unusable_path_is_store_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        SQLiteStore(str(tmp_path / "missing-dir" / "gateway.db"))
    assert raised.value.status == 503


# -- DynamoDB only -------------------------------------------------------------------------------


def count_writes(store: DynamoDBStore) -> list[str]:
    calls: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        if model.name in WRITE_OPERATIONS:
            calls.append(model.name)

    store.client.meta.events.register("before-call.dynamodb.*", hook)
    return calls


async def test_dynamodb_one_write_per_event_batch(aws: str) -> None:
    store = DynamoDBStore(create_dynamodb_table())
    r = record(status="in_progress")
    await store.put(r)
    calls = count_writes(store)
    for start in range(0, 200, 20):
        await store.append_events(r.id, events(start, 20))
    assert calls == ["TransactWriteItems"] * 10
    done = {
        **r.response,
        "status": "completed",
        "output": [output_message(incompressible(500_000))],
    }
    calls.clear()
    await store.append_events(
        r.id, [{"type": "response.completed", "sequence_number": 200, "response": done}]
    )
    assert calls == ["TransactWriteItems"]  # a batch beyond one item: still one write
    assert len(await store.read_events(r.id)) == 201


async def test_dynamodb_endpoint_comes_from_service_variable(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = create_dynamodb_table()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    store = DynamoDBStore(table)  # client made lazily, no endpoint passed
    r = record()
    await store.put(r)
    assert store.client.meta.endpoint_url == aws
    assert await store.get(r.id, r.tenant) is not None


async def test_dynamodb_table_definition_and_ttl(aws: str) -> None:
    table = create_dynamodb_table()
    client = make_client()
    described = client.describe_table(TableName=table)["Table"]
    definition = table_definition(table)
    assert described["KeySchema"] == definition["KeySchema"]
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
    from responses_gateway.store.dynamodb import create_table

    assert create_table(table) is False  # idempotent


async def test_dynamodb_missing_table_is_store_unavailable(aws: str) -> None:
    store = DynamoDBStore("no-such-table", max_attempts=1)
    with pytest.raises(StoreUnavailable) as raised:
        await store.get(new_id(), "tenant-a")
    assert raised.value.status == 503
    assert "ResourceNotFoundException" in raised.value.detail  # for the log only
    assert "ResourceNotFoundException" not in raised.value.message


class _ConflictingClient:
    """Answers TransactWriteItems with a transaction conflict `fails` times, then succeeds."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls = 0

    def transact_write_items(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.fails:
            error = {
                "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                "CancellationReasons": [{"Code": "TransactionConflict"}, {"Code": "None"}],
            }
            raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]
        return {}


async def test_dynamodb_transaction_conflicts_are_retried() -> None:
    client = _ConflictingClient(fails=2)
    store = DynamoDBStore("t", client=client)
    await store.append_events(new_id(), events(0, 2))
    assert client.calls == 3

    client = _ConflictingClient(fails=100)
    store = DynamoDBStore("t", client=client)
    with pytest.raises(StoreUnavailable):
        await store.append_events(new_id(), events(0, 2))


# -- conversations -----------------------------------------------------------------------------

from responses_gateway.store.base import (  # noqa: E402
    ConversationLocked,
    ConversationStore,
    DuplicateItem,
    StoredConversation,
)


def conversation(tenant: str = "tenant-a", **kwargs: Any) -> StoredConversation:
    return StoredConversation(
        id=new_id("conv_"), tenant=tenant, created_at=int(time.time()), **kwargs
    )


def ids_of(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items]


async def test_conversation_round_trip_and_tenant_isolation(store: Any) -> None:
    assert isinstance(store, ConversationStore)
    first = [message(f"m{i}") for i in range(3)]
    conv = conversation(metadata={"topic": "demo"})
    await store.create_conversation(conv, first)
    got = await store.get_conversation(conv.id, "tenant-a")
    assert got is not None and got.to_object() == conv.to_object() and got.length == 3
    assert await store.get_conversation(conv.id, "tenant-b") is None
    assert await store.conversation_items(conv.id, "tenant-b") is None
    assert await store.update_conversation(conv.id, "tenant-b", {"x": "y"}) is None
    assert await store.delete_conversation(conv.id, "tenant-b") is False
    assert await store.get_conversation_item(conv.id, "tenant-b", first[0]["id"]) is None
    assert await store.delete_conversation_item(conv.id, "tenant-b", first[0]["id"]) is None
    assert await store.list_conversation_items(conv.id, "tenant-b", limit=5, order="asc") is None
    updated = await store.update_conversation(conv.id, "tenant-a", {"topic": "new"})
    assert updated is not None and updated.metadata == {"topic": "new"}
    conv_now, items = await store.conversation_items(conv.id, "tenant-a")
    assert ids_of(items) == ids_of(first) and conv_now.metadata == {"topic": "new"}
    assert await store.delete_conversation(conv.id, "tenant-a") is True
    assert await store.get_conversation(conv.id, "tenant-a") is None
    assert await store.delete_conversation(conv.id, "tenant-a") is False


@pytest.mark.slow
async def test_conversation_append_list_get_delete_items(store: Any) -> None:
    conv = conversation()
    await store.create_conversation(conv, [])
    added = [message(f"m{i}") for i in range(7)]
    after = await store.append_conversation_items(conv.id, "tenant-a", added[:4])
    assert after is not None and after.length == 4
    await store.append_conversation_items(conv.id, "tenant-a", added[4:])
    page, more = await store.list_conversation_items(conv.id, "tenant-a", limit=3, order="asc")
    assert ids_of(page) == ids_of(added[:3]) and more
    page, more = await store.list_conversation_items(
        conv.id, "tenant-a", limit=3, order="asc", after=added[2]["id"]
    )
    assert ids_of(page) == ids_of(added[3:6]) and more
    page, more = await store.list_conversation_items(
        conv.id, "tenant-a", limit=10, order="desc", after=added[2]["id"]
    )
    assert ids_of(page) == [added[1]["id"], added[0]["id"]] and not more
    page, more = await store.list_conversation_items(conv.id, "tenant-a", limit=7, order="desc")
    assert ids_of(page) == ids_of(added[::-1]) and not more
    with pytest.raises(KeyError):
        await store.list_conversation_items(conv.id, "tenant-a", limit=3, order="asc", after="x")
    got, item = await store.get_conversation_item(conv.id, "tenant-a", added[5]["id"])
    assert item == added[5] and got.id == conv.id
    _, deleted = await store.delete_conversation_item(conv.id, "tenant-a", added[5]["id"])
    assert deleted
    _, again = await store.delete_conversation_item(conv.id, "tenant-a", added[5]["id"])
    assert not again
    assert (await store.get_conversation_item(conv.id, "tenant-a", added[5]["id"]))[1] is None
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert ids_of(items) == ids_of(added[:5] + added[6:])
    # An id the conversation holds is refused; a deleted one may come back.
    with pytest.raises(DuplicateItem) as err:
        await store.append_conversation_items(conv.id, "tenant-a", [added[0]])
    assert err.value.param == "items" and added[0]["id"] in err.value.message
    await store.append_conversation_items(conv.id, "tenant-a", [added[5]])
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert ids_of(items)[-1] == added[5]["id"]


@pytest.mark.slow
async def test_conversation_turn_lock(store: Any) -> None:
    conv = conversation()
    await store.create_conversation(conv, [message("hi")])
    until = time.time() + 60
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=1, until=until)
    # A second turn, or an item write, while the first runs: locked.
    assert not await store.lock_conversation(conv.id, "tenant-a", "t2", length=1, until=until)
    assert (await store.conversation_items(conv.id, "tenant-a"))[0].locked
    with pytest.raises(ConversationLocked):
        await store.append_conversation_items(conv.id, "tenant-a", [message("x")])
    assert await store.lock_conversation(conv.id, "tenant-b", "t2", length=1, until=until) is None
    turn = [message("q"), output_message("a")]
    done = await store.append_conversation_items(
        conv.id, "tenant-a", turn, token="t1", length=1
    )
    assert done is not None and done.length == 3 and not done.locked
    # A history read before that append is stale: its length no longer matches.
    assert not await store.lock_conversation(conv.id, "tenant-a", "t3", length=1, until=until)
    assert await store.lock_conversation(conv.id, "tenant-a", "t3", length=3, until=until)
    await store.release_conversation(conv.id, "someone-else")  # not the holder: no effect
    assert (await store.get_conversation(conv.id, "tenant-a")).locked
    await store.release_conversation(conv.id, "t3")
    assert not (await store.get_conversation(conv.id, "tenant-a")).locked
    # A lock past its time is free again (a crashed holder).
    assert await store.lock_conversation(
        conv.id, "tenant-a", "t4", length=3, until=time.time() - 1
    )
    assert await store.lock_conversation(conv.id, "tenant-a", "t5", length=3, until=until)
    # The expired holder's append finds the lock taken over: nothing is written.
    with pytest.raises(StoreUnavailable):
        await store.append_conversation_items(
            conv.id, "tenant-a", [message("late")], token="t4", length=3
        )
    assert (await store.get_conversation(conv.id, "tenant-a")).length == 3


@pytest.mark.slow
async def test_concurrent_conversation_appends_lose_nothing(store: Any) -> None:
    conv = conversation()
    await store.create_conversation(conv, [])
    batches = [[message(f"b{b}-{i}") for i in range(3)] for b in range(8)]

    async def add(batch: list[dict[str, Any]]) -> None:
        for _ in range(100):
            try:
                await store.append_conversation_items(conv.id, "tenant-a", batch)
                return
            except ConversationLocked:
                await asyncio.sleep(0.01)
        raise AssertionError("never appended")

    await asyncio.gather(*(add(batch) for batch in batches))
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert len(items) == 24
    # Each batch landed whole and in order: no interleaving.
    for batch in batches:
        start = ids_of(items).index(batch[0]["id"])
        assert ids_of(items[start : start + 3]) == ids_of(batch)


@pytest.mark.slow
async def test_long_conversation_spans_many_store_items(store: Any) -> None:
    """Far more than one DynamoDB item (400 KB) holds: every item is its own row."""
    conv = conversation()
    await store.create_conversation(conv, [])
    big = words(150_000, seed=7)
    for turn in range(6):
        await store.append_conversation_items(
            conv.id, "tenant-a", [message(f"{turn} {big}"), output_message(f"{turn} {big}")]
        )
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert len(items) == 12 and items[-1]["content"][0]["text"].startswith("5 ")
    assert sum(len(i["content"][0]["text"]) for i in items) > 1_500_000


# -- a turn's settle: the record with the append (or the release), one write -----------------


def count_database_writes(store: Any) -> list[str]:
    """What reaches the database as writes: DynamoDB write requests, SQLite write
    transactions (``BEGIN IMMEDIATE`` on the store's connection)."""
    if isinstance(store, DynamoDBStore):
        return count_writes(store)
    calls: list[str] = []

    def statement(sql: str) -> None:
        if sql.startswith("BEGIN IMMEDIATE"):
            calls.append(sql)

    store._file.conn.set_trace_callback(statement)
    return calls


def response_rows(store: Any, response_id: str) -> int:
    """Rows of any kind a response left behind, visible or not."""
    if isinstance(store, DynamoDBStore):
        return store.client.query(
            TableName=store.table_name, KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": response_id}}, Select="COUNT",
        )["Count"]
    conn = sqlite3.connect(store.path)
    try:
        return sum(
            conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", (response_id,))
            .fetchone()[0]
            for table, column in (("responses", "id"), ("items", "response_id"))
        )
    finally:
        conn.close()


async def test_a_turn_settles_with_its_record_in_one_write(store: Any) -> None:
    conv = conversation()
    await store.create_conversation(conv, [message("hi")])
    question, answer = message("q"), output_message("a")
    r = record(inputs=[question], output=[answer])
    assert await store.lock_conversation(
        conv.id, "tenant-a", "t1", length=1, until=time.time() + 60
    )
    writes = count_database_writes(store)
    done = await store.append_conversation_items(
        conv.id, "tenant-a", [question, answer], token="t1", length=1, record=r
    )
    assert len(writes) == 1, writes  # SQLite: one transaction; DynamoDB: one request
    if isinstance(store, DynamoDBStore):
        assert writes == ["TransactWriteItems"]
    assert done is not None and done.length == 3 and not done.locked
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.response == r.response and got.input_items == [question]
    assert await store.get_items([question["id"], answer["id"]], r.tenant) == {
        question["id"]: question, answer["id"]: answer
    }
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert [i["content"][0]["text"] for i in items] == ["hi", "q", "a"]
    # A failed turn appends nothing: its record goes with the lock's release, one write too.
    assert await store.lock_conversation(
        conv.id, "tenant-a", "t2", length=3, until=time.time() + 60
    )
    failed = record(status="failed", inputs=[message("again")])
    writes.clear()
    await store.release_conversation(conv.id, "t2", record=failed)
    assert len(writes) == 1, writes
    assert (await store.get(failed.id, failed.tenant)).status == "failed"
    assert not (await store.get_conversation(conv.id, "tenant-a")).locked
    # The lock no longer this turn's (released, or taken by another): the record still lands.
    late = record(status="cancelled")
    await store.release_conversation(conv.id, "t2", record=late)
    assert (await store.get(late.id, late.tenant)).status == "cancelled"
    assert (await store.get_conversation(conv.id, "tenant-a")).length == 3


async def test_a_turn_that_lost_its_conversation_settles_no_half(store: Any) -> None:
    conv = conversation()
    await store.create_conversation(conv, [])
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=0,
                                         until=time.time() - 1)  # lapsed at once
    assert await store.lock_conversation(conv.id, "tenant-a", "t2", length=0,
                                         until=time.time() + 60)
    turn = [message("q"), output_message("a")]
    r = record(inputs=turn[:1], output=turn[1:])
    with pytest.raises(StoreUnavailable):  # taken over: the response ends failed
        await store.append_conversation_items(
            conv.id, "tenant-a", turn, token="t1", length=0, record=r
        )
    assert await store.get(r.id, r.tenant) is None  # no record says "completed"
    held = await store.get_conversation(conv.id, "tenant-a")
    assert held.length == 0 and held.locked and held.holder == "t2"
    # The conversation deleted while the turn ran: nothing to append to, the response stands.
    assert await store.delete_conversation(conv.id, "tenant-a")
    r2 = record(inputs=turn[:1], output=turn[1:])
    assert await store.append_conversation_items(
        conv.id, "tenant-a", turn, token="t2", length=0, record=r2
    ) is None
    assert (await store.get(r2.id, r2.tenant)).input_items == turn[:1]


async def test_a_failed_settle_writes_nothing(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = conversation()
    await store.create_conversation(conv, [message("hi")])
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=1,
                                         until=time.time() + 60)
    turn = [message("q"), output_message("a")]
    r = record(inputs=turn[:1], output=turn[1:])
    fail_next_settle(store, monkeypatch)
    with pytest.raises(StoreUnavailable):
        await store.append_conversation_items(
            conv.id, "tenant-a", turn, token="t1", length=1, record=r
        )
    assert response_rows(store, r.id) == 0  # not even rows no reader would see
    assert await store.get_items([turn[0]["id"], turn[1]["id"]], r.tenant) == {}
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert found.length == 1 and ids_of(items) == ids_of(items[:1])
    assert found.holder == "t1"  # still this turn's: Turn.finish lets it go
    await store.release_conversation(conv.id, "t1")
    assert await store.lock_conversation(conv.id, "tenant-a", "t2", length=1,
                                         until=time.time() + 60)
    done = await store.append_conversation_items(
        conv.id, "tenant-a", turn, token="t2", length=1, record=r
    )
    assert done is not None and done.length == 3
    assert (await store.get(r.id, r.tenant)).input_items == turn[:1]


def _big_turn(n_inputs: int, text: str) -> tuple[list[dict[str, Any]], StoredResponse]:
    inputs = [message(f"{i} {text}") for i in range(n_inputs)]
    answer = output_message(f"answer {text}")
    return [*inputs, answer], record(inputs=inputs, output=[answer])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n_inputs", "size", "held"),
    [
        (30, 0, False),  # 125 actions: the record's rows first, then the commit
        (60, 0, True),  # 122 item rows alone: they go first too, under the renewed lock
        (9, 300_000, False),  # ~4 MB: the record's rows first
        (16, 300_000, True),  # the item rows alone over 3.5 MB
    ],
)
async def test_dynamodb_a_settle_beyond_one_transaction(
    aws: str, n_inputs: int, size: int, held: bool
) -> None:
    """Over 100 actions or 4 MB: what can wait is written first, invisible; the commit (the
    conversation's Update with the record) is still one transaction."""
    store = DynamoDBStore(create_dynamodb_table())
    conv = conversation()
    await store.create_conversation(conv, [])
    turn, r = _big_turn(n_inputs, incompressible(size) if size else "x")
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=0,
                                         until=time.time() + 60)
    writes = count_writes(store)
    done = await store.append_conversation_items(
        conv.id, "tenant-a", turn, token="t1", length=0, record=r
    )
    assert done is not None and done.length == len(turn) and not done.locked
    assert writes[-1] == "TransactWriteItems" and writes.count("TransactWriteItems") == 1
    assert set(writes[:-1]) <= {"UpdateItem", "BatchWriteItem"} and "BatchWriteItem" in writes
    assert (writes[0] == "UpdateItem") is held  # the lock renewed before the item rows
    got = await store.get(r.id, r.tenant)
    assert got is not None and got.input_items == turn[:-1] and got.response == r.response
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert items == turn
    assert not (await store.get_conversation(conv.id, "tenant-a")).locked


@pytest.mark.slow
async def test_dynamodb_a_settle_beyond_one_transaction_failing_loses_nothing(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit fails after the early rows landed: none of them shows, and the next turn
    (at the same positions) lands whole over them."""
    store = DynamoDBStore(create_dynamodb_table())
    conv = conversation()
    await store.create_conversation(conv, [message("hi")])
    turn, r = _big_turn(60, "x")
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=1,
                                         until=time.time() + 60)
    fail_next_settle(store, monkeypatch)
    with pytest.raises(StoreUnavailable):
        await store.append_conversation_items(
            conv.id, "tenant-a", turn, token="t1", length=1, record=r
        )
    assert await store.get(r.id, r.tenant) is None
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert found.length == 1 and len(items) == 1
    page, more = await store.list_conversation_items(conv.id, "tenant-a", limit=100,
                                                     order="asc")
    assert len(page) == 1 and not more
    await store.release_conversation(conv.id, "t1")
    again, r2 = _big_turn(3, "y")
    assert await store.lock_conversation(conv.id, "tenant-a", "t2", length=1,
                                         until=time.time() + 60)
    assert await store.append_conversation_items(
        conv.id, "tenant-a", again, token="t2", length=1, record=r2
    )
    _, items = await store.conversation_items(conv.id, "tenant-a")
    assert items[1:] == again
    page, _ = await store.list_conversation_items(conv.id, "tenant-a", limit=100, order="asc")
    assert page == items


async def test_dynamodb_a_settle_whose_lock_was_taken_writes_no_item_row(aws: str) -> None:
    """Too large for one transaction, the item rows go first: only once the lock is renewed,
    so a turn that lost its conversation never writes over another turn's positions."""
    store = DynamoDBStore(create_dynamodb_table())
    conv = conversation()
    await store.create_conversation(conv, [])
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=0,
                                         until=time.time() - 1)
    assert await store.lock_conversation(conv.id, "tenant-a", "t2", length=0,
                                         until=time.time() + 60)
    turn, r = _big_turn(60, "x")
    with pytest.raises(StoreUnavailable):
        await store.append_conversation_items(
            conv.id, "tenant-a", turn, token="t1", length=0, record=r
        )
    rows = store.client.query(
        TableName=store.table_name, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": conv.id}},
    )["Items"]
    assert [row["sk"]["S"] for row in rows] == ["C"]
    assert await store.get(r.id, r.tenant) is None


# -- a background turn settles with the worker's terminal write -------------------------------


async def _running_turn(store: Any) -> tuple[StoredConversation, StoredResponse, list[Any]]:
    """A conversation holding "hi", a running background response holding its lock ``t1``,
    and the turn's items (the response's input, then its output)."""
    conv = conversation()
    await store.create_conversation(conv, [message("hi")])
    turn = [message("q"), output_message("a")]
    r = record(status="in_progress", inputs=turn[:1], background=True)
    await store.put(r)
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=1,
                                         until=time.time() + 60)
    return conv, r, turn


def _terminal(r: StoredResponse, turn: list[Any], status: str = "completed") -> Any:
    done = dict(r.response, status=status, output=turn[1:])
    return [{"type": f"response.{status}", "sequence_number": 0, "response": done}], done


@pytest.mark.slow
async def test_a_background_turn_settles_in_the_terminal_write(store: Any) -> None:
    conv, r, turn = await _running_turn(store)
    terminal, done = _terminal(r, turn)
    writes = count_database_writes(store)
    await store.append_events(r.id, terminal, response=done, lease_until=0.0,
                              turn=TurnSettle(conv.id, "tenant-a", "t1", 1, turn))
    # One write, the output items' pointers (item_reference) in it: whoever sees the response
    # completed can resolve its outputs (on DynamoDB they used to follow in a BatchWriteItem).
    if isinstance(store, DynamoDBStore):
        assert writes == ["TransactWriteItems"], writes
    else:
        assert len(writes) == 1, writes
    assert (await store.get(r.id, r.tenant)).status == "completed"
    assert await store.read_events(r.id) == terminal
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert items[1:] == turn and found.length == 3 and not found.locked
    # A failed turn appends nothing: its terminal write releases the lock.
    r2 = record(status="in_progress", inputs=[message("again")], background=True)
    await store.put(r2)
    assert await store.lock_conversation(conv.id, "tenant-a", "t2", length=3,
                                         until=time.time() + 60)
    terminal, failed = _terminal(r2, [], "failed")
    await store.append_events(r2.id, terminal, response=failed, lease_until=0.0,
                              turn=TurnSettle(conv.id, "tenant-a", "t2", 3))
    assert (await store.get(r2.id, r2.tenant)).status == "failed"
    found = await store.get_conversation(conv.id, "tenant-a")
    assert found.length == 3 and not found.locked
    # ... and lands whether or not the lock is still its own.
    r3 = record(status="in_progress", background=True)
    await store.put(r3)
    terminal, failed = _terminal(r3, [], "failed")
    await store.append_events(r3.id, terminal, response=failed, lease_until=0.0,
                              turn=TurnSettle(conv.id, "tenant-a", "t2", 3))
    assert (await store.get(r3.id, r3.tenant)).status == "failed"


@pytest.mark.slow
async def test_a_background_terminal_write_whose_append_fails_writes_nothing(
    store: Any,
) -> None:
    """The append fails inside the one write: the record stays running (the worker then ends
    it failed), no terminal event is logged, the conversation is unchanged and still held."""
    conv, r, turn = await _running_turn(store)
    terminal, done = _terminal(r, turn)
    with fail_next_append(store) as failed, pytest.raises(StoreUnavailable):
        await store.append_events(r.id, terminal, response=done, lease_until=0.0,
                                  turn=TurnSettle(conv.id, "tenant-a", "t1", 1, turn))
    assert failed()
    assert (await store.get(r.id, r.tenant)).status == "in_progress"
    assert await store.read_events(r.id) == []
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert found.length == 1 and len(items) == 1 and found.holder == "t1"


@pytest.mark.slow
async def test_a_background_terminal_write_after_a_cancel_or_a_takeover(store: Any) -> None:
    """A cancel wins: nothing lands, the turn's items included. A lock taken over: nothing
    lands (the response ends failed). A conversation deleted: the response stands alone."""
    conv, r, turn = await _running_turn(store)
    terminal, done = _terminal(r, turn)
    settle = TurnSettle(conv.id, "tenant-a", "t1", 1, turn)
    assert await store.update_response(r.id, dict(r.response, status="cancelled"),
                                       expect_status={"in_progress"})
    with pytest.raises(CancelledError):
        await store.append_events(r.id, terminal, response=done, lease_until=0.0, turn=settle)
    found = await store.get_conversation(conv.id, "tenant-a")
    assert found.length == 1 and found.holder == "t1"
    await store.release_conversation(conv.id, "t1")
    # taken over
    r2 = record(status="in_progress", inputs=turn[:1], background=True)
    await store.put(r2)
    assert await store.lock_conversation(conv.id, "tenant-a", "t2", length=1,
                                         until=time.time() + 60)
    with pytest.raises(StoreUnavailable):
        await store.append_events(r2.id, terminal, response=dict(done, id=r2.id),
                                  lease_until=0.0, turn=settle)
    assert (await store.get(r2.id, r2.tenant)).status == "in_progress"
    assert await store.read_events(r2.id) == []
    found = await store.get_conversation(conv.id, "tenant-a")
    assert found.length == 1 and found.holder == "t2"
    # deleted
    assert await store.delete_conversation(conv.id, "tenant-a")
    await store.append_events(r2.id, terminal, response=dict(done, id=r2.id), lease_until=0.0,
                              turn=TurnSettle(conv.id, "tenant-a", "t2", 1, turn))
    assert (await store.get(r2.id, r2.tenant)).status == "completed"
    assert await store.read_events(r2.id) == terminal


@pytest.mark.slow
async def test_dynamodb_a_background_settle_beyond_one_transaction(aws: str) -> None:
    """122 item rows: they go first (under the renewed lock), the terminal record, events
    and the conversation's Update still in one transaction."""
    store = DynamoDBStore(create_dynamodb_table())
    conv = conversation()
    await store.create_conversation(conv, [])
    turn, r = _big_turn(60, "x")
    r.response["status"], r.background = "in_progress", True
    await store.put(r)
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=0,
                                         until=time.time() + 60)
    terminal, done = _terminal(r, turn)
    writes = count_writes(store)
    await store.append_events(r.id, terminal, response=done, lease_until=0.0,
                              turn=TurnSettle(conv.id, "tenant-a", "t1", 0, turn))
    assert writes[0] == "UpdateItem" and writes.count("TransactWriteItems") == 1
    assert (await store.get(r.id, r.tenant)).status == "completed"
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert items == turn and not found.locked

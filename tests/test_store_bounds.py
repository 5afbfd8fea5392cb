"""The store's bounds (issue 27.3), on SQLite and DynamoDB (moto server): items and bytes per
conversation, kept as running counts on the conversation's record and checked before any write;
the size of one stored response; and, on DynamoDB, a terminal Response's output-item pointers
landing with it (issue 27.10)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from responses_gateway.errors import GatewayError
from responses_gateway.store.base import (
    ConversationFull,
    ResponseTooLarge,
    Store,
    StoreLimits,
    StoreUnavailable,
    TurnSettle,
    item_bytes,
)
from responses_gateway.store.dynamodb import DynamoDBStore
from responses_gateway.store.sqlite import SQLiteStore
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.test_store import conversation, message, output_message, record

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    use_moto(monkeypatch, moto_endpoint)
    return moto_endpoint


StoreFactory = Callable[..., Any]


@pytest.fixture(params=["sqlite", "dynamodb"])
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    created: list[Store] = []
    if request.param == "sqlite":
        path = str(tmp_path / "gateway.db")

        def factory(**kwargs: Any) -> Any:
            created.append(SQLiteStore(path, **kwargs))
            return created[-1]
    else:
        request.getfixturevalue("aws")
        table = create_dynamodb_table()

        def factory(**kwargs: Any) -> Any:
            created.append(DynamoDBStore(table, **kwargs))
            return created[-1]

    yield factory
    for store in created:
        await store.aclose()


def full(exc: pytest.ExceptionInfo[GatewayError]) -> GatewayError:
    err = exc.value
    assert isinstance(err, ConversationFull)
    assert (err.status, err.type, err.code) == (400, "invalid_request_error",
                                                "conversation_too_large")
    return err


async def test_item_writes_stop_at_the_item_bound(make_store: StoreFactory) -> None:
    store = make_store(limits=StoreLimits(conversation_items=5))
    conv = conversation()
    with pytest.raises(GatewayError) as exc:  # a create over the bound writes nothing
        await store.create_conversation(conv, [message(f"m{i}") for i in range(6)])
    assert full(exc).param == "items"
    assert await store.get_conversation(conv.id, "tenant-a") is None
    await store.create_conversation(conv, [message(f"m{i}") for i in range(3)])
    assert await store.append_conversation_items(conv.id, "tenant-a", [message("a"),
                                                                        message("b")])
    with pytest.raises(GatewayError) as exc:
        await store.append_conversation_items(conv.id, "tenant-a", [message("c")])
    err = full(exc)
    assert err.param == "items" and "GATEWAY_MAX_CONVERSATION_ITEMS" in err.message
    assert "limit of 5 items" in err.message
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert len(items) == 5 and found.item_count == 5 and found.length == 5
    # Deleting an item gives its room back (once, however often it is deleted).
    assert (await store.delete_conversation_item(conv.id, "tenant-a", items[0]["id"]))[1]
    assert not (await store.delete_conversation_item(conv.id, "tenant-a", items[0]["id"]))[1]
    assert (await store.get_conversation(conv.id, "tenant-a")).item_count == 4
    assert await store.append_conversation_items(conv.id, "tenant-a", [message("c")])
    with pytest.raises(GatewayError):
        await store.append_conversation_items(conv.id, "tenant-a", [message("d")])


@pytest.mark.slow
async def test_item_writes_stop_at_the_byte_bound(make_store: StoreFactory) -> None:
    big = [message("x" * 10_000) for _ in range(3)]
    sizes = [item_bytes(item) for item in big]
    store = make_store(limits=StoreLimits(conversation_bytes=sum(sizes[:2]) + 100))
    conv = conversation()
    with pytest.raises(GatewayError) as exc:
        await store.create_conversation(conv, big)
    assert "GATEWAY_MAX_CONVERSATION_BYTES" in full(exc).message
    await store.create_conversation(conv, big[:1])
    assert conv.byte_count == sizes[0]
    held = await store.append_conversation_items(conv.id, "tenant-a", big[1:2])
    assert held.byte_count == sum(sizes[:2])
    with pytest.raises(GatewayError):
        await store.append_conversation_items(conv.id, "tenant-a", big[2:])
    found, items = await store.conversation_items(conv.id, "tenant-a")
    assert items == big[:2] and found.byte_count == sum(sizes[:2])
    # Bounds read the running counts, not the items: a fresh store sees the same.
    again = make_store(limits=StoreLimits(conversation_bytes=sum(sizes[:2]) + 100))
    with pytest.raises(GatewayError):
        await again.append_conversation_items(conv.id, "tenant-a", [message("y" * 200)])


async def test_a_turns_settle_is_admitted_and_counted(make_store: StoreFactory) -> None:
    """A turn's input was checked when it began; its append (input and output) lands whole,
    even past the bound, and counts, so the next write is refused."""
    store = make_store(limits=StoreLimits(conversation_items=3))
    conv = conversation()
    await store.create_conversation(conv, [message("hi")])
    # A foreground turn's settle (append with the lock's token).
    assert await store.lock_conversation(conv.id, "tenant-a", "t1", length=1,
                                         until=time.time() + 60)
    turn = [message("q"), output_message("a"), output_message("b")]
    r = record(inputs=turn[:1], output=turn[1:])
    assert await store.append_conversation_items(conv.id, "tenant-a", turn, token="t1",
                                                 length=1, param="input", record=r)
    assert (await store.get_conversation(conv.id, "tenant-a")).item_count == 4
    with pytest.raises(GatewayError):
        await store.append_conversation_items(conv.id, "tenant-a", [message("more")])
    # A background turn's settle, in the worker's terminal write.
    conv2 = conversation()
    first = message("hi")
    await store.create_conversation(conv2, [first])
    r2 = record(status="in_progress", inputs=turn[:1], background=True)
    await store.put(r2)
    assert await store.lock_conversation(conv2.id, "tenant-a", "t2", length=1,
                                         until=time.time() + 60)
    done = dict(r2.response, status="completed", output=turn[1:])
    await store.append_events(
        r2.id, [{"type": "response.completed", "sequence_number": 0, "response": done}],
        response=done, lease_until=0.0, turn=TurnSettle(conv2.id, "tenant-a", "t2", 1, turn),
    )
    found = await store.get_conversation(conv2.id, "tenant-a")
    assert found.item_count == 4
    assert found.byte_count == sum(map(item_bytes, [first, *turn]))


async def test_a_stored_response_has_a_bound(make_store: StoreFactory) -> None:
    store = make_store(limits=StoreLimits(response_bytes=20_000))
    with pytest.raises(GatewayError) as exc:  # the input, before any work
        store.check_input_items([message("x" * 8_000) for _ in range(3)])
    err = exc.value
    assert (err.status, err.param, err.code) == (400, "input", "input_too_large")
    assert "GATEWAY_MAX_STORED_RESPONSE_BYTES" in err.message
    store.check_input_items([message("x" * 8_000)])
    # The Response object, whenever it is written: nothing lands.
    huge = [output_message("y" * 30_000)]
    r = record(output=huge)
    with pytest.raises(ResponseTooLarge) as too_large:
        await store.put(r)
    assert isinstance(too_large.value, StoreUnavailable)  # ends the response failed
    assert (too_large.value.status, too_large.value.code) == (400, "response_too_large")
    assert await store.get(r.id, r.tenant) is None
    r = record(status="in_progress", background=True)
    await store.put(r)
    grown = dict(r.response, status="completed", output=huge)
    with pytest.raises(ResponseTooLarge):
        await store.update_response(r.id, grown, expect_status={"in_progress"})
    with pytest.raises(ResponseTooLarge):
        await store.append_events(r.id, [{"type": "response.completed", "sequence_number": 0,
                                          "response": grown}], response=grown)
    stored = await store.get(r.id, r.tenant)
    assert stored.status == "in_progress" and await store.read_events(r.id) == []


async def test_an_existing_sqlite_file_counts_its_conversations(tmp_path: Path) -> None:
    """A file from before the counts: opening it adds them, counted from the items."""
    path = str(tmp_path / "old.db")
    store = SQLiteStore(path)
    conv = conversation()
    items = [message("a"), message("bb"), message("ccc")]
    await store.create_conversation(conv, items)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE conversations DROP COLUMN item_count")
        db.execute("ALTER TABLE conversations DROP COLUMN byte_count")
    store = SQLiteStore(path)
    try:
        found = await store.get_conversation(conv.id, "tenant-a")
        assert (found.item_count, found.byte_count) == (3, sum(map(item_bytes, items)))
    finally:
        await store.aclose()


# -- DynamoDB: a terminal Response's output-item pointers land with it -------------------------


class _FailingBatches:
    """A client whose BatchWriteItem calls fail (DynamoDB unreachable for them)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def batch_write_item(self, **_: Any) -> dict[str, Any]:
        error = {"Error": {"Code": "InternalServerError", "Message": "injected"}}
        raise ClientError(error, "BatchWriteItem")  # type: ignore[arg-type]


class _FailingTransactions(_FailingBatches):
    def batch_write_item(self, **kwargs: Any) -> dict[str, Any]:
        return self._client.batch_write_item(**kwargs)

    def transact_write_items(self, **_: Any) -> dict[str, Any]:
        error = {"Error": {"Code": "InternalServerError", "Message": "injected"}}
        raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]


@pytest.mark.slow
async def test_a_terminal_write_carries_its_output_pointers(aws: str) -> None:
    """Nothing written after the terminal write is needed to resolve its output items: with
    every later batch write failing, the terminal write still succeeds and a reader who sees
    the response ended resolves its outputs by reference (before, the pointers followed in a
    BatchWriteItem of their own, and a failure there left them unresolvable)."""
    store = DynamoDBStore(create_dynamodb_table())
    for via_events in (True, False):
        r = record(status="in_progress", background=True)
        await store.put(r)
        output = [output_message("answer"), output_message("more")]
        done = dict(r.response, status="completed", output=output)
        store._client = _FailingBatches(store.client)
        try:
            if via_events:
                await store.append_events(r.id, [{"type": "response.completed",
                                                  "sequence_number": 0, "response": done}],
                                          response=done, lease_until=0.0)
            else:
                assert await store.update_response(r.id, done, expect_status={"in_progress"})
        finally:
            store._client = store._client._client
        found = await store.get_items([i["id"] for i in output], r.tenant)
        assert found == {i["id"]: i for i in output}


@pytest.mark.slow
async def test_pointers_too_many_for_the_transaction_stay_unseen_until_it_lands(
    aws: str,
) -> None:
    """120 output items: their pointers go before the terminal transaction. If it fails, the
    response is still running and none of its outputs resolves; once it lands, all do."""
    store = DynamoDBStore(create_dynamodb_table())
    r = record(status="in_progress", background=True)
    await store.put(r)
    output = [output_message(f"part {i}") for i in range(120)]
    done = dict(r.response, status="completed", output=output)
    # A running snapshot holding the same output: not resolvable while running either.
    await store.append_events(r.id, [{"type": "response.in_progress", "sequence_number": 0,
                                      "response": r.response}],
                              response=dict(done, status="in_progress"), lease_until=0.0)
    terminal = [{"type": "response.completed", "sequence_number": 1, "response": done}]
    store._client = _FailingTransactions(store.client)
    try:
        with pytest.raises(StoreUnavailable):
            await store.append_events(r.id, terminal, response=done, lease_until=0.0)
    finally:
        store._client = store._client._client
    assert (await store.get(r.id, r.tenant)).status == "in_progress"
    assert await store.get_items([output[0]["id"], output[-1]["id"]], r.tenant) == {}
    await store.append_events(r.id, terminal, response=done, lease_until=0.0)
    found = await store.get_items([i["id"] for i in output], r.tenant)
    assert len(found) == 120 and found[output[7]["id"]] == output[7]

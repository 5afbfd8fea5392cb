"""What a server tool's call gave the model, kept in the store (``put_tool_reads`` /
``get_tool_reads``) on SQLite and DynamoDB (moto): by tenant and call id, deleted and expiring
with its response, a read past one DynamoDB item (400 KB) split into parts."""

from __future__ import annotations

import os
import random
import string
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.store.base import Store, StoredResponse
from responses_gateway.store.dynamodb import DynamoDBStore
from responses_gateway.store.sqlite import SQLiteStore
from tests.helpers.moto_server import create_dynamodb_table, use_moto

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "dynamodb"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path
                     ) -> AsyncIterator[Callable[..., Store]]:
    """Stores of one kind sharing one database, as two processes would."""
    created: list[Store] = []
    if request.param == "sqlite":
        path = str(tmp_path / "gateway.db")

        def factory(**kwargs: Any) -> Store:
            created.append(SQLiteStore(path, **kwargs))
            return created[-1]
    else:
        use_moto(request.getfixturevalue("monkeypatch"), request.getfixturevalue("moto_endpoint"))
        table = create_dynamodb_table()

        def factory(**kwargs: Any) -> Store:
            created.append(DynamoDBStore(table, **kwargs))
            return created[-1]

    yield factory
    for store in created:
        await store.aclose()


def _id(prefix: str) -> str:
    return prefix + os.urandom(12).hex()


def _record(tenant: str, output: list[dict[str, Any]], expires_at: int | None = None
            ) -> StoredResponse:
    rid = _id("resp_")
    return StoredResponse(id=rid, tenant=tenant, request={"model": "m"},
                          response={"id": rid, "object": "response", "status": "completed",
                                    "output": output},
                          expires_at=expires_at)


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "web_search_call", "status": "completed",
            "action": {"type": "search", "query": "q"}}


@pytest.mark.slow
async def test_reads_are_kept_by_tenant_and_call_id(make_store: Callable[..., Store]) -> None:
    one, two = make_store(), make_store()
    first, second = _id("ws_"), _id("ws_")
    record = _record("tenant-a", [_call(first), _call(second)])
    await one.put_tool_reads("tenant-a", record.id, {first: "Page text é ✓", second: "Results"},
                             expires_at=record.expires_at)
    await one.put(record)
    assert await two.get_tool_reads("tenant-a", [first, second, _id("ws_")]) == {
        first: "Page text é ✓", second: "Results"}
    assert await two.get_tool_reads("tenant-b", [first, second]) == {}


async def test_reads_are_deleted_with_their_response(make_store: Callable[..., Store]) -> None:
    one, two = make_store(), make_store()
    call, other = _id("ws_"), _id("fs_")
    record, kept = _record("t", [_call(call)]), _record("t", [_call(other)])
    for r, c in ((record, call), (kept, other)):
        await one.put_tool_reads("t", r.id, {c: f"text of {c}"})
        await one.put(r)
    assert not await two.delete(record.id, "someone-else")  # another tenant's: not deleted
    assert await two.get_tool_reads("t", [call]) == {call: f"text of {call}"}
    assert await two.delete(record.id, "t")
    assert await one.get_tool_reads("t", [call, other]) == {other: f"text of {other}"}


async def test_reads_expire_with_their_response(make_store: Callable[..., Store]) -> None:
    store = make_store()
    call = _id("ws_")
    record = _record("t", [_call(call)], expires_at=int(time.time()) - 1)
    await store.put_tool_reads("t", record.id, {call: "old"}, expires_at=record.expires_at)
    await store.put(record)
    assert await store.get_tool_reads("t", [call]) == {}


@pytest.mark.slow
async def test_a_read_past_one_dynamodb_item_is_kept_whole(
        make_store: Callable[..., Store]) -> None:
    """Over 1 MB of text zlib shrinks little: several parts on DynamoDB, all read back."""
    one, two = make_store(), make_store()
    rng = random.Random(7)
    text = "".join(rng.choices(string.ascii_letters + string.digits + "éß✓", k=1_200_000))
    assert len(text.encode()) > 1_000_000
    calls = [_id("fs_") for _ in range(3)]
    reads = {calls[0]: text, calls[1]: "short", calls[2]: text[::-1]}
    record = _record("t", [_call(c) for c in calls])
    await one.put_tool_reads("t", record.id, reads)
    await one.put(record)
    assert await two.get_tool_reads("t", calls) == reads
    assert await two.delete(record.id, "t")
    assert await two.get_tool_reads("t", calls) == {}


class _Untouchable:
    """A store any call to which fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was asked: {name}")


class _Tools:
    def __init__(self, reads: dict[str, str]) -> None:
        self._reads = reads

    def reads(self) -> dict[str, str]:
        return self._reads


async def test_no_store_call_without_server_tool_calls() -> None:
    from responses_gateway.tools import reads as tool_reads

    store: Any = _Untouchable()
    record = _record("t", [])
    await tool_reads.keep(store, record, None, stored=True)
    await tool_reads.keep(store, record, _Tools({}), stored=True)  # tools, no call ran
    await tool_reads.keep(store, record, _Tools({_id("ws_"): "text"}), stored=False)
    items = [{"type": "message", "role": "user", "content": "hi"},
             {"id": _id("mcp_"), "type": "mcp_call", "name": "x", "arguments": "{}"}]
    assert await tool_reads.gather(store, "t", items, heavy=False) == {}


async def test_a_failed_write_is_logged_and_the_response_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    from responses_gateway.store.base import StoreUnavailable
    from responses_gateway.tools import reads as tool_reads

    class Down:
        async def put_tool_reads(self, *args: Any, **kwargs: Any) -> None:
            raise StoreUnavailable("table gone")

    record = _record("t", [])
    call = _id("ws_")
    await tool_reads.keep(Down(), record, _Tools({call: "text"}), stored=True)  # type: ignore[arg-type]
    assert f"the tool reads of 1 call(s) of response {record.id} were not stored" in caplog.text
    assert tool_reads.KEPT.get("t", call) == "text"  # this process still has them

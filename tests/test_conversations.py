"""The Conversations API and ``conversation`` on create (issue 18), end to end through the
official openai client, on SQLite and on DynamoDB (moto server); every object validated by the
SDK's own types."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any
from unittest import mock

import httpx
import openai
import pytest
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItem,
    ConversationItemList,
)
from pydantic import TypeAdapter

from responses_gateway import observability
from responses_gateway.errors import GatewayError
from responses_gateway.platform import platform_for
from responses_gateway.responses import conversations
from responses_gateway.responses.conversations import MAX_ITEMS_PER_WRITE
from responses_gateway.store.base import StoredConversation, StoredResponse
from responses_gateway.traced_store import TracedStore
from responses_gateway.translate.request_models import parse_create_request
from tests.helpers.e2e import MODEL, check_response, check_stream, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import aws_env, create_dynamodb_table, moto_server
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.store_calls import (
    DatabaseCalls,
    fail_next_append,
    fail_next_settle,
    is_dynamodb,
)

KEY, OTHER_KEY = "sk-tenant-one", "sk-tenant-two"
ITEM = TypeAdapter(ConversationItem)


# -- the parameter ---------------------------------------------------------------------------


def error_of(body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as err:
        parse_create_request(body)
    return err.value


@pytest.mark.parametrize("value", ["conv_abc", {"id": "conv_abc"}])
def test_conversation_is_an_id_or_an_object(value: Any) -> None:
    assert parse_create_request({"model": "m", "conversation": value}).conversation == "conv_abc"


def test_conversation_parameter_errors_are_openais() -> None:
    err = error_of({"model": "m", "conversation": "abc"})
    assert (err.status, err.param, err.code) == (400, "conversation", "invalid_value")
    assert err.message == "Invalid 'conversation': 'abc'. Expected an ID that begins with 'conv'."
    err = error_of({"model": "m", "conversation": 7})
    assert (err.param, err.code) == ("conversation", "invalid_type")
    err = error_of({"model": "m", "conversation": {}})
    assert (err.param, err.code) == ("conversation.id", "missing_required_parameter")
    err = error_of({"model": "m", "conversation": "conv_a", "previous_response_id": "resp_b"})
    assert (err.status, err.param, err.code) == (400, None, "mutually_exclusive_parameters")
    assert err.message == (
        "Mutually exclusive parameters. Ensure you are only providing one of: "
        "'previous_response_id' or 'conversation'."
    )


# -- end to end ------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def gateway(
    request: pytest.FixtureRequest,
    upstream: ScriptedUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("conversations") / "gateway.db"
    if request.param == "sqlite":
        with GatewayServer(e2e_settings(upstream, db, api_keys=(KEY, OTHER_KEY))) as server:
            yield server
        return
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for key, value in aws_env(endpoint).items():
            patch.setenv(key, value)
        table = create_dynamodb_table()
        settings = e2e_settings(upstream, db, store=f"dynamodb:{table}", api_keys=(KEY, OTHER_KEY))
        with GatewayServer(settings) as server:
            yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def other(gateway: GatewayServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=gateway.base_url, api_key=OTHER_KEY, max_retries=0, timeout=30
    ) as c:
        yield c


def raw(client: openai.OpenAI, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """The same call without the SDK's parsing: the exact JSON the gateway answered."""
    return httpx.request(
        method,
        str(client.base_url).rstrip("/") + path,
        headers={"Authorization": f"Bearer {client.api_key}"},
        timeout=30,
        **kwargs,
    )


def valid_conversation(data: Any) -> dict[str, Any]:
    data = data if isinstance(data, dict) else data.to_dict(mode="json")
    Conversation.model_validate(data, strict=False)
    assert data["object"] == "conversation" and data["id"].startswith("conv_")
    assert set(data) == {"id", "object", "created_at", "metadata"}
    return data


def valid_list(data: dict[str, Any]) -> list[dict[str, Any]]:
    if data["data"]:
        ConversationItemList.model_validate(data)
        assert data["first_id"] == data["data"][0]["id"]
        assert data["last_id"] == data["data"][-1]["id"]
    for item in data["data"]:
        ITEM.validate_python(item)
    return data["data"]


def error(exc: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, Any]:
    body = exc.value.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def texts(items: list[dict[str, Any]]) -> list[str]:
    return [part.get("text", "") for item in items for part in item.get("content") or ()]


@pytest.mark.slow
def test_the_whole_conversations_surface(client: openai.OpenAI) -> None:
    conv = client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "first"},
            {"role": "assistant", "content": "second"},
        ],
        metadata={"topic": "demo"},
    )
    data = valid_conversation(conv)
    assert data["metadata"] == {"topic": "demo"}
    assert valid_conversation(client.conversations.retrieve(conv.id)) == data
    updated = client.conversations.update(conv.id, metadata={"topic": "new", "k": "v"})
    assert valid_conversation(updated)["metadata"] == {"topic": "new", "k": "v"}

    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "3"}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "done"},
        ],
    )
    created = valid_list(added.to_dict(mode="json"))
    assert [i["type"] for i in created] == ["message", "function_call", "function_call_output"]
    assert created[0]["id"].startswith("msg_") and created[0]["status"] == "completed"

    listing = raw(client, "GET", f"/conversations/{conv.id}/items", params={"order": "asc"})
    assert listing.status_code == 200
    items = valid_list(listing.json())
    assert texts(items)[:3] == ["first", "second", "3"] and len(items) == 5
    assert items[0]["content"] == [{"type": "input_text", "text": "first"}]
    assert items[1]["content"][0]["type"] == "output_text"
    desc = valid_list(raw(client, "GET", f"/conversations/{conv.id}/items").json())
    assert [i["id"] for i in desc] == [i["id"] for i in reversed(items)]  # desc by default

    page = client.conversations.items.list(conv.id, limit=2, order="asc")
    assert [i.id for i in page.data] == [i["id"] for i in items[:2]] and page.has_more
    everything = [item.id for item in client.conversations.items.list(conv.id, limit=2)]
    assert everything == [i["id"] for i in reversed(items)]  # auto-pagination with `after`

    one = client.conversations.items.retrieve(created[1]["id"], conversation_id=conv.id)
    assert ITEM.validate_python(one.to_dict(mode="json")).type == "function_call"
    answer = client.conversations.items.delete(created[1]["id"], conversation_id=conv.id)
    assert valid_conversation(answer)["id"] == conv.id  # OpenAI answers with the conversation
    with pytest.raises(openai.NotFoundError) as exc:
        client.conversations.items.retrieve(created[1]["id"], conversation_id=conv.id)
    assert error(exc)["message"] == f"Item with id '{created[1]['id']}' not found."
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete(created[1]["id"], conversation_id=conv.id)
    assert len(list(client.conversations.items.list(conv.id))) == 4

    deleted = client.conversations.delete(conv.id)
    ConversationDeletedResource.model_validate(deleted.to_dict(mode="json"))
    assert deleted.to_dict(mode="json") == {
        "id": conv.id, "object": "conversation.deleted", "deleted": True
    }
    for call in (
        lambda: client.conversations.retrieve(conv.id),
        lambda: client.conversations.delete(conv.id),
        lambda: client.conversations.update(conv.id, metadata={}),
        lambda: client.conversations.items.list(conv.id),
        lambda: client.conversations.items.create(
            conv.id, items=[{"role": "user", "content": "x"}]
        ),
        lambda: client.responses.create(model=MODEL, input="hi", conversation=conv.id),
    ):
        with pytest.raises(openai.NotFoundError) as exc:
            call()
        assert error(exc) == {
            "message": f"Conversation with id '{conv.id}' not found.",
            "type": "invalid_request_error", "param": None, "code": None,
        }


def test_another_tenants_conversation_is_not_found(
    client: openai.OpenAI, other: openai.OpenAI
) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "mine"}])
    item_id = client.conversations.items.list(conv.id).data[0].id
    for call in (
        lambda: other.conversations.retrieve(conv.id),
        lambda: other.conversations.update(conv.id, metadata={"a": "b"}),
        lambda: other.conversations.delete(conv.id),
        lambda: other.conversations.items.list(conv.id),
        lambda: other.conversations.items.retrieve(item_id, conversation_id=conv.id),
        lambda: other.conversations.items.delete(item_id, conversation_id=conv.id),
        lambda: other.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}]),
        lambda: other.responses.create(model=MODEL, input="hi", conversation=conv.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert texts(client.conversations.items.list(conv.id).to_dict()["data"]) == ["mine"]


def test_bad_input_is_an_openai_shaped_400(client: openai.OpenAI) -> None:
    too_many = [{"role": "user", "content": str(i)} for i in range(MAX_ITEMS_PER_WRITE + 1)]
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.create(items=too_many)
    assert (error(exc)["param"], error(exc)["code"]) == ("items", "array_above_max_length")
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.create(items=[{"type": "message", "role": "user"}])
    assert error(exc)["param"] == "items[0].content"
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})
    assert error(exc)["param"] == "metadata"
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.items.list(conv.id, limit=101)
    assert error(exc)["param"] == "limit"
    with pytest.raises(openai.NotFoundError) as exc:
        client.conversations.items.list(conv.id, after="msg_nope")
    assert error(exc) == {
        "message": "Item with id 'msg_nope' not found.",
        "type": "invalid_request_error", "param": "after", "code": None,
    }
    with pytest.raises(openai.NotFoundError) as exc:  # too long to be an id: the same 404
        client.conversations.items.list(conv.id, after="msg_" + "x" * 300)
    assert error(exc)["param"] == "after" and len(error(exc)["message"]) < 100
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.items.list(conv.id, include=["bogus"])  # type: ignore[list-item]
    assert error(exc)["param"] == "include[0]"
    item = {"type": "message", "id": "msg_fixed", "role": "user", "content": "x"}
    client.conversations.items.create(conv.id, items=[item])
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.items.create(conv.id, items=[item])
    assert error(exc)["message"] == (
        "Duplicate item found with id msg_fixed. Remove duplicate items from your input and "
        "try again."
    )
    with pytest.raises(openai.BadRequestError) as exc:  # already in the conversation
        client.responses.create(model=MODEL, input=[item], conversation=conv.id)
    assert error(exc)["param"] == "input"
    last = client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(
            model=MODEL, input="x", conversation=conv.id, previous_response_id=last.id
        )
    assert error(exc)["code"] == "mutually_exclusive_parameters"
    response = raw(client, "GET", "/conversations/" + "c" * 300)
    assert response.status_code == 404 and "error" in response.json()
    # items of the wrong kind are named by their JSON kind; adding items takes an array
    for value, kind in ((5, "an integer"), (True, "a boolean"), ("x", "a string"),
                        ({"role": "user"}, "an object")):
        with pytest.raises(openai.BadRequestError) as exc:
            client.conversations.create(items=value)  # type: ignore[arg-type]
        assert error(exc)["message"].endswith(f"but got {kind} instead."), error(exc)
    with pytest.raises(openai.BadRequestError) as exc:
        client.conversations.items.create(conv.id, items=None)  # type: ignore[arg-type]
    assert (error(exc)["param"], error(exc)["code"]) == ("items", "invalid_type")
    # an unknown item_reference among a conversation's items is named where it came in
    ref = {"type": "item_reference", "id": "msg_nope"}
    with pytest.raises(openai.NotFoundError) as exc:
        client.conversations.items.create(
            conv.id, items=[{"role": "user", "content": "y"}, ref])  # type: ignore[list-item]
    assert error(exc)["param"] == "items[1]"
    with pytest.raises(openai.NotFoundError) as exc:
        client.conversations.create(items=[ref])  # type: ignore[list-item]
    assert error(exc)["param"] == "items[0]"


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_responses_on_a_conversation_see_and_extend_it(
    client: openai.OpenAI, upstream: ScriptedUpstream, stream: bool
) -> None:
    marker = f"seed-{stream}"
    conv = client.conversations.create(items=[{"role": "user", "content": f"My name is {marker}"}])
    turns: list[str] = []
    for turn in range(3):
        question = f"question {turn} {marker}"
        if stream:
                events = sdk_events(client.responses.create(
                    model=MODEL, input=question, conversation={"id": conv.id}, stream=True
                ))
                check_stream(events)
                assert events[0]["response"]["conversation"] == {"id": conv.id}
                response = openai.types.responses.Response.model_validate(events[-1]["response"])
        else:
            response = client.responses.create(model=MODEL, input=question, conversation=conv.id)
        data = check_response(response)
        assert data["conversation"] == {"id": conv.id}
        turns.append(response.output_text)
        sent = [b for b in upstream.requests if question in str(b.get("messages"))][-1]
        history = str(sent["messages"])
        assert marker in history  # the conversation's first item
        for earlier in range(turn):
            assert f"question {earlier} {marker}" in history and turns[earlier] in history
    items = [i.to_dict(mode="json") for i in client.conversations.items.list(conv.id, order="asc")]
    for item in items:
        ITEM.validate_python(item)
    assert [i["role"] for i in items] == ["user"] + ["user", "assistant"] * 3
    assert texts(items)[1::2] == [f"question {t} {marker}" for t in range(3)]
    assert texts(items)[2::2] == turns
    assert client.responses.retrieve(response.id).conversation.id == conv.id


def test_a_failed_response_appends_nothing_and_frees_the_conversation(
    client: openai.OpenAI,
) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "start"}])
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model=MODEL, input="[[script:error]]", conversation=conv.id)
    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:error_event after=1]]", conversation=conv.id, stream=True
    ))
    assert events[-1]["type"] == "response.failed"
    assert len(list(client.conversations.items.list(conv.id))) == 1
    ok = client.responses.create(model=MODEL, input="again", conversation=conv.id)
    assert ok.status == "completed"
    assert texts(client.conversations.items.list(conv.id, order="asc").to_dict()["data"])[:2] == [
        "start", "again"
    ]


@pytest.mark.slow
def test_a_second_response_while_one_runs_is_conversation_locked(
    client: openai.OpenAI,
) -> None:
    conv = client.conversations.create()
    first_started = threading.Event()
    outcome: dict[str, Any] = {}

    def slow_turn() -> None:
        with client.responses.stream(
            model=MODEL, input="[[script:slow delay=0.2 n=5]]", conversation=conv.id
        ) as events:
            for _ in events:
                first_started.set()
            outcome["first"] = events.get_final_response()

    runner = threading.Thread(target=slow_turn)
    runner.start()
    assert first_started.wait(10)
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="me too", conversation=conv.id)
    assert error(exc) == {
        "message": "Another process is currently operating on this conversation. Please retry "
        "in a few seconds.",
        "type": "invalid_request_error", "param": "conversation", "code": "conversation_locked",
    }
    with pytest.raises(openai.BadRequestError):
        client.conversations.items.create(conv.id, items=[{"role": "user", "content": "late"}])
    runner.join(20)
    assert outcome["first"].status == "completed"
    after = client.responses.create(model=MODEL, input="now me", conversation=conv.id)
    assert after.status == "completed"
    roles = [i.role for i in client.conversations.items.list(conv.id, order="asc")]  # type: ignore[union-attr]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_a_background_response_on_a_conversation(client: openai.OpenAI) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "bg-seed"}])
    job = client.responses.create(
        model=MODEL, input="in the background", conversation=conv.id, background=True
    )
    assert job.conversation.id == conv.id
    for _ in range(200):
        job = client.responses.retrieve(job.id)
        if job.status not in ("queued", "in_progress"):
            break
        asyncio.run(asyncio.sleep(0.05))
    assert job.status == "completed"
    for _ in range(100):  # the conversation's append follows the terminal write
        items = list(client.conversations.items.list(conv.id, order="asc"))
        if len(items) == 3:
            break
        asyncio.run(asyncio.sleep(0.05))
    assert [i.role for i in items] == ["user", "user", "assistant"]  # type: ignore[union-attr]
    cancelled = client.responses.create(
        model=MODEL, input="[[script:slow delay=0.5 n=20]]", conversation=conv.id, background=True
    )
    client.responses.cancel(cancelled.id)
    nxt = client.responses.create(model=MODEL, input="after the cancel", conversation=conv.id)
    assert nxt.status == "completed"
    assert len(list(client.conversations.items.list(conv.id))) == 5


@pytest.mark.slow
def test_ten_thousand_items_page_in_order(
    client: openai.OpenAI, gateway: GatewayServer
) -> None:
    conv = client.conversations.create()
    tenant = "t_" + hashlib.sha256(KEY.encode()).hexdigest()[:32]  # api/auth.py's tenant
    # moto takes ~4 ms a write: 2,000 items (20 pages) there, 10,000 on SQLite.
    count = 2_000 if gateway.settings.store.startswith("dynamodb") else 10_000

    async def seed() -> None:  # a store of its own on the same database, as another process
        store = platform_for(gateway.settings).store()
        try:
            for start in range(0, count, 1000):
                await store.append_conversation_items(conv.id, tenant, [  # type: ignore[attr-defined]
                    {"id": f"msg_{i:05d}", "type": "message", "role": "user",
                     "status": "completed", "content": [{"type": "input_text", "text": str(i)}]}
                    for i in range(start, start + 1000)
                ])
        finally:
            await store.aclose()

    asyncio.run(seed())
    seen = [item.id for item in client.conversations.items.list(conv.id, limit=100, order="asc")]
    assert seen == [f"msg_{i:05d}" for i in range(count)]
    page = client.conversations.items.list(conv.id, limit=3, after="msg_00003")
    assert [i.id for i in page.data] == ["msg_00002", "msg_00001", "msg_00000"]
    assert not page.has_more
    page = client.conversations.items.list(
        conv.id, limit=100, after=f"msg_{count - 101:05d}", order="asc"
    )
    assert len(page.data) == 100 and not page.has_more
    # moto copies the whole table for every transaction: a table left this large makes the
    # module's later tests slow for moto's reason, not the gateway's
    assert client.conversations.delete(conv.id).deleted


# -- loose ends: long items, long turns, workers that never start, polling clients ------------


@pytest.mark.slow
def test_a_long_output_item_is_kept_whole(client: openai.OpenAI, gateway: GatewayServer) -> None:
    """~525 KB compressed, more than one DynamoDB item holds: stored in parts, never lost."""
    size = 700_000
    conv = client.conversations.create()
    response = client.responses.create(
        model=MODEL, input=f"[[script:huge size={size} random=1 piece=100000]]",
        conversation=conv.id,
    )
    assert response.status == "completed" and len(response.output_text) == size
    items = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.type for i in items] == ["message", "message"]
    answer = items[1].to_dict(mode="json")
    ITEM.validate_python(answer)
    assert answer["content"][0]["text"] == response.output_text
    one = client.conversations.items.retrieve(answer["id"], conversation_id=conv.id)
    assert one.to_dict(mode="json") == answer
    nxt = client.responses.create(model=MODEL, input="and now?", conversation=conv.id)
    assert nxt.status == "completed"  # the history (with the long item) was read back whole
    client.conversations.items.delete(answer["id"], conversation_id=conv.id)
    assert len(list(client.conversations.items.list(conv.id))) == 3
    store = gateway.gateway.store
    if gateway.settings.store.startswith("dynamodb"):  # the parts went with their item
        rows = store.client.query(
            TableName=store.table_name, KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": conv.id}},
        )["Items"]
        assert not [r for r in rows if r["sk"]["S"].startswith("C#J#")]


@pytest.mark.slow
def test_the_lock_is_renewed_while_a_turn_runs(
    client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn longer than the lock's lapse keeps the conversation (here: lapse 2 s, turn 5 s;
    a renewal, a store write, may be up to 1.5 s late on a loaded machine)."""
    monkeypatch.setattr(conversations, "LOCK_SECONDS", 2.0)
    monkeypatch.setattr(conversations, "RENEW_SECONDS", 0.5)
    conv = client.conversations.create()
    outcome: dict[str, Any] = {}

    def long_turn() -> None:
        outcome["first"] = client.responses.create(
            model=MODEL, input="[[script:slow delay=0.5 n=10]]", conversation=conv.id
        )

    runner = threading.Thread(target=long_turn)
    runner.start()
    time.sleep(2.5)  # past the 2 s lapse
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="me too", conversation=conv.id)
    assert error(exc)["code"] == "conversation_locked"
    runner.join(20)
    assert outcome["first"].status == "completed"
    assert client.responses.create(model=MODEL, input="now", conversation=conv.id).status == (
        "completed"
    )
    assert len(list(client.conversations.items.list(conv.id))) == 4


def test_a_background_create_whose_worker_cannot_start_frees_the_conversation(
    client: openai.OpenAI, gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from responses_gateway.platform.worker import Worker

    class Unreachable(Worker):
        async def queue(self, event: dict[str, Any]) -> None:
            raise ConnectionError("lambda endpoint unreachable")

    monkeypatch.setattr(gateway.gateway.platform, "worker", lambda: Unreachable("worker"))
    conv = client.conversations.create()
    with pytest.raises(openai.InternalServerError) as exc:
        client.responses.create(
            model=MODEL, input="in the background", conversation=conv.id, background=True
        )
    assert exc.value.status_code == 503 and error(exc)["code"] == "worker_unavailable"
    monkeypatch.undo()
    nxt = client.responses.create(model=MODEL, input="in the foreground", conversation=conv.id)
    assert nxt.status == "completed"
    assert texts(client.conversations.items.list(conv.id, order="asc").to_dict()["data"])[0] == (
        "in the foreground"
    )


def test_a_client_continuing_as_soon_as_a_background_turn_ends(
    client: openai.OpenAI,
) -> None:
    """The worker's terminal write carries the turn's append: the moment a poll says
    ``completed`` the items are there and the conversation is free for the next turn."""
    conv = client.conversations.create()
    job = client.responses.create(
        model=MODEL, input="first, in the background", conversation=conv.id, background=True
    )
    while job.status in ("queued", "in_progress"):
        time.sleep(0.01)
        job = client.responses.retrieve(job.id)
    assert job.status == "completed"
    assert len(client.conversations.items.list(conv.id).to_dict()["data"]) == 2
    nxt = client.responses.create(model=MODEL, input="second, at once", conversation=conv.id)
    assert nxt.status == "completed"
    items = client.conversations.items.list(conv.id, order="asc").to_dict()["data"]
    assert texts(items)[0::2] == ["first, in the background", "second, at once"]


# -- a turn: one read, two writes (issue 21) ---------------------------------------------------


@pytest.mark.slow
def test_a_turn_is_one_read_and_two_writes(client: openai.OpenAI, gateway: GatewayServer) -> None:
    """Read the history; lock (OpenAI's ``conversation_locked`` is decided at create time);
    settle: the record with the append, or with the release for a failed turn. Counted where
    it reaches the database, the same for every turn however long the conversation grows."""
    store = gateway.gateway.store
    # The response's usage count (store/usage.py) is not among them: the ledger writes on a
    # connection (SQLite) or client (DynamoDB, store/bookkeeping.py) of its own.
    expected = (
        {"Query": 1, "UpdateItem": 1, "TransactWriteItems": 1} if is_dynamodb(store)
        else {"BEGIN DEFERRED": 1, "BEGIN IMMEDIATE": 2}
    )
    conv = client.conversations.create(items=[{"role": "user", "content": "count me"}])
    ids: list[str] = []
    for turn in range(4):
        with DatabaseCalls(store) as db:
            if turn % 2:
                events = sdk_events(client.responses.create(
                    model=MODEL, input=f"turn {turn}", conversation=conv.id, stream=True
                ))
                ids.append(events[-1]["response"]["id"])
            else:
                ids.append(client.responses.create(
                    model=MODEL, input=f"turn {turn}", conversation=conv.id
                ).id)
        assert db.calls == expected, (turn, db.calls)
    with DatabaseCalls(store) as db:  # a failed turn appends nothing; its record still lands
        events = sdk_events(client.responses.create(
            model=MODEL, input="[[script:error_event after=1]]", conversation=conv.id,
            stream=True,
        ))
    assert events[-1]["type"] == "response.failed"
    assert db.calls == expected, db.calls
    failed = client.responses.retrieve(events[-1]["response"]["id"])
    assert failed.status == "failed" and failed.conversation.id == conv.id
    for response_id in ids:
        assert client.responses.retrieve(response_id).status == "completed"
    items = client.conversations.items.list(conv.id, order="asc").to_dict()["data"]
    assert len(items) == 9 and texts(items)[0] == "count me"
    assert texts(items)[1::2] == [f"turn {t}" for t in range(4)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_whose_settle_fails_stores_nothing_and_frees_the_conversation(
    client: openai.OpenAI, gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """The one write fails (inside the store, after part of it ran): no record, no items, the
    response ends failed, and the conversation, as it was, takes the next turn at once."""
    conv = client.conversations.create(items=[{"role": "user", "content": "before"}])
    fail_next_settle(gateway.gateway.store, monkeypatch)
    if stream:
        events = sdk_events(client.responses.create(
            model=MODEL, input="lost turn", conversation=conv.id, stream=True
        ))
        assert events[-1]["type"] == "response.failed"
        failure = events[-1]["response"]["error"]
        assert failure["code"] == "server_error" and "store_unavailable" in failure["message"]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(events[-1]["response"]["id"])
    else:
        with pytest.raises(openai.InternalServerError) as exc:
            client.responses.create(model=MODEL, input="lost turn", conversation=conv.id)
        assert exc.value.status_code == 503 and error(exc)["code"] == "store_unavailable"
    assert texts(client.conversations.items.list(conv.id).to_dict()["data"]) == ["before"]
    nxt = client.responses.create(model=MODEL, input="next turn", conversation=conv.id)
    assert nxt.status == "completed"
    items = client.conversations.items.list(conv.id, order="asc").to_dict()["data"]
    assert texts(items)[:2] == ["before", "next turn"] and len(items) == 3
    assert client.responses.retrieve(nxt.id).conversation.id == conv.id


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_a_background_turn_whose_append_fails_ends_failed_without_its_items(
    client: openai.OpenAI, gateway: GatewayServer, stream: bool
) -> None:
    """The worker's terminal write carries the turn's append (one atomic write): when the
    append fails at the database, nothing says ``completed``. The response ends failed
    (``store_unavailable``), its live stream and a later resume end with ``response.failed``,
    and the conversation, as it was, takes the next turn at once."""
    conv = client.conversations.create(items=[{"role": "user", "content": "bg"}])
    with fail_next_append(gateway.gateway.store) as failed:
        if stream:
            live = sdk_events(client.responses.create(
                model=MODEL, input="lost in the background", conversation=conv.id,
                background=True, stream=True,
            ))
            assert live[-1]["type"] == "response.failed"
            assert live[-1]["response"]["status"] == "failed"
            job = client.responses.retrieve(live[0]["response"]["id"])
        else:
            job = client.responses.create(
                model=MODEL, input="lost in the background", conversation=conv.id,
                background=True,
            )
        deadline = time.monotonic() + 20
        while job.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.02)
            job = client.responses.retrieve(job.id)
        assert failed()
    assert job.status == "failed", job.status
    assert job.error is not None and "store_unavailable" in job.error.message
    resumed = sdk_events(client.responses.retrieve(job.id, stream=True))
    assert resumed[-1]["type"] == "response.failed"
    assert resumed[-1]["response"]["status"] == "failed"
    assert [e["type"] for e in resumed].count("response.completed") == 0
    assert texts(client.conversations.items.list(conv.id).to_dict()["data"]) == ["bg"]
    started = time.monotonic()
    nxt = client.responses.create(model=MODEL, input="then this", conversation=conv.id)
    assert nxt.status == "completed" and time.monotonic() - started < 2
    items = client.conversations.items.list(conv.id, order="asc").to_dict()["data"]
    assert texts(items)[:2] == ["bg", "then this"] and len(items) == 3


RECORD = StoredResponse("resp_1", "t", {"status": "completed"}, {})


@pytest.mark.parametrize(
    ("method", "args", "kwargs"),
    [
        ("create_conversation", (StoredConversation("conv_1", "t", 0), []), {}),
        ("get_conversation", ("conv_1", "t"), {}),
        ("update_conversation", ("conv_1", "t", {"a": "b"}), {}),
        ("delete_conversation", ("conv_1", "t"), {}),
        ("conversation_items", ("conv_1", "t"), {}),
        ("lock_conversation", ("conv_1", "t", "tok"), {"length": 3, "until": 9.0}),
        ("append_conversation_items", ("conv_1", "t", []),
         {"token": "tok", "length": 3, "param": "input", "record": RECORD}),
        ("release_conversation", ("conv_1", "tok"), {"record": RECORD}),
        ("renew_conversation_lock", ("conv_1", "tok", 9.0), {}),
        ("list_conversation_items", ("conv_1", "t"),
         {"limit": 5, "order": "asc", "after": "msg_1"}),
        ("get_conversation_item", ("conv_1", "t", "msg_1"), {}),
        ("delete_conversation_item", ("conv_1", "t", "msg_1"), {}),
        ("append_events", ("resp_1", []), {"response": {"status": "completed"},
                                            "lease_until": 0.0}),
    ],
)
def test_every_conversation_store_call_is_traced(
    method: str, args: tuple[Any, ...], kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []

    @asynccontextmanager
    async def recorded(name: str, **annotations: str) -> AsyncIterator[None]:
        names.append(name)
        yield

    monkeypatch.setattr(observability, "subsegment", recorded)
    inner = mock.AsyncMock()
    traced = TracedStore(inner)
    asyncio.run(getattr(traced, method)(*args, **kwargs))
    assert names == [f"store.{method}"]
    getattr(inner, method).assert_awaited_once_with(*args, **kwargs)

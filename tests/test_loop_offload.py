"""Work whose cost grows with what a tenant sends runs off the event loop (the gateway's rule:
one blocked loop stalls every tenant's streams). Each test counts the ticks of a heartbeat
task while the heavy work is awaited: work done on the loop lets none through, work in a
thread lets the loop go on. Light work stays on the loop (a thread hop would cost more):
create bodies (translate/request.py) and the SQLite store's records (store/sqlite.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.errors import GatewayError
from responses_gateway.heavy import HEAVY_ENTRIES
from responses_gateway.responses import conversations
from responses_gateway.store.base import StoredConversation, StoredResponse
from responses_gateway.store.sqlite import SQLiteStore
from responses_gateway.translate import request, request_models
from tests.helpers.e2e import client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream


def messages(n: int, text: str = "hello there") -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{text} {i}"} for i in range(n)]


def ticks_while(work: Callable[[], Awaitable[Any]]) -> tuple[int, Any]:
    """How often a 1 ms heartbeat ticked while ``work`` ran, and what it returned. Work on
    the loop lets no tick through; work in a thread lets at least one (how many depends on
    how busy the machine is: tests assert one)."""

    async def main() -> tuple[int, Any]:
        ticks = 0
        done = False

        async def beat() -> None:
            nonlocal ticks
            while not done:
                await asyncio.sleep(0.001)
                ticks += 1

        task = asyncio.create_task(beat())
        await asyncio.sleep(0.01)  # the heartbeat runs
        before = ticks
        result = await work()
        done = True
        counted = ticks - before
        await task
        return counted, result

    return asyncio.run(main())


@pytest.fixture
def parse_threads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each create body validated: whether it ran on a thread with an event loop."""
    return on_loop_watcher(monkeypatch, request_models, "parse_create_request")


# -- create bodies (translate/request.py) ----------------------------------------------------


def test_heavy_counts_items_their_parts_and_tools() -> None:
    bound = HEAVY_ENTRIES
    assert not request.heavy({"model": "m", "input": messages(bound)})
    assert request.heavy({"model": "m", "input": messages(bound + 1)})
    parts = [{"type": "input_text", "text": "a"}] * bound
    assert request.heavy({"model": "m", "input": [{"role": "user", "content": parts}]})
    tools = [{"type": "function", "name": f"f{i}"} for i in range(bound + 1)]
    assert request.heavy({"model": "m", "input": "hi", "tools": tools})
    assert not request.heavy({"model": "m", "input": "x" * 1_000_000})
    assert not request.heavy(["not", "an", "object"])


def test_a_heavy_create_body_is_validated_while_the_loop_ticks() -> None:
    body = {"model": "m", "input": messages(20_000)}
    ticks, (req, items, heavy) = ticks_while(lambda: request.read_create(body))
    assert len(items) == 20_000 and items[0]["id"].startswith("msg_") and heavy
    assert req.model == "m"
    assert ticks >= 1, ticks  # ~300 ms of validation: on the loop it would be 0


def test_a_light_create_body_is_validated_on_the_loop(parse_threads: list[bool]) -> None:
    _, items, heavy = asyncio.run(request.read_create({"model": "m", "input": messages(3)}))
    assert not heavy
    assert len(items) == 3
    assert parse_threads == [True]


def test_a_heavy_body_is_refused_from_the_thread_with_openais_error() -> None:
    body = {"model": "m", "input": [*messages(300), {"role": "user", "content": 7}]}
    with pytest.raises(GatewayError) as caught:
        asyncio.run(request.read_create(body))
    assert caught.value.status == 400
    assert caught.value.body()["error"]["param"] == "input[300].content"


def test_conversation_items_with_many_parts_are_read_while_the_loop_ticks() -> None:
    parts = [{"type": "input_text", "text": f"part {i}"} for i in range(15_000)]
    raw = [{"type": "message", "role": "user", "content": parts}] * 2
    ticks, items = ticks_while(lambda: conversations.read_items(raw))
    assert len(items) == 2 and len(items[0]["content"]) == 15_000
    assert ticks >= 1, ticks


# -- through the gateway ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[GatewayServer]:
    db: Path = tmp_path_factory.mktemp("loop-offload") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


def test_the_routes_validate_a_heavy_body_off_the_loop(
    gateway: GatewayServer, parse_threads: list[bool],
) -> None:
    with client_for(gateway) as client:
        created = client.responses.create(model="m", input=messages(400), store=False)
        assert created.status == "completed"
        counted = client.responses.input_tokens.count(model="m", input=messages(400))
        assert counted.input_tokens > 0
        client.responses.create(model="m", input="a light one", store=False)
    assert parse_threads == [False, False, True]


def test_a_heavy_conversation_is_rendered_for_the_model_off_the_loop(
    gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fitting/render.py: the chat body of a long history is built in a worker thread."""
    from responses_gateway.responses.fitting import render
    from responses_gateway.translate import compaction_items

    triggers = on_loop_watcher(monkeypatch, compaction_items, "trigger_requested")
    on_loop = on_loop_watcher(monkeypatch, render, "to_chat_request")
    with client_for(gateway) as client:
        first = client.responses.create(model="m", input=messages(400))
        client.responses.create(model="m", input="and now?", previous_response_id=first.id)
        counted = client.responses.input_tokens.count(model="m", input=messages(3))
        assert counted.input_tokens > 0
    assert on_loop == [False, False, True]
    assert triggers == [False, False]  # (input_tokens fits without asking)


def on_loop_watcher(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[bool]:
    """For each call of ``owner.name``: whether it ran on a thread with an event loop."""
    seen: list[bool] = []
    original = getattr(owner, name)

    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, watched)
    return seen


def test_a_heavy_inputs_size_and_its_calls_are_read_off_the_loop(
    gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """responses/gateway.py: the stored input's size; tools/reads.py: its server calls."""
    from responses_gateway.store.base import StoreLimits
    from responses_gateway.tools import reads

    sized = on_loop_watcher(monkeypatch, StoreLimits, "check_input")
    scanned = on_loop_watcher(monkeypatch, reads, "_call_ids")
    with client_for(gateway) as client:
        first = client.responses.create(model="m", input=messages(400))
        client.responses.create(model="m", input="a light one")
        # one reference in a light body: what it names weighs what it was stored with
        stored = client.responses.input_items.list(first.id, limit=1).data[0]
        client.responses.create(model="m", input=[{"type": "item_reference", "id": stored.id}])
    assert sized == [False, True, False]
    assert scanned == [False, True, True]


def test_a_heavy_chat_body_is_prepared_for_the_upstream_off_the_loop(
    gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """backends/openai_compat.py: the dialect's copy of a long chat body, and its JSON."""
    from responses_gateway.backends.dialects import Dialect

    on_loop = on_loop_watcher(monkeypatch, Dialect, "prepare")
    with client_for(gateway) as client:
        client.responses.create(model="m", input=messages(400), store=False)
        client.responses.create(model="m", input="a light one", store=False)
    assert on_loop == [False, True]


def test_the_converse_request_is_built_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """backends/bedrock/backend.py: every message walked, inline images decoded."""
    from responses_gateway.backends.base import BackendRequest
    from responses_gateway.backends.bedrock import BedrockBackend
    from responses_gateway.backends.bedrock import backend as bedrock
    from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws

    use_dummy_aws(monkeypatch)
    on_loop = on_loop_watcher(monkeypatch, bedrock, "build_converse_request")
    model = "anthropic.claude-sonnet-4-20250514-v1:0"
    chat = [{"role": "user", "content": f"hello {i}"} for i in range(2_000)]
    with FakeBedrock() as fake:
        fake.json(model, {"output": {"message": {"role": "assistant",
                                                 "content": [{"text": "Hi."}]}},
                          "stopReason": "end_turn",
                          "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}})
        backend = BedrockBackend(region="us-east-1", endpoint_url=fake.url, max_attempts=1,
                                 read_timeout=10)

        async def answer() -> list[dict[str, Any]]:
            request = BackendRequest(body={"model": model, "messages": chat, "stream": False},
                                     stream=False)
            return [chunk async for batch in backend.stream(request) for chunk in batch]

        (completion,) = asyncio.run(answer())
    assert completion["choices"][0]["message"]["content"] == "Hi."
    assert on_loop == [False]


# -- the SQLite store (store/sqlite.py) ------------------------------------------------------


def record(response_id: str, n: int) -> StoredResponse:
    items = [{"id": f"msg_{i:08d}", "type": "message", "role": "user", "status": "completed",
              "content": [{"type": "input_text", "text": f"hello there {i}"}]} for i in range(n)]
    return StoredResponse(id=response_id, tenant="t", input_items=items,
                          response={"id": response_id, "status": "completed", "output": []},
                          request={"chat": {"model": "m", "messages": []}})


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SQLiteStore,
                                                                              list[str]]]:
    """A SQLite store and the names of the calls it handed to its file's thread."""
    s = SQLiteStore(str(tmp_path / "g.db"))
    threaded: list[str] = []
    to_thread = s._file.run_in_thread

    async def watched(fn: Callable[..., Any], *args: Any) -> Any:
        threaded.append(fn.__name__)
        return await to_thread(fn, *args)

    monkeypatch.setattr(s._file, "run_in_thread", watched)
    yield s, threaded
    s._file.close()


def test_a_heavy_record_is_written_read_and_deleted_while_the_loop_ticks(
    store: tuple[SQLiteStore, list[str]],
) -> None:
    s, threaded = store
    heavy = record("resp_heavy", 30_000)
    ticks, _ = ticks_while(lambda: s.put(heavy))
    assert ticks >= 1, ticks
    ticks, found = ticks_while(lambda: s.get("resp_heavy", "t"))
    assert ticks >= 1, ticks
    assert found is not None and found.input_items == heavy.input_items
    ticks, deleted = ticks_while(lambda: s.delete("resp_heavy", "t"))
    assert deleted and ticks >= 1, ticks
    assert threaded == ["_put", "_get", "_delete"]


def test_a_light_record_stays_on_the_loop(store: tuple[SQLiteStore, list[str]]) -> None:
    s, threaded = store
    light = record("resp_light", 3)

    async def both() -> StoredResponse | None:
        await s.put(light)
        return await s.get("resp_light", "t")

    found = asyncio.run(both())
    assert found is not None and found.input_items == light.input_items
    assert threaded == []


def test_a_few_large_items_are_heavy_by_their_bytes(store: tuple[SQLiteStore, list[str]],
                                                    ) -> None:
    s, threaded = store
    big = record("resp_big", 2)
    for item in big.input_items:
        item["content"][0]["text"] = "x" * 800_000

    async def both() -> StoredResponse | None:
        await s.put(big)
        return await s.get("resp_big", "t")

    found = asyncio.run(both())
    assert found is not None and found.input_items == big.input_items
    assert threaded == ["_put", "_get"]


def test_a_heavy_conversation_and_its_events_are_read_while_the_loop_ticks(
    store: tuple[SQLiteStore, list[str]],
) -> None:
    s, threaded = store
    conversation = StoredConversation(id="conv_1", tenant="t", created_at=1, metadata={})
    items = record("resp_x", 10_000).input_items  # GATEWAY_MAX_CONVERSATION_ITEMS
    ticks, _ = ticks_while(lambda: s.create_conversation(conversation, items))
    assert ticks >= 1, ticks
    ticks, found = ticks_while(lambda: s.conversation_items("conv_1", "t"))
    assert ticks >= 1, ticks
    assert found is not None and found[1] == items
    asyncio.run(s.put(record("resp_e", 1)))
    events = [{"type": "response.output_text.delta", "sequence_number": i, "delta": "word"}
              for i in range(20_000)]
    for start in range(0, len(events), 200):  # as a stream writes them: a batch at a time
        asyncio.run(s.append_events("resp_e", events[start:start + 200]))
    ticks, read = ticks_while(lambda: s.read_events("resp_e"))
    assert read == events and ticks >= 1, ticks
    assert asyncio.run(s.read_events("resp_e", 19_990)) == events[19_991:]
    assert threaded == ["_create_conversation", "_conversation_items", "_read_events"]


# -- records' large values moved to blobs (store/blobs.py) ----------------------------------


def test_a_heavy_record_is_moved_to_blobs_and_back_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from responses_gateway.store import blobs

    moved = on_loop_watcher(monkeypatch, blobs.BlobbedStore, "_moved")
    restored = on_loop_watcher(monkeypatch, blobs, "_restored")
    inner = SQLiteStore(str(tmp_path / "g.db"))
    store = blobs.BlobbedStore(inner, blobs.MemoryBlobs())
    heavy, light = record("resp_heavy", 5_000), record("resp_light", 3)
    image = "iVBORw0KGgo" + "A" * 200_000  # a string past the blob threshold
    light.response["output"] = [{"id": "ig_1", "type": "image_generation_call",
                                 "status": "completed", "result": image}]

    async def both() -> tuple[StoredResponse | None, StoredResponse | None]:
        await store.put(heavy)
        await store.put(light)
        return await store.get("resp_heavy", "t"), await store.get("resp_light", "t")

    got_heavy, got_light = asyncio.run(both())
    inner._file.close()
    assert got_heavy is not None and got_heavy.input_items == heavy.input_items
    assert got_light is not None and got_light.response["output"][0]["result"] == image
    assert moved == [False, True]
    assert restored[0] is False and restored[-1] is True  # (it recurses: each call counted)


# -- fitting a heavy conversation to the window (fitting/compaction.py, cuts.py) ------------


@pytest.fixture(scope="module")
def windowed(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory,
             ) -> Iterator[GatewayServer]:
    """A gateway that knows model ``m``'s window: 3,000 tokens."""
    db: Path = tmp_path_factory.mktemp("loop-offload-window") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, context_windows={"m": 3000})) as server:
        yield server


def test_a_heavy_conversation_is_truncated_and_compacted_off_the_loop(
    windowed: GatewayServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from responses_gateway import token_estimate
    from responses_gateway.responses.fitting import compaction, cuts

    dropped = on_loop_watcher(monkeypatch, cuts, "droppable")
    planned = on_loop_watcher(monkeypatch, compaction, "Planned")
    estimated = on_loop_watcher(monkeypatch, token_estimate, "estimate_chat")
    long = [{"role": ("user", "assistant")[i % 2], "content": f"words to leave out {i}"}
            for i in range(400)]  # ~5,000 tokens, half of them the model's
    long.append({"role": "user", "content": "and now?"})
    with client_for(windowed) as client:
        truncated = client.responses.create(model="m", input=long, truncation="auto",
                                            store=False)
        compacted = client.responses.create(
            model="m", input=long, store=False,
            context_management=[{"type": "compaction", "compact_threshold": 1000}])
        light = client.responses.create(
            model="m", input=long[:3], store=False,
            context_management=[{"type": "compaction", "compact_threshold": 10}])
    assert truncated.status == compacted.status == light.status == "completed"
    assert compacted.output[0].type == light.output[0].type == "compaction"
    assert dropped == [False]
    assert planned == [False, True]
    assert estimated[0] is False  # the window's first look at the long conversation


# -- what a WebSocket connection remembers (api/ws_remembered.py) ---------------------------


def test_a_heavy_remembered_response_is_sized_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from responses_gateway.api import ws_remembered

    sized = on_loop_watcher(monkeypatch, ws_remembered, "_size")
    remembered = ws_remembered.Remembered(max_bytes=64 * 1024 * 1024)
    heavy, light = record("resp_heavy", 5_000), record("resp_light", 3)
    heavy.request["chat"]["messages"] = [{"role": "user", "content": "hi"}] * 5_000

    async def keep() -> None:
        assert await remembered.keep("a", heavy) == []
        assert await remembered.keep("b", light) == []

    asyncio.run(keep())
    assert sized == [False, True]
    assert remembered["resp_heavy"] is heavy and remembered.bytes > 5_000 * 100


# -- the token estimate (token_estimate.py) -------------------------------------------------


def test_the_estimate_of_a_long_list_is_the_estimate_of_it_whole() -> None:
    """Measured a slice at a time, a list counts exactly what one encode of it counted."""
    import math

    import orjson

    from responses_gateway import token_estimate

    def whole(value: Any) -> int:
        raw = orjson.dumps(value)
        size = len(raw) - sum(m.end() - m.start() for m in token_estimate._DATA_URL.finditer(raw))
        media = len(token_estimate._MEDIA_PART.findall(raw))
        return math.ceil(size / 4) + token_estimate.MEDIA_TOKENS * media

    image = "data:image/png;base64," + "A" * 400
    message = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                           {"type": "text", "text": 'say "data:x" once'}]}
    for n in (0, 1, 1024, 1025, 2048, 2049, 5000):
        values = [[message] * n, [f"word {i}" for i in range(n)]]
        for value in values:
            assert token_estimate.estimate(value) == whole(value), n


def test_a_heavy_chat_body_is_estimated_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from responses_gateway import token_estimate

    estimated = on_loop_watcher(monkeypatch, token_estimate, "estimate_chat")
    heavy = {"messages": [{"role": "user", "content": "hi"}] * 400}
    light = {"messages": [{"role": "user", "content": "hi"}] * 3}

    async def both() -> tuple[int, int]:
        return (await token_estimate.estimate_chat_off_loop(heavy),
                await token_estimate.estimate_chat_off_loop(light))

    assert asyncio.run(both())[0] > asyncio.run(both())[1]
    assert estimated == [False, True, False, True]

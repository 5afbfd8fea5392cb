"""file_search in WebSocket mode and under compaction (issue 31), end to end through
openai-python: the scripted upstream plays the model, vector stores on the local engine with
embeddings from tests/helpers/embedding_server.py (a DETERMINISTIC HASHING EMBEDDER, not a
trained model).

WebSocket: every message is validated against the SDK's WebSocket server events and the whole
turn against the SDK's stream models and the stream grammar. Compaction: the passages a
``file_search_call`` kept (its ``results``) are part of what context fitting counts, and once
compacted the model reads a coherent history (no call without its output) whose summary
carries what the passages said."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_file_search import (  # noqa: F401
    KEY_A,
    QUESTION,
    alice,
    calls,
    fresh_upstream,
    library,
    searching,
    tool,
    upload,
)
from tests.test_websocket import TERMINAL, check_ws_event

FACTS = "script/facts"  # remembers every FACT:... token it reads (tests/test_compaction.py)
# A long passage (about 400 tokens) whose fact the model can only know from the search.
PASSAGE = ("Basalt forms when lava cools quickly at the surface: FACT:basalt-cools. "
           + " ".join(["Columnar joints and vesicles mark the cooled flow."] * 45))


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, embeddings: EmbeddingServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("file_search_modes") / "gateway.db"
    settings = e2e_settings(upstream, db, api_keys=(KEY_A,), seal_key="file-search-modes",
                            embedding_url=embeddings.base_url, embedding_model="hashing-384")
    with GatewayServer(settings) as server:
        yield server


# -- WebSocket mode ------------------------------------------------------------------------


def ws_turn(connection: Any) -> list[dict[str, Any]]:
    """One turn's messages, each validated as the SDK's WebSocket server event."""
    events = []
    for event in connection:
        data = event.to_dict(mode="json")
        check_ws_event(data)
        events.append(data)
        if event.type in (*TERMINAL, "error"):
            return events
    raise AssertionError("the connection closed before a terminal event")


def test_websocket_searches_cites_and_continues(
        gateway: GatewayServer, upstream: ScriptedUpstream,
        library: dict[str, str]) -> None:  # noqa: F811
    answer = "Basalt forms when lava cools [^1]."
    with client_for(gateway, api_key=KEY_A) as client, \
            client.responses.connect() as connection:
        connection.response.create(
            model="m", input=searching("ws-search", answer), store=False,
            tools=[tool(library, max_num_results=2)], include=["file_search_call.results"])
        events = ws_turn(connection)
        check_stream(events)
        kinds = [e["type"] for e in events]
        assert kinds[-1] == "response.completed"
        at = kinds.index("response.file_search_call.in_progress")
        assert kinds[at - 1:at + 4] == [
            "response.output_item.added", "response.file_search_call.in_progress",
            "response.file_search_call.searching", "response.file_search_call.completed",
            "response.output_item.done"]
        response = check_response(events[-1]["response"])
        [call] = calls(response)
        assert call["status"] == "completed" and call["queries"] == [QUESTION]
        assert call["results"][0]["filename"] == "volcano.md"
        assert len(call["results"]) == 2
        citation = {"type": "file_citation", "file_id": library["volcano.md"],
                    "filename": "volcano.md", "index": answer.index("[^1]")}
        [added] = [e for e in events if e["type"] == "response.output_text.annotation.added"]
        assert added["annotation"] == citation and added["annotation_index"] == 0
        assert response["output"][-1]["content"][0]["annotations"] == [citation]
        read = [b for b in upstream.requests if "ws-search" in str(b["messages"])][-1]
        assert "[^1] from 'volcano.md'" in read["messages"][-1]["content"]

        # The next turn on the socket (store=false: the history is the socket's) reads the
        # earlier call's passages as the model read them.
        connection.response.create(model="m", input="ws-next: and then?", store=False,
                                   previous_response_id=response["id"],
                                   tools=[tool(library)])
        follow = ws_turn(connection)
        check_stream(follow)
        assert follow[-1]["type"] == "response.completed"
    later = [b for b in upstream.requests if "ws-next" in str(b["messages"])][-1]["messages"]
    [asked] = [m for m in later if m.get("tool_calls")]
    assert asked["tool_calls"][0]["id"] == call["id"]
    [output] = [m for m in later if m.get("role") == "tool"]
    assert output["tool_call_id"] == call["id"]
    # What the model read then (kept by the call's id) is what it reads again.
    assert "[^1] from 'volcano.md'" in output["content"]
    assert "Volcanoes: magma rises" in output["content"]


def test_websocket_unknown_store_is_an_error_event(gateway: GatewayServer,
                                                   upstream: ScriptedUpstream) -> None:
    store_id = "vs_" + "0" * 48
    with client_for(gateway, api_key=KEY_A) as client, \
            client.responses.connect() as connection:
        connection.response.create(model="m", input=searching("ws-404", "x"), tools=[
            {"type": "file_search", "vector_store_ids": [store_id]}])
        [error] = ws_turn(connection)
        assert error["type"] == "error" and error["status"] == 404
        assert error["error"]["param"] == "tools[0].vector_store_ids"
        assert error["error"]["message"] == f"No vector store found with id '{store_id}'."
        connection.response.create(model="m", input="ws-after-404")  # the socket survived
        assert ws_turn(connection)[-1]["type"] == "response.completed"
    assert not [b for b in upstream.requests if "ws-404" in str(b["messages"])]


# -- compaction ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fact_store(alice: OpenAI) -> dict[str, str]:  # noqa: F811
    store = alice.vector_stores.create(name="facts")
    return {"store": store.id, "file": upload(alice, store.id, "basalt.md", PASSAGE)}


def _searched(client: OpenAI, store: dict[str, str], marker: str) -> list[dict[str, Any]]:
    """A first response that searched (results kept) and cited; its input and output."""
    user = {"role": "user", "content": searching(marker, "Lava cools into basalt [^1].",
                                                 ["basalt lava"])}
    first = check_response(client.responses.create(
        model=FACTS, input=[user], include=["file_search_call.results"],
        tools=[{"type": "file_search", "vector_store_ids": [store["store"]]}]))
    [call] = calls(first)
    assert call["results"][0]["file_id"] == store["file"]
    return [user, *first["output"]]


def _without_results(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with their searches' passages nowhere: no ``results``, and a call id the
    gateway never ran (what a call read is kept by its id, and read back by it)."""
    return [{**i, "results": None, "id": "fs_" + "0" * 48}
            if i.get("type") == "file_search_call" else i for i in items]


def _coherent(messages: list[dict[str, Any]]) -> None:
    """Every tool call the model reads has its output right after it, and no output is
    without its call."""
    pending: list[str] = []
    for message in messages:
        if message.get("role") == "tool":
            assert message["tool_call_id"] in pending, message
            pending.remove(message["tool_call_id"])
            continue
        assert not pending, f"calls without output: {pending}"
        pending = [c["id"] for c in message.get("tool_calls") or []]
    assert not pending


@pytest.mark.parametrize("stream", [False, True])
def test_passages_count_and_survive_compaction(
        alice: OpenAI, upstream: ScriptedUpstream, fact_store: dict[str, str],  # noqa: F811
        stream: bool) -> None:
    tools = [{"type": "file_search", "vector_store_ids": [fact_store["store"]]}]
    history = [*_searched(alice, fact_store, f"compact-{stream}"),
               {"role": "user", "content": "What do you know?"}]
    # Context fitting counts the kept passages: the same history without them is far smaller.
    # (Counted without the tool, whose definition adds the same few tokens to both.)
    full = alice.responses.input_tokens.count(model=FACTS, input=history)
    bare = alice.responses.input_tokens.count(model=FACTS, input=_without_results(history))
    assert full.input_tokens - bare.input_tokens > 300
    threshold = (full.input_tokens + bare.input_tokens) // 2
    management = [{"type": "compaction", "compact_threshold": threshold}]

    upstream.reset()
    below = check_response(alice.responses.create(
        model=FACTS, input=_without_results(history), tools=tools,
        context_management=management))
    assert [i["type"] for i in below["output"]] == ["message"]  # under the threshold

    upstream.reset()
    kwargs: Any = {"model": FACTS, "input": history, "tools": tools,
                   "context_management": management}
    if stream:
        with alice.responses.create(stream=True, **kwargs) as events_stream:
            events = [e.to_dict(mode="json") for e in events_stream]
        check_stream(events)
        response = check_response(events[-1]["response"])
    else:
        response = check_response(alice.responses.create(**kwargs))
    assert [i["type"] for i in response["output"]] == ["compaction", "message"]
    summarising, answering = upstream.requests
    assert "summary" in summarising["messages"][-1]["content"]
    # The summary read the passages (as the call's output, beside its call).
    _coherent(summarising["messages"])
    assert "FACT:basalt-cools" in json.dumps(summarising["messages"])
    # After compaction the model reads the summary in place of the call and its passages,
    # a coherent history, and still knows what the passages said.
    _coherent(answering["messages"])
    sent = json.dumps(answering["messages"])
    assert "were compacted" in sent and "Columnar joints" not in sent
    assert "FACT:basalt-cools" in response["output"][-1]["content"][0]["text"]

    # The compaction item stands for the search in the next response too.
    upstream.reset()
    again = check_response(alice.responses.create(
        model=FACTS, tools=tools, input=[*response["output"],
                                         {"role": "user", "content": "And now?"}]))
    [answering] = upstream.requests
    _coherent(answering["messages"])
    assert "FACT:basalt-cools" in again["output"][-1]["content"][0]["text"]

"""What a server tool's call gave the model reaches a later request in another process
(issues 30, 31; tools/reads.py): two gateways on one store (a SQLite file; DynamoDB, S3 and
S3 Vectors on moto), openai-python in front of each, the scripted upstream as the model.

Both gateways run in this test process, so between the first response and the follow-up the
process's own kept reads are emptied (``forget``): the second gateway then has only what a
fresh process (another Lambda instance, a restarted gateway) would have, the store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from responses_gateway.tools import reads as tool_reads
from responses_gateway.tools.reads import ReadOutputs
from tests.helpers.e2e import check_response, e2e_settings
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.file_storage import ENGINES, storage_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.search_providers import RESULTS, SearchProvider

KEY_A, KEY_B = "sk-reads-tenant-a", "sk-reads-tenant-b"
SEARCH_KEY = "sk-searxng-reads"
DOC = ("Volcanoes: magma rises through the crust. Basalt forms when lava cools quickly at the "
       "surface after an eruption.")
QUESTION = "how does basalt form when lava cools"
GONE = "no longer at hand"  # what an item whose text is not kept reads as


@pytest.fixture(scope="module")
def provider() -> Iterator[SearchProvider]:
    with SearchProvider("searxng", key=SEARCH_KEY) as fake:
        yield fake


@pytest.fixture(scope="module", params=ENGINES)
def gateways(request: pytest.FixtureRequest, upstream: ScriptedUpstream,
             provider: SearchProvider, embeddings: EmbeddingServer,
             tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[GatewayServer, GatewayServer]]:
    """Two gateways on one store: local (SQLite) or AWS (DynamoDB, S3, S3 Vectors)."""
    tmp = tmp_path_factory.mktemp("tool_reads")
    with storage_settings(request.param, tmp) as storage:
        settings = e2e_settings(
            upstream, tmp / "gateway.db", api_keys=(KEY_A, KEY_B),
            web_search_provider="searxng", web_search_url=provider.base_url,
            web_search_api_key=SEARCH_KEY, embedding_url=embeddings.base_url,
            embedding_model="hashing-384", **storage)
        with GatewayServer(settings) as one, GatewayServer(settings) as two:
            assert one.gateway.store is not two.gateway.store  # two stores, one database
            yield one, two


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: ScriptedUpstream) -> None:
    upstream.reset()


def client(server: GatewayServer, key: str = KEY_A) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=30)


def forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """What another process knows of this one's reads: nothing."""
    monkeypatch.setattr(tool_reads, "KEPT", ReadOutputs())


def web_searching(marker: str) -> str:
    return (f"[[script:tool names=web_search args='{{\"query\": \"rust edition\"}}' times=1 "
            f"then=text text=\"Done.\" key={marker}]] {marker}")


def file_searching(marker: str) -> str:
    args = json.dumps({"queries": [QUESTION]})
    return (f"[[script:tool names=file_search args='{args}' times=1 then=text "
            f"text=\"Basalt [^1].\" key={marker}]] {marker}")


def tool_result(upstream: ScriptedUpstream, marker: str, call_id: str) -> str:
    """What the model read for ``call_id`` in the last upstream request holding ``marker``."""
    body = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    [result] = [m for m in body["messages"]
                if m["role"] == "tool" and m.get("tool_call_id") == call_id]
    return str(result["content"])


def later(marker: str) -> str:
    return f"[[script:text text=ok]] {marker}"


def searched(server: GatewayServer, upstream: ScriptedUpstream, marker: str,
             **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A response that searched the web once: it, its call, and what the model read."""
    with client(server) as c:
        first = check_response(c.responses.create(
            model="m", input=web_searching(marker), tools=[{"type": "web_search"}], **kwargs))
    [call] = [i for i in first["output"] if i["type"] == "web_search_call"]
    read = tool_result(upstream, marker, call["id"])
    assert RESULTS[1]["text"] in read and f"URL: {RESULTS[1]['url']}" in read
    return first, call, read


@pytest.mark.slow
def test_a_web_search_read_reaches_another_gateway(
        gateways: tuple[GatewayServer, GatewayServer], upstream: ScriptedUpstream,
        monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = gateways
    first, call, read = searched(one, upstream, "ws-elsewhere")
    with client(one, KEY_B) as bob:  # in this process too, only its tenant's
        check_response(bob.responses.create(
            model="m", store=False, tools=[{"type": "web_search"}],
            input=[call, {"role": "user", "content": later("ws-other-tenant-here")}]))
    assert GONE in tool_result(upstream, "ws-other-tenant-here", call["id"])
    forget(monkeypatch)
    with client(two) as alice, client(two, KEY_B) as bob:
        check_response(alice.responses.create(
            model="m", input=later("ws-chained"), previous_response_id=first["id"],
            tools=[{"type": "web_search"}]))
        assert tool_result(upstream, "ws-chained", call["id"]) == read
        forget(monkeypatch)
        # The item given back in input (store=false, as the Codex CLI does): the same text.
        given = [{"role": "user", "content": "search please"}, call,
                 {"role": "user", "content": later("ws-given-back")}]
        check_response(alice.responses.create(model="m", store=False, input=given,
                                              tools=[{"type": "web_search"}]))
        assert tool_result(upstream, "ws-given-back", call["id"]) == read
        # Another tenant giving the same call id back reads nothing of it.
        forget(monkeypatch)
        given[-1] = {"role": "user", "content": later("ws-other-tenant")}
        check_response(bob.responses.create(model="m", store=False, input=given,
                                            tools=[{"type": "web_search"}]))
        theirs = tool_result(upstream, "ws-other-tenant", call["id"])
        assert GONE in theirs and RESULTS[1]["text"] not in theirs


def test_deleting_the_response_deletes_its_reads(
        gateways: tuple[GatewayServer, GatewayServer], upstream: ScriptedUpstream,
        monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = gateways
    first, call, read = searched(one, upstream, "ws-deleted")
    given = [{"role": "user", "content": "search please"}, call]
    with client(two) as alice:
        forget(monkeypatch)
        check_response(alice.responses.create(
            model="m", store=False, tools=[{"type": "web_search"}],
            input=[*given, {"role": "user", "content": later("ws-before-delete")}]))
        assert tool_result(upstream, "ws-before-delete", call["id"]) == read
        assert alice.responses.delete(first["id"]) is None
        forget(monkeypatch)
        check_response(alice.responses.create(
            model="m", store=False, tools=[{"type": "web_search"}],
            input=[*given, {"role": "user", "content": later("ws-after-delete")}]))
    after = tool_result(upstream, "ws-after-delete", call["id"])
    assert GONE in after and RESULTS[1]["text"] not in after


def test_nothing_is_kept_in_the_store_for_store_false(
        gateways: tuple[GatewayServer, GatewayServer], upstream: ScriptedUpstream,
        monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = gateways
    _first, call, read = searched(one, upstream, "ws-unstored", store=False)
    given = [{"role": "user", "content": "search please"}, call]
    with client(one) as here:  # this process still has it
        check_response(here.responses.create(
            model="m", store=False, tools=[{"type": "web_search"}],
            input=[*given, {"role": "user", "content": later("ws-unstored-here")}]))
    assert tool_result(upstream, "ws-unstored-here", call["id"]) == read
    forget(monkeypatch)
    with client(two) as there:
        check_response(there.responses.create(
            model="m", store=False, tools=[{"type": "web_search"}],
            input=[*given, {"role": "user", "content": later("ws-unstored-there")}]))
    assert GONE in tool_result(upstream, "ws-unstored-there", call["id"])


@pytest.mark.slow
def test_file_search_passages_reach_another_gateway_through_a_conversation(
        gateways: tuple[GatewayServer, GatewayServer], upstream: ScriptedUpstream,
        monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = gateways
    with client(one) as alice:
        store = alice.vector_stores.create(name="reads")
        done = alice.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=("volcano.md", DOC.encode()), poll_interval_ms=50)
        assert done.status == "completed", done.last_error
        conversation = alice.conversations.create()
        tool = {"type": "file_search", "vector_store_ids": [store.id]}
        first = check_response(alice.responses.create(
            model="m", input=file_searching("fs-first"), tools=[tool],
            conversation=conversation.id))  # results not included: the item has no passages
    [call] = [i for i in first["output"] if i["type"] == "file_search_call"]
    read = tool_result(upstream, "fs-first", call["id"])
    assert "[^1] from 'volcano.md'" in read and "Basalt forms when lava cools" in read
    forget(monkeypatch)
    with client(two) as alice:
        check_response(alice.responses.create(
            model="m", input=later("fs-conversation"), tools=[tool],
            conversation=conversation.id))
    assert tool_result(upstream, "fs-conversation", call["id"]) == read


def test_a_background_response_keeps_its_reads(
        gateways: tuple[GatewayServer, GatewayServer], upstream: ScriptedUpstream,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's job persists through its event log: its reads are stored all the same."""
    import time

    one, two = gateways
    with client(one) as alice:
        response = alice.responses.create(model="m", input=web_searching("ws-background"),
                                          tools=[{"type": "web_search"}], background=True)
        deadline = time.monotonic() + 20
        while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.05)
            response = alice.responses.retrieve(response.id)
    assert response.status == "completed"
    [call] = [i for i in response.model_dump()["output"] if i["type"] == "web_search_call"]
    read = tool_result(upstream, "ws-background", call["id"])
    forget(monkeypatch)
    with client(two) as alice:
        check_response(alice.responses.create(
            model="m", input=later("ws-after-background"), previous_response_id=response.id))
    assert tool_result(upstream, "ws-after-background", call["id"]) == read


@pytest.mark.slow
def test_input_tokens_count_what_the_model_would_read(
        gateways: tuple[GatewayServer, GatewayServer], upstream: ScriptedUpstream,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``POST /v1/responses/input_tokens`` renders the history as a create does: the results
    the call read (from the store, in another gateway), not the item's summary."""
    one, two = gateways
    _first, call, read = searched(one, upstream, "ws-count")
    given: Any = [call, {"role": "user", "content": "and then?"}]
    forget(monkeypatch)
    with client(two) as alice, client(two, KEY_B) as bob:
        theirs = bob.responses.input_tokens.count(model="m", input=given).input_tokens
        ours = alice.responses.input_tokens.count(model="m", input=given).input_tokens
    assert len(read) > 4 * len(GONE) and ours > theirs + 20

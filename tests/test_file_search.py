"""file_search run by the gateway (issue 31), end to end: openai-python against the gateway,
the scripted Chat Completions upstream as the model, vector stores on both engines (one suite:
``local``, SQLite; ``aws``, DynamoDB + S3 on a moto server and S3 Vectors on
tests/helpers/s3vectors_server.py, its real wire format) with embeddings from
tests/helpers/embedding_server.py (a DETERMINISTIC HASHING EMBEDDER served over the OpenAI
embeddings API on 127.0.0.1, not a trained model). Every streamed event is validated against
the SDK's models and the stream grammar."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, e2e_settings, sdk_events
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.file_storage import ENGINES, storage_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream

KEY_A, KEY_B = "sk-fs-tenant-a", "sk-fs-tenant-b"
# The answer to QUESTION is in exactly one document (volcano.md).
DOCS = {
    "volcano.md": "Volcanoes: magma rises through the crust. Basalt forms when lava cools "
                  "quickly at the surface after an eruption.",
    "baking.txt": "Bread baking: knead the dough, let the yeast rise, bake the loaf in a hot "
                  "oven until the crust is golden.",
    "orbits.txt": "Orbits: planets orbit the sun; gravity bends each planet's path into an "
                  "ellipse.",
}
QUESTION = "how does basalt form when lava cools"


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, upstream: ScriptedUpstream,
            embeddings: EmbeddingServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    """A gateway on one engine: local (SQLite) or AWS (DynamoDB, S3, S3 Vectors)."""
    tmp = tmp_path_factory.mktemp("file_search")
    with storage_settings(request.param, tmp) as storage:
        settings = e2e_settings(upstream, tmp / "gateway.db", api_keys=(KEY_A, KEY_B),
                                embedding_url=embeddings.base_url,
                                embedding_model="hashing-384", **storage)
        with GatewayServer(settings) as server:
            yield server


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: ScriptedUpstream) -> None:
    """Each test starts with the upstream's scripts unplayed (the suite runs once per engine,
    and a ``times=1`` script is counted per marker)."""
    upstream.reset()


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0, timeout=30) as c:
        yield c


def upload(client: OpenAI, store_id: str, name: str, text: str,
           attributes: dict[str, Any] | None = None) -> str:
    done = client.vector_stores.files.upload_and_poll(
        vector_store_id=store_id, file=(name, text.encode()), poll_interval_ms=50)
    assert done.status == "completed", done.last_error
    if attributes:
        client.vector_stores.files.update(done.id, vector_store_id=store_id,
                                          attributes=attributes)
    return done.id


@pytest.fixture(scope="module")
def library(alice: OpenAI) -> dict[str, str]:
    """A store with the three documents: filename -> file id (and "store" -> its id)."""
    store = alice.vector_stores.create(name="library")
    found = {name: upload(alice, store.id, name, text, {"topic": name.split(".")[0]})
             for name, text in DOCS.items()}
    return {**found, "store": store.id}


def searching(marker: str, answer: str, queries: list[str] | None = None) -> str:
    """The model calls file_search once with ``queries``, then answers ``answer``."""
    args = json.dumps({"queries": queries or [QUESTION]})
    return (f"[[script:tool names=file_search args='{args}' times=1 then=text "
            f"text=\"{answer}\" key={marker}]] {marker}")


def tool(library: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"type": "file_search", "vector_store_ids": [library["store"]], **extra}


def calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in response["output"] if i["type"] == "file_search_call"]


def model_read(upstream: ScriptedUpstream, marker: str) -> dict[str, Any]:
    """The tool message the model got back in its second turn."""
    second = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    return second["messages"][-1]


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False])
def test_the_document_holding_the_answer_is_cited(
        alice: OpenAI, upstream: ScriptedUpstream, library: dict[str, str], stream: bool) -> None:
    marker = f"cite-{stream}"
    text = "Basalt forms when lava cools quickly [^1]. Unrelated [^9]."
    kwargs: Any = {"model": "m", "input": searching(marker, text),
                   "tools": [tool(library, max_num_results=3)]}
    if stream:
        events = sdk_events(alice.responses.create(stream=True, **kwargs))
        check_stream(events)
        response = events[-1]["response"]
        kinds = [e["type"] for e in events]
        at = kinds.index("response.file_search_call.in_progress")
        assert kinds[at - 1:at + 4] == [
            "response.output_item.added", "response.file_search_call.in_progress",
            "response.file_search_call.searching", "response.file_search_call.completed",
            "response.output_item.done"]
        added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
        assert [(e["annotation_index"], e["annotation"]["filename"]) for e in added] == [
            (0, "volcano.md")]
    else:
        response = check_response(alice.responses.create(**kwargs))
    [call] = calls(response)
    assert call["id"].startswith("fs_") and call["status"] == "completed"
    assert call["queries"] == [QUESTION]
    assert call.get("results") is None  # not asked for in ``include``
    part = response["output"][-1]["content"][0]
    assert part["text"] == text
    # [^1] is the best passage (volcano.md's); [^9] names no passage: left alone.
    assert part["annotations"] == [{"type": "file_citation", "file_id": library["volcano.md"],
                                    "filename": "volcano.md", "index": text.index("[^1]")}]
    read = model_read(upstream, marker)
    assert read["role"] == "tool" and read["tool_call_id"] == call["id"]
    assert read["content"].startswith(f"3 passage(s) for {QUESTION!r}:")
    assert "[^1] from 'volcano.md'" in read["content"]
    assert "Basalt forms when lava cools" in read["content"]


def test_results_only_when_included(alice: OpenAI, library: dict[str, str]) -> None:
    response = check_response(alice.responses.create(
        model="m", input=searching("with-results", "Done."), tools=[tool(library)],
        include=["file_search_call.results"]))
    [call] = calls(response)
    results = call["results"]
    assert next(r["filename"] for r in results) == "volcano.md"
    assert {r["filename"] for r in results} == set(DOCS)
    first = results[0]
    assert first["file_id"] == library["volcano.md"]
    assert first["attributes"] == {"topic": "volcano"}
    assert "Basalt forms" in first["text"] and 0 < first["score"] <= 1
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)


def test_options_reach_the_search(alice: OpenAI, upstream: ScriptedUpstream,
                                  library: dict[str, str]) -> None:
    # filters: volcano.md left out; max_num_results: one passage.
    response = check_response(alice.responses.create(
        model="m", input=searching("filtered", "Done."), include=["file_search_call.results"],
        tools=[tool(library, max_num_results=1,
                    filters={"type": "ne", "key": "topic", "value": "volcano"})]))
    [call] = calls(response)
    assert len(call["results"]) == 1 and call["results"][0]["filename"] != "volcano.md"
    # score_threshold 1: nothing is that close; the model is told so.
    response = check_response(alice.responses.create(
        model="m", input=searching("threshold", "Done."), include=["file_search_call.results"],
        tools=[tool(library, ranking_options={"ranker": "auto", "score_threshold": 1.0})]))
    [call] = calls(response)
    assert call["status"] == "completed" and call["results"] == []
    assert model_read(upstream, "threshold")["content"].startswith("No passage")
    # hybrid weights: the keyword half alone still finds the one document with the words.
    response = check_response(alice.responses.create(
        model="m", input=searching("hybrid", "Done.", ["basalt"]),
        include=["file_search_call.results"],
        tools=[tool(library, ranking_options={
            "hybrid_search": {"embedding_weight": 0, "text_weight": 1}})]))
    [call] = calls(response)
    assert call["results"][0]["filename"] == "volcano.md" and call["results"][0]["score"] > 0


def test_several_stores_are_merged(alice: OpenAI, library: dict[str, str]) -> None:
    other = alice.vector_stores.create(name="other")
    fid = upload(alice, other.id, "geology.md", "Basalt is a volcanic rock; lava cools into "
                 "basalt when it forms at the surface.")
    response = check_response(alice.responses.create(
        model="m", input=searching("two-stores", "Done."), include=["file_search_call.results"],
        tools=[{"type": "file_search", "vector_store_ids": [library["store"], other.id],
                "max_num_results": 2}]))
    [call] = calls(response)
    assert {r["file_id"] for r in call["results"]} == {library["volcano.md"], fid}


@pytest.mark.parametrize("whose", ["missing", "other tenant"])
def test_unknown_store_is_a_404_before_the_model(
        alice: OpenAI, bob: OpenAI, upstream: ScriptedUpstream, library: dict[str, str],
        whose: str) -> None:
    store_id = "vs_" + "0" * 48 if whose == "missing" else library["store"]
    client = alice if whose == "missing" else bob
    marker = f"404-{whose}"
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="m", input=searching(marker, "x"), tools=[
            {"type": "file_search", "vector_store_ids": [store_id]}])
    error = caught.value.body
    assert error["message"] == f"No vector store found with id '{store_id}'."
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "tools[0].vector_store_ids"
    assert not [b for b in upstream.requests if marker in str(b["messages"])]


@pytest.mark.parametrize(("extra", "param"), [
    ({"max_num_results": 51}, "tools[0].max_num_results"),
    ({"ranking_options": {"ranker": "fastest"}}, "tools[0].ranking_options.ranker"),
    ({"ranking_options": {"score_threshold": 2}}, "tools[0].ranking_options.score_threshold"),
    ({"filters": {"type": "eq", "key": "topic"}}, "tools[0].filters.value"),
    # issue 40: a filter's size is bounded as the search endpoint's (GATEWAY_MAX_FILTER_*)
    ({"filters": {"type": "nin", "key": "topic", "value": [str(i) for i in range(1001)]}},
     "tools[0].filters.value"),
    ({"filters": {"type": "or", "filters": [{"type": "eq", "key": "a", "value": 1}] * 64}},
     "tools[0].filters.filters"),
])
def test_bad_options_are_400s(alice: OpenAI, library: dict[str, str], extra: dict[str, Any],
                              param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        alice.responses.create(model="m", input="x", tools=[tool(library, **extra)])
    assert caught.value.body["param"] == param


@pytest.mark.parametrize(("extra", "param", "code", "message"), [
    # a wrong JSON type is named as OpenAI names it, never by Python (True, None, '5')
    ({"max_num_results": True}, "tools[0].max_num_results", "invalid_type",
     "Invalid type for 'tools[0].max_num_results': expected an integer, but got a boolean "
     "instead."),
    ({"max_num_results": "5"}, "tools[0].max_num_results", "invalid_type",
     "Invalid type for 'tools[0].max_num_results': expected an integer, but got a string "
     "instead."),
    ({"ranking_options": {"ranker": True}}, "tools[0].ranking_options.ranker", "invalid_type",
     "Invalid type for 'tools[0].ranking_options.ranker': expected one of 'none', 'auto', or "
     "'default-2024-11-15', but got a boolean instead."),
    ({"ranking_options": {"ranker": "best"}}, "tools[0].ranking_options.ranker", "invalid_value",
     "Invalid value: 'best'. Supported values are: 'none', 'auto', and 'default-2024-11-15'."),
    ({"ranking_options": {"score_threshold": "0.5"}},
     "tools[0].ranking_options.score_threshold", "invalid_type",
     "Invalid type for 'tools[0].ranking_options.score_threshold': expected a decimal, but got "
     "a string instead."),
    ({"ranking_options": {"score_threshold": 2}}, "tools[0].ranking_options.score_threshold",
     "decimal_above_max_value", "Invalid 'tools[0].ranking_options.score_threshold': decimal "
     "above maximum value. Expected a value <= 1, but got 2 instead."),
    # hybrid_search that is no object was read as no hybrid search at all
    ({"ranking_options": {"hybrid_search": False}}, "tools[0].ranking_options.hybrid_search",
     "invalid_type", "Invalid type for 'tools[0].ranking_options.hybrid_search': expected an "
     "object, but got a boolean instead."),
    ({"ranking_options": {"hybrid_search": {"embedding_weight": 1}}},
     "tools[0].ranking_options.hybrid_search.text_weight", "missing_required_parameter",
     "Missing required parameter: 'tools[0].ranking_options.hybrid_search.text_weight'."),
    ({"filters": {"type": None, "key": "a", "value": 1}}, "tools[0].filters.type",
     "missing_required_parameter", "Missing required parameter: 'tools[0].filters.type'."),
    ({"filters": {"type": "like", "key": "a", "value": 1}}, "tools[0].filters.type",
     "invalid_value", "Invalid value: 'like'. Supported values are: 'eq', 'ne', 'gt', 'gte', "
     "'lt', 'lte', 'in', 'nin', 'and', and 'or'."),
    ({"filters": {"type": "eq", "key": 5, "value": 1}}, "tools[0].filters.key", "invalid_type",
     "Invalid type for 'tools[0].filters.key': expected a string, but got an integer instead."),
    ({"filters": {"type": "eq", "key": "a"}}, "tools[0].filters.value",
     "missing_required_parameter", "Missing required parameter: 'tools[0].filters.value'."),
])
def test_option_mistakes_in_openais_words(alice: OpenAI, library: dict[str, str],
                                          extra: dict[str, Any], param: str, code: str,
                                          message: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        alice.responses.create(model="m", input="x", tools=[tool(library, **extra)])
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"], error["message"]) == (param, code, message)


def test_huge_hybrid_weights_still_rank(alice: OpenAI, library: dict[str, str]) -> None:
    """Two weights near the float maximum summed to inf: every score came out 0, below any
    threshold."""
    response = alice.responses.create(
        model="m", input=searching("fs-huge-weights", "Done."),
        include=["file_search_call.results"],
        tools=[tool(library, ranking_options={"score_threshold": 0.01, "hybrid_search": {
            "embedding_weight": 1e308, "text_weight": 1e308}})])
    results = calls(response.model_dump())[0]["results"]
    assert results and all(0 <= r["score"] <= 1 for r in results)


def test_missing_vector_store_ids_is_a_400(alice: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        alice.responses.create(model="m", input="x", tools=[{"type": "file_search"}])
    assert caught.value.body["param"] == "tools[0].vector_store_ids"
    assert caught.value.body["code"] == "missing_required_parameter"


def test_max_tool_calls_stops_offering_the_tool(
        alice: OpenAI, upstream: ScriptedUpstream, library: dict[str, str]) -> None:
    marker = "bounded"
    response = check_response(alice.responses.create(
        model="m", input=searching(marker, "Done."), tools=[tool(library)], max_tool_calls=1))
    assert len(calls(response)) == 1
    second = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    assert "tools" not in second  # past max_tool_calls the model answers with what it has


@pytest.mark.slow
def test_a_failed_search_is_the_items_failure(
        alice: OpenAI, upstream: ScriptedUpstream, library: dict[str, str]) -> None:
    store = alice.vector_stores.create(name="short-lived")
    upload(alice, store.id, "a.txt", "Basalt and lava.")
    marker = "deleted-meanwhile"
    # The store exists when the response starts; the scripted model's first turn is slow
    # enough to delete it before the search runs.
    args = json.dumps({"queries": ["basalt"]})
    script = (f"[[script:tool names=file_search args='{args}' times=1 then=text text=ok "
              f"first_delay=1 key={marker}]] {marker}")
    stream = alice.responses.create(model="m", input=script, stream=True, tools=[
        {"type": "file_search", "vector_store_ids": [store.id]}])
    events = []
    for event in stream:
        events.append(event.to_dict(mode="json"))
        if event.type == "response.in_progress":
            alice.vector_stores.delete(store.id)
    check_stream(events)
    [call] = calls(events[-1]["response"])
    assert call["status"] == "failed"
    assert "response.file_search_call.completed" not in [e["type"] for e in events]
    read = model_read(upstream, marker)
    assert read["content"].startswith("The file search failed: No vector store found")


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["not_json", "nan", "drop"])
def test_an_embedding_failure_is_the_calls_failure(
        alice: OpenAI, upstream: ScriptedUpstream, embeddings: EmbeddingServer,
        library: dict[str, str], fault: str) -> None:
    """The embedding model fails the search's query (non-JSON, NaN, every attempt's
    connection dropped): that file_search_call is ``failed`` and the model goes on to answer;
    the response completes."""
    marker = f"embedding-down-{fault}"
    embeddings.fail(*[fault] * 8, word="obsidian")  # more drops than the retries
    try:
        response = check_response(alice.responses.create(
            model="m", input=searching(marker, "Answered without it.", ["obsidian glass"]),
            tools=[tool(library)]))
    finally:
        embeddings.fail()
    assert response["status"] == "completed"
    [call] = calls(response)
    assert call["status"] == "failed"
    assert response["output"][-1]["content"][0]["text"] == "Answered without it."
    read = model_read(upstream, marker)
    assert read["content"].startswith("The file search failed: The embedding model failed")


def test_tool_choice_forces_the_search(alice: OpenAI, upstream: ScriptedUpstream,
                                       library: dict[str, str]) -> None:
    marker = "forced"
    check_response(alice.responses.create(
        model="m", input=searching(marker, "Done."), tools=[tool(library)],
        tool_choice={"type": "file_search"}))
    first = next(b for b in upstream.requests if marker in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "file_search"}}


def test_a_store_still_ingesting_searches_what_is_ready(
        alice: OpenAI, embeddings: EmbeddingServer) -> None:
    store = alice.vector_stores.create(name="ingesting")
    ready = upload(alice, store.id, "ready.txt", "Basalt forms when lava cools.")
    embeddings.stall("zeolite")  # the pending file's chunks wait; the query does not
    try:
        pending = alice.files.create(file=("pending.txt", b"Basalt zeolite lava cools."),
                                     purpose="assistants")
        alice.vector_stores.files.create(vector_store_id=store.id, file_id=pending.id)
        response = check_response(alice.responses.create(
            model="m", input=searching("ingesting", "Done.", ["basalt"]),
            include=["file_search_call.results"],
            tools=[{"type": "file_search", "vector_store_ids": [store.id]}]))
        status = alice.vector_stores.files.retrieve(pending.id, vector_store_id=store.id).status
    finally:
        embeddings.resume()
    [call] = calls(response)
    assert status == "in_progress"
    assert call["status"] == "completed"
    assert [r["file_id"] for r in call["results"]] == [ready]


def test_background_response_searches_and_cites(alice: OpenAI,
                                                library: dict[str, str]) -> None:
    text = "Lava cools into basalt [^1]."
    created = alice.responses.create(model="m", input=searching("background", text),
                                     tools=[tool(library)], background=True)
    deadline = time.monotonic() + 20
    response = alice.responses.retrieve(created.id)
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        response = alice.responses.retrieve(created.id)
    data = check_response(response)
    assert data["status"] == "completed"
    [call] = calls(data)
    assert call["status"] == "completed"
    assert data["output"][-1]["content"][0]["annotations"] == [
        {"type": "file_citation", "file_id": library["volcano.md"], "filename": "volcano.md",
         "index": text.index("[^1]")}]


def test_a_later_turn_reads_the_earlier_search(alice: OpenAI, upstream: ScriptedUpstream,
                                               library: dict[str, str]) -> None:
    conversation = alice.conversations.create()
    first = check_response(alice.responses.create(
        model="m", input=searching("conv-1", "Basalt [^1]."), tools=[tool(library)],
        include=["file_search_call.results"], conversation=conversation.id))
    [call] = calls(first)
    check_response(alice.responses.create(
        model="m", input="conv-2 and then?", tools=[tool(library)],
        conversation=conversation.id))
    later = [b for b in upstream.requests if "conv-2" in str(b["messages"])][-1]["messages"]
    asked = [m for m in later if m.get("tool_calls")]
    assert asked[0]["tool_calls"][0]["id"] == call["id"]
    assert json.loads(asked[0]["tool_calls"][0]["function"]["arguments"]) == {
        "queries": [QUESTION]}
    answer = next(m for m in later if m.get("role") == "tool")
    # The passages the model read then, kept with the response, are what it reads again.
    read = next(m for b in upstream.requests if "conv-1" in str(b["messages"])
                for m in b["messages"] if m.get("role") == "tool")["content"]
    assert "[^1] from 'volcano.md'" in read and "Volcanoes: magma rises" in read
    assert answer["content"] == read


@pytest.mark.slow
def test_input_tokens_accepts_the_tool(alice: OpenAI, library: dict[str, str]) -> None:
    """``input_tokens`` reads a body as a create does: a hosted tool the gateway runs is not
    "not supported" there (it was a 400)."""
    counted = alice.responses.input_tokens.count(
        model="scripted-model", input="how does basalt form?", tools=[tool(library)])
    assert counted.input_tokens > 0

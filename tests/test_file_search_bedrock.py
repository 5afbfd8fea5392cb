"""file_search with GATEWAY_BACKEND=bedrock (issue 31): the fake Bedrock runtime (the real AWS
event-stream wire format, tests/helpers/eventstream_server.py) asks for the search with a
toolUse block, reads the passages as a toolResult, and its answer's marker is cited. Embeddings
come from the DETERMINISTIC HASHING EMBEDDER of tests/helpers/embedding_server.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.helpers.e2e import check_stream
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.test_e2e_bedrock import NOVA, bedrock_settings, converse_stream, text, tool
from tests.test_file_search import DOCS, QUESTION, upload

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


def test_bedrock_model_searches_and_cites(fake: FakeBedrock,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    db = tmp_path_factory.mktemp("fs-bedrock") / "gateway.db"
    with EmbeddingServer().running() as embeddings, GatewayServer(bedrock_settings(
            fake, db, embedding_url=embeddings.base_url, embedding_model="hashing-384",
    )) as gateway, OpenAI(base_url=gateway.base_url, api_key="sk-x", max_retries=0) as client:
        store = client.vector_stores.create(name="docs")
        ids = {name: upload(client, store.id, name, body) for name, body in DOCS.items()}
        fake.stream(NOVA, converse_stream(
            tool("tooluse_fs1", "file_search", '{"queries": ["', QUESTION, '"]}'),
            stop="tool_use"))
        answer = "Basalt forms as lava cools [^1]."
        embeddings.stall(QUESTION)  # the search waits: the next turn's answer is set first
        events = []
        stream = client.responses.create(
            model=NOVA, input="How does basalt form?", stream=True,
            tools=[{"type": "file_search", "vector_store_ids": [store.id]}])
        for event in stream:
            events.append(event.to_dict(mode="json"))
            if event.type == "response.file_search_call.searching":
                fake.stream(NOVA, converse_stream(text(answer)))
                embeddings.resume()
        check_stream(events)
        response = events[-1]["response"]
        assert [i["type"] for i in response["output"]] == ["file_search_call", "message"]
        assert response["output"][-1]["content"][0]["annotations"] == [
            {"type": "file_citation", "file_id": ids["volcano.md"], "filename": "volcano.md",
             "index": answer.index("[^1]")}]
        second = fake.requests_for(NOVA)[-1].body["messages"]
        [use] = [b["toolUse"] for b in second[1]["content"] if "toolUse" in b]
        assert use["name"] == "file_search" and use["input"] == {"queries": [QUESTION]}
        [result] = [b["toolResult"] for b in second[2]["content"] if "toolResult" in b]
        assert "[^1] from 'volcano.md'" in result["content"][0]["text"]

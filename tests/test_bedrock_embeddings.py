"""Vector stores embedded by Amazon Bedrock (GATEWAY_EMBEDDING_BACKEND=bedrock) through
InvokeModel, against the fake Bedrock (tests/helpers/eventstream_server.py) answering Titan
Text Embeddings v2 and Cohere Embed with the deterministic hashing embedder of
tests/helpers/embedding_server.py; the request bodies are checked as Bedrock checks them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from responses_gateway.config import Settings, SettingsError, settings_from_env
from tests.helpers.embedding_server import hashing_vector
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer

pytestmark = pytest.mark.slow

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"
DOCS = {"volcano.md": "Magma rises; lava flows and ash clouds follow an eruption.",
        "baking.txt": "Knead the dough, let the yeast rise, bake the loaf in the oven.",
        "orbits.txt": "Planets orbit the sun; gravity bends each path into an ellipse."}


def titan(body: dict[str, Any]) -> dict[str, Any]:
    if set(body) - {"inputText", "dimensions", "normalize", "embeddingTypes"}:
        raise ValueError(f"extraneous key(s) {sorted(set(body) - {'inputText'})}")
    if not isinstance(body.get("inputText"), str) or not body["inputText"]:
        raise ValueError("inputText: a non-empty string is required")
    vector = hashing_vector(body["inputText"])
    return {"embedding": vector, "inputTextTokenCount": len(body["inputText"].split()),
            "embeddingsByType": {"float": vector}}


def cohere(body: dict[str, Any]) -> dict[str, Any]:
    texts = body.get("texts")
    if not isinstance(texts, list) or not 1 <= len(texts) <= 96:
        raise ValueError("texts: between 1 and 96 strings")
    if body.get("input_type") not in ("search_document", "search_query", "classification",
                                      "clustering"):
        raise ValueError("input_type is required")
    return {"id": "emb-1", "texts": texts, "response_type": "embeddings_by_type",
            "embeddings": {"float": [hashing_vector(t) for t in texts]}}


@pytest.fixture(scope="module")
def bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        fake.answer_with(TITAN, titan)
        fake.answer_with(COHERE, cohere)
        yield fake


@pytest.fixture(autouse=True)
def dummy_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    use_dummy_aws(monkeypatch)


def _gateway(bedrock: FakeBedrock, tmp: Path, model: str, batch: int = 64) -> GatewayServer:
    return GatewayServer(Settings(
        upstream_url="http://127.0.0.1:9/v1", store=f"sqlite:{tmp / 'gateway.db'}",
        embedding_backend="bedrock", embedding_model=model, embedding_batch=batch,
        bedrock_region="us-east-1", bedrock_endpoint_url=bedrock.url, max_retries=0))


def _library(client: OpenAI) -> str:
    vs = client.vector_stores.create(name="library")
    for name, text in DOCS.items():
        f = client.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                       file=(name, text.encode()),
                                                       poll_interval_ms=50)
        assert f.status == "completed", f.last_error
    return vs.id


def _finds_each(client: OpenAI, store_id: str) -> None:
    for query, expected in (("lava eruption magma", "volcano.md"),
                            ("knead dough yeast oven", "baking.txt"),
                            ("planets orbit gravity", "orbits.txt")):
        hit = client.vector_stores.search(store_id, query=query).data[0]
        assert hit.filename == expected, query


@pytest.mark.parametrize("model", [TITAN, COHERE])
def test_each_query_finds_its_own_document(bedrock: FakeBedrock, tmp_path: Path,
                                           model: str) -> None:
    with _gateway(bedrock, tmp_path, model, batch=2) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        before = len(bedrock.requests_for(model))
        store_id = _library(client)
        _finds_each(client, store_id)
    sent = [r for r in bedrock.requests_for(model)[before:] if r.operation == "invoke"]
    assert sent, "no InvokeModel request reached Bedrock"
    if model == TITAN:
        assert {r.body["inputText"] for r in sent} >= set(DOCS.values())
        assert all(r.body["normalize"] is True for r in sent)
    else:
        kinds = [r.body["input_type"] for r in sent]
        assert kinds[:3] == ["search_document"] * 3  # the documents, one batch each
        assert kinds[3:] == ["search_query"] * 3  # then each search's query
        assert all(len(r.body["texts"]) <= 2 for r in sent)  # GATEWAY_EMBEDDING_BATCH


def test_bedrock_errors_fail_the_file_and_the_search(bedrock: FakeBedrock,
                                                     tmp_path: Path) -> None:
    broken = "cohere.embed-multilingual-v3"
    bedrock.error(broken, 400, "ValidationException", "Malformed input request")
    with _gateway(bedrock, tmp_path, broken) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        vs = client.vector_stores.create(name="broken")
        f = client.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                       file=("a.txt", b"some words"),
                                                       poll_interval_ms=50)
        assert f.status == "failed" and f.last_error is not None
        assert "ValidationException" in f.last_error.message

    def documents_only(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("input_type") == "search_query":
            raise ValueError("Malformed input request")
        return cohere(body)

    bedrock.answer_with(broken, documents_only)
    (tmp_path / "2").mkdir()
    with _gateway(bedrock, tmp_path / "2", broken) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        vs = client.vector_stores.create(name="queries fail")
        f = client.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                       file=("a.txt", b"some words"),
                                                       poll_interval_ms=50)
        assert f.status == "completed"
        with pytest.raises(openai.APIStatusError) as caught:
            client.vector_stores.search(vs.id, query="words")
        assert caught.value.status_code == 502
        assert caught.value.body["code"] == "embedding_failed"


def test_nan_from_bedrock_fails_the_file_and_is_not_cached(bedrock: FakeBedrock,
                                                          tmp_path: Path) -> None:
    """Bedrock's answer passes the same check as an OpenAI-compatible one: a vector holding
    NaN fails the file with that reason; the same text then embeds afresh."""
    model = "amazon.titan-embed-text-v1"
    poisoned = {"on": True}

    def nan_once(body: dict[str, Any]) -> dict[str, Any]:
        answer = titan(body)
        if poisoned["on"]:
            answer["embedding"] = answer["embeddingsByType"]["float"] = [float("nan")] * 384
        return answer

    bedrock.answer_with(model, nan_once)
    with _gateway(bedrock, tmp_path, model) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        vs = client.vector_stores.create(name="nan")
        f = client.vector_stores.files.upload_and_poll(
            vector_store_id=vs.id, file=("a.txt", b"Pumice floats."), poll_interval_ms=50)
        assert f.status == "failed" and f.last_error is not None
        assert "NaN or infinity" in f.last_error.message
        poisoned["on"] = False
        g = client.vector_stores.files.upload_and_poll(
            vector_store_id=vs.id, file=("b.txt", b"Pumice floats."), poll_interval_ms=50)
        assert g.status == "completed", g.last_error
        assert client.vector_stores.search(vs.id, query="pumice").data[0].score > 0.5


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("GATEWAY_EMBEDDING_BACKEND", "bedrock")
    assert settings_from_env().embedding_model == TITAN
    monkeypatch.setenv("GATEWAY_EMBEDDING_MODEL", "text-embedding-3-small")
    with pytest.raises(SettingsError, match="GATEWAY_EMBEDDING_MODEL"):
        settings_from_env()
    monkeypatch.setenv("GATEWAY_EMBEDDING_RETRIES", "5")
    monkeypatch.setenv("GATEWAY_EMBEDDING_BACKOFF_SECONDS", "0.25")
    monkeypatch.delenv("GATEWAY_EMBEDDING_MODEL")
    read = settings_from_env()
    assert (read.embedding_retries, read.embedding_backoff_seconds) == (5, 0.25)
    monkeypatch.setenv("GATEWAY_EMBEDDING_RETRIES", "many")
    with pytest.raises(SettingsError, match="GATEWAY_EMBEDDING_RETRIES"):
        settings_from_env()
    monkeypatch.setenv("GATEWAY_EMBEDDING_RETRIES", "1")
    monkeypatch.setenv("GATEWAY_EMBEDDING_BACKEND", "nonsense")
    with pytest.raises(SettingsError, match="GATEWAY_EMBEDDING_BACKEND"):
        settings_from_env()

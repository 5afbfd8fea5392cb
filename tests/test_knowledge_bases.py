"""Bring your own Bedrock Knowledge Base (GATEWAY_KNOWLEDGE_BASES) through openai-python,
unmodified: the mapped vector store is retrieved and searched (bedrock-agent-runtime Retrieve
on tests/helpers/knowledge_base_server.py, filters translated), every write is a 400, and a
tenant the setting leaves out gets the 404 of a missing store."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI
from openai.types import VectorStore, VectorStoreSearchResponse

from responses_gateway.config import Settings, SettingsError, settings_from_env
from responses_gateway.vectors.knowledge_bases import to_bedrock_filter
from tests.helpers.eventstream_server import use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.knowledge_base_server import FakeKnowledgeBases

KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"
STORE, PRIVATE = "vs_handbook", "vs_private"
DOCS = [
    {"text": "Expense reports are due on the fifth of each month.",
     "uri": "s3://kb-docs/finance/expenses.md", "metadata": {"team": "finance", "year": 2024}},
    {"text": "Laptops are replaced every three years by the IT desk.",
     "uri": "s3://kb-docs/it/laptops.md", "metadata": {"team": "it", "year": 2022}},
    {"text": "Holiday requests go to your manager two weeks ahead.",
     "uri": "s3://kb-docs/hr/holidays.md", "metadata": {"team": "hr", "year": 2023}},
]


@pytest.fixture(scope="module")
def kb() -> Iterator[FakeKnowledgeBases]:
    with FakeKnowledgeBases({"KB12345678": DOCS, "KBPRIVATE1": DOCS[:1]}).running() as fake:
        yield fake


@pytest.fixture(scope="module")
def gateway(kb: FakeKnowledgeBases, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    from responses_gateway.api.auth import tenant_of_digest

    with pytest.MonkeyPatch.context() as patch:
        use_dummy_aws(patch)
        patch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME", kb.endpoint)
        tenant_a = tenant_of_digest(hashlib.sha256(KEY_A.encode()).digest())
        settings = Settings(
            upstream_url="http://127.0.0.1:9/v1",
            store=f"sqlite:{tmp_path_factory.mktemp('kb') / 'gateway.db'}",
            api_keys=(KEY_A, KEY_B), bedrock_region="us-east-1", max_retries=0,
            knowledge_bases=settings_from_env({
                "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1",
                "GATEWAY_KNOWLEDGE_BASES": f'{{"{STORE}": "KB12345678", "{PRIVATE}": '
                f'{{"knowledge_base_id": "KBPRIVATE1", "name": "Private", '
                f'"tenants": ["{tenant_a}"]}}}}'}).knowledge_bases)
        with GatewayServer(settings) as server:
            yield server


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as client:
        yield client


@pytest.mark.slow
def test_retrieve_and_search(alice: OpenAI, kb: FakeKnowledgeBases) -> None:
    store = alice.vector_stores.retrieve(STORE)
    raw = store.model_dump()
    assert VectorStore.model_validate(raw) == store
    assert store.id == STORE and store.status == "completed"
    page = alice.vector_stores.search(STORE, query="laptops replaced IT desk",
                                      max_num_results=2)
    first = page.data[0]
    assert VectorStoreSearchResponse.model_validate(first.model_dump()) == first
    assert first.filename == "laptops.md" and first.file_id == "s3://kb-docs/it/laptops.md"
    assert first.attributes == {"team": "it", "year": 2022}
    assert "three years" in first.content[0].text and len(page.data) == 2
    kb_id, body = kb.requests[-1]
    assert kb_id == "KB12345678"
    assert body["retrievalConfiguration"]["vectorSearchConfiguration"] == {
        "numberOfResults": 2}


def test_filters_become_retrieval_filters(alice: OpenAI, kb: FakeKnowledgeBases) -> None:
    page = alice.vector_stores.search(STORE, query="requests", filters={
        "type": "and", "filters": [{"type": "gte", "key": "year", "value": 2023},
                                   {"type": "ne", "key": "team", "value": "finance"}]})
    assert [r.filename for r in page.data] == ["holidays.md"]
    assert kb.requests[-1][1]["retrievalConfiguration"]["vectorSearchConfiguration"][
        "filter"] == {"andAll": [{"greaterThanOrEquals": {"key": "year", "value": 2023}},
                                 {"notEquals": {"key": "team", "value": "finance"}}]}
    single = alice.vector_stores.search(STORE, query="x", filters={
        "type": "or", "filters": [{"type": "in", "key": "team", "value": ["hr", "it"]}]})
    assert {r.filename for r in single.data} == {"holidays.md", "laptops.md"}
    assert to_bedrock_filter({"type": "or", "filters": [
        {"type": "eq", "key": "a", "value": 1}]}) == {"equals": {"key": "a", "value": 1}}


def test_writes_are_refused(alice: OpenAI) -> None:
    uploaded = alice.files.create(file=("a.txt", b"a"), purpose="assistants")
    for call in (lambda: alice.vector_stores.update(STORE, name="x"),
                 lambda: alice.vector_stores.delete(STORE),
                 lambda: alice.vector_stores.files.create(vector_store_id=STORE,
                                                          file_id=uploaded.id),
                 lambda: alice.vector_stores.file_batches.create(vector_store_id=STORE,
                                                                 file_ids=[uploaded.id])):
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert caught.value.body["code"] == "read_only_vector_store"
    assert alice.vector_stores.files.list(vector_store_id=STORE).data == []
    alice.files.delete(uploaded.id)


def test_a_store_for_some_tenants_is_missing_for_others(alice: OpenAI, bob: OpenAI) -> None:
    assert alice.vector_stores.retrieve(PRIVATE).name == "Private"
    assert alice.vector_stores.search(PRIVATE, query="expense").data
    for call in (lambda: bob.vector_stores.retrieve(PRIVATE),
                 lambda: bob.vector_stores.search(PRIVATE, query="expense")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert bob.vector_stores.search(STORE, query="holiday").data  # shared with every tenant


def test_settings() -> None:
    env = {"GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1"}
    assert settings_from_env(env).knowledge_bases == {}
    for bad in ('["KB1"]', '{"handbook": "KB12345678"}', '{"vs_a": "not a kb id!"}', "{"):
        with pytest.raises(SettingsError, match="GATEWAY_KNOWLEDGE_BASES"):
            settings_from_env({**env, "GATEWAY_KNOWLEDGE_BASES": bad})


def test_unknown_knowledge_base_is_a_502(tmp_path: Path, kb: FakeKnowledgeBases,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    use_dummy_aws(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME", kb.endpoint)
    settings = settings_from_env({"GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1",
                                  "GATEWAY_STORE": f"sqlite:{tmp_path / 'g.db'}",
                                  "GATEWAY_BEDROCK_REGION": "us-east-1",
                                  "GATEWAY_MAX_RETRIES": "0",
                                  "GATEWAY_KNOWLEDGE_BASES": '{"vs_gone": "KBGONE0000"}'})
    with GatewayServer(settings) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.vector_stores.search("vs_gone", query="x")
        assert caught.value.status_code == 502
        assert caught.value.body["code"] == "knowledge_base_failed"
        assert "ResourceNotFoundException" in caught.value.body["message"]

"""file_search over a vector store backed by a Bedrock Knowledge Base (GATEWAY_KNOWLEDGE_BASES)
through openai-python, unmodified: the model's query reaches bedrock-agent-runtime Retrieve
(tests/helpers/knowledge_base_server.py, its real wire format), the passages reach the model,
and the answer cites the document the Knowledge Base returned; a tenant the mapping leaves
out gets the 404 of a missing store before the model runs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from responses_gateway.config import settings_from_env
from tests.helpers.e2e import check_response, e2e_settings
from tests.helpers.eventstream_server import use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.knowledge_base_server import FakeKnowledgeBases
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_knowledge_bases import DOCS

KEY_A, KEY_B = "kb-fs-tenant-a", "kb-fs-tenant-b"
STORE, PRIVATE = "vs_handbook", "vs_private"
QUESTION = "when are laptops replaced"


@pytest.fixture(scope="module")
def kb() -> Iterator[FakeKnowledgeBases]:
    with FakeKnowledgeBases({"KB12345678": DOCS, "KBPRIVATE1": DOCS[:1]}).running() as fake:
        yield fake


@pytest.fixture(scope="module")
def gateway(kb: FakeKnowledgeBases, upstream: ScriptedUpstream,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    from responses_gateway.api.auth import tenant_of_digest

    with pytest.MonkeyPatch.context() as patch:
        use_dummy_aws(patch)
        patch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME", kb.endpoint)
        tenant_a = tenant_of_digest(hashlib.sha256(KEY_A.encode()).digest())
        mapping = settings_from_env({
            "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1",
            "GATEWAY_KNOWLEDGE_BASES": json.dumps({
                STORE: "KB12345678",
                PRIVATE: {"knowledge_base_id": "KBPRIVATE1", "name": "Private",
                          "tenants": [tenant_a]}})}).knowledge_bases
        settings = e2e_settings(upstream, tmp_path_factory.mktemp("kbfs") / "gateway.db",
                                api_keys=(KEY_A, KEY_B), bedrock_region="us-east-1",
                                knowledge_bases=mapping)
        with GatewayServer(settings) as server:
            yield server


def _client(gateway: GatewayServer, key: str) -> OpenAI:
    return OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


def test_the_knowledge_base_answers_and_is_cited(gateway: GatewayServer, kb: FakeKnowledgeBases,
                                                 upstream: ScriptedUpstream) -> None:
    args = json.dumps({"queries": [QUESTION]})
    script = (f"[[script:tool names=file_search args='{args}' times=1 then=text "
              f"text=\"Every three years [^1].\" key=kbfs-1]] kbfs-1")
    with _client(gateway, KEY_A) as client:
        response = client.responses.create(
            model="scripted-model", input=script,
            tools=[{"type": "file_search", "vector_store_ids": [STORE], "max_num_results": 2}],
            include=["file_search_call.results"])
    raw = response.model_dump(mode="json", exclude_unset=True)
    check_response(raw)
    [call] = [item for item in response.output if item.type == "file_search_call"]
    assert call.status == "completed" and call.queries == [QUESTION]
    assert call.results and call.results[0].filename == "laptops.md"
    assert call.results[0].file_id == "s3://kb-docs/it/laptops.md"
    kb_id, body = kb.requests[-1]
    assert kb_id == "KB12345678" and body["retrievalQuery"] == {"text": QUESTION}
    assert body["retrievalConfiguration"]["vectorSearchConfiguration"]["numberOfResults"] == 2
    # The model read the Knowledge Base's passage, and the answer cites its document.
    read = next(m for b in upstream.requests if "kbfs-1" in str(b["messages"])
                for m in b["messages"] if m.get("role") == "tool")["content"]
    assert "Laptops are replaced every three years" in read
    message = next(item for item in response.output if item.type == "message")
    [citation] = message.content[0].annotations
    assert citation.type == "file_citation"
    assert citation.file_id == "s3://kb-docs/it/laptops.md"
    assert citation.filename == "laptops.md"


def test_a_knowledge_base_the_tenant_may_not_read_is_a_404(
        gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    before = len(upstream.requests)
    with _client(gateway, KEY_B) as client, pytest.raises(openai.NotFoundError):
        client.responses.create(
            model="scripted-model", input="anything",
            tools=[{"type": "file_search", "vector_store_ids": [PRIVATE]}])
    assert len(upstream.requests) == before  # refused before the model ran

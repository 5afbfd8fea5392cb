"""The Vector Stores API through openai-python, unmodified, on both engines (one suite: local
SQLite, and AWS: DynamoDB on moto, vectors on a fake S3 Vectors speaking its wire format): stores,
files (upload_and_poll), batches, search with filters and ranking options, attribute updates,
paging, deletes, OpenAI's objects (validated against the SDK's types) and errors, tenant
isolation on every route.

Embeddings come from tests/helpers/embedding_server.py: a DETERMINISTIC HASHING EMBEDDER
served over the OpenAI embeddings API on 127.0.0.1 (not a trained model)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types import VectorStore, VectorStoreDeleted, VectorStoreSearchResponse
from openai.types.vector_stores import VectorStoreFile, VectorStoreFileBatch

from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.file_storage import ENGINES, gateway_on, storage_settings
from tests.helpers.gateway_server import GatewayServer

KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"
DOCS = {
    "volcano.md": "# Volcanoes\nMagma rises through the crust; lava flows and ash clouds "
                  "follow an eruption. Basalt forms when lava cools.",
    "baking.txt": "Bread baking: knead the dough, let the yeast rise, bake the loaf in a hot "
                  "oven until the crust is golden.",
    "orbits.html": "<html><head><style>p{}</style></head><body><h1>Orbits</h1><p>Planets "
                   "orbit the sun; gravity bends each planet's path into an ellipse.</p>"
                   "</body></html>",
}


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, embeddings: EmbeddingServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with gateway_on(request.param, tmp_path_factory.mktemp("vs"), api_keys=(KEY_A, KEY_B),
                    embedding_url=embeddings.base_url, embedding_model="hashing-384",
                    embedding_batch=2) as server:
        yield server


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as client:
        yield client


def _exact(model: Any, obj: Any) -> None:
    raw = obj.model_dump()
    assert model.model_validate(raw) == obj
    assert set(raw) <= set(model.model_fields), set(raw) - set(model.model_fields)


@pytest.fixture(scope="module")
def store(alice: OpenAI) -> VectorStore:
    vs = alice.vector_stores.create(name="library", metadata={"team": "docs"})
    for name, text in DOCS.items():
        f = alice.vector_stores.files.upload_and_poll(
            vector_store_id=vs.id, file=(name, text.encode()), poll_interval_ms=50)
        assert f.status == "completed", f.last_error
    alice.vector_stores.files.update(
        DOCS_ID(alice, vs.id, "volcano.md"), vector_store_id=vs.id,
        attributes={"topic": "geology", "year": 2021})
    alice.vector_stores.files.update(
        DOCS_ID(alice, vs.id, "baking.txt"), vector_store_id=vs.id,
        attributes={"topic": "food", "year": 2024})
    return alice.vector_stores.retrieve(vs.id)


def DOCS_ID(client: OpenAI, store_id: str, filename: str) -> str:
    for f in client.vector_stores.files.list(vector_store_id=store_id):
        if client.files.retrieve(f.id).filename == filename:
            return f.id
    raise AssertionError(filename)


@pytest.mark.slow
def test_store_object_and_counts(store: VectorStore) -> None:
    _exact(VectorStore, store)
    assert store.id.startswith("vs_") and store.status == "completed"
    assert store.file_counts.completed == 3 and store.file_counts.total == 3
    assert store.usage_bytes > 0 and store.metadata == {"team": "docs"}


def test_each_query_finds_its_own_document(alice: OpenAI, store: VectorStore) -> None:
    for query, expected in (("lava eruption magma", "volcano.md"),
                            ("knead dough yeast oven", "baking.txt"),
                            ("planets orbit gravity", "orbits.html")):
        page = alice.vector_stores.search(store.id, query=query, max_num_results=3)
        first = page.data[0]
        _exact(VectorStoreSearchResponse, first)
        assert first.filename == expected, (query, [(r.filename, r.score) for r in page.data])
        assert 0 <= first.score <= 1 and first.content[0].type == "text"
    orbit = alice.vector_stores.search(store.id, query="planets orbit").data[0]
    assert "<p>" not in orbit.content[0].text and "Planets orbit the sun" in orbit.content[0].text


def test_filters_comparison_and_compound(alice: OpenAI, store: VectorStore) -> None:
    def names(filters: Any) -> set[str]:
        page = alice.vector_stores.search(store.id, query="crust", filters=filters)
        return {r.filename for r in page.data}

    assert names({"type": "eq", "key": "topic", "value": "food"}) == {"baking.txt"}
    assert names({"type": "gte", "key": "year", "value": 2022}) == {"baking.txt"}
    assert names({"type": "or", "filters": [
        {"type": "eq", "key": "topic", "value": "geology"},
        {"type": "lt", "key": "year", "value": 2000}]}) == {"volcano.md"}
    assert names({"type": "and", "filters": [
        {"type": "in", "key": "topic", "value": ["food", "geology"]},
        {"type": "ne", "key": "year", "value": 2024}]}) == {"volcano.md"}
    assert names({"type": "nin", "key": "topic", "value": ["food"]}) == {"volcano.md",
                                                                        "orbits.html"}
    with pytest.raises(openai.BadRequestError):
        alice.vector_stores.search(store.id, query="x",
                                   filters={"type": "near", "key": "a", "value": 1})


def test_ranking_options(alice: OpenAI, store: VectorStore) -> None:
    none = alice.vector_stores.search(store.id, query="lava",
                                      ranking_options={"score_threshold": 1.0})
    assert none.data == []
    hybrid = alice.vector_stores.search(
        store.id, query="basalt", ranking_options={"ranker": "auto", "hybrid_search": {
            "embedding_weight": 1, "text_weight": 1}})  # type: ignore[typeddict-unknown-key]
    assert hybrid.data[0].filename == "volcano.md"
    with pytest.raises(openai.BadRequestError):
        alice.vector_stores.search(store.id, query="x", max_num_results=51)


def test_files_list_filter_paging_content(alice: OpenAI, store: VectorStore) -> None:
    listed = list(alice.vector_stores.files.list(vector_store_id=store.id, limit=1))
    assert len(listed) == 3
    for f in listed:
        _exact(VectorStoreFile, f)
        assert f.chunking_strategy is not None
        assert f.chunking_strategy.model_dump() == {"type": "static", "static": {
            "max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}
    assert len(alice.vector_stores.files.list(vector_store_id=store.id,
                                              filter="failed").data) == 0
    volcano = DOCS_ID(alice, store.id, "volcano.md")
    content = list(alice.vector_stores.files.content(volcano, vector_store_id=store.id))
    assert "Basalt forms" in content[0].text


def test_unchanged_chunks_are_not_embedded_again(alice: OpenAI,
                                                 embeddings: EmbeddingServer) -> None:
    vs = alice.vector_stores.create(name="again")
    text = b"Glaciers carve valleys; moraines mark where the ice stopped."
    f = alice.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                  file=("ice.txt", text), poll_interval_ms=50)
    embedded = list(embeddings.inputs)
    g = alice.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                  file=("ice2.txt", text), poll_interval_ms=50)
    assert f.status == g.status == "completed"
    assert embeddings.inputs == embedded  # the second file's chunk came from the cache
    alice.vector_stores.delete(vs.id)


def test_static_chunking_and_batches(alice: OpenAI) -> None:
    words = " ".join(f"word{i}" for i in range(500))
    uploaded = [alice.files.create(file=(f"w{i}.txt", words.encode()), purpose="assistants")
                for i in range(2)]
    vs = alice.vector_stores.create(name="batch")
    batch = alice.vector_stores.file_batches.create_and_poll(
        vs.id, file_ids=[u.id for u in uploaded], poll_interval_ms=50,
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 200,
                                                       "chunk_overlap_tokens": 50}})
    _exact(VectorStoreFileBatch, batch)
    assert batch.status == "completed" and batch.file_counts.completed == 2
    in_batch = list(alice.vector_stores.file_batches.list_files(batch.id, vector_store_id=vs.id))
    assert {f.id for f in in_batch} == {u.id for u in uploaded}
    chunks = list(alice.vector_stores.files.content(uploaded[0].id, vector_store_id=vs.id))
    assert len(chunks) == 3  # 500 pieces, windows of 200 every 150
    assert chunks[1].text.split()[0] == "word150"
    cancelled = alice.vector_stores.file_batches.cancel(batch.id, vector_store_id=vs.id)
    assert cancelled.status == "cancelled"
    with pytest.raises(openai.BadRequestError):
        alice.vector_stores.create(chunking_strategy={"type": "static", "static": {
            "max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0}})
    alice.vector_stores.delete(vs.id)


def test_unsupported_file_fails_with_last_error(alice: OpenAI) -> None:
    vs = alice.vector_stores.create(name="bad")
    f = alice.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                  file=("image.png", b"\x89PNG..."),
                                                  poll_interval_ms=50)
    assert f.status == "failed" and f.last_error is not None
    assert f.last_error.code == "unsupported_file"
    assert alice.vector_stores.retrieve(vs.id).file_counts.failed == 1
    alice.vector_stores.delete(vs.id)


def test_modify_list_delete_stores(alice: OpenAI) -> None:
    made = [alice.vector_stores.create(name=f"s{i}") for i in range(3)]
    changed = alice.vector_stores.update(made[0].id, name="renamed", metadata={"k": "v"},
                                         expires_after={"anchor": "last_active_at", "days": 2})
    assert changed.name == "renamed" and changed.expires_at == changed.last_active_at + 2 * 86400
    ids = [s.id for s in alice.vector_stores.list(limit=1)]
    assert {m.id for m in made} <= set(ids)
    for m in made:
        deleted = alice.vector_stores.delete(m.id)
        assert deleted == VectorStoreDeleted(id=m.id, object="vector_store.deleted",
                                             deleted=True)
    with pytest.raises(openai.NotFoundError) as caught:
        alice.vector_stores.retrieve(made[0].id)
    assert caught.value.body["message"] == f"No vector store found with id '{made[0].id}'."


def test_tenants_are_isolated_on_every_route(alice: OpenAI, bob: OpenAI,
                                             store: VectorStore, gateway: GatewayServer
                                             ) -> None:
    file_id = DOCS_ID(alice, store.id, "volcano.md")
    calls = [
        lambda: bob.vector_stores.retrieve(store.id),
        lambda: bob.vector_stores.update(store.id, name="x"),
        lambda: bob.vector_stores.search(store.id, query="lava"),
        lambda: bob.vector_stores.files.list(vector_store_id=store.id),
        lambda: bob.vector_stores.files.retrieve(file_id, vector_store_id=store.id),
        lambda: bob.vector_stores.files.update(file_id, vector_store_id=store.id,
                                               attributes={"a": 1}),
        lambda: bob.vector_stores.files.content(file_id, vector_store_id=store.id),
        lambda: bob.vector_stores.files.create(vector_store_id=store.id, file_id=file_id),
        lambda: bob.vector_stores.file_batches.create(vector_store_id=store.id,
                                                      file_ids=[file_id]),
        lambda: bob.vector_stores.files.delete(file_id, vector_store_id=store.id),
        lambda: bob.vector_stores.delete(store.id),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()
    # bob's own store cannot take alice's file either
    own = bob.vector_stores.create(name="bob", file_ids=[])
    with pytest.raises(openai.NotFoundError) as caught:
        bob.vector_stores.files.create(vector_store_id=own.id, file_id=file_id)
    assert caught.value.body["message"] == f"No such File object: {file_id}"
    assert store.id not in {s.id for s in bob.vector_stores.list()}
    assert alice.vector_stores.retrieve(store.id).file_counts.completed == 3
    answer = httpx.get(gateway.base_url + "/vector_stores")
    assert answer.status_code == 401


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_killed_mid_ingestion_is_finished_on_restart(embeddings: EmbeddingServer,
                                                     tmp_path: Path, engine: str) -> None:
    """A gateway stopped while a file is in progress (its embeddings call never answered):
    the next process on the same storage ingests it again; it ends completed."""
    with storage_settings(engine, tmp_path) as storage:
        _killed_and_restarted(embeddings, {
            **storage, "embedding_url": embeddings.base_url, "embedding_model": "hashing-384",
            "lease_seconds": 1.0})


def _killed_and_restarted(embeddings: EmbeddingServer, settings: dict[str, Any]) -> None:
    from responses_gateway.config import Settings

    embeddings.stall()
    with GatewayServer(Settings(upstream_url="http://127.0.0.1:9/v1", **settings)) as first:
        client = OpenAI(base_url=first.base_url, api_key="x", max_retries=0)
        vs = client.vector_stores.create(name="crash")
        f = client.vector_stores.files.upload(vector_store_id=vs.id,
                                              file=("late.txt", b"Tides follow the moon."))
        assert f.status == "in_progress"
        time.sleep(0.3)  # the ingestion task is waiting on the stalled embeddings call
        assert client.vector_stores.files.retrieve(
            f.id, vector_store_id=vs.id).status == "in_progress"
        first._server.force_exit = True  # stop without waiting for the ingestion task
    embeddings.resume()
    time.sleep(1.2)  # the first process's lease runs out
    with GatewayServer(Settings(upstream_url="http://127.0.0.1:9/v1", **settings)) as second:
        client = OpenAI(base_url=second.base_url, api_key="x", max_retries=0)
        deadline = time.monotonic() + 20
        while (done := client.vector_stores.files.retrieve(
                f.id, vector_store_id=vs.id)).status == "in_progress":
            assert time.monotonic() < deadline, "left in_progress after the restart"
            time.sleep(0.05)
        assert done.status == "completed"
        hit = client.vector_stores.search(vs.id, query="moon tides").data[0]
        assert hit.file_id == f.id


def test_aws_layout_vectors_in_s3_vectors(alice: OpenAI, store: VectorStore,
                                          gateway: GatewayServer) -> None:
    """On AWS a store's chunks are vectors of its own S3 Vectors index (key <file>#<i>,
    metadata file_id), and a filtered search asks S3 Vectors for the allowed files only."""
    if not gateway.settings.store.startswith("dynamodb:"):
        pytest.skip("the AWS layout")
    import boto3

    from responses_gateway.vectors.aws import index_name

    client = boto3.session.Session().client("s3vectors")
    bucket, index = gateway.settings.vector_bucket, index_name(store.id)
    keys = {v["key"] for v in client.list_vectors(vectorBucketName=bucket,
                                                   indexName=index)["vectors"]}
    volcano = DOCS_ID(alice, store.id, "volcano.md")
    assert f"{volcano}#0" in keys and len(keys) == 3
    got = client.get_vectors(vectorBucketName=bucket, indexName=index,
                             keys=[f"{volcano}#0"], returnMetadata=True)["vectors"]
    assert got[0]["metadata"] == {"file_id": volcano}
    hit = client.query_vectors(vectorBucketName=bucket, indexName=index, topK=1,
                               queryVector={"float32": [0.0] * 383 + [1.0]},
                               filter={"file_id": {"$in": [volcano]}}, returnMetadata=True)
    assert [v["key"] for v in hit["vectors"]] == [f"{volcano}#0"]
    # a removed file's vectors leave the index
    vs = alice.vector_stores.create(name="gone")
    f = alice.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                  file=("gone.txt", b"Short lived text."),
                                                  poll_interval_ms=50)
    assert client.list_vectors(vectorBucketName=bucket, indexName=index_name(vs.id))["vectors"]
    alice.vector_stores.files.delete(f.id, vector_store_id=vs.id)
    assert client.list_vectors(vectorBucketName=bucket,
                               indexName=index_name(vs.id))["vectors"] == []
    alice.vector_stores.delete(vs.id)
    with pytest.raises(client.exceptions.NotFoundException):
        client.get_index(vectorBucketName=bucket, indexName=index_name(vs.id))


class _FakeLambda:
    """Lambda's asynchronous Invoke for the worker: each event runs the real worker entry
    point (entry/lambda_worker.py) in a thread, one at a time, as a new invocation would."""

    def __init__(self) -> None:
        import threading

        self.events: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def invoke(self, FunctionName: str, InvocationType: str, Payload: bytes
               ) -> dict[str, Any]:
        import json
        import threading

        from responses_gateway.entry import lambda_worker

        assert InvocationType == "Event"
        event = json.loads(Payload)
        self.events.append(event)

        def run() -> None:
            with self._lock:
                self.results.append(lambda_worker.handler(event, None))

        threading.Thread(target=run, daemon=True).start()
        return {"StatusCode": 202}


@pytest.mark.slow
def test_ingestion_runs_in_the_worker_lambda(embeddings: EmbeddingServer, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With a worker function (AWS), the API process hands each file to the worker Lambda
    (event kind vector_store_file) instead of ingesting it itself."""
    from responses_gateway.config import Settings
    from responses_gateway.entry import lambda_worker
    from responses_gateway.platform import worker as dispatch

    fake = _FakeLambda()
    monkeypatch.setattr(dispatch, "_client", fake)
    monkeypatch.setattr(lambda_worker, "_vector_stores", None)
    with storage_settings("aws", tmp_path) as storage:
        settings = Settings(upstream_url="http://127.0.0.1:9/v1", worker_function="worker",
                            embedding_url=embeddings.base_url, embedding_model="hashing-384",
                            **storage)
        for name, value in (("GATEWAY_STORE", settings.store),
                            ("GATEWAY_FILES_BUCKET", settings.files_bucket),
                            ("GATEWAY_VECTOR_BUCKET", settings.vector_bucket),
                            ("GATEWAY_EMBEDDING_URL", embeddings.base_url),
                            ("GATEWAY_EMBEDDING_MODEL", "hashing-384"),
                            ("GATEWAY_UPSTREAM_URL", "http://127.0.0.1:9/v1")):
            monkeypatch.setenv(name, str(value))
        with GatewayServer(settings) as server:
            client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            vs = client.vector_stores.create(name="worker")
            f = client.vector_stores.files.upload(
                vector_store_id=vs.id, file=("w.txt", b"Comets have icy tails."))
            # Lambda took the event before the create answered (a Lambda process may be
            # frozen once it has answered)
            assert [e["file_id"] for e in fake.events] == [f.id]
            f = client.vector_stores.files.poll(f.id, vector_store_id=vs.id,
                                                poll_interval_ms=50)
            assert f.status == "completed"
            assert fake.events == [{"kind": "vector_store_file", "tenant": fake.events[0][
                "tenant"], "store_id": vs.id, "file_id": f.id}]
            deadline = time.monotonic() + 10
            while not fake.results and time.monotonic() < deadline:
                time.sleep(0.02)  # the worker returns just after writing the status
            assert fake.results == [{"file_id": f.id, "vector_store_id": vs.id,
                                     "status": "completed"}]
            assert client.vector_stores.search(vs.id, query="comets").data[0].file_id == f.id


def test_client_strings_are_bounded(alice: OpenAI, gateway: GatewayServer) -> None:
    """name and looked-up file ids past GATEWAY_MAX_NAME_CHARS (256), description past
    GATEWAY_MAX_DESCRIPTION_CHARS (512), metadata and attributes past OpenAI's bounds: 400
    naming the param on every create and update route, nothing stored."""
    def refused(call: Any, param: str, code: str = "string_above_max_length") -> None:
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert caught.value.body["param"] == param, caught.value.body
        assert caught.value.body["code"] == code
        assert caught.value.body["type"] == "invalid_request_error"

    before = {s.id for s in alice.vector_stores.list()}
    refused(lambda: alice.vector_stores.create(name="n" * 257), "name")
    refused(lambda: alice.vector_stores.create(name="n", extra_body={
        "description": "d" * 513}), "description")
    refused(lambda: alice.vector_stores.create(metadata={"k": "v" * 513}), "metadata",
            "invalid_value")
    refused(lambda: alice.vector_stores.create(file_ids=["f" * 257]), "file_ids[0]")
    assert {s.id for s in alice.vector_stores.list()} == before
    vs = alice.vector_stores.create(name="n" * 256, extra_body={"description": "d" * 512})
    assert vs.name == "n" * 256
    refused(lambda: alice.vector_stores.update(vs.id, name="n" * 257), "name")
    refused(lambda: alice.vector_stores.files.create(vs.id, file_id="f" * 257), "file_id")
    refused(lambda: alice.vector_stores.file_batches.create(vs.id, file_ids=["f" * 257]),
            "file_ids[0]")
    refused(lambda: alice.vector_stores.file_batches.create(
        vs.id, files=[{"file_id": "f" * 257}]), "files[0].file_id")  # type: ignore[list-item]
    f = alice.files.create(file=("a.txt", b"attributes"), purpose="assistants")
    refused(lambda: alice.vector_stores.files.create(vs.id, file_id=f.id,
                                                     attributes={"k" * 65: "v"}),
            "attributes", "invalid_value")
    attached = alice.vector_stores.files.create(vs.id, file_id=f.id)
    refused(lambda: alice.vector_stores.files.update(attached.id, vector_store_id=vs.id,
                                                     attributes={"k": "v" * 513}),
            "attributes", "invalid_value")
    alice.vector_stores.delete(vs.id)
    alice.files.delete(f.id)


def test_a_batch_takes_file_ids_or_files_and_at_most_2000(alice: OpenAI) -> None:
    """OpenAI's file batch: ``file_ids`` and ``files`` are mutually exclusive (both were
    taken, ``files`` silently winning), each 1 to 2000 entries (any number was looked up)."""
    f = alice.files.create(file=("a.txt", b"batch"), purpose="assistants")
    vs = alice.vector_stores.create(name="batches")
    with pytest.raises(openai.BadRequestError) as both:
        alice.vector_stores.file_batches.create(vs.id, file_ids=[f.id],
                                                files=[{"file_id": f.id}])
    assert both.value.body["code"] == "mutually_exclusive_parameters"  # type: ignore[index]
    for many in ({"file_ids": [f.id] * 2001}, {"files": [{"file_id": f.id}] * 2001}):
        with pytest.raises(openai.BadRequestError) as caught:
            alice.vector_stores.file_batches.create(vs.id, **many)  # type: ignore[arg-type]
        error = caught.value.body
        assert isinstance(error, dict) and error["param"] == next(iter(many))
        assert error["code"] == "array_above_max_length"
    assert alice.vector_stores.files.list(vs.id).data == []  # nothing attached
    alice.vector_stores.delete(vs.id)
    alice.files.delete(f.id)

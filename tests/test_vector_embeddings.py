"""The embedding model and its cache, on both vector engines (local SQLite; AWS: DynamoDB on
moto, S3 Vectors on its fake), through openai-python against the gateway (issue 40):

- the cache is per tenant (another tenant's identical text is embedded again: a shared cache
  answered it in 0.01 s against 2 s, telling the second tenant what the first one holds) and
  goes with the data (no cached vector of a tenant's outlives its chunks);
- faults of the embedding model: a dropped connection or a 503 is retried, a file fails with a
  clear ``last_error`` when it cannot be embedded, a search answers 502 ``embedding_failed``,
  NaN / infinity / a wrong dimension are refused and never cached;
- a file whose ingestion a stopped process left ``in_progress`` is claimed and ingested again
  by the running gateway, with no vector store request, once its lease runs out.

Embeddings come from tests/helpers/embedding_server.py: a DETERMINISTIC HASHING EMBEDDER
served over the OpenAI embeddings API on 127.0.0.1 (not a trained model), which drops a
connection, answers non-JSON, NaN or an HTTP error when told (``fail``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from responses_gateway.api.auth import Authenticator
from responses_gateway.config import Settings
from responses_gateway.vectors.ingest import cache_key
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.file_storage import ENGINES, storage_settings
from tests.helpers.gateway_server import GatewayServer

KEY_A, KEY_B = "key-embed-a", "key-embed-b"
MODEL = "hashing-384"


EMBEDDING_KEY = "emb-secret-0123456789abcdef"  # shaped like no provider's key: only the
# gateway's knowing it can keep it out of what a client sees


@pytest.fixture(autouse=True)
def no_faults_left(embeddings: EmbeddingServer) -> Iterator[None]:
    yield
    embeddings.fail()


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, embeddings: EmbeddingServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with storage_settings(request.param, tmp_path_factory.mktemp("embed")) as storage, \
            GatewayServer(Settings(
                upstream_url="http://127.0.0.1:9/v1", max_retries=0, api_keys=(KEY_A, KEY_B),
                embedding_url=embeddings.base_url, embedding_model=MODEL,
                embedding_api_key=EMBEDDING_KEY, **storage)) as server:
        yield server


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as client:
        yield client


def tenant(key: str) -> str:
    return Authenticator([key]).tenant(f"Bearer {key}")


def upload(client: OpenAI, store_id: str, name: str, text: str) -> Any:
    return client.vector_stores.files.upload_and_poll(
        vector_store_id=store_id, file=(name, text.encode()), poll_interval_ms=50)


def cached_rows(settings: Settings, text: str) -> list[Any]:
    """Every row of the storage that keeps a vector for ``text`` by its cache key, whoever's
    (locally the chunks that hold the key and any row of the old shared ``vs_embeddings``;
    in AWS the ``emb#`` rows), read beside the gateway."""
    key = cache_key(MODEL, text)
    kind, _, target = settings.store.partition(":")
    if kind == "sqlite":
        import sqlean

        from responses_gateway.vectors.local import database_path

        with sqlean.connect(database_path(target)) as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
            rows = c.execute("SELECT tenant, store_id FROM vs_chunks WHERE cache_key = ?",
                             (key,)).fetchall()
            if "vs_embeddings" in tables:
                rows += c.execute("SELECT key FROM vs_embeddings WHERE key = ?",
                                  (key,)).fetchall()
        return rows
    import boto3

    items = boto3.session.Session().client("dynamodb").scan(TableName=target)["Items"]
    return [i for i in items if i["pk"]["S"].startswith("emb#") and key in i["pk"]["S"]]


# -- tenancy ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_another_tenants_identical_text_is_embedded_again(
        alice: OpenAI, bob: OpenAI, embeddings: EmbeddingServer) -> None:
    text = "Alice's secret: the vault code is 4711 and the key is under the mat."
    before = embeddings.inputs.count(text)  # the suite runs once per engine
    mine = alice.vector_stores.create(name="a")
    assert upload(alice, mine.id, "a.txt", text).status == "completed"
    assert embeddings.inputs.count(text) == before + 1
    theirs = bob.vector_stores.create(name="b")
    assert upload(bob, theirs.id, "b.txt", text).status == "completed"
    assert embeddings.inputs.count(text) == before + 2  # not served from alice's cache
    assert upload(alice, mine.id, "again.txt", text).status == "completed"
    assert embeddings.inputs.count(text) == before + 2  # alice's own cache serves alice
    assert bob.vector_stores.search(theirs.id, query="vault code").data[0].score > 0.5
    alice.vector_stores.delete(mine.id)
    bob.vector_stores.delete(theirs.id)


@pytest.mark.slow
def test_cached_vectors_go_with_the_data(alice: OpenAI, embeddings: EmbeddingServer,
                                         gateway: GatewayServer) -> None:
    """A tenant's cached vector of a text lives while one of its files in a store holds the
    text: removing the file from one store keeps it for the other, deleting that store takes
    it; the tenant's next upload of the text is embedded again."""
    text = "Quarterly numbers: revenue 12.5 million, churn 3 percent, do not share."
    before = embeddings.inputs.count(text)
    one, two = (alice.vector_stores.create(name=n) for n in ("one", "two"))
    file = alice.files.create(file=("q.txt", text.encode()), purpose="assistants")
    for store in (one, two):
        done = alice.vector_stores.files.create_and_poll(
            file.id, vector_store_id=store.id, poll_interval_ms=50)
        assert done.status == "completed"
    assert embeddings.inputs.count(text) == before + 1  # the second store's from the cache
    assert cached_rows(gateway.settings, text)
    alice.vector_stores.files.delete(file.id, vector_store_id=one.id)
    assert cached_rows(gateway.settings, text)  # store two still holds it
    alice.vector_stores.delete(two.id)
    assert cached_rows(gateway.settings, text) == []
    assert upload(alice, one.id, "q2.txt", text).status == "completed"
    assert embeddings.inputs.count(text) == before + 2
    alice.vector_stores.delete(one.id)
    assert cached_rows(gateway.settings, text) == []


# -- faults -------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["drop", 503, 429])
def test_a_transient_fault_is_retried(alice: OpenAI, embeddings: EmbeddingServer,
                                      fault: str | int) -> None:
    word = f"transient{fault}"
    embeddings.fail(fault, word=word)
    vs = alice.vector_stores.create(name="retry")
    done = upload(alice, vs.id, "r.txt", f"Tidal pools hold {word} anemones.")
    assert done.status == "completed", done.last_error
    assert embeddings.spent[-1] == fault and not embeddings.faults
    alice.vector_stores.delete(vs.id)


@pytest.mark.slow
def test_retries_are_bounded_then_the_file_fails(alice: OpenAI,
                                                 embeddings: EmbeddingServer) -> None:
    embeddings.fail(*["drop"] * 5, word="unreachable")
    vs = alice.vector_stores.create(name="down")
    done = upload(alice, vs.id, "d.txt", "The unreachable lighthouse.")
    assert done.status == "failed" and done.last_error is not None
    assert done.last_error.code == "server_error"
    assert "could not be reached" in done.last_error.message
    assert embeddings.faults == ["drop"]  # 1 + GATEWAY_EMBEDDING_RETRIES (3) attempts
    alice.vector_stores.delete(vs.id)


@pytest.mark.parametrize("fault", ["nan", "inf", "short"])
def test_bad_vectors_fail_the_file_and_are_never_cached(
        alice: OpenAI, embeddings: EmbeddingServer, gateway: GatewayServer, fault: str) -> None:
    text = f"Glass floats {fault}: lighter than the sea around it."
    vs = alice.vector_stores.create(name="poison")
    assert upload(alice, vs.id, "w.txt", "Warm-up: the model's dimension is 384.").status \
        == "completed"
    embeddings.fail(fault, word=f"floats {fault}")
    done = upload(alice, vs.id, "p.txt", text)
    assert done.status == "failed" and done.last_error is not None
    assert done.last_error.code == "server_error"
    assert ("NaN or infinity" if fault != "short" else "dimensions") in \
        done.last_error.message
    assert cached_rows(gateway.settings, text) == []
    again = upload(alice, vs.id, "p2.txt", text)  # embedded afresh, not from a poisoned cache
    assert again.status == "completed"
    hit = alice.vector_stores.search(vs.id, query="glass floats lighter sea").data[0]
    assert hit.file_id == again.id and hit.score > 0.5
    alice.vector_stores.delete(vs.id)


@pytest.mark.slow
@pytest.mark.parametrize("faults", [["drop"] * 4, ["not_json"], ["nan"], [400]])
def test_a_search_the_model_cannot_embed_is_a_502(
        alice: OpenAI, embeddings: EmbeddingServer, faults: list[Any]) -> None:
    vs = alice.vector_stores.create(name="search")
    assert upload(alice, vs.id, "s.txt", "Moss grows on the north side.").status == \
        "completed"
    embeddings.fail(*faults, word="moss")
    with pytest.raises(openai.APIStatusError) as caught:
        alice.vector_stores.search(vs.id, query="where does moss grow")
    assert caught.value.status_code == 502
    assert caught.value.body["type"] == "server_error"
    assert caught.value.body["code"] == "embedding_failed"
    assert caught.value.body["message"].startswith("The embedding model failed: ")
    assert not embeddings.faults
    assert alice.vector_stores.search(vs.id, query="where does moss grow").data
    alice.vector_stores.delete(vs.id)


# -- leases -------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_file_left_in_progress_is_reingested_while_the_gateway_runs(
        embeddings: EmbeddingServer, tmp_path: Path, engine: str) -> None:
    """A gateway stops mid-ingestion and the next one starts before the file's lease ran out:
    the running gateway claims it once the lease runs out and ingests it, with no vector store
    request at all (the engine is read beside it)."""
    from responses_gateway.platform import platform_for

    with storage_settings(engine, tmp_path) as storage:
        settings = Settings(upstream_url="http://127.0.0.1:9/v1", embedding_url=embeddings.base_url,
                            embedding_model=MODEL, lease_seconds=2.0, **storage)
        embeddings.stall("orphaned")
        with GatewayServer(settings) as first:
            client = OpenAI(base_url=first.base_url, api_key="x", max_retries=0)
            vs = client.vector_stores.create(name="orphan")
            f = client.vector_stores.files.upload(
                vector_store_id=vs.id, file=("o.txt", b"The orphaned file waits."))
            time.sleep(0.3)  # its ingestion waits on the stalled embeddings call
            first._server.force_exit = True  # stop without waiting for the ingestion task
        embeddings.resume()
        with GatewayServer(settings):  # its lease (2 s) has not run out yet
            engine_ = platform_for(settings).vector_engine()
            started = time.monotonic()
            while (row := asyncio.run(engine_.file("default", vs.id, f.id)))["status"] \
                    == "in_progress":
                assert time.monotonic() - started < 30, "left in_progress"
                time.sleep(0.1)
            assert row["status"] == "completed", row["last_error"]
            asyncio.run(engine_.aclose())


class _Record:
    filename = "late.txt"


class _Files:
    """The Files service as ingestion reads it: one file's bytes."""

    async def content(self, file_id: str, tenant: str) -> tuple[_Record, bytes]:
        return _Record(), b"A lease that ran out between two reads."


class _Embedder:
    model = MODEL

    async def embed(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        from tests.helpers.embedding_server import hashing_vector

        return [hashing_vector(t) for t in texts]

    async def aclose(self) -> None:
        return None


@pytest.mark.slow
def test_reading_a_files_status_reclaims_its_run_out_lease(tmp_path: Path) -> None:
    """Between two of the process's looks (every half lease), a read of a file whose lease
    ran out claims it and ingests it again: a client polling the file is never left
    waiting on a dead process."""
    from responses_gateway.vectors.chunking import parse_strategy
    from responses_gateway.vectors.local import LocalVectorEngine
    from responses_gateway.vectors.service import VectorStores

    async def scenario() -> tuple[str, str]:
        engine = LocalVectorEngine(str(tmp_path / "g.db"))
        stores = VectorStores(engine, _Files(), _Embedder(), max_files=0,  # type: ignore[arg-type]
                              lease_seconds=60)
        await engine.add_store("t", {"id": "vs_1", "created_at": 1, "name": "x",
                                     "metadata": {}, "expires_after": None,
                                     "last_active_at": 1})
        await engine.add_files("t", [{
            "store_id": "vs_1", "file_id": "file-1", "filename": "late.txt", "created_at": 1,
            "attributes": None, "chunking": parse_strategy(None), "batch_id": None,
            "lease_until": time.time() + 0.5}], 0)  # another process's lease, still held
        first = (await stores.get_file("t", "vs_1", "file-1"))["status"]  # the look: none
        await asyncio.sleep(0.6)  # the lease runs out; the next look is 30 s away
        await stores.get_file("t", "vs_1", "file-1")
        for _ in range(100):
            row = await engine.file("t", "vs_1", "file-1")
            if row is not None and row["status"] != "in_progress":
                break
            await asyncio.sleep(0.05)
        await stores.aclose()
        return first, row["status"] if row else "gone"

    assert asyncio.run(scenario()) == ("in_progress", "completed")


def test_the_embedding_models_key_never_reaches_a_client(
        alice: OpenAI, embeddings: EmbeddingServer) -> None:
    """An embedding server that quotes the key it was sent (OpenAI's 401 does) in its error:
    the search's 502 and the failed file's ``last_error`` say what went wrong, not the key."""
    vs = alice.vector_stores.create(name="keys")
    embeddings.fail("echo_key", word="Lichen")
    failed = upload(alice, vs.id, "k.txt", "Lichen on the lighthouse.")
    assert failed.status == "failed" and "401" in failed.last_error.message
    assert EMBEDDING_KEY not in failed.last_error.message
    assert upload(alice, vs.id, "m.txt", "Moss grows on the north side.").status == \
        "completed"
    embeddings.fail("echo_key", word="moss")
    with pytest.raises(openai.APIStatusError) as caught:
        alice.vector_stores.search(vs.id, query="where does moss grow")
    assert caught.value.status_code == 502 and "401" in caught.value.body["message"]
    assert EMBEDDING_KEY not in caught.value.response.text
    alice.vector_stores.delete(vs.id)

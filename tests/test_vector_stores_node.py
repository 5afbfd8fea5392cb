"""The Files and Vector Stores APIs through openai-node, unmodified (local engine): a file
uploaded, a store created, ``files.uploadAndPoll``, ``fileBatches.createAndPoll`` and
``fileBatches.uploadAndPoll``, attribute updates, search with comparison and compound filters,
the SDK's own paging (stores, files, a batch's files), file content, deletes. What node
received is validated against openai-python's models (openai-node's types exist only at
compile time).

Embeddings come from tests/helpers/embedding_server.py: a DETERMINISTIC HASHING EMBEDDER
served over the OpenAI embeddings API on 127.0.0.1 (not a trained model)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types import FileDeleted, FileObject, VectorStore, VectorStoreDeleted
from openai.types.vector_store_search_response import VectorStoreSearchResponse
from openai.types.vector_stores import (
    VectorStoreFile,
    VectorStoreFileBatch,
    VectorStoreFileDeleted,
)

from tests.helpers.cache_lock import put
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.file_storage import gateway_on
from tests.helpers.gateway_server import GatewayServer
from tests.test_clients_conversations import INSTALL_TIMEOUT, openai_node  # noqa: F401

pytestmark = [pytest.mark.node, pytest.mark.slow]

NODE_SCRIPT = r"""
import OpenAI, { toFile } from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_BASE_URL, apiKey: "sk-node",
                            maxRetries: 0 });
const file = (name, text) => toFile(Buffer.from(text), name);
const out = {};

out.file = await client.files.create({
  file: await file("volcano.md", "# Volcanoes\nMagma rises through the crust; basalt forms " +
                                 "when lava cools."),
  purpose: "assistants" });
out.store = await client.vectorStores.create({ name: "node library", metadata: { team: "n" },
                                               file_ids: [out.file.id] });
out.other = await client.vectorStores.create({ name: "node other" });
out.uploaded = await client.vectorStores.files.uploadAndPoll(
  out.store.id, await file("baking.txt", "Bread baking: knead the dough, let the yeast rise."),
  { pollIntervalMs: 50 });
const orbits = await client.files.create({
  file: await file("orbits.txt", "Planets orbit the sun; gravity bends each path."),
  purpose: "assistants" });
out.batch = await client.vectorStores.fileBatches.createAndPoll(
  out.store.id, { file_ids: [orbits.id], attributes: { topic: "space", year: 2024 } },
  { pollIntervalMs: 50 });
out.uploadBatch = await client.vectorStores.fileBatches.uploadAndPoll(
  out.store.id, { files: [await file("tides.txt", "Tides follow the moon's pull on oceans."),
                          await file("rivers.txt", "Rivers carve valleys and carry silt.")] },
  { pollIntervalMs: 50 });
out.batchFiles = [];
for await (const f of client.vectorStores.fileBatches.listFiles(
  out.uploadBatch.id, { vector_store_id: out.store.id, limit: 1 })) out.batchFiles.push(f);

const volcano = (await client.vectorStores.files.retrieve(
  out.file.id, { vector_store_id: out.store.id }));
out.volcanoBefore = volcano;
out.updated = await client.vectorStores.files.update(out.file.id, {
  vector_store_id: out.store.id, attributes: { topic: "geology", year: 2020 } });
// the store is idle once every file is in: poll until the volcano file completed
out.volcano = await client.vectorStores.files.poll(out.store.id, out.file.id,
                                                   { pollIntervalMs: 50 });

const search = async (body) => (await client.vectorStores.search(out.store.id, body)).data;
out.plain = await search({ query: "basalt lava crust", max_num_results: 2 });
out.eq = await search({ query: "crust", filters: { type: "eq", key: "topic",
                                                   value: "space" } });
out.compound = await search({ query: "crust", filters: { type: "or", filters: [
  { type: "eq", key: "topic", value: "geology" },
  { type: "gte", key: "year", value: 2030 }] } });
out.many = await search({ query: ["yeast dough", "moon oceans"], max_num_results: 5 });

out.stores = [];
for await (const s of client.vectorStores.list({ limit: 1, order: "asc" })) out.stores.push(s);
out.files = [];
for await (const f of client.vectorStores.files.list(out.store.id, { limit: 2 }))
  out.files.push(f);
out.completed = [];
for await (const f of client.vectorStores.files.list(out.store.id, { filter: "completed" }))
  out.completed.push(f);
out.content = [];
for await (const c of client.vectorStores.files.content(
  out.file.id, { vector_store_id: out.store.id })) out.content.push(c);
out.fileList = [];
for await (const f of client.files.list({ limit: 2 })) out.fileList.push(f);

out.removed = await client.vectorStores.files.delete(out.uploaded.id,
                                                     { vector_store_id: out.store.id });
out.afterRemove = await search({ query: "yeast dough bread", max_num_results: 10 });
out.fileDeleted = await client.files.delete(out.uploaded.id);
out.storeAfter = await client.vectorStores.retrieve(out.store.id);
out.otherDeleted = await client.vectorStores.delete(out.other.id);
try {
  await client.vectorStores.retrieve(out.other.id);
  out.gone = null;
} catch (err) {
  out.gone = { status: err.status, error: err.error };
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with EmbeddingServer().running() as embeddings, gateway_on(
            "local", tmp_path_factory.mktemp("vs-node"), embedding_url=embeddings.base_url,
            embedding_model="hashing-384", embedding_batch=2) as server:
        yield server


def _valid(model: Any, data: dict[str, Any]) -> Any:
    obj = model.model_validate(data)
    assert set(data) <= set(model.model_fields), set(data) - set(model.model_fields)
    return obj


def _texts(results: list[dict[str, Any]]) -> list[str]:
    return [r["filename"] for r in results]


@pytest.mark.timeout(INSTALL_TIMEOUT + 180)
def test_openai_node_retrieval_walkthrough(openai_node: Path,  # noqa: F811
                                           gateway: GatewayServer) -> None:
    script = openai_node / "vector_stores.mjs"  # beside node_modules: `import "openai"` resolves
    put(script, NODE_SCRIPT)  # another xdist worker may be running it
    done = subprocess.run(
        [shutil.which("node") or "node", str(script)],
        env={**os.environ, "GATEWAY_BASE_URL": gateway.base_url},
        capture_output=True, text=True, timeout=150, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)

    for key in ("file", "fileDeleted"):
        _valid(FileDeleted if key == "fileDeleted" else FileObject, out[key])
    for f in out["fileList"]:
        _valid(FileObject, f)
    for key in ("store", "other", "storeAfter"):
        _valid(VectorStore, out[key])
    for key in ("uploaded", "volcanoBefore", "updated", "volcano"):
        _valid(VectorStoreFile, out[key])
    for f in out["batchFiles"] + out["files"] + out["completed"]:
        _valid(VectorStoreFile, f)
    for key in ("batch", "uploadBatch"):
        batch = _valid(VectorStoreFileBatch, out[key])
        assert batch.status == "completed" and batch.file_counts.failed == 0
    assert out["batch"]["file_counts"]["completed"] == 1
    assert out["uploadBatch"]["file_counts"]["completed"] == 2
    for key in ("plain", "eq", "compound", "many", "afterRemove"):
        for result in out[key]:
            _valid(VectorStoreSearchResponse, result)
    _valid(VectorStoreFileDeleted, out["removed"])
    _valid(VectorStoreDeleted, out["otherDeleted"])

    assert out["store"]["metadata"] == {"team": "n"}
    assert out["uploaded"]["status"] == "completed"
    assert out["updated"]["attributes"] == {"topic": "geology", "year": 2020}
    assert out["volcano"]["status"] == "completed"
    assert _texts(out["plain"])[0] == "volcano.md"
    assert _texts(out["eq"]) == ["orbits.txt"]
    assert out["eq"][0]["attributes"] == {"topic": "space", "year": 2024}
    assert _texts(out["compound"]) == ["volcano.md"]
    assert {"baking.txt", "tides.txt"} <= set(_texts(out["many"])[:2])
    # the SDK's paging walked every page of one item (limit 1) and two
    assert len({f["id"] for f in out["batchFiles"]}) == 2
    assert {f["id"] for f in out["batchFiles"]} < {f["id"] for f in out["files"]}
    assert {s["id"] for s in out["stores"]} >= {out["store"]["id"], out["other"]["id"]}
    assert len(out["files"]) == 5 and len({f["id"] for f in out["files"]}) == 5
    assert len(out["completed"]) == 5
    assert "basalt" in " ".join(c["text"] for c in out["content"])
    assert len(out["fileList"]) == len({f["id"] for f in out["fileList"]}) >= 5
    # deletes
    assert out["removed"] == {"id": out["uploaded"]["id"], "object": "vector_store.file.deleted",
                              "deleted": True}
    assert "baking.txt" not in _texts(out["afterRemove"])
    assert out["fileDeleted"]["deleted"] is True
    assert out["storeAfter"]["file_counts"]["total"] == 4
    assert out["otherDeleted"]["deleted"] is True
    assert out["gone"]["status"] == 404 and out["gone"]["error"]["type"] == "invalid_request_error"

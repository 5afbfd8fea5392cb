"""What a web search call costs the gateway beyond the provider's own latency (issue 30).

    python3 benchmarks/web_search.py [--calls 300]

A local SearXNG-speaking provider (tests/helpers/search_providers.py) answers; each round
times the same search twice on one warm connection: the bare HTTP request to the provider,
and one whole ``web_search_call`` run by the tool (item, events, provider request, results
text for the model, the item closed) through a real translator. The difference is the
gateway's own time per call. Target: under 2 ms (median).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.search_providers import SearchProvider

from benchmarks import tool_overhead
from responses_gateway.config import Settings
from responses_gateway.tools.catalog import ToolSpec
from responses_gateway.tools.server import ServerCall
from responses_gateway.tools.web_search.tool import Options, WebSearchTool
from responses_gateway.translate.stream import ResponseTranslator


async def rounds(fake: SearchProvider, calls: int) -> tuple[list[float], list[float]]:
    settings = Settings(web_search_provider="searxng", web_search_url=fake.base_url)
    tool = WebSearchTool(Options(include_sources=True), settings)
    client = tool.client()
    bare_url = f"{fake.base_url}/search"
    bare: list[float] = []
    whole: list[float] = []
    for i in range(calls + 20):
        start = time.perf_counter()
        answer = await client.get(bare_url, params={"q": "rust edition", "format": "json",
                                                    "pageno": "1", "safesearch": "0"})
        answer.json()
        middle = time.perf_counter()
        translator = ResponseTranslator({"id": "resp_b", "object": "response", "output": [],
                                         "status": "in_progress"})
        call = ServerCall(f"call_{i}", ToolSpec("web_search", "web_search"),
                          '{"query": "rust edition"}')
        async for _ in tool.run(call, translator):
            pass
        end = time.perf_counter()
        if i >= 20:  # warm-up
            bare.append(middle - start)
            whole.append(end - middle)
    await tool.aclose()
    return bare, whole


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    calls = parser.parse_args().calls
    with SearchProvider("searxng") as fake:
        bare, whole = asyncio.run(rounds(fake, calls))
    sys.exit(tool_overhead.report(bare, whole, "provider alone", "web_search_call"))


if __name__ == "__main__":
    main()

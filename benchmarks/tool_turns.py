"""Remote MCP tool turns: the gateway's added time per turn, beside the same calls made directly.

One response in which the model calls an MCP tool N times, one call per turn, then answers
(the scripted upstream's ``facts`` model and the test MCP server's ``remember`` tool, both on
127.0.0.1). Direct is what a client doing the loop itself would do: list the server's tools
once, then per turn one chat request to the upstream and one MCP call on the same session, then
the final chat request. The gateway's figure is the whole response (non-streaming, listing
included); the difference over N is what the gateway adds per turn (target <= 2 ms plus the
tool's own time, which both sides pay).

    python benchmarks/tool_turns.py [--turns N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "handler"), str(ROOT)]

from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.mcp_server import McpTestServer  # noqa: E402
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402

from responses_gateway.config import Settings  # noqa: E402


def via_gateway(client: httpx.Client, gateway: GatewayServer, mcp: McpTestServer,
                turns: int, marker: str) -> float:
    body = {
        "model": "m", "input": f"[[script:facts total={turns}]] {marker}",
        "tools": [{"type": "mcp", "server_label": "lab", "server_url": mcp.url,
                   "require_approval": "never", "allowed_tools": ["remember"]}],
    }
    started = time.perf_counter()
    answer = client.post(gateway.base_url + "/responses", json=body).json()
    elapsed = time.perf_counter() - started
    calls = [i for i in answer["output"] if i["type"] == "mcp_call"]
    assert len(calls) == turns and answer["status"] == "completed", answer
    return elapsed


async def direct(upstream: ScriptedUpstream, mcp: McpTestServer, turns: int,
                 marker: str) -> float:
    from mcp import Client

    started = time.perf_counter()
    async with httpx.AsyncClient() as http, Client(mcp.url, mode="legacy") as session:
        listed = (await session.list_tools()).tools
        tool = next(t for t in listed if t.name == "remember")
        functions = [{"type": "function", "function": {
            "name": "lab__remember", "description": tool.description or "",
            "parameters": tool.input_schema}}]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"[[script:facts total={turns}]] {marker}"}]
        for _ in range(turns + 1):
            reply = (await http.post(upstream.base_url + "/chat/completions", json={
                "model": "m", "messages": messages, "tools": functions, "stream": False,
            })).json()
            message = reply["choices"][0]["message"]
            if not message.get("tool_calls"):
                break
            call = message["tool_calls"][0]
            result = await session.call_tool("remember", orjson.loads(
                call["function"]["arguments"]))
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": result.content[0].text})  # type: ignore[union-attr]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with ScriptedUpstream() as upstream, McpTestServer() as mcp:
        settings = Settings(upstream_url=upstream.base_url, store="sqlite::memory:",
                            max_retries=0, mcp_allow_hosts=("127.0.0.1",))
        with GatewayServer(settings) as gateway, httpx.Client(timeout=60) as client:
            via_gateway(client, gateway, mcp, 2, "warm-up")  # imports, first connections
            asyncio.run(direct(upstream, mcp, 2, "warm-up"))
            gateway_times, direct_times = [], []
            for index in range(args.rounds):
                gateway_times.append(via_gateway(client, gateway, mcp, args.turns, f"g{index}"))
                direct_times.append(asyncio.run(direct(upstream, mcp, args.turns, f"d{index}")))
    g, d = statistics.median(gateway_times), statistics.median(direct_times)
    print(f"{args.turns} MCP tool turns, median of {args.rounds} rounds")
    print(f"  through the gateway  {g * 1000:8.1f} ms  ({g / args.turns * 1000:.2f} ms per turn)")
    print(f"  direct               {d * 1000:8.1f} ms  ({d / args.turns * 1000:.2f} ms per turn)")
    print(f"  added per turn       {(g - d) / args.turns * 1000:8.2f} ms  (target <= 2 ms)")


if __name__ == "__main__":
    main()

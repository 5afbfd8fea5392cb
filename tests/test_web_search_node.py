"""web_search through the node clients (issue 30), each unmodified in its default
configuration: openai-node (not streamed, the raw stream, and the SDK's ``responses.stream``
accumulator) and the Vercel AI SDK's ``openai.tools.webSearch()`` on its Responses model
(``generateText`` and ``streamText``). Everything openai-node received is validated against
openai-python's models and the stream grammar (openai-node's types exist only at compile
time). The scripted upstream is the model, the local SearXNG-speaking provider answers;
fixtures (the provider, the gateway) are test_web_search's, the npm installs the other node
tests' (.cache/npm-openai, .cache/npm-ai-sdk)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cache_lock import put
from tests.helpers.e2e import check_stream
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.search_providers import RESULTS, SearchProvider
from tests.test_clients_conversations import INSTALL_TIMEOUT, openai_node  # noqa: F401
from tests.test_image_generation import ai_sdk  # noqa: F401
from tests.test_web_search import (  # noqa: F401
    CITED,
    answer_citing,
    gateway,
    provider,
    searching,
    tool_result,
    web_search_items,
)

pytestmark = [pytest.mark.node, pytest.mark.slow]

SOURCES = "web_search_call.action.sources"
NODE_SCRIPT = r"""
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_BASE_URL, apiKey: "sk-node",
                            maxRetries: 0 });
const prompts = JSON.parse(process.env.PROMPTS);
const tools = [{ type: "web_search" }];
const include = ["web_search_call.action.sources"];
const out = {};
out.plain = await client.responses.create({ model: "m", tools, include, input: prompts.plain });
out.text = out.plain.output_text;
out.events = [];
const raw = await client.responses.create({ model: "m", tools, stream: true,
                                            input: prompts.raw });
for await (const event of raw) out.events.push(event);
const helper = client.responses.stream({ model: "m", tools, include, input: prompts.helper });
// Each event as it arrived: the helper later mutates the objects it emitted (its snapshot).
out.helperEvents = [];
helper.on("event", (event) => out.helperEvents.push(JSON.parse(JSON.stringify(event))));
out.accumulated = await helper.finalResponse();
console.log(JSON.stringify(out));
"""
SEARCH_EVENTS = ["response.output_item.added", "response.web_search_call.in_progress",
                 "response.web_search_call.searching", "response.web_search_call.completed",
                 "response.output_item.done"]


def _plain(response: dict[str, Any]) -> dict[str, Any]:
    """A Response as the wire had it: openai-node's additions dropped, then validated."""
    for added in ("output_text", "output_parsed"):
        response.pop(added, None)
    for item in response["output"]:
        for part in item.get("content") or ():
            part.pop("parsed", None)
    sdk_validate_response(response)
    return response


def _citation(answer: str) -> dict[str, Any]:
    link = f"[Rust]({CITED['url']})"
    start = answer.index(link)
    return {"type": "url_citation", "start_index": start, "end_index": start + len(link),
            "url": CITED["url"], "title": CITED["title"]}


def _check_events(events: list[dict[str, Any]], citation: dict[str, Any]) -> dict[str, Any]:
    """The stream's grammar and the search's events in order; its final response."""
    check_stream(events)
    kinds = [e["type"] for e in events]
    at = kinds.index("response.web_search_call.in_progress")
    assert kinds[at - 1:at + 4] == SEARCH_EVENTS
    call_id = events[at - 1]["item"]["id"]
    assert [e["item_id"] for e in events[at:at + 3]] == [call_id] * 3
    assert events[at - 1]["item"]["status"] == "in_progress"
    assert kinds.index("response.output_item.done") == at + 3  # the call ends first
    [added] = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    assert added["annotation"] == citation and added["annotation_index"] == 0
    return _plain(events[-1]["response"])


@pytest.mark.timeout(INSTALL_TIMEOUT + 120)
def test_openai_node_web_search_streamed_and_not(
        openai_node: Path, gateway: GatewayServer, upstream: ScriptedUpstream,  # noqa: F811
        provider: SearchProvider) -> None:  # noqa: F811
    script = openai_node / "web_search.mjs"  # beside node_modules: `import "openai"` resolves
    put(script, NODE_SCRIPT)  # another xdist worker may be running it
    answer = answer_citing()
    prompts = {kind: searching(f"node-ws-{kind}", answer) for kind in ("plain", "raw", "helper")}
    done = subprocess.run(
        [shutil.which("node") or "node", str(script)],
        env={**os.environ, "GATEWAY_BASE_URL": gateway.base_url, "PROMPTS": json.dumps(prompts)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["text"] == answer  # openai-node's own output_text
    citation = _citation(answer)

    streamed = _check_events(out["events"], citation)
    helper = _check_events(out["helperEvents"], citation)
    accumulated = _plain(out["accumulated"])
    assert accumulated["id"] == helper["id"]
    assert accumulated["output"] == helper["output"]  # finalResponse: the completed one
    plain = _plain(out["plain"])
    for response, sources in ((plain, True), (streamed, False), (helper, True),
                              (accumulated, True)):
        assert response["status"] == "completed"
        assert [i["type"] for i in response["output"]] == ["web_search_call", "message"]
        [call] = web_search_items(response)
        assert call["id"].startswith("ws_") and call["status"] == "completed"
        action = {"type": "search", "query": "rust edition"}
        if sources:  # only when include asked for them, each a url source
            action["sources"] = [{"type": "url", "url": r["url"]} for r in RESULTS]
        assert call["action"] == action
        message = response["output"][-1]
        assert message["content"][0]["text"] == answer
        assert message["content"][0]["annotations"] == [citation]
    assert out["events"][-1]["response"]["output"][0]["action"] == {
        "type": "search", "query": "rust edition"}
    # Each response's model read the results it cites; the provider was asked each time.
    for kind, response in (("plain", plain), ("raw", streamed), ("helper", helper)):
        [call] = web_search_items(response)
        read = tool_result(upstream, f"node-ws-{kind}", call["id"])
        assert f"[1] {CITED['title']}\nURL: {CITED['url']}" in read
    assert sum(r.params.get("q") == "rust edition" for r in provider.requests) >= 3


# -- the Vercel AI SDK ---------------------------------------------------------------------------

AI_SDK_SCRIPT = r"""
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";
const [baseURL, prompt, mode] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "sk-vercel" });
const tools = { web_search: openai.tools.webSearch() };
const model = openai.responses("m");
const part = (p) => ({ type: p.type, toolCallId: p.toolCallId, toolName: p.toolName,
                       providerExecuted: p.providerExecuted, input: p.input,
                       output: p.output, sourceType: p.sourceType, url: p.url,
                       title: p.title });
const out = {};
if (mode === "stream") {
  const result = streamText({ model, prompt, tools });
  out.parts = [];
  for await (const p of result.fullStream) {
    if (["tool-call", "tool-result", "source"].includes(p.type)) out.parts.push(part(p));
    if (p.type === "error") out.parts.push({ type: "error", error: String(p.error) });
  }
  out.text = await result.text;
  out.sources = await result.sources;
} else {
  const result = await generateText({ model, prompt, tools });
  out.parts = result.content.filter((p) => p.type !== "text").map(part);
  out.text = result.text;
  out.sources = result.sources;
}
console.log(JSON.stringify(out));
"""


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_vercel_ai_sdk_web_search(ai_sdk: Path, gateway: GatewayServer,  # noqa: F811
                                  upstream: ScriptedUpstream, mode: str) -> None:
    script = ai_sdk / "web_search.mjs"
    put(script, AI_SDK_SCRIPT)  # another xdist worker may be running it
    marker = f"vercel-ws-{mode}"
    answer = answer_citing()
    done = subprocess.run(
        [shutil.which("node") or "node", str(script), gateway.base_url,
         searching(marker, answer), mode],
        capture_output=True, text=True, timeout=60, check=False, cwd=ai_sdk)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["text"] == answer
    call, result, source = out["parts"]
    assert (call["type"], call["toolName"], call["providerExecuted"]) == (
        "tool-call", "web_search", True)
    assert call["toolCallId"].startswith("ws_")
    assert (result["type"], result["toolCallId"], result["toolName"]) == (
        "tool-result", call["toolCallId"], "web_search")
    # The provider asks for the sources itself (include web_search_call.action.sources).
    assert result["output"] == {
        "action": {"type": "search", "query": "rust edition"},
        "sources": [{"type": "url", "url": r["url"]} for r in RESULTS]}
    assert (source["type"], source["sourceType"], source["url"], source["title"]) == (
        "source", "url", CITED["url"], CITED["title"])
    assert [(s["url"], s["title"]) for s in out["sources"]] == [(CITED["url"], CITED["title"])]
    # The SDK's default tool reached the model as the gateway's web_search function, and the
    # model's next turn read the results.
    first = next(b for b in upstream.requests if marker in str(b["messages"]))
    assert [t["function"]["name"] for t in first["tools"]] == [
        "web_search", "open_page", "find_in_page"]
    assert RESULTS[0]["text"] in tool_result(upstream, marker, call["toolCallId"])

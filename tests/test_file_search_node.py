"""file_search through openai-node (issue 31): a response searching a vector store, not
streamed, streamed (the raw events) and through the SDK's ``responses.stream`` accumulator;
everything node received is then validated against openai-python's models (openai-node's
types exist only at compile time), and the items, events and ``file_citation`` annotations
checked. The scripted upstream is the model; embeddings come from the DETERMINISTIC HASHING
EMBEDDER of tests/helpers/embedding_server.py; the store is on the local engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cache_lock import put
from tests.helpers.e2e import check_stream, e2e_settings
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_clients_conversations import INSTALL_TIMEOUT, openai_node  # noqa: F401
from tests.test_file_search import (  # noqa: F401
    KEY_A,
    QUESTION,
    alice,
    calls,
    library,
    searching,
)

pytestmark = [pytest.mark.node, pytest.mark.slow]

ANSWER = "Basalt forms when lava cools [^1]."
NODE_SCRIPT = r"""
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_BASE_URL, apiKey: process.env.GATEWAY_KEY,
                            maxRetries: 0 });
const prompts = JSON.parse(process.env.PROMPTS);
const tools = [{ type: "file_search", vector_store_ids: [process.env.STORE_ID],
                 max_num_results: 3 }];
const include = ["file_search_call.results"];
const out = {};
out.plain = await client.responses.create({ model: "m", tools, include, input: prompts.plain });
out.text = out.plain.output_text;
out.events = [];
const raw = await client.responses.create({ model: "m", tools, stream: true,
                                            input: prompts.raw });
for await (const event of raw) out.events.push(event);
const helper = client.responses.stream({ model: "m", tools, include, input: prompts.helper });
out.helperEvents = [];
for await (const event of helper) out.helperEvents.push(event.type);
out.accumulated = await helper.finalResponse();
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, embeddings: EmbeddingServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("file_search_node") / "gateway.db"
    settings = e2e_settings(upstream, db, api_keys=(KEY_A,),
                            embedding_url=embeddings.base_url, embedding_model="hashing-384")
    with GatewayServer(settings) as server:
        yield server


def _plain(response: dict[str, Any]) -> dict[str, Any]:
    for added in ("output_text", "output_parsed"):  # openai-node's, not the wire's
        response.pop(added, None)
    for item in response["output"]:  # the accumulator's parsed text (also node's own)
        for part in item.get("content") or ():
            part.pop("parsed", None)
    sdk_validate_response(response)
    return response


@pytest.mark.timeout(INSTALL_TIMEOUT + 120)
def test_openai_node_file_search_streamed_and_not(
        openai_node: Path, gateway: GatewayServer, upstream: ScriptedUpstream,  # noqa: F811
        library: dict[str, str]) -> None:  # noqa: F811
    script = openai_node / "file_search.mjs"  # beside node_modules: `import "openai"` resolves
    put(script, NODE_SCRIPT)  # another xdist worker may be running it
    prompts = {kind: searching(f"node-{kind}", ANSWER) for kind in ("plain", "raw", "helper")}
    done = subprocess.run(
        [shutil.which("node") or "node", str(script)],
        env={**os.environ, "GATEWAY_BASE_URL": gateway.base_url, "GATEWAY_KEY": KEY_A,
             "STORE_ID": library["store"], "PROMPTS": json.dumps(prompts)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["text"] == ANSWER  # openai-node's own output_text
    citation = {"type": "file_citation", "file_id": library["volcano.md"],
                "filename": "volcano.md", "index": ANSWER.index("[^1]")}

    check_stream(out["events"])  # each event as the SDK's model and the spec, the grammar
    kinds = [e["type"] for e in out["events"]]
    at = kinds.index("response.file_search_call.in_progress")
    assert kinds[at - 1:at + 4] == [
        "response.output_item.added", "response.file_search_call.in_progress",
        "response.file_search_call.searching", "response.file_search_call.completed",
        "response.output_item.done"]
    [added] = [e for e in out["events"] if e["type"] == "response.output_text.annotation.added"]
    assert added["annotation"] == citation
    streamed = _plain(out["events"][-1]["response"])
    [call] = calls(streamed)
    assert call["results"] is None  # the raw stream did not ask for them

    assert "response.file_search_call.searching" in out["helperEvents"]
    for response in (out["plain"], out["accumulated"]):
        response = _plain(response)
        [call] = calls(response)
        assert call["id"].startswith("fs_") and call["status"] == "completed"
        assert call["queries"] == [QUESTION]
        assert call["results"][0]["filename"] == "volcano.md"
        assert call["results"][0]["file_id"] == library["volcano.md"]
        assert len(call["results"]) == 3
        [message] = [i for i in response["output"] if i["type"] == "message"]
        assert message["content"][0]["text"] == ANSWER
        assert message["content"][0]["annotations"] == [citation]
    assert streamed["output"][-1]["content"][0]["annotations"] == [citation]
    # Each response's model read the passages it cites.
    for kind in prompts:
        second = [b for b in upstream.requests if f"node-{kind}" in str(b["messages"])][-1]
        assert "[^1] from 'volcano.md'" in second["messages"][-1]["content"]

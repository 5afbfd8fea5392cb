"""image_generation through openai-node (issue 32), unmodified in its default configuration:
a response drawing an image, not streamed, streamed (the raw events, with partial images where
the image backend gives them) and through the SDK's ``responses.stream`` accumulator. All
openai-node received is validated against openai-python's models and the stream grammar
(openai-node's types exist only at compile time); each ``image_generation_call``'s result is
decoded as an image. The scripted upstream is the model; the images come from a local
OpenAI-compatible images server (partial images) or Amazon Nova Canvas on a local InvokeModel
endpoint (none). Fixtures are test_image_generation's, the npm install the other node tests'."""

from __future__ import annotations

import base64
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
from tests.helpers.image_servers import FakeImagesServer, colour_for, png_info
from tests.helpers.responses_validation import sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_clients_conversations import INSTALL_TIMEOUT, openai_node  # noqa: F401
from tests.test_image_generation import (  # noqa: F401
    bedrock_images,
    decoded,
    draw,
    gateway,
    image_call,
    images_server,
    openai_gateway,
)

pytestmark = [pytest.mark.node, pytest.mark.slow]

NODE_SCRIPT = r"""
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_BASE_URL, apiKey: "sk-node",
                            maxRetries: 0 });
const asks = JSON.parse(process.env.ASKS);
const out = {};
out.plain = await client.responses.create({ model: "m", ...asks.plain });
out.events = [];
const raw = await client.responses.create({ model: "m", stream: true, ...asks.raw });
for await (const event of raw) out.events.push(event);
const helper = client.responses.stream({ model: "m", ...asks.helper });
// Each event as it arrived: the helper later mutates the objects it emitted (its snapshot).
out.helperEvents = [];
helper.on("event", (event) => out.helperEvents.push(JSON.parse(JSON.stringify(event))));
out.accumulated = await helper.finalResponse();
console.log(JSON.stringify(out));
"""
EVENT = "response.image_generation_call"


def _plain(response: dict[str, Any]) -> dict[str, Any]:
    """A Response as the wire had it: openai-node's additions dropped, then validated."""
    for added in ("output_text", "output_parsed"):
        response.pop(added, None)
    for item in response["output"]:
        for part in item.get("content") or ():
            part.pop("parsed", None)
    sdk_validate_response(response)
    return response


def _check_events(events: list[dict[str, Any]], partials: int) -> dict[str, Any]:
    """The grammar, the call's events in order with ``partials`` partial images; the
    final response."""
    check_stream(events)
    kinds = [e["type"] for e in events]
    at = kinds.index(f"{EVENT}.in_progress")
    assert kinds[at - 1:at + 4 + partials] == [
        "response.output_item.added", f"{EVENT}.in_progress", f"{EVENT}.generating",
        *[f"{EVENT}.partial_image"] * partials, f"{EVENT}.completed",
        "response.output_item.done"]
    item_id = events[at - 1]["item"]["id"]
    assert events[at - 1]["item"]["type"] == "image_generation_call"
    assert {e["item_id"] for e in events[at:at + 3 + partials]} == {item_id}
    shown = events[at + 2:at + 2 + partials]
    assert [e["partial_image_index"] for e in shown] == list(range(partials))
    for event in shown:  # each partial a real (small) image
        assert decoded(event["partial_image_b64"]) == ("PNG", (16, 16))
    return _plain(events[-1]["response"])


def _check_call(response: dict[str, Any], prompt: str, size: tuple[int, int]) -> None:
    assert response["status"] == "completed"
    assert [i["type"] for i in response["output"]] == ["image_generation_call", "message"]
    call = image_call(response)
    assert call["id"].startswith("ig_") and call["status"] == "completed"
    assert call["action"] == "generate" and call["output_format"] == "png"
    assert decoded(call["result"]) == ("PNG", size)  # a client decoding it gets the image
    assert png_info(base64.b64decode(call["result"]))[2] == colour_for(prompt)
    assert call["size"] == f"{size[0]}x{size[1]}"
    text = response["output"][-1]["content"][0]["text"]
    assert "was generated and shown to the user" in text


@pytest.mark.timeout(INSTALL_TIMEOUT + 120)
@pytest.mark.parametrize("backend", ["openai", "bedrock"])
def test_openai_node_image_generation_streamed_and_not(
        openai_node: Path, upstream: ScriptedUpstream,  # noqa: F811
        images_server: FakeImagesServer, request: pytest.FixtureRequest,  # noqa: F811
        backend: str) -> None:
    server: GatewayServer = request.getfixturevalue(
        "openai_gateway" if backend == "openai" else "gateway")
    script = openai_node / "image_generation.mjs"  # beside node_modules: "openai" resolves
    put(script, NODE_SCRIPT)  # another xdist worker may be running it
    prompts = {kind: f"a lighthouse {kind}" for kind in ("plain", "raw", "helper")}
    asked = {"plain": 2, "raw": 2, "helper": 1}  # partial_images asked for
    asks = {kind: {"input": draw(prompts[kind], f"node-ig-{backend}-{kind}"),
                   "tools": [{"type": "image_generation", "size": "1024x1536",
                              "partial_images": asked[kind]}]}
            for kind in prompts}
    done = subprocess.run(
        [shutil.which("node") or "node", str(script)],
        env={**os.environ, "GATEWAY_BASE_URL": server.base_url, "ASKS": json.dumps(asks)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    partials = asked if backend == "openai" else dict.fromkeys(asked, 0)  # Bedrock: none

    streamed = _check_events(out["events"], partials["raw"])
    helper = _check_events(out["helperEvents"], partials["helper"])
    accumulated = _plain(out["accumulated"])
    assert accumulated["id"] == helper["id"] and accumulated["output"] == helper["output"]
    plain = _plain(out["plain"])
    for kind, response in (("plain", plain), ("raw", streamed), ("helper", accumulated)):
        _check_call(response, prompts[kind], (1024, 1536))
        assert response["tools"] == asks[kind]["tools"]  # echoed as sent
    if backend == "openai":  # the images server was asked for the partials
        sent = {c.fields["prompt"]: c.fields for c in images_server.calls}
        assert sent[prompts["raw"]]["stream"] is True
        assert sent[prompts["raw"]]["partial_images"] == 2
        assert sent[prompts["helper"]]["partial_images"] == 1

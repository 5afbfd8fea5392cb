"""Tools the client runs (issue 29) through openai-node: a shell call streamed (raw events and
the SDK's ``responses.stream`` accumulator) and not, its output sent back with
``previous_response_id``; everything node received is then validated against openai-python's
models (openai-node's types exist only at compile time)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.e2e import e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_clients_conversations import INSTALL_TIMEOUT, openai_node  # noqa: F401

pytestmark = [pytest.mark.node, pytest.mark.slow]

NODE_SCRIPT = r"""
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_BASE_URL, apiKey: "sk-node",
                            maxRetries: 0 });
const tools = [{ type: "shell", environment: { type: "local" } }, { type: "apply_patch" }];
const shell = `[[script:call name=shell args='{"action": {"commands": ["echo node"]}}']]`;
const out = {};
out.first = await client.responses.create({ model: "scripted-model", tools,
                                            input: `node-shell ${shell}` });
const call = out.first.output[0];
out.second = await client.responses.create({
  model: "scripted-model", tools, previous_response_id: out.first.id,
  input: [{ type: "shell_call_output", call_id: call.call_id, output: [
    { stdout: "node\n", stderr: "", outcome: { type: "exit", exit_code: 0 } }] }] });
out.events = [];
const raw = await client.responses.create({ model: "scripted-model", tools, stream: true,
                                            input: `node-stream ${shell}` });
for await (const event of raw) out.events.push(event);
const helper = client.responses.stream({ model: "scripted-model", tools,
                                         input: `node-helper ${shell}` });
for await (const event of helper) {}
out.accumulated = await helper.finalResponse();
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("client-tools-node") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


@pytest.mark.timeout(INSTALL_TIMEOUT + 120)
def test_openai_node_shell_round_trip(
    openai_node: Path, gateway: GatewayServer, upstream: ScriptedUpstream  # noqa: F811
) -> None:
    script = openai_node / "client_tools.mjs"  # beside node_modules: `import "openai"` resolves
    script.write_text(NODE_SCRIPT)
    done = subprocess.run(
        [shutil.which("node") or "node", str(script)],
        env={**os.environ, "GATEWAY_BASE_URL": gateway.base_url},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)

    for response in (out["first"], out["second"], out["accumulated"]):
        for added in ("output_text", "output_parsed"):  # openai-node's, not the wire's
            response.pop(added, None)
        sdk_validate_response(response)
    for event in out["events"]:
        sdk_validate_event(event)
    call = out["first"]["output"][0]
    assert call["type"] == "shell_call" and call["action"]["commands"] == ["echo node"]
    assert out["second"]["output"][0]["content"][0]["text"].startswith("Tool output: [")
    tool_message = [b for b in upstream.requests if "node-shell" in json.dumps(b["messages"])
                    ][-1]["messages"][-1]
    assert tool_message["role"] == "tool" and '"stdout": "node\\n"' in tool_message["content"]
    kinds = [e["type"] for e in out["events"]]
    assert "response.shell_call_command.delta" in kinds
    assert out["events"][-1]["response"]["output"][0]["action"]["commands"] == ["echo node"]
    [accumulated] = out["accumulated"]["output"]
    assert accumulated["type"] == "shell_call"
    assert accumulated["action"]["commands"] == ["echo node"]

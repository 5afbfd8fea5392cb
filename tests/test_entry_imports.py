"""What the entry points import (issue 21): cold start pays for every module, so what a request
may not need — Bedrock, the `mcp` SDK, WebSocket support, Powertools, tokenizers, the openai
SDK, the create body's request models and pydantic itself — loads on first use. Asserted on
module names, in a fresh interpreter, not on time (benchmarks/cold_start.py prints the time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Never imported by the streaming entry point before a request needs them.
LAZY = (
    "openai",
    "mcp",
    "websockets",
    "wsproto",
    "aws_lambda_powertools",
    "aws_xray_sdk",
    "tiktoken",
    "tokenizers",
    "mangum",
    "responses_gateway.backends.bedrock",
    "responses_gateway.api.websocket",
    "responses_gateway.entry.lambda_websocket",
    "responses_gateway.tools.mcp.client",
    # a deployment without GATEWAY_ROUTES / GATEWAY_PRICES never needs them
    "responses_gateway.backends.router",
    "responses_gateway.backends.route_config",
    "responses_gateway.prices",
    # the store wrappers: tracing's (X-Ray on) and the blob store's (an image bucket)
    "responses_gateway.traced_store",
    "responses_gateway.store.wrapper",
    # the reasoning sealer's cipher: built on first use, or by Lambda's init (warm_start.py)
    "cryptography",
)
#: What Lambda's init loads on purpose: its JSON logging, the first create's cipher.
LAMBDA_INIT = ("aws_lambda_powertools", "cryptography")
#: Not imported with the embedded store either (only the DynamoDB store needs them).
AWS_SDK = ("boto3", "botocore")
#: The create body's validators (translate/request.py loads them on the first create): their
#: classes cost a cold start more than the rest of an entry point.
REQUEST_MODELS = (
    "pydantic",
    "pydantic_core",
    "responses_gateway.translate.request_models",
    "responses_gateway.translate.request_items",
    "responses_gateway.translate.request_tools",
    "responses_gateway.translate.request_base",
    "responses_gateway.translate.request_errors",
    "responses_gateway.tools.mcp.params",  # the mcp tool's models (its registration names them)
)

PROBE = """
import asyncio, json, sys
from responses_gateway.api.app import create_app
app = create_app()
imported = sorted(sys.modules)
if {started}:
    async def start():
        async with app.router.lifespan_context(app):
            pass
    asyncio.run(start())
print(json.dumps({{"import": imported, "started": sorted(sys.modules)}}))
"""


def _modules(env: dict[str, str], started: bool) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(started=started)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "handler"), **env},
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


@pytest.mark.slow
def test_the_streaming_entry_point_imports_nothing_a_request_may_not_need(
    tmp_path: Path,
) -> None:
    seen = _modules({"GATEWAY_STORE": f"sqlite:{tmp_path / 'g.db'}"}, started=True)
    assert _loaded(seen["import"], LAZY + AWS_SDK + REQUEST_MODELS) == []
    assert _loaded(seen["started"], LAZY + AWS_SDK + REQUEST_MODELS) == []  # services built


@pytest.mark.slow
@pytest.mark.parametrize("lambda_env", [False, True])
def test_the_deployed_entry_point_loads_only_its_store(lambda_env: bool) -> None:
    env = {
        "GATEWAY_STORE": "dynamodb:entry-imports", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
        **{name: "" for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy",
                                 "http_proxy", "all_proxy")},
    }
    if lambda_env:  # Powertools' JSON logging is what Lambda pays for, and only there
        env |= {"AWS_LAMBDA_FUNCTION_NAME": "entry-imports", "POWERTOOLS_TRACE_DISABLED": "1",
                "POWERTOOLS_METRICS_DISABLED": "1"}
    seen = _modules(env, started=True)
    assert _loaded(seen["import"], LAZY + AWS_SDK + REQUEST_MODELS) == []  # before the lifespan
    lazy = tuple(n for n in LAZY if not (lambda_env and n in LAMBDA_INIT))
    assert _loaded(seen["started"], lazy) == []
    if lambda_env:  # Lambda's init builds what the first create needs (api/warm_start.py)
        assert set(REQUEST_MODELS) <= set(seen["started"])
        assert "cryptography" in seen["started"]  # the sealer's cipher
        # the upstream client, built on the gateway's own transport, never httpx's (httpcore)
        assert "responses_gateway.backends.http11" in seen["started"]
        assert "httpcore" not in seen["started"]
    else:
        assert _loaded(seen["started"], REQUEST_MODELS) == []
    assert "responses_gateway.store.dynamodb" in seen["started"]  # its client: on first use


ENTRY_PROBE = """
import json, sys
import {module}
imported = sorted(sys.modules)
from responses_gateway.translate.request import parse_create_request
parse_create_request({{"model": "m", "input": "hi",
                      "tools": [{{"type": "function", "name": "f"}}]}})
print(json.dumps({{"import": imported, "parsed": sorted(sys.modules)}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("module", [
    "responses_gateway.entry.lambda_buffered",  # builds its services at import
    "responses_gateway.entry.lambda_worker",
    "responses_gateway.entry.lambda_websocket",
    "responses_gateway.entry.cli",  # ``serve`` then imports the streaming entry (above)
])
def test_no_entry_point_loads_the_request_models_before_a_create(module: str) -> None:
    env = {
        "GATEWAY_STORE": "dynamodb:entry-imports", "GATEWAY_WORKER_FUNCTION": "worker",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_LAMBDA_FUNCTION_NAME": "entry-imports", "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_DISABLED": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", ENTRY_PROBE.format(module=module)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "handler"), **env},
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert _loaded(seen["import"], REQUEST_MODELS) == []
    assert set(REQUEST_MODELS) <= set(seen["parsed"])  # the names above are the real ones

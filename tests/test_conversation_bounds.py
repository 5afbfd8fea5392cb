"""A conversation's bounds through the API (issue 27.3), on SQLite and DynamoDB (moto server):
an item write or a turn that would pass GATEWAY_MAX_CONVERSATION_ITEMS or
GATEWAY_MAX_CONVERSATION_BYTES is OpenAI's 400 before anything is written or sent upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers.e2e import MODEL, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import aws_env, create_dynamodb_table, moto_server
from tests.helpers.scripted_upstream import ScriptedUpstream

KEY = "sk-bounds"
MAX_ITEMS = 6
MAX_BYTES = 200_000


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def gateway(
    request: pytest.FixtureRequest,
    upstream: ScriptedUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("bounds") / "gateway.db"
    bounds = {"max_conversation_items": MAX_ITEMS, "max_conversation_bytes": MAX_BYTES,
              "api_keys": (KEY,)}
    if request.param == "sqlite":
        with GatewayServer(e2e_settings(upstream, db, **bounds)) as server:
            yield server
        return
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for key, value in aws_env(endpoint).items():
            patch.setenv(key, value)
        settings = e2e_settings(upstream, db, store=f"dynamodb:{create_dynamodb_table()}",
                                **bounds)
        with GatewayServer(settings) as server:
            yield server


def call(gateway: GatewayServer, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, gateway.base_url.rstrip("/") + path, json=body, timeout=30,
                         headers={"Authorization": f"Bearer {KEY}"})


def messages(n: int, size: int = 10) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": "x" * size} for _ in range(n)]


def refused(answer: httpx.Response, param: str, setting: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error", param, "conversation_too_large")
    assert setting in error["message"]


def item_count(gateway: GatewayServer, conversation_id: str) -> int:
    listed = call(gateway, "GET", f"/conversations/{conversation_id}/items?limit=100").json()
    return len(listed["data"])


@pytest.mark.slow
def test_item_writes_past_the_item_bound_are_refused(gateway: GatewayServer) -> None:
    refused(call(gateway, "POST", "/conversations", {"items": messages(MAX_ITEMS + 1)}),
            "items", "GATEWAY_MAX_CONVERSATION_ITEMS")
    conv = call(gateway, "POST", "/conversations", {"items": messages(4)}).json()["id"]
    assert call(gateway, "POST", f"/conversations/{conv}/items",
                {"items": messages(2)}).status_code == 200
    refused(call(gateway, "POST", f"/conversations/{conv}/items", {"items": messages(1)}),
            "items", "GATEWAY_MAX_CONVERSATION_ITEMS")
    assert item_count(gateway, conv) == MAX_ITEMS


def test_item_writes_past_the_byte_bound_are_refused(gateway: GatewayServer) -> None:
    """The review's reproduction, scaled down: 90 KB items posted until the bound."""
    conv = call(gateway, "POST", "/conversations", {}).json()["id"]
    answers = [call(gateway, "POST", f"/conversations/{conv}/items",
                    {"items": messages(1, 90_000)}) for _ in range(3)]
    assert [a.status_code for a in answers[:2]] == [200, 200]
    refused(answers[2], "items", "GATEWAY_MAX_CONVERSATION_BYTES")
    assert item_count(gateway, conv) == 2


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_on_a_full_conversation_is_refused_before_it_starts(
    gateway: GatewayServer, upstream: ScriptedUpstream, stream: bool
) -> None:
    """A turn's input must fit; its output is admitted whole, so the conversation may pass
    the bound by one response's output, and then takes no more turns."""
    conv = call(gateway, "POST", "/conversations", {"items": messages(MAX_ITEMS - 1)}).json()
    conv = conv["id"]
    body = {"model": MODEL, "input": "one more", "conversation": conv, "stream": stream}
    answer = call(gateway, "POST", "/responses", body)
    assert answer.status_code == 200, answer.text
    assert item_count(gateway, conv) == MAX_ITEMS + 1  # its input and its output
    sent = len(upstream.requests)
    answer = call(gateway, "POST", "/responses", dict(body, input="and another"))
    refused(answer, "input", "GATEWAY_MAX_CONVERSATION_ITEMS")
    assert len(upstream.requests) == sent  # nothing went upstream
    assert item_count(gateway, conv) == MAX_ITEMS + 1

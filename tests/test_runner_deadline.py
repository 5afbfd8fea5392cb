"""The overall deadline (issue 16, item 13): an upstream that sends only keep-alive comments
never trips the read timeout, so GATEWAY_MAX_RESPONSE_SECONDS bounds the whole response. It
ends ``failed`` with the output so far kept and stored, streaming or not, foreground or
background, and the upstream request is closed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from tests.helpers.e2e import MODEL, check_response, check_stream, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import failed_code, reconstruct
from tests.helpers.scripted_upstream import ScriptedUpstream

LIMIT = 1.0
SCRIPT = "[[script:keepalive after=2 n=4 every=0.1 seconds=30]]"


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("deadline") / "gateway.db"
    settings = e2e_settings(upstream, db, max_response_seconds=LIMIT, read_timeout=5)
    with GatewayServer(settings) as server:
        yield server


def _ended_by_the_deadline(response: dict, client: OpenAI) -> None:
    assert response["status"] == "failed"
    assert failed_code(response["error"]) == "response_timeout"
    assert "GATEWAY_MAX_RESPONSE_SECONDS" in response["error"]["message"]
    stored = client.responses.retrieve(response["id"]).to_dict()
    assert stored["status"] == "failed" and stored["output"] == response["output"]


@pytest.mark.slow
def test_a_keepalive_only_stream_ends_failed_at_the_deadline(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    upstream.reset()
    started = time.monotonic()
    events = [e.to_dict() for e in client.responses.create(model=MODEL, input=SCRIPT,
                                                          stream=True)]
    took = time.monotonic() - started
    assert LIMIT <= took < LIMIT + 2, took  # not the 30 s of keep-alives
    check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert reconstruct(events).text  # the two deltas before the keep-alives are kept
    _ended_by_the_deadline(events[-1]["response"], client)
    stream = upstream.streams[-1]  # the upstream request was closed, not left running
    deadline = time.monotonic() + 10  # seen by the upstream's thread after the gateway closed it
    while stream.closed_at is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stream.closed_at is not None
    assert not stream.completed


@pytest.mark.slow
def test_a_non_stream_request_ends_failed_at_the_deadline(
    client: OpenAI, gateway: GatewayServer
) -> None:
    started = time.monotonic()
    answer = httpx.post(gateway.base_url + "/responses",
                        json={"model": MODEL, "input": "[[script:stall after=1 seconds=30]]"},
                        timeout=30)
    assert time.monotonic() - started < LIMIT + 2
    response = check_response(answer.json())
    _ended_by_the_deadline(response, client)


@pytest.mark.slow
def test_a_background_response_ends_failed_at_the_deadline(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input=SCRIPT, background=True)
    deadline = time.monotonic() + 10
    while (current := client.responses.retrieve(created.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    response = check_response(current)
    _ended_by_the_deadline(response, client)
    assert response["output"] and response["output"][0]["content"][0]["text"]


def test_a_fast_response_is_untouched(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="[[script:text]]")
    assert response.status == "completed"

"""A response always ends in one terminal event and a true stored status, whatever breaks:
a chunk of the wrong shape, a backend refusing part of the request after the stream started,
or a bug-like exception inside a backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from responses_gateway.backends.base import BackendRequest, BaseBackend
from responses_gateway.config import Settings
from responses_gateway.errors import GatewayError
from responses_gateway.responses.services import build_gateway
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator
from tests.helpers.e2e import split_frames
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import (
    check_grammar,
    events_from_sse,
    failed_code,
    validate_event,
)

TEXT = {"choices": [{"index": 0, "delta": {"content": "partial"}}]}
STOP = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
MALFORMED = [
    {"choices": [None]},
    {"choices": {"a": 1}},
    {"choices": [{"index": 0, "delta": {"content": 5}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [None]}}]},
    {"choices": [{"index": 0, "delta": {"refusal": 5}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": ["stop"]}]},
    {"usage": "x"},
    {"choices": [], "usage": {"prompt_tokens": "3", "prompt_tokens_details": 7}},
]


@pytest.mark.parametrize("bad", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_a_chunk_of_the_wrong_shape_fails_the_response_cleanly(bad: dict[str, Any]) -> None:
    translator = ResponseTranslator(new_response({"model": "m"}, response_id="resp_x",
                                                 created_at=0))
    events = translator.start() + translator.feed(TEXT) + translator.feed(bad)
    if not translator.done:
        events += translator.feed(STOP) + translator.finish()
    check_grammar(events)
    for event in events:
        validate_event(event)
    terminal = events[-1]
    assert terminal["type"] in ("response.failed", "response.completed")
    if terminal["type"] == "response.failed":
        assert terminal["response"]["error"]["code"] == "server_error"  # the SDK's enum
        assert "upstream_protocol_error" in terminal["response"]["error"]["message"]
    # what was produced before the bad chunk is kept
    assert terminal["response"]["output"][0]["content"][0]["text"] == "partial"


class _Backend(BaseBackend):
    """Yields one text chunk, waits, then raises what the test asks for."""

    name = "fake"

    def __init__(self, error: BaseException, delay: float) -> None:
        self.error = error
        self.delay = delay

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[dict[str, Any]]]:
        await asyncio.sleep(self.delay)
        yield [TEXT]
        raise self.error

    async def aclose(self) -> None:
        return None


@pytest.fixture(params=["gateway_error", "bug"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GatewayServer]:
    error: BaseException = (
        GatewayError(400, "Image URL could not be fetched.", code="invalid_image_url")
        if request.param == "gateway_error" else RuntimeError("boom")
    )
    settings = Settings(store=f"sqlite:{tmp_path / 'g.db'}", stream_grace_seconds=0.05)
    gateway = build_gateway(settings)
    gateway.backend_for = lambda kind: _Backend(error, delay=0.2)  # type: ignore[method-assign]
    with GatewayServer(settings, gateway=gateway) as srv:
        srv.expected_code = ("invalid_image_url" if request.param == "gateway_error"  # type: ignore[attr-defined]
                             else "server_error")
        yield srv


def test_a_failure_after_the_stream_started_ends_failed_and_is_stored(
    server: GatewayServer,
) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        reply = http.post("/responses", json={"model": "m", "input": "hi", "stream": True})
        assert reply.status_code == 200
        frames, rest = split_frames(reply.content)
        assert rest == b""
        events = events_from_sse(frames)
        check_grammar(events)
        terminal = events[-1]
        assert terminal["type"] == "response.failed"
        assert failed_code(terminal["response"]["error"]) == server.expected_code  # type: ignore[attr-defined]
        stored = http.get(f"/responses/{terminal['response']['id']}").json()
        assert stored["status"] == "failed"
        assert stored["output"][0]["content"][0]["text"] == "partial"


def test_a_failure_in_a_non_stream_request_is_a_failed_response(server: GatewayServer) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        started = time.monotonic()
        reply = http.post("/responses", json={"model": "m", "input": "hi"})
        assert time.monotonic() - started < 5
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["status"] == "failed"
        assert body["error"]["code"] == server.expected_code  # type: ignore[attr-defined]
        assert "Traceback" not in reply.text


@pytest.mark.parametrize("delta", [
    {"content": [{"type": "text", "text": 5}]},
    {"reasoning_details": [{"type": "reasoning.text", "text": ["x"]}]},
    {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": 7}]}]},
])
def test_parts_of_the_wrong_type_fail_the_response_cleanly(delta: dict[str, Any]) -> None:
    translator = ResponseTranslator(new_response({"model": "m"}, response_id="resp_x",
                                                 created_at=0))
    events = translator.start() + translator.feed(TEXT)
    events += translator.feed({"choices": [{"index": 0, "delta": delta}]})
    if not translator.done:
        events += translator.finish()
    check_grammar(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert "upstream_protocol_error" in events[-1]["response"]["error"]["message"]


# -- a batch that ends early -------------------------------------------------------------------

BOOM: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": "never"}}]}


class _Batches(BaseBackend):
    """Yields the batches it was given, as if each came in one network read."""

    name = "fake"

    def __init__(self, batches: list[list[dict[str, Any]]]) -> None:
        self.batches = batches

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[dict[str, Any]]]:
        for batch in self.batches:
            yield batch

    async def aclose(self) -> None:
        return None


async def _run_batches(
    tmp_path: Path, batches: list[list[dict[str, Any]]], *, leave_after: int | None = None
) -> tuple[list[list[dict[str, Any]]], dict[str, Any] | None]:
    """The batches a consumer got (leaving after ``leave_after`` of them), and what was stored."""
    gateway = build_gateway(Settings(store=f"sqlite:{tmp_path / 'g.db'}"))
    gateway.backend_for = lambda kind: _Batches(batches)  # type: ignore[method-assign]
    try:
        job = await gateway.new_job({"model": "m", "input": "hi", "stream": True}, "default")
        got: list[list[dict[str, Any]]] = []
        source = job.batches()
        async for batch in source:
            got.append(batch)
            if leave_after is not None and len(got) == leave_after:
                break
        await source.aclose()  # type: ignore[attr-defined]
        stored = await gateway.store.get(job.record.id, "default")
        return got, None if stored is None else stored.response
    finally:
        await gateway.aclose()


def test_an_error_chunk_in_a_batch_is_stored_before_the_batch_leaves(tmp_path: Path) -> None:
    """The client may leave while the batch that ends the response is on its way: by then the
    record is already written, with the text that came before the error."""
    error = {"error": {"code": "rate_limit_exceeded", "message": "slow down"}}
    got, stored = asyncio.run(_run_batches(tmp_path, [[TEXT, error]], leave_after=2))
    events = [event for batch in got for event in batch]
    check_grammar(events)
    assert got[1][0]["type"] == "response.output_item.added"
    assert got[1][-1]["type"] == "response.failed"  # one batch: the text and the ending
    assert stored is not None and stored["status"] == "failed"
    assert stored["output"][0]["content"][0]["text"] == "partial"


def test_a_failure_inside_the_gateway_mid_batch_keeps_what_came_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = ResponseTranslator.feed

    def failing_feed(self: ResponseTranslator, chunk: Any) -> list[dict[str, Any]]:
        if chunk is BOOM:
            raise RuntimeError("a bug in the gateway")
        return feed(self, chunk)

    monkeypatch.setattr(ResponseTranslator, "feed", failing_feed)
    got, stored = asyncio.run(_run_batches(tmp_path, [[TEXT, BOOM]]))
    events = [event for batch in got for event in batch]
    check_grammar(events)  # every item that is done was added; sequence numbers without gaps
    for event in events:
        validate_event(event)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["partial"]
    assert stored is not None and stored["status"] == "failed"

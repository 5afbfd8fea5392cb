"""Compaction within bounds (issue 27.2) and its leftovers (27.10): the summarising calls one
compaction may make and the bytes it may read (checked before any upstream call), the
response deadline, a client that leaves; ``compaction_trigger`` input items; the summarising
calls' tokens in a create's ``usage``.

End to end through real HTTP against the gateway under uvicorn, in front of the scripted
upstream, which records every chat request and whether its client left while it waited.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import APIStatusError, BadRequestError, OpenAI

from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import failed_code
from tests.helpers.scripted_upstream import ScriptedUpstream, message_text

pytestmark = pytest.mark.slow

FACTS = "script/facts"
WINDOWED = "scripted"  # a model with a small context window (GATEWAY_CONTEXT_WINDOWS)
WINDOW = 2000
MAX_CALLS = 4
MAX_INPUT_BYTES = 300_000
KEY = "key-a"
AUTH = {"authorization": f"Bearer {KEY}"}


def _settings(upstream: ScriptedUpstream, db: Path, **overrides: Any) -> Any:
    return e2e_settings(upstream, db, api_keys=(KEY,), seal_key="bounds-test-key",
                        context_windows={WINDOWED: WINDOW}, max_compaction_calls=MAX_CALLS,
                        max_compaction_input_bytes=MAX_INPUT_BYTES, **overrides)


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("bounds") / "gateway.db"
    with GatewayServer(_settings(upstream, db)) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(gateway, api_key=KEY) as c:
        yield c


def history(n: int, size: int = 1000) -> list[dict[str, Any]]:
    """``n`` messages of about ``size`` bytes, user and assistant in turn."""
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"FACT:m{i} " + "word " * (size // 5)} for i in range(n)]


def conversation(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(n):
        items.append({"role": "user", "content": f"Remember FACT:f{i}."})
        items.append({"role": "assistant", "content": f"Noted f{i}."})
    return items


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def post(gateway: GatewayServer, path: str, body: dict[str, Any], timeout: float = 30
         ) -> httpx.Response:
    return httpx.post(gateway.base_url + path, json=body, headers=AUTH, timeout=timeout)


def leave_after(gateway: GatewayServer, path: str, body: dict[str, Any], seconds: float) -> None:
    """Send the request and leave (close the connection) after ``seconds`` without an answer."""
    with (httpx.Client(timeout=seconds) as http, pytest.raises(httpx.ReadTimeout),
          http.stream("POST", gateway.base_url + path, json=body, headers=AUTH) as answer):
        answer.read()


def summarising(upstream: ScriptedUpstream) -> list[dict[str, Any]]:
    return [r for r in upstream.requests if r.get("stream") is False]


# -- the number of summarising calls and the input's size: checked before any call ----------


def test_a_long_history_is_refused_before_any_upstream_call(gateway: GatewayServer,
                                                            upstream: ScriptedUpstream) -> None:
    upstream.reset()
    answer = post(gateway, "/responses/compact", {"model": WINDOWED, "input": history(200)})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "GATEWAY_MAX_COMPACTION_CALLS" in error["message"]
    assert upstream.requests == []


def test_a_history_within_the_bound_is_summarised_in_parts(gateway: GatewayServer,
                                                           upstream: ScriptedUpstream) -> None:
    upstream.reset()
    answer = post(gateway, "/responses/compact", {"model": WINDOWED, "input": history(14)})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][-1]["type"] == "compaction"
    calls = summarising(upstream)
    assert 1 < len(calls) <= MAX_CALLS and len(calls) == len(upstream.requests)
    # Each part's summary leads the next part.
    assert all("Earlier turns of this conversation were compacted" in json.dumps(c["messages"])
               for c in calls[1:])


def test_context_management_on_create_is_bounded_too(gateway: GatewayServer,
                                                     upstream: ScriptedUpstream) -> None:
    upstream.reset()
    answer = post(gateway, "/responses", {
        "model": WINDOWED, "input": history(200), "stream": True,
        "context_management": [{"type": "compaction", "compact_threshold": 100}]})
    assert answer.status_code == 400, answer.text
    assert "GATEWAY_MAX_COMPACTION_CALLS" in answer.json()["error"]["message"]
    assert upstream.requests == []


def test_the_input_size_is_bounded_whatever_the_window(gateway: GatewayServer,
                                                       upstream: ScriptedUpstream) -> None:
    upstream.reset()
    big = history(3, size=120_000)  # no window known for FACTS: it would be one call
    for path, body in (("/responses/compact", {"model": FACTS, "input": big}),
                       ("/responses", {"model": FACTS, "input": [*big, {
                           "type": "compaction_trigger"}]})):
        answer = post(gateway, path, body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "context_length_exceeded" and error["param"] == "input"
        assert "GATEWAY_MAX_COMPACTION_INPUT_BYTES" in error["message"]
    assert upstream.requests == []


# -- the client leaving ---------------------------------------------------------------------


STALL = "[[script:stall seconds=2]]"  # each summarising call takes 2 s


@pytest.mark.parametrize("path", ["/responses/compact", "/responses", "/responses?stream"])
def test_a_client_that_leaves_stops_the_compaction(gateway: GatewayServer,
                                                   upstream: ScriptedUpstream, path: str) -> None:
    upstream.reset()
    body: dict[str, Any] = {"model": WINDOWED, "input": history(14), "instructions": STALL}
    if path != "/responses/compact":
        body["context_management"] = [{"type": "compaction", "compact_threshold": 100}]
        body["stream"] = path.endswith("stream")
    if body.get("stream"):
        # A stream compacts after response.created (keep-alives flow meanwhile): the client
        # leaves once it has read that the compaction is under way and its call is upstream.
        with (httpx.Client(timeout=30) as http,
              http.stream("POST", gateway.base_url + "/responses", json=body,
                          headers=AUTH) as answer):
            lines = answer.iter_lines()  # (held: a dropped iterator closes the connection)
            for line in lines:
                if line == "event: response.compaction.compacting":
                    break
            assert wait_for(lambda: bool(upstream.requests), 5)
    else:
        leave_after(gateway, path.split("?")[0], body, 0.7)
    # The summarising call under way is closed at once; no further one starts.
    assert wait_for(lambda: any(c.client_disconnected for c in upstream.completions), 10)
    time.sleep(2.5)  # a part's call lasts 2 s: the next one would have started by now
    assert len(upstream.requests) == 1
    assert [c.client_disconnected for c in upstream.completions] == [True]


def test_a_background_create_compacts_on_when_its_client_leaves(
        gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    body = {"model": WINDOWED, "input": history(8), "instructions": STALL, "background": True,
            "context_management": [{"type": "compaction", "compact_threshold": 100}]}
    leave_after(gateway, "/responses", body, 0.7)
    # The compaction ran to its end and the response's model turn followed (streamed).
    assert wait_for(lambda: any(r.get("stream") for r in upstream.requests), 20)
    assert all(c.completed and not c.client_disconnected for c in upstream.completions)
    assert len(summarising(upstream)) > 1


# -- the response deadline ------------------------------------------------------------------


@pytest.fixture(scope="module")
def hurried(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    """A gateway whose responses may take 1.5 s (GATEWAY_MAX_RESPONSE_SECONDS)."""
    db = tmp_path_factory.mktemp("hurried") / "gateway.db"
    with GatewayServer(_settings(upstream, db, max_response_seconds=1.5)) as server:
        yield server


@pytest.mark.parametrize("path", ["/responses/compact", "/responses"])
def test_a_compaction_ends_at_the_response_deadline(hurried: GatewayServer,
                                                    upstream: ScriptedUpstream,
                                                    path: str) -> None:
    upstream.reset()
    body: dict[str, Any] = {"model": WINDOWED, "input": conversation(3),
                            "instructions": "[[script:stall seconds=6]]"}
    if path == "/responses":
        body["context_management"] = [{"type": "compaction", "compact_threshold": 1}]
    started = time.monotonic()
    answer = post(hurried, path, body)
    took = time.monotonic() - started
    assert answer.status_code == 504, answer.text
    error = answer.json()["error"]
    assert error["code"] == "response_timeout" and error["type"] == "server_error"
    assert "GATEWAY_MAX_RESPONSE_SECONDS" in error["message"]
    assert 1.4 < took < 4
    # The summarising call was closed, not left to run.
    assert wait_for(lambda: any(c.client_disconnected for c in upstream.completions), 10)
    assert len(upstream.requests) == 1


def test_a_streamed_compaction_fails_at_the_response_deadline(hurried: GatewayServer,
                                                              upstream: ScriptedUpstream
                                                              ) -> None:
    """After response.created the deadline ends the compaction as a failed response (not a
    cancelled one), and its summarising call is closed."""
    upstream.reset()
    with client_for(hurried, api_key=KEY) as client, client.responses.create(
            model=WINDOWED, input=conversation(3), stream=True,
            instructions="[[script:stall seconds=6]]",
            context_management=[{"type": "compaction", "compact_threshold": 1}]) as stream:
        events = sdk_events(stream)
    check_stream(events)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.compaction.compacting",
        "response.failed"]
    error = events[-1]["response"]["error"]
    assert failed_code(error) == "response_timeout"  # (OpenAI's code set: server_error)
    assert "GATEWAY_MAX_RESPONSE_SECONDS" in error["message"]
    assert wait_for(lambda: any(c.client_disconnected for c in upstream.completions), 10)
    assert len(upstream.requests) == 1


# -- compaction_trigger -----------------------------------------------------------------------


TRIGGER = {"type": "compaction_trigger"}


def test_compaction_trigger_compacts_and_the_model_does_not_run(client: OpenAI,
                                                                upstream: ScriptedUpstream
                                                                ) -> None:
    upstream.reset()
    response = client.responses.create(model=FACTS, input=[*conversation(3), TRIGGER])
    body = check_response(response)
    assert body["status"] == "completed"
    [item] = body["output"]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    [call] = upstream.requests  # one summarising call, no model turn
    assert call["stream"] is False and "summary" in call["messages"][-1]["content"]
    assert "compaction_trigger" not in json.dumps(call)
    # The usage is the summarising call's.
    prompt = sum(len(message_text(m).split()) + 1 for m in call["messages"])
    assert body["usage"]["input_tokens"] == prompt and body["usage"]["output_tokens"] == 2

    # Chained by id: the trigger and what it stood for are behind the compaction item.
    follow = client.responses.create(model=FACTS, previous_response_id=response.id,
                                     input="What do you know?")
    assert follow.output_text == "FACTS: FACT:f0 FACT:f1 FACT:f2"
    sent = upstream.requests[-1]["messages"]
    assert "Noted" not in json.dumps(sent)
    # Stateless: the input and the output sent back (a trigger is the final item or none).
    again = client.responses.create(model=FACTS, input=[
        *conversation(3), *body["output"], {"role": "user", "content": "And?"}])
    assert again.output_text == "FACTS: FACT:f0 FACT:f1 FACT:f2"


def test_compaction_trigger_streams_its_item(client: OpenAI, upstream: ScriptedUpstream
                                             ) -> None:
    upstream.reset()
    with client.responses.create(model=FACTS, input=[*conversation(2), TRIGGER],
                                 stream=True) as stream:
        events = sdk_events(stream)
    check_stream(events)
    # compacting while the summary is written, then the item, whole
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.compaction.compacting",
        "response.output_item.added", "response.output_item.done", "response.completed"]
    compacting = next(e for e in events if e["type"] == "response.compaction.compacting")
    assert compacting["item_id"] == events[-1]["response"]["output"][0]["id"]
    assert compacting["output_index"] == 0
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["compaction"]
    assert final["usage"]["input_tokens"] > 0
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("how", ["trigger", "threshold"])
def test_compacting_leaves_while_the_summary_is_written(client: OpenAI,
                                                        upstream: ScriptedUpstream,
                                                        how: str) -> None:
    """The upstream holds the summarising call until the client has read
    ``response.compaction.compacting``: the event cannot have been sent after the work."""
    upstream.reset()
    gate = upstream.completions_gate = threading.Event()
    if how == "trigger":
        body: dict[str, Any] = {"model": FACTS, "input": [*conversation(2), TRIGGER]}
    else:
        body = {"model": WINDOWED, "input": history(3),
                "context_management": [{"type": "compaction", "compact_threshold": 100}]}
    events: list[dict[str, Any]] = []
    try:
        with client.responses.create(**body, stream=True) as stream:
            for event in stream:
                events.append(event.to_dict(mode="json"))
                if event.type == "response.compaction.compacting":
                    # the summarising call is upstream, held: nothing has answered it yet
                    assert wait_for(lambda: len(upstream.completions) == 1, 10)
                    assert not upstream.completions[0].completed
                    gate.set()
    finally:
        gate.set()
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress",
                         "response.compaction.compacting", "response.output_item.added",
                         "response.output_item.done"]
    item = events[-1]["response"]["output"][0]
    assert item["type"] == "compaction" and events[2]["item_id"] == item["id"]
    assert events[3]["item"]["id"] == item["id"] and events[2]["output_index"] == 0
    assert kinds[-1] == "response.completed"
    if how == "threshold":  # the model then read the compacted conversation
        assert events[-1]["response"]["output"][-1]["type"] == "message"
        assert "FACT:m0" not in json.dumps(upstream.requests[-1]["messages"][:-1])


def test_a_compaction_that_fails_in_a_stream_is_a_failed_response(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    """A streamed create compacts after response.created: its failure is response.failed
    with the error; a non-streamed create keeps the HTTP error."""
    failing = "[[script:error status=500 message='summariser down']]"
    upstream.reset()
    with client.responses.create(model=WINDOWED, input=[*conversation(2), TRIGGER],
                                 instructions=failing, stream=True) as stream:
        events = sdk_events(stream)
    check_stream(events)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.compaction.compacting",
        "response.failed"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["output"] == []
    assert failed["error"]["code"] and "summariser down" in failed["error"]["message"]
    # Stored as failed, like any response that failed while streaming.
    assert client.responses.retrieve(failed["id"]).status == "failed"

    upstream.reset()
    with pytest.raises(APIStatusError) as refused:
        client.responses.create(model=WINDOWED, input=[*conversation(2), TRIGGER],
                                instructions=failing)
    assert refused.value.status_code >= 500


def test_compaction_trigger_must_be_the_final_input_item(client: OpenAI,
                                                         upstream: ScriptedUpstream) -> None:
    upstream.reset()
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model=FACTS, input=[TRIGGER, *conversation(1)])
    error = refused.value.body
    assert error["message"] == "The 'compaction_trigger' item must be the final input item."  # type: ignore[index]
    assert error["param"] == "input[0]"  # type: ignore[index]
    with pytest.raises(BadRequestError) as empty:
        client.responses.create(model=FACTS, input=[TRIGGER])
    assert empty.value.body["param"] == "input"  # type: ignore[index]
    assert upstream.requests == []


# -- the summarising calls' tokens in a create's usage --------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_context_management_usage_counts_the_summarising_call(
        client: OpenAI, upstream: ScriptedUpstream, stream: bool) -> None:
    upstream.reset()
    kwargs: dict[str, Any] = dict(
        model=FACTS, input=[*conversation(4), {"role": "user", "content": "Recall."}],
        context_management=[{"type": "compaction", "compact_threshold": 20}])
    if stream:
        with client.responses.create(stream=True, **kwargs) as s:
            final = sdk_events(s)[-1]["response"]
    else:
        final = check_response(client.responses.create(**kwargs))
    assert final["output"][0]["type"] == "compaction"
    summary_call, model_call = upstream.requests
    assert summary_call["stream"] is False and model_call.get("tool_choice") != "none"
    prompts = [sum(len(message_text(m).split()) + 1 for m in r["messages"])
               for r in upstream.requests]
    usage = final["usage"]
    assert usage["input_tokens"] == sum(prompts)  # the summarising call's and the model's
    assert usage["output_tokens"] == 2 + 2  # each answered in two deltas
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_compacting_over_a_websocket(client: OpenAI, upstream: ScriptedUpstream) -> None:
    """A WebSocket create streams like SSE: compacting while the summary is written, before
    the item (the upstream holds the summarising call until the client has read it)."""
    upstream.reset()
    gate = upstream.completions_gate = threading.Event()
    events: list[dict[str, Any]] = []
    try:
        with client.responses.connect() as connection:
            connection.response.create(model=FACTS, input=[*conversation(2), TRIGGER])
            while not events or events[-1]["type"] not in (
                    "response.completed", "response.failed", "error"):
                events.append(connection.recv().to_dict(mode="json"))
                if events[-1]["type"] == "response.compaction.compacting":
                    assert wait_for(lambda: len(upstream.completions) == 1, 10)
                    assert not upstream.completions[0].completed
                    gate.set()
    finally:
        gate.set()
    check_stream(events)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.compaction.compacting",
        "response.output_item.added", "response.output_item.done", "response.completed"]
    assert events[2]["item_id"] == events[-1]["response"]["output"][0]["id"]

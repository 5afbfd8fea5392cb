"""WebSocket mode on API Gateway: the $connect/$default/$disconnect handler driven with the
sample events in events/, DynamoDB served by moto and the management API (PostToConnection)
by a stand-in on 127.0.0.1 that records every message, over real HTTP through boto3."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from responses_gateway.entry import lambda_websocket as websocket_apigw
from responses_gateway.store import connections
from responses_gateway.store.base import StoreUnavailable
from responses_gateway.store.connections import Connections
from tests.helpers.e2e import MODEL, check_response, check_stream
from tests.helpers.gateway_server import bound_socket
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.test_websocket import check_ws_event

pytestmark = pytest.mark.slow

EVENTS = Path(__file__).resolve().parent.parent / "events"
KEY = "gw-key-1"


class ManagementApi:
    """``POST /{stage}/@connections/{id}``: records each message; 410 for gone connections."""

    def __init__(self) -> None:
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.gone: set[str] = set()
        self._sock = bound_socket()
        self.port = self._sock.getsockname()[1]
        app = Starlette(routes=[Route("/{stage}/@connections/{cid}", self._post,
                                      methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, args=([self._sock],),
                                        daemon=True)

    async def _post(self, request: Request) -> Response:
        cid = urllib.parse.unquote(request.path_params["cid"])
        if cid in self.gone:
            return JSONResponse({"message": "Gone"}, status_code=410,
                                headers={"x-amzn-ErrorType": "GoneException"})
        self.messages.setdefault(cid, []).append(json.loads(await request.body()))
        return Response(status_code=200)

    def __enter__(self) -> ManagementApi:
        self._thread.start()
        while not self._server.started:
            threading.Event().wait(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@pytest.fixture(scope="module")
def management() -> Iterator[ManagementApi]:
    with ManagementApi() as api:
        yield api


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, upstream: Any,
        management: ManagementApi) -> str:
    use_moto(monkeypatch, moto_endpoint)
    table = create_dynamodb_table()
    monkeypatch.setenv("GATEWAY_STORE", f"dynamodb:{table}")
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", upstream.base_url)
    monkeypatch.setenv("GATEWAY_API_KEYS", KEY)
    monkeypatch.setenv("GATEWAY_MAX_RETRIES", "0")
    monkeypatch.setenv("GATEWAY_WS_MANAGEMENT_URL", f"http://127.0.0.1:{management.port}/prod")
    monkeypatch.setattr(websocket_apigw, "_gateway", None)
    monkeypatch.setattr(websocket_apigw, "_clients", {})
    return table


def sample(name: str, connection_id: str, **changes: Any) -> dict[str, Any]:
    event = copy.deepcopy(json.loads((EVENTS / f"{name}.json").read_text()))
    event["requestContext"]["connectionId"] = connection_id
    event.update(changes)
    return event


def message(connection_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return websocket_apigw.handler(sample("ws_default", connection_id, body=json.dumps(body)),
                                   None)


def connect(connection_id: str) -> None:
    assert websocket_apigw.handler(sample("ws_connect", connection_id), None)["statusCode"] == 200


def create(input: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "response.create", "model": MODEL, "input": input, **fields}


def table(name: str, client: Any = None) -> Connections:
    return Connections(name, client or boto3.session.Session().client("dynamodb"))


def test_connect_checks_the_key(aws: str) -> None:
    event = sample("ws_connect", "c-auth")
    event["headers"]["Authorization"] = "Bearer wrong-key"
    answer = websocket_apigw.handler(event, None)
    assert answer["statusCode"] == 401
    assert json.loads(answer["body"])["error"]["code"] == "invalid_api_key"
    assert "wrong-key" not in answer["body"]
    del event["headers"]["Authorization"]
    assert websocket_apigw.handler(event, None)["statusCode"] == 401


def test_events_arrive_complete_and_in_order_and_store_false_continues(
    aws: str, management: ManagementApi, upstream: Any
) -> None:
    cid = "c-chain="
    connect(cid)
    message(cid, create("[[script:deltas n=40]] remember: basalt", store=False))
    first = management.messages.pop(cid)
    for event in first:
        check_ws_event(event)
    check_stream(first)
    assert [e["sequence_number"] for e in first] == list(range(len(first)))
    response = check_response(first[-1]["response"])
    assert response["status"] == "completed"

    # Another invocation (maybe another execution environment): the state comes from DynamoDB.
    websocket_apigw._clients.clear()
    message(cid, create("which word?", store=False, previous_response_id=response["id"]))
    second = management.messages.pop(cid)
    check_stream(second)
    assert second[-1]["type"] == "response.completed"
    assert "basalt" in json.dumps(upstream.requests[-1]["messages"])

    answer = websocket_apigw.handler(sample("ws_disconnect", cid), None)
    assert answer["statusCode"] == 200
    assert message(cid, create("after disconnect"))["statusCode"] == 410
    assert cid not in management.messages


def test_the_management_url_is_read_with_the_settings(
    aws: str, management: ManagementApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GATEWAY_WS_MANAGEMENT_URL is a setting, read once with the others (not from the
    environment at each post): events still reach it after the variable is gone."""
    cid = "c-management-url"
    connect(cid)  # the gateway, and its settings, are built here
    monkeypatch.delenv("GATEWAY_WS_MANAGEMENT_URL")
    websocket_apigw._clients.clear()
    message(cid, create("hello", store=False))
    assert management.messages.pop(cid)[-1]["type"] == "response.completed"
    assert websocket_apigw._get_gateway().settings.ws_management_url == (
        f"http://127.0.0.1:{management.port}/prod")


def test_failed_continuation_evicts_across_invocations(
    aws: str, management: ManagementApi
) -> None:
    cid = "c-evict"
    connect(cid)
    message(cid, create("seed", store=False))
    seed = management.messages.pop(cid)[-1]["response"]["id"]
    message(cid, create("fork", model="script/error status=400", store=False,
                        previous_response_id=seed))
    assert management.messages.pop(cid)[-1]["response"]["status"] == "failed"
    message(cid, create("again", store=False, previous_response_id=seed))
    [error] = management.messages.pop(cid)
    assert error["error"]["code"] == "previous_response_not_found"


def test_bad_input_and_a_busy_lane_are_error_events(aws: str, management: ManagementApi) -> None:
    cid = "c-bad"
    connect(cid)
    message(cid, {"type": "nope"})
    message(cid, create("x", background=True))
    table(aws).claim(cid, None)
    message(cid, create("while another invocation runs"))
    errors = management.messages.pop(cid)
    for event in errors:
        check_ws_event(event)
    assert [(e["status"], e["error"]["code"]) for e in errors] == [
        (400, "invalid_value"), (400, "invalid_request_error"), (409, "response_in_progress")]


def test_a_gone_connection_cancels_the_response(aws: str, management: ManagementApi) -> None:
    cid = "c-gone"
    connect(cid)
    management.gone.add(cid)
    answer = message(cid, create("[[script:slow delay=0.05 n=20]] nobody listens"))
    assert answer["statusCode"] == 200
    assert cid not in management.messages


def test_only_each_lanes_most_recent_response_is_kept_across_invocations(
    aws: str, management: ManagementApi, upstream: Any
) -> None:
    cid = "c-recent"
    connect(cid)
    message(cid, create("one: garnet", store=False))
    one = management.messages.pop(cid)[-1]["response"]["id"]
    message(cid, create("two", store=False, previous_response_id=one))
    two = management.messages.pop(cid)[-1]["response"]["id"]
    message(cid, create("fork", store=False, previous_response_id=one))
    [error] = management.messages.pop(cid)
    assert error["error"]["code"] == "previous_response_not_found"
    message(cid, create("three", store=False, previous_response_id=two))
    assert management.messages.pop(cid)[-1]["type"] == "response.completed"
    assert "garnet" in json.dumps(upstream.requests[-1]["messages"])  # two carried one
    state = table(aws).load(cid)
    assert state is not None and list(state["remembered"]) == [None]


class Unprocessing:
    """A DynamoDB client whose BatchWriteItem leaves the last request unprocessed in its first
    ``times`` calls (as DynamoDB does under throttling), then lets every call through."""

    def __init__(self, client: Any, times: int) -> None:
        self._client = client
        self.times = times
        self.batches: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        [(name, requests)] = RequestItems.items()
        self.batches.append(len(requests))
        if self.times <= 0:
            return self._client.batch_write_item(RequestItems=RequestItems)
        self.times -= 1
        if len(requests) > 1:
            self._client.batch_write_item(RequestItems={name: requests[:-1]})
        return {"UnprocessedItems": {name: requests[-1:]}}


class _NoWait:
    """The backoff's ``random``: draws 0 (which full jitter may draw) and keeps each cap, so
    the test checks the backoff's growth without sleeping through it (up to 50 s)."""

    def __init__(self) -> None:
        self.caps: list[float] = []

    def uniform(self, low: float, high: float) -> float:
        self.caps.append(high)
        return low


def test_disconnect_deletes_what_dynamodb_left_unprocessed(
        aws: str, management: ManagementApi, monkeypatch: pytest.MonkeyPatch) -> None:
    jitter = _NoWait()
    monkeypatch.setattr(connections, "random", jitter)
    cid = "c-unprocessed"
    connect(cid)
    for lane in ("a", "b", "c"):
        message(cid, create(f"lane {lane}", store=False, stream_id=lane))
    client = Unprocessing(boto3.session.Session().client("dynamodb"), times=2)
    table(aws, client).close(cid)
    # the head, three lanes' responses and their steering items; resubmitted until nothing
    # was left
    assert client.batches == [7, 1, 1]
    items = client.query(TableName=aws, KeyConditionExpression="pk = :pk",
                         ExpressionAttributeValues={":pk": {"S": f"WS#{cid}"}})["Items"]
    assert items == []

    connect(cid)
    message(cid, create("again", store=False, stream_id="a"))
    stubborn = Unprocessing(boto3.session.Session().client("dynamodb"), times=100)
    with pytest.raises(StoreUnavailable):  # bounded: it gives up, loudly
        table(aws, stubborn).close(cid)
    assert len(stubborn.batches) == 10
    assert jitter.caps[-10:] == [0.05 * 2**attempt for attempt in range(10)]  # exponential


def steer_elsewhere(connection_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """A message handled by another invocation while one runs (its own event loop, as another
    execution environment would have)."""
    event = sample("ws_default", connection_id, body=json.dumps(body))
    return asyncio.run(websocket_apigw._handle(event))


def wait_for(management: ManagementApi, cid: str, kind: str) -> None:
    """Until the stand-in received an event of ``kind`` (bounded by the test's timeout)."""
    while not any(e["type"] == kind for e in management.messages.get(cid, [])):
        time.sleep(0.05)


def test_a_steer_from_another_invocation_steers_the_running_response(
    aws: str, management: ManagementApi, upstream: Any
) -> None:
    cid = "c-steer"
    connect(cid)
    running = threading.Thread(target=message, args=(
        cid, create("[[script:slow delay=0.3 n=60]] Count slowly.", instructions="Be brief.")))
    running.start()
    wait_for(management, cid, "response.output_text.delta")
    first_id = management.messages[cid][0]["response"]["id"]
    steer = {"type": "response.steer", "previous_response_id": first_id,
             "input": [{"type": "message", "role": "user",
                        "content": "[[script:text text='Left it is.']] Turn left."}]}
    assert steer_elsewhere(cid, steer)["statusCode"] == 200
    running.join(timeout=60)
    assert not running.is_alive()
    events = management.messages.pop(cid)
    for event in events:
        check_ws_event(event)

    terminals = [i for i, e in enumerate(events) if e["type"].startswith("response.")
                 and e["type"] in ("response.incomplete", "response.completed")]
    assert len(terminals) == 2
    first = events[:terminals[0] + 1]
    [accepted] = [e for e in first if e["type"] == "response.steer.accepted"]
    assert accepted["steer"]["previous_response_id"] == first_id
    assert [e["sequence_number"] for e in first] == list(range(len(first)))
    check_stream([dict(e, sequence_number=i) for i, e in enumerate(
        e for e in first if e["type"] != "response.steer.accepted")])
    steered = check_response(first[-1]["response"])
    assert steered["incomplete_details"] == {"reason": "steered"}
    partial = steered["output"][0]["content"][0]["text"]
    assert partial and steered["output"][0]["status"] == "incomplete"

    second = events[terminals[0] + 1:]
    check_stream(second)
    successor = check_response(second[-1]["response"])
    assert successor["previous_response_id"] == first_id
    assert successor["instructions"] == "Be brief."
    assert successor["output"][0]["content"][0]["text"] == "Left it is."
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent][-3:] == ["user", "assistant", "user"]
    assert partial in json.dumps(sent[-2]) and "Turn left." in json.dumps(sent[-1])

    # Both ended: steers of either are refused from the table's state.
    steer_elsewhere(cid, dict(steer, input="again"))
    steer_elsewhere(cid, dict(steer, previous_response_id=successor["id"], input="again"))
    steer_elsewhere(cid, dict(steer, previous_response_id="resp_elsewhere", input="again"))
    refused = management.messages.pop(cid)
    for event in refused:
        check_ws_event(event)
    assert [e["error"]["code"] for e in refused] == [
        "response_not_active", "response_already_completed", "response_not_found"]


def test_steers_past_the_bound_are_refused_across_invocations(
    aws: str, management: ManagementApi, monkeypatch: pytest.MonkeyPatch, upstream: Any
) -> None:
    monkeypatch.setenv("GATEWAY_WS_MAX_PENDING_STEERS", "1")
    cid = "c-steer-bound"
    connect(cid)
    running = threading.Thread(target=message, args=(cid, create(
        "[[script:tool names=get_weather n=20 delay=0.25]] Weather?",
        tools=[{"type": "function", "name": "get_weather",
                "parameters": {"type": "object", "properties": {}}}])))
    running.start()
    wait_for(management, cid, "response.function_call_arguments.delta")
    response_id = management.messages[cid][0]["response"]["id"]
    for text in ("first", "second"):
        steer_elsewhere(cid, {"type": "response.steer", "previous_response_id": response_id,
                              "input": text})
    running.join(timeout=60)
    events = management.messages.pop(cid)
    for event in events:
        check_ws_event(event)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.steer.accepted") == 1
    [refused] = [e for e in events if e["type"] == "response.steer.failed"]
    assert refused["error"]["code"] == "too_many_pending_steers"
    assert refused["steer"]["input"] == "second"
    [pending] = [e for e in events if e["type"] == "response.steer.pending"]
    assert kinds.index("response.steer.pending") > kinds.index("response.completed")
    call = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    assert pending["required_input"] == [{"type": "function_call_output",
                                          "call_id": call["call_id"], "name": "get_weather"}]

    # The client's create with the tool output, in a later invocation, commits the steer.
    message(cid, create([{"type": "function_call_output", "call_id": call["call_id"],
                          "output": "Sunny"}], previous_response_id=response_id))
    after = management.messages.pop(cid)
    assert after[-1]["type"] == "response.completed"
    check_stream(after)
    sent = json.dumps(upstream.requests[-1]["messages"])
    assert "first" in sent and "Sunny" in sent and "second" not in sent

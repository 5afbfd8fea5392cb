"""End to end (issue 3): errors and tenancy through the official client — upstream 429/500/4xx,
a dropped upstream mid-stream, bad inputs (400 with the right ``param``), too-large bodies (413),
API keys (401) and another tenant's ids (404).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.helpers.e2e import (
    MODEL,
    check_response,
    check_stream,
    client_for,
    e2e_settings,
    sdk_events,
)
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import failed_code, reconstruct
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream, split_text

KEY_A, KEY_B = "sk-tenant-alpha", "sk-tenant-beta"
BODY_LIMIT = 2048


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("e2e-errors") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, max_body_bytes=BODY_LIMIT)) as server:
        yield server


@pytest.fixture(scope="module")
def secured(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    """A gateway with GATEWAY_API_KEYS set: two keys, two tenants."""
    db = tmp_path_factory.mktemp("e2e-auth") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, api_keys=(KEY_A, KEY_B))) as server:
        yield server


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    """The error object of an OpenAI-shaped error body (the SDK unwraps ``{"error": ...}``)."""
    body = exc.body
    assert isinstance(body, dict), body
    assert body.keys() == {"message", "type", "param", "code"}
    assert isinstance(body["message"], str) and body["message"]
    return body


def _raw_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body.keys() == {"error"}
    assert body["error"].keys() == {"message", "type", "param", "code"}
    assert "Traceback" not in response.text
    return body["error"]


# -- upstream failures ---------------------------------------------------------------------


def test_upstream_429_is_a_rate_limit_error(client: OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model=MODEL, input="[[script:429]]")

    assert caught.value.status_code == 429
    error = _error(caught.value)
    assert error["code"] == "rate_limit_exceeded"
    assert caught.value.code == "rate_limit_exceeded"
    assert "upstream" in error["message"].lower()


def test_upstream_429_when_streaming_fails_the_response_after_created(client: OpenAI) -> None:
    """response.created left before the upstream answered (no grace period, the default)."""
    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:429 retry_after=none]]", stream=True))

    grammar = check_stream(events)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.failed"]
    failed = grammar.terminal["response"]
    assert failed["error"]["code"] == "rate_limit_exceeded"
    assert "upstream" in failed["error"]["message"].lower()
    assert client.responses.retrieve(failed["id"]).status == "failed"


@pytest.mark.slow
def test_upstream_429_when_streaming_within_the_grace_period_is_an_http_error(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db", stream_grace_seconds=1.0)
    with GatewayServer(settings) as server, client_for(server) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            list(client.responses.create(
                model=MODEL, input="[[script:429 retry_after=none]]", stream=True))
        assert _error(caught.value)["code"] == "rate_limit_exceeded"

        # Past the grace period response.created has left: the refusal fails the response.
        late = sdk_events(client.responses.create(
            model=MODEL, input="[[script:429 retry_after=none first_delay=1.5]]", stream=True))
        assert late[-1]["type"] == "response.failed"
        assert late[-1]["response"]["error"]["code"] == "rate_limit_exceeded"


def test_upstream_own_error_code_is_kept(client: OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as quota:
        client.responses.create(model=MODEL, input="[[script:429 code=insufficient_quota]]")
    assert _error(quota.value)["code"] == "insufficient_quota"

    with pytest.raises(openai.BadRequestError) as too_long:
        client.responses.create(
            model=MODEL,
            input='[[script:error status=400 code=context_length_exceeded message="too long"]]',
        )
    error = _error(too_long.value)
    assert too_long.value.status_code == 400
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert "too long" in error["message"] and "upstream" in error["message"].lower()


def test_upstream_500_is_an_internal_server_error(client: OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(model=MODEL, input="[[script:500]]")

    assert caught.value.status_code == 500
    error = _error(caught.value)
    assert error["type"] == "server_error"
    assert "upstream" in error["message"].lower()


def test_dropped_upstream_mid_stream_fails_with_the_partial_text(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    partial = "".join(split_text(DEFAULT_TEXT, 8)[:3])
    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:drop after=3 n=8]]", stream=True
    ))

    grammar = check_stream(events)
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[-1] == "response.failed"
    assert "response.completed" not in types
    assert reconstruct(events).text == partial
    failed = grammar.terminal["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] and failed["error"]["message"]
    assert failed["output"][0]["content"][0]["text"] == partial

    stored = client.responses.retrieve(failed["id"])
    assert stored.status == "failed"
    assert stored.output[0].content[0].text == partial
    assert stored.error is not None and stored.error.code == failed["error"]["code"]
    check_response(stored)
    assert upstream.wait_streams_closed(10.0)


def test_upstream_error_event_mid_stream_fails_with_its_code(client: OpenAI) -> None:
    events = sdk_events(client.responses.create(
        model=MODEL, input="[[script:error_event after=2 code=model_error]]", stream=True
    ))

    grammar = check_stream(events)
    failed = grammar.terminal["response"]
    assert events[-1]["type"] == "response.failed"
    assert failed_code(failed["error"]) == "model_error"
    assert reconstruct(events).text == "".join(split_text(DEFAULT_TEXT, 4)[:2])


# -- bad requests --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_output_tokens": 1}, "max_output_tokens"),
        ({"tools": [{"type": "no_such_tool"}]}, "tools[0].type"),
        ({"input": 5}, "input"),
        ({"top_p": -1}, "top_p"),
    ],
)
def test_bad_inputs_are_400_with_the_param(
    client: OpenAI, upstream: ScriptedUpstream, extra: dict[str, Any], param: str
) -> None:
    upstream.reset()
    body = {"model": MODEL, "input": "hi", **extra}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**body)

    assert caught.value.status_code == 400
    error = _error(caught.value)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert upstream.requests == []


def test_missing_model_is_400(gateway: GatewayServer) -> None:
    error = _raw_error(httpx.post(gateway.base_url + "/responses", json={"input": "hi"}), 400)
    assert error["param"] == "model"


def test_malformed_json_body_is_400(gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    response = httpx.post(
        gateway.base_url + "/responses", content=b'{"model": "m", "input": ',
        headers={"content-type": "application/json"},
    )

    error = _raw_error(response, 400)
    assert error["type"] == "invalid_request_error"
    assert "JSON" in error["message"]
    assert _raw_error(httpx.post(gateway.base_url + "/responses", content=b""), 400)
    assert _raw_error(httpx.post(gateway.base_url + "/responses", json=[1, 2]), 400)
    assert upstream.requests == []


def test_body_too_large_is_413(gateway: GatewayServer, client: OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(model=MODEL, input="x" * (BODY_LIMIT + 100))
    assert caught.value.status_code == 413
    assert _error(caught.value)["type"] == "invalid_request_error"

    def chunked() -> Iterator[bytes]:  # no content-length: the limit holds while reading
        yield b'{"model": "m", "input": "'
        for _ in range(10):
            yield b"y" * 512
        yield b'"}'

    _raw_error(httpx.post(gateway.base_url + "/responses", content=chunked()), 413)
    # just under the limit is fine
    ok = client.responses.create(model=MODEL, input="z" * (BODY_LIMIT - 200))
    assert ok.status == "completed"


# -- auth and tenancy ----------------------------------------------------------------------


def test_wrong_key_is_401(secured: GatewayServer, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    with client_for(secured, api_key="sk-wrong") as wrong, pytest.raises(
        openai.AuthenticationError
    ) as caught:
        wrong.responses.create(model=MODEL, input="hi")

    assert caught.value.status_code == 401
    assert _error(caught.value)["code"] == "invalid_api_key"
    assert "sk-wrong" not in str(caught.value.body)
    assert upstream.requests == []


def test_no_key_is_401(secured: GatewayServer) -> None:
    url = secured.base_url + "/responses"
    _raw_error(httpx.post(url, json={"model": MODEL, "input": "hi"}), 401)
    _raw_error(httpx.post(url, json={"model": MODEL, "input": "hi"},
                          headers={"authorization": "Basic " + KEY_A}), 401)
    _raw_error(httpx.get(secured.base_url + "/responses/resp_x"), 401)
    _raw_error(httpx.get(secured.base_url + "/models"), 401)
    assert httpx.get(secured.url + "/health").status_code == 200


def test_another_tenants_ids_are_404(secured: GatewayServer, upstream: ScriptedUpstream) -> None:
    with client_for(secured, api_key=KEY_A) as alpha, client_for(secured, api_key=KEY_B) as beta:
        mine = alpha.responses.create(model=MODEL, input="alpha's secret")
        assert alpha.responses.retrieve(mine.id).id == mine.id

        with pytest.raises(openai.NotFoundError):
            beta.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            beta.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            beta.responses.delete(mine.id)
        upstream.reset()
        with pytest.raises(openai.BadRequestError) as chained:
            beta.responses.create(model=MODEL, previous_response_id=mine.id, input="steal")
        assert chained.value.code == "previous_response_not_found"
        with pytest.raises(openai.NotFoundError):
            beta.responses.create(
                model=MODEL, input=[{"type": "item_reference", "id": mine.output[0].id}]
            )
        assert upstream.requests == []

        # beta's failed delete removed nothing; alpha still owns and can delete it
        assert alpha.responses.retrieve(mine.id).output_text == DEFAULT_TEXT
        alpha.responses.delete(mine.id)
        with pytest.raises(openai.NotFoundError):
            alpha.responses.retrieve(mine.id)


def test_stream_retrieve_of_a_foreground_response_is_400(client: OpenAI) -> None:
    """Only background responses keep an event log to replay."""
    done = client.responses.create(model=MODEL, input="hello")
    with pytest.raises(openai.BadRequestError) as caught:
        list(client.responses.retrieve(done.id, stream=True))
    error = _error(caught.value)
    assert error["param"] == "stream"
    assert "background" in error["message"]


def test_out_of_range_cursor_is_400(gateway: GatewayServer) -> None:
    with httpx.Client(base_url=gateway.base_url, timeout=10) as http:
        reply = http.get("/responses/resp_x/input_items", params={"limit": "9" * 30})
        assert _raw_error(reply, 404)["param"] == "response_id"  # unknown id checked first
        done = http.post("/responses", json={"model": MODEL, "input": "hi"}).json()
        reply = http.get(f"/responses/{done['id']}/input_items", params={"limit": "9" * 30})
        assert _raw_error(reply, 400)["param"] == "limit"
        # only ASCII digits, as a client writes an integer (Python's int() takes all four)
        for odd in (" 5", "1_0", "\u0663", "+5"):
            reply = http.get(f"/responses/{done['id']}/input_items", params={"limit": odd})
            error = _raw_error(reply, 400)
            assert error["param"] == "limit" and "expected an integer" in error["message"], odd
        reply = http.get(f"/responses/{done['id']}/input_items", params={"limit": "1" * 4301})
        assert _raw_error(reply, 400)["param"] == "limit"  # past what int() reads: no 500
        ok = http.get(f"/responses/{done['id']}/input_items", params={"limit": "5"})
        assert ok.status_code == 200


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/responses/"), ("GET", "/models/"), ("GET", "/containers/"), ("GET", "/nope")])
def test_an_unknown_path_is_openais_invalid_url(gateway: GatewayServer, method: str,
                                                path: str) -> None:
    """A path no route serves, a trailing slash too, is OpenAI's 404 naming it (OpenAI answers
    ``404 Invalid URL (POST /v1/chat/completions/)``), never a redirect."""
    reply = httpx.request(method, gateway.base_url + path, json={"model": "m"},
                          follow_redirects=False)
    assert _raw_error(reply, 404) == {
        "message": f"Invalid URL ({method} /v1{path})", "type": "invalid_request_error",
        "param": None, "code": None}


@pytest.mark.parametrize(("extra", "param", "code", "message"), [
    # a tagged union's type that is no string was quoted as Python wrote it ('True', '1')
    ({"tools": [{"type": True}]}, "tools[0].type", "invalid_type",
     "Invalid type for 'tools[0].type': expected a string, but got a boolean instead."),
    ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": 1}},
     "tool_choice.type", "invalid_type",
     "Invalid type for 'tool_choice.type': expected a string, but got an integer instead."),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": True}]}]},
     "input[0].content[0].type", "invalid_type", "Invalid type for "
     "'input[0].content[0].type': expected a string, but got a boolean instead."),
    # a nested one listed its values without OpenAI's 'and'
    ({"tools": [{"type": "namespace", "name": "n", "description": "d",
                 "tools": [{"type": "nope"}]}]}, "tools[0].tools[0].type", "invalid_value",
     "Invalid value: 'nope'. Supported values are: 'function' and 'custom'."),
])
def test_a_union_type_mistake_in_openais_words(client: OpenAI, extra: dict[str, Any],
                                               param: str, code: str, message: str) -> None:
    body: dict[str, Any] = {"model": "m", "input": "hi", **extra}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**body)
    error = _error(caught.value)
    assert (error["param"], error["code"], error["message"]) == (param, code, message)

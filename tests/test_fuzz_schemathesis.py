"""Schemathesis against the running gateway: no server errors, every answer valid or a clean 4xx.

``POST /responses`` is fuzzed from the Open Responses document (tests/fixtures/spec/
openresponses-openapi.json); the gateway's other routes (retrieve, delete, cancel, input_items,
models) from tests/fixtures/spec/gateway-extra-openapi.json. The two are merged into one
document in memory, with three adjustments that state what the gateway (like OpenAI) accepts:

- the create body is JSON only (the spec also lists form encoding, which OpenAI does not take);
- the create body is required and so is ``model`` (the spec leaves both optional; OpenAI
  answers 400 without them, and fuzzing would spend every example on that one error);
- every operation may answer ``4XX`` with OpenAI's error body, which the spec does not list;
- each ``discriminator`` gets the ``mapping`` its members' ``type`` enums imply: without one,
  OpenAPI reads the discriminator value as a schema *name* (``Message``), while the document
  means the ``type`` value (``message``), which is what JSON Schema validation accepts.

Valid requests the gateway declines (hosted tools, unsupported options) legitimately get a 400;
what is checked is that no request gets a 5xx, every 2xx matches the schema (JSON bodies by
schemathesis, SSE streams event by event plus the stream grammar) and every 4xx is exactly
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.helpers.e2e import e2e_settings, split_frames
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import (
    TERMINAL_TYPES,
    check_grammar,
    create_operation_spec,
    events_from_sse,
    spec_validate_event,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

SPEC_DIR = Path(__file__).resolve().parent / "fixtures" / "spec"
EXTRA_SPEC = SPEC_DIR / "gateway-extra-openapi.json"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
CREATE_EXAMPLES = 400
ROUTE_EXAMPLES = 60
FUZZ_SETTINGS = settings(
    deadline=None,
    database=None,
    derandomize=True,  # the same examples on every run: a failure here is reproducible
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def merged_spec() -> dict[str, Any]:
    """Open Responses' create operation plus the gateway's routes, as one document."""
    spec = create_operation_spec()
    extra = json.loads(
        EXTRA_SPEC.read_text().replace('"openresponses-openapi.json#', '"#')
    )
    post = spec["paths"]["/responses"]["post"]
    post["responses"]["4XX"] = {"$ref": "#/components/responses/Error"}
    spec["paths"] = {"/responses": {"post": post}, **extra["paths"]}
    for kind in ("schemas", "parameters", "responses"):
        spec["components"].setdefault(kind, {}).update(extra["components"][kind])
    _map_discriminators(spec, spec["components"]["schemas"])
    return spec


def _map_discriminators(node: Any, schemas: dict[str, Any]) -> None:
    """Add the implied ``mapping`` to every discriminator of ``$ref`` members (see above)."""
    if isinstance(node, list):
        for value in node:
            _map_discriminators(value, schemas)
        return
    if not isinstance(node, dict):
        return
    discriminator = node.get("discriminator")
    members = node.get("oneOf") or node.get("anyOf") or []
    if isinstance(discriminator, dict) and "mapping" not in discriminator and members:
        name = discriminator["propertyName"]
        mapping: dict[str, str] = {}
        for member in members:
            ref = member.get("$ref", "")
            prop = schemas.get(ref.rsplit("/", 1)[-1], {}).get("properties", {}).get(name, {})
            for value in prop.get("enum", [prop["const"]] if "const" in prop else []):
                mapping[value] = ref
        if mapping:
            discriminator["mapping"] = mapping
    for value in node.values():
        _map_discriminators(value, schemas)


SCHEMA = schemathesis.openapi.from_dict(merged_spec())


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("fuzz") / "gateway.db"
    settings_ = e2e_settings(upstream, db, models=("scripted-model",), read_timeout=10.0)
    with GatewayServer(settings_) as server:
        yield server


def _error_shaped(response: Any) -> None:
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error


def _sse_events(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body, each valid for its spec schema, in sequence order."""
    frames, rest = split_frames(text.encode())
    assert not rest, f"the stream ended inside a frame: {rest[:200]!r}"
    events = events_from_sse([f for f in frames if not f.startswith(b":")])
    for event in events:
        spec_validate_event(event)
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers)), numbers
    assert sum(e["type"] in TERMINAL_TYPES for e in events) <= 1, [e["type"] for e in events]
    return events


def _content_type(response: Any) -> str:
    """schemathesis keeps each header as a list of values."""
    values = response.headers.get("content-type") or [""]
    return values[0] if isinstance(values, list) else values


def judge(case: Any, response: Any, outcomes: Counter[str]) -> None:
    """No 5xx; a 2xx valid for the schema; a 4xx OpenAI-shaped."""
    status = response.status_code
    outcomes[f"{case.method} {case.path} {status}"] += 1
    assert status < 500, f"{case.method} {case.formatted_path}: {status} {response.text[:500]}"
    content_type = _content_type(response)
    if status >= 400:
        assert content_type.startswith("application/json"), content_type
        _error_shaped(response)
    if content_type.startswith("text/event-stream"):
        assert status == 200
        events = _sse_events(response.text)
        if case.method == "POST":  # a whole new stream: the full grammar, one terminal
            assert isinstance(case.body, dict) and case.body.get("stream") is True
            assert events and events[-1]["type"] in TERMINAL_TYPES, [e["type"] for e in events]
            check_grammar(events)
        else:  # a resumed stream: only events after starting_after
            after = (case.query or {}).get("starting_after")
            if isinstance(after, int):
                assert all(e["sequence_number"] > after for e in events)
        outcomes["stream"] += 1
        return
    case.validate_response(response, checks=CHECKS)


def _streaming(case: Any) -> Any:
    """The same case with ``stream: true`` (the spec's generator rarely picks it)."""
    if isinstance(case.body, dict):
        case.body["stream"] = True
    return case


def test_create_response_fuzz(gateway: GatewayServer, upstream: ScriptedUpstream) -> None:
    operation = SCHEMA["/responses"]["POST"]
    outcomes: Counter[str] = Counter()
    cases = operation.as_strategy()

    @settings(FUZZ_SETTINGS, max_examples=CREATE_EXAMPLES)
    @given(case=st.one_of(cases, cases.map(_streaming)))
    def run(case: Any) -> None:
        judge(case, case.call(base_url=gateway.base_url, timeout=30), outcomes)

    run()
    # The fuzzing reached the backend, not only the validator: some requests were answered.
    assert outcomes["POST /responses 200"] >= CREATE_EXAMPLES // 10, outcomes
    assert any(key.endswith(" 400") for key in outcomes), outcomes
    assert outcomes["stream"] >= CREATE_EXAMPLES // 10, outcomes
    assert upstream.wait_streams_closed(5.0)


def _seed(gateway: GatewayServer) -> list[str]:
    """Stored responses the route fuzzing can find: foreground, with a tool call, background."""
    ids = []
    with httpx.Client(base_url=gateway.base_url, timeout=30) as http:
        bodies = [
            {"model": "scripted-model", "input": "hello"},
            {
                "model": "scripted-model",
                "input": [
                    {"role": "user", "content": "weather? [[script:tool]]"},
                    {"type": "message", "role": "assistant", "content": "let me check"},
                ],
                "tools": [{"type": "function", "name": "get_weather",
                           "parameters": {"type": "object", "properties": {}}}],
            },
            {"model": "scripted-model", "input": "later", "background": True},
            {"model": "scripted-model", "input": "[[script:slow n=10 delay=0.2]]",
             "background": True},
        ]
        for body in bodies:
            response = http.post("/responses", json=body)
            assert response.status_code == 200, response.text
            ids.append(response.json()["id"])
    return ids


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/responses/{response_id}", "GET"),
        ("/responses/{response_id}/input_items", "GET"),
        ("/responses/{response_id}/cancel", "POST"),
        ("/responses/{response_id}", "DELETE"),
        ("/models", "GET"),
    ],
)
def test_gateway_routes_fuzz(gateway: GatewayServer, path: str, method: str) -> None:
    operation = SCHEMA[path][method]
    outcomes: Counter[str] = Counter()
    if "{response_id}" in path:
        known = _seed(gateway)
        strategy = st.one_of(
            *(operation.as_strategy(path_parameters={"response_id": rid}) for rid in known),
            operation.as_strategy(),
        )
    else:
        strategy = operation.as_strategy()

    @settings(FUZZ_SETTINGS, max_examples=ROUTE_EXAMPLES)
    @given(case=strategy)
    def run(case: Any) -> None:
        judge(case, case.call(base_url=gateway.base_url, timeout=30), outcomes)

    run()
    statuses = {key.rsplit(" ", 1)[1] for key in outcomes if key.startswith(method)}
    assert "200" in statuses, outcomes
    if "{response_id}" in path:
        assert "404" in statuses, outcomes
        _wait_settled(gateway, known)


def _wait_settled(gateway: GatewayServer, ids: list[str]) -> None:
    """Whatever the fuzzing did to them, the seeded responses end in a final state."""
    deadline = time.monotonic() + 15
    with httpx.Client(base_url=gateway.base_url, timeout=30) as http:
        for rid in ids:
            while True:
                response = http.get(f"/responses/{rid}")
                if response.status_code == 404:
                    break
                status = response.json()["status"]
                if status not in ("queued", "in_progress"):
                    break
                assert time.monotonic() < deadline, f"{rid} still {status}"
                time.sleep(0.05)

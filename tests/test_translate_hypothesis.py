"""The request translator against bodies generated from the spec's ``CreateResponseBody``.

Bodies come from schemathesis' generator for ``POST /responses`` of the Open Responses document
(tests/fixtures/spec/openresponses-openapi.json), in process, without HTTP. For every body:

- schema-valid bodies: validation, input normalisation and the chat translation either succeed
  or raise ``GatewayError`` 400 with an OpenAI-shaped body; never another exception. An accepted
  body also yields a chat request that serialises to JSON and a Response object (the request's
  echo) valid for the spec's ``ResponseResource``;
- schema-invalid bodies (schemathesis' negative mode): a 400 or acceptance, never a crash.

The hand-written properties of tests/test_request_translation.py cover chosen shapes; these
cover whatever the spec allows.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from responses_gateway import ids
from responses_gateway.errors import GatewayError
from responses_gateway.translate.request_models import normalize_input, parse_create_request
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.sealing import Sealer
from responses_gateway.translate.to_chat import to_chat_request
from tests.helpers.responses_validation import create_operation_spec, spec_validate_response

pytestmark = pytest.mark.slow

SEALER = Sealer.from_secret("hypothesis-secret")
TENANT = "tenant-h"
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _operation(*, item_input: bool) -> Any:
    """``POST /responses`` with a JSON body (the only encoding the gateway and OpenAI take)
    that names a model (as OpenAI requires; the spec leaves it optional, and nearly every
    example would stop at that one 400). Bodies without a model come from the negative mode.

    ``item_input`` narrows ``input`` to a non-empty array of the spec's ``ItemParam`` (still
    valid for the spec): left alone, the generator mostly omits ``input``."""
    spec = create_operation_spec()
    post = spec["paths"]["/responses"]["post"]
    create = spec["components"]["schemas"]["CreateResponseBody"]
    if item_input:
        create["properties"]["input"] = {
            "type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/ItemParam"}
        }
        create["required"].append("input")
    spec["paths"] = {"/responses": {"post": post}}
    return schemathesis.openapi.from_dict(spec)["/responses"]["POST"]


def _bodies(mode: GenerationMode = GenerationMode.POSITIVE) -> st.SearchStrategy[Any]:
    cases = st.one_of(
        _operation(item_input=True).as_strategy(generation_mode=mode),
        _operation(item_input=False).as_strategy(generation_mode=mode),
    )
    return cases.map(lambda case: _as_received(case.body)).filter(lambda b: b is not _NOT_JSON)


_NOT_JSON = object()


def _as_received(body: Any) -> Any:
    """The body as the route decodes it from the wire (orjson: integers past 64 bits become
    floats), so a Python-only value never reaches the translator. Bodies that are not JSON at
    all (negative mode sends raw bytes) are the route's 400, not the translator's concern."""
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return orjson.loads(raw)
    except (TypeError, ValueError):
        return _NOT_JSON


def _resolve_references(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the runner does with ``item_reference`` before translating: the stored item."""
    return [
        {"id": item["id"], "type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "stored"}], "status": "completed"}
        if item.get("type") == "item_reference" else item
        for item in items
    ]


def _check_400(error: GatewayError) -> None:
    assert error.status == 400, error
    body = error.body()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    assert isinstance(body["message"], str) and body["message"]
    assert body["type"] == "invalid_request_error"
    assert body["param"] is None or isinstance(body["param"], str)
    assert body["code"] is None or isinstance(body["code"], str)


def translate(body: Any, reasoning_input: str | None) -> dict[str, Any] | None:
    """The runner's steps from a decoded body to the chat request; None when declined."""
    try:
        req = parse_create_request(body)
        items = _resolve_references(normalize_input(req))
        chat = to_chat_request(
            req,
            items,
            model="upstream-model",
            reasoning_input=reasoning_input,
            unseal=lambda blob: SEALER.unseal(blob, TENANT),
        )
    except GatewayError as error:
        _check_400(error)
        return None
    response = new_response(
        req.echo(), response_id=ids.new_id(ids.RESPONSE), created_at=1_700_000_000
    )
    spec_validate_response(response)
    assert chat["model"] == "upstream-model"
    assert isinstance(chat["messages"], list)
    assert chat["stream"] is req.streaming
    orjson.dumps(chat)  # what the backend sends: must be plain JSON
    for message in chat["messages"]:
        assert message["role"] in ("system", "developer", "user", "assistant", "tool"), message
    return chat


@pytest.mark.parametrize("reasoning_input", [None, "reasoning_content"])
def test_schema_valid_bodies_translate_or_400(reasoning_input: str | None) -> None:
    accepted = declined = 0

    @SETTINGS
    @given(body=_bodies())
    def run(body: Any) -> None:
        nonlocal accepted, declined
        if translate(body, reasoning_input) is None:
            declined += 1
        else:
            accepted += 1

    run()
    # Both outcomes occur: the generator reaches the translation, not only the validation.
    assert accepted >= 30 and declined >= 30, (accepted, declined)


def test_schema_invalid_bodies_are_400_never_a_crash() -> None:
    declined = 0

    @settings(SETTINGS, max_examples=150)
    @given(body=_bodies(GenerationMode.NEGATIVE))
    def run(body: Any) -> None:
        nonlocal declined
        if translate(body, None) is None:
            declined += 1

    run()
    assert declined >= 100, declined  # invalid bodies are, overwhelmingly, refused


def test_sealed_reasoning_from_another_tenant_is_a_400() -> None:
    """A reasoning item whose encrypted_content another tenant sealed: 400, not a crash."""
    blob = SEALER.seal({"reasoning_details": [{"type": "reasoning.text", "text": "t"}]}, "other")
    body = {
        "model": "m",
        "input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob},
            {"role": "user", "content": "next"},
        ],
    }
    with pytest.raises(GatewayError) as info:
        to_chat_request(
            parse_create_request(body),
            normalize_input(parse_create_request(body)),
            model="m",
            reasoning_input="reasoning_content",
            unseal=lambda b: SEALER.unseal(b, TENANT),
        )
    _check_400(info.value)

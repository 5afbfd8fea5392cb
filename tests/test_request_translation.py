"""Request translation: create-body validation (OpenAI's params, limits and error shape), the
input items we store, the Response fields we echo, and the Chat Completions body we send."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import FunctionTool, ResponseItem
from pydantic import TypeAdapter, ValidationError

from responses_gateway.errors import GatewayError
from responses_gateway.translate.request_errors import from_validation
from responses_gateway.translate.request_items import _item_tag, item_model
from responses_gateway.translate.request_models import (
    CreateResponseRequest,
    _from_validation,
    normalize_input,
    parse_create_request,
)
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.sealing import Sealer
from responses_gateway.translate.to_chat import to_chat_request
from tests.helpers.responses_validation import sdk_validate_response, spec_validate_response

FIXTURES = Path(__file__).parent / "fixtures" / "responses-streams"

SEALER = Sealer.from_secret("test-secret")
DETAILS = [{"type": "reasoning.text", "text": "thought", "signature": "sig=="}]
SEALED = SEALER.seal({"reasoning_details": DETAILS}, "tenant-a")


def unseal(blob: str) -> dict[str, Any]:
    return SEALER.unseal(blob, "tenant-a")


def parse(**body: Any) -> CreateResponseRequest:
    return parse_create_request({"model": "m", **body})


def error_of(body: Any) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        parse_create_request(body)
    err = info.value
    assert err.status == 400
    assert err.type == "invalid_request_error"
    assert err.body()["error"]["message"] == err.message
    return err


def chat(
    body: dict[str, Any] | None = None, items: list[dict[str, Any]] | None = None, **kwargs: Any
) -> dict[str, Any]:
    req = parse_create_request({"model": "m", **(body or {})})
    if items is None:
        items = normalize_input(req)
    out = to_chat_request(req, items, model=kwargs.pop("model", "upstream-model"), **kwargs)
    for message in out["messages"]:
        assert_chat_message(message)
    json.dumps(out)
    return out


# --- judges ----------------------------------------------------------------------------------

_CHAT_MESSAGE = TypeAdapter(ChatCompletionMessageParam)
_ALLOWED_KEYS = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {
        "role",
        "content",
        "refusal",
        "tool_calls",
        "reasoning_content",
        "reasoning",
        "reasoning_details",
    },
    "tool": {"role", "tool_call_id", "content"},
}


def assert_chat_message(message: dict[str, Any]) -> None:
    """A chat message as OpenAI's chat API types it (plus the reasoning fields we add)."""
    role = message["role"]
    assert set(message) <= _ALLOWED_KEYS[role], message
    validated = _CHAT_MESSAGE.validate_python(message)
    for value in validated.values():
        if hasattr(value, "__next__"):
            list(value)  # the SDK types content arrays as Iterables: validate them too
    content = message.get("content")
    if role in ("system", "tool"):
        assert isinstance(content, str)
    elif role == "user":
        assert isinstance(content, str) or (isinstance(content, list) and content)
        for part in content if isinstance(content, list) else ():
            assert part["type"] in ("text", "image_url", "file"), part
            if part["type"] == "file":
                assert set(part["file"]) == {"file_data", "filename"}
    else:
        assert content is None or isinstance(content, str)
        if content is None:
            assert message.get("tool_calls")
        for call in message.get("tool_calls", ()):
            assert set(call) == {"id", "type", "function"}
            assert set(call["function"]) == {"name", "arguments"}
        assert isinstance(message.get("reasoning_content", ""), str)
        assert isinstance(message.get("reasoning_details", []), list)


def response_from_echo(echo: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "resp_" + "0" * 48,
        "object": "response",
        "created_at": 1,
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
        **echo,
    }


# --- body-level validation -------------------------------------------------------------------


@pytest.mark.parametrize("body", [[], "x", None, 3, [{"model": "m"}]])
def test_body_must_be_an_object(body: Any) -> None:
    err = error_of(body)
    assert "JSON object" in err.message
    assert err.param is None


def test_model_is_required() -> None:
    err = error_of({"input": "hi"})
    assert (err.param, err.code) == ("model", "missing_required_parameter")
    assert err.message == "Missing required parameter: 'model'."


def test_minimal_body_defaults_and_unknown_fields_ignored() -> None:
    req = parse_create_request({"model": "m", "input": "hi", "future_field": {"x": 1}})
    assert req.model == "m" and req.input == "hi"
    assert req.store is True and req.background is False
    assert req.stream is None and req.streaming is False
    assert not hasattr(req, "future_field")
    assert parse(store=None, background=None).store is True


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("temperature", "0.5", "a decimal"),
        ("temperature", True, "a decimal"),
        ("top_p", [1], "a decimal"),
        ("max_output_tokens", 16.5, "an integer"),
        ("max_output_tokens", "100", "an integer"),
        ("stream", "yes", "a boolean"),
        ("store", 1, "a boolean"),
        ("parallel_tool_calls", "true", "a boolean"),
        ("instructions", 5, "a string"),
        ("user", {"id": 1}, "a string"),
        ("previous_response_id", 7, "a string"),
        ("tools", {"type": "function"}, "an array"),
        ("include", "reasoning.encrypted_content", "an array"),
        ("metadata", ["a"], "an object"),
        ("reasoning", "high", "an object"),
        ("text", "json", "an object"),
        ("input", 5, "one of a string or array of objects"),
        ("input", {"role": "user", "content": "hi"}, "one of a string or array of objects"),
    ],
)
def test_wrong_types_name_the_param(field: str, value: Any, expected: str) -> None:
    err = error_of({"model": "m", field: value})
    assert err.param == field
    assert err.code == "invalid_type"
    assert err.message.startswith(f"Invalid type for '{field}': expected {expected}, but got ")


def test_metadata_value_type_names_the_key() -> None:
    err = error_of({"model": "m", "metadata": {"k": 5}})
    assert err.param == "metadata.k"
    assert (
        err.message
        == "Invalid type for 'metadata.k': expected a string, but got an integer instead."
    )


@pytest.mark.parametrize(
    ("field", "value", "code", "fragment"),
    [
        ("max_output_tokens", 15, "integer_below_min_value", "Expected a value >= 16, but got 15"),
        ("max_output_tokens", 0, "integer_below_min_value", ">= 16"),
        ("temperature", -0.1, "decimal_below_min_value", "Expected a value >= 0, but got -0.1"),
        ("temperature", 2.01, "decimal_above_max_value", "Expected a value <= 2, but got 2.01"),
        ("top_p", 1.5, "decimal_above_max_value", "<= 1"),
        ("top_p", -1, "decimal_below_min_value", ">= 0"),
        ("top_logprobs", 21, "integer_above_max_value", "<= 20"),
        ("top_logprobs", -1, "integer_below_min_value", ">= 0"),
        ("presence_penalty", 2.5, "decimal_above_max_value", "<= 2"),
        ("frequency_penalty", -3, "decimal_below_min_value", ">= -2"),
        ("max_tool_calls", 0, "integer_below_min_value", ">= 1"),
    ],
)
def test_value_limits(field: str, value: Any, code: str, fragment: str) -> None:
    err = error_of({"model": "m", field: value})
    assert (err.param, err.code) == (field, code)
    assert err.message.startswith(f"Invalid '{field}': ")
    assert fragment in err.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_output_tokens", 16),
        ("temperature", 0),
        ("temperature", 2),
        ("top_p", 0.0),
        ("top_p", 1),
        ("top_logprobs", 0),
        ("top_logprobs", 20),
        ("presence_penalty", -2),
        ("max_tool_calls", 1),
    ],
)
def test_limits_are_inclusive(field: str, value: Any) -> None:
    assert getattr(parse(**{field: value}), field) == value


def test_non_finite_numbers_are_rejected() -> None:
    err = error_of({"model": "m", "temperature": float("nan")})
    assert err.param == "temperature"
    assert "finite" in err.message


def test_metadata_limits() -> None:
    err = error_of({"model": "m", "metadata": {f"k{i}": "v" for i in range(17)}})
    assert (err.param, err.code) == ("metadata", "object_above_max_length")
    assert "16" in err.message and "17" in err.message
    err = error_of({"model": "m", "metadata": {"k" * 65: "v"}})
    assert err.param == "metadata" and "64" in err.message and "65" in err.message
    err = error_of({"model": "m", "metadata": {"k": "v" * 513}})
    assert (err.param, err.code) == ("metadata.k", "string_above_max_length")
    assert "maximum length 512, but got a string with length 513" in err.message
    ok = parse(metadata={f"k{i}": "v" * 512 for i in range(15)} | {"k" * 64: ""})
    assert len(ok.metadata or {}) == 16


@pytest.mark.parametrize("body", [
    {"metadata": {f"k{i}": "v" for i in range(17)}},
    {"metadata": {"k": "v" * 513}},
    {"temperature": 3.0}, {"max_output_tokens": 3}, {"top_logprobs": -1},
    {"truncation": "sometimes"}, {"service_tier": "gold"},
    {"tool_choice": {"type": "allowed_tools", "tools": []}},
    {"tools": [{"type": "function", "name": "a b"}]},
    {"tools": [{"type": "function", "name": "x" * 65}]},
    {"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "zz"}]}]},
    {"input": [{"role": "user", "content": [{"type": "zz"}]}]},
    {"input": [{"type": "item_reference", "id": "x" * 201}]},
    {"context_management": [{"type": "nope"}]},
])
def test_errors_do_not_depend_on_pydantics_error_context(body: dict[str, Any]) -> None:
    """pydantic's ``ctx`` changes between versions (2.14 reports a dict's length as None):
    the OpenAI error is the same without it, from the error's type, loc, input and our own
    declared limits."""
    class WithoutContext:
        def __init__(self, exc: ValidationError) -> None:
            self._errors = exc.errors(include_url=False)

        def errors(self, **_: Any) -> list[dict[str, Any]]:
            return [{k: v for k, v in e.items() if k != "ctx"} for e in self._errors]

    if "input" in body:  # an input item is validated on its own (request_items.py)
        item = body["input"][0]
        model = item_model(_item_tag(item))
        assert model is not None
        at = ("input", "~list", 0, _item_tag(item))
        with pytest.raises(ValidationError) as info:
            model.model_validate(item)
        full = from_validation(info.value, model, at)
        bare = from_validation(WithoutContext(info.value), model, at)  # type: ignore[arg-type]
    else:
        with pytest.raises(ValidationError) as info:
            CreateResponseRequest.model_validate({"model": "m", **body})
        full = _from_validation(info.value)
        bare = _from_validation(WithoutContext(info.value))  # type: ignore[arg-type]
    err = error_of({"model": "m", **body})  # what a client gets is the same error
    assert (full.param, full.code, full.message) == (err.param, err.code, err.message)
    assert (bare.param, bare.code, bare.message) == (full.param, full.code, full.message)
    assert "None" not in full.message and "?" not in full.message


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [("prompt_cache_key", "k" * 65, 64), ("safety_identifier", "s" * 129, 128)],
)
def test_string_lengths(field: str, value: str, limit: int) -> None:
    err = error_of({"model": "m", field: value})
    assert (err.param, err.code) == (field, "string_above_max_length")
    assert f"maximum length {limit}" in err.message


@pytest.mark.parametrize(
    ("body", "param", "bad"),
    [
        ({"truncation": "sometimes"}, "truncation", "sometimes"),
        ({"service_tier": "gold"}, "service_tier", "gold"),
        ({"prompt_cache_retention": "forever"}, "prompt_cache_retention", "forever"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", "extreme"),
        ({"reasoning": {"summary": "long"}}, "reasoning.summary", "long"),
        ({"reasoning": {"generate_summary": "yes"}}, "reasoning.generate_summary", "yes"),
        ({"text": {"verbosity": "loud"}}, "text.verbosity", "loud"),
        ({"tool_choice": "always"}, "tool_choice", "always"),
    ],
)
def test_enum_values(body: dict[str, Any], param: str, bad: str) -> None:
    err = error_of({"model": "m", **body})
    assert (err.param, err.code) == (param, "invalid_value")
    assert err.message.startswith(f"Invalid value: '{bad}'. Supported values are: ")


def test_include_values() -> None:
    err = error_of({"model": "m", "include": ["message.output_text.logprobs", "bogus.value"]})
    assert (err.param, err.code) == ("include", "invalid_value")
    assert "'bogus.value'" in err.message and "'reasoning.encrypted_content'" in err.message
    req = parse(
        include=[
            "reasoning.encrypted_content",
            "message.output_text.logprobs",
            "file_search_call.results",
        ]
    )
    assert req.wants_logprobs and req.wants_encrypted_reasoning
    assert not parse().wants_logprobs


@pytest.mark.parametrize("field", ["prompt"])  # conversation: tests/test_conversations.py
def test_conversation_and_prompt_are_unsupported(field: str) -> None:
    value = "conv_123" if field == "conversation" else {"id": "pmpt_1"}
    err = error_of({"model": "m", field: value})
    assert (err.param, err.code) == (field, "unsupported_parameter")
    assert "not supported" in err.message
    assert getattr(parse(**{field: None}), field) is None


def test_background_requires_store() -> None:
    err = error_of({"model": "m", "background": True, "store": False})
    assert err.param == "background"
    assert "store" in err.message
    assert parse(background=True).background is True


def test_stream_options() -> None:
    err = error_of({"model": "m", "stream_options": {"include_obfuscation": False}})
    assert err.param == "stream_options" and "stream" in err.message
    req = parse(stream=True, stream_options={"include_obfuscation": False})
    assert req.stream_options is not None and req.stream_options.include_obfuscation is False
    err = error_of({"model": "m", "stream": True, "stream_options": {"include_obfuscation": 1}})
    assert err.param == "stream_options.include_obfuscation"


# --- input validation ------------------------------------------------------------------------


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


@pytest.mark.parametrize(
    ("inp", "param", "code", "fragment"),
    [
        ([5], "input[0]", "invalid_type", "expected an object, but got an integer"),
        ([user("a"), {}], "input[1].type", "missing_required_parameter", "'input[1].type'"),
        (  # a server tool's item sent back is checked by its declared fields
            [{"type": "code_interpreter_call", "id": "ci_1"}],
            "input[0].code",
            "missing_required_parameter",
            "'input[0].code'",
        ),
        (
            [{"type": "no_such_item"}],
            "input[0].type",
            "invalid_value",
            "'no_such_item'",
        ),
        ([{"role": "tool", "content": "x"}], "input[0].role", "invalid_value", "'tool'"),
        (
            [{"role": "user"}],
            "input[0].content",
            "missing_required_parameter",
            "'input[0].content'",
        ),
        ([user(5)], "input[0].content", "invalid_type", "one of a string or array of objects"),
        (
            [user([{"type": "input_text"}])],
            "input[0].content[0].text",
            "missing_required_parameter",
            "input[0].content[0].text",
        ),
        (
            [user([{"type": "input_text", "text": "a"}, {"type": "input_audio"}])],
            "input[0].content[1].type",
            "invalid_value",
            "'input_audio'",
        ),
        (
            [user("a"), user("b"), user([{"type": "input_image"}])],
            "input[2].content[0].image_url",
            "missing_required_parameter",
            "'input[2].content[0].image_url'",
        ),
        (
            [user([{"type": "input_image", "file_id": "file-1"}])],
            "input[0].content[0].file_id",
            "unsupported_parameter",
            "file_id",
        ),
        (
            [user([{"type": "input_image", "image_url": "https://x/y.png", "detail": "max"}])],
            "input[0].content[0].detail",
            "invalid_value",
            "'max'",
        ),
        (
            [user([{"type": "input_file", "file_id": "file-1"}])],
            "input[0].content[0].file_id",
            "unsupported_parameter",
            "file_data",
        ),
        (
            [user([{"type": "input_file", "filename": "a.pdf"}])],
            "input[0].content[0].file_data",
            "missing_required_parameter",
            "file_data",
        ),
        (
            [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x"}]}],
            "input[0].content[0].type",
            "invalid_value",
            "role 'system'",
        ),
        (
            [{"role": "developer", "content": [{"type": "output_text", "text": "x"}]}],
            "input[0].content[0].type",
            "invalid_value",
            "role 'developer'",
        ),
        (
            [user([{"type": "output_text", "text": "x"}])],
            "input[0].content[0].type",
            "invalid_value",
            "role 'user'",
        ),
        (
            [{"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x"}]}],
            "input[0].content[0].type",
            "invalid_value",
            "role 'assistant'",
        ),
        (
            [{"type": "message", "role": "user", "content": "x", "status": "done"}],
            "input[0].status",
            "invalid_value",
            "'done'",
        ),
        (
            [{"type": "function_call", "name": "f", "arguments": "{}"}],
            "input[0].call_id",
            "missing_required_parameter",
            "call_id",
        ),
        (
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}],
            "input[0].arguments",
            "invalid_type",
            "expected a string, but got an object",
        ),
        (
            [{"type": "function_call_output", "call_id": "c", "output": 3}],
            "input[0].output",
            "invalid_type",
            "one of a string or array of objects",
        ),
        (
            [
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [{"type": "input_image", "file_id": "f"}],
                }
            ],
            "input[0].output[0].file_id",
            "unsupported_parameter",
            "file_id",
        ),
        (
            [
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [{"type": "output_text", "text": "x"}],
                }
            ],
            "input[0].output[0].type",
            "invalid_value",
            "'output_text'",
        ),
        (
            [{"type": "reasoning", "summary": [{"type": "reasoning_text", "text": "x"}]}],
            "input[0].summary[0].type",
            "invalid_value",
            "'reasoning_text'",
        ),
        (
            [{"type": "reasoning", "summary": [], "encrypted_content": 5}],
            "input[0].encrypted_content",
            "invalid_type",
            "a string",
        ),
        ([{"type": "item_reference"}], "input[0].id", "missing_required_parameter", "id"),
    ],
)
def test_input_errors(inp: list[Any], param: str, code: str, fragment: str) -> None:
    err = error_of({"model": "m", "input": inp})
    assert (err.param, err.code) == (param, code), err.message
    assert fragment in err.message


# --- tools and tool_choice -------------------------------------------------------------------

FN = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    "tool_type",
    [
        "web_search",
        "web_search_preview",
        "file_search",
        "code_interpreter",
        "image_generation",
        "tool_search",  # OpenAI's own search; computer, shell... are the client's (issue 29)
    ],
)
def test_hosted_tools_are_rejected_naming_the_type(tool_type: str) -> None:
    err = error_of({"model": "m", "tools": [FN, {"type": tool_type}]})
    assert (err.param, err.type, err.code) == (
        "tools[1].type",
        "invalid_request_error",
        "invalid_value",
    )
    assert f"'{tool_type}'" in err.message
    assert "function" in err.message


@pytest.mark.parametrize(
    ("tool", "param", "fragment"),
    [
        ({"name": "f"}, "tools[0].type", "Missing required parameter"),
        ("f", "tools[0]", "expected an object"),
        ({"type": "function"}, "tools[0].name", "Missing required parameter"),
        ({"type": "function", "name": "has space"}, "tools[0].name", "pattern"),
        ({"type": "function", "name": "x" * 65}, "tools[0].name", "maximum length 64"),
        (
            {"type": "function", "name": "f", "parameters": "{}"},
            "tools[0].parameters",
            "expected an object",
        ),
        ({"type": "function", "name": "f", "strict": "yes"}, "tools[0].strict", "a boolean"),
    ],
)
def test_function_tool_errors(tool: Any, param: str, fragment: str) -> None:
    err = error_of({"model": "m", "tools": [tool]})
    assert err.param == param
    assert fragment in err.message


@pytest.mark.parametrize(
    ("choice", "tools", "param", "fragment"),
    [
        ({"type": "web_search_preview"}, [FN], "tool_choice", "'web_search_preview' not found"),
        ({"type": "no_such_tool"}, [FN], "tool_choice.type", "'no_such_tool'"),
        ({"type": "mcp", "server_label": "x"}, [FN], "tool_choice.server_label", "'x'"),
        ({"type": "function"}, [FN], "tool_choice.name", "Missing required parameter"),
        ({"type": "function", "name": "other"}, [FN], "tool_choice.name", "'other'"),
        ("required", [], "tool_choice", "'required' must be specified with 'tools'"),
        ({"type": "function", "name": "get_weather"}, [], "tool_choice", "'function'"),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": []},
            [FN],
            "tool_choice.tools",
            "array too short",
        ),
        (
            {
                "type": "allowed_tools",
                "mode": "sometimes",
                "tools": [{"type": "function", "name": "get_weather"}],
            },
            [FN],
            "tool_choice.mode",
            "'sometimes'",
        ),
        (
            {"type": "allowed_tools", "tools": [{"type": "function", "name": "nope"}]},
            [FN],
            "tool_choice.tools[0].name",
            "'nope'",
        ),
        (
            {"type": "allowed_tools", "tools": [{"type": "file_search"}]},
            [FN],
            "tool_choice.tools[0].type",
            "'file_search'",
        ),
    ],
)
def test_tool_choice_errors(choice: Any, tools: list[Any], param: str, fragment: str) -> None:
    err = error_of({"model": "m", "tools": tools, "tool_choice": choice})
    assert err.param == param, err.message
    assert fragment in err.message


@pytest.mark.parametrize(
    ("fmt", "param", "fragment"),
    [
        ({"type": "xml"}, "text.format.type", "'xml'"),
        ({"type": "json_schema", "schema": {}}, "text.format.name", "Missing required"),
        ({"type": "json_schema", "name": "x"}, "text.format.schema", "Missing required"),
        ({"type": "json_schema", "name": "a b", "schema": {}}, "text.format.name", "pattern"),
        ({"type": "json_schema", "name": "x", "schema": []}, "text.format.schema", "an object"),
        ({"format": "json"}, "text.format.type", "Missing required"),
    ],
)
def test_text_format_errors(fmt: Any, param: str, fragment: str) -> None:
    err = error_of({"model": "m", "text": {"format": fmt}})
    assert err.param == param
    assert fragment in err.message


# --- echo ------------------------------------------------------------------------------------


def fixture_response(name: str) -> dict[str, Any]:
    """The ``response`` of the first event of a recorded OpenAI stream."""
    for line in (FIXTURES / name).read_text().splitlines():
        line = line.removeprefix("data: ").strip()
        if line.startswith("{"):
            event = json.loads(line)
            if "response" in event:
                return event["response"]
    raise AssertionError(name)


CALC = {
    "type": "function",
    "name": "calculator",
    "description": "A minimal calculator for basic arithmetic. Call it once per step.",
    "parameters": {"type": "object"},
    "strict": True,
}


@pytest.mark.parametrize(
    ("fixture", "body", "model_specific"),
    [
        (
            "openai-gpt4omini-text-logprobs.sse",
            {
                "instructions": "You are a helpful assistant.",
                "input": "capital?",
                "include": ["message.output_text.logprobs"],
            },
            {"service_tier"},
        ),
        ("openai-gpt4omini-hello-world.sse", {"input": "hi", "truncation": "auto"}, set()),
        (
            "openai-gpt5-encrypted-reasoning-function-call.sse",
            {
                "input": "x",
                "reasoning": {"effort": "low"},
                "service_tier": "flex",
                "tool_choice": "required",
                "tools": [
                    {
                        "type": "function",
                        "name": "final_result",
                        "description": "The final response which ends this conversation",
                        "parameters": {
                            "properties": {"result": {"type": "integer"}},
                            "required": ["result"],
                            "type": "object",
                            "additionalProperties": False,
                        },
                        "strict": True,
                    }
                ],
            },
            set(),
        ),
        (
            "openai-gpt51-codex-max-reasoning-summary-function-call.jsonl",
            {
                "input": "x",
                "store": False,
                "reasoning": {"effort": "high", "summary": "detailed"},
                "tools": [CALC],
                "include": ["reasoning.encrypted_content"],
            },
            {"top_p", "tools"},
        ),
        (
            "openai-o3mini-reasoning-summary-4-parts.sse",
            {"input": "x", "reasoning": {"effort": "high", "generate_summary": "detailed"}},
            set(),
        ),
        (
            "openai-gpt55-reasoning-text-then-function-call-phase.sse",
            {
                "input": "x",
                "instructions": "Briefly narrate what you are about to do before calling each "
                                "tool.",
                "tools": [
                    {
                        "type": "function",
                        "name": "get_capital",
                        "parameters": {
                            "additionalProperties": False,
                            "properties": {"country": {"type": "string"}},
                            "required": ["country"],
                            "type": "object",
                        },
                        "strict": True,
                    }
                ],
            },
            # gpt-5.5's own defaults: reasoning effort, cache retention, top_p
            {"reasoning", "prompt_cache_retention", "top_p"},
        ),
        (
            "azure-gpt51-function-call.jsonl",
            {
                "input": "x",
                "reasoning": {"effort": "none"},
                "tools": [
                    {
                        "type": "function",
                        "name": "weather",
                        "parameters": {
                            "type": "object",
                            "properties": {"location": {"type": "string"}},
                            "required": ["location"],
                            "additionalProperties": False,
                        },
                    }
                ],
            },
            set(),
        ),
    ],
)
def test_echo_matches_what_openai_echoes(
    fixture: str, body: dict[str, Any], model_specific: set[str]
) -> None:
    recorded = fixture_response(fixture)
    echo = parse(**body).echo()
    if not any("output_schema" in tool for tool in recorded.get("tools") or ()):
        # OpenAI echoes a function's output_schema since 2026 (the gpt-5.5 recording);
        # the older recordings predate it.
        for tool in echo["tools"]:
            tool.pop("output_schema", None)
    compared = 0
    for key, value in echo.items():
        if key in recorded and key not in model_specific | {"model"}:
            assert value == recorded[key], key
            compared += 1
    assert compared >= 18


def test_function_output_schema_and_defer_loading_are_echoed() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"},
            "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            "defer_loading": True}
    [echoed] = parse(input="x", tools=[tool]).echo()["tools"]
    assert echoed == {"type": "function", "description": None, "name": "f",
                      "output_schema": tool["output_schema"], "parameters": {"type": "object"},
                      "strict": True, "defer_loading": True}
    assert FunctionTool.model_validate(echoed).output_schema == tool["output_schema"]
    # No tool search hides it here: the model is offered the function.
    assert [t["function"]["name"] for t in chat({"input": "q", "tools": [tool]})["tools"]] == [
        "f"]


def test_echo_defaults_and_sdk_and_spec_validity() -> None:
    echo = parse(input="hi").echo()
    assert echo["tool_choice"] == "auto" and echo["tools"] == []
    assert echo["parallel_tool_calls"] is True
    assert echo["temperature"] == 1.0 and echo["top_p"] == 1.0
    assert echo["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert echo["reasoning"] == {"effort": None, "summary": None}
    assert echo["truncation"] == "disabled" and echo["metadata"] == {}
    assert echo["store"] is True and echo["background"] is False
    resp = response_from_echo(echo)
    sdk_validate_response(resp)
    spec_validate_response(resp)
    resp = new_response(echo, response_id="resp_" + "0" * 48, created_at=1)
    # As OpenAI's newest recording has them: no moderation, and every hosted tool family's
    # usage at zero until a call the gateway runs counts something.
    recorded = fixture_response("openai-gpt55-reasoning-text-then-function-call-phase.sse")
    assert resp["moderation"] is None is recorded["moderation"]
    assert resp["tool_usage"] == recorded["tool_usage"]
    assert list(resp).index("tool_usage") == list(resp).index("tool_choice") + 1
    sdk_validate_response(resp)
    spec_validate_response(resp)


def test_echo_of_set_fields() -> None:
    req = parse(
        input="x",
        instructions="be brief",
        tools=[{"type": "function", "name": "f", "description": "d", "strict": False}],
        tool_choice={"type": "allowed_tools", "tools": [{"type": "function", "name": "f"}]},
        parallel_tool_calls=False,
        temperature=0.2,
        top_p=0.5,
        max_output_tokens=100,
        max_tool_calls=3,
        metadata={"a": "b"},
        text={
            "format": {
                "type": "json_schema",
                "name": "out",
                "schema": {"type": "object"},
                "description": "why",
                "strict": True,
            },
            "verbosity": "low",
        },
        reasoning={"effort": "minimal", "summary": "auto"},
        user="u",
        safety_identifier="s",
        prompt_cache_key="k",
        prompt_cache_retention="24h",
        previous_response_id="resp_1",
        top_logprobs=5,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        truncation="auto",
        service_tier="priority",
    )
    echo = req.echo()
    assert echo["tools"] == [
        {"type": "function", "description": "d", "name": "f", "output_schema": None,
         "parameters": None, "strict": False}
    ]
    assert echo["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "f"}],
    }
    assert echo["text"] == {
        "format": {
            "type": "json_schema",
            "description": "why",
            "name": "out",
            "schema": {"type": "object"},
            "strict": True,
        },
        "verbosity": "low",
    }
    assert echo["reasoning"] == {"effort": "minimal", "summary": "auto"}
    expected = {
        "instructions": "be brief",
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "top_p": 0.5,
        "max_output_tokens": 100,
        "max_tool_calls": 3,
        "metadata": {"a": "b"},
        "user": "u",
        "safety_identifier": "s",
        "prompt_cache_key": "k",
        "prompt_cache_retention": "24h",
        "previous_response_id": "resp_1",
        "top_logprobs": 5,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "truncation": "auto",
        "service_tier": "priority",
    }
    assert {k: echo[k] for k in expected} == expected
    sdk_validate_response(response_from_echo(echo))
    assert parse(tool_choice="none").echo()["tool_choice"] == "none"
    assert parse(tools=[FN], tool_choice={"type": "function", "name": "get_weather"}).echo()[
        "tool_choice"
    ] == {"type": "function", "name": "get_weather"}
    assert parse(text={"format": {"type": "json_object"}}).echo()["text"] == {
        "format": {"type": "json_object"},
        "verbosity": "medium",
    }


# --- normalize_input -------------------------------------------------------------------------

_RESPONSE_ITEM = TypeAdapter(ResponseItem)
_ID = re.compile(r"^(msg|fc|fco|rs)_[0-9a-f]{48}$")


def test_string_input_is_one_user_message() -> None:
    [item] = normalize_input(parse(input="hello"))
    assert _ID.match(item["id"]) and item["id"].startswith("msg_")
    assert item == {
        "id": item["id"],
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hello"}],
        "status": "completed",
    }
    assert normalize_input(parse()) == []


def test_items_get_types_ids_status_and_list_shape() -> None:
    items = normalize_input(
        parse(
            input=[
                {"role": "developer", "content": "rules"},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "see"},
                        {"type": "input_image", "image_url": "https://x/a.png"},
                    ],
                },
                {"role": "assistant", "content": "sure", "phase": "final_answer"},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "42"},
                {"type": "reasoning", "summary": []},
                {
                    "type": "message",
                    "id": "msg_given",
                    "role": "user",
                    "content": "x",
                    "status": "incomplete",
                },
                {"type": "item_reference", "id": "msg_old"},
                {"id": "fc_old"},
            ]
        )
    )
    prefixes = [item.get("id", "").split("_")[0] for item in items]
    assert prefixes == ["msg", "msg", "msg", "fc", "fco", "rs", "msg", "msg", "fc"]
    for item in items[:6]:
        assert _ID.match(item["id"]), item["id"]
    assert items[0]["content"] == [{"type": "input_text", "text": "rules"}]
    assert items[1]["content"][1]["detail"] == "auto"
    assert items[2]["content"] == [{"type": "output_text", "text": "sure", "annotations": []}]
    assert items[2]["phase"] == "final_answer"  # unknown item keys are kept
    assert all(item["status"] == "completed" for item in items[:5])
    assert "status" not in items[5] and items[5]["summary"] == []
    assert items[6]["id"] == "msg_given" and items[6]["status"] == "incomplete"
    assert items[7] == {"type": "item_reference", "id": "msg_old"}
    assert items[8] == {"type": "item_reference", "id": "fc_old"}
    for item in items[:7]:
        _RESPONSE_ITEM.validate_python(item)  # the shape GET input_items lists
    # Stored items are valid input again (a later turn sends them back).
    again = normalize_input(parse(input=items[:7]))
    assert again == items[:7]


def test_assistant_input_text_is_listed_as_output_text() -> None:
    [item] = normalize_input(
        parse(input=[{"role": "assistant", "content": [{"type": "input_text", "text": "t"}]}])
    )
    assert item["content"] == [{"type": "output_text", "text": "t", "annotations": []}]
    _RESPONSE_ITEM.validate_python(item)


# --- to_chat_request: messages ---------------------------------------------------------------


def test_string_input_and_defaults_left_to_upstream() -> None:
    out = chat({"input": "hi"})
    assert out == {
        "model": "upstream-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
    }


def test_instructions_first_and_developer_becomes_system() -> None:
    out = chat(
        {
            "instructions": "Be terse.",
            "input": [
                {
                    "role": "developer",
                    "content": [
                        {"type": "input_text", "text": "a"},
                        {"type": "input_text", "text": "b"},
                    ],
                },
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "q"},
            ],
        }
    )
    assert out["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "system", "content": "a\nb"},
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
    ]
    assert chat({"instructions": "", "input": "q"})["messages"] == [
        {"role": "user", "content": "q"}
    ]


def test_user_content_parts() -> None:
    out = chat(
        {
            "input": [
                user(
                    [
                        {"type": "input_text", "text": "look"},
                        {
                            "type": "input_image",
                            "image_url": "data:image/png;base64,AAAA",
                            "detail": "low",
                        },
                        {"type": "input_image", "image_url": "https://x/b.png"},
                        {
                            "type": "input_file",
                            "file_data": "data:application/pdf;base64,JVBE",
                            "filename": "a.pdf",
                        },
                        {"type": "input_file", "file_url": "https://x/docs/report.pdf?sig=1"},
                        {"type": "input_file", "file_data": "data:text/plain;base64,aGk="},
                    ]
                )
            ]
        }
    )
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://x/b.png", "detail": "auto"}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
        },
        {
            "type": "file",
            "file": {"file_data": "https://x/docs/report.pdf?sig=1", "filename": "report.pdf"},
        },
        {"type": "file", "file": {"file_data": "data:text/plain;base64,aGk=", "filename": "file"}},
    ]
    single = chat({"input": [user([{"type": "input_text", "text": "only"}])]})
    assert single["messages"] == [{"role": "user", "content": "only"}]
    assert chat({"input": [user([])]})["messages"] == [{"role": "user", "content": ""}]


def test_assistant_text_and_refusal() -> None:
    out = chat(
        {
            "input": [
                user("q"),
                {
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "Hel"},
                        {"type": "output_text", "text": "lo"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
                {"role": "assistant", "content": "plain"},
            ]
        }
    )
    assert out["messages"][1:] == [
        {"role": "assistant", "content": "Hello"},
        {"role": "assistant", "content": "", "refusal": "No."},
        {"role": "assistant", "content": "plain"},
    ]


def test_function_calls_merge_into_one_assistant_turn() -> None:
    out = chat(
        {
            "input": [
                user("weather in Paris and Rome?"),
                {"role": "assistant", "content": "Checking both."},
                {
                    "type": "function_call",
                    "call_id": "call_a",
                    "name": "w",
                    "arguments": '{"c":"Paris"}',
                },
                {
                    "type": "function_call",
                    "call_id": "call_b",
                    "name": "w",
                    "arguments": '{"c":"Rome"}',
                },
                {"type": "function_call_output", "call_id": "call_a", "output": "20C"},
                {"type": "function_call_output", "call_id": "call_b", "output": "25C"},
                {"type": "function_call", "call_id": "call_c", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_c", "output": "?"},
            ]
        }
    )
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"c":"Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"c":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "20C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "25C"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_c", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "?"},
    ]


def test_text_after_tool_calls_is_a_new_assistant_message() -> None:
    out = chat(
        {
            "input": [
                user("q"),
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"role": "assistant", "content": "after"},
                {"role": "assistant", "content": "again"},
            ]
        }
    )
    roles = [(m["role"], m.get("content")) for m in out["messages"]]
    assert roles == [
        ("user", "q"),
        ("assistant", None),
        ("assistant", "after"),
        ("assistant", "again"),
    ]


def test_function_call_output_content_arrays() -> None:
    out = chat(
        {
            "input": [
                user("q"),
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [
                        {"type": "input_text", "text": "line 1"},
                        {"type": "input_image", "image_url": "https://x/chart.png"},
                        {"type": "input_text", "text": "line 2"},
                    ],
                },
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [
                        {
                            "type": "input_file",
                            "file_data": "data:application/pdf;base64,AA",
                            "filename": "r.pdf",
                        },
                    ],
                },
                user("thanks"),
            ]
        }
    )
    msgs = out["messages"]
    assert msgs[2] == {"role": "tool", "tool_call_id": "c1", "content": "line 1\nline 2"}
    assert msgs[3]["role"] == "tool" and msgs[3]["tool_call_id"] == "c2"
    assert msgs[3]["content"]  # never empty: points at the attachment
    # Images/files cannot ride on tool messages: they follow the whole run of tool messages.
    assert msgs[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Content returned by tool call c1:"},
            {"type": "image_url", "image_url": {"url": "https://x/chart.png", "detail": "auto"}},
            {"type": "text", "text": "Content returned by tool call c2:"},
            {
                "type": "file",
                "file": {"file_data": "data:application/pdf;base64,AA", "filename": "r.pdf"},
            },
        ],
    }
    assert msgs[5] == {"role": "user", "content": "thanks"}
    # At the end of the conversation they are still sent.
    tail = chat(
        {
            "input": [
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [{"type": "input_image", "image_url": "https://x/y.png"}],
                },
            ]
        }
    )
    assert tail["messages"][-1]["role"] == "user"
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert chat({"input": [call, {"type": "function_call_output", "call_id": "c", "output": []}]})[
        "messages"
    ][-1] == {"role": "tool", "tool_call_id": "c", "content": ""}


@pytest.mark.parametrize(("kind", "what"), [("function_call_output", "function call"),
                                            ("custom_tool_call_output", "custom tool call")])
def test_an_output_answering_no_call_is_openais_400(kind: str, what: str) -> None:
    """OpenAI: 400 "No tool call found for function call output with call_id X.", param input
    (issue 27, defect 9: it was accepted and the turn completed)."""
    with pytest.raises(GatewayError) as caught:
        chat({"input": [user("q"), {"type": kind, "call_id": "call_nope", "output": "x"}]})
    assert caught.value.status == 400 and caught.value.param == "input"
    assert caught.value.message == f"No tool call found for {what} output with call_id call_nope."


REASONING_CONVERSATION: list[dict[str, Any]] = [
    user("q"),
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "S1"}, {"type": "summary_text", "text": "S2"}],
    },
    {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    {
        "type": "reasoning",
        "summary": [],
        "content": [
            {"type": "reasoning_text", "text": "R"},
            {"type": "reasoning_text", "text": "aw"},
        ],
        "encrypted_content": SEALED,
    },
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "dangling"}]},
    user("next"),
]


def test_reasoning_items_dropped_by_default() -> None:
    out = chat({"input": REASONING_CONVERSATION}, unseal=unseal)
    # Without reasoning between them, the text and the call are one assistant turn.
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "user"]
    assert out["messages"][1]["content"] == "a" and len(out["messages"][1]["tool_calls"]) == 1
    assert not any("reasoning_content" in m or "reasoning_details" in m for m in out["messages"])


def test_reasoning_goes_back_on_the_next_assistant_message() -> None:
    out = chat(
        {"input": REASONING_CONVERSATION}, reasoning_input="reasoning_content", unseal=unseal
    )
    msgs = out["messages"]
    assert msgs[1] == {"role": "assistant", "content": "a", "reasoning_content": "S1\n\nS2"}
    assert msgs[2] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Raw",  # reasoning_text parts win over the summary
        "reasoning_details": DETAILS,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    # Reasoning followed by no assistant message has nowhere to go.
    assert msgs[3:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    # Other field names (OpenRouter's "reasoning"); without unseal the blob is ignored.
    other = chat({"input": REASONING_CONVERSATION}, reasoning_input="reasoning")
    assert other["messages"][2]["reasoning"] == "Raw"
    assert "reasoning_details" not in other["messages"][2]


def test_tampered_encrypted_reasoning_is_a_400() -> None:
    tampered = SEALED[:-4] + ("AAAA" if not SEALED.endswith("AAAA") else "BBBB")
    body = {
        "input": [
            {"type": "reasoning", "summary": [], "encrypted_content": tampered},
            {"role": "assistant", "content": "x"},
        ]
    }
    with pytest.raises(GatewayError) as info:
        chat(body, reasoning_input="reasoning_content", unseal=unseal)
    assert info.value.status == 400 and info.value.code == "invalid_encrypted_content"
    foreign = SEALER.seal({"reasoning_details": DETAILS}, "tenant-b")
    body["input"][0]["encrypted_content"] = foreign
    with pytest.raises(GatewayError):
        chat(body, reasoning_input="reasoning_content", unseal=unseal)


def test_output_items_of_a_stored_response_are_valid_input() -> None:
    """Earlier turns come back from the store as output items; they translate as they are."""
    previous_output = [
        {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [],
            "content": [],
            "encrypted_content": SEALED,
            "status": "completed",
        },
        {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "phase": "commentary",
            "content": [
                {"type": "output_text", "annotations": [], "logprobs": [], "text": "Let me"}
            ],
        },
        {
            "id": "fc_1",
            "type": "function_call",
            "status": "completed",
            "arguments": "{}",
            "call_id": "call_1",
            "name": "get_capital",
        },
    ]
    earlier_input = normalize_input(parse(input="capital?"))
    req = parse(
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "Paris"}],
        previous_response_id="resp_1",
    )
    items = earlier_input + previous_output + normalize_input(req)
    out = to_chat_request(req, items, model="x", reasoning_input="reasoning_content", unseal=unseal)
    for message in out["messages"]:
        assert_chat_message(message)
    assert out["messages"] == [
        {"role": "user", "content": "capital?"},
        {
            "role": "assistant",
            "content": "Let me",
            "reasoning_details": DETAILS,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_capital", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Paris"},
    ]
    # The same output items are also accepted as client-sent input (stateless multi-turn).
    again = parse(
        input=[
            *previous_output,
            {"type": "function_call_output", "call_id": "call_1", "output": "P"},
        ]
    )
    assert len(to_chat_request(again, normalize_input(again), model="x")["messages"]) == 2


def test_unresolved_item_reference_is_a_400_naming_its_input_index() -> None:
    req = parse(input=[user("a"), {"type": "item_reference", "id": "msg_gone"}])
    stored = normalize_input(parse(input="earlier"))
    with pytest.raises(GatewayError) as info:
        to_chat_request(req, stored + normalize_input(req), model="x")
    err = info.value
    assert (err.status, err.param) == (400, "input[1]")
    assert "msg_gone" in err.message and "cannot be resolved" in err.message


def test_unknown_item_types_in_items_are_a_400() -> None:
    req = parse(input="q")
    with pytest.raises(GatewayError) as info:
        to_chat_request(
            req, [{"type": "no_such_call", "id": "nsc_1"}, *normalize_input(req)],
            model="x",
        )
    assert info.value.status == 400 and "no_such_call" in info.value.message
    assert info.value.param == "previous_response_id.type"
    with pytest.raises(GatewayError) as info:
        to_chat_request(
            req,
            [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_image", "file_id": "file-1"}],
                }
            ],
            model="x",
        )
    assert info.value.param == "input[0].content[0].file_id"


# --- to_chat_request: parameters -------------------------------------------------------------


def test_tools_and_tool_choice() -> None:
    tools = [
        {
            "type": "function",
            "name": "a",
            "description": "A",
            "parameters": {"type": "object"},
            "strict": True,
        },
        {"type": "function", "name": "b"},
        {"type": "function", "name": "c", "strict": False},
    ]
    out = chat({"input": "q", "tools": tools})
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "a",
                "description": "A",
                "parameters": {"type": "object"},
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "b"}},
        {"type": "function", "function": {"name": "c", "strict": False}},
    ]
    assert "tool_choice" not in out and "parallel_tool_calls" not in out
    for choice in ("auto", "none", "required"):
        assert chat({"input": "q", "tools": tools, "tool_choice": choice})["tool_choice"] == choice
    named = chat({"input": "q", "tools": tools, "tool_choice": {"type": "function", "name": "b"}})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "b"}}
    allowed = chat(
        {
            "input": "q",
            "tools": tools,
            "parallel_tool_calls": False,
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "c"}, {"type": "function", "name": "a"}],
            },
        }
    )
    assert [t["function"]["name"] for t in allowed["tools"]] == ["a", "c"]
    assert allowed["tool_choice"] == "required" and allowed["parallel_tool_calls"] is False
    default_mode = chat(
        {
            "input": "q",
            "tools": tools,
            "tool_choice": {"type": "allowed_tools", "tools": [{"type": "function", "name": "b"}]},
        }
    )
    assert default_mode["tool_choice"] == "auto"
    # No tools: chat servers reject tool_choice / parallel_tool_calls on their own.
    bare = chat({"input": "q", "tools": [], "tool_choice": "none", "parallel_tool_calls": True})
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(bare)


def test_sampling_and_identity_parameters() -> None:
    out = chat(
        {
            "input": "q",
            "temperature": 0.3,
            "top_p": 0.9,
            "max_output_tokens": 64,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.2,
            "user": "u1",
            "safety_identifier": "hash1",
            "prompt_cache_key": "pck",
            "metadata": {"a": "b"},
            "store": True,
            "truncation": "auto",
            "service_tier": "flex",
            "max_tool_calls": 2,
            "previous_response_id": "resp_1",
            "background": True,
        }
    )
    sent = {k: v for k, v in out.items() if k not in ("messages", "model")}
    assert sent == {
        "temperature": 0.3,
        "top_p": 0.9,
        "max_completion_tokens": 64,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "user": "u1",
        "safety_identifier": "hash1",
        "prompt_cache_key": "pck",
        "service_tier": "flex",  # issue 33: passed on (dialects drop it where refused)
        "stream": False,
    }


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [({"effort": "high"}, "high"), ({"effort": "none"}, "none"), ({"summary": "auto"}, None)],
)
def test_reasoning_effort(reasoning: dict[str, Any], expected: str | None) -> None:
    out = chat({"input": "q", "reasoning": reasoning})
    assert out.get("reasoning_effort") == expected


@pytest.mark.parametrize(
    ("text", "response_format", "verbosity"),
    [
        ({"format": {"type": "text"}}, None, None),
        ({"format": {"type": "json_object"}}, {"type": "json_object"}, None),
        (
            {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
            {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}},
            None,
        ),
        (
            {
                "format": {
                    "type": "json_schema",
                    "name": "out",
                    "schema": {"type": "object"},
                    "strict": True,
                    "description": "the answer",
                },
                "verbosity": "high",
            },
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "out",
                    "schema": {"type": "object"},
                    "strict": True,
                    "description": "the answer",
                },
            },
            "high",
        ),
        ({"verbosity": "low"}, None, "low"),
    ],
)
def test_text_format_and_verbosity(
    text: dict[str, Any], response_format: Any, verbosity: str | None
) -> None:
    out = chat({"input": "q", "text": text})
    assert out.get("response_format") == response_format
    assert out.get("verbosity") == verbosity


def test_logprobs() -> None:
    out = chat({"input": "q", "include": ["message.output_text.logprobs"], "top_logprobs": 3})
    assert out["logprobs"] is True and out["top_logprobs"] == 3
    out = chat({"input": "q", "include": ["message.output_text.logprobs"]})
    assert out["logprobs"] is True and "top_logprobs" not in out
    out = chat({"input": "q", "top_logprobs": 3})
    assert "logprobs" not in out and "top_logprobs" not in out


def test_stream_always_asks_for_usage() -> None:
    out = chat({"input": "q", "stream": True})
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    out = chat({"input": "q", "stream": True, "stream_options": {"include_obfuscation": False}})
    assert out["stream_options"] == {"include_usage": True}
    assert "stream_options" not in chat({"input": "q", "stream": False})


def test_model_comes_from_the_caller() -> None:
    assert chat({"input": "q"}, model="provider/real-name")["model"] == "provider/real-name"


# --- property tests --------------------------------------------------------------------------

names = st.from_regex(r"[a-zA-Z0-9_-]{1,12}", fullmatch=True)
texts = st.text(max_size=12)
maybe_id = st.one_of(st.none(), names.map(lambda s: f"id_{s}"))

input_text = st.builds(lambda t: {"type": "input_text", "text": t}, texts)
input_image = st.fixed_dictionaries(
    {
        "type": st.just("input_image"),
        "image_url": st.sampled_from(["https://e.x/a.png", "data:image/png;base64,AAAA"]),
    },
    optional={"detail": st.sampled_from(["low", "high", "auto", "original"])},
)
input_file = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("input_file"), "file_data": st.just("data:application/pdf;base64,AA")},
        optional={"filename": st.just("a.pdf")},
    ),
    st.fixed_dictionaries(
        {"type": st.just("input_file"), "file_url": st.just("https://e.x/doc.pdf")}
    ),
)
output_text = st.fixed_dictionaries(
    {"type": st.just("output_text"), "text": texts},
    optional={"annotations": st.just([]), "logprobs": st.just([])},
)
refusal = st.builds(lambda t: {"type": "refusal", "refusal": t}, texts)
PARTS = {
    "user": st.one_of(input_text, input_image, input_file),
    "system": input_text,
    "developer": input_text,
    "assistant": st.one_of(output_text, refusal, input_text),
}


def message(role: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"role": st.just(role), "content": st.one_of(texts, st.lists(PARTS[role], max_size=3))},
        optional={
            "type": st.just("message"),
            "id": maybe_id,
            "status": st.sampled_from(["completed", "incomplete"]),
        },
    )


function_call = st.fixed_dictionaries(
    {
        "type": st.just("function_call"),
        "call_id": names,
        "name": names,
        "arguments": st.one_of(st.just("{}"), texts),
    },
    optional={"id": maybe_id, "status": st.just("completed")},
)
function_call_output = st.fixed_dictionaries(
    {
        "type": st.just("function_call_output"),
        "call_id": names,
        "output": st.one_of(
            texts, st.lists(st.one_of(input_text, input_image, input_file), max_size=3)
        ),
    },
    optional={"id": maybe_id},
)
reasoning_item = st.fixed_dictionaries(
    {
        "type": st.just("reasoning"),
        "summary": st.lists(
            st.builds(lambda t: {"type": "summary_text", "text": t}, texts), max_size=2
        ),
    },
    optional={
        "id": maybe_id,
        "encrypted_content": st.just(SEALED),
        "content": st.lists(
            st.builds(lambda t: {"type": "reasoning_text", "text": t}, texts), max_size=2
        ),
    },
)
input_item = st.one_of(
    *(message(r) for r in PARTS), function_call, function_call_output, reasoning_item
)
function_tool = st.fixed_dictionaries(
    {"type": st.just("function"), "name": names},
    optional={
        "description": st.one_of(st.none(), texts),
        "parameters": st.one_of(st.none(), st.just({"type": "object", "properties": {}})),
        "strict": st.booleans(),
    },
)


@st.composite
def valid_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": draw(names)}
    body["input"] = _answered(draw(st.one_of(texts, st.lists(input_item, max_size=8))))
    tools = draw(st.lists(function_tool, max_size=3, unique_by=lambda t: t["name"]))
    if tools or draw(st.booleans()):
        body["tools"] = tools
    choices: list[Any] = ["auto", "none"]
    if tools:
        tool_names = [t["name"] for t in tools]
        choices += [
            "required",
            {"type": "function", "name": draw(st.sampled_from(tool_names))},
            {
                "type": "allowed_tools",
                "mode": draw(st.sampled_from(["auto", "required"])),
                "tools": [
                    {"type": "function", "name": n}
                    for n in draw(st.lists(st.sampled_from(tool_names), min_size=1))
                ],
            },
        ]
    optional: dict[str, st.SearchStrategy[Any]] = {
        "tool_choice": st.sampled_from(choices),
        "instructions": st.one_of(st.none(), texts),
        "parallel_tool_calls": st.booleans(),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "presence_penalty": st.floats(-2, 2),
        "frequency_penalty": st.floats(-2, 2),
        "max_output_tokens": st.integers(16, 100_000),
        "max_tool_calls": st.integers(1, 50),
        "top_logprobs": st.integers(0, 20),
        "user": texts,
        "safety_identifier": st.text(max_size=128),
        "prompt_cache_key": st.text(max_size=64),
        "prompt_cache_retention": st.sampled_from(["in_memory", "24h"]),
        "reasoning": st.fixed_dictionaries(
            {},
            optional={
                "effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh"]),
                "summary": st.sampled_from(["auto", "concise", "detailed", None]),
            },
        ),
        "text": st.fixed_dictionaries(
            {},
            optional={
                "format": st.sampled_from(
                    [
                        {"type": "text"},
                        {"type": "json_object"},
                        {
                            "type": "json_schema",
                            "name": "out",
                            "schema": {"type": "object"},
                            "strict": True,
                        },
                    ]
                ),
                "verbosity": st.sampled_from(["low", "medium", "high"]),
            },
        ),
        "include": st.lists(
            st.sampled_from(
                sorted(["message.output_text.logprobs", "reasoning.encrypted_content"])
            ),
            unique=True,
        ),
        "previous_response_id": names.map(lambda s: f"resp_{s}"),
        "metadata": st.dictionaries(st.text(max_size=64), st.text(max_size=512), max_size=16),
        "truncation": st.sampled_from(["auto", "disabled"]),
        "service_tier": st.sampled_from(["auto", "default", "flex", "priority"]),
        "store": st.booleans(),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            body[key] = draw(strategy)
    if draw(st.booleans()):
        body["stream"] = draw(st.booleans())
        if body["stream"] and draw(st.booleans()):
            body["stream_options"] = {"include_obfuscation": draw(st.booleans())}
    if body.get("store", True) and draw(st.booleans()):
        body["background"] = True
    return body


def translate(body: Any, reasoning_input: str | None) -> dict[str, Any]:
    req = parse_create_request(body)
    items = normalize_input(req)
    out = to_chat_request(
        req, items, model="upstream", reasoning_input=reasoning_input, unseal=unseal
    )
    json.dumps(out)
    for message in out["messages"]:
        assert_chat_message(message)
    sdk_validate_response(response_from_echo(req.echo()))
    return out


PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def _answered(items: Any) -> Any:
    """A valid input answers only calls it holds: each output without its call gets one."""
    if isinstance(items, str):
        return items
    out: list[Any] = []
    called = set()
    for item in items:
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output" and item["call_id"] not in called:
            called.add(item["call_id"])
            out.append({"type": "function_call", "call_id": item["call_id"], "name": "f",
                        "arguments": "{}"})
        out.append(item)
    return out


REASONING_INPUT = st.sampled_from([None, "reasoning_content", "reasoning"])


@pytest.mark.slow
@PROPERTY
@given(valid_bodies(), REASONING_INPUT)
def test_valid_bodies_always_translate(body: dict[str, Any], reasoning_input: str | None) -> None:
    out = translate(body, reasoning_input)
    req = parse_create_request(body)
    items = normalize_input(req)
    expected_items = 1 if isinstance(body["input"], str) else len(body["input"])
    assert len(items) == expected_items
    assert all(item["id"] and item["type"] for item in items)
    for item in items:
        _RESPONSE_ITEM.validate_python(item)  # what GET input_items lists
    assert parse_create_request({"model": "m", "input": items})  # stored items are valid input
    assert out["stream"] is bool(body.get("stream"))
    for key in ("temperature", "top_p", "user", "prompt_cache_key", "safety_identifier"):
        assert out.get(key) == body.get(key)
    assert out.get("max_completion_tokens") == body.get("max_output_tokens")
    assert "metadata" not in out and "store" not in out
    calls = [m for m in out["messages"] if m.get("tool_calls")]
    sent_calls = sum(len(m["tool_calls"]) for m in calls)
    assert sent_calls == sum(1 for i in items if i["type"] == "function_call")
    tool_msgs = [m for m in out["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == sum(1 for i in items if i["type"] == "function_call_output")


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "max_tool_calls",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "reasoning",
    "text",
    "top_logprobs",
    "include",
    "stream",
    "store",
    "background",
    "previous_response_id",
    "metadata",
    "truncation",
    "service_tier",
    "presence_penalty",
    "frequency_penalty",
    "prompt_cache_retention",
    "conversation",
    "prompt",
    "stream_options",
]


def mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """Replace one randomly chosen node of ``value`` by a random JSON value."""
    if depth > 4 or data.draw(st.integers(0, 3)) == 0:
        return data.draw(json_values)
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: mutate(data, value[key], depth + 1)}
    if isinstance(value, list) and value:
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], mutate(data, value[i], depth + 1), *value[i + 1 :]]
    return data.draw(json_values)


def translate_or_400(body: Any, reasoning_input: str | None) -> None:
    try:
        translate(body, reasoning_input)
    except GatewayError as err:
        assert err.status == 400, err
        assert err.type == "invalid_request_error"
        assert err.message
        if isinstance(body, dict):
            assert isinstance(err.param, str) and err.param, err


@pytest.mark.slow
@PROPERTY
@given(valid_bodies(), st.data(), REASONING_INPUT)
def test_mutated_bodies_translate_or_400(
    body: dict[str, Any], data: st.DataObject, reasoning_input: str | None
) -> None:
    translate_or_400(mutate(data, body), reasoning_input)


@pytest.mark.slow
@PROPERTY
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6), REASONING_INPUT)
def test_arbitrary_json_fields_translate_or_400(
    body: dict[str, Any], reasoning_input: str | None
) -> None:
    translate_or_400({"model": "m", **body}, reasoning_input)


@pytest.mark.slow
@PROPERTY
@given(json_values)
def test_arbitrary_json_bodies_translate_or_400(body: Any) -> None:
    translate_or_400(body, None)


def test_message_params_name_the_client_side_source_of_each_chat_message() -> None:
    """Backends report errors per chat message; these params say what the client sent."""
    req = parse_create_request({
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "now"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "ok"},
        ],
    })
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "then"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
    ]
    params: list[str] = []
    body = to_chat_request(req, history + normalize_input(req), model="m", message_params=params)
    assert [m["role"] for m in body["messages"]] == [
        "system", "user", "assistant", "user", "assistant", "tool"]
    assert params == [
        "instructions", "previous_response_id", "previous_response_id",
        "input[0]", "input[1]", "input[2]"]


def test_a_hosted_tool_knows_at_construction_whether_the_gateway_runs_it() -> None:
    """``served`` comes from the validation's context as the tool is built (issue 41), not
    patched onto the model afterwards; nothing outside HostedTool sets it."""
    from responses_gateway.translate.request_tools import SERVED, HostedTool

    assert HostedTool.model_validate({"type": "web_search"},
                                     context={SERVED: {"web_search"}}).served
    assert not HostedTool.model_validate({"type": "web_search"}).served
    req = parse_create_request(
        {"model": "m", "tools": [{"type": "web_search"}, {"type": "image_generation"}]},
        hosted_tools="omit", served={"web_search"})
    assert [tool.served for tool in req.tools or ()] == [True, False]
    handler = Path(__file__).resolve().parent.parent / "handler" / "responses_gateway"
    setters = [p for p in handler.rglob("*.py")
               if re.search(r"(?<!self)\._served\s*=", p.read_text())]
    assert setters == []


def test_input_items_are_validated_by_their_own_types_model() -> None:
    """Each item by its type's model (request_items.validate_items), with the union's errors
    and in the union's order: a field before ``input`` is named first, ``input`` before the
    fields after it, and the first bad item before a later one."""
    assert error_of({"input": [{"type": "nope"}]}).param == "model"
    bad_item = {"type": "function_call", "call_id": "c", "name": "f", "arguments": 5}
    err = error_of({"model": "m", "input": [bad_item], "temperature": 9})
    assert (err.param, err.code) == ("input[0].arguments", "invalid_type")
    err = error_of({"model": "m", "input": [{"role": "user", "content": "hi"}, 5, {}]})
    assert err.param == "input[1]" and "expected an object" in err.message
    assert error_of({"model": "m", "input": [{}]}).param == "input[0].type"
    err = error_of({"model": "m", "input": [{"type": "nope"}]})
    assert err.message.startswith("Input items of type 'nope' are not supported")


def test_a_create_builds_only_the_validators_it_uses() -> None:
    """A fresh process's plain create builds the message validator and not the other item
    types', nor the client-run tools' item classes (most of the first create's validator
    building, benchmarks/cold_start.py)."""
    import subprocess
    import sys

    code = (
        "from responses_gateway.translate import request_items as ri, request_models as rm\n"
        "rm.parse_create_request({'model': 'm', 'input': [{'role': 'user', 'content': 'hi'}]})\n"
        "import sys\n"
        "print(ri.Message.__pydantic_complete__, ri.FunctionCall.__pydantic_complete__,"
        " 'responses_gateway.translate.request_client_items' in sys.modules)\n"
    )
    handler = Path(__file__).resolve().parent.parent / "handler"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(handler), "PATH": "/usr/bin"})
    assert out.stdout.split() == ["True", "False", "False"]

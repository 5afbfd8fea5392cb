"""Upstream dialects: the body each server family is sent, checked against that server's own
request rules (tests/helpers/upstream_schemas.py), for the requests agents really make; how a
dialect is recognised; and what a rejection teaches."""

from __future__ import annotations

from typing import Any

import pytest

from responses_gateway.backends import dialects
from responses_gateway.backends.dialects import DIALECTS, Learned, adaptation_for, short_id
from responses_gateway.translate.request_models import normalize_input, parse_create_request
from responses_gateway.translate.sealing import Sealer
from responses_gateway.translate.to_chat import to_chat_request
from tests.helpers.upstream_schemas import CHECKS

SEALER = Sealer.from_secret("dialect-tests")
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
NO_PARAMS = {"type": "function", "name": "now"}
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="  # noqa: E501
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}},
          "required": ["answer"], "additionalProperties": False}

# The requests an agent makes, as Responses bodies (with earlier items where a turn has them).
SCENARIOS: dict[str, dict[str, Any]] = {
    "tool call, then its result (the agent loop)": {
        "tools": [WEATHER, NO_PARAMS], "stream": True, "max_output_tokens": 64,
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_abc123XYZ_long", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_abc123XYZ_long",
             "output": "sunny, 21 C"},
        ]},
    "text beside a call, two calls in one turn": {
        "tools": [WEATHER], "parallel_tool_calls": True,
        "input": [
            {"role": "user", "content": "Paris and Tokyo?"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "a1", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "b2", "name": "get_weather",
             "arguments": '{"city": "Tokyo"}'},
            {"type": "function_call_output", "call_id": "a1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "b2", "output": "rain"},
        ]},
    "reasoning round trip": {
        "tools": [WEATHER], "reasoning": {"effort": "low"}, "stream": True,
        "input": [
            {"role": "user", "content": "Weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "I should call it."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": '{"city": "Oslo"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "snow"},
        ]},
    "image input": {
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": PNG, "detail": "low"}]}]},
    "structured output": {
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA,
                            "strict": True}},
        "input": "Answer in JSON.", "max_output_tokens": 100},
    "JSON mode": {"text": {"format": {"type": "json_object"}}, "input": "JSON please."},
    "limits, sampling and logprobs": {
        "input": "Hi", "max_output_tokens": 16, "temperature": 0.2, "top_p": 0.9,
        "top_logprobs": 2, "include": ["message.output_text.logprobs"], "stream": True,
        "user": "u-1", "safety_identifier": "s-1", "prompt_cache_key": "k"},
    "logprobs with tools in a stream": {
        "input": "Hi", "tools": [WEATHER], "stream": True, "top_logprobs": 1,
        "include": ["message.output_text.logprobs"]},
}


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    req = parse_create_request({"model": "m", **body})
    return to_chat_request(req, normalize_input(req), model="upstream-model",
                           reasoning_input="reasoning_content", unseal=None)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("name", list(DIALECTS))
def test_every_dialect_sends_what_its_server_accepts(name: str, scenario: str) -> None:
    sent = DIALECTS[name].prepare(chat_body(SCENARIOS[scenario]))
    assert CHECKS[name](sent) == []


@pytest.mark.parametrize("name", ["generic", "llama-cpp-python", "ollama", "lmstudio", "tgi"])
def test_the_gateways_own_form_fails_those_servers(name: str) -> None:
    """The schemas have teeth: OpenAI's form, unprepared, is what broke llama.cpp users."""
    loop = chat_body(SCENARIOS["tool call, then its result (the agent loop)"])
    assert loop["messages"][1]["content"] is None and "max_completion_tokens" in loop
    assert CHECKS[name](loop) != []


def test_limit_goes_under_the_name_each_server_reads() -> None:
    body = chat_body({"input": "Hi", "max_output_tokens": 16})
    assert body["max_completion_tokens"] == 16  # the translator's own (OpenAI's) form
    for name, dialect in DIALECTS.items():
        sent = dialect.prepare(body)
        expected = ("max_completion_tokens" if name in ("openai", "azure", "groq")
                    else "max_tokens")
        assert sent[expected] == 16
        assert len({"max_tokens", "max_completion_tokens"} & set(sent)) == 1


def test_content_beside_tool_calls() -> None:
    body = chat_body(SCENARIOS["tool call, then its result (the agent loop)"])
    assert DIALECTS["generic"].prepare(body)["messages"][1]["content"] == ""
    assert DIALECTS["openai"].prepare(body)["messages"][1]["content"] is None
    assert body["messages"][1]["content"] is None  # the caller's body is left as it was


def test_structured_output_shapes() -> None:
    body = chat_body(SCENARIOS["structured output"])
    assert DIALECTS["llama-cpp-python"].prepare(body)["response_format"] == {
        "type": "json_object", "schema": SCHEMA}
    assert DIALECTS["tgi"].prepare(body)["response_format"] == {
        "type": "json_object", "value": SCHEMA}
    mode = chat_body(SCENARIOS["JSON mode"])
    assert DIALECTS["lmstudio"].prepare(mode)["response_format"]["type"] == "json_schema"
    assert DIALECTS["vllm"].prepare(body)["response_format"] == body["response_format"]


def test_mistral_tool_call_ids_are_nine_alnum_and_stable() -> None:
    body = chat_body(SCENARIOS["tool call, then its result (the agent loop)"])
    sent = DIALECTS["mistral"].prepare(body)
    call_id = sent["messages"][1]["tool_calls"][0]["id"]
    assert len(call_id) == 9 and call_id.isalnum()
    assert sent["messages"][2]["tool_call_id"] == call_id
    assert short_id("abcDEF123") == "abcDEF123"  # Mistral's own ids come back unchanged


@pytest.mark.parametrize(("url", "name"), [
    ("https://api.openai.com/v1", "openai"),
    ("https://my-res.openai.azure.com/openai/v1", "azure"),
    ("https://x.cognitiveservices.azure.com/openai/deployments/d?api-version=2024-10-21",
     "azure"),
    ("https://openrouter.ai/api/v1", "openrouter"),
    ("https://api.groq.com/openai/v1", "groq"),
    ("https://api.deepseek.com/v1", "deepseek"),
    ("https://api.mistral.ai/v1", "mistral"),
    ("https://api.together.xyz/v1", "together"),
    ("https://api.fireworks.ai/inference/v1", "fireworks"),
    ("http://127.0.0.1:11434/v1", "ollama"),
    ("http://localhost:1234/v1", "lmstudio"),
])
def test_dialect_from_url(url: str, name: str) -> None:
    found = dialects.dialect_from_url(url)
    assert found is not None and found.name == name


def test_self_hosted_servers_are_not_guessed_from_the_url() -> None:
    assert dialects.dialect_from_url("http://127.0.0.1:8000/v1") is None


@pytest.mark.parametrize(("answer", "headers", "name"), [
    ({"data": [{"id": "m.gguf", "object": "model", "owned_by": "llamacpp"}]}, {}, "llama.cpp"),
    ({"data": [{"id": "m.gguf", "object": "model", "owned_by": "me", "permissions": []}]}, {},
     "llama-cpp-python"),
    ({"data": [{"id": "Qwen/Qwen3-8B", "owned_by": "vllm", "max_model_len": 4096}]}, {},
     "vllm"),
    ({"data": [{"id": "q", "owned_by": "sglang"}]}, {}, "sglang"),
    ({"data": [{"id": "llama3.2:latest", "owned_by": "library"}]}, {}, "ollama"),
    ({"data": [{"id": "qwen", "owned_by": "organization_owner"}]}, {}, "lmstudio"),
    ({"data": [{"id": "tgi-model", "object": "model", "owned_by": "tgi-model"}]},
     {"x-compute-type": "gpu+optimized"}, "tgi"),
    ({"data": [{"id": "gpt-4o", "owned_by": "openai"}]}, {"x-litellm-version": "1.7"},
     "litellm"),
])
def test_dialect_from_models(answer: Any, headers: dict[str, str], name: str) -> None:
    found = dialects.dialect_from_models(answer, headers)
    assert found is not None and found.name == name


def test_unknown_models_answer_is_no_dialect() -> None:
    assert dialects.dialect_from_models({"data": [{"id": "x", "owned_by": "acme"}]}, {}) is None
    scripted = {"data": [{"id": "scripted", "created": 0, "owned_by": "scripted"}]}
    assert dialects.dialect_from_models(scripted, {}) is None
    assert dialects.dialect_from_models(None, {}) is None


def test_unknown_dialect_name_is_refused() -> None:
    with pytest.raises(ValueError, match="GATEWAY_UPSTREAM_DIALECT"):
        dialects.dialect_named("llamacpp-typo")


# -- learning from rejections ----------------------------------------------------------------

SENT = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
        "logprobs": True, "stream_options": {"include_usage": True}, "temperature": 0.3}


@pytest.mark.parametrize(("error", "message", "change"), [
    ({"error": {"code": "unsupported_parameter", "param": "max_tokens"}},
     "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
     "'max_completion_tokens' instead.", (set(), {"max_tokens": "max_completion_tokens"})),
    ({"error": {"message": "`logprobs` is not supported"}}, "`logprobs` is not supported",
     ({"logprobs"}, {})),
    ({"detail": [{"type": "extra_forbidden", "loc": ["body", "stream_options"],
                  "msg": "Extra inputs are not permitted"}]},
     '[{"type":"extra_forbidden"}]', ({"stream_options"}, {})),
    ({"error": {"code": "unsupported_value", "param": "temperature"}},
     "Unsupported value: 'temperature' does not support 0.3 with this model.",
     ({"temperature"}, {})),
])
def test_rejections_of_parameters_are_adapted(error: Any, message: str, change: Any) -> None:
    assert adaptation_for(error, message, SENT) == change


@pytest.mark.parametrize(("error", "message"), [
    ({"error": {"code": "context_length_exceeded"}}, "Too many tokens in 'messages'"),
    ({"error": {"param": "messages"}}, "Invalid 'messages[1].content': unsupported type"),
    ({"error": {}}, "max_tokens is too large: 100000"),
    ({"detail": [{"type": "missing", "loc": ["body", "messages", 0, "content"]}]},
     "Field required"),
])
def test_rejections_of_content_are_not(error: Any, message: str) -> None:
    assert adaptation_for(error, message, SENT) is None


def test_learned_changes_apply_after_the_dialect() -> None:
    learned = Learned(drops={"logprobs"}, renames={"max_tokens": "max_completion_tokens"})
    body = {k: v for k, v in SENT.items() if k != "max_tokens"} | {"max_completion_tokens": 9}
    sent = DIALECTS["generic"].prepare(body, learned)
    assert "logprobs" not in sent and sent["max_completion_tokens"] == 9
    assert "max_tokens" not in sent

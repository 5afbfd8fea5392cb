"""The exact Converse request built for chat requests (mapping doc part 1).

Most cases assert the kwargs of :func:`build_converse_request`; the wire test at the end
checks what boto3 actually sent to a fake endpoint (blobs base64-encoded, model id in the path).
"""

from __future__ import annotations

import base64
import json
import textwrap
from typing import Any

import pytest

from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.bedrock import BedrockBackend
from responses_gateway.backends.bedrock.images import Fetched
from responses_gateway.backends.bedrock.models import model_info
from responses_gateway.backends.bedrock.request import build_converse_request, remote_media
from responses_gateway.errors import GatewayError
from tests.helpers.eventstream_server import FakeBedrock, count_tokens, use_dummy_aws

CLAUDE = "us.anthropic.claude-sonnet-4-20250514-v1:0"
NOVA = "us.amazon.nova-micro-v1:0"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
PDF = b"%PDF-1.7\n%fake\n"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
WEATHER_SPEC = {"toolSpec": {"name": "get_weather", "description": "Weather for a city",
                             "inputSchema": {"json": WEATHER["function"]["parameters"]}}}


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city":"Paris"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def build(**body: Any) -> dict[str, Any]:
    body.setdefault("model", NOVA)
    return build_converse_request(body).kwargs


def test_system_and_developer_are_hoisted_and_same_role_turns_merged() -> None:
    kwargs = build(messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": [{"type": "text", "text": "there"},
                                     {"type": "text", "text": "   "}]},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "assistant", "content": [{"type": "text", "text": "!"}]},
        {"role": "user", "content": "Merci"},
        {"role": "system", "content": ""},
    ])
    assert kwargs == {
        "modelId": NOVA,
        "system": [{"text": "You are terse."}, {"text": "Answer in French."}],
        "messages": [
            {"role": "user", "content": [{"text": "Hi"}, {"text": "there"}]},
            {"role": "assistant", "content": [{"text": "Bonjour"}, {"text": "!"}]},
            {"role": "user", "content": [{"text": "Merci"}]},
        ],
    }


def test_parallel_tool_results_share_one_user_turn_before_any_text() -> None:
    kwargs = build(tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.",
         "tool_calls": [call("tooluse_a"), call("tooluse_b", arguments='{"city":"Rome"}')]},
        {"role": "tool", "tool_call_id": "tooluse_a", "content": "18C"},
        {"role": "user", "content": "Also say hi."},
        {"role": "tool", "tool_call_id": "tooluse_b", "content": [{"type": "text",
                                                                   "text": "21C"}]},
    ])
    assert kwargs["messages"] == [
        {"role": "user", "content": [{"text": "Weather in Paris and Rome?"}]},
        {"role": "assistant", "content": [
            {"text": "Checking."},
            {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather",
                         "input": {"city": "Paris"}}},
            {"toolUse": {"toolUseId": "tooluse_b", "name": "get_weather",
                         "input": {"city": "Rome"}}},
        ]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "18C"}]}},
            {"toolResult": {"toolUseId": "tooluse_b", "content": [{"text": "21C"}]}},
            {"text": "Also say hi."},
        ]},
    ]
    assert kwargs["toolConfig"] == {"tools": [WEATHER_SPEC]}


def test_tool_ids_and_names_are_normalised_consistently_and_duplicates_split() -> None:
    tool = {"type": "function", "function": {"name": "weather.get v2"}}
    result = build_converse_request({"model": NOVA, "tools": [tool], "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [call("call#1", "weather.get v2", ""),
                                             call("call#1", "weather.get v2", "[1]")]},
        {"role": "tool", "tool_call_id": "call#1", "content": ""},
        {"role": "tool", "tool_call_id": "call#1", "content": "second"},
    ]})
    kwargs = result.kwargs
    uses = [b["toolUse"] for b in kwargs["messages"][1]["content"]]
    name = kwargs["toolConfig"]["tools"][0]["toolSpec"]["name"]
    assert all(c.isalnum() or c in "_-" for c in name) and len(name) <= 64
    assert result.tool_names == {name: "weather.get v2"}
    assert [u["name"] for u in uses] == [name, name]
    assert uses[0]["input"] == {} and uses[1]["input"] == {"_raw": "[1]"}
    first, second = uses[0]["toolUseId"], uses[1]["toolUseId"]
    assert first != second and "#" not in first and len(first) <= 64
    results = [b["toolResult"] for b in kwargs["messages"][2]["content"]]
    assert results == [{"toolUseId": first, "content": [{"text": "(empty)"}]},
                       {"toolUseId": second, "content": [{"text": "second"}]}]
    # same input, same ids: the mapping is deterministic across turns of a tool loop
    again = build_converse_request({"model": NOVA, "tools": [tool], "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [call("call#1", "weather.get v2", "")]}]})
    assert again.kwargs["messages"][1]["content"][0]["toolUse"]["toolUseId"] == first


def test_tool_choice_mapping() -> None:
    msgs = [{"role": "user", "content": "x"}]
    assert build(tools=[WEATHER], tool_choice="required", messages=msgs)["toolConfig"][
        "toolChoice"] == {"any": {}}
    assert build(tools=[WEATHER], tool_choice={"type": "function", "function": {
        "name": "get_weather"}}, messages=msgs)["toolConfig"]["toolChoice"] == {
        "tool": {"name": "get_weather"}}
    assert "toolChoice" not in build(tools=[WEATHER], tool_choice="auto",
                                     messages=msgs)["toolConfig"]
    assert "toolConfig" not in build(tools=[WEATHER], tool_choice="none", messages=msgs)
    # a specific tool on a model without that feature: only that tool, any-choice
    other = {"type": "function", "function": {"name": "other"}}
    kwargs = build(model="meta.llama3-70b-instruct-v1:0", tools=[WEATHER, other],
                   tool_choice={"type": "function", "function": {"name": "get_weather"}},
                   messages=msgs)
    assert kwargs["toolConfig"] == {"tools": [WEATHER_SPEC], "toolChoice": {"any": {}}}


def test_tool_choice_none_with_tool_history_flattens_it_and_drops_tool_config() -> None:
    kwargs = build(tools=[WEATHER], tool_choice="none", messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [call("tooluse_a")]},
        {"role": "tool", "tool_call_id": "tooluse_a", "content": "18C"},
    ])
    assert "toolConfig" not in kwargs
    assert kwargs["messages"] == [
        {"role": "user", "content": [{"text": "Weather?"}]},
        {"role": "assistant", "content": [
            {"text": '[Called tool get_weather with arguments: {"city":"Paris"}]'}]},
        {"role": "user", "content": [
            {"text": "[Result of tool get_weather (call tooluse_a)]:\n18C"}]},
    ]
    text = json.dumps(kwargs)
    assert "toolUse" not in text and "toolResult" not in text


def test_tool_history_keeps_tool_config_even_when_the_turn_needs_no_new_call() -> None:
    kwargs = build(tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [call("tooluse_a")]},
        {"role": "tool", "tool_call_id": "tooluse_a", "content": "18C"},
    ])
    assert kwargs["toolConfig"] == {"tools": [WEATHER_SPEC]}


def test_orphan_tool_result_becomes_text() -> None:
    kwargs = build(tools=[WEATHER], messages=[
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "nowhere", "content": "42"},
    ])
    assert kwargs["messages"] == [{"role": "user", "content": [
        {"text": "hi"}, {"text": "[Result of tool call nowhere]:\n42"}]}]


def test_inference_config() -> None:
    kwargs = build(messages=[{"role": "user", "content": "x"}], max_completion_tokens=300,
                   temperature=1.7, top_p=0.9, stop=["END", ""])
    assert kwargs["inferenceConfig"] == {"maxTokens": 300, "temperature": 1.0, "topP": 0.9,
                                         "stopSequences": ["END"]}
    # Claude refuses temperature with top_p: top_p is dropped
    kwargs = build(model=CLAUDE, messages=[{"role": "user", "content": "x"}], temperature=0.2,
                   top_p=0.5, stop="STOP", max_tokens=50)
    assert kwargs["inferenceConfig"] == {"maxTokens": 50, "temperature": 0.2,
                                         "stopSequences": ["STOP"]}


def test_claude_thinking_reasoning_round_trip_and_parameters() -> None:
    redacted = b"\x01\x02opaque"
    kwargs = build(
        model=CLAUDE, reasoning_effort="medium", temperature=0.3, top_p=0.2,
        tools=[WEATHER], tool_choice="required",
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "reasoning_content": "I should call it.",
             "reasoning_details": [
                 {"type": "reasoning.text", "text": "I should call it.", "signature": "sig-1",
                  "format": "anthropic-claude-v1"},
                 {"type": "reasoning.encrypted", "data": base64.b64encode(redacted).decode(),
                  "format": "anthropic-claude-v1"},
                 {"type": "reasoning.encrypted", "data": "x", "format": "openai-responses-v1"},
             ],
             "tool_calls": [call("tooluse_a")]},
            {"role": "tool", "tool_call_id": "tooluse_a", "content": "18C"},
        ],
    )
    assert kwargs["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 8192}}
    assert kwargs["inferenceConfig"] == {"maxTokens": 8192 + 4096}  # sampling removed
    assert kwargs["toolConfig"] == {"tools": [WEATHER_SPEC]}  # forced use downgraded to auto
    assert kwargs["messages"][1]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "I should call it.",
                                                "signature": "sig-1"}}},
        {"reasoningContent": {"redactedContent": redacted}},
        {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather",
                     "input": {"city": "Paris"}}},
    ]


def test_reasoning_fragments_merge_and_unsigned_reasoning_is_dropped() -> None:
    kwargs = build(model=CLAUDE, messages=[
        {"role": "user", "content": "q"},
        # reasoning arrives in its own assistant message, content in the next: merged, first
        {"role": "assistant", "content": "Answer.", "reasoning_details": [
            {"type": "reasoning.text", "text": "no signature", "index": 0}]},
        {"role": "assistant", "content": "More.", "reasoning_details": [
            {"type": "reasoning.text", "text": "Part one, ", "index": 0},
            {"type": "reasoning.text", "text": "part two.", "index": 0},
            {"type": "reasoning.text", "signature": "sig-2", "index": 0},
            {"type": "reasoning.text", "text": "Second block.", "signature": "sig-3"},
        ]},
    ])
    assert kwargs["messages"][1]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "Part one, part two.",
                                                "signature": "sig-2"}}},
        {"reasoningContent": {"reasoningText": {"text": "Second block.",
                                                "signature": "sig-3"}}},
        {"text": "Answer."},
        {"text": "More."},
    ]
    # other families never get Claude's signed blocks back
    nova = build(model=NOVA, messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "A", "reasoning_details": [
            {"type": "reasoning.text", "text": "t", "signature": "s"}]}])
    assert nova["messages"][1]["content"] == [{"text": "A"}]


def test_thinking_budget_fits_a_small_max_and_non_stream_cap() -> None:
    msgs = [{"role": "user", "content": "x"}]
    small = build(model=CLAUDE, reasoning_effort="high", max_completion_tokens=3000,
                  messages=msgs)
    assert small["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 1500
    assert small["inferenceConfig"]["maxTokens"] == 3000
    tiny = build(model=CLAUDE, reasoning_effort="low", max_completion_tokens=500, messages=msgs)
    assert tiny["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 1024
    assert tiny["inferenceConfig"]["maxTokens"] == 1524
    sync = build_converse_request({"model": CLAUDE, "reasoning_effort": "high",
                                   "messages": msgs}, stream=False).kwargs
    assert sync["inferenceConfig"]["maxTokens"] == 21333
    assert sync["additionalModelRequestFields"]["thinking"]["budget_tokens"] < 21333
    assert "additionalModelRequestFields" not in build(model=CLAUDE, reasoning_effort="none",
                                                       messages=msgs)


def test_reasoning_parameters_for_other_families() -> None:
    msgs = [{"role": "user", "content": "x"}]
    nova2 = build(model="us.amazon.nova-2-lite-v1:0", reasoning_effort="high",
                  max_completion_tokens=100, temperature=0.5, messages=msgs)
    assert nova2["additionalModelRequestFields"] == {
        "reasoningConfig": {"type": "enabled", "maxReasoningEffort": "high"}}
    assert "inferenceConfig" not in nova2  # maxTokens and sampling must be unset for high
    oss = build(model="openai.gpt-oss-120b-1:0", reasoning_effort="minimal", messages=msgs)
    assert oss["additionalModelRequestFields"] == {"reasoning_effort": "low"}
    llama = build(model="meta.llama3-70b-instruct-v1:0", reasoning_effort="high", messages=msgs)
    assert "additionalModelRequestFields" not in llama


def test_claude_parallel_tool_calls_false_uses_anthropic_tool_choice_only() -> None:
    kwargs = build(model=CLAUDE, tools=[WEATHER], tool_choice="required",
                   parallel_tool_calls=False, messages=[{"role": "user", "content": "x"}])
    assert kwargs["toolConfig"] == {"tools": [WEATHER_SPEC]}
    assert kwargs["additionalModelRequestFields"] == {
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}


def test_structured_output_schema_is_a_json_string() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "required": ["a"], "additionalProperties": False}
    kwargs = build(model=CLAUDE, messages=[{"role": "user", "content": "x"}], response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                               "strict": True}})
    assert kwargs["outputConfig"] == {"textFormat": {"type": "json_schema", "structure": {
        "jsonSchema": {"schema": json.dumps(schema), "name": "answer"}}}}
    json_object = build(messages=[{"role": "user", "content": "x"}],
                        response_format={"type": "json_object"})
    assert "outputConfig" not in json_object
    assert "JSON" in json_object["system"][-1]["text"]


def test_prompt_cache_key_places_cache_points_where_supported() -> None:
    messages = [{"role": "system", "content": "Long system prompt"},
                {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"}]
    point = {"cachePoint": {"type": "default"}}
    claude = build(model=CLAUDE, tools=[WEATHER], messages=messages, prompt_cache_key="k")
    assert claude["system"] == [{"text": "Long system prompt"}, point]
    assert claude["toolConfig"]["tools"] == [WEATHER_SPEC, point]
    assert claude["messages"][-1]["content"] == [{"text": "q2"}, point]
    assert claude["messages"][0]["content"] == [{"text": "q1"}]
    nova = build(model=NOVA, tools=[WEATHER], messages=messages, prompt_cache_key="k")
    assert nova["toolConfig"]["tools"] == [WEATHER_SPEC]  # Nova caches no tools
    assert nova["system"][-1] == point and nova["messages"][-1]["content"][-1] == point
    llama = build(model="meta.llama3-70b-instruct-v1:0", messages=messages,
                  prompt_cache_key="k")
    assert "cachePoint" not in json.dumps(llama)
    assert "cachePoint" not in json.dumps(build(model=CLAUDE, messages=messages))


def test_media_parts_documents_and_conversation_repairs() -> None:
    png = base64.b64encode(PNG).decode()
    kwargs = build(messages=[
        {"role": "assistant", "content": "Earlier answer"},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/jpg;base64,{png}"}},
            {"type": "file", "file": {"filename": "Q3 report.final.pdf",
                                      "file_data": "data:application/pdf;base64,"
                                      + base64.b64encode(PDF).decode()}},
            {"type": "file", "file": {"filename": "Q3 report.final.pdf",
                                      "file_data": base64.b64encode(PDF).decode()}},
        ]},
    ])
    assert kwargs["messages"][0] == {"role": "user",
                                     "content": [{"text": "(start of conversation)"}]}
    content = kwargs["messages"][2]["content"]
    assert content[0] == {"image": {"format": "png", "source": {"bytes": PNG}}}
    assert content[1] == {"document": {"format": "pdf", "name": "Q3 report-final",
                                       "source": {"bytes": PDF}}}
    assert content[2]["document"]["name"] == "Q3 report-final (2)"
    assert content[3] == {"text": "(see the attached document)"}


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "file", "file": {"file_id": "file-123"}}, "messages[0].content[0].file"),
    ({"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zz4="}},
     "messages[0].content[0].image_url"),
    ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}},
     "messages[0].content[0].image_url"),
    ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
     "messages[0].content[0]"),
])
def test_unusable_parts_are_400s_naming_the_part(part: dict, param: str) -> None:
    with pytest.raises(GatewayError) as info:
        build(messages=[{"role": "user", "content": [part]}])
    assert info.value.status == 400 and info.value.param == param


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def test_remote_media_lists_image_and_file_urls_once_each() -> None:
    """``input_file.file_url`` arrives as chat ``file_data`` (translate/to_chat.py)."""
    wanted = remote_media({"messages": [{"role": "user", "content": [
        image("https://img.example/a.png"), image("HTTPS://img.example/b.png"),
        image("https://img.example/a.png"), image("data:image/png;base64,AA"),
        {"type": "file", "file": {"file_data": "https://docs.example/q3.pdf"}},
        {"type": "file", "file": {"file_url": "http://docs.example/q4.pdf"}},
        {"type": "file", "file": {"file_data": "JVBERi0xLjQ="}},
    ]}]})
    assert wanted == [("https://img.example/a.png", "image"),
                      ("HTTPS://img.example/b.png", "image"),
                      ("https://docs.example/q3.pdf", "document"),
                      ("http://docs.example/q4.pdf", "document")]


def test_remote_media_skips_tool_images_that_flattened_tool_history_drops() -> None:
    tool = {"role": "tool", "tool_call_id": "c1", "content": [image("https://i.example/t.png")]}
    assert remote_media({"messages": [tool]}) == []
    assert remote_media({"messages": [tool], "tools": [WEATHER]}) == [
        ("https://i.example/t.png", "image")]


@pytest.mark.parametrize(("parts", "param", "message"), [
    ([image(f"https://i.example/{i}.png") for i in range(400)],
     "messages[0].content[20].image_url", "at most 20 images per request"),
    ([image("data:image/png;base64,AA")] * 20 + [image("https://i.example/x.png")],
     "messages[0].content[20].image_url", "at most 20 images per request"),
    ([{"type": "file", "file": {"file_data": f"https://d.example/{i}.pdf"}} for i in range(26)],
     "messages[0].content[25].file", "at most 20 images and 5 documents"),
])
def test_remote_media_counts_parts_before_anything_is_fetched(
    parts: list[dict[str, Any]], param: str, message: str
) -> None:
    with pytest.raises(GatewayError) as info:
        remote_media({"messages": [{"role": "user", "content": parts}]})
    assert (info.value.status, info.value.param) == (400, param)
    assert message in info.value.message


def test_a_file_url_in_file_data_uses_the_downloaded_bytes() -> None:
    """Regression: the URL text was base64-decoded and sent as the document's bytes."""
    url = "https://docs.example/q3.pdf"
    kwargs = build_converse_request({"model": NOVA, "messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_data": url, "filename": "q3.pdf"}}]}]},
        media={url: Fetched("application/pdf", PDF)}).kwargs
    assert kwargs["messages"][0]["content"][0] == {
        "document": {"format": "pdf", "name": "q3", "source": {"bytes": PDF}}}


@pytest.mark.parametrize("file", [
    {"file_data": "https://docs.example/never-fetched.pdf", "filename": "x.pdf"},
    {"file_url": "ftp://docs.example/x.pdf", "filename": "x.pdf"},
    # Regression (issue 27.7): a Responses file_url travels in file_data (to_chat.py); one
    # that Bedrock cannot fetch was base64-decoded into a document of garbage.
    {"file_data": "ftp://docs.example/x.pdf", "filename": "x.pdf"},
])
def test_file_urls_not_downloaded_are_invalid_file_url(file: dict[str, Any]) -> None:
    with pytest.raises(GatewayError) as info:
        build(messages=[{"role": "user", "content": [{"type": "file", "file": file}]}])
    assert (info.value.status, info.value.code) == (400, "invalid_file_url")
    assert info.value.param == "messages[0].content[0].file"


@pytest.mark.parametrize("data", ["not base64 at all!!", " //host/x.pdf", "JVBERi0xLjQ=!"])
def test_file_data_that_is_not_base64_is_a_400(data: str) -> None:
    """Regression (issue 27.7): decoding dropped what is not base64 and sent what was left."""
    with pytest.raises(GatewayError) as info:
        build(messages=[{"role": "user", "content": [
            {"type": "file", "file": {"file_data": data, "filename": "report.pdf"}}]}])
    assert (info.value.status, info.value.code) == (400, "invalid_value")
    assert info.value.param == "messages[0].content[0].file"


def test_base64_file_data_with_line_breaks_keeps_working() -> None:
    wrapped = "\n".join(textwrap.wrap(base64.b64encode(PDF * 8).decode(), 76))
    kwargs = build(messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_data": wrapped, "filename": "r.pdf"}}]}])
    assert kwargs["messages"][0]["content"][0]["document"]["source"] == {"bytes": PDF * 8}


def test_data_urls_in_file_url_keep_working() -> None:
    data = "data:application/pdf;base64," + base64.b64encode(PDF).decode()
    for file in ({"file_url": data}, {"file_data": data}):
        kwargs = build(messages=[{"role": "user", "content": [{"type": "file", "file": file}]}])
        assert kwargs["messages"][0]["content"][0]["document"]["source"] == {"bytes": PDF}


def test_other_top_level_fields() -> None:
    with pytest.raises(GatewayError) as info:
        build(n=2, messages=[{"role": "user", "content": "x"}])
    assert info.value.param == "n"
    kwargs = build(model="bedrock/" + NOVA, messages=[{"role": "user", "content": "x"}],
                   metadata={"team": "search", "bad": "üñí", "k" * 300: "v"},
                   service_tier="priority")
    assert kwargs["modelId"] == NOVA
    assert kwargs["requestMetadata"] == {"team": "search"}
    assert kwargs["serviceTier"] == {"type": "priority"}


def test_model_families() -> None:
    assert model_info("global.anthropic.claude-opus-4-5-20251101-v1:0").claude_thinking
    assert model_info("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku"
                      "-20241022-v1:0").family == "claude"
    assert not model_info("anthropic.claude-3-5-sonnet-20240620-v1:0").supports_cache_point
    assert model_info("eu.amazon.nova-2-lite-v1:0").family == "nova2"
    assert model_info("apac.amazon.nova-pro-v1:0").family == "nova"
    assert model_info("arn:aws:bedrock:us-east-1:123:application-inference-profile/abc"
                      ).family == "other"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_wire_request_as_boto3_sends_it(monkeypatch: pytest.MonkeyPatch,
                                              anyio_backend: str) -> None:
    use_dummy_aws(monkeypatch)
    events = [{"messageStart": {"role": "assistant"}},
              {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "ok"}}},
              {"messageStop": {"stopReason": "end_turn"}},
              {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                            "metrics": {"latencyMs": 1}}}]
    body = {"model": CLAUDE, "stream": True, "max_completion_tokens": 2000,
            "reasoning_effort": "low", "tools": [WEATHER], "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {
                        "url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}]},
                {"role": "assistant", "content": "", "reasoning_details": [
                    {"type": "reasoning.text", "text": "Look.", "signature": "c2ln"},
                    {"type": "reasoning.encrypted", "data": base64.b64encode(b"\xff").decode()}],
                 "tool_calls": [call("tooluse_a")]},
                {"role": "tool", "tool_call_id": "tooluse_a", "content": "18C"}]}
    with FakeBedrock() as fake:
        fake.stream(CLAUDE, events)
        backend = BedrockBackend(region="us-east-1", endpoint_url=fake.url, max_attempts=1)
        chunks = [c async for batch in backend.stream(BackendRequest(body=body)) for c in batch]
        await backend.aclose()
        (sent,) = fake.requests
    assert chunks[1]["choices"][0]["delta"]["content"] == "ok"
    assert (sent.operation, sent.model_id) == ("converse-stream", CLAUDE)
    assert sent.body == {
        "system": [{"text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [
                {"text": "What is this?"},
                {"image": {"format": "png",
                           "source": {"bytes": base64.b64encode(PNG).decode()}}}]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "Look.", "signature": "c2ln"}}},
                {"reasoningContent": {"redactedContent": base64.b64encode(b"\xff").decode()}},
                {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather",
                             "input": {"city": "Paris"}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "18C"}]}}]},
        ],
        "toolConfig": {"tools": [WEATHER_SPEC]},
        "inferenceConfig": {"maxTokens": 2000},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    }


def test_thinking_is_left_off_when_the_tool_loop_lost_its_signed_reasoning() -> None:
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "tool_calls": [call("tooluse_a")]},
                {"role": "tool", "tool_call_id": "tooluse_a", "content": "18C"}]
    kwargs = build(model=CLAUDE, reasoning_effort="high", temperature=0.5, tools=[WEATHER],
                   messages=messages)
    assert "additionalModelRequestFields" not in kwargs
    assert kwargs["inferenceConfig"] == {"temperature": 0.5}
    messages[1]["reasoning_details"] = [{"type": "reasoning.text", "text": "t",
                                         "signature": "s"}]
    kwargs = build(model=CLAUDE, reasoning_effort="high", tools=[WEATHER], messages=messages)
    assert kwargs["additionalModelRequestFields"]["thinking"]["type"] == "enabled"


# -- what the backend declares beyond streaming (backends/base.py) -----------------------------


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_declared_capabilities_of_bedrock(monkeypatch: pytest.MonkeyPatch,
                                                anyio_backend: str) -> None:
    """Windows by model family (profiles resolved), CountTokens on the Converse request,
    reasoning always back as reasoning_content, and the model list: on-demand text models,
    then every page of active inference profiles."""
    use_dummy_aws(monkeypatch)
    with FakeBedrock() as fake:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK", fake.url)  # the control plane's
        fake.foundation_models = [
            {"modelId": NOVA, "providerName": "Amazon", "outputModalities": ["TEXT"],
             "inferenceTypesSupported": ["ON_DEMAND"]},
            {"modelId": "anthropic.claude-sonnet-4-20250514-v1:0", "providerName": "Anthropic",
             "outputModalities": ["TEXT"], "inferenceTypesSupported": ["INFERENCE_PROFILE"]},
        ]
        fake.inference_profiles = [
            {"inferenceProfileId": CLAUDE, "inferenceProfileName": "Claude", "type":
             "SYSTEM_DEFINED", "status": "ACTIVE", "createdAt": "2025-01-02T03:04:05Z"},
            {"inferenceProfileId": "us.meta.llama4-v1:0", "inferenceProfileName": "Gone",
             "type": "SYSTEM_DEFINED", "status": "INACTIVE", "createdAt": 1700000000},
            {"inferenceProfileId": "eu.amazon.nova-pro-v1:0", "inferenceProfileName": "Nova",
             "type": "SYSTEM_DEFINED", "status": "ACTIVE", "createdAt": 1700000000},
        ]
        backend = BedrockBackend(region="us-east-1", endpoint_url=fake.url, max_attempts=1)
        chat = {"model": NOVA, "messages": [{"role": "user", "content": "Count these words."}]}
        try:
            assert await backend.context_window(CLAUDE) == 200_000
            assert await backend.context_window("us.amazon.nova-premier-v1:0") == 1_000_000
            assert await backend.context_window("cohere.command-r-v1:0") is None
            counted = await backend.count_tokens(chat)
            listed = await backend.list_models()
        finally:
            await backend.aclose()
    converse = fake.requests_for(NOVA)[-1]
    assert converse.operation == "count-tokens"
    assert counted == count_tokens(converse.body)
    assert backend.reasoning_input(None) == "reasoning_content"
    assert len([p for p in fake.control_requests if p.startswith("/inference-profiles")]) == 2
    assert listed == [
        {"id": NOVA, "object": "model", "created": 0, "owned_by": "amazon"},
        {"id": CLAUDE, "object": "model", "created": 1735787045, "owned_by": "anthropic"},
        {"id": "eu.amazon.nova-pro-v1:0", "object": "model", "created": 1700000000,
         "owned_by": "amazon"},
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_bedrock_does_not_count_what_it_would_have_to_download(
        monkeypatch: pytest.MonkeyPatch, anyio_backend: str) -> None:
    use_dummy_aws(monkeypatch)
    with FakeBedrock() as fake:
        backend = BedrockBackend(region="us-east-1", endpoint_url=fake.url, max_attempts=1)
        chat = {"model": NOVA, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://img.example/cat.png"}}]}]}
        assert await backend.count_tokens(chat) is None
        await backend.aclose()
    assert fake.requests == []

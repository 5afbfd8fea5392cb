"""End to end (issue 5): the gateway with ``GATEWAY_BACKEND=bedrock`` under uvicorn, driven by
the official ``openai`` client, in front of a fake Bedrock runtime that speaks the real AWS
event-stream wire format (boto3 signs, sends and parses for real).

Every case asserts the exact Converse request the gateway built, as boto3 put it on the wire
(blobs base64-encoded, the model id in the URL path).
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest
from openai import OpenAI

from responses_gateway.backends.bedrock import BedrockBackend
from responses_gateway.backends.bedrock.images import MediaFetcher
from responses_gateway.config import Settings, settings_from_env
from responses_gateway.platform import platform_for
from responses_gateway.responses.gateway import Gateway
from responses_gateway.translate.sealing import Sealer
from tests.helpers.e2e import (
    TIME_TOOL,
    WEATHER_TOOL,
    check_response,
    check_stream,
    client_for,
    sdk_events,
)
from tests.helpers.eventstream_server import (
    DROP,
    FakeBedrock,
    Recorded,
    exception,
    use_dummy_aws,
)
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import failed_code, reconstruct
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

CLAUDE = "us.anthropic.claude-sonnet-4-20250514-v1:0"
NOVA = "us.amazon.nova-micro-v1:0"
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
B64_PNG = base64.b64encode(PNG).decode()
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
USAGE = {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}
WEATHER_SPEC = {"toolSpec": {
    "name": "get_weather", "description": WEATHER_TOOL["description"],
    "inputSchema": {"json": WEATHER_TOOL["parameters"]}}}
TIME_SPEC = {"toolSpec": {
    "name": "get_time", "description": TIME_TOOL["description"],
    "inputSchema": {"json": TIME_TOOL["parameters"]}}}


# -- ConverseStream scripts ------------------------------------------------------------------

Block = Callable[[int], list[dict[str, Any]]]


def text(value: str, n: int = 1) -> Block:
    """A text block (no contentBlockStart, as Bedrock sends them) in ``n`` deltas."""
    size = max(1, -(-len(value) // n))
    pieces = [value[i : i + size] for i in range(0, len(value), size)]

    def events(index: int) -> list[dict[str, Any]]:
        return [*({"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": p}}}
                  for p in pieces),
                {"contentBlockStop": {"contentBlockIndex": index}}]
    return events


def thinking(value: str, signature: str) -> Block:
    """A Claude thinking block: text deltas, an empty delta, then the signature."""
    def events(index: int) -> list[dict[str, Any]]:
        half = len(value) // 2
        deltas = [{"text": value[:half]}, {"text": value[half:]}, {"text": ""},
                  {"signature": signature}]
        return [*({"contentBlockDelta": {"contentBlockIndex": index,
                                         "delta": {"reasoningContent": d}}} for d in deltas),
                {"contentBlockStop": {"contentBlockIndex": index}}]
    return events


def redacted(data: bytes) -> Block:
    def events(index: int) -> list[dict[str, Any]]:
        encoded = base64.b64encode(data).decode()
        return [{"contentBlockDelta": {"contentBlockIndex": index, "delta": {
                    "reasoningContent": {"redactedContent": encoded}}}},
                {"contentBlockStop": {"contentBlockIndex": index}}]
    return events


def tool(tool_use_id: str, name: str, *fragments: str) -> Block:
    def events(index: int) -> list[dict[str, Any]]:
        return [{"contentBlockStart": {"contentBlockIndex": index, "start": {"toolUse": {
                    "toolUseId": tool_use_id, "name": name}}}},
                *({"contentBlockDelta": {"contentBlockIndex": index,
                                         "delta": {"toolUse": {"input": f}}}}
                  for f in fragments),
                {"contentBlockStop": {"contentBlockIndex": index}}]
    return events


def converse_stream(*blocks: Block, stop: str = "end_turn",
                    usage: dict[str, Any] = USAGE) -> list[Any]:
    events: list[Any] = [{"messageStart": {"role": "assistant"}}]
    for index, block in enumerate(blocks):
        events += block(index)
    events.append({"messageStop": {"stopReason": stop}})
    events.append({"metadata": {"usage": usage, "metrics": {"latencyMs": 42}}})
    return events


def converse_json(*content: dict[str, Any], stop: str = "end_turn",
                  usage: dict[str, Any] = USAGE) -> dict[str, Any]:
    return {"output": {"message": {"role": "assistant", "content": list(content)}},
            "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 42}}


def user(*blocks: dict[str, Any] | str) -> dict[str, Any]:
    return {"role": "user", "content": [{"text": b} if isinstance(b, str) else b
                                        for b in blocks]}


def assistant(*blocks: dict[str, Any] | str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"text": b} if isinstance(b, str) else b
                                             for b in blocks]}


def tool_use(tool_use_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": tool_use_id, "name": name, "input": arguments}}


def tool_result(tool_use_id: str, output: str) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": tool_use_id, "content": [{"text": output}]}}


def signed(value: str, signature: str) -> dict[str, Any]:
    return {"reasoningContent": {"reasoningText": {"text": value, "signature": signature}}}


# -- servers ---------------------------------------------------------------------------------


class ImageServer:
    """Serves a PNG on 127.0.0.1 (a PDF for paths ending ``.pdf``) and redirects elsewhere on
    request (``/redirect?to=URL``)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                owner.hits.append(self.path)
                if self.path.startswith("/redirect?to="):
                    self.send_response(302)
                    self.send_header("Location", self.path.split("=", 1)[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body, ctype = (PDF, "application/pdf") if self.path.endswith(".pdf") \
                    else (PNG, "image/png")
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        mp.setenv("GATEWAY_TEST_IMAGE_ALLOW_HOSTS", "127.0.0.1")
        yield


@pytest.fixture(scope="module")
def fake(aws_env: None) -> Iterator[FakeBedrock]:
    with FakeBedrock() as server:
        yield server


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    server = ImageServer()
    yield server
    server.close()


def bedrock_settings(fake: FakeBedrock, db: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "backend": "bedrock",
        "bedrock_endpoint_url": fake.url,
        "bedrock_region": "us-east-1",
        "store": f"sqlite:{db}",
        "max_retries": 0,
        "read_timeout": 20.0,
        "keepalive_seconds": 0.5,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def gateway(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("e2e-bedrock") / "gateway.db"
    with GatewayServer(bedrock_settings(fake, db)) as server:
        yield server


@pytest.fixture
def bedrock(fake: FakeBedrock) -> FakeBedrock:
    """The fake with this test's requests only."""
    with fake.lock:
        fake.requests.clear()
    return fake


def only(fake: FakeBedrock, operation: str = "converse-stream") -> Recorded:
    [sent] = fake.requests
    assert sent.operation == operation
    return sent


# -- text ------------------------------------------------------------------------------------


def test_non_stream_text(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.json(NOVA, converse_json({"text": "Hello from Bedrock."}, usage={
        "inputTokens": 10, "outputTokens": 5, "totalTokens": 15,
        "cacheReadInputTokens": 4, "cacheWriteInputTokens": 2}))
    response = client.responses.create(model=NOVA, input="Say hello")

    assert response.status == "completed"
    assert response.model == NOVA
    assert response.output_text == "Hello from Bedrock."
    [message] = response.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert response.usage is not None
    assert response.usage.input_tokens == 16  # Bedrock's inputTokens exclude cache traffic
    assert response.usage.input_tokens_details.cached_tokens == 4
    assert response.usage.output_tokens == 5 and response.usage.total_tokens == 21
    check_response(response)
    sent = only(bedrock, "converse")
    assert sent.model_id == NOVA
    assert sent.body == {"messages": [user("Say hello")]}


def test_stream_text(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.stream(NOVA, converse_stream(text("Streaming works fine.", n=5)))
    events = sdk_events(client.responses.create(model=NOVA, input="Stream, please",
                                                stream=True))

    grammar = check_stream(events)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 5
    assert reconstruct(events).text == "Streaming works fine."
    final = grammar.terminal["response"]
    assert final["usage"]["input_tokens"] == 12 and final["usage"]["output_tokens"] == 7
    sent = only(bedrock)
    assert sent.model_id == NOVA
    assert sent.body == {"messages": [user("Stream, please")]}


def test_stream_helper(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.stream(NOVA, converse_stream(text("From the helper.", n=3)))
    deltas: list[str] = []
    with client.responses.stream(model=NOVA, input="helper") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()

    assert "".join(deltas) == "From the helper." and len(deltas) == 3
    assert final.status == "completed" and final.output_text == "From the helper."
    assert only(bedrock).body == {"messages": [user("helper")]}


def test_instructions_roles_and_inference_config(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.json(NOVA, converse_json({"text": "Deux."}))
    response = client.responses.create(
        model=NOVA,
        instructions="You are terse.",
        temperature=0.4,
        top_p=0.9,
        max_output_tokens=100,
        input=[
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "First question."},
            {"role": "user", "content": [{"type": "input_text", "text": "Same turn."}]},
            {"role": "assistant", "content": "First answer."},
            {"role": "system", "content": "A late rule."},
            {"role": "user", "content": "Second question."},
        ],
    )

    assert response.output_text == "Deux."
    assert response.instructions == "You are terse."
    assert only(bedrock, "converse").body == {
        "system": [{"text": "You are terse."}, {"text": "Answer in French."},
                   {"text": "A late rule."}],
        "messages": [user("First question.", "Same turn."), assistant("First answer."),
                     user("Second question.")],
        "inferenceConfig": {"maxTokens": 100, "temperature": 0.4, "topP": 0.9},
    }


# -- tools -----------------------------------------------------------------------------------


def test_function_tool_round_trip(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.stream(NOVA, converse_stream(
        tool("tooluse_oslo1", "get_weather", '{"ci', 'ty": "Os', 'lo"}'), stop="tool_use"))
    question = {"role": "user", "content": "Weather in Oslo?"}
    events = sdk_events(client.responses.create(
        model=NOVA, input=[question], tools=[WEATHER_TOOL], tool_choice="required", stream=True))

    grammar = check_stream(events)
    first = grammar.terminal["response"]
    assert first["status"] == "completed"
    [call] = first["output"]
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    assert call["name"] == "get_weather" and call["call_id"] == "tooluse_oslo1"
    assert json.loads(call["arguments"]) == {"city": "Oslo"}
    assert [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
            ] == ['{"ci', 'ty": "Os', 'lo"}']
    assert only(bedrock).body == {
        "messages": [user("Weather in Oslo?")],
        "toolConfig": {"tools": [WEATHER_SPEC], "toolChoice": {"any": {}}},
    }

    # Stateless continuation: the tool result goes first in the user turn, before the text.
    bedrock.requests.clear()
    bedrock.json(NOVA, converse_json({"text": "It is cold in Oslo."}))
    second = client.responses.create(
        model=NOVA, tools=[WEATHER_TOOL], store=False,
        input=[question, call,
               {"type": "function_call_output", "call_id": call["call_id"], "output": "-3 C"},
               {"role": "user", "content": "And should I take a coat?"}],
    )

    assert second.output_text == "It is cold in Oslo."
    assert only(bedrock, "converse").body == {
        "messages": [
            user("Weather in Oslo?"),
            assistant(tool_use("tooluse_oslo1", "get_weather", {"city": "Oslo"})),
            user(tool_result("tooluse_oslo1", "-3 C"), "And should I take a coat?"),
        ],
        "toolConfig": {"tools": [WEATHER_SPEC]},
    }


def test_tool_history_with_tool_choice_none_is_flattened(client: OpenAI,
                                                          bedrock: FakeBedrock) -> None:
    bedrock.json(NOVA, converse_json({"text": "Done."}))
    client.responses.create(
        model=NOVA, tools=[WEATHER_TOOL], tool_choice="none", store=False,
        input=[{"role": "user", "content": "Weather?"},
               {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                "arguments": '{"city": "Rome"}'},
               {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
    )

    body = only(bedrock, "converse").body
    assert "toolConfig" not in body  # Converse has no "none": no tools, history as text
    assert body["messages"] == [
        user("Weather?"),
        assistant('[Called tool get_weather with arguments: {"city": "Rome"}]'),
        user("[Result of tool get_weather (call call_1)]:\nsunny"),
    ]


def test_parallel_tool_calls(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.stream(NOVA, converse_stream(
        text("Checking both."),
        tool("tooluse_w", "get_weather", '{"city":', ' "Paris"}'),
        tool("tooluse_t", "get_time", '{"city": "Tokyo"}'),
        stop="tool_use"))
    events = sdk_events(client.responses.create(
        model=NOVA, input="Weather in Paris and time in Tokyo?",
        tools=[WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=True, stream=True))

    grammar = check_stream(events)
    assert [(i.output_index, i.type) for i in grammar.items] == [
        (0, "message"), (1, "function_call"), (2, "function_call")]
    assert [(c, n, json.loads(a)) for c, n, a in reconstruct(events).calls] == [
        ("tooluse_w", "get_weather", {"city": "Paris"}),
        ("tooluse_t", "get_time", {"city": "Tokyo"})]
    first = grammar.terminal["response"]
    assert only(bedrock).body == {
        "messages": [user("Weather in Paris and time in Tokyo?")],
        "toolConfig": {"tools": [WEATHER_SPEC, TIME_SPEC]},
    }

    bedrock.requests.clear()
    bedrock.stream(NOVA, converse_stream(text("Sunny, and it is nine.")))
    second = client.responses.create(
        model=NOVA, previous_response_id=first["id"], tools=[WEATHER_TOOL, TIME_TOOL],
        input=[{"type": "function_call_output", "call_id": "tooluse_w", "output": "sunny"},
               {"type": "function_call_output", "call_id": "tooluse_t", "output": "09:00"}],
        stream=True)
    assert reconstruct(sdk_events(second)).text == "Sunny, and it is nine."
    assert only(bedrock).body["messages"] == [
        user("Weather in Paris and time in Tokyo?"),
        assistant("Checking both.", tool_use("tooluse_w", "get_weather", {"city": "Paris"}),
                  tool_use("tooluse_t", "get_time", {"city": "Tokyo"})),
        user(tool_result("tooluse_w", "sunny"), tool_result("tooluse_t", "09:00")),
    ]


def test_claude_parallel_tool_calls_false(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.json(CLAUDE, converse_json({"text": "One at a time."}))
    client.responses.create(model=CLAUDE, input="Two cities?", tools=[WEATHER_TOOL],
                            tool_choice={"type": "function", "name": "get_weather"},
                            parallel_tool_calls=False)

    assert only(bedrock, "converse").body == {
        "messages": [user("Two cities?")],
        "toolConfig": {"tools": [WEATHER_SPEC]},
        "additionalModelRequestFields": {"tool_choice": {
            "type": "tool", "disable_parallel_tool_use": True, "name": "get_weather"}},
    }


# -- reasoning, limits, structured output, images --------------------------------------------


def test_claude_thinking_as_reasoning_text_and_as_summary(client: OpenAI,
                                                          bedrock: FakeBedrock) -> None:
    script = converse_stream(thinking("The user greets me. I greet back.", "sig-hello"),
                             text("Hello!", n=2))
    bedrock.stream(CLAUDE, script)
    events = sdk_events(client.responses.create(
        model=CLAUDE, input="Hi", reasoning={"effort": "low"}, temperature=0.5, stream=True))

    grammar = check_stream(events)
    types = [e["type"] for e in events]
    assert [i.type for i in grammar.items] == ["reasoning", "message"]
    assert "response.reasoning_text.delta" in types
    assert "response.reasoning_summary_text.delta" not in types
    assert reconstruct(events).reasoning == "The user greets me. I greet back."
    assert reconstruct(events).text == "Hello!"
    reasoning = grammar.terminal["response"]["output"][0]
    assert "encrypted_content" not in reasoning or reasoning["encrypted_content"] is None
    assert only(bedrock).body == {
        "messages": [user("Hi")],
        "inferenceConfig": {"maxTokens": 2048 + 4096},  # temperature is refused with thinking
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    }

    bedrock.requests.clear()
    bedrock.stream(CLAUDE, script)
    events = sdk_events(client.responses.create(
        model=CLAUDE, input="Hi", reasoning={"effort": "high", "summary": "auto"},
        max_output_tokens=30000, stream=True))
    grammar = check_stream(events)
    types = [e["type"] for e in events]
    for kind in ("response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                 "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"):
        assert kind in types
    assert "response.reasoning_text.delta" not in types
    summary = grammar.terminal["response"]["output"][0]["summary"]
    assert summary == [{"type": "summary_text", "text": "The user greets me. I greet back."}]
    assert only(bedrock).body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 24576}}
    assert only(bedrock).body["inferenceConfig"] == {"maxTokens": 30000}


def test_max_output_tokens_incomplete(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.json(NOVA, converse_json({"text": "This answer is cut"}, stop="max_tokens"))
    response = client.responses.create(model=NOVA, input="Long story", max_output_tokens=16)

    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "This answer is cut"
    assert response.max_output_tokens == 16
    check_response(response)
    assert only(bedrock, "converse").body == {
        "messages": [user("Long story")], "inferenceConfig": {"maxTokens": 16}}

    bedrock.requests.clear()
    bedrock.stream(NOVA, converse_stream(text("This answer is cut", n=3), stop="max_tokens"))
    events = sdk_events(client.responses.create(model=NOVA, input="Long story",
                                                max_output_tokens=16, stream=True))
    grammar = check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert grammar.terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert only(bedrock).body["inferenceConfig"] == {"maxTokens": 16}


class Weather(pydantic.BaseModel):
    city: str
    temperature: int


def test_json_schema_output(client: OpenAI, bedrock: FakeBedrock) -> None:
    answer = '{"city": "Lima", "temperature": 19}'
    bedrock.json(CLAUDE, converse_json({"text": answer}))
    parsed = client.responses.parse(model=CLAUDE, input="Weather in Lima as JSON",
                                    text_format=Weather)

    assert parsed.output_parsed == Weather(city="Lima", temperature=19)
    assert parsed.text is not None and parsed.text.format.type == "json_schema"
    body = only(bedrock, "converse").body
    assert body["messages"] == [user("Weather in Lima as JSON")]
    json_schema = body["outputConfig"]["textFormat"]["structure"]["jsonSchema"]
    assert body["outputConfig"]["textFormat"]["type"] == "json_schema"
    assert json_schema["name"] == "Weather"
    assert isinstance(json_schema["schema"], str)  # Converse wants the schema as a JSON string
    assert json.loads(json_schema["schema"]) == {
        "type": "object",
        "properties": {"city": {"title": "City", "type": "string"},
                       "temperature": {"title": "Temperature", "type": "integer"}},
        "required": ["city", "temperature"],
        "title": "Weather",
        "additionalProperties": False,
    }


def test_image_input_data_url_and_fetched_url(client: OpenAI, bedrock: FakeBedrock,
                                              images: ImageServer) -> None:
    bedrock.json(NOVA, converse_json({"text": "Two tiny images."}))
    response = client.responses.create(model=NOVA, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{B64_PNG}", "detail": "low"},
        {"type": "input_image", "image_url": f"{images.url}/cat.png", "detail": "auto"},
    ]}])

    assert response.output_text == "Two tiny images."
    assert "/cat.png" in images.hits  # Bedrock never fetches URLs: the gateway did
    image = {"image": {"format": "png", "source": {"bytes": B64_PNG}}}
    assert only(bedrock, "converse").body == {
        "messages": [user("What is in these?", image, image)]}


def test_previous_response_id_chain(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.json(NOVA, converse_json({"text": "Paris."}))
    first = client.responses.create(model=NOVA, instructions="Be brief.",
                                    input="Capital of France?")
    bedrock.stream(NOVA, converse_stream(text("About 2 million.")))
    second = client.responses.create(model=NOVA, previous_response_id=first.id,
                                     input="Its population?", stream=True)
    final = check_stream(sdk_events(second)).terminal["response"]
    bedrock.json(NOVA, converse_json({"text": "Yes."}))
    third = client.responses.create(model=NOVA, previous_response_id=final["id"],
                                    input="Sure?")

    assert third.previous_response_id == final["id"]
    first_sent, second_sent, third_sent = (r.body for r in bedrock.requests)
    assert first_sent["system"] == [{"text": "Be brief."}]
    assert "system" not in second_sent  # instructions are not inherited
    assert third_sent == {"messages": [
        user("Capital of France?"), assistant("Paris."), user("Its population?"),
        assistant("About 2 million."), user("Sure?")]}


# -- errors ----------------------------------------------------------------------------------


BEDROCK_REFUSALS = pytest.mark.parametrize(("status", "aws_code", "error_class", "code"), [
    (429, "ThrottlingException", openai.RateLimitError, "rate_limit_exceeded"),
    (400, "ValidationException", openai.BadRequestError, None),
    (403, "AccessDeniedException", openai.PermissionDeniedError, None),
    (503, "ServiceUnavailableException", openai.InternalServerError, "server_error"),
])


@pytest.fixture(scope="module")
def graced(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    """A gateway with a stream grace period: a quick refusal is an HTTP error, streams too."""
    db = tmp_path_factory.mktemp("e2e-bedrock-grace") / "gateway.db"
    with GatewayServer(bedrock_settings(fake, db, stream_grace_seconds=2.0)) as server, \
            client_for(server) as client:
        yield client


@pytest.mark.parametrize("how", ["create", "stream-within-grace"])
@BEDROCK_REFUSALS
def test_errors_before_output_are_http_errors(
    client: OpenAI, bedrock: FakeBedrock, request: pytest.FixtureRequest, how: str, status: int,
    aws_code: str, error_class: type[openai.APIStatusError], code: str | None,
) -> None:
    """A request that does not stream, or a stream whose gateway has a grace period."""
    bedrock.error(NOVA, status, aws_code, f"{aws_code} from the fake")
    with pytest.raises(error_class) as caught:
        if how == "create":
            client.responses.create(model=NOVA, input="Hi")
        else:
            graced: OpenAI = request.getfixturevalue("graced")
            list(graced.responses.create(model=NOVA, input="Hi", stream=True))

    assert caught.value.status_code == status
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == code
    assert aws_code in error["message"]
    assert len(bedrock.requests) == 1  # max_retries=0: one attempt


@BEDROCK_REFUSALS
def test_errors_before_output_fail_a_stream_after_created(
    client: OpenAI, bedrock: FakeBedrock, status: int, aws_code: str,
    error_class: type[openai.APIStatusError], code: str | None,
) -> None:
    """No grace period (the default): response.created left before Bedrock answered."""
    bedrock.error(NOVA, status, aws_code, f"{aws_code} from the fake")
    events = sdk_events(client.responses.create(model=NOVA, input="Hi", stream=True))

    grammar = check_stream(events)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.failed"]
    failed = grammar.terminal["response"]
    assert failed_code(failed["error"]) == (code or "upstream_error")
    assert aws_code in failed["error"]["message"]
    assert client.responses.retrieve(failed["id"]).status == "failed"
    assert len(bedrock.requests) == 1


def test_in_stream_throttling_ends_the_response_failed_with_the_partial_text(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    events = converse_stream(text("Partial answer that", n=3))
    cut = events.index({"contentBlockStop": {"contentBlockIndex": 0}})
    bedrock.stream(NOVA, [*events[:cut], exception("throttlingException", "Too many tokens")])
    events = sdk_events(client.responses.create(model=NOVA, input="Hi", stream=True))

    grammar = check_stream(events)
    assert events[-1]["type"] == "response.failed"
    failed = grammar.terminal["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "rate_limit_exceeded"
    assert "Too many tokens" in failed["error"]["message"]
    assert reconstruct(events).text == "Partial answer that"
    assert failed["output"][0]["content"][0]["text"] == "Partial answer that"
    stored = client.responses.retrieve(failed["id"])
    assert stored.status == "failed" and stored.output_text == "Partial answer that"



def test_dropped_connection_mid_stream_ends_the_response_failed(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    events = converse_stream(text("Half an ans", n=2))
    cut = events.index({"contentBlockStop": {"contentBlockIndex": 0}})
    bedrock.stream(NOVA, [*events[:cut], DROP])
    events = sdk_events(client.responses.create(model=NOVA, input="Hi", stream=True))

    grammar = check_stream(events)
    failed = grammar.terminal["response"]
    assert events[-1]["type"] == "response.failed"
    assert failed["error"]["code"] == "server_error"
    assert reconstruct(events).text == "Half an ans"


def test_prompt_cache_key_places_cache_points_and_usage_reports_cached_tokens(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.json(CLAUDE, converse_json({"text": "Cached."}, usage={
        "inputTokens": 3, "outputTokens": 2, "totalTokens": 2105,
        "cacheReadInputTokens": 2000, "cacheWriteInputTokens": 100}))
    response = client.responses.create(model=CLAUDE, instructions="Long shared prefix.",
                                       input="Question?", tools=[WEATHER_TOOL],
                                       prompt_cache_key="tenant-a")

    assert response.usage is not None
    assert response.usage.input_tokens == 2103
    assert response.usage.input_tokens_details.cached_tokens == 2000
    point = {"cachePoint": {"type": "default"}}
    assert only(bedrock, "converse").body == {
        "system": [{"text": "Long shared prefix."}, point],
        "messages": [user("Question?", point)],
        "toolConfig": {"tools": [WEATHER_SPEC, point]},
    }


def test_bedrock_media_error_param_names_the_client_input_path(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=NOVA, instructions="Be brief.", input=[
            {"role": "user", "content": "First."},
            {"role": "user", "content": [
                {"type": "input_image", "image_url": "data:image/bmp;base64,Qk0="}]}])

    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "input[1].content[0].image_url"


# -- Claude thinking + tools, stateless (store=false, encrypted_content) ---------------------

ALICE, BOB = "sk-alice", "sk-bob"
THINKING = {"thinking": {"type": "enabled", "budget_tokens": 8192}}


@pytest.fixture(scope="module")
def keyed_gateway(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("e2e-bedrock-keys") / "gateway.db"
    settings = bedrock_settings(fake, db, api_keys=(ALICE, BOB), seal_key="test seal key")
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def alice(keyed_gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(keyed_gateway, api_key=ALICE) as c:
        yield c


@pytest.fixture(scope="module")
def bob(keyed_gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(keyed_gateway, api_key=BOB) as c:
        yield c


def stateless_turn(client: OpenAI, items: list[dict[str, Any]], *, stream: bool
                   ) -> list[dict[str, Any]]:
    """One turn of a client-side agent loop; the output items, as the client keeps them."""
    kwargs: dict[str, Any] = {
        "model": CLAUDE, "input": items, "tools": [WEATHER_TOOL, TIME_TOOL], "store": False,
        "reasoning": {"effort": "medium"}, "include": ["reasoning.encrypted_content"]}
    if stream:
        response = check_stream(sdk_events(client.responses.create(stream=True, **kwargs)))
        output = response.terminal["response"]["output"]
    else:
        output = check_response(client.responses.create(**kwargs))["output"]
    return [{k: v for k, v in item.items() if v is not None} for item in output]


def call_output(items: list[dict[str, Any]], output: str) -> dict[str, Any]:
    [call] = [item for item in items if item["type"] == "function_call"]
    return {"type": "function_call_output", "call_id": call["call_id"], "output": output}


def test_claude_thinking_tool_loop_sends_signed_reasoning_back_every_turn(
    alice: OpenAI, bedrock: FakeBedrock
) -> None:
    question = {"role": "user", "content": "Weather and time in Paris?"}
    # turn 1 (streamed): signed thinking, then a call
    bedrock.stream(CLAUDE, converse_stream(
        thinking("I need the weather first.", "sig-1"),
        tool("tooluse_w1", "get_weather", '{"city": ', '"Paris"}'), stop="tool_use"))
    out1 = stateless_turn(alice, [question], stream=True)

    assert [i["type"] for i in out1] == ["reasoning", "function_call"]
    reasoning1 = out1[0]
    assert reasoning1["content"] == [{"type": "reasoning_text",
                                      "text": "I need the weather first."}]
    assert reasoning1["encrypted_content"]  # the signature travels sealed, never in clear
    assert "sig-1" not in json.dumps(out1)
    turn1 = only(bedrock).body
    assert turn1 == {
        "messages": [user("Weather and time in Paris?")],
        "toolConfig": {"tools": [WEATHER_SPEC, TIME_SPEC]},
        "inferenceConfig": {"maxTokens": 8192 + 4096},
        "additionalModelRequestFields": THINKING,
    }

    # turn 2 (not streamed: converse): the signed block goes back first in the assistant turn
    bedrock.requests.clear()
    bedrock.json(CLAUDE, converse_json(
        signed("Now the time.", "sig-2"),
        tool_use("tooluse_t2", "get_time", {"city": "Paris"}), stop="tool_use"))
    items2 = [question, *out1, call_output(out1, "sunny")]
    out2 = stateless_turn(alice, items2, stream=False)

    assert [i["type"] for i in out2] == ["reasoning", "function_call"]
    assert out2[0]["content"] == [{"type": "reasoning_text", "text": "Now the time."}]
    turn2 = only(bedrock, "converse").body
    history = [
        user("Weather and time in Paris?"),
        assistant(signed("I need the weather first.", "sig-1"),
                  tool_use("tooluse_w1", "get_weather", {"city": "Paris"})),
        user(tool_result("tooluse_w1", "sunny")),
    ]
    assert turn2["messages"] == history
    assert turn2["additionalModelRequestFields"] == THINKING
    assert turn2["toolConfig"] == {"tools": [WEATHER_SPEC, TIME_SPEC]}

    # turn 3 (streamed): both signed blocks go back, each first in its assistant turn
    bedrock.requests.clear()
    bedrock.stream(CLAUDE, converse_stream(thinking("Both known.", "sig-3"),
                                           text("Sunny, and it is 09:00.", n=2)))
    items3 = [*items2, *out2, call_output(out2, "09:00")]
    out3 = stateless_turn(alice, items3, stream=True)

    assert [i["type"] for i in out3] == ["reasoning", "message"]
    assert out3[1]["content"][0]["text"] == "Sunny, and it is 09:00."
    turn3 = only(bedrock).body
    assert turn3["messages"] == [
        *history,
        assistant(signed("Now the time.", "sig-2"),
                  tool_use("tooluse_t2", "get_time", {"city": "Paris"})),
        user(tool_result("tooluse_t2", "09:00")),
    ]
    assert turn3["additionalModelRequestFields"] == THINKING


def _first_turn(client: OpenAI, fake: FakeBedrock) -> list[dict[str, Any]]:
    question = {"role": "user", "content": "Weather in Oslo?"}
    fake.stream(CLAUDE, converse_stream(
        thinking("Call the tool.", "sig-oslo"),
        tool("tooluse_o1", "get_weather", '{"city": "Oslo"}'), stop="tool_use"))
    out = stateless_turn(client, [question], stream=True)
    return [question, *out, call_output(out, "cold")]


def test_tampered_encrypted_content_is_a_400(alice: OpenAI, bedrock: FakeBedrock) -> None:
    items = _first_turn(alice, bedrock)
    sealed = items[1]["encrypted_content"]
    middle = len(sealed) // 2
    flipped = sealed[:middle] + ("A" if sealed[middle] != "A" else "B") + sealed[middle + 1:]
    items[1] = dict(items[1], encrypted_content=flipped)
    bedrock.requests.clear()

    with pytest.raises(openai.BadRequestError) as caught:
        stateless_turn(alice, items, stream=False)

    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "invalid_encrypted_content"
    assert bedrock.requests == []  # refused before Bedrock was called
    with pytest.raises(openai.BadRequestError):
        stateless_turn(alice, [*items[:1], dict(items[1], encrypted_content="not a blob"),
                               *items[2:]], stream=True)


def test_reasoning_sealed_for_another_tenant_is_a_400(alice: OpenAI, bob: OpenAI,
                                                     bedrock: FakeBedrock) -> None:
    items = _first_turn(alice, bedrock)
    bedrock.requests.clear()

    with pytest.raises(openai.BadRequestError) as caught:
        stateless_turn(bob, items, stream=False)

    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "invalid_encrypted_content"
    assert bedrock.requests == []
    # the same items are fine for their own tenant
    bedrock.json(CLAUDE, converse_json({"text": "Wear a coat."}))
    out = stateless_turn(alice, items, stream=False)
    assert out[-1]["content"][0]["text"] == "Wear a coat."
    assert only(bedrock, "converse").body["messages"][1]["content"][0] == signed(
        "Call the tool.", "sig-oslo")


def test_without_encrypted_content_thinking_is_left_off_instead_of_a_bedrock_400(
    alice: OpenAI, bedrock: FakeBedrock
) -> None:
    items = _first_turn(alice, bedrock)
    items[1] = {k: v for k, v in items[1].items() if k != "encrypted_content"}
    bedrock.requests.clear()
    bedrock.json(CLAUDE, converse_json({"text": "Cold."}))
    stateless_turn(alice, items, stream=False)

    body = only(bedrock, "converse").body
    assert "additionalModelRequestFields" not in body
    assert body["messages"][1] == assistant(tool_use("tooluse_o1", "get_weather",
                                                     {"city": "Oslo"}))


def test_stored_chain_sends_signed_reasoning_back_without_include(
    client: OpenAI, bedrock: FakeBedrock
) -> None:
    bedrock.stream(CLAUDE, converse_stream(
        thinking("Look it up.", "sig-stored"),
        tool("tooluse_s1", "get_weather", '{"city": "Rome"}'), stop="tool_use"))
    first = client.responses.create(model=CLAUDE, input="Weather in Rome?",
                                    tools=[WEATHER_TOOL], reasoning={"effort": "medium"},
                                    stream=True)
    final = check_stream(sdk_events(first)).terminal["response"]
    assert final["output"][0].get("encrypted_content") is None  # not asked for
    bedrock.requests.clear()
    bedrock.json(CLAUDE, converse_json({"text": "Warm."}))
    client.responses.create(
        model=CLAUDE, previous_response_id=final["id"], tools=[WEATHER_TOOL],
        reasoning={"effort": "medium"},
        input=[{"type": "function_call_output", "call_id": "tooluse_s1", "output": "24 C"}])

    body = only(bedrock, "converse").body
    assert body["messages"] == [
        user("Weather in Rome?"),
        assistant(signed("Look it up.", "sig-stored"),
                  tool_use("tooluse_s1", "get_weather", {"city": "Rome"})),
        user(tool_result("tooluse_s1", "24 C")),
    ]
    assert body["additionalModelRequestFields"] == THINKING


@pytest.mark.parametrize("stream", [True, False], ids=["converse-stream", "converse"])
def test_consecutive_reasoning_blocks_keep_each_signature_and_their_order(
    alice: OpenAI, bedrock: FakeBedrock, stream: bool
) -> None:
    """Claude may answer with several thinking / redacted blocks in a row: one reasoning item,
    but each block must go back with exactly its own text and signature, in order."""
    opaque = b"\x00\x01redacted-thinking\xff"
    redacted_block = {"reasoningContent": {"redactedContent": base64.b64encode(opaque).decode()}}
    if stream:
        bedrock.stream(CLAUDE, converse_stream(
            thinking("First block.", "sig-a"), redacted(opaque),
            thinking("Second block.", "sig-b"),
            tool("tooluse_c1", "get_weather", '{"city": "Nice"}'), stop="tool_use"))
    else:
        bedrock.json(CLAUDE, converse_json(
            signed("First block.", "sig-a"), redacted_block, signed("Second block.", "sig-b"),
            tool_use("tooluse_c1", "get_weather", {"city": "Nice"}), stop="tool_use"))
    question = {"role": "user", "content": "Weather in Nice?"}
    out = stateless_turn(alice, [question], stream=stream)

    assert [i["type"] for i in out] == ["reasoning", "function_call"]  # one reasoning item
    assert out[0]["content"] == [{"type": "reasoning_text", "text": "First block.Second block."}]
    bedrock.requests.clear()
    bedrock.json(CLAUDE, converse_json({"text": "Mild."}))
    stateless_turn(alice, [question, *out, call_output(out, "mild")], stream=False)

    assert only(bedrock, "converse").body["messages"][1] == assistant(
        signed("First block.", "sig-a"), redacted_block, signed("Second block.", "sig-b"),
        tool_use("tooluse_c1", "get_weather", {"city": "Nice"}),
    )


# -- one gateway, two backends ---------------------------------------------------------------

CLAUDE_BASE = "anthropic.claude-sonnet-4-20250514-v1:0"


@pytest.mark.slow
def test_model_map_routes_one_model_to_bedrock_while_the_default_backend_is_openai(
    fake: FakeBedrock, tmp_path: Path
) -> None:
    with fake.lock:
        fake.requests.clear()
    with ScriptedUpstream() as upstream:
        settings = settings_from_env({
            "GATEWAY_BACKEND": "openai",
            "GATEWAY_UPSTREAM_URL": upstream.base_url,
            "GATEWAY_MODEL_MAP": f"claude=bedrock:{CLAUDE_BASE},local=openai:scripted-model",
            "GATEWAY_BEDROCK_ENDPOINT_URL": fake.url,
            "GATEWAY_BEDROCK_REGION": "us-east-1",
            "GATEWAY_STORE": f"sqlite:{tmp_path / 'gateway.db'}",
            "GATEWAY_MAX_RETRIES": "0",
        })
        assert settings.backend == "openai"
        with GatewayServer(settings) as server, client_for(server) as client:
            fake.stream(CLAUDE_BASE, converse_stream(text("Bedrock here.", n=2)))
            events = sdk_events(client.responses.create(model="claude", input="Who are you?",
                                                        stream=True))
            from_bedrock = check_stream(events).terminal["response"]
            from_openai = client.responses.create(
                model="local", previous_response_id=from_bedrock["id"], input="And you?")
            unmapped = client.responses.create(model="scripted-model", input="Plain.")

    assert from_bedrock["model"] == "claude"  # the client's name, not the Bedrock id
    assert reconstruct(events).text == "Bedrock here."
    [sent] = fake.requests
    assert (sent.operation, sent.model_id) == ("converse-stream", CLAUDE_BASE)
    assert sent.body == {"messages": [user("Who are you?")]}
    assert from_openai.model == "local" and from_openai.output_text == DEFAULT_TEXT
    assert unmapped.output_text == DEFAULT_TEXT
    chained, plain = upstream.requests
    assert chained["model"] == "scripted-model"
    assert chained["messages"] == [  # the chain crosses backends
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "Bedrock here."},
        {"role": "user", "content": "And you?"},
    ]
    assert plain["model"] == "scripted-model"


# -- SSRF through the API --------------------------------------------------------------------

RESOLVES = {
    "loopback.test": ["127.0.0.1"],
    "private.test": ["10.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "v6-loopback.test": ["::1"],
    "mixed.test": ["93.184.216.34", "10.0.0.1"],  # one private answer is enough to refuse
}


async def table_resolver(host: str, port: int) -> list[str]:
    return RESOLVES.get(host, [])


@pytest.fixture(scope="module")
def guarded(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[GatewayServer, OpenAI]]:
    """A gateway whose Bedrock backend resolves host names through ``RESOLVES`` (the media
    fetcher's injectable resolver); only the literal 127.0.0.1 is exempt (test allow list)."""
    settings = bedrock_settings(fake, tmp_path_factory.mktemp("e2e-ssrf") / "gateway.db")
    backend = BedrockBackend(
        region="us-east-1", endpoint_url=fake.url, max_attempts=1,
        image_fetcher=MediaFetcher(resolver=table_resolver,
                                   allow_hosts=frozenset({"127.0.0.1"})))
    gateway = Gateway(settings, platform_for(settings).store(), lambda kind: backend,
                      Sealer.from_secret(None))
    with GatewayServer(settings, gateway=gateway) as server, client_for(server) as client:
        yield server, client
    asyncio.run(backend.aclose())
    asyncio.run(gateway.store.aclose())


def image_input(url: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [
        {"type": "input_text", "text": "Describe this."},
        {"type": "input_image", "image_url": url, "detail": "auto"}]}]


def assert_refused(client: OpenAI, url: str, *, stream: bool = False) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as caught:
        response = client.responses.create(model=NOVA, input=image_input(url), stream=stream)
        if stream:
            list(response)
    assert caught.value.status_code == 400
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "invalid_image_url"
    assert "non-public address" in error["message"]
    return error


@pytest.mark.parametrize("host", ["loopback.test", "private.test", "metadata.test",
                                  "v6-loopback.test", "mixed.test"])
def test_image_urls_resolving_to_non_public_addresses_are_refused(
    guarded: tuple[GatewayServer, OpenAI], bedrock: FakeBedrock, images: ImageServer, host: str
) -> None:
    _, client = guarded
    hits = len(images.hits)
    assert_refused(client, f"http://{host}:{images.port}/cat.png")
    assert_refused(client, f"https://{host}/cat.png", stream=True)

    assert len(images.hits) == hits  # nothing was fetched, even from the loopback server
    assert bedrock.requests == []  # and Bedrock was never called


@pytest.mark.parametrize("url", [
    "http://127.0.0.2:{port}/cat.png",
    "http://10.0.0.1/cat.png",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://[::1]:{port}/cat.png",
    "http://[::ffff:127.0.0.1]:{port}/cat.png",
    "http://localhost:{port}/cat.png",
])
def test_literal_non_public_image_urls_are_refused(
    client: OpenAI, bedrock: FakeBedrock, images: ImageServer, url: str
) -> None:
    """The default gateway (system resolver; only the literal 127.0.0.1 is allow-listed)."""
    hits = len(images.hits)
    assert_refused(client, url.format(port=images.port))

    assert len(images.hits) == hits
    assert bedrock.requests == []


@pytest.mark.parametrize("target", [
    "http://169.254.169.254/latest/meta-data/",
    "http://loopback.test:{port}/cat.png",
    "http://[::1]:{port}/cat.png",
    "http://private.test/cat.png",
])
def test_redirect_to_a_non_public_address_is_refused(
    guarded: tuple[GatewayServer, OpenAI], bedrock: FakeBedrock, images: ImageServer,
    target: str,
) -> None:
    _, client = guarded
    hits = len(images.hits)
    assert_refused(client, f"{images.url}/redirect?to={target.format(port=images.port)}")

    assert [h for h in images.hits[hits:] if not h.startswith("/redirect")] == []
    assert len(images.hits) == hits + 1  # the redirect was read, its target never fetched
    assert bedrock.requests == []


def test_allowed_redirect_is_followed(guarded: tuple[GatewayServer, OpenAI],
                                      bedrock: FakeBedrock, images: ImageServer) -> None:
    """The control case: the same redirect to an allowed address is fetched and sent."""
    _, client = guarded
    bedrock.json(NOVA, converse_json({"text": "A pixel."}))
    response = client.responses.create(
        model=NOVA, input=image_input(f"{images.url}/redirect?to={images.url}/cat.png"))

    assert response.output_text == "A pixel."
    assert images.hits[-2:] == [f"/redirect?to={images.url}/cat.png", "/cat.png"]
    assert only(bedrock, "converse").body == {"messages": [user(
        "Describe this.", {"image": {"format": "png", "source": {"bytes": B64_PNG}}})]}


# -- issue 16: malformed URLs, file URLs, fetch amplification ---------------------------------


def assert_download_error(client: OpenAI, input: list[dict[str, Any]], code: str, *,
                          stream: bool = False) -> dict[str, Any]:
    """The 400 OpenAI's own downloader answers: its code, param null, 'Error while
    downloading <url>' (the gateway adds why)."""
    with pytest.raises(openai.BadRequestError) as caught:
        response = client.responses.create(model=NOVA, input=input, stream=stream)
        if stream:
            list(response)
    assert caught.value.status_code == 400
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, None)
    assert error["message"].startswith("Error while downloading http")
    return error


@pytest.mark.parametrize("url", [
    "http://[::1",
    "http://0177.0.0.1:{port}/cat.png",
    "http://127.000.000.001:{port}/cat.png",
    "http://0x7f.1:{port}/cat.png",
    "http://2130706433:{port}/cat.png",
    "http://①②⑦.0.0.1:{port}/cat.png",
    "http://" + "a" * 300 + ".example/cat.png",
    "http://127.0.0.1:{port}/cat.png\x00",
    "http://127.0.0.1:{port}/cat.png\r\nX-Injected: 1",
])
def test_malformed_image_urls_are_400s_and_nothing_is_fetched(
    client: OpenAI, bedrock: FakeBedrock, images: ImageServer, url: str
) -> None:
    """Regression (issue 16.2): these were 500s. 127.0.0.1 itself is allow-listed here, so a
    spelling of it that slipped through would reach the image server."""
    hits = len(images.hits)
    url = url.replace("{port}", str(images.port))
    error = assert_download_error(client, image_input(url), "invalid_image_url")
    assert_download_error(client, image_input(url), "invalid_image_url", stream=True)

    assert "not a valid http(s) URL" in error["message"]
    assert "\x00" not in error["message"] and "\r" not in error["message"]
    assert len(images.hits) == hits
    assert bedrock.requests == []


def file_input(url: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [
        {"type": "input_text", "text": "Summarise this."},
        {"type": "input_file", "file_url": url}]}]


def test_input_file_url_is_downloaded_and_sent_as_the_document(
    client: OpenAI, bedrock: FakeBedrock, images: ImageServer
) -> None:
    """Regression (issue 16.3): the URL's own characters were base64-decoded and sent."""
    bedrock.json(NOVA, converse_json({"text": "A short report."}))
    response = client.responses.create(model=NOVA,
                                       input=file_input(f"{images.url}/files/Q3-report.pdf"))

    assert response.output_text == "A short report."
    assert images.hits[-1] == "/files/Q3-report.pdf"
    document = {"document": {"format": "pdf", "name": "Q3-report",
                             "source": {"bytes": base64.b64encode(PDF).decode()}}}
    assert only(bedrock, "converse").body == {"messages": [user("Summarise this.", document)]}


def test_input_file_data_url_keeps_working(client: OpenAI, bedrock: FakeBedrock) -> None:
    bedrock.json(NOVA, converse_json({"text": "Read."}))
    data = "data:application/pdf;base64," + base64.b64encode(PDF).decode()
    client.responses.create(model=NOVA, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Summarise this."},
        {"type": "input_file", "file_data": data, "filename": "notes.pdf"}]}])
    assert only(bedrock, "converse").body["messages"][0]["content"][1]["document"] == {
        "format": "pdf", "name": "notes", "source": {"bytes": base64.b64encode(PDF).decode()}}


@pytest.mark.parametrize("url", [" http://docs.example/report.pdf", "//docs.example/report",
                                 "not a url at all!!"])
def test_input_file_url_that_is_not_a_url_is_a_400(
    client: OpenAI, bedrock: FakeBedrock, url: str
) -> None:
    """Regression (issue 27.7): it was base64-decoded and sent to Bedrock as a garbage PDF."""
    bedrock.json(NOVA, converse_json({"text": "Read."}))
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=NOVA, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Summarise this."},
            {"type": "input_file", "file_url": url, "filename": "report.pdf"}]}])
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "input[0].content[1].file_url"
    assert error["type"] == "invalid_request_error"
    assert url not in error["message"]
    assert bedrock.requests == []


@pytest.mark.parametrize("url", [
    "http://private.test/report.pdf",
    "http://metadata.test/latest/meta-data/",
    "http://0x7f.1/report.pdf",
    "http://[::1/report.pdf",
])
def test_input_file_urls_follow_the_image_rules(
    guarded: tuple[GatewayServer, OpenAI], bedrock: FakeBedrock, images: ImageServer, url: str
) -> None:
    _, client = guarded
    hits = len(images.hits)
    assert_download_error(client, file_input(url), "invalid_file_url")
    assert len(images.hits) == hits
    assert bedrock.requests == []


def test_too_many_image_urls_are_refused_before_any_download(
    client: OpenAI, bedrock: FakeBedrock, images: ImageServer
) -> None:
    """Regression (issue 16.4): 400 URLs started 400 downloads before the limit was checked."""
    hits = len(images.hits)
    urls = [f"{images.url}/cat-{i}.png" for i in range(400)]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=NOVA, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Describe these."},
            *({"type": "input_image", "image_url": u, "detail": "auto"} for u in urls)]}])

    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "input[0].content[21].image_url"
    assert "at most 20 images" in error["message"]
    assert len(images.hits) == hits
    assert bedrock.requests == []


@pytest.fixture(scope="module")
def small_budget(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[OpenAI]:
    """A gateway whose downloads may total 2.5 of the image server's PNGs per request."""
    db = tmp_path_factory.mktemp("e2e-budget") / "gateway.db"
    settings = bedrock_settings(fake, db, bedrock_media_budget_bytes=len(PNG) * 5 // 2)
    with GatewayServer(settings) as server, client_for(server) as client:
        yield client


@pytest.mark.slow
def test_a_request_s_downloads_share_one_byte_budget(
    small_budget: OpenAI, bedrock: FakeBedrock, images: ImageServer
) -> None:
    def several(n: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [
            {"type": "input_text", "text": "Describe these."},
            *({"type": "input_image", "image_url": f"{images.url}/budget-{n}-{i}.png"}
              for i in range(n))]}]

    bedrock.json(NOVA, converse_json({"text": "Two pixels."}))
    assert small_budget.responses.create(model=NOVA, input=several(2)).output_text == "Two pixels."
    error = assert_download_error(small_budget, several(3), "invalid_image_url")
    assert f"together exceed the {len(PNG) * 5 // 2} byte limit" in error["message"]
    assert len(bedrock.requests) == 1

"""Context windows (issue 19): ``truncation``, ``POST /v1/responses/input_tokens``, and
conversations ten times longer than the model's window, by each of the three mechanisms.

The scripted upstream plays vLLM (``max_model_len`` in ``GET /v1/models``, ``/tokenize``, a
400 past the window, as vLLM answers) or llama.cpp (``meta.n_ctx``, ``/apply-template`` and
``/tokenize``), with its own tokenizer (a word or a punctuation mark is a token), so an exact
count can be told from the gateway's estimate. Bedrock counts through ``CountTokens`` on the
fake event-stream endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, OpenAI

from responses_gateway import token_estimate
from responses_gateway.backends.server_info import window_from_models
from responses_gateway.config import Settings, parse_windows
from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.eventstream_server import FakeBedrock, count_tokens, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream, prompt_count, render_prompt
from tests.helpers.scripted_upstream import scripted_tokens as upstream_tokens

pytestmark = pytest.mark.slow

WINDOW = 400
FACTS = "script/facts"
LOOKUP: dict[str, Any] = {
    "type": "function", "name": "lookup", "description": "Look a thing up.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def vllm() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(owned_by="vllm", tokenizer="vllm", context_window=WINDOW) as up:
        yield up


@pytest.fixture(scope="module")
def gateway(vllm: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("window") / "gateway.db"
    with GatewayServer(e2e_settings(vllm, db)) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(gateway) as c:
        yield c


def turns(n: int, start: int = 0) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(start, start + n):
        items.append({"role": "user", "content": f"Turn {i}: remember FACT:t{i} please."})
        items.append({"role": "assistant", "content": f"I will remember t{i}, noted."})
    return items


# -- counting ---------------------------------------------------------------------------------


def test_input_tokens_is_vllms_own_count(client: OpenAI, vllm: ScriptedUpstream) -> None:
    kwargs: dict[str, Any] = dict(model="scripted", instructions="Be brief.", tools=[LOOKUP],
                                  input=[*turns(2), {"role": "user", "content": "Go on."}])
    vllm.tokenize_requests.clear()
    counted = client.responses.input_tokens.count(**kwargs)
    assert counted.object == "response.input_tokens"
    [(route, asked)] = vllm.tokenize_requests
    assert route == "tokenize" and asked["tools"] and asked["add_generation_prompt"] is True
    client.responses.create(**kwargs)
    sent = vllm.requests[-1]
    assert counted.input_tokens == prompt_count(sent)  # what the server itself counts
    assert counted.input_tokens != token_estimate.estimate_chat(sent)


def test_input_tokens_is_llama_cpps_own_count(tmp_path: Path) -> None:
    with ScriptedUpstream(owned_by="llamacpp", tokenizer="llama.cpp", context_window=WINDOW
                          ) as up, GatewayServer(e2e_settings(up, tmp_path / "g.db")) as gw, \
            client_for(gw) as c:
        body: dict[str, Any] = dict(model="scripted", input=turns(3))
        counted = c.responses.input_tokens.count(**body)
        assert [r for r, _ in up.tokenize_requests] == ["apply-template", "tokenize"]
        c.responses.create(**body)
        assert counted.input_tokens == upstream_tokens(render_prompt(up.requests[-1]["messages"]))


def test_input_tokens_estimate_where_the_server_cannot_count(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, GatewayServer(e2e_settings(up, tmp_path / "g.db")) as gw, \
            client_for(gw) as c:
        body: dict[str, Any] = dict(model="scripted", input=turns(2), tools=[LOOKUP])
        counted = c.responses.input_tokens.count(**body)
        c.responses.create(**body)
        assert counted.input_tokens == token_estimate.estimate_chat(up.requests[-1])
        assert not up.tokenize_requests


def test_input_tokens_counts_the_previous_response_chain(client: OpenAI) -> None:
    first = client.responses.create(model="scripted", input=turns(2))
    alone = client.responses.input_tokens.count(model="scripted", input="next")
    chained = client.responses.input_tokens.count(model="scripted", input="next",
                                                  previous_response_id=first.id)
    assert chained.input_tokens > alone.input_tokens + 20


def test_input_tokens_is_bedrocks_own_count(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    use_dummy_aws(monkeypatch)
    model = "anthropic.claude-sonnet-4-20250514-v1:0"
    with FakeBedrock() as fake:
        fake.json(model, {"output": {"message": {"role": "assistant",
                                                 "content": [{"text": "hi"}]}},
                          "stopReason": "end_turn",
                          "usage": {"inputTokens": 5, "outputTokens": 1, "totalTokens": 6},
                          "metrics": {"latencyMs": 1}})
        settings = Settings(backend="bedrock", bedrock_region="us-east-1",
                            bedrock_endpoint_url=fake.url, store=f"sqlite:{tmp_path / 'g.db'}",
                            max_retries=0)
        with GatewayServer(settings) as gw, client_for(gw) as c:
            body: dict[str, Any] = dict(model=model, instructions="Be brief.", input=turns(2))
            counted = c.responses.input_tokens.count(**body)
            c.responses.create(**body)
        counts = [r for r in fake.requests if r.operation == "count-tokens"]
        converse = [r for r in fake.requests if r.operation == "converse"]
        assert len(counts) == 1 and len(converse) == 1
        assert counted.input_tokens == count_tokens(counts[0].body)
        asked = counts[0].body["input"]["converse"]
        assert asked["messages"] == converse[0].body["messages"]
        assert asked["system"] == converse[0].body["system"]


# -- truncation --------------------------------------------------------------------------------


def test_disabled_refuses_an_input_past_the_window(client: OpenAI, vllm: ScriptedUpstream
                                                   ) -> None:
    vllm.reset()
    for stream in (False, True):
        with pytest.raises(BadRequestError) as raised:
            client.responses.create(model="scripted", input=turns(20), stream=stream)
        assert raised.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
        assert raised.value.body["param"] == "input"  # type: ignore[index]
    assert vllm.requests == []  # refused before the model was asked


def test_auto_drops_the_oldest_items_and_keeps_what_it_must(client: OpenAI,
                                                            vllm: ScriptedUpstream) -> None:
    history: list[dict[str, Any]] = [
        {"role": "developer", "content": "FACT:rules apply."},
        *turns(8),
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "FACT:looked " * 5},
        *turns(8, start=8),
        {"role": "user", "content": "Latest: what do you know? FACT:latest"},
    ]
    response = client.responses.create(model=FACTS, instructions="FACT:instructions",
                                       input=history, truncation="auto", tools=[LOOKUP],
                                       tool_choice="none")
    check_response(response)
    assert response.truncation == "auto"
    sent = vllm.requests[-1]
    assert prompt_count(sent) + WINDOW // 10 <= WINDOW
    text = json.dumps(sent["messages"])
    assert sent["messages"][0] == {"role": "system", "content": "FACT:instructions"}
    assert "FACT:rules" in text and "FACT:latest" in text and "FACT:t15" in text
    assert "FACT:t0" not in text  # the oldest went first
    calls = [m for m in sent["messages"] if m.get("tool_calls")]
    outputs = [m for m in sent["messages"] if m["role"] == "tool"]
    assert len(calls) == len(outputs)  # never a call without its output
    # What is stored is what the client sent.
    stored = client.responses.input_items.list(response.id, order="asc", limit=100)
    assert len(stored.data) == len(history)


def test_auto_with_only_the_latest_turn_too_big_is_400(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as raised:
        client.responses.create(model="scripted", truncation="auto",
                                input=[*turns(2), {"role": "user", "content": "word " * 600}])
    assert raised.value.body["code"] == "context_length_exceeded"  # type: ignore[index]


def test_auto_streams_and_respects_max_output_tokens(client: OpenAI, vllm: ScriptedUpstream
                                                    ) -> None:
    with client.responses.create(model="scripted", input=turns(20), truncation="auto",
                                 max_output_tokens=150, stream=True) as stream:
        events = sdk_events(stream)
    check_stream(events)
    assert events[-1]["type"] == "response.completed"
    sent = vllm.requests[-1]
    assert prompt_count(sent) + 150 <= WINDOW


def test_configured_window_without_a_counting_server(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, GatewayServer(e2e_settings(
            up, tmp_path / "g.db", context_windows={"small": 300})) as gw, client_for(gw) as c:
        c.responses.create(model="small", input=turns(20), truncation="auto")
        sent = up.requests[-1]
        assert token_estimate.estimate_chat(sent) <= 300 - 30
        with pytest.raises(BadRequestError):
            c.responses.create(model="small", input=turns(20))


# -- ten times the window, by each mechanism ----------------------------------------------------
# A window of 1000: the summary request's own words (about 100 tokens) and the summary's room
# must leave space for the conversation.

BIG = 1000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ScriptedUpstream, OpenAI]]:
    db = tmp_path_factory.mktemp("big") / "gateway.db"
    with ScriptedUpstream(owned_by="vllm", tokenizer="vllm", context_window=BIG) as up, \
            GatewayServer(e2e_settings(up, db)) as gw, client_for(gw) as c:
        yield up, c


TURNS = 45  # each fact costs 3 tokens: a summary (200 tokens at most) holds every one
FILLER = " ".join(["words that make the conversation grow past the window"] * 15)


def _say(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"Turn {i}: here is FACT:n{i}. {FILLER}"}


def test_ten_windows_with_truncation(big: tuple[ScriptedUpstream, OpenAI]) -> None:
    up, client = big
    history: list[Any] = []
    grown = 0
    for i in range(TURNS):
        history.append(_say(i))
        response = client.responses.create(model=FACTS, input=history, truncation="auto")
        assert response.status == "completed"
        assert f"FACT:n{i}" in response.output_text  # the latest turn always reaches the model
        history += [item.model_dump(exclude_none=True) for item in response.output]
        grown = token_estimate.estimate(history)
    assert grown > 10 * BIG
    assert all(prompt_count(r) <= BIG for r in up.requests)


def test_ten_windows_with_context_management(big: tuple[ScriptedUpstream, OpenAI]) -> None:
    up, client = big
    history: list[Any] = []
    for i in range(TURNS):
        history.append(_say(i))
        response = client.responses.create(
            model=FACTS, input=history,
            context_management=[{"type": "compaction", "compact_threshold": BIG // 2}])
        assert response.status == "completed"
        assert f"FACT:n{i}" in response.output_text
        history += [item.model_dump(exclude_none=True) for item in response.output]
    assert token_estimate.estimate(history) > 10 * BIG
    assert sum(item.get("type") == "compaction" for item in history) >= 5
    # No request was ever past the window, summarising ones included.
    assert all(prompt_count(r) + (r.get("max_completion_tokens") or 0) <= BIG
               for r in up.requests)
    # The summaries carried every fact on: nothing was lost, although the window holds
    # three or four turns.
    assert all(f"FACT:n{i}" in response.output_text for i in range(TURNS))


def test_ten_windows_with_standalone_compaction(big: tuple[ScriptedUpstream, OpenAI]) -> None:
    up, client = big
    window: list[Any] = []
    total = compactions = 0
    for i in range(TURNS):
        window.append(_say(i))
        total += token_estimate.estimate(_say(i))
        if client.responses.input_tokens.count(model=FACTS, input=window).input_tokens > (
                BIG // 2):
            compactions += 1
            raw = client.responses.with_raw_response.compact(model=FACTS, input=window)
            window = json.loads(raw.text)["output"]
        response = client.responses.create(model=FACTS, input=window)
        assert response.status == "completed" and f"FACT:n{i}" in response.output_text
        window += [item.model_dump(exclude_none=True) for item in response.output]
        total += token_estimate.estimate(window[-1])
    assert total > 10 * BIG and compactions >= 5
    assert all(prompt_count(r) <= BIG for r in up.requests)
    assert all(f"FACT:n{i}" in response.output_text for i in range(TURNS))


# -- units -------------------------------------------------------------------------------------


def test_windows_from_models_answers() -> None:
    window = window_from_models
    assert window({"data": [{"id": "m", "max_model_len": 8192}]}, "m") == 8192
    assert window({"data": [{"id": "x", "meta": {"n_ctx_train": 4096}}]}, "m") == 4096
    assert window({"data": [{"id": "a", "context_length": 1}, {"id": "b"}]}, "m") is None
    assert window({"data": [{"id": "m", "max_model_len": True}]}, "m") is None
    assert window(None, "m") is None
    assert parse_windows("a=10, org/b=c=20") == {"a": 10, "org/b=c": 20}
    with pytest.raises(ValueError):
        parse_windows("a=ten")


def test_estimate_counts_media_as_a_fixed_cost() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 400_000}}
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]}
    media = token_estimate.MEDIA_TOKENS
    assert media <= token_estimate.estimate_chat(chat) < media + 100

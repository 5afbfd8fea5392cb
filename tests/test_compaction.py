"""Long conversations (issue 19): ``POST /v1/responses/compact`` and ``context_management``.

End to end through the openai client against the gateway under uvicorn, in front of a
scripted upstream whose ``facts`` script remembers every ``FACT:...`` token it sees: a summary
it writes carries them on, so a fact the model still knows after compaction proves the summary
reached it in place of the turns it stands for.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI
from openai.types.responses import ResponseCompactionItem

from responses_gateway.translate.sealing import Sealer
from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.helpers.responses_validation import _validator
from tests.helpers.scripted_upstream import ScriptedUpstream

FACTS = "script/facts"
STEP_TOOL: dict[str, Any] = {
    "type": "function", "name": "step", "description": "Do the next step of the work.",
    "parameters": {"type": "object", "properties": {"step": {"type": "integer"}},
                   "required": ["step"]},
}
PADDING = " ".join(["lorem ipsum dolor sit amet"] * 60)  # ~ 100 tokens per tool output


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("compaction") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, api_keys=("key-a", "key-b"),
                                    seal_key="compaction-test-key")) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(gateway, api_key="key-a") as c:
        yield c


def compact(client: OpenAI, **kwargs: Any) -> dict[str, Any]:
    """``client.responses.compact`` as JSON. (openai-python types the output as output items,
    which have no user message: parsing the user messages OpenAI returns warns.)"""
    raw = client.responses.with_raw_response.compact(**kwargs)
    body = json.loads(raw.text)
    errors = [e.message for e in _validator("CompactResource").iter_errors(body)]
    assert not errors, errors
    assert body["object"] == "response.compaction" and body["id"].startswith("resp_")
    item = body["output"][-1]
    ResponseCompactionItem.model_validate(item, strict=True)
    assert item["id"].startswith("cmp_")
    return body


def conversation(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(n):
        items.append({"role": "user", "content": f"Remember FACT:f{i}."})
        items.append({"role": "assistant", "content": f"Noted f{i}."})
    return items


# -- POST /v1/responses/compact -------------------------------------------------------------


def test_compact_then_continue_from_the_window(client: OpenAI, upstream: ScriptedUpstream
                                                ) -> None:
    upstream.reset()
    body = compact(client, model=FACTS, input=conversation(3))
    users = body["output"][:-1]
    assert [u["content"][0]["text"] for u in users] == [f"Remember FACT:f{i}." for i in range(3)]
    assert all(u["role"] == "user" and u["type"] == "message" for u in users)
    # One summarising call: the conversation, then the gateway's request for a summary.
    [summarising] = upstream.requests
    assert summarising["stream"] is False
    assert "summary" in summarising["messages"][-1]["content"]
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["total_tokens"] > 0

    follow = client.responses.create(
        model=FACTS, input=[*body["output"], {"role": "user", "content": "What do you know?"}])
    check_response(follow)
    assert follow.output_text == "FACTS: FACT:f0 FACT:f1 FACT:f2"
    sent = upstream.requests[-1]["messages"]
    # The assistant turns are gone; the summary stands for them, after the kept user turns.
    assert [m["role"] for m in sent] == ["user", "user", "user", "user", "user"]
    assert "Noted" not in json.dumps(sent)
    assert sent[3]["content"].startswith("Earlier turns of this conversation were compacted")


def test_compact_previous_response_id_and_instructions(client: OpenAI,
                                                        upstream: ScriptedUpstream) -> None:
    first = client.responses.create(model=FACTS, input="Keep FACT:chained in mind.")
    upstream.reset()
    body = compact(client, model=FACTS, previous_response_id=first.id,
                   instructions="You summarise FACT:instructed conversations.")
    [summarising] = upstream.requests
    assert summarising["messages"][0] == {
        "role": "system", "content": "You summarise FACT:instructed conversations."}
    assert "FACT:chained" in json.dumps(summarising["messages"])
    assert body["output"][0]["content"][0]["text"] == "Keep FACT:chained in mind."


def test_compact_again_supersedes_the_earlier_compaction(client: OpenAI,
                                                         upstream: ScriptedUpstream) -> None:
    first = compact(client, model=FACTS, input=conversation(2))
    second = compact(client, model=FACTS, input=[
        *first["output"], {"role": "assistant", "content": "More: FACT:late."}])
    assert [i["type"] for i in second["output"]] == ["message", "message", "compaction"]
    follow = client.responses.create(model=FACTS, input=second["output"])
    assert follow.output_text == "FACTS: FACT:f0 FACT:f1 FACT:late"


def test_compact_missing_model_is_400(gateway: GatewayServer) -> None:
    answer = httpx.post(gateway.base_url + "/responses/compact",
                        headers={"Authorization": "Bearer key-a"},
                        json={"input": [{"role": "user", "content": "Compact this."}]})
    assert answer.status_code == 400
    assert answer.json() == {"error": {
        "message": "Missing required parameter: 'model'.", "type": "invalid_request_error",
        "param": "model", "code": "missing_required_parameter"}}


def test_compact_and_input_tokens_are_not_response_ids(gateway: GatewayServer) -> None:
    for path in ("/responses/compact", "/responses/input_tokens"):
        answer = httpx.get(gateway.base_url + path, headers={"Authorization": "Bearer key-a"})
        assert answer.status_code == 405, answer.text
        assert answer.json()["error"]["type"] == "invalid_request_error"
        deleted = httpx.delete(gateway.base_url + path,
                               headers={"Authorization": "Bearer key-a"})
        assert deleted.status_code == 405


def test_compact_empty_and_bad_input_are_400(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as empty:
        client.responses.compact(model=FACTS, input=[])
    assert empty.value.body["param"] == "input"  # type: ignore[index]
    with pytest.raises(BadRequestError) as bad:
        client.responses.compact(model=FACTS, input=[{"type": "message", "role": "user"}])
    assert bad.value.body["code"] == "missing_required_parameter"  # type: ignore[index]


# -- compaction items as input: only this gateway's, only this tenant's -----------------------


def _continue_with(client: OpenAI, item: dict[str, Any]) -> BadRequestError:
    with pytest.raises(BadRequestError) as raised:
        client.responses.create(model=FACTS, input=[item, {"role": "user", "content": "go"}])
    return raised.value


def test_foreign_tampered_and_reasoning_blobs_are_refused(gateway: GatewayServer,
                                                          client: OpenAI) -> None:
    item = compact(client, model=FACTS, input=conversation(1))["output"][-1]
    with client_for(gateway, api_key="key-b") as other:  # another tenant
        error = _continue_with(other, item)
    assert error.status_code == 400
    assert error.body["code"] == "invalid_encrypted_content"  # type: ignore[index]
    assert error.body["param"] == "input[0].encrypted_content"  # type: ignore[index]

    raw = bytearray(base64.urlsafe_b64decode(item["encrypted_content"] + "=="))
    raw[-1] ^= 1
    tampered = {**item, "encrypted_content": base64.urlsafe_b64encode(bytes(raw)).decode()}
    assert _continue_with(client, tampered).body["code"] == "invalid_encrypted_content"  # type: ignore[index]

    other_gateway = Sealer.from_secret("another-gateway").seal({"compaction": "x", "keep": []},
                                                                "key-a")
    forged = {**item, "encrypted_content": other_gateway}
    assert _continue_with(client, forged).body["code"] == "invalid_encrypted_content"  # type: ignore[index]

    ours_but_reasoning = Sealer.from_secret("compaction-test-key").seal(
        {"reasoning_details": []}, _tenant_of(gateway, "key-a"))
    error = _continue_with(client, {**item, "encrypted_content": ours_but_reasoning})
    assert error.body["code"] == "invalid_encrypted_content"  # type: ignore[index]
    assert "another kind of item" in error.body["message"]  # type: ignore[index]


def _tenant_of(gateway: GatewayServer, key: str) -> str:
    return gateway.app.state.auth.tenant(f"Bearer {key}")


# -- context_management on create ---------------------------------------------------------


def _tool_loop(client: OpenAI, *, steps: int, threshold: int, stream: bool,
               store: bool = True) -> tuple[list[Any], list[dict[str, Any]]]:
    """Run the ``facts`` agent's tool loop to its end, stateless (input grows), returning the
    responses and every streamed event."""
    history: list[Any] = [{"role": "user", "content": f"Do {steps} steps. FACT:goal"}]
    responses, events = [], []
    for _ in range(steps + 1):
        kwargs: dict[str, Any] = dict(
            model=f"{FACTS} total={steps}", input=history, tools=[STEP_TOOL], store=store,
            context_management=[{"type": "compaction", "compact_threshold": threshold}])
        if stream:
            with client.responses.create(stream=True, **kwargs) as s:
                batch = sdk_events(s)
            check_stream(batch)
            events += batch
            response = batch[-1]["response"]
        else:
            response = check_response(client.responses.create(**kwargs))
        responses.append(response)
        calls = [i for i in response["output"] if i["type"] == "function_call"]
        history += response["output"]
        if not calls:
            break
        for call in calls:
            step = json.loads(call["arguments"])["step"]
            history.append({"type": "function_call_output", "call_id": call["call_id"],
                            "output": f"done FACT:step{step} {PADDING}"})
    return responses, events


@pytest.mark.parametrize("stream", [True, False])
def test_tool_loop_compacts_past_the_threshold(client: OpenAI, upstream: ScriptedUpstream,
                                               stream: bool) -> None:
    upstream.reset()
    responses, events = _tool_loop(client, steps=12, threshold=600, stream=stream)
    final = responses[-1]
    assert final["output"][-1]["type"] == "message"
    # Nothing lost: the goal, and every step, whether done before or after a compaction.
    text = final["output"][-1]["content"][0]["text"]
    assert text.startswith("FACTS: FACT:goal")
    assert all(f"FACT:step{k}" in text for k in range(1, 13))
    compacting = [r for r in responses if r["output"][0]["type"] == "compaction"]
    assert 2 <= len(compacting) < len(responses)
    for response in compacting:
        assert [i["type"] for i in response["output"]][:1] == ["compaction"]
    # What the model read stayed small although the input kept growing.
    model_calls = [r for r in upstream.requests if r.get("tool_choice") != "none"]
    assert max(len(json.dumps(r["messages"])) for r in model_calls[-3:]) < 6000
    if stream:
        added = [e for e in events if e["type"] == "response.output_item.added"
                 and e["item"]["type"] == "compaction"]
        assert len(added) == len(compacting)
        assert all(e["output_index"] == 0 for e in added)


def test_context_management_with_store_false_and_previous_response_id(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    responses, _ = _tool_loop(client, steps=6, threshold=500, stream=False, store=False)
    assert any(r["output"][0]["type"] == "compaction" for r in responses)
    # Chained by id (stored): each turn sends only the new items.
    first = client.responses.create(
        model=f"{FACTS} total=4", tools=[STEP_TOOL], input="Work. FACT:chain",
        context_management=[{"type": "compaction", "compact_threshold": 400}])
    previous = first
    for _ in range(8):
        calls = [i for i in previous.output if i.type == "function_call"]
        if not calls:
            break
        outputs = [{"type": "function_call_output", "call_id": c.call_id,
                    "output": f"done FACT:step{json.loads(c.arguments)['step']} {PADDING}"}
                   for c in calls]
        previous = client.responses.create(
            model=f"{FACTS} total=4", tools=[STEP_TOOL], input=outputs,
            previous_response_id=previous.id,
            context_management=[{"type": "compaction", "compact_threshold": 400}])
        check_response(previous)
    assert previous.output_text.startswith("FACTS: FACT:chain")
    assert all(f"FACT:step{k}" in previous.output_text for k in range(1, 5))
    stored = client.responses.retrieve(previous.id)
    assert stored.output_text == previous.output_text


def test_context_management_in_background(client: OpenAI) -> None:
    history: list[Any] = [*conversation(6), {"role": "user", "content": "Recall."}]
    job = client.responses.create(
        model=FACTS, input=history, background=True,
        context_management=[{"type": "compaction", "compact_threshold": 40}])
    import time

    deadline = time.monotonic() + 20
    while job.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        job = client.responses.retrieve(job.id)
    check_response(job)
    assert job.status == "completed"
    assert job.output[0].type == "compaction"
    assert job.output_text == "FACTS: " + " ".join(f"FACT:f{i}" for i in range(6))


def test_below_the_threshold_nothing_is_compacted(client: OpenAI, upstream: ScriptedUpstream
                                                   ) -> None:
    upstream.reset()
    response = client.responses.create(
        model=FACTS, input=conversation(2),
        context_management=[{"type": "compaction", "compact_threshold": 100_000}])
    assert [i.type for i in response.output] == ["message"]
    assert len(upstream.requests) == 1


def test_context_management_is_validated(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as kind:
        client.responses.create(model=FACTS, input="x",
                                context_management=[{"type": "summarise"}])
    assert kind.value.body["param"] == "context_management[0].type"  # type: ignore[index]
    with pytest.raises(BadRequestError) as low:
        client.responses.create(model=FACTS, input="x", context_management=[
            {"type": "compaction", "compact_threshold": 0}])
    assert low.value.body["code"] == "integer_below_min_value"  # type: ignore[index]


# -- DynamoDB: the compaction item is stored and chained like any output item ----------------


def test_dynamodb_store_chain_with_compaction(moto_endpoint: str, upstream: ScriptedUpstream,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    use_moto(monkeypatch, moto_endpoint)
    table = create_dynamodb_table()
    settings = e2e_settings(upstream, tmp_path / "unused.db", store=f"dynamodb:{table}")
    with GatewayServer(settings) as server, client_for(server) as c:
        first = c.responses.create(
            model=FACTS, input=conversation(3),
            context_management=[{"type": "compaction", "compact_threshold": 30}])
        assert first.output[0].type == "compaction"
        second = c.responses.create(model=FACTS, input="And now?",
                                    previous_response_id=first.id)
        assert second.output_text == "FACTS: FACT:f0 FACT:f1 FACT:f2"
        body = compact(c, model=FACTS, previous_response_id=second.id)
        assert body["output"][-1]["type"] == "compaction"


# -- Bedrock: the summary from Converse, the window back through Converse ---------------------


@pytest.mark.slow
def test_compact_and_continue_on_bedrock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    from responses_gateway.config import Settings
    from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws

    use_dummy_aws(monkeypatch)
    model = "anthropic.claude-sonnet-4-20250514-v1:0"
    with FakeBedrock() as fake:
        fake.json(model, {"output": {"message": {"role": "assistant", "content": [
            {"text": "Summary: launch on Tuesday, FACT:bedrock."}]}}, "stopReason": "end_turn",
            "usage": {"inputTokens": 40, "outputTokens": 9, "totalTokens": 49},
            "metrics": {"latencyMs": 1}})
        settings = Settings(backend="bedrock", bedrock_region="us-east-1", max_retries=0,
                            bedrock_endpoint_url=fake.url, store=f"sqlite:{tmp_path / 'g.db'}")
        with GatewayServer(settings) as server, client_for(server) as c:
            body = compact(c, model=model, input=[
                {"role": "user", "content": "We launch on Tuesday."},
                {"role": "assistant", "content": "Noted: Tuesday."}])
            assert body["usage"]["input_tokens"] == 40 and body["usage"]["output_tokens"] == 9
            follow = c.responses.create(model=model, stream=False, input=[
                *body["output"], {"role": "user", "content": "When?"}])
            check_response(follow)
        summarising, answering = [r for r in fake.requests if r.operation == "converse"]
        assert "summary" in json.dumps(summarising.body["messages"][-1])
        sent = json.dumps(answering.body["messages"])
        assert "FACT:bedrock" in sent and "Noted: Tuesday" not in sent


# -- where compaction lives (issue 41) -------------------------------------------------------


def _imports(module: str) -> set[str]:
    """The responses_gateway modules ``module`` imports (any line of it, TYPE_CHECKING too)."""
    import ast

    path = Path(__file__).resolve().parent.parent / "handler" / Path(*module.split("."))
    tree = ast.parse(path.with_suffix(".py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("responses_"):
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    return found


def test_compaction_items_are_made_and_read_in_one_module() -> None:
    """The item's shape (id, sealed payload, what it hides) is compaction_items.py's alone,
    and it calls nothing back up in responses/."""
    fitting = ("fit", "compaction", "cuts", "render", "tokens")
    for name in fitting:
        source = (Path(__file__).resolve().parent.parent / "handler" / "responses_gateway"
                  / "responses" / "fitting" / f"{name}.py").read_text()
        assert "ids.COMPACTION" not in source and "encrypted_content" not in source, name
    assert not any(m.startswith("responses_gateway.responses")
                   for m in _imports("responses_gateway.translate.compaction_items"))


def test_fitting_is_called_in_one_direction() -> None:
    """fit.py decides and calls down; no other fitting module imports it (nor the summariser
    imports the decisions), so the create path never climbs back into them."""
    fit = "responses_gateway.responses.fitting.fit"
    for name in ("compaction", "cuts", "render", "tokens", "windows", "vision",
                 "compaction_bounds"):
        assert fit not in _imports(f"responses_gateway.responses.fitting.{name}"), name
    assert "responses_gateway.responses.fitting.compaction" not in _imports(
        "responses_gateway.responses.fitting.cuts")

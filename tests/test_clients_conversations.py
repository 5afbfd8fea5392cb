"""Conversations through real clients used unmodified (issue 18): the OpenAI Agents SDK
(``OpenAIConversationsSession`` and ``conversation_id=``, streamed and not) and openai-node's
whole ``client.conversations`` surface, each against the gateway on SQLite.

The Agents SDK runs in its default configuration: only ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point it at the gateway, as a user would. openai-node is installed once per
session into ``.cache/npm-openai`` (kept between runs; gitignored) at the pinned version below
(``RG_OPENAI_NODE_PACKAGE`` overrides it); without npm or the registry its test skips with the
reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItem,
    ConversationItemList,
)
from openai.types.responses import Response
from pydantic import TypeAdapter

from tests.helpers.cache_lock import held, put
from tests.helpers.e2e import check_response, check_stream, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import (  # noqa: E402
    Agent,
    OpenAIConversationsSession,
    RunContextWrapper,
    Runner,
    function_tool,
)
from agents.models import openai_provider  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "scripted-model"
KEY = "sk-conversations-clients"
ITEM = TypeAdapter(ConversationItem)
CITIES = ("Paris", "Lima", "Oslo", "Tokyo")
agents.set_tracing_disabled(True)  # traces would go to api.openai.com


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("clients-conversations") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db, api_keys=(KEY,))) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=60) as c:
        yield c


# -- the Agents SDK --------------------------------------------------------------------------


@function_tool
def get_weather(ctx: RunContextWrapper[list[str]], city: str) -> str:
    """Current weather for a city."""
    ctx.context.append(city)
    return f"sunny in {city}"


def prompt(marker: str, turn: int) -> str:
    city = CITIES[turn]
    return f"{marker} turn {turn} [[script:tool args='{{\"city\": \"{city}\"}}']]"


async def four_turns(
    marker: str, *, stream: bool, session: Any = None, conversation_id: str | None = None
) -> tuple[list[Any], list[str], list[list[dict[str, Any]]]]:
    """Four agent turns in one conversation: results, tool calls made, raw stream events."""
    agent = Agent[list[str]](
        name="forecaster", instructions="Answer with the tool's result.", tools=[get_weather],
        model=MODEL,
    )
    calls: list[str] = []
    results: list[Any] = []
    streams: list[list[dict[str, Any]]] = []
    kwargs: dict[str, Any] = {"session": session} if session is not None else {
        "conversation_id": conversation_id}
    for turn in range(4):
        if not stream:
            results.append(await Runner.run(agent, prompt(marker, turn), context=calls, **kwargs))
            continue
        streamed = Runner.run_streamed(agent, prompt(marker, turn), context=calls, **kwargs)
        events = [event async for event in streamed.stream_events()]
        streams.append([e.data.to_dict(mode="json") for e in events
                        if e.type == "raw_response_event"])
        results.append(streamed)
    return results, calls, streams


def check_fourth_turn_saw_the_others(upstream: ScriptedUpstream, marker: str) -> None:
    """The upstream request for turn 4's first model call holds turns 1-3 whole, in order:
    the user's words, the tool call, its output and the answer of each."""
    sent = [b for b in upstream.requests if f"{marker} turn 3" in str(b["messages"])]
    first = sent[0]["messages"]
    assert first[0] == {"role": "system", "content": "Answer with the tool's result."}
    history = first[1:]
    roles = [m["role"] for m in history]
    assert roles == ["user", "assistant", "tool", "assistant"] * 3 + ["user"]
    for turn in range(3):
        user, call, output, answer = history[4 * turn : 4 * turn + 4]
        assert f"{marker} turn {turn}" in str(user["content"])
        assert call["tool_calls"][0]["function"]["name"] == "get_weather"
        assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {
            "city": CITIES[turn]}
        assert output == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
                          "content": f"sunny in {CITIES[turn]}"}
        assert answer["content"] == f"Tool output: sunny in {CITIES[turn]}"
    assert f"{marker} turn 3" in str(history[-1]["content"])


def check_conversation(client: openai.OpenAI, conversation_id: str, marker: str) -> None:
    """The conversation holds the four turns: 16 items, each valid, in order."""
    items = [i.to_dict(mode="json") for i in
             client.conversations.items.list(conversation_id, order="asc", limit=5)]
    for item in items:
        ITEM.validate_python(item)
    assert [i["type"] for i in items] == [
        "message", "function_call", "function_call_output", "message"] * 4
    for turn in range(4):
        user, call, output, answer = items[4 * turn : 4 * turn + 4]
        assert user["role"] == "user" and f"{marker} turn {turn}" in str(user["content"])
        assert call["name"] == "get_weather" and output["call_id"] == call["call_id"]
        assert output["output"] == f"sunny in {CITIES[turn]}"
        assert answer["role"] == "assistant"
        assert answer["content"][0]["text"] == f"Tool output: sunny in {CITIES[turn]}"


@pytest.fixture
def sdk_defaults(gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user sets to use the gateway: the base URL and a key. (The SDK keeps one httpx
    client per process; each test runs its own event loop, so each starts without one.)"""
    monkeypatch.setenv("OPENAI_BASE_URL", gateway.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setattr(openai_provider, "_http_client", None)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("how", ["session", "conversation_id"])
def test_agents_sdk_turns_on_a_conversation(
    sdk_defaults: None,
    client: openai.OpenAI,
    upstream: ScriptedUpstream,
    stream: bool,
    how: str,
) -> None:
    marker = f"agents-{how}-{stream}"

    async def main() -> tuple[str, list[Any], list[str], list[list[dict[str, Any]]]]:
        if how == "session":
            session = OpenAIConversationsSession()  # creates its conversation on first use
            results, calls, streams = await four_turns(marker, stream=stream, session=session)
            return await session._get_session_id(), results, calls, streams
        conversation = await openai.AsyncOpenAI().conversations.create()
        results, calls, streams = await four_turns(
            marker, stream=stream, conversation_id=conversation.id
        )
        return conversation.id, results, calls, streams

    conversation_id, results, calls, streams = asyncio.run(main())

    assert calls == list(CITIES)
    assert [r.final_output for r in results] == [f"Tool output: sunny in {c}" for c in CITIES]
    for result in results:
        assert [item.type for item in result.new_items] == [
            "tool_call_item", "tool_call_output_item", "message_output_item"]
        for raw in result.raw_responses:
            check_response(client.responses.retrieve(raw.response_id))
    for events in streams:  # two whole Responses streams per turn, each valid and in grammar
        starts = [i for i, e in enumerate(events) if e["type"] == "response.created"]
        assert len(starts) == 2
        for begin, end in zip(starts, [*starts[1:], len(events)], strict=True):
            assert check_stream(events[begin:end]).terminal["type"] == "response.completed"
    if how == "conversation_id":  # the gateway's responses name their conversation
        for result in results:
            for raw in result.raw_responses:
                assert client.responses.retrieve(raw.response_id).conversation.id == (
                    conversation_id)
    check_fourth_turn_saw_the_others(upstream, marker)
    check_conversation(client, conversation_id, marker)


# -- openai-node -----------------------------------------------------------------------------

NODE_CACHE = ROOT / ".cache" / "npm-openai"
NODE_PACKAGE = os.environ.get("RG_OPENAI_NODE_PACKAGE", "openai@6.25.0")
INSTALL_TIMEOUT = 300

NODE_SCRIPT = r"""
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_BASE_URL, apiKey: process.env.GATEWAY_KEY,
                            maxRetries: 0 });
const out = {};

const conv = await client.conversations.create({
  metadata: { topic: "node" },
  items: [
    { type: "message", role: "user", content: "node first" },
    { type: "message", role: "assistant", content: [{ type: "output_text", text: "node second" }] },
  ],
});
out.created = conv;
out.retrieved = await client.conversations.retrieve(conv.id);
out.updated = await client.conversations.update(conv.id, { metadata: { topic: "node", k: "v" } });

const added = [];
for (let i = 0; i < 5; i++) {
  added.push(await client.conversations.items.create(conv.id, {
    items: [{ type: "message", role: "user",
              content: [{ type: "input_text", text: `item ${i}` }] }],
  }));
}
out.added = added;

// The list objects as sent (asResponse: the raw HTTP answer), and the SDK's own paging.
const raw = async (promise) => await (await promise.asResponse()).json();
out.firstPage = await raw(client.conversations.items.list(conv.id, { limit: 3, order: "asc" }));
const firstPage = await client.conversations.items.list(conv.id, { limit: 3, order: "asc" });
out.nextPage = await raw(client.conversations.items.list(conv.id, {
  limit: 3, order: "asc", after: firstPage.last_id }));
out.nextPageViaSdk = (await firstPage.getNextPage()).data;
out.all = [];
for await (const item of client.conversations.items.list(conv.id, { limit: 2 })) {
  out.all.push(item);  // auto-pagination, newest first, `after` = each page's last id
}

const target = added[2].data[0].id;
out.item = await client.conversations.items.retrieve(target, { conversation_id: conv.id });
out.itemDeleted = await client.conversations.items.delete(target, { conversation_id: conv.id });
try {
  await client.conversations.items.retrieve(target, { conversation_id: conv.id });
  out.afterDelete = "found";
} catch (err) {
  out.afterDelete = { status: err.status, error: err.error };
}

out.response = await client.responses.create({
  model: "scripted-model", input: "node asks, [[script:echo]]", conversation: conv.id });
out.streamed = [];
const stream = await client.responses.create({
  model: "scripted-model", input: "node streams", conversation: { id: conv.id }, stream: true });
for await (const event of stream) out.streamed.push(event);
out.final = [];
for await (const item of client.conversations.items.list(conv.id, { order: "asc" })) {
  out.final.push(item);
}

out.deleted = await client.conversations.delete(conv.id);
try {
  await client.conversations.retrieve(conv.id);
  out.afterConversationDelete = "found";
} catch (err) {
  out.afterConversationDelete = { status: err.status, error: err.error };
}
console.log(JSON.stringify(out));
"""


def _node_installed_version() -> str | None:
    try:
        manifest = NODE_CACHE / "node_modules" / "openai" / "package.json"
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def openai_node() -> Path:
    """The ``openai`` npm package, installed from the registry on first use."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm is not installed: cannot run openai-node")
    wanted = NODE_PACKAGE.rpartition("@")[2]
    with held(NODE_CACHE):  # another xdist worker may be installing it
        if _node_installed_version() != wanted:
            try:
                done = subprocess.run(
                    [npm, "install", "--prefix", str(NODE_CACHE), "--no-audit", "--no-fund",
                     "--save-exact", "--loglevel=error", NODE_PACKAGE],
                    capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
                )
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm install {NODE_PACKAGE} took longer than {INSTALL_TIMEOUT} s")
            if done.returncode != 0 or _node_installed_version() is None:
                pytest.skip(f"npm install {NODE_PACKAGE} failed: {done.stderr.strip()[-600:]}")
    return NODE_CACHE


def valid_conversation(data: dict[str, Any]) -> dict[str, Any]:
    Conversation.model_validate(data)
    assert set(data) == {"id", "object", "created_at", "metadata"}
    return data


@pytest.mark.node
@pytest.mark.slow
@pytest.mark.timeout(INSTALL_TIMEOUT + 120)
def test_openai_node_drives_the_whole_conversations_surface(
    openai_node: Path, gateway: GatewayServer, upstream: ScriptedUpstream
) -> None:
    script = openai_node / "conversations.mjs"  # beside node_modules: `import "openai"` resolves
    put(script, NODE_SCRIPT)  # another xdist worker may be running it
    done = subprocess.run(
        [shutil.which("node") or "node", str(script)],
        env={**os.environ, "GATEWAY_BASE_URL": gateway.base_url, "GATEWAY_KEY": KEY},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)

    created = valid_conversation(out["created"])
    assert created["metadata"] == {"topic": "node"} and created["id"].startswith("conv_")
    assert valid_conversation(out["retrieved"]) == created
    assert valid_conversation(out["updated"])["metadata"] == {"topic": "node", "k": "v"}

    for i, added in enumerate(out["added"]):
        ConversationItemList.model_validate(added)
        assert added["data"][0]["content"] == [{"type": "input_text", "text": f"item {i}"}]
        assert added["first_id"] == added["last_id"] == added["data"][0]["id"]
    initial = ["node first", "node second"]
    texts_asc = initial + [f"item {i}" for i in range(5)]
    for page in (out["firstPage"], out["nextPage"]):
        ConversationItemList.model_validate(page)
        assert page["first_id"] == page["data"][0]["id"]
        assert page["last_id"] == page["data"][-1]["id"]
    assert out["nextPageViaSdk"] == out["nextPage"]["data"]
    assert [p["content"][0]["text"] for p in out["firstPage"]["data"]] == texts_asc[:3]
    assert out["firstPage"]["has_more"] is True
    assert [p["content"][0]["text"] for p in out["nextPage"]["data"]] == texts_asc[3:6]
    assert out["nextPage"]["has_more"] is True
    assert [p["content"][0]["text"] for p in out["all"]] == list(reversed(texts_asc))
    for item in out["all"]:
        ITEM.validate_python(item)

    assert ITEM.validate_python(out["item"]).id == out["added"][2]["data"][0]["id"]
    assert valid_conversation(out["itemDeleted"])["id"] == created["id"]
    assert out["afterDelete"]["status"] == 404
    assert out["afterDelete"]["error"]["message"] == (
        f"Item with id '{out['added'][2]['data'][0]['id']}' not found.")

    body = dict(out["response"])
    assert body.pop("output_text") == "node asks,"  # openai-node adds it, as openai-python does
    response = Response.model_validate(check_response(body))
    assert response.conversation is not None and response.conversation.id == created["id"]
    check_stream(out["streamed"])
    assert out["streamed"][-1]["type"] == "response.completed"
    assert out["streamed"][0]["response"]["conversation"] == {"id": created["id"]}
    sent = [b for b in upstream.requests if "node streams" in str(b["messages"])][-1]
    history = str(sent["messages"])
    for earlier in ("node first", "node second", "item 4", "node asks,"):
        assert earlier in history
    assert "item 2" not in history  # deleted before the turn
    final = out["final"]
    for item in final:
        ITEM.validate_python(item)
    assert [i["content"][0]["text"] for i in final] == [
        "node first", "node second", "item 0", "item 1", "item 3", "item 4",
        "node asks, [[script:echo]]", "node asks,", "node streams",
        final[-1]["content"][0]["text"],
    ]
    assert [i["role"] for i in final[-4:]] == ["user", "assistant", "user", "assistant"]

    ConversationDeletedResource.model_validate(out["deleted"])
    assert out["deleted"] == {"id": created["id"], "object": "conversation.deleted",
                              "deleted": True}
    assert out["afterConversationDelete"]["status"] == 404

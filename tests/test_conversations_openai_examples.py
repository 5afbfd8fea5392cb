"""OpenAI's own Conversations examples, run unmodified against the gateway on SQLite and on
DynamoDB (moto server), asserting what OpenAI's documentation says they return (issue 18).

Sources, as published:

- the API reference's examples for the eight Conversations endpoints (the ``x-oaiMeta``
  examples of openai/openai-openapi ``openapi.yaml``: a Python and a curl request and the
  documented response each), reproduced here call for call. Only the ids change: the
  reference's ``conv_123`` / ``msg_abc`` are the ones the previous call returned;
- the conversation-state guide ("Using the Conversations API": ``openai.conversations.create()``
  then ``openai.responses.create(model="gpt-4.1", ..., conversation=...)``, through the
  module-level client), with ``gpt-4.1`` mapped to the scripted upstream's model.

The reference's Python examples for *retrieve an item* and *delete an item* pass both ids
positionally (``items.retrieve("conv_123", "msg_abc")``); openai-python takes the item id
positionally and ``conversation_id=`` by keyword, so those two run in the SDK's form, and their
curl examples run byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItemList,
)

from tests.helpers.e2e import check_response, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import aws_env, create_dynamodb_table, moto_server
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream

UPSTREAM_MODEL = "scripted-model"


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def gateway(
    request: pytest.FixtureRequest,
    upstream: ScriptedUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("conversation-examples") / "gateway.db"
    mapped = {"gpt-4.1": UPSTREAM_MODEL}
    if request.param == "sqlite":
        with GatewayServer(e2e_settings(upstream, db, model_map=mapped)) as server:
            yield server
        return
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for key, value in aws_env(endpoint).items():
            patch.setenv(key, value)
        store = f"dynamodb:{create_dynamodb_table()}"
        with GatewayServer(e2e_settings(upstream, db, store=store, model_map=mapped)) as server:
            yield server


@pytest.fixture
def client(gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch) -> OpenAI:
    """``OpenAI()`` as the examples write it: configured by the environment alone."""
    monkeypatch.setenv("OPENAI_BASE_URL", gateway.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-examples")
    return OpenAI()


def curl(gateway: GatewayServer, method: str, path: str, body: str | None = None) -> Any:
    """A reference curl example: the same method, path and JSON body, over HTTP."""
    headers = {"Authorization": "Bearer sk-examples"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    answer = httpx.request(
        method, gateway.base_url + path, headers=headers, content=body, timeout=30
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def documented_conversation(data: dict[str, Any], metadata: dict[str, str]) -> None:
    """The documented ``{"id": "conv_123", "object": "conversation", "created_at": ...,
    "metadata": ...}``."""
    Conversation.model_validate(data)
    assert set(data) == {"id", "object", "created_at", "metadata"}
    assert data["id"].startswith("conv_") and data["object"] == "conversation"
    assert isinstance(data["created_at"], int) and data["metadata"] == metadata


def documented_message(item: dict[str, Any], text: str) -> None:
    """The documented item: ``{"type": "message", "id": "msg_abc", "status": "completed",
    "role": "user", "content": [{"type": "input_text", "text": ...}]}``."""
    assert item == {
        "type": "message", "id": item["id"], "status": "completed", "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    assert item["id"].startswith("msg_")


def documented_list(data: dict[str, Any], texts: list[str]) -> None:
    ConversationItemList.model_validate(data)
    assert set(data) == {"object", "data", "first_id", "last_id", "has_more"}
    assert data["object"] == "list" and data["has_more"] is False
    for item, text in zip(data["data"], texts, strict=True):
        documented_message(item, text)
    assert data["first_id"] == data["data"][0]["id"] and data["last_id"] == data["data"][-1]["id"]


@pytest.mark.slow
def test_the_api_reference_python_examples(client: OpenAI) -> None:
    # Create a conversation
    conversation = client.conversations.create(
      metadata={"topic": "demo"},
      items=[
        {"type": "message", "role": "user", "content": "Hello!"}
      ]
    )
    print(conversation)
    documented_conversation(conversation.to_dict(mode="json"), {"topic": "demo"})
    conv_123 = conversation.id

    # Retrieve a conversation
    conversation = client.conversations.retrieve(conv_123)
    print(conversation)
    documented_conversation(conversation.to_dict(mode="json"), {"topic": "demo"})

    # Update a conversation
    updated = client.conversations.update(
      conv_123,
      metadata={"topic": "project-x"}
    )
    print(updated)
    documented_conversation(updated.to_dict(mode="json"), {"topic": "project-x"})

    # Create items
    items = client.conversations.items.create(
      conv_123,
      items=[
        {
          "type": "message",
          "role": "user",
          "content": [{"type": "input_text", "text": "Hello!"}],
        },
        {
          "type": "message",
          "role": "user",
          "content": [{"type": "input_text", "text": "How are you?"}],
        }
      ],
    )
    print(items.data)
    documented_list(items.to_dict(mode="json"), ["Hello!", "How are you?"])
    msg_abc = items.data[0].id

    # List items (newest first: the default order is desc)
    items = client.conversations.items.list(conv_123, limit=10)
    print(items.data)
    documented_list(
        {"object": "list", **items.to_dict(mode="json")}, ["How are you?", "Hello!", "Hello!"]
    )

    # Retrieve an item (the SDK's form of the reference's call)
    item = client.conversations.items.retrieve(msg_abc, conversation_id=conv_123)
    print(item)
    documented_message(item.to_dict(mode="json"), "Hello!")

    # Delete an item (the SDK's form): the documented answer is the conversation
    conversation = client.conversations.items.delete(msg_abc, conversation_id=conv_123)
    print(conversation)
    documented_conversation(conversation.to_dict(mode="json"), {"topic": "project-x"})
    assert [i.id for i in client.conversations.items.list(conv_123)].count(msg_abc) == 0

    # Delete a conversation
    deleted = client.conversations.delete(conv_123)
    print(deleted)
    ConversationDeletedResource.model_validate(deleted.to_dict(mode="json"))
    assert deleted.to_dict(mode="json") == {
        "id": conv_123, "object": "conversation.deleted", "deleted": True
    }


def test_the_api_reference_curl_examples(gateway: GatewayServer) -> None:
    created = curl(gateway, "POST", "/conversations", """{
                  "metadata": {"topic": "demo"},
                  "items": [
                    {
                      "type": "message",
                      "role": "user",
                      "content": "Hello!"
                    }
                  ]
                }""")
    documented_conversation(created, {"topic": "demo"})
    conv = created["id"]
    assert curl(gateway, "GET", f"/conversations/{conv}") == created
    updated = curl(gateway, "POST", f"/conversations/{conv}", """{
                  "metadata": {"topic": "project-x"}
                }""")
    assert updated == dict(created, metadata={"topic": "project-x"})
    added = curl(gateway, "POST", f"/conversations/{conv}/items", """{
                  "items": [
                    {
                      "type": "message",
                      "role": "user",
                      "content": [
                        {"type": "input_text", "text": "Hello!"}
                      ]
                    },
                    {
                      "type": "message",
                      "role": "user",
                      "content": [
                        {"type": "input_text", "text": "How are you?"}
                      ]
                    }
                  ]
                }""")
    documented_list(added, ["Hello!", "How are you?"])
    msg = added["data"][0]["id"]
    listed = curl(gateway, "GET", f"/conversations/{conv}/items?limit=10")
    documented_list(listed, ["How are you?", "Hello!", "Hello!"])
    documented_message(curl(gateway, "GET", f"/conversations/{conv}/items/{msg}"), "Hello!")
    assert curl(gateway, "DELETE", f"/conversations/{conv}/items/{msg}") == updated
    assert curl(gateway, "DELETE", f"/conversations/{conv}") == {
        "id": conv, "object": "conversation.deleted", "deleted": True
    }


@pytest.mark.slow
def test_the_conversation_state_guide(
    gateway: GatewayServer, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's two snippets through the module-level client, then the turn it promises:
    the conversation now holds the question and the answer, and a next response sees them."""
    monkeypatch.setattr(openai, "base_url", gateway.base_url + "/")  # joined as given
    monkeypatch.setattr(openai, "api_key", "sk-examples")

    conversation = openai.conversations.create()

    response = openai.responses.create(
      model="gpt-4.1",
      input=[{"role": "user", "content": "What are the 5 Ds of dodgeball?"}],
      conversation=conversation.id
    )

    data = check_response(response)
    assert data["status"] == "completed" and data["model"] == "gpt-4.1"
    assert data["conversation"] == {"id": conversation.id}
    assert response.output_text == DEFAULT_TEXT
    sent = [b for b in upstream.requests if "5 Ds of dodgeball" in json.dumps(b["messages"])]
    assert sent[-1]["model"] == UPSTREAM_MODEL
    items = [i.to_dict(mode="json") for i in
             openai.conversations.items.list(conversation.id, order="asc")]
    assert [(i["type"], i["role"]) for i in items] == [("message", "user"),
                                                       ("message", "assistant")]
    assert items[0]["content"] == [
        {"type": "input_text", "text": "What are the 5 Ds of dodgeball?"}]
    assert items[1]["id"] == response.output[0].id
    assert items[1]["content"][0]["text"] == DEFAULT_TEXT

    follow_up = openai.responses.create(
        model="gpt-4.1", input="And the first one?", conversation=conversation.id
    )
    assert follow_up.status == "completed"
    history = [b for b in upstream.requests if "And the first one?" in json.dumps(b)][-1]
    assert [m["role"] for m in history["messages"]] == ["user", "assistant", "user"]
    assert history["messages"][0]["content"] == "What are the 5 Ds of dodgeball?"

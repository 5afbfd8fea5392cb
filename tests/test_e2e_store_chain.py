"""End to end (issue 3): stored responses through the official client — retrieve, delete,
input_items pagination, ``previous_response_id`` chains, ``item_reference`` and ``store=false``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.helpers.e2e import (
    MODEL,
    WEATHER_TOOL,
    check_response,
    check_stream,
    e2e_settings,
    request_with,
)
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import DEFAULT_TEXT, ScriptedUpstream


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("e2e-store") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


def _not_found(exc: openai.APIStatusError, status: int = 404) -> dict[str, Any]:
    assert exc.status_code == status
    body = exc.body
    assert isinstance(body, dict) and body.keys() == {"message", "type", "param", "code"}
    assert body["type"] == "invalid_request_error"
    return body


# -- retrieve / delete ---------------------------------------------------------------------


def test_retrieve_returns_what_create_returned(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="retrieve me", metadata={"k": "v"})

    fetched = client.responses.retrieve(created.id)

    assert fetched.to_dict(mode="json") == created.to_dict(mode="json")
    assert fetched.metadata == {"k": "v"}
    check_response(fetched)


def test_retrieve_after_stream_equals_the_terminal_event(client: OpenAI) -> None:
    events = [e.to_dict(mode="json") for e in client.responses.create(
        model=MODEL, input="[[script:reasoning]]", stream=True
    )]
    terminal = check_stream(events).terminal["response"]

    fetched = client.responses.retrieve(terminal["id"])

    assert fetched.to_dict(mode="json") == terminal


def test_delete_then_404(client: OpenAI, gateway: GatewayServer) -> None:
    created = client.responses.create(model=MODEL, input="delete me")

    raw = httpx.delete(f"{gateway.base_url}/responses/{created.id}")
    assert raw.status_code == 200
    assert raw.json() == {"id": created.id, "object": "response", "deleted": True}

    with pytest.raises(openai.NotFoundError) as retrieve:
        client.responses.retrieve(created.id)
    assert _not_found(retrieve.value)["param"] == "response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_retrieve_unknown_id_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve("resp_doesnotexist0000000000000000")
    assert "resp_doesnotexist" in _not_found(caught.value)["message"]


# -- input_items ---------------------------------------------------------------------------

FIVE = [
    {"role": "developer", "content": "d0"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a2"},
    {"role": "user", "content": "u3"},
    {"role": "user", "content": [{"type": "input_text", "text": "u4"}]},
]


def _text(item: dict[str, Any]) -> str:
    return item["content"][0]["text"]


@pytest.mark.slow
def test_input_items_pagination(client: OpenAI, gateway: GatewayServer) -> None:
    response = client.responses.create(model=MODEL, input=FIVE)
    url = f"{gateway.base_url}/responses/{response.id}/input_items"

    def page(**params: Any) -> dict[str, Any]:
        answer = httpx.get(url, params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["object"] == "list"
        return body

    everything = page(order="asc")
    assert [_text(i) for i in everything["data"]] == ["d0", "u1", "a2", "u3", "u4"]
    assert everything["has_more"] is False
    ids = [i["id"] for i in everything["data"]]
    assert len(set(ids)) == 5 and all(i.startswith("msg_") for i in ids)
    assert [i["role"] for i in everything["data"]] == [
        "developer", "user", "assistant", "user", "user"]
    assert (everything["first_id"], everything["last_id"]) == (ids[0], ids[-1])

    # default order is desc (newest first), default limit 20
    assert [i["id"] for i in page()["data"]] == ids[::-1]

    first = page(limit=2, order="asc")
    assert [i["id"] for i in first["data"]] == ids[:2]
    assert (first["first_id"], first["last_id"], first["has_more"]) == (ids[0], ids[1], True)
    second = page(limit=2, order="asc", after=first["last_id"])
    assert [i["id"] for i in second["data"]] == ids[2:4]
    assert second["has_more"] is True
    third = page(limit=2, order="asc", after=second["last_id"])
    assert [i["id"] for i in third["data"]] == ids[4:]
    assert (third["first_id"], third["last_id"], third["has_more"]) == (ids[4], ids[4], False)

    newest = page(limit=2, order="desc")
    assert [i["id"] for i in newest["data"]] == [ids[4], ids[3]]
    assert newest["has_more"] is True
    older = page(limit=3, order="desc", after=newest["last_id"])
    assert [i["id"] for i in older["data"]] == [ids[2], ids[1], ids[0]]
    assert older["has_more"] is False

    before = page(order="asc", before=ids[3])
    assert [i["id"] for i in before["data"]] == ids[:3]
    assert before["has_more"] is False
    before_desc = page(order="desc", before=ids[1])
    assert [i["id"] for i in before_desc["data"]] == [ids[4], ids[3], ids[2]]

    empty = page(order="asc", after=ids[-1])
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None,
                     "has_more": False}


def test_input_items_through_the_client(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input=FIVE)

    first_page = client.responses.input_items.list(response.id, limit=2, order="asc")
    assert [_text(i.to_dict()) for i in first_page.data] == ["d0", "u1"]
    assert first_page.has_more is True
    # the SDK's auto-pagination follows has_more / after across pages
    assert [_text(i.to_dict()) for i in first_page] == ["d0", "u1", "a2", "u3", "u4"]
    assert [_text(i.to_dict()) for i in client.responses.input_items.list(
        response.id, order="desc")] == ["u4", "u3", "a2", "u1", "d0"]


def test_input_items_bad_params(gateway: GatewayServer, client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="x")
    url = f"{gateway.base_url}/responses/{response.id}/input_items"

    for params, param in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"),
                          ({"order": "sideways"}, "order"), ({"after": "msg_nope"}, "after")):
        answer = httpx.get(url, params=params)
        assert answer.status_code == 400, params
        assert answer.json()["error"]["param"] == param
    # a long cursor is quoted clipped; an empty one is no cursor (as on conversation items)
    answer = httpx.get(url, params={"after": "msg_" + "x" * 5000})
    assert answer.status_code == 400 and len(answer.json()["error"]["message"]) < 120
    answer = httpx.get(url, params={"after": ""})
    assert answer.status_code == 200 and len(answer.json()["data"]) == 1


def test_include_on_a_read_is_checked_as_on_a_create(client: OpenAI) -> None:
    """``include`` of a retrieve or an input items list names the create's values; any other
    is OpenAI's 400 naming it (it was silently ignored), a known one is accepted."""
    response = client.responses.create(model=MODEL, input="x")
    bogus = ["reasoning.encrypted_content", "bogus"]
    for call in (lambda: client.responses.retrieve(response.id, include=bogus),
                 lambda: client.responses.input_items.list(response.id, include=bogus)):
        with pytest.raises(openai.BadRequestError) as caught:
            call()  # type: ignore[no-untyped-call]
        error = caught.value.body
        assert isinstance(error, dict)
        assert (error["param"], error["code"]) == ("include[1]", "invalid_value")
    known: Any = ["reasoning.encrypted_content"]
    assert client.responses.retrieve(response.id, include=known).id == response.id
    assert client.responses.input_items.list(response.id, include=known).data


# -- previous_response_id ------------------------------------------------------------------


def test_three_turn_chain_sends_the_whole_conversation(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    question = "chain-1 [[script:tool args='{\"city\": \"Lima\"}']] Weather in Lima?"
    # Turn 1, streamed: a function call. The next turn is sent the moment the terminal event
    # arrives, before the stream is even closed (read-your-writes).
    stream = client.responses.create(
        model=MODEL, instructions="Instructions of turn one.", input=question,
        tools=[WEATHER_TOOL], stream=True,
    )
    events = []
    for event in stream:
        events.append(event.to_dict(mode="json"))
        if event.type == "response.completed":
            break
    first = events[-1]["response"]
    [call] = first["output"]
    assert call["type"] == "function_call"

    second = client.responses.create(
        model=MODEL, previous_response_id=first["id"], tools=[WEATHER_TOOL],
        instructions="Instructions of turn two.",
        input=[{"type": "function_call_output", "call_id": call["call_id"],
                "output": "warm, 24 C"}],
    )
    stream.close()
    assert second.output_text == "Tool output: warm, 24 C"
    assert second.previous_response_id == first["id"]

    upstream.reset()
    third = client.responses.create(
        model=MODEL, previous_response_id=second.id, instructions="Instructions of turn three.",
        input="[[script:echo]] And tomorrow?",
    )
    assert third.output_text == "And tomorrow?"
    assert third.instructions == "Instructions of turn three."

    [sent] = upstream.requests
    assert sent["messages"] == [
        {"role": "system", "content": "Instructions of turn three."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [{  # generic dialect: a string
            "id": call["call_id"], "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'},
        }]},
        {"role": "tool", "tool_call_id": call["call_id"], "content": "warm, 24 C"},
        {"role": "assistant", "content": "Tool output: warm, 24 C"},
        {"role": "user", "content": "[[script:echo]] And tomorrow?"},
    ]
    assert "turn one" not in json.dumps(sent) and "turn two" not in json.dumps(sent)


def test_unknown_previous_response_id_400(client: OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL, previous_response_id="resp_unknown00000000000000", input="hi"
        )

    body = _not_found(caught.value, 400)
    assert body["code"] == "previous_response_not_found"
    assert body["param"] == "previous_response_id"
    assert caught.value.code == "previous_response_not_found"
    assert upstream.requests == []  # nothing went upstream


def test_unknown_previous_response_id_400_when_streaming(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL, previous_response_id="resp_unknown00000000000000", input="hi",
            stream=True,
        )
    assert _not_found(caught.value, 400)["code"] == "previous_response_not_found"


# -- item_reference ------------------------------------------------------------------------


def test_item_reference_resolves_output_and_input_items(
    client: OpenAI, upstream: ScriptedUpstream
) -> None:
    earlier = client.responses.create(
        model=MODEL, input='itemref-q [[script:text text="Blue is the answer."]] Which color?'
    )
    [answer] = earlier.output
    [question] = client.responses.input_items.list(earlier.id).data

    later = client.responses.create(
        model=MODEL,
        input=[
            {"type": "item_reference", "id": question.id},
            {"type": "item_reference", "id": answer.id},
            {"role": "user", "content": "itemref-next [[script:echo]] Why blue?"},
        ],
    )

    assert later.output_text == "itemref-next  Why blue?"
    sent = request_with(upstream, "itemref-next")
    assert sent["messages"] == [
        {"role": "user",
         "content": 'itemref-q [[script:text text="Blue is the answer."]] Which color?'},
        {"role": "assistant", "content": "Blue is the answer."},
        {"role": "user", "content": "itemref-next [[script:echo]] Why blue?"},
    ]


def test_unknown_item_reference_404(client: OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.reset()
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": "hi"},
                   {"type": "item_reference", "id": "msg_doesnotexist000000000000"}],
        )
    body = _not_found(caught.value)
    assert "msg_doesnotexist000000000000" in body["message"]
    assert body["param"] == "input[1]"
    assert upstream.requests == []


# -- store=false ---------------------------------------------------------------------------


def test_store_false_is_never_retrievable(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="do not keep", store=False)
    assert response.status == "completed" and response.output_text == DEFAULT_TEXT
    assert check_response(response)["store"] is False

    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(response.id)
    with pytest.raises(openai.BadRequestError) as chained:
        client.responses.create(model=MODEL, previous_response_id=response.id, input="more")
    assert chained.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(
            model=MODEL, input=[{"type": "item_reference", "id": response.output[0].id}]
        )


def test_store_false_stream_is_never_retrievable(client: OpenAI) -> None:
    events = [e.to_dict(mode="json") for e in client.responses.create(
        model=MODEL, input="do not keep the stream", store=False, stream=True
    )]
    terminal = check_stream(events).terminal["response"]
    assert terminal["status"] == "completed"

    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(terminal["id"])

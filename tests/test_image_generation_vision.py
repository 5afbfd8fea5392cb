"""A generated image goes back to a model that reads images as an image part, to others as a
text note (issue 32): in the next turn of the same response, through previous_response_id
(the image read back from the blob store), and given in the input; GATEWAY_VISION_MODELS or
the backend (Bedrock's vision families) decides. Both chat backends: the scripted Chat
Completions upstream records the chat request, the Bedrock fake the Converse request (checked
against botocore's model), with Nova Canvas drawing on the same fake endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from responses_gateway.responses.fitting.vision import configured
from responses_gateway.tools.image_generation.backends import forget_backends
from tests.helpers.converse_strict import assert_valid_converse
from tests.helpers.e2e import check_response, client_for, e2e_settings
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.image_servers import NOVA, FakeBedrockImages, colour_for, png_info
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_e2e_bedrock import bedrock_settings, converse_json, tool_use
from tests.test_image_generation import decoded, image_call

TOOLS: Any = [{"type": "image_generation"}]


def drawing(prompt: str, marker: str) -> str:
    """Instructions for the scripted model: call image_generation once, then answer quoting
    the tool outputs and naming each image it was shown (``image:<sha256[:12]>``)."""
    args = json.dumps({"prompt": prompt})
    return f"[[script:call name=image_generation args='{args}']] {marker}"


def seen(url: str) -> str:
    return "image:" + hashlib.sha256(url.encode()).hexdigest()[:12]


def image_parts(body: dict[str, Any]) -> list[str]:
    """The image URLs of the chat request's user messages."""
    return [part["image_url"]["url"] for m in body["messages"] if m["role"] == "user"
            and isinstance(m["content"], list) for part in m["content"]
            if part.get("type") == "image_url"]


def test_configured_patterns() -> None:
    patterns = ("!vision-blind", "vision-*", "gpt-4o")
    assert configured(patterns, ("vision-m", "backend-x")) is True
    assert configured(patterns, ("client", "gpt-4o")) is True  # the backend model's name
    assert configured(patterns, ("vision-blind", "")) is False  # the first match wins
    assert configured(patterns, ("m", "m")) is None


# -- Chat Completions upstream -----------------------------------------------------------------


@pytest.fixture(scope="module")
def images() -> Iterator[FakeBedrockImages]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrockImages() as fake:
            yield fake


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, images: FakeBedrockImages,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    forget_backends()
    db = tmp_path_factory.mktemp("vision") / "gateway.db"
    settings = e2e_settings(upstream, db, image_backend="bedrock", image_model=NOVA,
                            bedrock_endpoint_url=images.url, bedrock_region="us-east-1",
                            vision_models=("!vision-blind", "vision-*"))
    with GatewayServer(settings) as server:
        yield server
    forget_backends()


def requests_with(upstream: ScriptedUpstream, marker: str) -> list[dict[str, Any]]:
    return [b for b in upstream.requests if marker in json.dumps(b["messages"])]


@pytest.mark.parametrize("stream", [False, True])
def test_vision_model_sees_the_image_in_the_next_turn_and_later(
        client: OpenAI, upstream: ScriptedUpstream, gateway: GatewayServer, stream: bool
) -> None:
    marker = f"vision-turns-{stream}"
    tools: Any = [{"type": "image_generation", "output_format": "jpeg"}]
    created = client.responses.create(model="vision-m", instructions=drawing("a boat", marker),
                                      input="Draw a boat.", tools=tools, stream=stream)
    if stream:
        response = [e for e in created if e.type == "response.completed"][-1].response.to_dict()
    else:
        response = check_response(created)
    call = image_call(response)
    url = f"data:image/jpeg;base64,{call['result']}"
    first, after_tool = requests_with(upstream, marker)
    assert image_parts(first) == []
    # The next turn: the call, its note as the tool result, then the image as a user part.
    messages = after_tool["messages"]
    assert messages[-2]["role"] == "tool" and "was generated and shown" in messages[-2]["content"]
    assert messages[-1] == {"role": "user", "content": [
        {"type": "text", "text": f"Image made by {call['id']}:"},
        {"type": "image_url", "image_url": {"url": url}}]}
    assert seen(url) in response["output"][-1]["content"][0]["text"]  # what the model saw

    # A later response (previous_response_id): the image read back from the blob store.
    db = Path(gateway.settings.store.removeprefix("sqlite:"))
    [blob] = list((Path(f"{db}.blobs") / response["id"]).iterdir())
    later = check_response(client.responses.create(
        model="vision-m", input=f"[[script:text]] what is it? {marker}-2",
        previous_response_id=response["id"]))
    assert later["status"] == "completed"
    [chained] = requests_with(upstream, f"{marker}-2")
    assert image_parts(chained) == [f"data:image/jpeg;base64,{blob.read_text()}"]


def test_a_conversation_shows_its_image(client: OpenAI, upstream: ScriptedUpstream) -> None:
    conversation = client.conversations.create()
    drawn = image_call(check_response(client.responses.create(
        model="vision-m", instructions=drawing("a boat", "conv-shown-1"), input="Draw.",
        tools=TOOLS, conversation=conversation.id)))
    check_response(client.responses.create(
        model="vision-m", input="[[script:text]] conv-shown-2", conversation=conversation.id))
    [body] = requests_with(upstream, "conv-shown-2")
    assert image_parts(body) == [f"data:image/png;base64,{drawn['result']}"]


def test_a_model_that_does_not_read_images_gets_the_note(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    for model in ("m", "vision-blind"):
        marker = f"blind-{model}"
        response = check_response(client.responses.create(
            model=model, instructions=drawing("a boat", marker), input="Draw a boat.",
            tools=TOOLS))
        assert image_call(response)["status"] == "completed"
        for body in requests_with(upstream, marker):
            assert image_parts(body) == []
        last = requests_with(upstream, marker)[-1]["messages"][-1]
        assert last["role"] == "tool" and "was generated and shown" in last["content"]


def test_an_image_generation_call_in_the_input_is_shown(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    """Stateless: the client sends the earlier call back; a failed one is a note only."""
    earlier = image_call(check_response(client.responses.create(
        model="vision-m", instructions=drawing("a lighthouse", "input-shown-1"),
        input="Draw.", tools=TOOLS)))
    failed = {"id": "ig_failed", "type": "image_generation_call", "status": "failed",
              "result": None, "error": {"code": "moderation_blocked", "message": "refused"}}
    check_response(client.responses.create(
        model="vision-m", store=False, tools=TOOLS,
        input=[{"role": "user", "content": "draw a lighthouse"}, earlier, failed,
               {"role": "user", "content": "[[script:text]] input-shown-2"}]))
    [body] = requests_with(upstream, "input-shown-2")
    assert image_parts(body) == [f"data:image/png;base64,{earlier['result']}"]
    notes = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    assert notes[1] == "No image was made: refused"


def test_fitting_counts_the_image(client: OpenAI, gateway: GatewayServer) -> None:
    """input_tokens (the fitting's render and count) counts the image part a vision model
    is sent: one image more than the note alone."""
    from responses_gateway.token_estimate import MEDIA_TOKENS

    response = check_response(client.responses.create(
        model="vision-m", instructions=drawing("a boat", "count-1"), input="Draw.",
        tools=TOOLS))
    counts = {}
    for model in ("vision-m", "vision-blind"):
        answer = httpx.post(f"{gateway.base_url}/responses/input_tokens", json={
            "model": model, "input": "what is it?", "previous_response_id": response["id"]},
            headers={"Authorization": "Bearer sk-test"}, timeout=30)
        assert answer.status_code == 200, answer.text
        counts[model] = answer.json()["input_tokens"]
    assert MEDIA_TOKENS <= counts["vision-m"] - counts["vision-blind"] < MEDIA_TOKENS + 100


# -- Bedrock Converse ---------------------------------------------------------------------------

LITE = "us.amazon.nova-lite-v1:0"  # reads images (Bedrock's model card)
MICRO = "us.amazon.nova-micro-v1:0"  # text only


@pytest.fixture(scope="module")
def bedrock() -> Iterator[FakeBedrock]:
    """Converse for the chat models and InvokeModel for Nova Canvas, on one fake endpoint."""
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with FakeBedrock() as fake:
            canvas = FakeBedrockImages()
            fake.answer_with(NOVA, lambda body: canvas.answer(NOVA, body))
            for model in (LITE, MICRO):
                fake.answer_with(model, _chat_model)
            yield fake


def _chat_model(body: dict[str, Any]) -> dict[str, Any]:
    """Draws once, then answers naming what it was shown."""
    blocks = [b for m in body["messages"] for b in m["content"]]
    if not any("toolResult" in b for b in blocks):
        return converse_json(tool_use("tooluse_draw1", "image_generation",
                                      {"prompt": "a lighthouse"}), stop="tool_use")
    shown = [b["image"]["format"] for b in blocks if "image" in b]
    return converse_json({"text": f"I was shown: {shown}"})


@pytest.fixture(scope="module")
def bedrock_client(bedrock: FakeBedrock, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[OpenAI]:
    forget_backends()
    db = tmp_path_factory.mktemp("vision-bedrock") / "gateway.db"
    settings = bedrock_settings(bedrock, db, image_backend="bedrock", image_model=NOVA,
                                image_timeout=10.0)
    with GatewayServer(settings) as server, client_for(server) as c:
        yield c
    forget_backends()


@pytest.mark.parametrize(("model", "reads"), [(LITE, True), (MICRO, False)])
def test_bedrock_vision_model_gets_an_image_block(
        bedrock_client: OpenAI, bedrock: FakeBedrock, model: str, reads: bool) -> None:
    with bedrock.lock:
        bedrock.requests.clear()
    response = check_response(bedrock_client.responses.create(
        model=model, input="Draw a lighthouse.", tools=TOOLS))
    call = image_call(response)
    assert png_info(base64.b64decode(call["result"]))[2] == colour_for("a lighthouse")
    answer = response["output"][-1]["content"][0]["text"]
    assert answer == ("I was shown: ['png']" if reads else "I was shown: []")
    _, after_tool = bedrock.requests_for(model)
    assert_valid_converse(after_tool.body, after_tool.operation)
    last = after_tool.body["messages"][-1]
    assert last["role"] == "user" and last["content"][0]["toolResult"]["toolUseId"] == call["id"]
    images = [b["image"] for b in last["content"] if "image" in b]
    if reads:
        assert images == [{"format": "png", "source": {"bytes": call["result"]}}]
        assert decoded(images[0]["source"]["bytes"])[0] == "PNG"
    else:
        assert images == []

    # Chained: the stored image goes back to the vision model again.
    with bedrock.lock:
        bedrock.requests.clear()
    check_response(bedrock_client.responses.create(
        model=model, input="What was it?", tools=TOOLS, previous_response_id=response["id"]))
    [chained] = bedrock.requests_for(model)
    assert_valid_converse(chained.body, chained.operation)
    blocks = [b for m in chained.body["messages"] for b in m["content"]]
    assert [b["image"]["source"]["bytes"] for b in blocks if "image" in b] == (
        [call["result"]] if reads else [])


def _noise_png(width: int, height: int) -> bytes:
    import io
    import os

    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("big", [True, False])
def test_bedrock_gets_a_large_generated_image_within_its_limits(
        bedrock_client: OpenAI, bedrock: FakeBedrock, big: bool) -> None:
    """Converse refuses an image over 3.75 MB: a large generated PNG goes to the vision model
    re-encoded (JPEG, same aspect ratio), in the next turn and chained; a small one as made."""
    from responses_gateway.backends.bedrock.media import MAX_IMAGE_BYTES

    drawn = _noise_png(1600, 1200) if big else _noise_png(160, 120)
    assert (len(drawn) > MAX_IMAGE_BYTES) is big
    with bedrock.lock:
        bedrock.requests.clear()
    bedrock.answer_with(NOVA, lambda body: {
        "images": [base64.b64encode(drawn).decode()], "error": None})
    try:
        response = check_response(bedrock_client.responses.create(
            model=LITE, input="Draw noise.", tools=TOOLS))
        call = image_call(response)
        assert base64.b64decode(call["result"]) == drawn  # the client gets the image as made
        check_response(bedrock_client.responses.create(
            model=LITE, input="What was it?", previous_response_id=response["id"]))
    finally:
        canvas = FakeBedrockImages()
        bedrock.answer_with(NOVA, lambda body: canvas.answer(NOVA, body))
    _, after_tool, chained = bedrock.requests_for(LITE)
    for request in (after_tool, chained):
        assert_valid_converse(request.body, request.operation)
        [image] = [b["image"] for m in request.body["messages"] for b in m["content"]
                   if "image" in b]
        sent = image["source"]["bytes"]
        if not big:
            assert image == {"format": "png", "source": {"bytes": call["result"]}}
            continue
        assert image["format"] == "jpeg"
        assert len(base64.b64decode(sent)) <= MAX_IMAGE_BYTES
        kind, (width, height) = decoded(sent)
        assert kind == "JPEG" and abs(width / height - 4 / 3) < 0.01
    assert response["output"][-1]["content"][0]["text"] == (
        "I was shown: ['jpeg']" if big else "I was shown: ['png']")


@pytest.mark.slow
def test_only_a_generated_image_is_refitted() -> None:
    """The same large PNG: as a generated image (the line to_chat.py puts before it) it is
    re-encoded; as the user's own image it goes as sent (Bedrock's answer stands). An image
    over 8000 px a side is scaled down to 8000."""
    from responses_gateway.backends.bedrock.media import MAX_IMAGE_SIDE, fit_generated
    from responses_gateway.backends.bedrock.request import build_converse_request

    big = _noise_png(1400, 1400)
    url = "data:image/png;base64," + base64.b64encode(big).decode()
    image = {"type": "image_url", "image_url": {"url": url}}

    def sent(intro: str) -> bytes:
        kwargs = build_converse_request({"model": LITE, "messages": [{"role": "user", "content": [
            {"type": "text", "text": intro}, image]}]}).kwargs
        [block] = [b["image"] for b in kwargs["messages"][0]["content"] if "image" in b]
        return bytes(block["source"]["bytes"])

    assert sent("Here is my photo:") == big
    refitted = sent("Image made by ig_123:")
    assert refitted.startswith(b"\xff\xd8\xff") and len(refitted) < len(big)

    wide = _noise_png(9000, 20)
    data, declared = fit_generated(wide, "image/png")
    assert declared == "image/jpeg"
    kind, size = decoded(base64.b64encode(data).decode())
    assert kind == "JPEG" and size == (MAX_IMAGE_SIDE, 18)

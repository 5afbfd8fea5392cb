"""image_generation run by the gateway (issue 32), end to end through openai-python: the
scripted chat model calls the ``image_generation`` function, the gateway draws with Amazon
Nova Canvas on a local InvokeModel endpoint (strict request checks) or with a local
OpenAI-compatible images server, and the client gets an ``image_generation_call`` with a real
PNG. Every streamed event is validated (SDK models, stream grammar).

"draw a lighthouse, then make it night": the second turn (previous_response_id) edits the
first image, which the fakes' colours make visible (tests/helpers/image_servers.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from responses_gateway.tools.image_generation.backends import forget_backends
from tests.helpers.cache_lock import held, put
from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.image_servers import (
    NOVA,
    TITAN,
    FakeBedrockImages,
    FakeImagesServer,
    colour_for,
    colour_of,
    png,
    png_info,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true",
}
IMAGE_KEY = "sk-image-server-secret-123456"
# What OpenAI's responses carry before any hosted tool ran (a gpt-5.5 recording: every family
# reported, with zero counts).
ZERO_TOOL_USAGE = {
    "image_gen": {
        "input_tokens": 0, "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "output_tokens": 0, "output_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "total_tokens": 0},
    "web_search": {"num_requests": 0},
}


@pytest.fixture(scope="module")
def bedrock_images() -> Iterator[FakeBedrockImages]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in DUMMY_AWS.items():
            mp.setenv(name, value)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK",
                     "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        with FakeBedrockImages() as fake:
            yield fake


@pytest.fixture(scope="module")
def images_server() -> Iterator[FakeImagesServer]:
    with FakeImagesServer(api_key=IMAGE_KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, bedrock_images: FakeBedrockImages,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    forget_backends()
    db = tmp_path_factory.mktemp("images") / "gateway.db"
    settings = e2e_settings(upstream, db, image_backend="bedrock", image_model=NOVA,
                            bedrock_endpoint_url=bedrock_images.url, bedrock_region="us-east-1",
                            image_timeout=10.0)
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def openai_gateway(upstream: ScriptedUpstream, images_server: FakeImagesServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("images-openai") / "gateway.db"
    settings = e2e_settings(upstream, db, image_backend="openai",
                            image_url=images_server.base_url, image_api_key=IMAGE_KEY,
                            image_model="gpt-image-1", image_timeout=10.0)
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def openai_client(openai_gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(openai_gateway) as c:
        yield c


def draw(prompt: str, marker: str, *, edit: bool | None = None) -> str:
    args: dict[str, Any] = {"prompt": prompt}
    if edit is not None:
        args["edit"] = edit
    return f"[[script:tool names=image_generation args='{json.dumps(args)}']] {marker}"


def image_call(response: dict[str, Any]) -> dict[str, Any]:
    [call] = [i for i in response["output"] if i["type"] == "image_generation_call"]
    return call


def decoded(b64: str) -> tuple[str, tuple[int, int]]:
    """(Pillow's format name, size) of a base64 image: what a client decoding it gets."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(b64))) as image:
        image.load()
        return str(image.format), image.size


# -- Bedrock (Nova Canvas) ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False])
def test_draw_then_make_it_night(client: OpenAI, upstream: ScriptedUpstream,
                                 bedrock_images: FakeBedrockImages, stream: bool) -> None:
    tools: Any = [{"type": "image_generation", "size": "1024x1536", "quality": "high"}]
    marker = f"lighthouse-{stream}"
    if stream:
        events = sdk_events(client.responses.create(
            model="m", input=draw("a lighthouse", marker), tools=tools, stream=True))
        check_stream(events)
        kinds = [e["type"] for e in events if "image_generation_call" in e["type"]]
        assert kinds == ["response.image_generation_call.in_progress",
                         "response.image_generation_call.generating",
                         "response.image_generation_call.completed"]  # no partials on Bedrock
        first = events[-1]["response"]
    else:
        first = check_response(client.responses.create(
            model="m", input=draw("a lighthouse", marker), tools=tools))
    assert [i["type"] for i in first["output"]] == ["image_generation_call", "message"]
    call = image_call(first)
    assert call["id"].startswith("ig_") and call["status"] == "completed"
    assert (call["size"], call["quality"], call["output_format"], call["background"],
            call["action"]) == ("1024x1536", "high", "png", "opaque", "generate")
    assert call["revised_prompt"] == "a lighthouse"
    # Bedrock's image models report no tokens: the call counts none (OpenAI's zeros stay).
    assert first["tool_usage"] == ZERO_TOOL_USAGE
    width, height, colour = png_info(base64.b64decode(call["result"]))
    assert (width, height, colour) == (1024, 1536, colour_for("a lighthouse"))
    sent = bedrock_images.invocations[-1]
    assert sent.model_id == NOVA and sent.body == {
        "taskType": "TEXT_IMAGE", "textToImageParams": {"text": "a lighthouse"},
        "imageGenerationConfig": {"numberOfImages": 1, "width": 1024, "height": 1536,
                                  "quality": "premium"}}
    # The model read a note, not the image, and answered after it.
    second = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    assert second["messages"][-1]["role"] == "tool"
    assert "was generated and shown to the user" in second["messages"][-1]["content"]
    assert [t["function"]["name"] for t in second["tools"]] == ["image_generation"]

    # Turn two: "make it night" edits the first image (an image variation with the prompt).
    night = check_response(client.responses.create(
        model="m", input=draw("make it night", f"night-{stream}", edit=True),
        tools=tools, previous_response_id=first["id"]))
    edited = image_call(night)
    assert edited["action"] == "edit" and edited["status"] == "completed"
    sent = bedrock_images.invocations[-1].body
    assert sent["taskType"] == "IMAGE_VARIATION"
    assert sent["imageVariationParams"]["images"] == [call["result"]]
    assert colour_of(edited["result"]) == colour_for("make it night", colour)
    # Both stored, whole: retrieve returns the images exactly as first sent.
    assert client.responses.retrieve(first["id"]).to_dict()["output"][0]["result"] == (
        call["result"])
    assert image_call(client.responses.retrieve(night["id"]).to_dict())["result"] == (
        edited["result"])


def test_refused_parameters_are_400_naming_them(client: OpenAI) -> None:
    import openai

    for tool, param in (
        ({"type": "image_generation", "output_format": "gif"}, "tools[0].output_format"),
        ({"type": "image_generation", "output_compression": 50}, "tools[0].output_compression"),
        ({"type": "image_generation", "background": "transparent"}, "tools[0].background"),
        ({"type": "image_generation", "background": "transparent", "output_format": "webp"},
         "tools[0].background"),
        ({"type": "image_generation", "size": "1000x1000"}, "tools[0].size"),
        ({"type": "image_generation", "quality": "ultra"}, "tools[0].quality"),
        ({"type": "image_generation", "partial_images": 4}, "tools[0].partial_images"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="hi", tools=[tool])
        assert caught.value.body["param"] == param, caught.value.body  # type: ignore[index]


@pytest.mark.parametrize(("field", "value", "code", "message"), [
    # a wrong JSON type was quoted by Python (True, [], {}) or named by its class (bool, str)
    ("quality", True, "invalid_type", "Invalid type for 'tools[0].quality': expected one of "
     "'low', 'medium', 'high', 'xhigh', 'max', or 'auto', but got a boolean instead."),
    ("action", {}, "invalid_type", "Invalid type for 'tools[0].action': expected one of "
     "'generate', 'edit', or 'auto', but got an object instead."),
    ("moderation", "none", "invalid_value",
     "Invalid value: 'none'. Supported values are: 'auto' and 'low'."),
    ("output_compression", "50", "invalid_type", "Invalid type for "
     "'tools[0].output_compression': expected an integer, but got a string instead."),
    ("partial_images", 4, "integer_out_of_range", "Invalid 'tools[0].partial_images': integer "
     "below minimum value or above maximum value. Expected a value between 0 and 3, but got 4 "
     "instead."),
    ("size", True, "invalid_type",
     "Invalid type for 'tools[0].size': expected a string, but got a boolean instead."),
    # not checked at all: any value was accepted and dropped
    ("input_fidelity", "medium", "invalid_value",
     "Invalid value: 'medium'. Supported values are: 'high' and 'low'."),
    ("model", 1, "invalid_type",
     "Invalid type for 'tools[0].model': expected a string, but got an integer instead."),
    # the Images API refuses what no backend honours; the tool took it and dropped it
    ("svg", {"model": "m"}, "unsupported_value", "Invalid value for 'tools[0].svg': an object "
     "is not supported by this gateway's image backend."),
    ("frame_count", 3, "unsupported_value", "Invalid value for 'tools[0].frame_count': an "
     "integer is not supported by this gateway's image backend."),
    ("input_image_mask", {"image_url": 5}, "invalid_type", "Invalid type for "
     "'tools[0].input_image_mask.image_url': expected a string, but got an integer instead."),
])
def test_tool_mistakes_in_openais_words(client: OpenAI, field: str, value: Any, code: str,
                                        message: str) -> None:
    import openai

    field_param = f"tools[0].{field}" + (".image_url" if field == "input_image_mask" else "")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="hi",
                                tools=[{"type": "image_generation", field: value}])
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"], error["message"]) == (field_param, code, message)


def test_bedrock_png_converted_to_the_format_asked(client: OpenAI,
                                                  bedrock_images: FakeBedrockImages) -> None:
    """Nova Canvas makes PNG; the client gets the JPEG or WebP it asked for, with
    output_compression as the quality, and an edit of a WebP sends Bedrock a PNG."""
    results = {}
    for fmt, compression in (("jpeg", 90), ("jpeg", 10), ("webp", 80)):
        tools: Any = [{"type": "image_generation", "size": "1024x1536", "output_format": fmt,
                       "output_compression": compression}]
        response = check_response(client.responses.create(
            model="m", input=draw("a lighthouse", f"fmt-{fmt}-{compression}"), tools=tools))
        call = image_call(response)
        assert call["status"] == "completed" and call["output_format"] == fmt
        assert decoded(call["result"]) == (fmt.upper(), (1024, 1536))
        results[fmt, compression] = (response["id"], call["result"])
    assert len(results["jpeg", 10][1]) < len(results["jpeg", 90][1])  # quality followed
    night = check_response(client.responses.create(
        model="m", input=draw("make it night", "fmt-night", edit=True),
        tools=[{"type": "image_generation", "output_format": "webp", "size": "1024x1536"}],
        previous_response_id=results["webp", 80][0]))
    assert image_call(night)["action"] == "edit"
    sent = bedrock_images.invocations[-1].body["imageVariationParams"]["images"][0]
    assert decoded(sent) == ("PNG", (1024, 1536))
    assert decoded(image_call(night)["result"])[0] == "WEBP"


@pytest.mark.parametrize(("script", "code"), [
    ("filter", "moderation_blocked"),
    ("throttle", "rate_limit_exceeded"),
])
def test_failures_are_a_failed_call_not_a_failed_response(
        client: OpenAI, bedrock_images: FakeBedrockImages, script: str, code: str) -> None:
    prompt = "a forbidden thing" if script == "filter" else "a lighthouse"
    if script == "throttle":
        bedrock_images.error(429, "ThrottlingException", "Too many requests", times=3)
    events = sdk_events(client.responses.create(
        model="m", input=draw(prompt, f"fail-{script}"),
        tools=[{"type": "image_generation"}], stream=True))
    check_stream(events)
    response = events[-1]["response"]
    assert response["status"] == "completed"
    call = image_call(response)
    assert call["status"] == "failed" and call["result"] is None
    assert call["error"]["code"] == code
    bedrock_images.errors.clear()


def test_titan_sizes(bedrock_images: FakeBedrockImages) -> None:
    """Titan Image Generator v2 speaks the same body; its sizes are a list."""
    import asyncio

    from responses_gateway.errors import GatewayError
    from responses_gateway.tools.image_generation.backends.base import Drawing
    from responses_gateway.tools.image_generation.backends.bedrock import BedrockImages
    from responses_gateway.tools.image_generation.params import ImageParams

    backend = BedrockImages(TITAN, region="us-east-1", endpoint_url=bedrock_images.url)
    with pytest.raises(GatewayError) as caught:
        backend.check(ImageParams.of({"size": "1024x1536"}, "tools[1]"), editing=False)
    assert caught.value.param == "tools[1].size"
    params = ImageParams.of({"size": "1152x768"}, "tools[0]")
    backend.check(params, editing=False)

    async def one() -> Any:
        return [step async for step in backend.draw(Drawing("a boat", params))]

    [drawn] = asyncio.run(one())
    assert png_info(base64.b64decode(drawn.b64))[:2] == (1152, 768)
    assert bedrock_images.invocations[-1].model_id == TITAN


# -- an OpenAI-compatible images server ----------------------------------------------------------


def test_openai_server_partial_images_and_edit(openai_client: OpenAI,
                                               images_server: FakeImagesServer) -> None:
    tools: Any = [{"type": "image_generation", "partial_images": 2, "output_format": "png"}]
    events = sdk_events(openai_client.responses.create(
        model="m", input=draw("a lighthouse", "oa-1"), tools=tools, stream=True))
    check_stream(events)
    partials = [e for e in events if e["type"] == "response.image_generation_call.partial_image"]
    assert [p["partial_image_index"] for p in partials] == [0, 1]
    assert all(png_info(base64.b64decode(p["partial_image_b64"]))[0] == 16 for p in partials)
    first = events[-1]["response"]
    call = image_call(first)
    assert call["status"] == "completed" and call["size"] == "1024x1024"
    assert events[0]["response"]["tool_usage"] == ZERO_TOOL_USAGE  # response.created
    # The image server's tokens, as its completed event reported them; no web search.
    assert first["tool_usage"] == {
        "image_gen": {"input_tokens": 5, "input_tokens_details": {"image_tokens": 0,
                                                                  "text_tokens": 0},
                      "output_tokens": 100, "output_tokens_details": {"image_tokens": 0,
                                                                      "text_tokens": 0},
                      "total_tokens": 105},
        "web_search": {"num_requests": 0}}
    sent = images_server.calls[-1]
    assert sent.path == "/v1/images/generations"
    assert sent.headers["Authorization"] == f"Bearer {IMAGE_KEY}"
    assert sent.fields["stream"] is True and sent.fields["partial_images"] == 2

    night = check_response(openai_client.responses.create(
        model="m", input=draw("make it night", "oa-2", edit=True),
        tools=[{"type": "image_generation"}], previous_response_id=first["id"]))
    edited = image_call(night)
    usage = night["tool_usage"]["image_gen"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"],
            usage["input_tokens_details"]) == (7, 100, 107, {"image_tokens": 2,
                                                            "text_tokens": 5})
    sent = images_server.calls[-1]
    assert sent.path == "/v1/images/edits"
    assert sent.files["image"] == base64.b64decode(call["result"])
    assert edited["revised_prompt"] == "Revised: make it night"
    assert colour_of(edited["result"]) == colour_for("make it night",
                                                     colour_of(call["result"]))


def test_openai_server_errors_are_redacted(openai_client: OpenAI,
                                           images_server: FakeImagesServer) -> None:
    images_server.errors.append((401, {"message": f"Incorrect API key provided: {IMAGE_KEY}",
                                       "type": "invalid_request_error",
                                       "code": "invalid_api_key"}))
    response = check_response(openai_client.responses.create(
        model="m", input=draw("a lighthouse", "oa-err"), tools=[{"type": "image_generation"}]))
    call = image_call(response)
    assert call["status"] == "failed" and call["error"]["code"] == "invalid_api_key"
    assert IMAGE_KEY not in json.dumps(response)
    assert "[redacted]" in call["error"]["message"]


def test_images_live_beside_the_sqlite_file(client: OpenAI, gateway: GatewayServer) -> None:
    response = check_response(client.responses.create(
        model="m", input=draw("a lighthouse", "blob-1"), tools=[{"type": "image_generation"}]))
    result = image_call(response)["result"]
    db = Path(gateway.settings.store.removeprefix("sqlite:"))
    assert result.encode() not in db.read_bytes()  # the record holds a reference
    blobs = list(Path(f"{db}.blobs").rglob("*"))
    assert any(p.is_file() and p.read_bytes() == result.encode() for p in blobs)
    # DELETE /v1/responses/{id} deletes its image files too.
    mine = Path(f"{db}.blobs") / response["id"]
    assert [p.read_bytes() for p in mine.iterdir()] == [result.encode()]
    client.responses.delete(response["id"])
    assert not mine.exists()


# -- the Agents SDK --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_image_generation_tool(gateway: GatewayServer, stream: bool) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")
    import asyncio

    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=gateway.base_url, api_key="sk-test", max_retries=0)
    agent = agents.Agent(
        name="painter", instructions="Draw what you are asked.",
        tools=[agents.ImageGenerationTool(tool_config={"type": "image_generation",
                                                       "quality": "low"})],
        model=agents.OpenAIResponsesModel(model="m", openai_client=client))
    prompt = draw("a lighthouse", f"agents-{stream}")

    async def run() -> Any:
        if not stream:
            return await agents.Runner.run(agent, prompt)
        result = agents.Runner.run_streamed(agent, prompt)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    calls = [item.raw_item for item in result.new_items
             if getattr(item.raw_item, "type", None) == "image_generation_call"]
    assert len(calls) == 1 and calls[0].status == "completed"
    assert png_info(base64.b64decode(calls[0].result))[:2] == (1024, 1024)
    assert "was generated and shown to the user" in result.final_output


def test_mask_inpaints_on_bedrock(client: OpenAI, bedrock_images: FakeBedrockImages) -> None:
    """OpenAI's mask (transparent = change) reaches Bedrock as its maskImage (black =
    change), with the image from the previous response."""
    from tests.helpers.image_servers import grey_rows, rgba_png

    first = check_response(client.responses.create(
        model="m", input=draw("a lighthouse", "mask-1"), tools=[{"type": "image_generation"}]))
    mask = "data:image/png;base64," + base64.b64encode(rgba_png(64, 64, 16)).decode()
    night = check_response(client.responses.create(
        model="m", input=draw("a night sky", "mask-2", edit=True),
        tools=[{"type": "image_generation", "input_image_mask": {"image_url": mask}}],
        previous_response_id=first["id"]))
    assert image_call(night)["status"] == "completed"
    sent = bedrock_images.invocations[-1].body
    assert sent["taskType"] == "INPAINTING"
    assert sent["inPaintingParams"]["image"] == image_call(first)["result"]
    rows = grey_rows(base64.b64decode(sent["inPaintingParams"]["maskImage"]))
    assert rows[0] == bytes(64) and rows[15] == bytes(64)  # black: the area to change
    assert rows[16] == b"\xff" * 64 and rows[63] == b"\xff" * 64


def test_mask_is_converted_off_the_event_loop(client: OpenAI, bedrock_images: FakeBedrockImages,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Pillow decodes the client's mask in a worker thread, not on the event loop."""
    import asyncio

    from responses_gateway.tools.image_generation.backends import bedrock, masks
    from tests.helpers.image_servers import rgba_png

    on_loop: list[bool] = []

    def watched(data: bytes) -> bytes:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return masks.bedrock_mask(data)

    monkeypatch.setattr(bedrock, "bedrock_mask", watched)
    first = check_response(client.responses.create(
        model="m", input=draw("a lighthouse", "thread-1"), tools=[{"type": "image_generation"}]))
    mask = "data:image/png;base64," + base64.b64encode(rgba_png(32, 32, 8)).decode()
    edited = check_response(client.responses.create(
        model="m", input=draw("a night sky", "thread-2", edit=True),
        tools=[{"type": "image_generation", "input_image_mask": {"image_url": mask}}],
        previous_response_id=first["id"]))
    assert image_call(edited)["status"] == "completed"
    assert on_loop == [False]


def _pillow_png(mode: str, size: tuple[int, int], pixel: Any) -> bytes:
    import io

    from PIL import Image

    image = Image.new(mode, size, pixel)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_mask_conversion_reads_any_png_with_alpha() -> None:
    """Masks as image editors write them (Pillow: adaptive filters; grey + alpha) become
    Bedrock's black-and-white mask; a mask without alpha is passed on as it is."""
    import io

    from PIL import Image

    from responses_gateway.tools.image_generation.backends.masks import bedrock_mask
    from tests.helpers.image_servers import grey_rows

    image = Image.new("RGBA", (40, 20), (10, 20, 30, 255))
    for x in range(40):
        for y in range(20):
            if (x * 7 + y * 3) % 5 == 0:
                image.putpixel((x, y), (x, y, 3, 0))  # transparent, varied colour
            elif x % 3 == 0:
                image.putpixel((x, y), (0, 0, 0, 1 + x))  # barely opaque: kept
    out = io.BytesIO()
    image.save(out, "PNG")
    rows = grey_rows(bedrock_mask(out.getvalue()))
    for y in range(20):
        assert rows[y] == bytes(0 if (x * 7 + y * 3) % 5 == 0 else 255 for x in range(40))
    grey = grey_rows(bedrock_mask(_pillow_png("LA", (8, 4), (200, 0))))
    assert grey == [bytes(8)] * 4
    opaque = _pillow_png("RGB", (8, 4), (255, 255, 255))
    assert bedrock_mask(opaque) is opaque


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    import struct
    import zlib

    return (struct.pack("!I", len(body)) + kind + body
            + struct.pack("!I", zlib.crc32(kind + body) & 0xFFFFFFFF))


_RGBA_16 = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", bytes.fromhex("00000010000000100806000000"))


@pytest.mark.parametrize(("data", "words"), [
    (b"GIF89a" + bytes(40), "not a PNG image"),
    (_RGBA_16 + _png_chunk(b"IDAT", b"not zlib data") + _png_chunk(b"IEND", b""), "corrupt"),
    (_RGBA_16 + _png_chunk(b"IEND", b""), "corrupt"),
])
def test_bad_masks_are_invalid_mask(data: bytes, words: str) -> None:
    from responses_gateway.tools.image_generation.backends.base import ImageFailure
    from responses_gateway.tools.image_generation.backends.masks import bedrock_mask

    with pytest.raises(ImageFailure) as caught:
        bedrock_mask(data)
    assert caught.value.code == "invalid_mask" and words in str(caught.value)


def test_a_mask_larger_than_bedrock_reads_is_refused_before_decoding() -> None:
    """Its header is enough: a small file that claims 100 million pixels is never inflated."""
    import struct
    import zlib

    from responses_gateway.tools.image_generation.backends.base import ImageFailure
    from responses_gateway.tools.image_generation.backends.masks import bedrock_mask

    header = struct.pack("!IIBBBBB", 10_000, 10_000, 8, 6, 0, 0, 0)
    bomb = (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(bytes(4096))) + _png_chunk(b"IEND", b""))
    with pytest.raises(ImageFailure) as caught:
        bedrock_mask(bomb)
    assert caught.value.code == "invalid_mask"
    assert "10000x10000 pixels" in str(caught.value)


@pytest.mark.parametrize(("model", "body", "words"), [
    # the gateway's old spelling of AWS's inPaintingParams (issue 40)
    (NOVA, {"taskType": "INPAINTING", "inpaintingParams": {"image": "QQ==", "maskImage": "QQ=="}},
     "schema violations found"),
    (NOVA, {"taskType": "INPAINTING",
            "inPaintingParams": {"image": "QQ==", "maskImage": "QQ==", "maskPrompt": "sky"}},
     "#/inPaintingParams: 2 subschemas matched instead of one"),
    (TITAN, {"taskType": "TEXT_IMAGE", "textToImageParams": {"text": "x"},
             "imageGenerationConfig": {"width": "1024"}},
     "#/imageGenerationConfig/width: expected type: Integer, found: String"),
    (NOVA, {"taskType": "TEXT_IMAGE", "textToImageParams": {"text": "x"},
            "imageVariationParams": {"images": ["QQ=="]}},
     "#: extraneous key [imageVariationParams] is not permitted"),
    (TITAN, {"taskType": "TEXT_IMAGE", "textToImageParams": {"text": "x", "style": "MAXIMALISM"}},
     "#/textToImageParams: extraneous key [style] is not permitted"),  # Nova Canvas' only
    (NOVA, {"taskType": "OUTPAINTING", "outPaintingParams": {
        "image": "QQ==", "text": "x", "maskPrompt": "dog", "outPaintingMode": "WIDE"}},
     "#/outPaintingParams/outPaintingMode: WIDE is not a valid enum value"),
    ("stability.sd3-5-large-v1:0", {"prompt": "x", "mode": "image-to-image", "image": "QQ==",
                                    "strength": 0.5, "aspect_ratio": "1:1"},
     "#: extraneous key [aspect_ratio] is not permitted"),
    ("stability.stable-image-core-v1:1", {"prompt": "x", "mode": "image-to-image"},
     "#: extraneous key [mode] is not permitted"),
])
def test_the_fake_refuses_what_bedrock_refuses(bedrock_images: FakeBedrockImages, model: str,
                                               body: dict[str, Any], words: str) -> None:
    """The fake's rules are AWS's documented request schemas: a body Bedrock refuses is a
    ValidationException (HTTP 400) in Bedrock's words, through boto3 as the gateway calls it."""
    import boto3
    from botocore.exceptions import ClientError

    client = boto3.client("bedrock-runtime", region_name="us-east-1",
                          endpoint_url=bedrock_images.url)
    with pytest.raises(ClientError) as caught:
        client.invoke_model(modelId=model, body=json.dumps(body))
    error = caught.value.response["Error"]
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ValidationException"
    assert error["Message"].startswith("Malformed input request: ")
    assert words in error["Message"]


def test_stability_on_bedrock(bedrock_images: FakeBedrockImages) -> None:
    """Stability's body: sizes as aspect ratios, SD3.5 Large edits (image-to-image), the
    content filter as a finish reason; Core neither edits nor takes a mask."""
    import asyncio

    from responses_gateway.config import Settings
    from responses_gateway.errors import GatewayError
    from responses_gateway.tools.image_generation.backends import forget_backends, image_backend
    from responses_gateway.tools.image_generation.backends.base import Drawing, ImageFailure
    from responses_gateway.tools.image_generation.params import ImageParams
    from tests.helpers.image_servers import STABILITY_SD35

    def backend(model: str) -> Any:
        forget_backends()
        return image_backend(Settings(
            image_backend="bedrock", image_model=model, bedrock_region="us-east-1",
            bedrock_endpoint_url=bedrock_images.url))

    async def steps(b: Any, drawing: Drawing) -> Any:
        return [step async for step in b.draw(drawing)]

    sd35 = backend(STABILITY_SD35)
    params = ImageParams.of({"size": "1536x1024", "output_format": "jpeg"}, "tools[0]")
    sd35.check(params, editing=False)
    [drawn] = asyncio.run(steps(sd35, Drawing("a lighthouse", params)))
    # PNG asked (its header gives the pixels Stability chose), converted to the JPEG asked
    assert bedrock_images.invocations[-1].body == {
        "prompt": "a lighthouse", "output_format": "png", "aspect_ratio": "3:2"}
    assert drawn.size == "1216x832" and drawn.output_format == "jpeg"
    assert decoded(drawn.b64) == ("JPEG", (1216, 832))
    png_params = ImageParams.of({"size": "1536x1024"}, "tools[0]")
    [source_drawn] = asyncio.run(steps(sd35, Drawing("a lighthouse", png_params)))
    source = base64.b64decode(source_drawn.b64)
    [edited] = asyncio.run(steps(sd35, Drawing("make it night", png_params, image=source)))
    sent = bedrock_images.invocations[-1].body
    assert sent["mode"] == "image-to-image" and base64.b64decode(sent["image"]) == source
    assert colour_of(edited.b64) == colour_for("night", png_info(source)[2])
    # An earlier JPEG edited: the model is sent it as PNG.
    asyncio.run(steps(sd35, Drawing("make it night", params, image=base64.b64decode(drawn.b64))))
    assert decoded(bedrock_images.invocations[-1].body["image"])[0] == "PNG"
    with pytest.raises(ImageFailure) as caught:
        asyncio.run(steps(sd35, Drawing("a forbidden thing", params)))
    assert caught.value.code == "moderation_blocked"

    core = backend("stability.stable-image-core-v1:1")
    assert not core.edits and sd35.edits
    for fields, param in (({"action": "edit"}, "action"), ({"size": "1000x999"}, "size"),
                          ({"output_format": "svg"}, "output_format"),
                          ({"input_image_mask": {"image_url": "data:image/png;base64,iVBO"}},
                           "input_image_mask")):
        with pytest.raises(GatewayError) as refused:
            core.check(ImageParams.of(fields, "tools[2]"), editing=False)
        assert refused.value.param == f"tools[2].{param}"


# -- the Vercel AI SDK -------------------------------------------------------------------------

AI_SDK_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "npm-ai-sdk"
AI_SDK_PACKAGES = ("ai@5.0.277", "@ai-sdk/openai@2.0.131")
AI_SDK_SCRIPT = r"""
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";
const [baseURL, prompt, mode] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "sk-test" });
const tools = {
  image_generation: openai.tools.imageGeneration({ outputFormat: "png", quality: "low" }),
};
const seen = (p) => ({ toolName: p.toolName, providerExecuted: p.providerExecuted,
                       result: p.output?.result });
const out = {};
if (mode === "stream") {
  const result = streamText({ model: openai.responses("m"), prompt, tools });
  out.parts = [];
  for await (const part of result.fullStream) {
    if (part.type === "tool-result") out.parts.push(seen(part));
    if (part.type === "error") out.parts.push({ error: String(part.error) });
  }
  out.text = await result.text;
} else {
  const result = await generateText({ model: openai.responses("m"), prompt, tools });
  out.parts = result.content.filter((p) => p.type === "tool-result").map(seen);
  out.text = result.text;
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="session")
def ai_sdk() -> Path:
    """The Vercel AI SDK (``ai`` and ``@ai-sdk/openai``), installed from npm on first use."""
    import shutil
    import subprocess

    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("node/npm is not installed: cannot run the Vercel AI SDK")
    manifest = AI_SDK_CACHE / "node_modules" / "@ai-sdk" / "openai" / "package.json"
    wanted = AI_SDK_PACKAGES[1].rpartition("@")[2]
    with held(AI_SDK_CACHE):  # another xdist worker may be installing it
        if not manifest.exists() or json.loads(manifest.read_text())["version"] != wanted:
            done = subprocess.run([npm, "install", "--prefix", str(AI_SDK_CACHE), "--no-audit",
                                   "--no-fund", "--save-exact", "--loglevel=error",
                                   *AI_SDK_PACKAGES], capture_output=True, text=True,
                                  timeout=300, check=False)
            if done.returncode != 0 or not manifest.exists():
                pytest.skip(f"npm install failed: {done.stderr.strip()[-600:]}")
        put(AI_SDK_CACHE / "image.mjs", AI_SDK_SCRIPT)  # a worker may be running it
    return AI_SDK_CACHE


@pytest.mark.node
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_vercel_ai_sdk_image_generation(ai_sdk: Path, gateway: GatewayServer, mode: str
                                        ) -> None:
    import subprocess

    done = subprocess.run(
        ["node", str(ai_sdk / "image.mjs"), gateway.base_url,
         draw("a lighthouse", f"vercel-{mode}"), mode],
        capture_output=True, text=True, timeout=60, check=False, cwd=ai_sdk)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    [part] = out["parts"]
    assert part["toolName"] == "image_generation" and part["providerExecuted"] is True
    assert png_info(base64.b64decode(part["result"]))[:2] == (1024, 1024)
    assert "was generated and shown to the user" in out["text"]


def test_a_slow_image_model_is_a_timeout(images_server: FakeImagesServer) -> None:
    import asyncio

    from responses_gateway.tools.image_generation.backends.base import Drawing, ImageFailure
    from responses_gateway.tools.image_generation.backends.openai_images import OpenAIImages
    from responses_gateway.tools.image_generation.params import ImageParams

    backend = OpenAIImages(images_server.base_url, api_key=IMAGE_KEY, timeout=0.3)
    images_server.delay = 1.0
    try:
        async def draw_one() -> Any:
            return [s async for s in backend.draw(Drawing("a lighthouse", ImageParams()))]

        with pytest.raises(ImageFailure) as caught:
            asyncio.run(draw_one())
    finally:
        images_server.delay = 0.0
    assert caught.value.code == "timeout"


def _images_counted(settings: Any) -> int:
    """The usage ledger's ``image_generations`` over the last day, read through a second
    gateway on the same database (the running one's store belongs to its event loop)."""
    from responses_gateway.responses.services import build_gateway

    async def read() -> int:
        gateway = build_gateway(settings)
        try:
            ledger = gateway.store.usage_store()
            assert ledger is not None
            now = int(time.time())
            rows = await ledger.buckets(now - 86400, now + 3600)
            return sum(row.counts.get("image_generations", 0) for row in rows)
        finally:
            await gateway.aclose()

    return asyncio.run(read())


def test_a_drawn_image_counts_in_the_usage_ledger(client: OpenAI,
                                                  gateway: GatewayServer) -> None:
    """The ledger's ``image_generations`` counter is the image tool's registration's
    (``ItemType.counter``), counted as the response's job ends."""
    before = _images_counted(gateway.settings)
    response = check_response(client.responses.create(
        model="m", input=draw("a lighthouse", "ledger-1"), tools=[{"type": "image_generation"}]))
    assert image_call(response)["status"] == "completed"
    deadline = time.monotonic() + 30  # counted when the job closes, just after the answer
    while _images_counted(gateway.settings) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _images_counted(gateway.settings) == before + 1


# -- the request side: echo, GATEWAY_HOSTED_TOOLS=reject, tool_choice, items in the input --------


def test_the_tool_is_echoed_and_choosable(client: OpenAI, upstream: ScriptedUpstream) -> None:
    tool = {"type": "image_generation", "quality": "low", "size": "1024x1024"}
    response = check_response(client.responses.create(
        model="m", input=draw("a lighthouse", "choice-1"), tools=[tool],
        tool_choice={"type": "image_generation"}))
    assert response["tools"] == [tool]  # what the model had, as sent
    assert response["tool_choice"] == {"type": "image_generation"}
    first = next(b for b in upstream.requests if "choice-1" in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "image_generation"}}


def test_tool_choice_needs_the_tool(client: OpenAI) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="hi", tool_choice={"type": "image_generation"},
                                tools=[{"type": "function", "name": "f", "parameters": {}}])
    assert caught.value.body["param"] == "tool_choice"  # type: ignore[index]


def test_reject_policy_serves_it_when_an_image_backend_is_set(
        upstream: ScriptedUpstream, bedrock_images: FakeBedrockImages, tmp_path: Path) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db", image_backend="bedrock",
                            image_model=NOVA, bedrock_endpoint_url=bedrock_images.url,
                            bedrock_region="us-east-1", hosted_tools="reject")
    with GatewayServer(settings) as server, client_for(server) as client:
        response = check_response(client.responses.create(
            model="m", input=draw("a lighthouse", "reject-1"),
            tools=[{"type": "image_generation"}]))
        assert image_call(response)["status"] == "completed"
        import openai

        with pytest.raises(openai.BadRequestError) as caught:  # still hosted: refused
            client.responses.create(model="m", input="hi", tools=[{"type": "code_interpreter"}])
        assert caught.value.body["param"] == "tools[0].type"  # type: ignore[index]


def test_an_image_generation_call_in_the_input_is_edited(
        client: OpenAI, bedrock_images: FakeBedrockImages) -> None:
    """Stateless: the client sends the earlier call back; the edit starts from its result."""
    first = check_response(client.responses.create(
        model="m", input=draw("a lighthouse", "input-1"), tools=[{"type": "image_generation"}]))
    earlier = image_call(first)
    night = check_response(client.responses.create(
        model="m", store=False, tools=[{"type": "image_generation"}],
        input=[{"role": "user", "content": "draw a lighthouse"}, earlier,
               {"role": "user", "content": draw("make it night", "input-2", edit=True)}]))
    assert image_call(night)["action"] == "edit"
    assert bedrock_images.invocations[-1].body["imageVariationParams"]["images"] == [
        earlier["result"]]


@pytest.mark.parametrize("model", ["gpt-image-1", "stable-diffusion-xl"])
def test_images_server_answers_base64_for_any_model(images_server: FakeImagesServer,
                                                     model: str) -> None:
    """A self-hosted model is asked for b64_json (else a URL comes back); GPT image models,
    which refuse the parameter, are not."""
    import asyncio

    from responses_gateway.tools.image_generation.backends.base import Drawing
    from responses_gateway.tools.image_generation.backends.openai_images import OpenAIImages
    from responses_gateway.tools.image_generation.params import ImageParams

    backend = OpenAIImages(images_server.base_url, api_key=IMAGE_KEY, model=model)

    async def draw_one() -> Any:
        return [s async for s in backend.draw(Drawing("a lighthouse", ImageParams()))]

    [drawn] = asyncio.run(draw_one())
    assert png_info(base64.b64decode(drawn.b64))[:2] == (1024, 1024)
    assert ("response_format" in images_server.calls[-1].fields) == (model != "gpt-image-1")


# -- WebSocket mode ----------------------------------------------------------------------------


def test_websocket_draw_then_edit_on_one_connection(gateway: GatewayServer) -> None:
    """``response.create`` over /v1/responses (WebSocket): the second turn chains to the
    first (held by the connection, store false) and edits its image."""
    from websockets.sync.client import connect

    url = gateway.base_url.replace("http://", "ws://") + "/responses"
    tools = [{"type": "image_generation"}]
    turns = []
    with connect(url) as ws:
        for body in ({"type": "response.create", "model": "m", "store": False, "tools": tools,
                      "input": draw("a lighthouse", "ws-1")},
                     {"type": "response.create", "model": "m", "store": False, "tools": tools,
                      "input": draw("make it night", "ws-2", edit=True)}):
            if turns:
                body["previous_response_id"] = turns[-1][-1]["response"]["id"]
            ws.send(json.dumps(body))
            events = []
            while not events or events[-1]["type"] not in (
                    "response.completed", "response.failed", "response.incomplete", "error"):
                events.append(json.loads(ws.recv(timeout=20)))
            check_stream(events)
            turns.append(events)
    first, night = (image_call(turn[-1]["response"]) for turn in turns)
    assert night["action"] == "edit"
    assert colour_of(night["result"]) == colour_for("night", colour_of(first["result"]))


# -- what the image model answered, checked (issue 40) ------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(("reply", "code"), [
    ({"data": [{"b64_json": "this is not base64!"}]}, "invalid_image"),
    ({"data": [{"b64_json": _b64(b"hello, not an image")}]}, "invalid_image"),
    # a PNG whose data was cut (its checksums fail)
    ({"data": [{"b64_json": _b64(png(64, 64, (1, 2, 3), 8)[:-30])}]}, "invalid_image"),
    # a PNG the server calls JPEG
    ({"data": [{"b64_json": _b64(png(64, 64, (1, 2, 3)))}], "output_format": "jpeg"},
     "invalid_image"),
], ids=["not-base64", "not-an-image", "cut-png", "wrong-format"])
def test_a_broken_image_is_a_failed_call_and_the_next_turn_goes_on(
        openai_client: OpenAI, images_server: FakeImagesServer, reply: dict[str, Any],
        code: str) -> None:
    """What the images server answers is checked (base64, an image, the format it reports)
    before it becomes the item's result: a broken one is a failed call, the response
    completes, and the next turn (which would have edited it) completes too."""
    images_server.replies.append(reply)
    first = check_response(openai_client.responses.create(
        model="m", input=draw("a lighthouse", f"broken-{code}"),
        tools=[{"type": "image_generation"}]))
    call = image_call(first)
    assert first["status"] == "completed"
    assert call["status"] == "failed" and call["error"]["code"] == code
    assert call["result"] is None
    after = check_response(openai_client.responses.create(
        model="m", input=draw("make it night", f"broken-{code}-2", edit=True),
        tools=[{"type": "image_generation"}], previous_response_id=first["id"]))
    assert after["status"] == "completed"
    assert image_call(after)["status"] == "completed"


def test_an_image_over_its_bound_is_a_failed_call_not_stored(
        upstream: ScriptedUpstream, images_server: FakeImagesServer,
        tmp_path: Path) -> None:
    """GATEWAY_IMAGE_MAX_BYTES bounds one image (the answer is not even read past it): a
    larger one is a failed call, and what is stored stays small."""
    settings = e2e_settings(upstream, tmp_path / "gateway.db", image_backend="openai",
                            image_url=images_server.base_url, image_api_key=IMAGE_KEY,
                            image_model="gpt-image-1", image_timeout=10.0,
                            image_max_bytes=50_000)
    big = _b64(png(512, 512, (1, 2, 3), noise_rows=200, seed="big"))  # ~150 kB of noise
    for stream in (False, True):
        images_server.replies.append({"data": [{"b64_json": big}]})
        with GatewayServer(settings) as server, client_for(server) as client:
            response = client.responses.create(
                model="m", input=draw("a lighthouse", f"too-big-{stream}"),
                tools=[{"type": "image_generation"}], stream=stream)
            if stream:
                events = sdk_events(response)
                check_stream(events)
                response = events[-1]["response"]
            else:
                response = check_response(response)
            call = image_call(response)
            assert response["status"] == "completed"
            assert call["status"] == "failed" and call["error"]["code"] == "image_too_large"
            stored = client.responses.retrieve(response["id"]).to_dict(mode="json")
            assert len(json.dumps(stored)) < 50_000


@pytest.mark.slow
def test_the_image_is_checked_off_the_event_loop(openai_client: OpenAI,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding and reading up to GATEWAY_IMAGE_MAX_BYTES is CPU work: it runs in a worker
    thread (no event loop running there), every time, not on the gateway's loop."""
    import asyncio

    from responses_gateway.tools.image_generation import tool
    from responses_gateway.tools.image_generation.backends.convert import check_image

    seen: list[bool] = []

    def checked(*args: Any) -> None:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        check_image(*args)

    monkeypatch.setattr(tool, "check_image", checked)
    response = check_response(openai_client.responses.create(
        model="m", input=draw("a lighthouse", "off-loop"), tools=[{"type": "image_generation"}]))
    assert image_call(response)["status"] == "completed"
    assert seen == [False]

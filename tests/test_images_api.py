"""``POST /v1/images/generations`` and ``/v1/images/edits`` (issue 43) through openai-python's
``client.images`` used unmodified, on both image backends: Amazon Nova Canvas on a local
InvokeModel endpoint (AWS's request schemas, tests/helpers/image_servers.py) and a local
OpenAI-compatible images server. Every answer is validated against the SDK's
``ImagesResponse`` and every stream event against ``ImageGenStreamEvent`` /
``ImageEditStreamEvent``; what each backend received is asserted exactly.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types import ImageEditStreamEvent, ImageGenStreamEvent, ImagesResponse
from pydantic import TypeAdapter

from responses_gateway.api.auth import Authenticator
from responses_gateway.tools.image_generation.backends import forget_backends
from tests.helpers.e2e import client_for, e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.image_servers import (
    NOVA,
    FakeBedrockImages,
    FakeImagesServer,
    colour_for,
    colour_of,
    grey_rows,
    png,
    png_info,
    rgba_png,
)
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_image_generation import DUMMY_AWS, IMAGE_KEY

KEYS = ("sk-images-tenant-a", "sk-images-tenant-b")
GEN_EVENTS: TypeAdapter[Any] = TypeAdapter(ImageGenStreamEvent)
EDIT_EVENTS: TypeAdapter[Any] = TypeAdapter(ImageEditStreamEvent)


@pytest.fixture(scope="module")
def bedrock_images() -> Iterator[FakeBedrockImages]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in DUMMY_AWS.items():
            mp.setenv(name, value)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK",
                     "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        with FakeBedrockImages(noise_rows=4) as fake:
            yield fake


@pytest.fixture(scope="module")
def images_server() -> Iterator[FakeImagesServer]:
    with FakeImagesServer(api_key=IMAGE_KEY, noise_rows=4) as fake:
        yield fake


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, bedrock_images: FakeBedrockImages,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    """Nova Canvas, with tenant keys (every images call is a tenant's)."""
    forget_backends()
    db = tmp_path_factory.mktemp("images-api") / "gateway.db"
    settings = e2e_settings(upstream, db, image_backend="bedrock", image_model=NOVA,
                            bedrock_endpoint_url=bedrock_images.url,
                            bedrock_region="us-east-1", image_timeout=10.0, api_keys=KEYS)
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(gateway, api_key=KEYS[0]) as c:
        yield c


@pytest.fixture(scope="module")
def openai_gateway(upstream: ScriptedUpstream, images_server: FakeImagesServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("images-api-openai") / "gateway.db"
    settings = e2e_settings(upstream, db, image_backend="openai",
                            image_url=images_server.base_url, image_api_key=IMAGE_KEY,
                            image_model="gpt-image-1", image_timeout=10.0)
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def openai_client(openai_gateway: GatewayServer) -> Iterator[OpenAI]:
    with client_for(openai_gateway) as c:
        yield c


def checked(answer: Any) -> dict[str, Any]:
    """The answer as the SDK's ImagesResponse validates it (every field typed)."""
    data = answer.to_dict()
    ImagesResponse.model_validate(data)
    return data


def decoded(b64: str) -> tuple[str, tuple[int, int]]:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(b64))) as image:
        image.load()
        return str(image.format), image.size


def images_counted(settings: Any, tenant: str | None = None) -> int:
    """The usage ledger's ``image_generations`` over the last day (a tenant's, or all),
    read through a second gateway on the same database."""
    from responses_gateway.responses.services import build_gateway

    async def read() -> int:
        gateway = build_gateway(settings)
        try:
            ledger = gateway.store.usage_store()
            assert ledger is not None
            now = int(time.time())
            rows = await ledger.buckets(now - 86400, now + 3600)
            return sum(row.counts.get("image_generations", 0) for row in rows
                       if tenant is None or row.tenant == tenant)
        finally:
            await gateway.aclose()

    return asyncio.run(read())


def wait_for_count(settings: Any, expected: int, tenant: str | None = None) -> int:
    deadline = time.monotonic() + 20  # counted as the route ends, just after the answer
    while (found := images_counted(settings, tenant)) != expected and (
            time.monotonic() < deadline):
        time.sleep(0.1)
    return found


# -- Bedrock (Nova Canvas) ---------------------------------------------------------------------


def test_generate_on_bedrock(client: OpenAI, gateway: GatewayServer,
                             bedrock_images: FakeBedrockImages) -> None:
    tenant = Authenticator(KEYS).tenant(f"Bearer {KEYS[0]}")
    before = images_counted(gateway.settings, tenant)
    bedrock_images.invocations.clear()
    answer = checked(client.images.generate(
        model="gpt-image-1.5", prompt="a lighthouse", n=2, size="1024x1536", quality="high",
        user="end-user-7"))

    assert [set(d) for d in answer["data"]] == [{"b64_json"}, {"b64_json"}]  # no revision
    for datum in answer["data"]:
        assert png_info(base64.b64decode(datum["b64_json"])) == (
            1024, 1536, colour_for("a lighthouse"))
    assert {k: v for k, v in answer.items() if k not in ("data", "created")} == {
        "background": "opaque", "output_format": "png", "quality": "high",
        "size": "1024x1536", "safety_identifier": "end-user-7"}  # Bedrock reports no usage
    assert abs(answer["created"] - time.time()) < 600
    assert [(i.model_id, i.body) for i in bedrock_images.invocations] == [(NOVA, {
        "taskType": "TEXT_IMAGE", "textToImageParams": {"text": "a lighthouse"},
        "imageGenerationConfig": {"numberOfImages": 1, "width": 1024, "height": 1536,
                                  "quality": "premium"}})] * 2
    assert wait_for_count(gateway.settings, before + 2, tenant) == before + 2


def test_jpeg_and_webp_are_converted_from_the_models_png(client: OpenAI) -> None:
    answer = checked(client.images.generate(prompt="blue sky", output_format="jpeg",
                                            output_compression=60, size="1024x1024"))
    assert answer["output_format"] == "jpeg"
    assert decoded(answer["data"][0]["b64_json"]) == ("JPEG", (1024, 1024))
    answer = checked(client.images.generate(prompt="blue sky", output_format="webp"))
    assert decoded(answer["data"][0]["b64_json"]) == ("WEBP", (1024, 1024))


def test_edit_on_bedrock_with_and_without_a_mask(client: OpenAI,
                                                  bedrock_images: FakeBedrockImages) -> None:
    source = png(512, 512, (200, 100, 50))
    answer = checked(client.images.edit(image=("source.png", source, "image/png"),
                                        prompt="make it night", size="512x512"))
    sent = bedrock_images.invocations[-1].body
    assert sent["taskType"] == "IMAGE_VARIATION"
    assert sent["imageVariationParams"]["images"] == [base64.b64encode(source).decode()]
    assert colour_of(answer["data"][0]["b64_json"]) == colour_for("make it night",
                                                                  (200, 100, 50))
    # OpenAI's mask (transparent = change) becomes Bedrock's (black = change): inpainting
    mask = rgba_png(512, 512, transparent_rows=100)
    answer = checked(client.images.edit(image=("source.png", source, "image/png"),
                                        mask=("mask.png", mask, "image/png"),
                                        prompt="make it night", size="512x512"))
    sent = bedrock_images.invocations[-1].body
    assert sent["taskType"] == "INPAINTING"
    rows = grey_rows(base64.b64decode(sent["inPaintingParams"]["maskImage"]))
    assert set(rows[0]) == {0} and set(rows[-1]) == {255}
    assert answer["size"] == "512x512"


def test_a_stream_on_bedrock_is_one_completed_event_per_image(client: OpenAI) -> None:
    events = [GEN_EVENTS.validate_python(e.to_dict()).model_dump(exclude_none=True)
              for e in client.images.generate(prompt="a lighthouse", stream=True,
                                              partial_images=2, n=2)]
    assert [e["type"] for e in events] == ["image_generation.completed"] * 2
    assert events[0]["usage"] == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                                  "input_tokens_details": {"image_tokens": 0,
                                                           "text_tokens": 0}}
    assert (events[0]["size"], events[0]["background"]) == ("1024x1024", "opaque")
    edits = [EDIT_EVENTS.validate_python(e.to_dict()).type for e in client.images.edit(
        image=("a.png", png(512, 512, (9, 9, 9)), "image/png"), prompt="night",
        size="512x512", stream=True)]
    assert edits == ["image_edit.completed"]


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"size": "1000x1000"}, "size"),  # Nova Canvas: multiples of 16
    ({"output_format": "gif"}, "output_format"),
    ({"background": "transparent"}, "background"),
    ({"output_compression": 50}, "output_compression"),  # PNG has none
    ({"quality": "ultra"}, "quality"),
    ({"n": 11}, "n"),
    ({"response_format": "url"}, "response_format"),  # GPT image models refuse it, as
    ({"response_format": "b64_json"}, "response_format"),  # OpenAI: unknown_parameter
    ({"style": "vivid"}, "style"),
    ({"partial_images": 4}, "partial_images"),
    ({"extra_body": {"colour": "red"}}, "colour"),
    ({"extra_body": {"prompt": ""}}, "prompt"),
])
def test_what_the_backend_cannot_do_is_a_400_naming_the_param(
        client: OpenAI, bedrock_images: FakeBedrockImages, kwargs: dict[str, Any],
        param: str) -> None:
    calls = len(bedrock_images.invocations)
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.generate(prompt="a lighthouse", **kwargs)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param, error
    assert error["type"] == "invalid_request_error"
    assert len(bedrock_images.invocations) == calls  # refused before anything was drawn


@pytest.mark.parametrize(("kwargs", "param", "got"), [
    ({"n": "2"}, "n", "a string"),
    ({"extra_body": {"stream": 1}}, "stream", "an integer"),
    ({"user": ["u"]}, "user", "an array"),
    ({"extra_body": {"model": {"id": "m"}}}, "model", "an object"),
])
def test_a_wrong_type_is_named_as_openai_names_it(client: OpenAI, kwargs: dict[str, Any],
                                                  param: str, got: str) -> None:
    """OpenAI's words for a JSON value's kind, never a Python type's name ("got str")."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.generate(prompt="a lighthouse", **kwargs)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param, error
    assert error["code"] == "invalid_type"
    assert error["message"].endswith(f"but got {got} instead."), error["message"]
    with pytest.raises(openai.BadRequestError) as edit:  # an edit's form field, as text
        client.images.edit(image=("a.png", png(64, 64, (1, 1, 1)), "image/png"), prompt="x",
                           extra_body={"n": "two"})
    assert edit.value.body["message"].endswith(  # type: ignore[index]
        "but got a string instead.")


def test_bad_edits_are_400s(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.edit(image=("a.txt", b"not an image", "text/plain"), prompt="x")
    assert caught.value.body["param"] == "image"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.edit(image=[("a.png", png(512, 512, (1, 1, 1)), "image/png")] * 2,
                           prompt="x")
    assert caught.value.body["param"] == "image"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.edit(image=("a.png", png(512, 512, (1, 1, 1)), "image/png"),
                           mask=("m.jpg", b"\xff\xd8\xff\xe0 not a png", "image/jpeg"),
                           prompt="x")
    assert caught.value.body["param"] == "mask"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:  # not one of ImageEditParams
        client.images.edit(image=("a.png", png(512, 512, (1, 1, 1)), "image/png"),
                           prompt="x", extra_body={"moderation": "low"})
    assert caught.value.body["code"] == "unknown_parameter"  # type: ignore[index]


def test_the_content_filter_is_openais_moderation_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.generate(prompt="something forbidden")
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["type"]) == ("moderation_blocked",
                                              "image_generation_user_error")


def test_tenant_keys_are_required(gateway: GatewayServer) -> None:
    with client_for(gateway, api_key="sk-not-a-key") as stranger:
        with pytest.raises(openai.AuthenticationError):
            stranger.images.generate(prompt="a lighthouse")
        with pytest.raises(openai.AuthenticationError):
            stranger.images.edit(image=("a.png", png(512, 512, (1, 1, 1)), "image/png"),
                                 prompt="x")


def test_without_an_image_backend_the_routes_are_openais_501(
        upstream: ScriptedUpstream, tmp_path: Path) -> None:
    settings = e2e_settings(upstream, tmp_path / "none.db")
    with GatewayServer(settings) as server, client_for(server) as c:
        for call in (lambda: c.images.generate(prompt="a lighthouse"),
                     lambda: c.images.edit(image=("a.png", png(16, 16, (1, 1, 1)),
                                                  "image/png"), prompt="x")):
            with pytest.raises(openai.APIStatusError) as caught:
                call()
            assert caught.value.status_code == 501
            assert caught.value.body == {  # type: ignore[comparison-overlap]
                "message": "Image generation is not configured on this gateway "
                           "(GATEWAY_IMAGE_BACKEND=bedrock or openai).",
                "type": "server_error", "param": None,
                "code": "image_generation_not_configured"}


# -- an OpenAI-compatible images server ----------------------------------------------------------


def test_generate_on_an_images_server(openai_client: OpenAI, openai_gateway: GatewayServer,
                                      images_server: FakeImagesServer) -> None:
    before = images_counted(openai_gateway.settings)
    answer = checked(openai_client.images.generate(
        model="gpt-image-2", prompt="a lighthouse", size="1536x1024", quality="low",
        output_format="png", moderation="low"))
    call = images_server.calls[-1]
    assert call.path == "/v1/images/generations"
    assert call.fields == {"model": "gpt-image-1", "prompt": "a lighthouse", "n": 1,
                           "size": "1536x1024", "quality": "low", "background": "auto",
                           "output_format": "png", "moderation": "low"}
    assert call.headers["Authorization"] == f"Bearer {IMAGE_KEY}"
    assert answer["data"][0]["revised_prompt"] == "Revised: a lighthouse"
    assert png_info(base64.b64decode(answer["data"][0]["b64_json"]))[:2] == (1536, 1024)
    assert answer["usage"] == {"input_tokens": 7, "output_tokens": 100, "total_tokens": 107,
                               "input_tokens_details": {"image_tokens": 2, "text_tokens": 5}}
    assert (answer["quality"], answer["size"], answer["background"]) == (
        "low", "1536x1024", "opaque")
    assert wait_for_count(openai_gateway.settings, before + 1) == before + 1


def test_edit_on_an_images_server_sends_the_image_and_mask(
        openai_client: OpenAI, images_server: FakeImagesServer) -> None:
    source, mask = png(64, 64, (220, 0, 0)), rgba_png(64, 64, 10)
    answer = checked(openai_client.images.edit(
        image=[("source.png", source, "image/png")], mask=("mask.png", mask, "image/png"),
        prompt="make it night", size="1024x1024"))
    call = images_server.calls[-1]
    assert call.path == "/v1/images/edits"
    assert call.files == {"image": source, "mask": mask}
    assert call.fields["prompt"] == "make it night" and "moderation" not in call.fields
    assert colour_of(answer["data"][0]["b64_json"]) == colour_for("make it night", (220, 0, 0))


def test_a_stream_passes_the_servers_partial_images_on(openai_client: OpenAI,
                                                       images_server: FakeImagesServer) -> None:
    events = [GEN_EVENTS.validate_python(e.to_dict()).model_dump(exclude_none=True)
              for e in openai_client.images.generate(prompt="a lighthouse", stream=True,
                                                     partial_images=2)]
    assert [(e["type"], e.get("partial_image_index")) for e in events] == [
        ("image_generation.partial_image", 0), ("image_generation.partial_image", 1),
        ("image_generation.completed", None)]
    assert images_server.calls[-1].fields["stream"] is True
    assert images_server.calls[-1].fields["partial_images"] == 2
    assert events[-1]["usage"]["total_tokens"] == 105
    edits = [EDIT_EVENTS.validate_python(e.to_dict()).type for e in openai_client.images.edit(
        image=("a.png", png(64, 64, (1, 2, 3)), "image/png"), prompt="night", stream=True,
        partial_images=1)]
    assert edits == ["image_edit.partial_image", "image_edit.completed"]


def test_the_servers_failures_are_openais_errors(openai_client: OpenAI,
                                                 images_server: FakeImagesServer) -> None:
    images_server.errors.append((429, {"message": "Slow down.", "type": "requests",
                                       "code": "rate_limit_exceeded"}))
    with pytest.raises(openai.RateLimitError):
        openai_client.images.generate(prompt="a lighthouse")
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.images.generate(prompt="forbidden fruit")
    assert caught.value.body["code"] == "moderation_blocked"  # type: ignore[index]
    assert IMAGE_KEY not in str(caught.value.body)


def test_a_value_the_image_server_refuses_is_the_clients_400(
        openai_client: OpenAI, images_server: FakeImagesServer) -> None:
    """A size the server's model does not make passes the gateway's syntax check; the
    server's 400 (``invalid_request_error``, ``param: size``) is the client's 400 naming the
    field, as OpenAI answers it, not a 502 ``server_error``: generations, streams and edits."""
    calls = [lambda: openai_client.images.generate(prompt="a lighthouse", size="1x1"),
             lambda: list(openai_client.images.generate(prompt="a lighthouse", size="1x1",
                                                        stream=True)),
             lambda: openai_client.images.edit(image=("a.png", png(64, 64, (1, 2, 3)),
                                                      "image/png"), prompt="x", size="1x1")]
    for call in calls:
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        error = caught.value.body
        assert isinstance(error, dict), error
        assert (error["type"], error["param"]) == ("invalid_request_error", "size"), error
        assert "1x1" in error["message"] and IMAGE_KEY not in str(error)


def test_a_stream_failing_before_its_first_event_is_an_http_error(
        openai_client: OpenAI, images_server: FakeImagesServer) -> None:
    images_server.errors.append((429, {"message": "Slow down.", "type": "requests",
                                       "code": "rate_limit_exceeded"}))
    with pytest.raises(openai.RateLimitError):
        list(openai_client.images.generate(prompt="a lighthouse", stream=True))


def test_image_bounds(upstream: ScriptedUpstream, images_server: FakeImagesServer,
                      tmp_path: Path) -> None:
    """GATEWAY_IMAGE_MAX_BYTES bounds what a client sends to edit and what a model answers."""
    settings = e2e_settings(upstream, tmp_path / "small.db", image_backend="openai",
                            image_url=images_server.base_url, image_api_key=IMAGE_KEY,
                            image_model="gpt-image-1", image_max_bytes=3000)
    with GatewayServer(settings) as server, client_for(server) as c:
        big = png(64, 64, (1, 1, 1), noise_rows=64, seed="big")  # ~12 KB: noise
        assert len(big) > 3000
        calls = len(images_server.calls)
        with pytest.raises(openai.BadRequestError) as caught:
            c.images.edit(image=("big.png", big, "image/png"), prompt="x")
        assert caught.value.body["param"] == "image"  # type: ignore[index]
        assert caught.value.body["code"] == "image_too_large"  # type: ignore[index]
        assert len(images_server.calls) == calls  # never sent on
        with pytest.raises(openai.APIStatusError) as answered:
            c.images.generate(prompt="a lighthouse")  # the server's 1024x1024 is larger
        assert answered.value.status_code == 502
        assert answered.value.body["code"] == "image_too_large"  # type: ignore[index]


def test_a_failure_after_the_first_event_is_an_error_event(
        openai_client: OpenAI, images_server: FakeImagesServer) -> None:
    good = base64.b64encode(png(64, 64, (5, 5, 5))).decode()
    images_server.replies.extend([{"created": 1, "data": [{"b64_json": good}]},
                                  {"created": 1, "data": [{"url": "http://x/y.png"}]}])
    seen: list[Any] = []
    with pytest.raises(openai.APIError) as caught:
        for event in openai_client.images.generate(prompt="two", n=2, stream=True):
            seen.append(GEN_EVENTS.validate_python(event.to_dict()))
    assert [e.type for e in seen] == ["image_generation.completed"]
    assert seen[0].b64_json == good
    assert caught.value.body == {  # type: ignore[comparison-overlap]
        "message": "The image model answered without base64 image data ('b64_json').",
        "type": "server_error", "param": None, "code": "image_generation_failed"}

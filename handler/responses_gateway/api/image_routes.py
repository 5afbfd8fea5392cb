"""``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (multipart: ``image``
or ``image[]``, ``mask``), drawn by the image_generation tool's backend
(``GATEWAY_IMAGE_BACKEND``: Bedrock's image models, or an OpenAI-compatible images server).

Checked as OpenAI checks them (tools/image_generation/images_api.py), then by the backend for
what it cannot make (a size, a format, a transparent background: OpenAI's 400 naming the
parameter), before anything is drawn; without an image backend every call is OpenAI's 501.
``n`` images are drawn concurrently, one backend call each; every image is checked against
``GATEWAY_IMAGE_MAX_BYTES`` off the event loop (as the tool's), and Bedrock decodes an edit's
mask with Pillow in a thread (backends/masks.py). ``stream: true`` answers
``image_generation.partial_image`` events (a backend with intermediate images: the
OpenAI-compatible one, with ``partial_images``) and one ``image_generation.completed`` per
image (``image_edit.*`` for edits); a failure before the first event is an HTTP error, after it
an ``error`` event. Like every route: the caller's key (tenant) first, its rate limits at the
door, and the usage ledger counts the request and its images (``image_generations``), whatever
the outcome. Imported on first use (api/app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import orjson
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from responses_gateway import ids
from responses_gateway import limiter as limits
from responses_gateway.api.common import JSON, gateway_of, json_body, tenant_of
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.ids import request_id_header
from responses_gateway.responses.gateway import Gateway
from responses_gateway.tools.image_generation import ITEM
from responses_gateway.tools.image_generation import images_api as api
from responses_gateway.tools.image_generation.backends import image_backend
from responses_gateway.tools.image_generation.backends.base import (
    Drawing,
    Drawn,
    ImageBackend,
    ImageFailure,
    Partial,
)
from responses_gateway.tools.image_generation.backends.convert import check_image, format_of

MULTIPART_OVERHEAD = 64 * 1024  # boundaries and the text fields beside the files
#: what an edit's image may be (OpenAI's GPT image models: png, webp or jpg)
EDIT_FORMATS = ("png", "jpeg", "webp")
PNG = b"\x89PNG\r\n\x1a\n"


def no_image_backend() -> GatewayError:
    return GatewayError(
        501, "Image generation is not configured on this gateway (GATEWAY_IMAGE_BACKEND="
        "bedrock or openai).", type="server_error", code="image_generation_not_configured")


def _backend(gateway: Gateway) -> ImageBackend:
    if gateway.settings.image_backend is None:
        raise no_image_backend()
    return image_backend(gateway.settings)


async def create_image(request: Request) -> Response:
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    backend = _backend(gateway)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_type")
    images = api.parse(body, edit=False)
    _check(backend, images, editing=False, masked=False)
    rate = await limits.admit(gateway.store, gateway.settings.limits, tenant)
    drawing = Drawing(images.prompt, _params_for(images))
    answer = await _answer(gateway, tenant, backend, images, drawing, "images/generations")
    return limits.with_headers(answer, rate)


async def edit_image(request: Request) -> Response:
    tenant = tenant_of(request)
    gateway = gateway_of(request)
    backend = _backend(gateway)
    max_bytes = gateway.settings.image_max_bytes
    form = await _form(request, 2 * max_bytes + MULTIPART_OVERHEAD if max_bytes else 0)
    try:
        images, image, mask = await _edit_parts(form, max_bytes)
    finally:
        await form.close()  # the spooled files, whatever was wrong with the form
    _check(backend, images, editing=True, masked=mask is not None)
    rate = await limits.admit(gateway.store, gateway.settings.limits, tenant)
    drawing = Drawing(images.prompt, _params_for(images), image, mask)
    answer = await _answer(gateway, tenant, backend, images, drawing, "images/edits")
    return limits.with_headers(answer, rate)


def _params_for(images: api.ImagesRequest) -> Any:
    """Intermediate images are asked of the backend only for a stream."""
    return images.params if images.stream else replace(images.params, partial_images=0)


def _check(backend: ImageBackend, images: api.ImagesRequest, *, editing: bool,
           masked: bool) -> None:
    """The backend's own refusals (backends/base.py ``check``), named as the Images API
    names its fields."""
    if editing and not backend.edits:
        raise api.unsupported("image", "(an image)", "the gateway's image model does not "
                                                     "edit images")
    params = replace(images.params, mask="(the mask)") if masked else images.params
    try:
        backend.check(params, editing=editing)
    except GatewayError as exc:
        if exc.param == "input_image_mask":
            raise api.unsupported("mask", "(a mask)",
                                  "the gateway's image model has no inpainting") from None
        raise


# -- edits: the multipart body -----------------------------------------------------------------


async def _form(request: Request, limit: int) -> FormData:
    """The multipart body, at most ``limit`` bytes (declared or streamed: a 413 past it)."""
    from starlette.formparsers import MultiPartException, MultiPartParser

    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid_request(
            "Invalid Content-Type header (expected multipart/form-data).", code="invalid_type")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and limit and int(declared) > limit:
        raise _too_large(limit)

    async def bounded() -> AsyncIterator[bytes]:
        received = 0
        async for piece in request.stream():
            received += len(piece)
            if limit and received > limit:
                raise _too_large(limit)
            yield piece

    try:
        return await MultiPartParser(request.headers, bounded(), max_files=18,
                                     max_fields=32).parse()
    except MultiPartException as exc:
        raise invalid_request(f"Invalid multipart body: {exc.message}") from None


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"The request body is larger than this gateway accepts for an image edit ({limit} "
        "bytes: an image and a mask of GATEWAY_IMAGE_MAX_BYTES each).",
        code="request_too_large")


async def _edit_parts(form: FormData, max_bytes: int
                      ) -> tuple[api.ImagesRequest, bytes, bytes | None]:
    """The edit's fields checked, its image and mask read (each at most ``max_bytes``)."""
    text: dict[str, str] = {}
    files: dict[str, list[UploadFile]] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            files.setdefault(key, []).append(value)
        elif key in ("image", "image[]", "mask", "markup"):
            raise invalid_request(f"Invalid type for '{key}': expected a file.",
                                  param=key.removesuffix("[]"), code="invalid_type")
        else:
            text[key.partition("[")[0]] = value  # svg[model] is svg's (refused)
    for key in files:
        if key not in ("image", "image[]", "mask", "markup"):
            raise invalid_request(f"Unknown parameter: '{key}'.", param=key,
                                  code="unknown_parameter")
    images = api.parse(api.form_fields(text), edit=True)
    if files.get("markup"):
        raise api.unsupported("markup", "(a file)")
    sources = files.get("image", []) + files.get("image[]", [])
    if not sources:
        raise missing_parameter("image")
    if len(sources) > 1:
        raise api.unsupported("image", f"({len(sources)} images)",
                              "the gateway's image backend edits one image at a time")
    image = await _read(sources[0], "image", max_bytes)
    if format_of(image) not in EDIT_FORMATS:
        raise invalid_request(
            "Invalid image file or mode for image 1, please check your image file. "
            "Supported formats are 'png', 'jpeg' and 'webp'.", param="image",
            code="invalid_image_format")
    masks = files.get("mask", [])
    if len(masks) > 1:
        raise invalid_request("Only one 'mask' may be given.", param="mask",
                              code="invalid_value")
    mask = await _read(masks[0], "mask", max_bytes) if masks else None
    if mask is not None and not mask.startswith(PNG):
        raise invalid_request("Invalid mask image: the mask must be a PNG image with an "
                              "alpha channel.", param="mask", code="invalid_image_format")
    return images, image, mask


async def _read(upload: UploadFile, name: str, max_bytes: int) -> bytes:
    size = upload.size
    if size is not None and max_bytes and size > max_bytes:
        raise _file_too_large(name, size, max_bytes)
    data = await upload.read()  # a spooled file past 1 MiB: Starlette reads it in a thread
    if max_bytes and len(data) > max_bytes:
        raise _file_too_large(name, len(data), max_bytes)
    if not data:
        raise invalid_request(f"The '{name}' file is empty.", param=name, code="invalid_value")
    return data


def _file_too_large(name: str, size: int, limit: int) -> GatewayError:
    return invalid_request(
        f"The '{name}' file is {size} bytes; this gateway takes at most {limit} bytes "
        "(GATEWAY_IMAGE_MAX_BYTES).", param=name, code="image_too_large")


# -- drawing and answering ---------------------------------------------------------------------


async def _answer(gateway: Gateway, tenant: str, backend: ImageBackend,
                  images: api.ImagesRequest, drawing: Drawing, endpoint: str) -> Response:
    created = int(time.time())
    max_bytes = gateway.settings.image_max_bytes
    if images.stream:
        return await _stream(gateway, tenant, backend, images, drawing, endpoint, created)
    drawn: list[Drawn] = []
    try:
        try:
            async with asyncio.TaskGroup() as group:  # one failure cancels the others
                tasks = [group.create_task(_draw(backend, drawing, max_bytes))
                         for _ in range(images.n)]
        except* ImageFailure as failures:
            raise api.failure_error(_first(failures)) from None
        drawn = [task.result() for task in tasks]
    finally:
        await _account(gateway, tenant, backend, len(drawn), endpoint)
    return JSON(api.images_response(images, drawn, created))


def _first(group: BaseExceptionGroup[ImageFailure]) -> ImageFailure:
    failure = group.exceptions[0]
    while isinstance(failure, BaseExceptionGroup):
        failure = failure.exceptions[0]
    assert isinstance(failure, ImageFailure)
    return _named(failure)


def _named(failure: ImageFailure) -> ImageFailure:
    """A mask Bedrock cannot use names the Images API's ``mask`` (the tool's is
    ``input_image_mask``)."""
    if failure.code == "invalid_mask":
        failure.message = failure.message.replace("input_image_mask", "mask")
    return failure


async def _draw(backend: ImageBackend, drawing: Drawing, max_bytes: int) -> Drawn:
    """One image, checked (:func:`check_image`, in a thread: up to ``max_bytes`` of work)."""
    async with contextlib.aclosing(backend.draw(drawing)) as steps:
        async for step in steps:
            if isinstance(step, Drawn):
                await asyncio.to_thread(check_image, step.b64, step.output_format, max_bytes)
                return step
    raise ImageFailure("The image model returned no image.", code="image_generation_failed")


async def _events(backend: ImageBackend, images: api.ImagesRequest, drawing: Drawing,
                  max_bytes: int, created: int, drawn: list[Drawn]
                  ) -> AsyncIterator[dict[str, Any]]:
    """A stream's events: each image's intermediate images as the backend makes them (those
    that are images; at most ``partial_images``), then its ``completed`` event."""
    wanted = images.params.partial_images
    for _ in range(images.n):
        async with contextlib.aclosing(backend.draw(drawing)) as steps:
            async for step in steps:
                if isinstance(step, Partial):
                    if step.index < wanted and await _fits(step.b64, images, max_bytes):
                        yield api.partial_event(images, step.b64, step.index, created)
                    continue
                await asyncio.to_thread(check_image, step.b64, step.output_format, max_bytes)
                drawn.append(step)
                yield api.completed_event(images, step, created)
                break
            else:
                raise ImageFailure("The image model returned no image.",
                                   code="image_generation_failed")


async def _fits(b64: str, images: api.ImagesRequest, max_bytes: int) -> bool:
    try:
        await asyncio.to_thread(check_image, b64, images.params.output_format, max_bytes)
    except ImageFailure:
        return False
    return True


async def _stream(gateway: Gateway, tenant: str, backend: ImageBackend,
                  images: api.ImagesRequest, drawing: Drawing, endpoint: str, created: int
                  ) -> Response:
    drawn: list[Drawn] = []
    events = _events(backend, images, drawing, gateway.settings.image_max_bytes, created,
                     drawn)
    try:
        first = await anext(events)  # a failure before any event is still an HTTP error
    except ImageFailure as failure:
        await events.aclose()
        await _account(gateway, tenant, backend, 0, endpoint)
        raise api.failure_error(_named(failure)) from None
    except BaseException:
        await events.aclose()
        await _account(gateway, tenant, backend, 0, endpoint)
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            yield _sse(first)
            try:
                async for event in events:
                    yield _sse(event)
            except ImageFailure as failure:
                error = api.failure_error(_named(failure)).body()["error"]
                yield _sse({"type": "error", "error": error})
        finally:  # a client that left cancels this: the closing and the count still run
            with anyio.CancelScope(shield=True):
                await events.aclose()
                await _account(gateway, tenant, backend, len(drawn), endpoint)

    headers = dict((k.decode(), v.decode()) for k, v in request_id_header())
    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", **headers})


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def _account(gateway: Gateway, tenant: str, backend: ImageBackend, count: int,
                   endpoint: str) -> None:
    """The request and its images in the key's usage ledger (``image_generations``); its
    status ``completed`` when an image was made. Image tokens are not chat tokens: they count
    in no token window (as the tool's ``tool_usage.image_gen``)."""
    from responses_gateway.store.usage import UsageEntry

    model = str(getattr(backend, "model_id", None) or getattr(backend, "model", "") or "")
    answer = {"id": ids.new_id(ids.RESPONSE), "output": [{"type": ITEM}] * count}
    entry = replace(UsageEntry.of(answer, tenant=tenant, model=model,
                                  status="completed" if count else "failed",
                                  endpoint=endpoint, counters={ITEM: "image_generations"}),
                    tool_calls={})  # images, not a model's tool calls
    await limits.count(gateway.store, gateway.settings.limits, entry, None)


ROUTES: list[tuple[str, Any, str]] = [
    ("/v1/images/generations", create_image, "POST"),
    ("/v1/images/edits", edit_image, "POST"),
]

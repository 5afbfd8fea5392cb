"""Amazon's image models on Bedrock through ``InvokeModel``: Nova Canvas and Titan Image
Generator v2 (one request format: ``taskType`` with ``textToImageParams``,
``imageVariationParams`` or ``inPaintingParams`` (AWS's spelling, capital P), and
``imageGenerationConfig``; https://docs.aws.amazon.com/nova/latest/userguide/
image-gen-req-resp-structure.html).

OpenAI's parameters map as follows: ``size`` to width and height (Nova Canvas: 320-4096 px
per side, multiples of 16, at most 4,194,304 px, aspect 1:4 to 4:1; Titan v2: its list of
sizes; ``auto`` is 1024x1024); ``quality`` low/medium/auto to ``standard``, high/xhigh/max to
``premium``. Both models answer PNG with an opaque background: ``jpeg`` and ``webp`` are
converted from it (convert.py, ``output_compression`` as their quality), a ``transparent``
background is refused (OpenAI makes one only in PNG or WebP, and these models cannot). An
edit without a mask is an image variation guided by the prompt; with ``input_image_mask`` it
is inpainting (``maskImage``: Bedrock's convention, black marks what to change). Neither
model streams intermediate images. Errors go through the chat backend's Bedrock error table
(backends/bedrock/failures.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

from responses_gateway.aws_clients import LazyClient
from responses_gateway.tools.image_generation.backends.base import (
    Drawing,
    Drawn,
    ImageBackend,
    ImageFailure,
    Partial,
    unsupported,
)
from responses_gateway.tools.image_generation.backends.convert import (
    CONVERTIBLE,
    convert,
    convert_b64,
    format_of,
)
from responses_gateway.tools.image_generation.backends.masks import bedrock_mask
from responses_gateway.tools.image_generation.params import ImageParams, dimensions

NOVA_CANVAS = "amazon.nova-canvas-v1:0"
TITAN_V2 = "amazon.titan-image-generator-v2:0"
DEFAULT_SIZE = (1024, 1024)
MAX_SEED = 858_993_459  # the bound both models accept
TITAN_SIZES = frozenset({
    (1024, 1024), (768, 768), (512, 512), (768, 1152), (384, 576), (1152, 768), (576, 384),
    (768, 1280), (384, 640), (1280, 768), (640, 384), (896, 1152), (448, 576), (1152, 896),
    (576, 448), (768, 1408), (384, 704), (1408, 768), (704, 384), (640, 1408), (320, 704),
    (1408, 640), (704, 320), (1152, 640), (1173, 640),
})
PROMPT_LIMIT = {"titan": 512, "nova": 1024}  # characters of ``text``
_FILTERED = ("content filter", "blocked by", "responsible ai", "not allowed")


def family(model_id: str) -> str:
    """``titan`` for Titan Image Generator models (also in an inference profile), else
    ``nova`` (Nova Canvas' rules: the wider ones)."""
    return "titan" if "titan-image" in model_id else "nova"


def size_of(params: ImageParams) -> tuple[int, int]:
    return DEFAULT_SIZE if params.size == "auto" else dimensions(params.size) or DEFAULT_SIZE


class BedrockImages(ImageBackend):
    """InvokeModel on one Amazon image model, through a boto3 client made on first use."""

    name = "bedrock"

    @classmethod
    def from_settings(cls, settings: Any) -> BedrockImages:
        model = settings.image_model or NOVA_CANVAS
        return cls(model, region=settings.bedrock_region,
                   endpoint_url=settings.bedrock_endpoint_url,
                   timeout=settings.image_timeout, connect_timeout=settings.connect_timeout,
                   max_attempts=settings.max_retries + 1, seed=settings.image_seed)

    def __init__(self, model_id: str, *, region: str | None = None,
                 endpoint_url: str | None = None, timeout: float = 120.0,
                 connect_timeout: float = 10.0, max_attempts: int = 2,
                 seed: int | None = None, client: Any = None) -> None:
        self.model_id = model_id
        self.family = family(model_id)
        self.seed = seed
        self._client = LazyClient(
            "bedrock-runtime", client=client, region=region, endpoint_url=endpoint_url,
            read_timeout=timeout, connect_timeout=connect_timeout, max_attempts=max_attempts)

    def client(self) -> Any:
        return self._client.get()

    # -- what it can do ------------------------------------------------------------------------

    def check(self, params: ImageParams, *, editing: bool) -> None:
        backend = f"bedrock {self.model_id}"
        check_format(params, backend)
        if params.background == "transparent":
            raise unsupported(params, "background", params.background, backend,
                              "it makes opaque images only")
        width, height = size_of(params)
        if self.family == "titan":
            if (width, height) not in TITAN_SIZES:
                raise unsupported(params, "size", params.size, backend,
                                  "Titan Image Generator v2 takes 1024x1024, 768x768, "
                                  "512x512, 1152x768, 768x1152 and its other listed sizes")
        elif not _nova_size(width, height):
            raise unsupported(params, "size", params.size, backend,
                              "Nova Canvas takes 320-4096 pixels a side in multiples of 16, "
                              "at most 4194304 pixels, aspect ratio 1:4 to 4:1")

    # -- drawing -------------------------------------------------------------------------------

    def body(self, drawing: Drawing) -> dict[str, Any]:
        """The InvokeModel request body for ``drawing``."""
        params = drawing.params
        width, height = size_of(params)
        text = drawing.prompt[:PROMPT_LIMIT[self.family]]
        config: dict[str, Any] = {
            "numberOfImages": 1, "width": width, "height": height,
            "quality": "premium" if params.quality in ("high", "xhigh", "max") else "standard",
        }
        if self.seed is not None:
            config["seed"] = min(self.seed, MAX_SEED)
        if drawing.image is None:
            return {"taskType": "TEXT_IMAGE", "textToImageParams": {"text": text},
                    "imageGenerationConfig": config}
        image = base64.b64encode(as_png(drawing.image)).decode()
        if drawing.mask is not None:
            mask = base64.b64encode(bedrock_mask(drawing.mask)).decode()
            return {"taskType": "INPAINTING",
                    "inPaintingParams": {"image": image, "text": text, "maskImage": mask},
                    "imageGenerationConfig": config}
        return {"taskType": "IMAGE_VARIATION",
                "imageVariationParams": {"images": [image], "text": text,
                                         "similarityStrength": 0.7},
                "imageGenerationConfig": config}

    async def draw(self, drawing: Drawing) -> AsyncIterator[Partial | Drawn]:
        # Pillow decodes the image to edit and the mask (as_png, masks.py): CPU, in a thread
        body = await asyncio.to_thread(lambda: json.dumps(self.body(drawing)))
        try:
            answer = await asyncio.to_thread(self._invoke, body)
        except ImageFailure:
            raise
        except Exception as exc:
            raise _failure(exc) from None
        yield await asyncio.to_thread(self.drawn, answer, drawing)  # Pillow converts: CPU

    def drawn(self, answer: dict[str, Any], drawing: Drawing) -> Drawn:
        """The model's answer as the image and the parameters it was made with."""
        images = answer.get("images")
        if answer.get("error") or not isinstance(images, list) or not images or not isinstance(
                images[0], str):
            raise ImageFailure(f"The image model returned no image: {answer.get('error') or ''}"
                               .rstrip(": "), code="image_generation_failed")
        params = drawing.params
        width, height = size_of(params)
        return Drawn(convert_b64(images[0], params.output_format, params.output_compression),
                     size=f"{width}x{height}",
                     quality="high" if params.quality in ("high", "xhigh", "max") else (
                         "medium" if params.quality == "auto" else params.quality),
                     output_format=params.output_format, background="opaque",
                     revised_prompt=drawing.prompt)

    def _invoke(self, body: str) -> dict[str, Any]:
        response = self.client().invoke_model(
            modelId=self.model_id, body=body, contentType="application/json",
            accept="application/json")
        answer = json.loads(response["body"].read())
        return answer if isinstance(answer, dict) else {}

    async def aclose(self) -> None:
        self._client.close()


def check_format(params: ImageParams, backend: str) -> None:
    """What conversion from the model's PNG can make: ``png``, ``jpeg``, ``webp``; a
    compression level for the lossy two only (PNG has none)."""
    if params.output_format not in CONVERTIBLE:
        raise unsupported(params, "output_format", params.output_format, backend,
                          "it makes png, jpeg or webp images")
    if params.output_format == "png" and params.output_compression not in (None, 100):
        raise unsupported(params, "output_compression", params.output_compression, backend,
                          "PNG output has no compression level")


def as_png(data: bytes) -> bytes:
    """An image to edit as PNG, which every Bedrock image model reads (a JPEG or WebP the
    gateway made earlier is converted)."""
    return data if format_of(data) == "png" else convert(data, "png")


def _nova_size(width: int, height: int) -> bool:
    return (320 <= width <= 4096 and 320 <= height <= 4096 and width % 16 == 0
            and height % 16 == 0 and width * height <= 4_194_304
            and max(width, height) <= 4 * min(width, height))


def _failure(exc: BaseException) -> ImageFailure:
    """A Bedrock failure as the item's error: the chat backend's table, the content filter
    named as OpenAI names it."""
    from botocore.exceptions import ClientError

    from responses_gateway.backends.bedrock import failures

    if isinstance(exc, ClientError):
        error = failures.from_client_error(exc)
    else:
        error = failures.from_botocore_error(exc)
    message = error.message
    if error.status == 400 and any(marker in message.lower() for marker in _FILTERED):
        return ImageFailure(message, code="moderation_blocked",
                            type="image_generation_user_error")
    code = {429: "rate_limit_exceeded", 408: "timeout", 504: "timeout"}.get(
        error.status, error.code or "image_generation_failed")
    return ImageFailure(message, code=code)

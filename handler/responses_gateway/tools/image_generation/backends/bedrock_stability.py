"""Stability AI's image models on Bedrock (``InvokeModel``): Stable Image Core and Ultra, and
Stable Diffusion 3.5 Large, which also edits (``mode: image-to-image``).

Request ``{"prompt", "aspect_ratio", "output_format", "seed", "mode", "image", "strength"}``,
answer ``{"seeds", "finish_reasons", "images"}``; a non-null finish reason ("Filter reason:
prompt") is the content filter. OpenAI's ``size`` maps to an aspect ratio (1024x1024 is 1:1,
1536x1024 3:2, 1024x1536 2:3, and any size with one of Stability's ratios); the model picks
the pixels, which the item reports (read from the PNG's header, so PNG is always what is
asked; JPEG and WebP are converted from it, convert.py, ``output_compression`` as their
quality). No transparency, no mask, no intermediate images.
"""

from __future__ import annotations

import base64
import struct
from math import gcd
from typing import Any

from responses_gateway.tools.image_generation.backends.base import (
    Drawing,
    Drawn,
    ImageFailure,
    unsupported,
)
from responses_gateway.tools.image_generation.backends.bedrock import (
    BedrockImages,
    as_png,
    check_format,
)
from responses_gateway.tools.image_generation.backends.convert import convert_b64
from responses_gateway.tools.image_generation.params import ImageParams, dimensions

RATIOS = ("16:9", "1:1", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16", "9:21")
MAX_SEED = 4_294_967_294
EDIT_STRENGTH = 0.6  # how far an edit may move from the source image (0: not at all)


def aspect_ratio(size: str) -> str | None:
    if size == "auto":
        return "1:1"
    found = dimensions(size)
    if found is None:
        return None
    width, height = found
    divisor = gcd(width, height)
    ratio = f"{width // divisor}:{height // divisor}"
    return ratio if ratio in RATIOS else None


class StabilityImages(BedrockImages):
    """InvokeModel on one Stability model (same client, errors and retries as Amazon's)."""

    @property
    def edits(self) -> bool:  # type: ignore[override]
        return "sd3-5-large" in self.model_id

    def check(self, params: ImageParams, *, editing: bool) -> None:
        backend = f"bedrock {self.model_id}"
        check_format(params, backend)
        if params.background == "transparent":
            raise unsupported(params, "background", params.background, backend,
                              "it makes opaque images only")
        if aspect_ratio(params.size) is None:
            raise unsupported(params, "size", params.size, backend,
                              "sizes with an aspect ratio of " + ", ".join(RATIOS))
        if params.mask is not None:
            raise unsupported(params, "input_image_mask", "(a mask)", backend,
                              "it has no inpainting")
        if params.action == "edit" and not self.edits:
            raise unsupported(params, "action", params.action, backend,
                              "only Stable Diffusion 3.5 Large edits images")

    def body(self, drawing: Drawing) -> dict[str, Any]:
        params = drawing.params
        body: dict[str, Any] = {"prompt": drawing.prompt[:10_000],
                                "output_format": "png"}
        if self.seed is not None:
            body["seed"] = min(self.seed, MAX_SEED)
        if drawing.image is not None and self.edits:
            source = base64.b64encode(as_png(drawing.image)).decode()
            body.update(mode="image-to-image", image=source, strength=EDIT_STRENGTH)
        else:
            body["aspect_ratio"] = aspect_ratio(params.size) or "1:1"
        return body

    def drawn(self, answer: dict[str, Any], drawing: Drawing) -> Drawn:
        reasons = answer.get("finish_reasons") or [None]
        reason = reasons[0] if isinstance(reasons, list) and reasons else None
        if reason:
            if "filter" in str(reason).lower():
                raise ImageFailure(f"The image model refused: {reason}.",
                                   code="moderation_blocked", type="image_generation_user_error")
            raise ImageFailure(f"The image model failed: {reason}.",
                               code="image_generation_failed")
        images = answer.get("images")
        if not isinstance(images, list) or not images or not isinstance(images[0], str):
            raise ImageFailure("The image model returned no image.",
                               code="image_generation_failed")
        params = drawing.params
        return Drawn(convert_b64(images[0], params.output_format, params.output_compression),
                     size=_png_size(images[0]) or params.size,
                     quality="medium" if params.quality == "auto" else params.quality,
                     output_format=params.output_format, background="opaque",
                     revised_prompt=drawing.prompt)


def _png_size(b64: str) -> str | None:
    """WIDTHxHEIGHT from a PNG's header (Stability picks the pixels for a ratio)."""
    head = base64.b64decode(b64[:44] + "=" * (-len(b64[:44]) % 4), validate=False)
    if not head.startswith(b"\x89PNG") or len(head) < 24:
        return None
    width, height = struct.unpack("!II", head[16:24])
    return f"{width}x{height}"

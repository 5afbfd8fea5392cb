"""OpenAI's inpainting mask as Bedrock's, converted with Pillow.

OpenAI marks the area to change with fully transparent pixels (alpha 0) of an RGBA PNG;
Amazon's image models take a mask image that is black where the image changes and white
where it stays. A PNG with alpha (RGBA, grey + alpha) is converted to an 8-bit greyscale PNG;
a mask without alpha is passed on as it is (then it is already in Bedrock's convention).
Decoding is CPU work on a client's image: callers run it in a thread (bedrock.py's ``draw``),
and a mask larger than any Bedrock image model takes is refused from its header, before its
pixels are decoded.
"""

from __future__ import annotations

import io
import struct

from responses_gateway.tools.image_generation.backends.base import ImageFailure

SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The most pixels a Bedrock image model reads (Nova Canvas: 4,194,304; Titan v2: fewer).
MAX_PIXELS = 4_194_304
_WITH_ALPHA = ("LA", "RGBA")


def bedrock_mask(data: bytes) -> bytes:
    """The mask for Bedrock's ``maskImage``: black where ``data`` is transparent."""
    if not data.startswith(SIGNATURE):
        raise _bad("the mask is not a PNG image")
    if data[12:16] == b"IHDR":  # PNG's first chunk: its size, before anything is decoded
        width, height = struct.unpack("!II", data[16:24])
        if width * height > MAX_PIXELS:
            raise _bad(f"it is {width}x{height} pixels; Bedrock's image models take at most "
                       f"{MAX_PIXELS}")
    from PIL import Image  # lazily, as convert.py: only an inpainting needs it

    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
            if image.mode not in _WITH_ALPHA:
                return data  # no alpha: black and white already, as Bedrock reads it
            alpha = image.getchannel("A")
    except Exception:  # Pillow's errors for broken data are many (OSError, SyntaxError, ...)
        raise _bad("the mask's image data is corrupt") from None
    out = io.BytesIO()
    alpha.point(lambda a: 0 if a == 0 else 255).save(out, "PNG")
    return out.getvalue()


def _bad(why: str) -> ImageFailure:
    return ImageFailure(f"The input_image_mask cannot be used: {why}.", code="invalid_mask",
                        type="invalid_request_error")

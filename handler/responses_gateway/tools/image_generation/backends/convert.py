"""Image format conversion for backends that make one format: Bedrock's models answer PNG
(Stability's PNG or JPEG), OpenAI's tool also offers JPEG and WebP with ``output_compression``.

Pillow is imported here only, inside the functions, so a process that never converts (PNG
asked, or an images server that makes the format itself) never loads it.
"""

from __future__ import annotations

import base64
import binascii
import io

from responses_gateway.tools.image_generation.backends.base import ImageFailure

#: output_format -> Pillow's format name (what conversion can make)
CONVERTIBLE = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"))


def format_of(data: bytes) -> str | None:
    """``png``, ``jpeg`` or ``webp`` from the bytes' signature; None otherwise."""
    for signature, name in _SIGNATURES:
        if data.startswith(signature):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def convert(data: bytes, output_format: str, compression: int | None = None) -> bytes:
    """``data`` (any image Pillow reads) as ``output_format``; ``compression`` (0-100, OpenAI's
    ``output_compression``, 100 when unset) is JPEG's and WebP's quality. Bytes already in the
    format with no compression asked come back as they are."""
    if format_of(data) == output_format and compression in (None, 100):
        return data
    from PIL import Image  # lazily: only a conversion needs it

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            out = io.BytesIO()
            if output_format == "jpeg":
                image = image.convert("RGB")  # JPEG has no alpha
                image.save(out, "JPEG", quality=_quality(compression))
            elif output_format == "webp":
                image.save(out, "WEBP", quality=_quality(compression))
            else:
                image.save(out, CONVERTIBLE[output_format])
    except (OSError, ValueError) as exc:
        raise ImageFailure(f"The image model's image could not be converted to "
                           f"{output_format}: {exc}.", code="image_generation_failed") from None
    return out.getvalue()


def convert_b64(b64: str, output_format: str, compression: int | None = None) -> str:
    """:func:`convert` on base64 (what image models answer and items hold)."""
    data = base64.b64decode(b64)
    converted = convert(data, output_format, compression)
    return b64 if converted is data else base64.b64encode(converted).decode()


def _quality(compression: int | None) -> int:
    return 100 if compression is None else max(0, min(100, compression))


#: output_format -> the format Pillow must read the bytes as (SVG is text, not Pillow's)
READ_AS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "gif": "GIF"}


def check_image(b64: str, output_format: str, max_bytes: int) -> None:
    """Raise :class:`ImageFailure` unless ``b64`` is base64 of at most ``max_bytes`` bytes
    that are an image in ``output_format``: what an image model answered becomes the item's
    ``result``, which clients decode and a later edit sends back, so garbage or a huge answer
    is a failed call here, not a broken conversation later. CPU work on up to ``max_bytes``:
    run it in a thread (``asyncio.to_thread``). Pillow reads the header and checks the
    structure (``verify``: PNG's chunk checksums) without decoding the pixels."""
    if max_bytes and len(b64) > (max_bytes + 2) // 3 * 4 + 4:
        raise _too_large(len(b64) * 3 // 4, max_bytes)
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ImageFailure("The image model's answer is not valid base64 image data.",
                           code="invalid_image") from None
    if max_bytes and len(data) > max_bytes:
        raise _too_large(len(data), max_bytes)
    if output_format == "svg":
        if b"<svg" not in data[:4096]:
            raise _not_a(output_format)
        return
    from PIL import Image  # lazily, as convert does

    try:
        with Image.open(io.BytesIO(data)) as image:
            found = image.format
            image.verify()
    except Exception:  # Pillow's errors for broken data are many (OSError, SyntaxError, ...)
        raise _not_a(output_format) from None
    if found != READ_AS.get(output_format, found):
        raise ImageFailure(f"The image model's image is {str(found).lower()}, not the "
                           f"{output_format} it reported.", code="invalid_image")


def _too_large(size: int, limit: int) -> ImageFailure:
    return ImageFailure(f"The image model's image is {size} bytes, more than the {limit} bytes "
                        "one image may be (GATEWAY_IMAGE_MAX_BYTES).", code="image_too_large")


def _not_a(output_format: str) -> ImageFailure:
    return ImageFailure(f"The image model's answer is not a valid {output_format} image.",
                        code="invalid_image")

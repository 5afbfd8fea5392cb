"""Image format conversion for backends that make one format: Bedrock's models answer PNG
(Stability's PNG or JPEG), OpenAI's tool also offers JPEG and WebP with ``output_compression``.

Pillow is imported here only, inside the functions, so a process that never converts (PNG
asked, or an images server that makes the format itself) never loads it.
"""

from __future__ import annotations

import base64
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

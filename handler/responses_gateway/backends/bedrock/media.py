"""Bytes in, Converse ``image`` / ``document`` formats out.

Bedrock only takes raw bytes plus a format enum (``png``/``jpeg``/``gif``/``webp`` for images;
``pdf``/``csv``/… for documents) and never fetches URLs; the format is taken from the bytes
when they say it, else from the declared media type, and anything else is a 400 rather than a
server-side ValidationException later. A generated image (image_generation) over Converse's
image limits is re-encoded to fit (:func:`fit_generated`), as the vision model's next turn would
otherwise fail on the gateway's own image; what a client sends is never altered.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct

from responses_gateway.backends.base import GENERATED_IMAGE_INTRO
from responses_gateway.errors import GatewayError

IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/pjpeg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}

DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/x-markdown": "md",
}
_DOCUMENT_EXTENSIONS = frozenset(DOCUMENT_FORMATS.values())

#: Converse refuses an image block over 3.75 MB or over 8000 px a side.
MAX_IMAGE_BYTES = 3_750_000
MAX_IMAGE_SIDE = 8000
#: How translate/to_chat.py introduces an image the image_generation tool made.
GENERATED_INTRO = GENERATED_IMAGE_INTRO


def is_remote(url: object) -> bool:
    """Whether a media reference is an http(s) URL the gateway downloads (scheme in any case);
    base64 data never is, as ``:`` is not in its alphabet."""
    return isinstance(url, str) and url[:8].lower().startswith(("http://", "https://"))


def sniff_image(data: bytes) -> str | None:
    """The image format the magic bytes announce, if it is one Bedrock accepts."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def media_type(value: str | None) -> str:
    """``Content-Type`` without parameters, lower-case."""
    return (value or "").split(";", 1)[0].strip().lower()


def image_format(data: bytes, declared: str | None, *, param: str) -> str:
    sniffed = sniff_image(data)
    if sniffed:
        return sniffed
    fmt = IMAGE_FORMATS.get(media_type(declared))
    if fmt is None:
        raise GatewayError(
            400,
            f"Unsupported image type {media_type(declared) or 'unknown'!r}: Bedrock accepts "
            "PNG, JPEG, GIF and WebP images.",
            param=param,
            code="invalid_image_format",
        )
    return fmt


def document_format(data: bytes, declared: str | None, filename: str | None, *, param: str) -> str:
    if data.startswith(b"%PDF-"):
        return "pdf"
    fmt = DOCUMENT_FORMATS.get(media_type(declared))
    if fmt is None and filename and "." in filename:
        ext = filename.rsplit(".", 1)[1].lower()
        fmt = ext if ext in _DOCUMENT_EXTENSIONS else None
    if fmt is None:
        raise GatewayError(
            400,
            f"Unsupported file type {media_type(declared) or filename or 'unknown'!r}: Bedrock "
            "accepts pdf, csv, doc, docx, xls, xlsx, html, txt and md documents.",
            param=param,
            code="invalid_value",
        )
    return fmt


def fit_generated(data: bytes, declared: str | None) -> tuple[bytes, str | None]:
    """A generated image as Converse takes it: unchanged when within its limits, else JPEG at
    falling quality, then smaller (same aspect ratio), until it fits. Pillow loads only here."""
    if (len(data) <= MAX_IMAGE_BYTES and data.startswith(b"\x89PNG\r\n\x1a\n")
            and len(data) >= 24 and max(struct.unpack(">II", data[16:24])) <= MAX_IMAGE_SIDE):
        return data, declared  # the PNG header says it fits: no Pillow
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as opened:
            if len(data) <= MAX_IMAGE_BYTES and max(opened.size) <= MAX_IMAGE_SIDE:
                return data, declared
            opened.load()
            image = opened.convert("RGBA")
    except (OSError, ValueError, Image.DecompressionBombError):
        return data, declared  # not an image Pillow reads: Bedrock's own answer stands
    flat = Image.new("RGB", image.size, (255, 255, 255))
    flat.paste(image, mask=image.getchannel("A"))  # JPEG has no alpha: transparent is white
    width, height = flat.size
    scale = min(1.0, MAX_IMAGE_SIDE / max(width, height))
    while True:
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        resized = flat if size == flat.size else flat.resize(size, Image.Resampling.LANCZOS)
        for quality in (90, 80, 70, 60):
            out = io.BytesIO()
            resized.save(out, "JPEG", quality=quality)
            if out.tell() <= MAX_IMAGE_BYTES:
                return out.getvalue(), "image/jpeg"
        scale *= 0.75


def decode_data_url(url: str, *, param: str) -> tuple[str, bytes]:
    """``data:<type>;base64,<data>`` -> (media type, raw bytes)."""
    header, sep, payload = url.partition(",")
    if not sep or not header.startswith("data:"):
        raise GatewayError(400, "Malformed data URL.", param=param, code="invalid_value")
    meta = header[5:].split(";")
    try:
        if "base64" in (m.strip().lower() for m in meta[1:]):
            data = base64.b64decode(payload, validate=False)
        else:
            from urllib.parse import unquote_to_bytes

            data = unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise GatewayError(400, "Invalid base64 data in data URL.", param=param,
                           code="invalid_value") from exc
    return media_type(meta[0]), data


def decode_base64(value: str, *, param: str) -> bytes:
    """Strict base64 (line breaks allowed): anything else is the client's 400, never bytes
    made of what survived dropping the characters outside the alphabet."""
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise GatewayError(400, "Invalid base64 file data.", param=param,
                           code="invalid_value") from exc


def has_scheme(value: str) -> bool:
    """Whether ``value`` starts like a URL (``name:``); base64 has no ``:`` in its alphabet."""
    scheme, sep, _ = value.partition(":")
    return bool(sep and scheme[:1].isalpha() and scheme.isascii()
                and all(c.isalnum() or c in "+-." for c in scheme))


_NAME_BAD = re.compile(r"[^A-Za-z0-9 ()\[\]-]")
_SPACES = re.compile(r" {2,}")


class DocumentNamer:
    """Bedrock document names: 1–200 of ``[A-Za-z0-9 ()[]-]``, single spaces, unique per request.

    Dots and underscores are refused server-side, so ``report.pdf`` becomes ``report``.
    """

    def __init__(self) -> None:
        self._used: set[str] = set()

    def __call__(self, filename: str | None) -> str:
        stem = (filename or "").rsplit("/", 1)[-1]
        if "." in stem:
            stem = stem.rsplit(".", 1)[0]
        name = _SPACES.sub(" ", _NAME_BAD.sub("-", stem)).strip()[:200].strip() or "document"
        candidate, n = name, 1
        while candidate in self._used:
            n += 1
            suffix = f" ({n})"
            candidate = name[: 200 - len(suffix)].rstrip() + suffix
        self._used.add(candidate)
        return candidate

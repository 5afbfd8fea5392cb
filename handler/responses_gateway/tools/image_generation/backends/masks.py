"""OpenAI's inpainting mask as Bedrock's: no image library, PNG decoded with zlib.

OpenAI marks the area to change with fully transparent pixels (alpha 0) of an RGBA PNG;
Amazon's image models take a mask image that is black where the image changes and white
where it stays. 8-bit non-interlaced PNGs with alpha (RGBA, grey + alpha) are converted; a
mask without alpha is passed on as it is (then it is already in Bedrock's convention).
"""

from __future__ import annotations

import struct
import zlib

from responses_gateway.tools.image_generation.backends.base import ImageFailure

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel


def bedrock_mask(data: bytes) -> bytes:
    """The mask for Bedrock's ``maskImage``: black where ``data`` is transparent."""
    if not data.startswith(SIGNATURE):
        raise _bad("the mask is not a PNG image")
    width = height = depth = colour = interlace = -1
    idat = b""
    pos = len(SIGNATURE)
    while pos + 8 <= len(data):
        (length,) = struct.unpack("!I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack("!IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if colour not in (4, 6):
        return data  # no alpha: black and white already, as Bedrock reads it
    if depth != 8 or interlace != 0:
        raise _bad("the mask must be an 8-bit, non-interlaced PNG")
    channels = _CHANNELS[colour]
    stride = width * channels
    try:
        raw = zlib.decompress(idat)
    except zlib.error:
        raise _bad("the mask's image data is corrupt") from None
    if len(raw) != height * (stride + 1):
        raise _bad("the mask's image data does not match its size")
    rows = _unfiltered(raw, height, stride, channels)
    out = bytearray()
    for row in rows:
        out.append(0)
        out += bytes(0 if row[x * channels + channels - 1] == 0 else 255 for x in range(width))
    return (SIGNATURE + _chunk(b"IHDR", struct.pack("!IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(bytes(out), 6)) + _chunk(b"IEND", b""))


def _unfiltered(raw: bytes, height: int, stride: int, bpp: int) -> list[bytearray]:
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                corner = previous[i - bpp] if i >= bpp else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                near = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + near) & 0xFF
            elif kind != 0:
                raise _bad("the mask uses an unknown PNG filter")
        rows.append(line)
        previous = line
    return rows


def _chunk(kind: bytes, body: bytes) -> bytes:
    return (struct.pack("!I", len(body)) + kind + body
            + struct.pack("!I", zlib.crc32(kind + body) & 0xFFFFFFFF))


def _bad(why: str) -> ImageFailure:
    return ImageFailure(f"The input_image_mask cannot be used: {why}.", code="invalid_mask",
                        type="invalid_request_error")

"""Reading an answer's body from a server the gateway does not control, up to a bound.

A search provider, an images server or a web page may answer any number of bytes; httpx's
``aread`` would hold them all. :func:`read_capped` reads the stream and stops at the caller's
bound with the caller's error, so each caller says what was too large in its own words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


async def read_capped(response: Any, most: int, too_large: Callable[[], Exception]) -> bytes:
    """The body of ``response`` (an httpx response opened with ``stream=True``), raising
    ``too_large()`` as soon as it passes ``most`` bytes (0: no bound)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if most and len(body) > most:
            raise too_large()
    return bytes(body)

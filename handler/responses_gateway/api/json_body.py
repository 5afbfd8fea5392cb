"""Decoding a JSON request body (HTTP or a WebSocket frame) into what the gateway may keep.

A body that nests deeper than :data:`MAX_DEPTH` (json_depth.py says why there is a bound) is
refused here, before anything is sent or stored, instead of failing on the way out.
"""

from __future__ import annotations

from typing import Any

import orjson

from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.json_depth import MAX_DEPTH, fits_depth

__all__ = ["MAX_DEPTH", "NOT_JSON", "decode_json", "fits_depth", "too_deep"]

NOT_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)"
)


def decode_json(data: bytes | bytearray | memoryview | str) -> Any:
    """The decoded body, or a 400 GatewayError for empty, malformed or too deeply nested JSON."""
    if not data:
        raise invalid_request(NOT_JSON)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise too_deep() from None
        raise invalid_request(NOT_JSON) from None
    if value.__class__ in (dict, list) and not fits_depth(value):
        raise too_deep()
    return value


def too_deep() -> GatewayError:
    return invalid_request(
        f"The JSON body of your request is nested too deeply: at most {MAX_DEPTH} levels of "
        "objects and arrays are accepted."
    )

"""Decoding a JSON request body (HTTP or a WebSocket frame) into what the gateway may keep.

A body is stored, echoed in events and sent upstream inside a few more levels of JSON, and
orjson refuses to encode past 254 levels: a body that nests deeper than :data:`MAX_DEPTH`
is refused here, before anything is sent or stored, instead of failing on the way out.
"""

from __future__ import annotations

from typing import Any

import orjson

from responses_gateway.errors import GatewayError, invalid_request

MAX_DEPTH = 128  # levels of nesting a request body may use
_ORJSON_MAX_DEPTH = 254  # what orjson.dumps encodes (and loads reads up to 1024)
_PROBE_LEVELS = _ORJSON_MAX_DEPTH - MAX_DEPTH

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


def fits_depth(value: Any) -> bool:
    """Whether ``value`` nests at most MAX_DEPTH levels.

    Asked of orjson, in C: encoding ``value`` wrapped in the levels it may not use fails
    exactly when it uses them. Whatever orjson decoded it can encode, so depth is the only
    way this fails. A small body costs microseconds; a walk in Python would cost more.
    """
    for _ in range(_PROBE_LEVELS):
        value = [value]
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def too_deep() -> GatewayError:
    return invalid_request(
        f"The JSON body of your request is nested too deeply: at most {MAX_DEPTH} levels of "
        "objects and arrays are accepted."
    )

"""How deeply a JSON value nests, asked of orjson: one bound for every JSON the gateway keeps.

A request body, or a model's tool arguments that become an item, is stored, echoed in events
and sent upstream inside a few more levels of JSON, and orjson refuses to encode past 254
levels: a value that nests deeper than :data:`MAX_DEPTH` is refused where it arrives
(api/json_body.py for bodies, tools/client_tools.py for arguments) instead of failing on the
way out.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_DEPTH = 128  # levels of nesting a request body (or a call's arguments) may use
_ORJSON_MAX_DEPTH = 254  # what orjson.dumps encodes (and loads reads up to 1024)
_PROBE_LEVELS = _ORJSON_MAX_DEPTH - MAX_DEPTH


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

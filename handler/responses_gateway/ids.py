"""The one place that mints ids: ``resp_``, ``msg_``, ``fc_``, ``rs_``, ``call_`` and item ids.

OpenAI ids are a prefix and 48 hex characters; clients sometimes check the prefix, never the rest.
"""

from __future__ import annotations

import secrets

RESPONSE = "resp_"
MESSAGE = "msg_"
FUNCTION_CALL = "fc_"
REASONING = "rs_"
CALL = "call_"
FUNCTION_CALL_OUTPUT = "fco_"


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(24)

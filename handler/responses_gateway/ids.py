"""The one place that mints ids: ``resp_``, ``msg_``, ``fc_``, ``rs_``, ``call_``, ``cmp_``, item
ids, and the ``req_`` id of the HTTP request being served. A server tool's items' prefixes are
its registration's (tools/declaration.py ``ItemType.id_prefix``), minted here too.

OpenAI ids are a prefix and 48 hex characters; clients sometimes check the prefix, never the rest.
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar

RESPONSE = "resp_"
MESSAGE = "msg_"
FUNCTION_CALL = "fc_"
REASONING = "rs_"
CALL = "call_"
FUNCTION_CALL_OUTPUT = "fco_"
CUSTOM_TOOL_CALL = "ctc_"
CUSTOM_TOOL_CALL_OUTPUT = "ctco_"
COMPACTION = "cmp_"
CONFIGURATION_UPDATE = "cfg_"
# Calls of the tools the client runs (tools/client_tools.py), and their outputs.
SHELL_CALL = "sh_"
SHELL_CALL_OUTPUT = "sho_"
APPLY_PATCH_CALL = "apc_"
APPLY_PATCH_CALL_OUTPUT = "apco_"
LOCAL_SHELL_CALL = "lsh_"
LOCAL_SHELL_CALL_OUTPUT = "lsho_"
COMPUTER_CALL = "cu_"
COMPUTER_CALL_OUTPUT = "cuo_"
TOOL_SEARCH_CALL = "tsc_"
TOOL_SEARCH_OUTPUT = "tso_"
FILE = "file-"
VECTOR_STORE = "vs_"
VECTOR_STORE_FILE_BATCH = "vsfb_"
UPLOAD = "upload_"
UPLOAD_PART = "part_"
CONTAINER = "cntr_"
CONTAINER_FILE = "cfile_"


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(24)


# Ids a client sends are store keys (DynamoDB: 1024 bytes per sort key, 2048 per partition
# key); 200 characters of at most 4 UTF-8 bytes each leave room for the key's prefix. The
# gateway's own ids are about 50.
MAX_ID_LENGTH = 200


def unknowable(value: str) -> bool:
    """Whether ``value`` can be no id this module minted (a File, Upload, vector store, batch,
    container or container file id: ASCII, about 50 characters). Such an id is not found
    without asking a store, whose key it may not fit: DynamoDB refuses a sort key past 1024
    bytes (two ids in one key: a store's file) with a ValidationException, a 500 here."""
    return len(value) > MAX_ID_LENGTH or not value.isascii()


def clipped(value: str) -> str:
    """An id as an error message quotes it: a long one cut at 64 characters."""
    return value if len(value) <= 64 else value[:64] + "…"


#: The request being served: Lambda's request id in AWS, else a ``req_`` id minted for it. A
#: client sees it in ``x-request-id`` and in server errors; every log line of the request has it.
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


def new_request_id() -> str:
    return "req_" + secrets.token_hex(16)


def request_id_header() -> list[tuple[bytes, bytes]]:
    """``x-request-id`` for a response to the request being served (none outside one)."""
    rid = request_id.get()
    return [(b"x-request-id", rid.encode("latin-1", "replace"))] if rid else []

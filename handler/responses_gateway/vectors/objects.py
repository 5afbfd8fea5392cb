"""The objects of the Vector Stores API as OpenAI returns them, from plain records."""

from __future__ import annotations

import time
from typing import Any

from responses_gateway import ids
from responses_gateway.errors import not_found
from responses_gateway.files.service import FileLimits, check_length

#: The strings of a Vector Stores API body OpenAI documents no length for, with their bound:
#: ``name`` and the file ids looked up by ``GATEWAY_MAX_NAME_CHARS``, ``description`` by
#: ``GATEWAY_MAX_DESCRIPTION_CHARS`` (``metadata`` and ``attributes`` have OpenAI's, in
#: vectors/service.py).
_NAMES = ("name", "file_id")
_DESCRIPTIONS = ("description",)


def check_strings(body: dict[str, Any], limits: FileLimits) -> None:
    """OpenAI's 400 ``string_above_max_length`` (naming the param) for a string of a create
    or update body past its bound, before anything is stored or looked up."""
    for key in _NAMES + _DESCRIPTIONS:
        value = body.get(key)
        if isinstance(value, str):
            if key in _NAMES:
                check_length(value, key, limits.name_chars, "GATEWAY_MAX_NAME_CHARS")
            else:
                check_length(value, key, limits.description_chars,
                             "GATEWAY_MAX_DESCRIPTION_CHARS")
    ids = body.get("file_ids")
    for i, value in enumerate(ids if isinstance(ids, list) else []):
        if isinstance(value, str):
            check_length(value, f"file_ids[{i}]", limits.name_chars, "GATEWAY_MAX_NAME_CHARS")
    files = body.get("files")
    for i, spec in enumerate(files if isinstance(files, list) else []):
        if isinstance(spec, dict) and isinstance(spec.get("file_id"), str):
            check_length(spec["file_id"], f"files[{i}].file_id", limits.name_chars,
                         "GATEWAY_MAX_NAME_CHARS")

STATUSES = ("in_progress", "completed", "cancelled", "failed")


def file_counts(statuses: dict[str, int]) -> dict[str, int]:
    counts = {s: int(statuses.get(s, 0)) for s in STATUSES}
    return {**counts, "total": sum(counts.values())}


def vector_store(row: dict[str, Any], counts: dict[str, int], usage: int) -> dict[str, Any]:
    expires_after = row["expires_after"]
    expires_at = (row["last_active_at"] + expires_after["days"] * 86400
                  if expires_after else None)
    status = "expired" if expires_at is not None and expires_at <= time.time() else (
        "in_progress" if counts["in_progress"] else "completed")
    return {
        "id": row["id"], "object": "vector_store", "created_at": row["created_at"],
        "name": row["name"], "usage_bytes": usage,
        "file_counts": counts, "status": status, "expires_after": expires_after,
        "expires_at": expires_at, "last_active_at": row["last_active_at"],
        "metadata": row["metadata"],
    }


def vector_store_file(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["file_id"], "object": "vector_store.file", "created_at": row["created_at"],
        "usage_bytes": row["usage_bytes"], "vector_store_id": row["store_id"],
        "status": row["status"], "last_error": row["last_error"],
        "chunking_strategy": row["chunking"], "attributes": row["attributes"],
    }


def file_batch(row: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
    status = row["status"]
    if status != "cancelled":
        status = "in_progress" if counts["in_progress"] else (
            "failed" if counts["failed"] and not counts["completed"] else "completed")
    return {"id": row["id"], "object": "vector_store.files_batch",
            "created_at": row["created_at"], "vector_store_id": row["store_id"],
            "status": status, "file_counts": counts}


def store_not_found(store_id: str) -> Exception:
    return not_found(f"No vector store found with id '{ids.clipped(store_id)}'.",
                     param="vector_store_id")


def file_not_in_store(file_id: str, store_id: str) -> Exception:
    return not_found(f"No file found with id '{ids.clipped(file_id)}' in vector store "
                     f"'{store_id}'.", param="file_id")


def batch_not_found(batch_id: str, store_id: str) -> Exception:
    return not_found(f"No file batch found with id '{ids.clipped(batch_id)}' in vector store "
                     f"'{store_id}'.", param="batch_id")

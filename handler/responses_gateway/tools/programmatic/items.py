"""``program`` and ``program_output`` items a client sends back (a ``store: false`` chain, a
replayed output): their fields as openai-python 3.57's ``Program`` / ``ProgramOutput`` input
items require them. Imported with the request models, on the first create."""

from __future__ import annotations

from typing import Any, Literal

PROGRAM_FIELDS: dict[str, tuple[Any, Any]] = {
    "call_id": (str, ...),
    "code": (str, ...),
    "fingerprint": (str, ...),
}

OUTPUT_FIELDS: dict[str, tuple[Any, Any]] = {
    "call_id": (str, ...),
    "result": (str, ...),
    "status": (Literal["completed", "incomplete"], ...),
}

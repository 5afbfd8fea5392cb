"""A ``code_interpreter_call`` a client sends back as input (replaying a response's output):
its fields as OpenAI's ``ResponseCodeInterpreterToolCallParam`` requires them, which
translate/request_items.py makes into the item's model (strict; ``id`` required). Imported with
the request models, on the first create."""

from __future__ import annotations

from typing import Any, Literal

INPUT_FIELDS: dict[str, tuple[Any, Any]] = {
    "code": (str | None, ...),
    "container_id": (str, ...),
    "outputs": (list[dict[str, Any]] | None, ...),
    "status": (Literal["in_progress", "completed", "incomplete", "interpreting", "failed"], ...),
}

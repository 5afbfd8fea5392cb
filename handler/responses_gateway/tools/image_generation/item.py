"""An ``image_generation_call`` a client sends back as input: its fields, which
translate/request_items.py makes into the item's model (strict; ``id`` an item id, required).
Imported with the request models, on the first create."""

from __future__ import annotations

from typing import Any, Literal

INPUT_FIELDS: dict[str, tuple[Any, Any]] = {
    "result": (str | None, ...),
    "status": (Literal["in_progress", "completed", "generating", "failed"], ...),
}

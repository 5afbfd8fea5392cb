"""What every model of the create body shares: strictness, deferred building, tagged unions.

Every union is tagged with ``~``-prefixed tags so an error's location maps one-to-one onto
OpenAI's ``param`` (``input[2].content[0].image_url``) by dropping the tags
(translate/request_errors.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Discriminator, Field, Tag

from responses_gateway.translate.request_names import MAX_ID_LENGTH

NAME_PATTERN = r"^[a-zA-Z0-9_-]+$"

# ``defer_build``: the validators are built on the first create, not at import. Building them
# is about 35 ms, a fifth of a cold start, and the worker Lambda, the WebSocket API's connect
# and disconnect, and every route but create never validate a create body.
ITEM_CONFIG = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, defer_build=True)
PARAMS_CONFIG = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, defer_build=True)

Status = Literal["in_progress", "completed", "incomplete"]
ItemId = Annotated[str, Field(max_length=MAX_ID_LENGTH)]


def by_type(value: Any) -> str | None:
    """Discriminator for ``{"type": ...}`` unions; tags carry a ``~`` so they leave no param."""
    if isinstance(value, dict) and value.get("type") is not None:
        return f"~{value['type']}"
    return None


def _str_or_list(value: Any) -> str | None:
    if isinstance(value, str):
        return "~str"
    return "~list" if isinstance(value, list) else None


def str_or_parts(parts: Any) -> Any:
    """A field that is a string or an array of ``parts`` (message content, tool output)."""
    return Annotated[
        Union[Annotated[str, Tag("~str")], Annotated[list[parts], Tag("~list")]],  # noqa: UP007
        Discriminator(
            _str_or_list,
            custom_error_type="invalid_type",
            custom_error_message="one of a string or array of objects",
        ),
    ]

"""The request's ``image_generation`` tool, checked once with OpenAI's words and params.

The request models keep a tool the gateway does not model field by field as a loose object;
this is where its fields are checked (types and OpenAI's allowed values). What a given image
backend cannot do is refused by that backend (backends/base.py ``check``), also before
``response.created``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from responses_gateway.errors import (
    GatewayError,
    invalid_choice,
    invalid_request,
    invalid_type,
    kind_of,
    out_of_range,
)
from responses_gateway.tools.server import tool_fields

ACTIONS = ("generate", "edit", "auto")
BACKGROUNDS = ("transparent", "opaque", "auto")
FORMATS = ("png", "webp", "jpeg", "gif", "svg")
QUALITIES = ("low", "medium", "high", "xhigh", "max", "auto")
MODERATIONS = ("auto", "low")
FIDELITIES = ("high", "low")
#: the tool's fields (openai-python 3.57) that no image backend of the gateway honours
NOT_HONOURED = ("complexity", "frame_count", "frame_duration_ms", "svg")
MAX_PARTIAL_IMAGES = 3
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp",
               "gif": "image/gif", "svg": "image/svg+xml"}


@dataclass(frozen=True, slots=True)
class ImageParams:
    """What the client asked of the tool (OpenAI's defaults where it said nothing)."""

    param: str = "tools[0]"  # where the tool sits in the request, for a 400's param
    action: str = "auto"
    background: str = "auto"
    output_format: str = "png"
    output_compression: int | None = None
    quality: str = "auto"
    size: str = "auto"
    partial_images: int = 0
    moderation: str = "auto"
    mask: str | None = None  # input_image_mask.image_url: a data URL or base64

    @classmethod
    def of(cls, tool: Any, param: str) -> ImageParams:
        """The tool's fields checked; ``param`` is where it sits (``tools[0]``), or ``""``
        for the Images API's top-level fields (api/image_routes.py)."""
        fields = tool_fields(tool)
        values: dict[str, Any] = {"param": param}
        at = partial(_at, param)
        for name, allowed in (("action", ACTIONS), ("background", BACKGROUNDS),
                              ("output_format", FORMATS), ("quality", QUALITIES),
                              ("moderation", MODERATIONS), ("input_fidelity", FIDELITIES)):
            value = fields.get(name)
            if value is None:
                continue
            if value not in allowed:
                raise invalid_choice(at(name), allowed, value)
            if name in cls.__dataclass_fields__:  # input_fidelity: checked, not honoured
                values[name] = value
        model = fields.get("model")
        if model is not None and not isinstance(model, str):
            raise invalid_type(at("model"), "a string", model)
        size = fields.get("size")
        if size is not None:
            if not isinstance(size, str):
                raise invalid_type(at("size"), "a string", size)
            if size != "auto" and dimensions(size) is None:
                raise invalid_request(
                    f"Invalid value: '{size}'. Supported values are 'auto' or a size "
                    f"'WIDTHxHEIGHT' such as '1024x1024', '1024x1536' or '1536x1024'.",
                    param=at("size"), code="invalid_value")
            values["size"] = size
        for name, low, high in (("output_compression", 0, 100),
                                ("partial_images", 0, MAX_PARTIAL_IMAGES)):
            value = fields.get(name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise invalid_type(at(name), "an integer", value)
            if not low <= value <= high:
                raise out_of_range(at(name), low, high, value)
            values[name] = value
        for name in NOT_HONOURED if param else ():  # (the Images API refuses them itself)
            if fields.get(name) is not None:
                raise unsupported(at(name), fields[name])
        mask = fields.get("input_image_mask")
        if mask is not None:
            values["mask"] = _mask(mask, at("input_image_mask"))
        return cls(**values)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> ImageParams:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def named(self, field: str) -> str:
        return _at(self.param, field)


def _at(param: str, field: str) -> str:
    """A field's name in a 400: under the tool (``tools[0].size``) or top-level (``size``)."""
    return f"{param}.{field}" if param else field


def dimensions(size: str) -> tuple[int, int] | None:
    """``"1024x1536"`` as (width, height); None when it is not that shape."""
    width, sep, height = size.partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        return None
    if int(width) < 1 or int(height) < 1:
        return None
    return int(width), int(height)


def image_bytes(data: str, param: str) -> bytes:
    """A data URL or bare base64 as bytes; anything else is the client's 400 naming ``param``."""
    text = data.partition(",")[2] if data.startswith("data:") else data
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_request(
            f"Invalid base64 image data in '{param}'. Expected a base64-encoded data URL "
            f"with an image MIME type (e.g. 'data:image/png;base64,...').",
            param=param, code="invalid_value") from None


def _mask(mask: Any, param: str) -> str:
    if not isinstance(mask, Mapping):
        raise invalid_type(param, "an object", mask)
    if mask.get("file_id") is not None:
        raise invalid_request(
            "A mask by 'file_id' is not supported by this gateway; send the mask as a "
            "base64 data URL in 'image_url'.", param=f"{param}.file_id", code="invalid_value")
    url = mask.get("image_url")
    if url is not None and not isinstance(url, str):
        raise invalid_type(f"{param}.image_url", "a string", url)
    if not url:
        raise invalid_request(f"Missing required parameter: '{param}.image_url'.",
                              param=f"{param}.image_url", code="missing_required_parameter")
    if not url.startswith("data:image/"):
        raise invalid_request(
            "The mask must be a base64 data URL ('data:image/png;base64,...').",
            param=f"{param}.image_url", code="invalid_value")
    image_bytes(url, f"{param}.image_url")
    return url


def unsupported(name: str, value: Any, why: str = "") -> GatewayError:
    """A value no image backend of the gateway honours: refused, never dropped. A string is
    quoted, any other value named by its JSON kind (never Python's repr)."""
    what = f"'{value}'" if isinstance(value, str) else kind_of(value)
    return invalid_request(
        f"Invalid value for '{name}': {what} is not supported by this gateway's image "
        f"backend{': ' + why if why else ''}.", param=name, code="unsupported_value")

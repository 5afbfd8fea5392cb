"""The Images API (``POST /v1/images/generations``, ``/v1/images/edits``) over the
image_generation tool's backends: a request's fields checked with OpenAI's 400s, and what the
backends drew as OpenAI's ``ImagesResponse`` or its stream events.

The same parameters as the tool (params.py: ``size``, ``quality``, ``background``,
``output_format``, ``output_compression``, ``moderation``, ``partial_images``), here at the
top level of the body (a 400 names ``size``, not ``tools[0].size``). Images always come back
as base64 (``b64_json``), as from OpenAI's GPT image models, which refuse ``response_format``
(``unknown_parameter``): so does the gateway. What no backend of the gateway honours is
OpenAI's 400 naming the parameter: ``style`` (DALL-E's), ``complexity``, the GIF and SVG
options, ``input_fidelity``, ``markup``. ``model`` is accepted and the gateway's
image model (``GATEWAY_IMAGE_MODEL``) draws, as its chat routes map model names.
The HTTP side (auth, bodies, streaming, the usage ledger) is api/image_routes.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from responses_gateway.errors import (
    GatewayError,
    invalid_request,
    invalid_type,
    missing_parameter,
    out_of_range,
)
from responses_gateway.tools.image_generation.backends.base import Drawn, ImageFailure
from responses_gateway.tools.image_generation.params import ImageParams, unsupported

MAX_N = 10
MAX_PROMPT = 32_000  # characters (OpenAI's GPT image models)
#: the fields ImageParams checks, as the tool's
_PARAM_FIELDS = ("background", "output_format", "output_compression", "quality", "size",
                 "partial_images", "moderation")
#: accepted as they are (``model``: the gateway's image model draws)
_PLAIN_FIELDS = ("prompt", "model", "n", "response_format", "stream", "user",
                 "safety_identifier")
#: OpenAI's fields that no image backend of the gateway honours: a 400 naming them when set
UNSUPPORTED = ("style", "complexity", "frame_count", "frame_duration_ms", "svg")
GENERATE_FIELDS = frozenset((*_PARAM_FIELDS, *_PLAIN_FIELDS, *UNSUPPORTED))
#: (an edit has no ``moderation``: OpenAI's ImageEditParams)
EDIT_FIELDS = frozenset((*_PARAM_FIELDS, *_PLAIN_FIELDS, "frame_count", "frame_duration_ms",
                         "input_fidelity", "svg", "complexity")) - {"moderation"}
#: form fields of an edit that are numbers or booleans (multipart sends text)
INTEGERS = ("n", "output_compression", "partial_images", "frame_count", "frame_duration_ms")
BOOLEANS = ("stream",)
#: what ImagesResponse reports (``auto`` is what was asked, not what was made)
_BACKGROUNDS = ("transparent", "opaque")
_QUALITIES = ("low", "medium", "high", "xhigh", "max")
_ZERO_DETAILS = {"image_tokens": 0, "text_tokens": 0}


@dataclass(frozen=True, slots=True)
class ImagesRequest:
    """One Images API request, checked: what to draw, how many, streamed or not."""

    prompt: str
    params: ImageParams
    n: int = 1
    stream: bool = False
    #: ``safety_identifier``, else the deprecated ``user`` (OpenAI echoes the one it used)
    safety_identifier: str | None = None
    edit: bool = False

    @property
    def event_prefix(self) -> str:
        return "image_edit" if self.edit else "image_generation"


def parse(fields: Mapping[str, Any], *, edit: bool) -> ImagesRequest:
    """The body (JSON, or an edit's form fields already typed: :func:`form_fields`) checked."""
    allowed = EDIT_FIELDS if edit else GENERATE_FIELDS
    for name in fields:
        if name not in allowed:
            raise invalid_request(f"Unknown parameter: '{name}'.", param=name,
                                  code="unknown_parameter")
    for name in (*UNSUPPORTED, "input_fidelity"):
        if fields.get(name) is not None:
            raise unsupported(name, fields[name])
    prompt = fields.get("prompt")
    if prompt is None or prompt == "":
        raise missing_parameter("prompt")
    if not isinstance(prompt, str):
        raise invalid_type("prompt", "a string", prompt)
    if len(prompt) > MAX_PROMPT:
        raise invalid_request(
            f"Invalid 'prompt': string too long. Expected a string with maximum length "
            f"{MAX_PROMPT}, but got a string with length {len(prompt)} instead.",
            param="prompt", code="string_above_max_length")
    model = fields.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid_type("model", "a string", model)
    n = fields.get("n")
    if n is None:
        n = 1
    elif not isinstance(n, int) or isinstance(n, bool):
        raise invalid_type("n", "an integer", n)
    elif not 1 <= n <= MAX_N:
        raise out_of_range("n", 1, MAX_N, n)
    if fields.get("response_format") is not None:
        # OpenAI's GPT image models always answer base64 and refuse the parameter (the
        # DALL-E models that took it are retired): so does the gateway, in OpenAI's words
        raise invalid_request("Unknown parameter: 'response_format'.", param="response_format",
                              code="unknown_parameter")
    stream = fields.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid_type("stream", "a boolean", stream)
    who = None
    for name in ("safety_identifier", "user"):
        value = fields.get(name)
        if value is not None and not isinstance(value, str):
            raise invalid_type(name, "a string", value)
        who = who or value or None
    params = ImageParams.of({k: fields[k] for k in _PARAM_FIELDS if k in fields}, "")
    return ImagesRequest(prompt, params, n, bool(stream), who, edit)


def form_fields(form: Mapping[str, str]) -> dict[str, Any]:
    """An edit's text fields typed as JSON would have them (``n`` an integer, ``stream`` a
    boolean); a field that is not what it should be is the 400 naming it."""
    fields: dict[str, Any] = dict(form)
    for name in INTEGERS:
        value = fields.get(name)
        if value is not None:
            try:
                fields[name] = int(value)
            except ValueError:
                raise invalid_type(name, "an integer", value) from None
    for name in BOOLEANS:
        value = fields.get(name)
        if value is not None:
            if value.lower() not in ("true", "false"):
                raise invalid_type(name, "a boolean", value)
            fields[name] = value.lower() == "true"
    return fields


# -- answers ---------------------------------------------------------------------------------


def images_response(request: ImagesRequest, drawn: list[Drawn], created: int
                    ) -> dict[str, Any]:
    """OpenAI's ``ImagesResponse``: the images (base64) and the parameters they were made
    with; ``usage`` only when the image model reported tokens (Bedrock's report none)."""
    first = drawn[0]
    answer: dict[str, Any] = {"created": created,
                              "data": [_datum(d, request.prompt) for d in drawn]}
    if first.background in _BACKGROUNDS:
        answer["background"] = first.background
    answer["output_format"] = first.output_format
    if first.quality in _QUALITIES:
        answer["quality"] = first.quality
    if first.size != "auto":
        answer["size"] = first.size
    usage = summed_usage(drawn)
    if usage is not None:
        answer["usage"] = usage
    if request.safety_identifier:
        answer["safety_identifier"] = request.safety_identifier
    return answer


def _datum(drawn: Drawn, prompt: str) -> dict[str, Any]:
    """One image; ``revised_prompt`` only when the model revised it (GPT image models do
    not report one; the backends give the prompt itself then)."""
    datum: dict[str, Any] = {"b64_json": drawn.b64}
    if drawn.revised_prompt and drawn.revised_prompt != prompt:
        datum["revised_prompt"] = drawn.revised_prompt
    return datum


def summed_usage(drawn: list[Drawn]) -> dict[str, Any] | None:
    """The images' tokens added up, with the details OpenAI's ``Usage`` requires (zeros
    where the image model reported none); None when no image reported tokens."""
    reported = [d.usage for d in drawn if d.usage]
    if not reported:
        return None
    total: dict[str, Any] = {"input_tokens": 0, "input_tokens_details": dict(_ZERO_DETAILS),
                             "output_tokens": 0, "total_tokens": 0}
    outputs = False
    for usage in reported:
        for name in ("input_tokens", "output_tokens"):
            total[name] += usage.get(name, 0)
        total["total_tokens"] += usage.get("total_tokens",
                                           usage.get("input_tokens", 0)
                                           + usage.get("output_tokens", 0))
        for name in ("input_tokens_details", "output_tokens_details"):
            details = usage.get(name)
            if details:
                outputs = outputs or name == "output_tokens_details"
                kept = total.setdefault(name, dict(_ZERO_DETAILS))
                for key, value in details.items():
                    kept[key] = kept.get(key, 0) + value
    if not outputs:
        total.pop("output_tokens_details", None)
    return total


def partial_event(request: ImagesRequest, b64: str, index: int, created: int
                  ) -> dict[str, Any]:
    """``image_generation.partial_image`` (``image_edit.partial_image``): the requested
    settings, as OpenAI reports them before the image is done."""
    params = request.params
    return {"type": f"{request.event_prefix}.partial_image", "b64_json": b64,
            "background": params.background, "created_at": created,
            "output_format": params.output_format, "partial_image_index": index,
            "quality": params.quality, "size": params.size}


def completed_event(request: ImagesRequest, drawn: Drawn, created: int) -> dict[str, Any]:
    """``image_generation.completed`` (``image_edit.completed``): the image, what it was made
    with, and its ``usage`` (which the event requires: zeros from a model that reports none)."""
    event: dict[str, Any] = {
        "type": f"{request.event_prefix}.completed", "b64_json": drawn.b64,
        "background": drawn.background, "created_at": created,
        "output_format": drawn.output_format, "quality": drawn.quality, "size": drawn.size,
        "usage": summed_usage([drawn]) or {"input_tokens": 0,
                                           "input_tokens_details": dict(_ZERO_DETAILS),
                                           "output_tokens": 0, "total_tokens": 0}}
    if request.safety_identifier:
        event["safety_identifier"] = request.safety_identifier
    return event


def failure_error(failure: ImageFailure) -> GatewayError:
    """An image model's failure as the Images API answers it: the client's (a content filter,
    a mask it cannot use, a value the image server refused) a 400 naming the field,
    throttling a 429, a timeout a 504, anything else a 502."""
    if failure.type in ("invalid_request_error", "image_generation_user_error"):
        return GatewayError(400, failure.message, type=failure.type, code=failure.code,
                            param=failure.param)
    status = {"rate_limit_exceeded": 429, "timeout": 504}.get(failure.code, 502)
    return GatewayError(status, failure.message,
                        type="requests" if status == 429 else "server_error",
                        code=failure.code)

"""openai-python 3.57's request options the gateway honours only in part: what it can do is
accepted (and echoed as OpenAI echoes it), what it cannot is OpenAI's own error naming the
parameter, never silently ignored (docs/compatibility.md lists each).

- ``reasoning.mode``: only ``standard``; a backend model has one way of reasoning.
- ``background_options``: the ``2h``/``8h`` windows need ``background: true``, Standard
  processing and no ``stream`` (the type's docstring); honoured as ``soonest``.
- ``access_programs.cyber``: ``standard`` only; the Daybreak programs need OpenAI's
  authorization, which a gateway never has: OpenAI's 403.
- ``image.context_compression``: the gateway sends images as they are, so ``enabled``
  (require compression) is refused, ``auto`` resolves to ``disabled``.
- ``moderation``: no moderation model runs here.
"""

from __future__ import annotations

from typing import Any

from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.translate.request_errors import unsupported

#: a parsed create (translate/request_models.py's CreateResponseRequest, which calls these
#: while it validates: named by its role, not imported, so the two modules stay one way)
CreateResponseRequest = Any

#: The completion windows of discounted background execution (``soonest`` is not one).
LONG_WINDOWS = frozenset({"2h", "8h"})
#: ``service_tier`` values that are Standard processing.
STANDARD_TIERS = frozenset({"auto", "default"})


def check_options(req: CreateResponseRequest) -> None:
    """Refuse, as OpenAI words it, what the gateway cannot follow of the 3.57 options."""
    mode = req.reasoning.mode if req.reasoning is not None else None
    if mode is not None and mode != "standard":
        raise invalid_request(
            f"Unsupported value: 'reasoning.mode' does not support '{mode}' with this model. "
            "Supported values are: 'standard'.",
            param="reasoning.mode", code="unsupported_value",
        )
    _check_background_options(req)
    cyber = req.access_programs.cyber if req.access_programs is not None else None
    if cyber is not None and cyber != "standard":
        raise GatewayError(
            403,
            f"You are not authorized to use the '{cyber}' access program with this model.",
            type="permission_error", param="access_programs.cyber",
        )  # no code: OpenAI documents the 403, not a code for it
    compression = req.image.context_compression if req.image is not None else None
    if compression == "enabled":
        raise invalid_request(
            "Unsupported value: 'image.context_compression' does not support 'enabled' with "
            "this model. Supported values are: 'auto' and 'disabled'.",
            param="image.context_compression", code="unsupported_value",
        )
    if req.moderation is not None:
        raise unsupported(
            "moderation",
            "Moderation of responses is not supported by this gateway; run a moderation "
            "model on the input and output yourself.",
        )


def _check_background_options(req: CreateResponseRequest) -> None:
    options = req.background_options
    if options is None or options.completion_window not in LONG_WINDOWS:
        return
    window = options.completion_window
    param = "background_options.completion_window"
    if not req.background:
        raise invalid_request(
            f"The '{window}' completion window requires 'background' to be true.",
            param=param, code="invalid_value",
        )
    if req.stream:
        raise invalid_request(
            f"The '{window}' completion window cannot be used with 'stream' set to true.",
            param=param, code="invalid_value",
        )
    if req.service_tier is not None and req.service_tier not in STANDARD_TIERS:
        raise invalid_request(
            f"The '{window}' completion window requires Standard processing, but "
            f"'service_tier' is '{req.service_tier}'.",
            param=param, code="invalid_value",
        )


def echo_options(req: CreateResponseRequest) -> dict[str, Any]:
    """The Response fields these options set, when sent: ``access_programs`` (an explicit
    ``standard``; OpenAI shows an implicit one as null) and ``image`` (the effective
    compression, ``disabled``)."""
    echoed: dict[str, Any] = {}
    if req.access_programs is not None and req.access_programs.cyber is not None:
        echoed["access_programs"] = {"cyber": req.access_programs.cyber}
    if req.image is not None:
        echoed["image"] = {"context_compression": "disabled"}
    return echoed

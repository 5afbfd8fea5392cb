"""Bedrock / botocore failures -> OpenAI-shaped :class:`UpstreamError` (mapping doc parts 2.5, 4).

Pre-stream errors carry UpperCamel codes (``ThrottlingException``) and an HTTP status;
in-stream exception frames carry the lowerCamel member name (``throttlingException``) and no
status. Both go through one table so a throttle means 429 / ``rate_limit_exceeded`` whenever
it happens.
"""

from __future__ import annotations

import re
from typing import Any

from responses_gateway.errors import UpstreamError

# Bedrock code -> (HTTP status, OpenAI error type or None for the status default, code)
_CODES: dict[str, tuple[int, str | None, str | None]] = {
    "ValidationException": (400, "invalid_request_error", None),
    "AccessDeniedException": (403, "permission_error", None),
    "ResourceNotFoundException": (404, "invalid_request_error", "model_not_found"),
    "FTUFormNotFilled": (404, "invalid_request_error", "model_not_found"),
    "ModelTimeoutException": (408, "server_error", "model_timeout"),
    "ThrottlingException": (429, None, "rate_limit_exceeded"),
    "ServiceQuotaExceededException": (429, None, "rate_limit_exceeded"),
    "ModelNotReadyException": (503, "server_error", "model_not_ready"),
    "ModelErrorException": (502, "server_error", "model_error"),
    "ModelStreamErrorException": (502, "server_error", "server_error"),
    "InternalServerException": (500, "server_error", "server_error"),
    "ServiceUnavailableException": (503, "server_error", "server_error"),
}
# The gateway's own AWS credentials were refused: a deployment problem, not the caller's.
_CREDENTIAL_CODES = frozenset({
    "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException",
    "InvalidClientTokenId", "MissingAuthenticationTokenException", "IncompleteSignature",
})
_TOO_LONG = re.compile(
    r"too long|too many (input )?tokens|context (window|length)|exceeds? the maximum", re.I)


def _table_entry(code: str, status: int) -> tuple[int, str | None, str | None]:
    entry = _CODES.get(code[:1].upper() + code[1:])
    if entry is not None:
        return entry
    if code in _CREDENTIAL_CODES:
        return 500, "server_error", "server_error"
    return status, None, None  # unknown: keep the status, default type and code


def from_client_error(exc: Any) -> UpstreamError:
    """A botocore ``ClientError`` raised before any event (or by ``converse``)."""
    response = getattr(exc, "response", None) or {}
    error = response.get("Error") or {}
    code = str(error.get("Code") or "Unknown")
    message = str(error.get("Message") or exc)
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 500)
    status, kind, err_code = _table_entry(code, status)
    if status == 400 and _TOO_LONG.search(message):
        err_code = "context_length_exceeded"
    retry_after = None
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    if str(headers.get("retry-after", "")).isdigit():
        retry_after = float(headers["retry-after"])
    return UpstreamError(status, f"Bedrock returned {code}: {message}", type=kind, code=err_code,
                         retry_after=retry_after)


def from_stream_exception(exc: Any) -> UpstreamError:
    """An exception frame met while iterating; codes are the lowerCamel member names."""
    error = (getattr(exc, "response", None) or {}).get("Error") or {}
    code = str(error.get("Code") or "internalServerException")
    message = str(error.get("Message") or exc)
    status, _kind, _ = _table_entry(code, 500)
    if code == "throttlingException":
        err_code = "rate_limit_exceeded"
    elif code == "validationException":
        err_code = "context_length_exceeded" if _TOO_LONG.search(message) else "invalid_prompt"
    else:
        err_code = "server_error"
    return UpstreamError(status, f"Bedrock stream error {code}: {message}", code=err_code)


def from_botocore_error(exc: BaseException) -> UpstreamError:
    """Failures that are not Bedrock answers: transport, local validation, credentials."""
    name = type(exc).__name__
    if name == "ParamValidationError":
        return UpstreamError(400, f"The request could not be expressed for Bedrock: {exc}",
                             type="invalid_request_error", code=None)
    if name in ("ReadTimeoutError", "ResponseStreamingError") or "Timeout" in name:
        return UpstreamError(504, f"Bedrock timed out ({name}).", code="server_error")
    if name in ("NoCredentialsError", "PartialCredentialsError",
                "InvalidEndpointConfigurationError", "NoRegionError"):
        return UpstreamError(500, f"The gateway's Bedrock configuration is incomplete ({name}).",
                             code="server_error")
    return UpstreamError(502, f"Could not reach Bedrock ({name}): {exc}", code="server_error")


def error_chunk(error: UpstreamError) -> dict[str, Any]:
    """The in-band form the stream translator turns into ``response.failed``."""
    return {"error": {"message": error.message, "type": error.type, "param": None,
                      "code": error.code}}

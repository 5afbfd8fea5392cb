"""OpenAI-shaped errors.

Every failure a client can see is a :class:`GatewayError`; the HTTP layer renders it as
``{"error": {"message", "type", "param", "code"}}`` with its status. Raising these anywhere
(request validation, store, backends) keeps a traceback from ever reaching a client.
"""

from __future__ import annotations

from typing import Any

#: The largest magnitude of a client's integer that the gateway keeps: stores write integers to
#: signed 64-bit columns (SQLite), so a number past this is out of range wherever no smaller
#: bound applies (a query parameter, a bound the operator turned off with 0).
MAX_INT = 2**62


class GatewayError(Exception):
    """An error with the status, type, param and code OpenAI would send."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def __repr__(self) -> str:
        return f"GatewayError({self.status}, {self.message!r}, param={self.param!r})"


def invalid_request(
    message: str, param: str | None = None, code: str | None = None
) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def missing_parameter(param: str) -> GatewayError:
    """OpenAI's 400 for a required field left out (``param`` as the client spelled it)."""
    return invalid_request(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def invalid_type(param: str, expected: str, value: Any) -> GatewayError:
    """OpenAI's 400 for a value of the wrong JSON type: ``expected`` as its messages word it
    (``an integer``), what came as :func:`kind_of` says (never a Python type's name)."""
    return invalid_request(
        f"Invalid type for '{param}': expected {expected}, but got {kind_of(value)} instead.",
        param=param,
        code="invalid_type",
    )


def array_too_long(param: str, limit: int, length: int, setting: str = "") -> GatewayError:
    """OpenAI's 400 for an array past its maximum length (``setting``: the gateway's variable
    that sets ``limit``, named in the message where there is one)."""
    named = f" ({setting})" if setting else ""
    return invalid_request(
        f"Invalid '{param}': array too long. Expected an array with maximum length {limit}, "
        f"but got an array with length {length} instead{named}.",
        param=param, code="array_above_max_length")


def out_of_range(param: str, low: int, high: int, value: Any, setting: str = "") -> GatewayError:
    """OpenAI's 400 for an integer outside ``low..high`` (``setting``: the gateway's variable
    that sets a bound, named in the message where there is one)."""
    named = f" ({setting})" if setting else ""
    return invalid_request(
        f"Invalid '{param}': integer below minimum value or above maximum value. Expected a "
        f"value between {low} and {high}{named}, but got {value} instead.",
        param=param, code="integer_out_of_range")


def kind_of(value: Any) -> str:
    """A JSON value's kind as OpenAI's messages name it (``a string``, ``null``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):  # what came; what is expected is "a decimal" (temperature)
        return "a decimal number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def shown(value: Any) -> str:
    """A value as a message quotes it: strings in single quotes."""
    return f"'{value}'" if isinstance(value, str) else repr(value)


def invalid_choice(param: str, supported: tuple[str, ...], value: Any) -> GatewayError:
    """OpenAI's 400 for an enum given none of ``supported``: a string is quoted
    (``Invalid value: 'x'. Supported values are: 'a' and 'b'.``), any other JSON value is a
    wrong type named as :func:`kind_of` names it (``expected one of 'a' or 'b', but got a
    boolean instead``), never by Python's repr (``True``, ``None``, ``[]``)."""
    if isinstance(value, str):
        return invalid_request(
            f"Invalid value: '{value}'. Supported values are: {_listed(supported, 'and')}.",
            param=param, code="invalid_value")
    return invalid_request(
        f"Invalid type for '{param}': expected one of {_listed(supported, 'or')}, but got "
        f"{kind_of(value)} instead.", param=param, code="invalid_type")


def _listed(values: tuple[str, ...], word: str) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b', and 'c'``: values as OpenAI's messages list them."""
    quoted = [f"'{v}'" for v in values]
    if len(quoted) < 3:
        return f" {word} ".join(quoted)
    return f"{', '.join(quoted[:-1])}, {word} {quoted[-1]}"


def not_found(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(404, message, param=param, code=code)


# OpenAI's error `type` for each HTTP status it uses.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "requests",
}


def error_type_for_status(status: int) -> str:
    if status in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status]
    return "server_error" if status >= 500 else "invalid_request_error"


class UpstreamError(GatewayError):
    """The backend refused or broke. ``before_output`` tells whether a retry is still safe.

    Before the first chunk it becomes an HTTP error with the upstream's status; after output has
    started the pipeline ends the response as ``failed`` with ``code`` and ``message``.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        if type is None:
            type = error_type_for_status(status)
        if code is None:
            code = default_code_for_status(status)
        super().__init__(status, message, type=type, param=param, code=code)
        self.retry_after = retry_after


def default_code_for_status(status: int) -> str | None:
    if status == 429:
        return "rate_limit_exceeded"
    if status >= 500:
        return "server_error"
    return None

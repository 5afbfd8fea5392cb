"""What every HTTP route does the same way: find the gateway and the caller's tenant, read a
JSON body within ``GATEWAY_MAX_BODY_BYTES``, read list paging, answer JSON and OpenAI errors.

The route modules (response_routes, conversation_routes, context_routes, models) import these
from here, so none of them reaches into another's private helpers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from responses_gateway.api.json_body import decode_json
from responses_gateway.errors import MAX_INT, GatewayError, invalid_request, out_of_range
from responses_gateway.ids import clipped, request_id_header

if TYPE_CHECKING:
    from responses_gateway.responses.gateway import Gateway


class JSON(Response):
    """A JSON answer (orjson) carrying the request's ``x-request-id``."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)

    def init_headers(self, headers: Mapping[str, str] | None = None) -> None:
        super().init_headers(headers)
        self.raw_headers += request_id_header()


def error_response(error: GatewayError) -> Response:
    """OpenAI's error body with the error's status (and headers such as ``Retry-After``)."""
    return JSON(error.body(), status_code=error.status, headers=error.headers or None)


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


def tenant_of(request: Request) -> str:
    """The caller's tenant from its API key, or the 401 (api/auth.py)."""
    return request.app.state.auth.tenant(request.headers.get("authorization"))


async def json_body(request: Request) -> Any:
    """The decoded body; a 413 past ``GATEWAY_MAX_BODY_BYTES`` (declared or streamed) before
    more is read, a 400 for what is not JSON (api/json_body.py)."""
    limit = gateway_of(request).settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and limit and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if limit and len(body) > limit:
            raise _too_large(limit)
    return decode_json(body)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"The request body is larger than this gateway accepts ({limit} bytes; "
        "GATEWAY_MAX_BODY_BYTES).",
        code="request_too_large",
    )


def page_params(params: Mapping[str, str]) -> tuple[int, str]:
    """``limit`` (1-100, default 20) and ``order`` (default ``desc``) of a list route."""
    limit = int_param(params.get("limit"), "limit", 20)
    if not 1 <= limit <= 100:
        raise out_of_range("limit", 1, 100, limit)
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request(
            f"Invalid value: '{order}'. Supported values are: 'asc' and 'desc'.",
            param="order",
            code="invalid_value",
        )
    return limit, order


def include_param(params: QueryParams) -> frozenset[str]:
    """``include`` (``include=a&include=b`` or ``include[]=a``) of a read: OpenAI's 400
    naming ``include[i]`` for a value that is none of the create's (responses/conversations.py
    parse_include), never silently ignored."""
    from responses_gateway.responses.conversations import parse_include

    return parse_include(params.getlist("include") + params.getlist("include[]"))


def int_param(value: str | None, name: str, default: int) -> int:
    """An integer query parameter, ``default`` when absent; a 400 when not an integer. Only
    ASCII digits with an optional minus: Python's ``int`` also takes spaces around, ``_``
    between and other scripts' digits (``"٣"``), which no client means."""
    if value is None or value == "":
        return default
    digits = value[1:] if value.startswith("-") else value
    if not (digits.isascii() and digits.isdigit()):
        raise invalid_request(
            f"Invalid '{name}': expected an integer, but got {value[:64]!r} instead.",
            param=name)
    # (stores index sequence numbers as 64-bit integers; int() refuses 4,300 digits)
    number = int(value) if len(digits) <= 20 else MAX_INT
    if not -MAX_INT < number < MAX_INT:
        raise invalid_request(f"Invalid '{name}': {clipped(value)} is out of range.",
                              param=name)
    return number

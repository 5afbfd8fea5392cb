"""The request's ``mcp`` tool and its ``tool_choice``: models, echo and checks.

The registration names these models (``request_tool``, ``request_choice``:
tools/declaration.py); translate/request_tools.py imports them with the request models (the
first create) and puts them in its unions, so the create body's ``mcp`` tool is checked field
by field while no module outside this package spells it out. A request tool model answers
``echo()`` (what a Response lists) and ``check_tools(tools)`` (checks across the request's
tools, OpenAI's words); a choice model answers ``echo()`` and ``check(tools)``.

Their config is the request models' (``PARAMS_CONFIG``, translate/request_base.py, which a
tools package does not import: tests/test_mcp_units.py holds the two equal).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from responses_gateway.errors import invalid_request, missing_parameter
from responses_gateway.tools.server import Caller

CONFIG = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, defer_build=True)
#: a server label, as OpenAI allows a tool name
LABEL_PATTERN = r"^[a-zA-Z0-9_-]+$"
#: what a Response never shows of the tool: secrets (OpenAI leaves them out too) and the
#: connector fields this gateway refuses
_NOT_ECHOED = ("headers", "authorization", "connector_id", "tunnel_id")


class McpToolFilter(BaseModel):
    model_config = CONFIG
    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpApprovalFilter(BaseModel):
    model_config = CONFIG
    always: McpToolFilter | None = None
    never: McpToolFilter | None = None


def _list_or_object(value: Any) -> str | None:
    return "~list" if isinstance(value, list) else "~filter" if isinstance(value, dict) else None


def _mode_or_object(value: Any) -> str | None:
    return "~mode" if isinstance(value, str) else "~filter" if isinstance(value, dict) else None


class McpTool(BaseModel):
    """A remote MCP server whose tools the gateway runs (tools/mcp/client.py)."""

    model_config = CONFIG
    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64, pattern=LABEL_PATTERN)
    server_url: str | None = Field(default=None, max_length=2048)
    connector_id: str | None = None
    tunnel_id: str | None = None
    server_description: str | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    allowed_tools: (
        Annotated[
            Union[  # noqa: UP007
                Annotated[list[str], Tag("~list")],
                Annotated[McpToolFilter, Tag("~filter")],
            ],
            Discriminator(_list_or_object),
        ]
        | None
    ) = None
    require_approval: (
        Annotated[
            Union[  # noqa: UP007
                Annotated[Literal["always", "never"], Tag("~mode")],
                Annotated[McpApprovalFilter, Tag("~filter")],
            ],
            Discriminator(_mode_or_object),
        ]
        | None
    ) = None
    #: who may call its tools: the model, a program (tools/programmatic/); unset: the model
    allowed_callers: list[Caller] | None = None
    #: openai-python 3.57's; no tool search here hides the server's tools, so they are
    #: offered either way. Checked (a boolean) and echoed when sent.
    defer_loading: bool | None = None

    def echo(self) -> dict[str, Any]:
        """The tool as a Response lists it: never its headers or authorization."""
        echoed = {name: getattr(self, name) for name in type(self).model_fields
                  if name not in _NOT_ECHOED}
        if echoed["defer_loading"] is None:  # as a function tool's: left out when not sent
            echoed.pop("defer_loading")
        for name in ("allowed_tools", "require_approval"):  # filters: plain dicts, as sent
            if isinstance(echoed[name], BaseModel):
                echoed[name] = echoed[name].model_dump()
        return echoed

    @classmethod
    def check_tools(cls, tools: Sequence[tuple[int, McpTool]]) -> None:
        """OpenAI's connectors and tunnels live inside OpenAI; the gateway reaches a server
        URL (where it may connect is decided when it connects). Labels are unique."""
        labels: set[str] = set()
        for i, tool in tools:
            for field_name in ("connector_id", "tunnel_id"):
                if getattr(tool, field_name) is not None:
                    raise invalid_request(
                        f"'{field_name}' is not supported by this gateway (OpenAI's connectors "
                        f"and tunnels run inside OpenAI); give the MCP server's 'server_url' "
                        f"instead.",
                        param=f"tools[{i}].{field_name}", code="unsupported_parameter",
                    )
            if tool.server_url is None:
                raise missing_parameter(f"tools[{i}].server_url")
            if tool.server_label in labels:
                raise invalid_request(
                    f"Duplicate MCP server_label '{tool.server_label}': each MCP tool needs its "
                    f"own label.",
                    param=f"tools[{i}].server_label",
                    code="invalid_value",
                )
            labels.add(tool.server_label)
            _check_server_url(tool.server_url, f"tools[{i}].server_url")
            _check_headers(tool, f"tools[{i}]")


def _check_server_url(url: str, param: str) -> None:
    """A ``server_url`` the gateway can use at all: http(s), a host DNS can carry. Whether
    it may connect there is decided when it connects (net/policy.py, net/pinned.py)."""
    from responses_gateway.net import pinned, policy  # loads only for MCP requests

    try:
        pinned.http_url(url)
    except pinned.BadUrl as exc:
        raise invalid_request(
            f"Invalid 'server_url': {policy.shown_url(url)!r} is not a usable URL ({exc}).",
            param=param, code="invalid_value",
        ) from None


#: an HTTP header's name (RFC 9110 token) and a value HTTP/1.1 can carry: visible ASCII,
#: spaces and tabs, no CR or LF
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
#: headers the gateway's HTTP client writes itself: one sent by the client would break the
#: request's framing or its pinned host
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                          "upgrade", "te", "trailer", "keep-alive"})


def _check_headers(tool: McpTool, param: str) -> None:
    """``headers`` (and ``authorization``) can be sent: a name that is no HTTP token, a value
    with a line break or a non-ASCII character, or a header the HTTP client writes itself was
    a 424 naming a Python exception (``LocalProtocolError``) once the server was dialled; it
    is the client's 400 naming the header, before anything is sent. A value is never quoted
    (it may be a secret)."""
    for name, value in (tool.headers or {}).items():
        if not _HEADER_NAME.fullmatch(name):
            raise invalid_request(
                f"Invalid '{param}.headers': '{name[:64]}' is not an HTTP header name.",
                param=f"{param}.headers", code="invalid_value")
        where = f"{param}.headers.{name}"
        if name.lower() in _OWN_HEADERS:
            raise invalid_request(
                f"Invalid '{where}': the gateway's HTTP client sets this header itself.",
                param=where, code="invalid_value")
        if not _HEADER_VALUE.fullmatch(value):
            raise invalid_request(
                f"Invalid '{where}': a header value may hold only printable ASCII characters, "
                "spaces and tabs.", param=where, code="invalid_value")
    if tool.authorization is not None and not _HEADER_VALUE.fullmatch(tool.authorization):
        raise invalid_request(
            f"Invalid '{param}.authorization': it may hold only printable ASCII characters, "
            "spaces and tabs.", param=f"{param}.authorization", code="invalid_value")


class ToolChoiceMcp(BaseModel):
    """Use a tool of one MCP server (``name``), or any of its tools (no ``name``)."""

    model_config = CONFIG
    type: Literal["mcp"]
    server_label: str
    name: str | None = None

    def echo(self) -> dict[str, Any]:
        return {"type": "mcp", "server_label": self.server_label, "name": self.name}

    def check(self, tools: Sequence[BaseModel]) -> None:
        """It names an MCP server of ``tools`` (whether that server offers ``name`` is known
        once it is listed: tools/mcp/tool.py)."""
        if self.server_label not in {tool.server_label for tool in tools
                                     if isinstance(tool, McpTool)}:
            raise invalid_request(
                f"Tool choice MCP server '{self.server_label}' is not one of the MCP servers "
                "in 'tools'.",
                param="tool_choice.server_label",
                code="invalid_value",
            )

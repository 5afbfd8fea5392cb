"""Remote MCP servers whose tools the gateway runs, as OpenAI runs them (issue 22).

A request's ``{"type": "mcp", ...}`` tool names a server; the gateway connects to it with the
official ``mcp`` SDK (Streamable HTTP, or the older SSE transport for a URL ending in ``/sse``),
lists its tools before the response starts (a failure is OpenAI's 424), offers them to the
model as ``<server_label>__<tool>`` functions (tools/catalog.py), and runs the model's calls
between model turns (responses/turns.py; tools/mcp/tool.py makes the items).

What this module keeps safe:

- **Where it connects**: every HTTP request to a server passes ``net/policy.py`` (strict host,
  all addresses public unless the host is in ``GATEWAY_MCP_ALLOW_HOSTS``) and is pinned to the
  checked address (``net/pinned.py``, shared with the Bedrock media fetcher), so DNS cannot
  swap in a private one between check and connect; redirects
  are followed only within the server's origin (the SDK's rule), each hop checked again.
- **Secrets**: ``headers`` and ``authorization`` live only in the HTTP client of the open
  connection and, for a response run later (background), sealed in the stored request
  (``seal_secrets``: translate/sealing.py, bound to the tenant). They are never echoed, logged
  or stored in clear; an error message never quotes them.
- **Bounds**: each call (and connecting plus listing) has ``GATEWAY_MCP_CALL_TIMEOUT``; a
  tool's output over ``GATEWAY_MCP_MAX_OUTPUT_BYTES`` is a failed call, and the bytes read from
  a server are capped near that on the wire. Every failure is the ``mcp_call`` item's
  ``error`` (one of ``McpToolCallError``'s three shapes), never a crash.

The SDK and ``httpx2`` load on first use (tests/test_entry_imports.py). Each connection's
``async with`` is held by a task of its own (anyio scopes must be entered and left by one
task; the job's generator yields across tasks), and calls are made from the job's task, so a
cancel or the response's deadline interrupts a call where it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from responses_gateway.net import pinned as net_pinned
from responses_gateway.net import policy as net_policy
from responses_gateway.tools.server import DIRECT, allowed_callers

logger = logging.getLogger("responses_gateway.mcp")

#: JSON-RPC codes used in ``mcp_protocol_error`` items the gateway makes itself.
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
INVALID_PARAMS = -32602
_MAX_PAGES = 20  # tools/list pages read from one server
_WIRE_SLACK = 64 * 1024  # JSON-RPC framing and escapes around a capped output


# -- configuration: one `mcp` tool of the request -------------------------------------------


class McpTool(Protocol):
    """A request's ``mcp`` tool as this module reads it (params.py's ``McpTool``, or any
    object with these fields: a test's)."""

    server_label: str
    server_url: str | None
    allowed_tools: Any
    require_approval: Any
    headers: dict[str, str] | None
    authorization: str | None


@dataclass(frozen=True, slots=True)
class McpServer:
    """One ``mcp`` tool as the gateway keeps it: everything but its secrets."""

    label: str
    url: str
    allowed_tools: list[str] | dict[str, Any] | None = None
    require_approval: str | dict[str, Any] | None = None
    #: ``allowed_callers`` (``direct``: the model; ``programmatic``: a program)
    callers: tuple[str, ...] = (DIRECT,)

    @classmethod
    def of(cls, tool: McpTool) -> McpServer:
        allowed = tool.allowed_tools
        approval = tool.require_approval
        return cls(
            label=tool.server_label,
            url=tool.server_url or "",
            allowed_tools=allowed.model_dump() if hasattr(allowed, "model_dump") else allowed,  # type: ignore[arg-type]
            require_approval=(
                approval.model_dump() if hasattr(approval, "model_dump") else approval  # type: ignore[arg-type]
            ),
            callers=allowed_callers(tool),
        )

    def to_record(self) -> dict[str, Any]:
        return {"label": self.label, "url": self.url, "allowed_tools": self.allowed_tools,
                "require_approval": self.require_approval, "callers": list(self.callers)}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> McpServer:
        return cls(data["label"], data["url"], data.get("allowed_tools"),
                   data.get("require_approval"), tuple(data.get("callers") or (DIRECT,)))

    def allows(self, tool: Mapping[str, Any]) -> bool:
        """``allowed_tools``: a list of names, or a filter (``tool_names``, ``read_only``)."""
        allowed = self.allowed_tools
        if allowed is None:
            return True
        if isinstance(allowed, list):
            return tool.get("name") in allowed
        return _matches(allowed, tool, empty=True)

    def needs_approval(self, tool: Mapping[str, Any]) -> bool:
        """``require_approval``: ``never``, ``always`` or ``{"never": filter, "always": filter}``;
        unset, or a tool no filter names, needs approval (OpenAI asks before any data is
        shared with a server unless told otherwise)."""
        mode = self.require_approval
        if mode is None or mode == "always":
            return True
        if mode == "never":
            return False
        never = mode.get("never") if isinstance(mode, dict) else None
        return not (never and _matches(never, tool, empty=False))


def _matches(spec: Mapping[str, Any], tool: Mapping[str, Any], *, empty: bool) -> bool:
    """Whether a tool filter names ``tool``; a filter with no criterion matches ``empty``."""
    names, read_only = spec.get("tool_names"), spec.get("read_only")
    if names is None and read_only is None:
        return empty
    if names is not None and tool.get("name") not in names:
        return False
    return read_only is None or _read_only(tool) == read_only


def _read_only(tool: Mapping[str, Any]) -> bool:
    annotations = tool.get("annotations") or {}
    return bool(annotations.get("readOnlyHint") or annotations.get("read_only"))


def secrets_of(tool: McpTool) -> dict[str, str]:
    """The HTTP headers a server gets: ``headers``, and ``authorization`` as a bearer token."""
    headers = dict(tool.headers or {})
    if tool.authorization:
        headers["Authorization"] = f"Bearer {tool.authorization}"
    return headers


@dataclass(frozen=True, slots=True)
class Limits:
    """The deployment's bounds on MCP traffic (config.py: GATEWAY_MCP_*)."""

    allow_hosts: frozenset[str] = frozenset()
    call_timeout: float = 60.0
    max_output_bytes: int = 1024 * 1024
    resolver: net_policy.Resolver | None = None

    @classmethod
    def of(cls, settings: Any) -> Limits:
        return cls(
            allow_hosts=net_policy.allow_list(settings.mcp_allow_hosts),
            call_timeout=settings.mcp_call_timeout,
            max_output_bytes=settings.mcp_max_output_bytes,
        )

    @property
    def wire_bytes(self) -> int:
        """Most bytes one answer may take on the wire (escapes can double text, and more)."""
        return self.max_output_bytes * 6 + _WIRE_SLACK


# -- errors --------------------------------------------------------------------------------


def protocol_error(code: int, message: str) -> dict[str, Any]:
    return {"type": "mcp_protocol_error", "code": code, "message": message}


def http_error(code: int, message: str) -> dict[str, Any]:
    return {"type": "http_error", "code": code, "message": message}


def execution_error(text: str) -> dict[str, Any]:
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}


class McpFailure(Exception):
    """A server could not be reached or answered wrongly; ``error`` is the item's error."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message") or "MCP failure")
        self.error = error


def _failure(exc: BaseException, limits: Limits) -> McpFailure:
    """Any exception from the SDK or the transport as an ``McpToolCallError`` (no secrets:
    messages name the gateway's reason or the server's status, never a header)."""
    exc = _unwrap(exc)
    if isinstance(exc, McpFailure):
        return exc
    if isinstance(exc, TimeoutError):
        return McpFailure(protocol_error(
            REQUEST_TIMEOUT, f"The MCP server did not answer within {limits.call_timeout:g} s "
            "(GATEWAY_MCP_CALL_TIMEOUT)."))
    if isinstance(exc, net_policy.Refused):
        return McpFailure(http_error(403, f"The gateway refused to connect: {exc}."))
    if isinstance(exc, _TooLarge):
        return McpFailure(execution_error(str(exc)))
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return McpFailure(protocol_error(CONNECTION_CLOSED, "The MCP server closed the "
                                             "connection before answering."))
        return McpFailure(protocol_error(exc.code, exc.message))
    import httpx2

    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        return McpFailure(http_error(status, f"The MCP server answered HTTP {status}."))
    if isinstance(exc, (httpx2.HTTPError, OSError, ConnectionError)):
        return McpFailure(protocol_error(
            CONNECTION_CLOSED, "The MCP server could not be reached or closed the connection "
            f"({type(exc).__name__})."))
    logger.warning("MCP failure: %s", type(exc).__name__)
    return McpFailure(protocol_error(CONNECTION_CLOSED, f"The MCP connection failed "
                                     f"({type(exc).__name__})."))


def _unwrap(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


class _TooLarge(Exception):
    pass


# -- one connection ----------------------------------------------------------------------------


class Connection:
    """One MCP session with one server for the length of one response."""

    def __init__(self, server: McpServer, headers: Mapping[str, str], limits: Limits) -> None:
        self.server = server
        self._headers = dict(headers)
        self._limits = limits
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self.broken: McpFailure | None = None
        self.too_large: str | None = None  # set by the transport when it cut an answer off

    def __repr__(self) -> str:  # never the headers
        return f"<mcp.Connection {self.server.label}>"

    async def open(self) -> None:
        """Connect and initialize, within the call timeout; :class:`McpFailure` if not."""
        if self._task is not None:
            assert self._ready is not None
            await asyncio.shield(self._ready)
            return
        limits = self._limits
        self._ready = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(), name=f"mcp:{self.server.label}")
        try:
            async with asyncio.timeout(limits.call_timeout):
                await asyncio.shield(self._ready)
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise _failure(exc, limits) from None

    async def _hold(self) -> None:
        """Enter the SDK's client, stay inside it until :meth:`aclose`, then leave it."""
        assert self._ready is not None and self._stop is not None
        ready = self._ready
        try:
            host, port = net_pinned.host_port(net_pinned.http_url(self.server.url))
            await net_policy.checked_addresses(  # a clear refusal before any connection
                host, port, resolver=self._limits.resolver, allow_hosts=self._limits.allow_hosts)
            async with contextlib.AsyncExitStack() as stack:
                self._client = await stack.enter_async_context(self._sdk_client())
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if not isinstance(exc, asyncio.CancelledError)
                                    else McpFailure(protocol_error(CONNECTION_CLOSED, "cancelled")))
                ready.exception()  # retrieved here: open() reads it through the shield
            elif not isinstance(exc, asyncio.CancelledError):
                self.broken = _failure(exc, self._limits)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    @property
    def closed(self) -> bool:
        """Opened once and no longer usable (the server went away): connect anew."""
        return self._task is not None and self._task.done()

    def _sdk_client(self) -> Any:
        sse = _path_of(self.server.url).rstrip("/").endswith("/sse")  # the older HTTP+SSE
        return _ClientWithHttp(self.server.url, self._headers, self._limits, sse=sse,
                               on_too_large=self._cut_off)

    def _cut_off(self, message: str) -> None:
        self.too_large = message

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists, as ``mcp_list_tools`` reports them."""
        client = self._require()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(self._limits.call_timeout):
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(_tool_of(tool) for tool in page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            raise _failure(exc, self._limits) from None
        return tools

    async def call(
        self, name: str, arguments: dict[str, Any]
    ) -> tuple[str | None, dict[str, Any] | None]:
        """Run one tool: ``(output, None)`` or ``(None, error)``; never raises but on cancel."""
        limits = self._limits
        try:
            client = self._require()
            async with asyncio.timeout(limits.call_timeout):
                result = await client.call_tool(name, arguments)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if self.too_large is not None:  # the SDK reports the cut answer as a lost one
                message, self.too_large = self.too_large, None
                return None, execution_error(message)
            return None, _failure(exc, limits).error
        content = [_block(block) for block in result.content or ()]
        if result.is_error:
            return None, {"type": "mcp_tool_execution_error", "content": content}
        output = _output_text(content, result.structured_content)
        size = len(output.encode())
        if size > limits.max_output_bytes:
            return None, execution_error(
                f"The tool's output ({size} bytes) is larger than this gateway accepts "
                f"({limits.max_output_bytes} bytes, GATEWAY_MCP_MAX_OUTPUT_BYTES).")
        return output, None

    def _require(self) -> Any:
        if self._client is None:
            raise self.broken or McpFailure(protocol_error(
                CONNECTION_CLOSED, "The MCP server closed the connection."))
        return self._client

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        assert self._stop is not None
        self._stop.set()
        try:
            async with asyncio.timeout(2):
                await asyncio.shield(task)
        except BaseException:  # a server that will not let go: stop holding it
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class _ClientWithHttp:
    """The SDK client over Streamable HTTP (or SSE) with the gateway's pinned ``httpx2``
    client, entered and left together."""

    def __init__(self, url: str, headers: Mapping[str, str], limits: Limits, *,
                 sse: bool, on_too_large: Callable[[str], None]) -> None:
        self._url, self._headers, self._limits, self._sse = url, headers, limits, sse
        self._on_too_large = on_too_large
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Any:
        from mcp import Client

        limits = self._limits
        async with contextlib.AsyncExitStack() as stack:
            if self._sse:
                from mcp.client.sse import sse_client

                def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
                    return _http_client(self._headers, limits, self._on_too_large)

                transport = sse_client(self._url, httpx_client_factory=factory)
            else:
                from mcp.client.streamable_http import streamable_http_client

                http = await stack.enter_async_context(
                    _http_client(self._headers, limits, self._on_too_large))
                transport = streamable_http_client(self._url, http_client=http,
                                                   max_sse_event_size=limits.wire_bytes)
            client = await stack.enter_async_context(Client(transport, mode="legacy"))
            self._stack = stack.pop_all()
        return client

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)


def _http_client(
    headers: Mapping[str, str], limits: Limits, on_too_large: Callable[[str], None]
) -> Any:
    import httpx2

    return httpx2.AsyncClient(
        headers=dict(headers),
        transport=net_pinned.pinned_transport(
            httpx2, resolver=limits.resolver, allow_hosts=limits.allow_hosts,
            # one answer per POST; the GET event stream is capped per event by the SDK
            body_limit=lambda request: limits.wire_bytes if request.method == "POST" else None,
            too_large=lambda _: _too_large(limits, on_too_large)),
        timeout=httpx2.Timeout(limits.call_timeout, read=max(limits.call_timeout, 300.0)),
        follow_redirects=False,
        trust_env=False,
    )


def _too_large(limits: Limits, on_too_large: Callable[[str], None]) -> _TooLarge:
    message = (f"The MCP server's answer is larger than this gateway accepts (more than "
               f"{limits.max_output_bytes} bytes of output; GATEWAY_MCP_MAX_OUTPUT_BYTES).")
    on_too_large(message)
    return _TooLarge(message)


def _path_of(url: str) -> str:
    return url.split("?", 1)[0].split("#", 1)[0]


def _tool_of(tool: Any) -> dict[str, Any]:
    """An SDK ``Tool`` as an ``mcp_list_tools`` entry (``McpListToolsTool``)."""
    entry: dict[str, Any] = {"name": tool.name, "input_schema": tool.input_schema or {}}
    if tool.description is not None:
        entry["description"] = tool.description
    annotations = tool.annotations
    entry["annotations"] = (
        annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
        if annotations is not None else None
    )
    return entry


def _block(block: Any) -> dict[str, Any]:
    return block.model_dump(by_alias=True, exclude_none=True, mode="json")


def _output_text(content: Sequence[dict[str, Any]], structured: Any) -> str:
    """What the model reads: text blocks joined; other blocks (images, resources) as JSON."""
    parts = [
        block["text"] if block.get("type") == "text" and isinstance(block.get("text"), str)
        else orjson.dumps(block).decode()
        for block in content
    ]
    if not parts and structured is not None:
        return orjson.dumps(structured).decode()
    return "\n".join(parts)

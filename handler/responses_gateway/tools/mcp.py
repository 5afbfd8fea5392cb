"""Remote MCP servers whose tools the gateway runs, as OpenAI runs them (issue 22).

A request's ``{"type": "mcp", ...}`` tool names a server; the gateway connects to it with the
official ``mcp`` SDK (Streamable HTTP, or the older SSE transport for a URL ending in ``/sse``),
lists its tools before the response starts (a failure is OpenAI's 424), offers them to the
model as ``<server_label>__<tool>`` functions (tools/catalog.py), and runs the model's calls
between model turns (runner.py's turn loop; translate/stream.py makes the items).

What this module keeps safe:

- **Where it connects**: every HTTP request to a server passes ``net_policy`` (strict host,
  all addresses public unless the host is in ``GATEWAY_MCP_ALLOW_HOSTS``) and is pinned to the
  checked address, so DNS cannot swap in a private one between check and connect; redirects
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from responses_gateway.errors import GatewayError
from responses_gateway.net import policy as net_policy

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import McpTool

logger = logging.getLogger("responses_gateway.mcp")

#: JSON-RPC codes used in ``mcp_protocol_error`` items the gateway makes itself.
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
INVALID_PARAMS = -32602
_MAX_PAGES = 20  # tools/list pages read from one server
_WIRE_SLACK = 64 * 1024  # JSON-RPC framing and escapes around a capped output


# -- configuration: one `mcp` tool of the request -------------------------------------------


@dataclass(frozen=True, slots=True)
class McpServer:
    """One ``mcp`` tool as the gateway keeps it: everything but its secrets."""

    label: str
    url: str
    allowed_tools: list[str] | dict[str, Any] | None = None
    require_approval: str | dict[str, Any] | None = None

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
        )

    def to_record(self) -> dict[str, Any]:
        return {"label": self.label, "url": self.url, "allowed_tools": self.allowed_tools,
                "require_approval": self.require_approval}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> McpServer:
        return cls(data["label"], data["url"], data.get("allowed_tools"),
                   data.get("require_approval"))

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
            host = _host_of(self.server.url)
            await net_policy.checked_addresses(  # a clear refusal before any connection
                host[0], host[1], resolver=self._limits.resolver,
                allow_hosts=self._limits.allow_hosts)
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
        transport=_pinned_transport(limits, on_too_large),
        timeout=httpx2.Timeout(limits.call_timeout, read=max(limits.call_timeout, 300.0)),
        follow_redirects=False,
        trust_env=False,
    )


def _pinned_transport(limits: Limits, on_too_large: Callable[[str], None]) -> Any:
    import httpx2

    class PinnedTransport(httpx2.AsyncBaseTransport):
        """Each request checked by net_policy and sent to the checked address (Host header
        and TLS SNI keep the name); an answer's body capped near the output limit."""

        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport(trust_env=False)

        async def handle_async_request(self, request: Any) -> Any:
            url = request.url
            if url.scheme not in ("http", "https"):
                raise net_policy.Refused("only http and https URLs can be used")
            host = url.raw_host.decode("ascii").lower()
            port = url.port or (443 if url.scheme == "https" else 80)
            addresses = await net_policy.checked_addresses(
                host, port, resolver=limits.resolver, allow_hosts=limits.allow_hosts)
            request.url = url.copy_with(host=str(addresses[0]))
            if url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
            response = await self._inner.handle_async_request(request)
            if request.method == "POST":  # one answer; the GET stream is capped per event
                response.stream = Capped(response.stream, limits.wire_bytes)
            return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    class Capped(httpx2.AsyncByteStream):
        """A response body that stops past ``limit`` bytes."""

        def __init__(self, stream: Any, limit: int) -> None:
            self._stream, self._limit = stream, limit

        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self._stream:
                seen += len(chunk)
                if seen > self._limit:
                    message = (
                        f"The MCP server's answer is larger than this gateway accepts (more "
                        f"than {limits.max_output_bytes} bytes of output; "
                        f"GATEWAY_MCP_MAX_OUTPUT_BYTES).")
                    on_too_large(message)
                    raise _TooLarge(message)
                yield chunk

        async def aclose(self) -> None:
            await self._stream.aclose()

    return PinnedTransport()


def _host_of(url: str) -> tuple[str, int]:
    import httpx2

    parsed = httpx2.URL(url)
    if parsed.scheme not in ("http", "https"):
        raise net_policy.Refused("only http and https URLs can be used")
    return (parsed.raw_host.decode("ascii").lower(),
            parsed.port or (443 if parsed.scheme == "https" else 80))


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


def check_url(url: str, param: str) -> None:
    """A ``server_url`` the gateway can use at all: http(s), a host DNS can carry."""
    from responses_gateway.errors import invalid_request

    try:
        host, _ = _host_of(url)
        if not host:
            raise ValueError("no host")
        net_policy.literal_address(host)
    except (ValueError, net_policy.Refused, Exception) as exc:  # httpx2.InvalidURL included
        raise invalid_request(
            f"Invalid 'server_url': {net_policy.shown_url(url)!r} is not a valid http(s) URL "
            f"({type(exc).__name__ if not isinstance(exc, ValueError) else exc}).",
            param=param, code="invalid_value",
        ) from None


# -- the tools of one response ---------------------------------------------------------------


@dataclass
class Approved:
    """A call the client approved (``mcp_approval_response``): run first in the response."""

    label: str
    name: str
    arguments: str
    approval_request_id: str


@dataclass
class McpTools:
    """The MCP servers of one response: their tools, open connections, approvals, secrets."""

    servers: dict[str, McpServer]
    limits: Limits
    tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> allowed
    listed: list[dict[str, Any]] = field(default_factory=list)  # items made at prepare
    approved: list[Approved] = field(default_factory=list)
    headers: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    connections: dict[str, Connection] = field(default_factory=dict)
    calls_run: int = 0
    #: headers still sealed (a stored response): opened on the first connection, so a key
    #: that cannot open them fails that call, not the whole response
    sealed: tuple[str, Callable[[str], dict[str, Any]]] | None = field(default=None, repr=False)

    # -- building (Gateway.prepare) --

    @classmethod
    def of(cls, tools: Iterable[McpTool], limits: Limits) -> McpTools:
        servers: dict[str, McpServer] = {}
        headers: dict[str, dict[str, str]] = {}
        for tool in tools:
            server = McpServer.of(tool)
            servers[server.label] = server
            headers[server.label] = secrets_of(tool)
        return cls(servers, limits, headers=headers)

    async def list_all(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Each server's tools: from an ``mcp_list_tools`` item already in the conversation
        (OpenAI lists a server once per conversation), else listed now, which makes this
        response's ``mcp_list_tools`` item. A server that cannot be listed is OpenAI's 424."""
        cached = {
            item.get("server_label"): item.get("tools")
            for item in history
            if item.get("type") == "mcp_list_tools" and not item.get("error")
            and isinstance(item.get("tools"), list)
        }

        async def one(label: str) -> None:
            server = self.servers[label]
            if label in cached:
                self.tools[label] = [t for t in cached[label] if server.allows(t)]
                return
            try:
                connection = await self.connection(label)
                found = await connection.list_tools()
            except McpFailure as failure:
                raise _listing_error(label, failure.error) from None
            self.tools[label] = [t for t in found if server.allows(t)]
            self.listed.append({"server_label": label, "tools": self.tools[label]})

        try:
            await asyncio.gather(*(one(label) for label in self.servers))
        except BaseException:
            await self.aclose()
            raise
        order = list(self.servers)
        self.listed.sort(key=lambda entry: order.index(entry["server_label"]))

    def functions(self) -> list[tuple[str, dict[str, Any]]]:
        """(server label, chat function) for every tool the model is offered."""
        out = []
        for label, tools in self.tools.items():
            for tool in tools:
                function: dict[str, Any] = {"name": tool["name"],
                                            "parameters": tool.get("input_schema") or {}}
                if tool.get("description"):
                    function["description"] = tool["description"]
                out.append((label, function))
        return out

    def find_approval(
        self, items: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
    ) -> None:
        """This turn's approved ``mcp_approval_response`` items: their calls run first."""
        from responses_gateway.errors import invalid_request

        requests = {item.get("id"): item for item in [*history, *items]
                    if item.get("type") == "mcp_approval_request"}
        done = {item.get("approval_request_id") for item in [*history, *items]
                if item.get("type") == "mcp_call"}
        for index, item in enumerate(items):
            if item.get("type") != "mcp_approval_response" or not item.get("approve"):
                continue
            request_id = item.get("approval_request_id")
            request = requests.get(request_id)
            if request is None:
                raise invalid_request(
                    f"No MCP approval request with id '{request_id}' was found in this "
                    f"conversation.", param=f"input[{index}].approval_request_id",
                    code="invalid_value")
            if request_id in done:
                continue
            label = str(request.get("server_label"))
            if label not in self.servers:
                raise invalid_request(
                    f"The approved call is to MCP server '{label}', which is not among this "
                    f"request's tools; send its 'mcp' tool again.", param="tools",
                    code="invalid_value")
            self.approved.append(Approved(label, str(request.get("name")),
                                          str(request.get("arguments") or "{}"), request_id))

    # -- the record (a background worker runs it elsewhere) --

    def to_record(self, seal: Any) -> dict[str, Any]:
        """JSON-safe, secrets sealed (``seal``: the tenant-bound sealer)."""
        secrets = {label: h for label, h in self.headers.items() if h}
        return {
            "servers": [server.to_record() for server in self.servers.values()],
            "tools": self.tools,
            "listed": self.listed,
            "approved": [vars(a) for a in self.approved],
            "sealed_headers": seal({"headers": secrets}) if secrets else None,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any], limits: Limits, unseal: Any) -> McpTools:
        servers = {s["label"]: McpServer.from_record(s) for s in data.get("servers") or ()}
        sealed = data.get("sealed_headers")
        return cls(servers, limits, tools=dict(data.get("tools") or {}),
                   listed=list(data.get("listed") or ()),
                   approved=[Approved(**a) for a in data.get("approved") or ()],
                   sealed=(sealed, unseal) if sealed else None)

    # -- running (the runner's turn loop) --

    def limit_reached(self, max_tool_calls: int | None) -> bool:
        """``max_tool_calls``: the calls this response may still run are used up."""
        return max_tool_calls is not None and self.calls_run >= max_tool_calls

    def needs_approval(self, label: str, name: str) -> bool:
        server = self.servers.get(label)
        if server is None:
            return False
        tool = next((t for t in self.tools.get(label, ()) if t.get("name") == name),
                    {"name": name})
        return server.needs_approval(tool)

    async def connection(self, label: str) -> Connection:
        connection = self.connections.get(label)
        if connection is None or connection.closed:
            if self.sealed is not None:
                blob, unseal = self.sealed
                try:
                    self.headers = unseal(blob).get("headers") or {}
                except GatewayError:
                    raise McpFailure(protocol_error(
                        CONNECTION_CLOSED, "The MCP server's headers could not be opened "
                        "(GATEWAY_SEAL_KEY changed?).")) from None
                self.sealed = None
            server = self.servers[label]
            connection = self.connections[label] = Connection(
                server, self.headers.get(label, {}), self.limits)
        await connection.open()
        return connection

    async def call(
        self, label: str, name: str, arguments: str
    ) -> tuple[str | None, dict[str, Any] | None]:
        """Run one call; a failure of any kind is the returned error."""
        self.calls_run += 1
        try:
            parsed = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            return None, protocol_error(
                INVALID_PARAMS, "The tool's arguments are not a JSON object.")
        try:
            connection = await self.connection(label)
        except McpFailure as failure:
            return None, failure.error
        return await connection.call(name, parsed)

    async def aclose(self) -> None:
        connections, self.connections = list(self.connections.values()), {}
        for connection in connections:
            await connection.aclose()


def _listing_error(label: str, error: Mapping[str, Any]) -> GatewayError:
    """OpenAI's answer when it cannot list a server's tools: 424, before the response."""
    code = error.get("code")
    status = f" Http status code: {code}." if error.get("type") == "http_error" else ""
    return GatewayError(
        424,
        f"Error retrieving tool list from MCP server: '{label}'.{status} "
        f"{error.get('message') or ''}".rstrip(),
        type="external_connector_error",
        param="tools",
        code="http_error" if error.get("type") == "http_error" else "mcp_protocol_error",
    )

"""Remote MCP as a server tool: the servers of one response, their items and their history.

tools/mcp/client.py connects to a server and runs one call safely; this module is what the turn loop
sees (tools/server.py): the servers listed before the response starts (their
``mcp_list_tools`` items, or the listing already in the conversation: OpenAI lists a server
once per conversation), the tools offered as ``<server_label>__<tool>`` functions, a call run
as an ``mcp_call`` item (or an ``mcp_approval_request`` the client must answer first), calls
the client approved run before the model, and how these items read to the model later.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.mcp import (
    APPROVAL_REQUEST_ID_PREFIX,
    CALL_ID_PREFIX,
    LIST_TOOLS_ID_PREFIX,
)
from responses_gateway.tools.mcp.client import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    Connection,
    Limits,
    McpFailure,
    McpServer,
    protocol_error,
    secrets_of,
)
from responses_gateway.tools.server import (
    DIRECT,
    PROGRAMMATIC,
    Event,
    HistoryCall,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
)

KIND = "mcp"


@dataclass
class Approved:
    """A call the client approved (``mcp_approval_response``): run first in the response."""

    label: str
    name: str
    arguments: str
    approval_request_id: str


@dataclass
class McpServerTool(ServerTool):
    """The MCP servers of one response: their tools, open connections, approvals, secrets."""

    kind = KIND

    servers: dict[str, McpServer]
    limits: Limits
    tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> allowed
    listed: list[dict[str, Any]] = field(default_factory=list)  # listings made for this one
    approved: list[Approved] = field(default_factory=list)
    headers: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    connections: dict[str, Connection] = field(default_factory=dict)
    #: headers still sealed (a stored response): opened on the first connection, so a key
    #: that cannot open them fails that call, not the whole response
    sealed: tuple[str, Callable[[str], dict[str, Any]]] | None = field(default=None, repr=False)

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def of(cls, tools: Iterable[Any], limits: Limits) -> McpServerTool:
        servers: dict[str, McpServer] = {}
        headers: dict[str, dict[str, str]] = {}
        for tool in tools:
            server = McpServer.of(tool)
            servers[server.label] = server
            headers[server.label] = secrets_of(tool)
        return cls(servers, limits, headers=headers)

    @classmethod
    async def for_request(cls, request: RequestTools) -> McpServerTool:
        tools = cls.of(request.tools, Limits.of(request.settings))
        tools.find_approval(request.items, request.history)
        await tools.list_all([*request.history, *request.items])
        return tools

    async def list_all(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Each server's tools: from an ``mcp_list_tools`` item already in the conversation,
        else listed now, which makes this response's ``mcp_list_tools`` item. A server that
        cannot be listed is OpenAI's 424."""
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

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return self._functions(DIRECT)

    def program_functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return self._functions(PROGRAMMATIC)

    def _functions(self, caller: str) -> list[tuple[str | None, dict[str, Any]]]:
        """The listed tools of the servers whose ``allowed_callers`` name ``caller``."""
        out: list[tuple[str | None, dict[str, Any]]] = []
        for label, tools in self.tools.items():
            if caller not in self.servers[label].callers:
                continue
            for tool in tools:
                function: dict[str, Any] = {"name": tool["name"],
                                            "parameters": tool.get("input_schema") or {}}
                if tool.get("description"):
                    function["description"] = tool["description"]
                out.append((label, function))
        return out

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "mcp", "server_label", "name"}``: that tool, which must be offered."""
        if isinstance(choice, str) or getattr(choice, "type", None) != KIND or not choice.name:
            return None
        offered = {(label, function["name"]) for label, function in self.functions()}
        if (choice.server_label, choice.name) not in offered:
            raise invalid_request(
                f"Tool choice '{choice.name}' is not a tool of MCP server "
                f"'{choice.server_label}'.",
                param="tool_choice.name", code="invalid_value",
            )
        return {"type": "function", "function": {
            "name": catalog.chat_name(KIND, choice.name, choice.server_label)}}

    def find_approval(
        self, items: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
    ) -> None:
        """This turn's approved ``mcp_approval_response`` items: their calls run first."""
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

    # -- the record (a background worker runs it elsewhere) ------------------------------------

    def to_record(self, seal: Seal) -> dict[str, Any]:
        secrets = {label: h for label, h in self.headers.items() if h}
        return {
            "servers": [server.to_record() for server in self.servers.values()],
            "tools": self.tools,
            "listed": self.listed,
            "approved": [vars(a) for a in self.approved],
            "sealed_headers": seal({"headers": secrets}) if secrets else None,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> McpServerTool:
        return cls.restore(data, Limits.of(rebuild.settings), rebuild.unseal)

    @classmethod
    def restore(
        cls, data: Mapping[str, Any], limits: Limits, unseal: Callable[[str], dict[str, Any]]
    ) -> McpServerTool:
        servers = {s["label"]: McpServer.from_record(s) for s in data.get("servers") or ()}
        sealed = data.get("sealed_headers")
        return cls(servers, limits, tools=dict(data.get("tools") or {}),
                   listed=list(data.get("listed") or ()),
                   approved=[Approved(**a) for a in data.get("approved") or ()],
                   sealed=(sealed, unseal) if sealed else None)

    # -- running -------------------------------------------------------------------------------

    def opening_items(self, items: ItemWriter) -> list[Event]:
        events: list[Event] = []
        for listed in self.listed:
            events += items.start_tool_item(
                {"id": ids.new_id(LIST_TOOLS_ID_PREFIX), "type": "mcp_list_tools",
                 "server_label": listed["server_label"], "tools": []},
                "response.mcp_list_tools.in_progress",
            )
            item = items.tool_item
            assert item is not None
            item["tools"] = listed["tools"]
            events += items.end_tool_item("completed", "response.mcp_list_tools.completed")
        return events

    def first_calls(self) -> list[ServerCall]:
        return [ServerCall(a.approval_request_id, ToolSpec(KIND, a.name, a.label), a.arguments,
                           {"approval_request_id": a.approval_request_id})
                for a in self.approved]

    def skip_first_calls(self) -> None:
        self.approved.clear()

    def needs_approval(self, label: str, name: str) -> bool:
        server = self.servers.get(label)
        if server is None:
            return False
        tool = next((t for t in self.tools.get(label, ()) if t.get("name") == name),
                    {"name": name})
        return server.needs_approval(tool)

    async def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        label, name, arguments = call.spec.namespace or "", call.spec.name, call.arguments
        approval_id = call.extra.get("approval_request_id")
        if approval_id is None and self.needs_approval(label, name):
            # The response ends after this turn; the client's next request approves or not.
            call.pauses = True
            events = items.start_tool_item(
                {"id": ids.new_id(APPROVAL_REQUEST_ID_PREFIX), "type": "mcp_approval_request",
                 "arguments": arguments, "name": name, "server_label": label}, None)
            yield events + items.end_tool_item("completed", None)
            return
        yield _call_started(items, label, name, call.fragments, approval_id)
        output, error = await self.call(label, name, arguments)
        yield _call_ended(items, output, error)

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

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> McpHistory:
        return McpHistory(_denied(items))


def _call_started(
    items: ItemWriter, label: str, name: str, fragments: list[str],
    approval_request_id: str | None,
) -> list[Event]:
    """The call's item, and its arguments as the model wrote them: one delta per fragment the
    model streamed. The call runs between model turns (the model's turn may hold more items
    after it), so the deltas leave when it starts, not as the model writes them."""
    arguments = "".join(fragments)
    item: dict[str, Any] = {
        "id": ids.new_id(CALL_ID_PREFIX), "type": "mcp_call", "status": "in_progress",
        "arguments": "", "name": name, "server_label": label,
    }
    if approval_request_id is not None:
        item["approval_request_id"] = approval_request_id
    events = items.start_tool_item(item, "response.mcp_call.in_progress")
    for fragment in fragments:
        if fragment:
            events.append(
                items.tool_item_event("response.mcp_call_arguments.delta", delta=fragment))
    item["arguments"] = arguments
    events.append(items.tool_item_event("response.mcp_call_arguments.done", arguments=arguments))
    return events


def _call_ended(
    items: ItemWriter, output: str | None, error: dict[str, Any] | None
) -> list[Event]:
    item = items.tool_item
    assert item is not None and item.get("type") == "mcp_call", "no mcp_call item is open"
    if error is None:
        item["output"] = output
        return items.end_tool_item("completed", "response.mcp_call.completed")
    item["error"] = error
    return items.end_tool_item("failed", "response.mcp_call.failed")


class McpHistory:
    """MCP items as the model reads them: a call the gateway ran is a call and its answer; a
    call the client refused to approve is a call answered "not run"; listings, approvals
    and pending requests are the gateway's bookkeeping."""

    def __init__(self, denied: dict[str, str]) -> None:
        self._denied = denied  # approval request id -> what the model is told

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        kind = item.get("type")
        if kind == "mcp_call":
            call_id, name = item.get("id"), item.get("name")
            label, arguments = item.get("server_label"), item.get("arguments")
            if not all(isinstance(v, str) for v in (call_id, name, label, arguments)):
                raise invalid_request(
                    "An 'mcp_call' item needs 'id', 'server_label', 'name' and 'arguments'.",
                    param=param,
                )
            output = item.get("output")
            if not isinstance(output, str):
                output = _error_text(item.get("error"))
            return HistoryCall(call_id, ToolSpec(KIND, name, label), arguments,  # type: ignore[arg-type]
                               output)
        if kind == "mcp_approval_request" and item.get("id") in self._denied:
            name, label, arguments = item.get("name"), item.get("server_label"), item.get(
                "arguments")
            if not all(isinstance(v, str) for v in (name, label, arguments)):
                return None
            return HistoryCall(item["id"], ToolSpec(KIND, name, label),  # type: ignore[arg-type]
                               arguments, self._denied[item["id"]])  # type: ignore[arg-type]
        return None


def _denied(items: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Approval requests the client refused: what the model reads in the call's place."""
    denied = {}
    for item in items:
        if item.get("type") == "mcp_approval_response" and item.get("approve") is False:
            reason = item.get("reason")
            denied[str(item.get("approval_request_id"))] = (
                "The user did not approve this tool call; it was not run."
                + (f" Reason: {reason}" if isinstance(reason, str) and reason else "")
            )
    return denied


def _error_text(error: Any) -> str:
    """An mcp_call's error as the model reads it (the three shapes of ``McpToolCallError``)."""
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return f"Error: {error['message']}"
        content = error.get("content")
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            return "Error: " + "\n".join(t for t in texts if isinstance(t, str))
    return f"Error: {error}" if error else "(no output)"


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

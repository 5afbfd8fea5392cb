"""Which tools the gateway runs itself, and the set of them one response runs.

One :class:`Registration` per server tool: the request ``tools[].type`` values it serves, the
kind of the chat functions it offers (:class:`~responses_gateway.tools.catalog.ToolSpec`), the
item types it owns in history, and where its class lives. Classes are imported on first use,
so a tool's dependencies (the ``mcp`` SDK) load only for requests that use it.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from responses_gateway.platform import vector_stores_available
from responses_gateway.tools.catalog import ToolCatalog
from responses_gateway.tools.server import (
    Event,
    HistoryReader,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
)


@dataclass(frozen=True, slots=True)
class Registration:
    """One server tool as the registry knows it before its module is imported."""

    kind: str  # ToolSpec.kind of the functions it offers the model
    tool_types: tuple[str, ...]  # the request's tools[].type values it serves
    item_types: tuple[str, ...]  # the output (and input) item types it makes
    target: str  # "module:Class", a ServerTool subclass
    #: a Settings field that must be set for the gateway to run it (else it stays hosted),
    #: or a test of the settings (file_search: vector stores on this storage)
    needs: str | Callable[[Any], bool] | None = None
    #: its calls give the model text their items do not hold (``ServerTool.reads``), kept
    #: for later requests (tools/reads.py)
    keeps_reads: bool = False


REGISTRATIONS: tuple[Registration, ...] = (
    Registration(
        "mcp", ("mcp",),
        ("mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"),
        "responses_gateway.tools.mcp_tool:McpServerTool",
    ),
    Registration(
        "web_search", ("web_search", "web_search_2025_08_26", "web_search_preview",
                       "web_search_preview_2025_03_11"),
        ("web_search_call",), "responses_gateway.tools.web_search.tool:WebSearchTool",
        needs="web_search_provider", keeps_reads=True,
    ),
    Registration("image_generation", ("image_generation",), ("image_generation_call",),
                 "responses_gateway.tools.image_generation.tool:ImageGenerationTool",
                 needs="image_backend"),
    Registration("file_search", ("file_search",), ("file_search_call",),
                 "responses_gateway.tools.file_search.tool:FileSearchTool",
                 needs=vector_stores_available, keeps_reads=True),
)

#: ToolSpec kinds whose calls the gateway runs (the translator holds them for the turn loop).
SERVER_KINDS = frozenset(r.kind for r in REGISTRATIONS)
#: Request tool types served by a server tool.
SERVER_TOOL_TYPES = frozenset(t for r in REGISTRATIONS for t in r.tool_types)
#: Item types that belong to a server tool (how they go back to the model: ``read_history``).
SERVER_ITEM_TYPES = frozenset(t for r in REGISTRATIONS for t in r.item_types)
#: Item types whose calls' reads are kept (tools/reads.py).
READ_ITEM_TYPES = frozenset(t for r in REGISTRATIONS if r.keeps_reads for t in r.item_types)
_BY_KIND = {r.kind: r for r in REGISTRATIONS}
_BY_TOOL_TYPE = {t: r for r in REGISTRATIONS for t in r.tool_types}
_BY_ITEM_TYPE = {t: r for r in REGISTRATIONS for t in r.item_types}


def served(kind: str, settings: Any) -> bool:
    """Whether the gateway runs ``kind`` with these settings (its ``needs`` set: an image
    backend for image_generation); if not, the tool stays hosted (tools/hosted.py)."""
    needs = _BY_KIND[kind].needs
    if callable(needs):
        return bool(needs(settings))
    return needs is None or getattr(settings, needs, None) is not None


def served_type(tool_type: str, settings: Any) -> bool:
    """Whether a request tool of ``tool_type`` is run by the gateway with these settings."""
    registration = _BY_TOOL_TYPE.get(tool_type)
    return registration is not None and served(registration.kind, settings)


def served_tool_types(settings: Any) -> frozenset[str]:
    """Every request tool type the gateway runs with these settings."""
    return frozenset(t for t in _BY_TOOL_TYPE if served_type(t, settings))


@cache
def tool_class(kind: str) -> type[ServerTool]:
    module, _, name = _BY_KIND[kind].target.partition(":")
    cls: type[ServerTool] = getattr(importlib.import_module(module), name)
    return cls


def history_reader(
    item_type: str, items: Sequence[Mapping[str, Any]], reads: Mapping[str, str]
) -> HistoryReader:
    """The reader for a server tool's item of ``item_type`` within ``items``; ``reads``: what
    the calls among them gave the model, by call id."""
    return tool_class(_BY_ITEM_TYPE[item_type].kind).history_reader(items, reads)


def kind_of_item(item_type: str) -> str:
    return _BY_ITEM_TYPE[item_type].kind


class ServerTools:
    """The server tools one response runs, by kind, in the order the request named them."""

    def __init__(self, tools: dict[str, ServerTool]) -> None:
        self.by_kind = tools

    @classmethod
    async def for_request(
        cls, tools: Sequence[Any] | None, tool_choice: Any, items: list[dict[str, Any]],
        history: list[dict[str, Any]], settings: Any, tenant: str,
        include: Sequence[str] = (), services: Any = None,
    ) -> ServerTools | None:
        """Build each server tool the request names (listing MCP servers, say); a failure
        closes what was built and raises (a 4xx before the response)."""
        wanted: dict[str, list[Any]] = {}
        indexes: dict[str, list[int]] = {}
        for index, tool in enumerate(tools or ()):
            registration = _BY_TOOL_TYPE.get(getattr(tool, "type", None))  # type: ignore[arg-type]
            if registration is not None and served(registration.kind, settings):
                wanted.setdefault(registration.kind, []).append(tool)
                indexes.setdefault(registration.kind, []).append(index)
        if not wanted:
            return None
        built: dict[str, ServerTool] = {}
        try:
            for kind, params in wanted.items():
                built[kind] = await tool_class(kind).for_request(RequestTools(
                    tools=params, tool_choice=tool_choice, items=items, history=history,
                    settings=settings, tenant=tenant, include=tuple(include),
                    indexes=indexes[kind], services=services,
                ))
        except BaseException:
            await asyncio.shield(ServerTools(built).aclose())
            raise
        return cls(built)

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> ServerTools | None:
        tools = {kind: tool_class(kind).from_record(entry, rebuild)
                 for kind, entry in data.items() if kind in _BY_KIND}
        return cls(tools) if tools else None

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {kind: tool.to_record(seal) for kind, tool in self.by_kind.items()}

    def offer(self, catalog: ToolCatalog) -> None:
        """Add every server tool's functions to what the model is offered."""
        for kind, tool in self.by_kind.items():
            for namespace, function in tool.functions():
                catalog.add_server(kind, function, namespace)

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | str | None:
        for tool in self.by_kind.values():
            chosen = tool.tool_choice(choice, catalog)
            if chosen is not None:
                return chosen
        return None

    def opening_items(self, items: ItemWriter) -> list[Event]:
        events: list[Event] = []
        for tool in self.by_kind.values():
            events += tool.opening_items(items)
        return events

    def first_calls(self) -> list[ServerCall]:
        return [call for tool in self.by_kind.values() for call in tool.first_calls()]

    def skip_first_calls(self) -> None:
        for tool in self.by_kind.values():
            tool.skip_first_calls()

    def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        return self.by_kind[call.spec.kind].run(call, items)

    def reads(self) -> dict[str, str]:
        """What this response's calls gave the model, by call id (``ServerTool.reads``)."""
        found: dict[str, str] = {}
        for tool in self.by_kind.values():
            found.update(tool.reads())
        return found

    def annotate(self, text: str) -> list[dict[str, Any]]:
        """Every tool's annotations of a closing text part, in text order."""
        found = [a for tool in self.by_kind.values() for a in tool.annotate(text)]
        return sorted(found, key=lambda a: a.get("start_index", a.get("index", 0)))

    async def aclose(self) -> None:
        for tool in self.by_kind.values():
            await tool.aclose()

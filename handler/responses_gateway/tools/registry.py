"""Which tools the gateway runs itself, and the set of them one response runs.

Each server tool declares itself in its own package (a :class:`Registration`,
tools/declaration.py): the request ``tools[].type`` values it serves, the kind of the chat
functions it offers (:class:`~responses_gateway.tools.catalog.ToolSpec`), its items and their
ids, its ``tool_choice`` and ``include`` names, its ``tool_usage``, what turns it on, and where
its class lives. :data:`PACKAGES` lists them; the tables below are what the request models,
the translator, the start line and the usage ledger read, so no module outside a tool's
package names the tool. Classes are imported on first use, so a tool's dependencies (the
``mcp`` SDK, search providers, image backends) load only for requests that use it.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import cache
from typing import Any, cast

from responses_gateway.priced_items import PRICED_ITEMS
from responses_gateway.tools.catalog import ToolCatalog
from responses_gateway.tools.declaration import ItemType, Registration
from responses_gateway.tools.server import (
    Event,
    HistoryReader,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
    SharedHistoryReader,
)

__all__ = ["ItemType", "Registration", "ServerTools", "register"]

#: The packages of the server tools, each declaring its ``REGISTRATION``
#: (tools/declaration.py): adding a tool is its package and one line here.
PACKAGES = (
    "responses_gateway.tools.mcp",
    "responses_gateway.tools.image_generation",
    "responses_gateway.tools.web_search",
    "responses_gateway.tools.file_search",
    "responses_gateway.tools.code_interpreter",
    "responses_gateway.tools.hosted_shell",
    "responses_gateway.tools.programmatic",
)

REGISTRATIONS: tuple[Registration, ...] = ()
#: ToolSpec kinds whose calls the gateway runs (the translator holds them for the turn loop).
SERVER_KINDS: frozenset[str] = frozenset()
#: Request tool types served by a server tool.
SERVER_TOOL_TYPES: frozenset[str] = frozenset()
#: Request tool types OpenAI hosts too: hosted tools when the gateway does not run them.
HOSTED_TOOL_TYPES: frozenset[str] = frozenset()
#: Item types that belong to a server tool (how they go back to the model: ``read_history``).
SERVER_ITEM_TYPES: frozenset[str] = frozenset()
#: Item types a server tool shares with a client tool (``ItemType.shared``): the client's
#: unless the tool's history reader owns the item (:func:`owns`).
SHARED_ITEM_TYPES: frozenset[str] = frozenset()
#: Item types whose calls' reads are kept (tools/reads.py).
READ_ITEM_TYPES: frozenset[str] = frozenset()
#: Each server item type, as a registration declares it (the shared ones are the client's).
ITEMS: dict[str, ItemType] = {}
#: ``tool_choice`` types naming a server tool, and the type a Response echoes for each.
CHOICES: dict[str, str] = {}
#: ``include`` values a server tool honours.
INCLUDES: frozenset[str] = frozenset()
#: Usage-ledger counters (store/usage.py) by the output item type that adds to them.
ITEM_COUNTERS: dict[str, str] = {}
#: Output item types a client answers, with the answer's type and the field naming the item.
ANSWERS: dict[str, tuple[str, str]] = {}
_BY_KIND: dict[str, Registration] = {}
_BY_TOOL_TYPE: dict[str, Registration] = {}
_BY_ITEM_TYPE: dict[str, Registration] = {}


def register(registration: Registration) -> None:
    """Add a server tool (its package's ``REGISTRATION``; a test's fake tool) and rebuild the
    tables above. Modules that copy a table at import (the request models) see a registration
    made before they are imported."""
    global REGISTRATIONS, SERVER_KINDS, SERVER_TOOL_TYPES, HOSTED_TOOL_TYPES
    global SERVER_ITEM_TYPES, SHARED_ITEM_TYPES, READ_ITEM_TYPES, INCLUDES
    if registration.kind in _BY_KIND:
        raise ValueError(f"server tool {registration.kind!r} is registered twice")
    taken = {t for t in registration.tool_types if t in _BY_TOOL_TYPE} | {
        t for t in registration.item_types if t in _BY_ITEM_TYPE}
    if taken:
        raise ValueError(f"{registration.kind!r} claims types already registered: {taken}")
    REGISTRATIONS = regs = (*REGISTRATIONS, registration)
    SERVER_KINDS = frozenset(r.kind for r in regs)
    SERVER_TOOL_TYPES = frozenset(t for r in regs for t in r.tool_types)
    HOSTED_TOOL_TYPES = frozenset(t for r in regs if r.hosted for t in r.tool_types)
    SERVER_ITEM_TYPES = frozenset(i.type for r in regs for i in r.items if not i.shared)
    SHARED_ITEM_TYPES = frozenset(i.type for r in regs for i in r.items if i.shared)
    READ_ITEM_TYPES = frozenset(t for r in regs if r.keeps_reads for t in r.item_types)
    INCLUDES = frozenset(v for r in regs for v in r.includes)
    for table in (ITEMS, CHOICES, ITEM_COUNTERS, ANSWERS, _BY_KIND, _BY_TOOL_TYPE,
                  _BY_ITEM_TYPE, PRICED_ITEMS):
        table.clear()
    for r in regs:
        _BY_KIND[r.kind] = r
        CHOICES.update(r.choices)
        for t in r.tool_types:
            _BY_TOOL_TYPE[t] = r
        for item in r.items:
            _BY_ITEM_TYPE[item.type] = r
            if item.shared:
                continue
            ITEMS[item.type] = item
            if item.counter is not None:
                ITEM_COUNTERS[item.type] = item.counter
            if item.price is not None:
                PRICED_ITEMS[item.type] = item.price
            if item.answer is not None:
                ANSWERS[item.type] = item.answer


for _package in PACKAGES:
    register(importlib.import_module(_package).REGISTRATION)


def zero_tool_usage() -> dict[str, Any]:
    """Every server tool's ``tool_usage`` before any call (fresh copies: callers add to them)."""
    return {key: copy.deepcopy(zero) for r in REGISTRATIONS for key, zero in r.tool_usage.items()}


def start_line(settings: Any) -> dict[str, Any]:
    """What the start line says about the server tools (api/startup.py)."""
    shown: dict[str, Any] = {"server_tools": sorted(
        r.kind for r in REGISTRATIONS if _served_quietly(r.kind, settings))}
    for r in REGISTRATIONS:
        for name in r.start_line:
            value = getattr(settings, name, None)
            if isinstance(value, dict):  # (knowledge bases: their store ids)
                value = sorted(value)
            shown[name] = list(value) if isinstance(value, (tuple, frozenset, set)) else value
    return shown


def _served_quietly(kind: str, settings: Any) -> bool:
    """``served``, False when its test cannot tell (the start line must not fail)."""
    try:
        return served(kind, settings)
    except Exception:
        return False


def own_tool_types() -> tuple[str, ...]:
    """The request tool types only the gateway serves (no OpenAI-hosted namesake: ``mcp``),
    one a tool, as messages listing what the gateway takes name them."""
    return tuple(r.tool_types[0] for r in REGISTRATIONS if not r.hosted)


def registration_of(tool_type: str) -> Registration | None:
    """The server tool serving request tools of ``tool_type``, if any."""
    return _BY_TOOL_TYPE.get(tool_type)


def serving(tool: Any) -> Registration | None:
    """The server tool that serves the request tool param ``tool`` (a model or a dict) by its
    type and, when it declares one, its test of the param (``Registration.serves``), whatever
    the settings; None: no server tool would (a client tool's, a function...)."""
    kind = tool.get("type") if isinstance(tool, Mapping) else getattr(tool, "type", None)
    registration = _BY_TOOL_TYPE.get(kind) if isinstance(kind, str) else None
    if registration is None or registration.serves is None:
        return registration
    return registration if _predicate(registration.serves)(tool) else None


@cache
def _predicate(target: str) -> Callable[[Any], bool]:
    module, _, name = target.partition(":")
    test: Callable[[Any], bool] = getattr(importlib.import_module(module), name)
    return test


def served(kind: str, settings: Any) -> bool:
    """Whether the gateway runs ``kind`` with these settings (its ``needs`` set: an image
    backend for image_generation); if not, the tool stays hosted (tools/hosted.py)."""
    needs = _BY_KIND[kind].needs
    if isinstance(needs, str) and ":" in needs:
        needs = _test_named(needs)
    if callable(needs):
        return bool(needs(settings))
    return needs is None or getattr(settings, needs, None) is not None


@cache
def _test_named(ref: str) -> Callable[[Any], bool]:
    """A registration's ``needs`` named ``"module:NAME"`` (a test of the settings another
    layer answers: file_search asks the platform whether it has vector stores)."""
    module, _, name = ref.partition(":")
    test: Callable[[Any], bool] = getattr(importlib.import_module(module), name)
    return test


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


def owns(reader: HistoryReader, item: Mapping[str, Any]) -> bool:
    """Whether an item of a shared type (:data:`SHARED_ITEM_TYPES`) is the server tool's
    (its reader says: hosted shell's calls name a container), else the client's."""
    return cast(SharedHistoryReader, reader).owns(item)


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
        reads: Mapping[str, str] | None = None,
    ) -> ServerTools | None:
        """Build each server tool the request names (listing MCP servers, say); a failure
        closes what was built and raises (a 4xx before the response)."""
        wanted: dict[str, list[Any]] = {}
        indexes: dict[str, list[int]] = {}
        for index, tool in enumerate(tools or ()):
            registration = serving(tool)
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
                    indexes=indexes[kind], services=services, every=list(tools or ()),
                    reads=dict(reads or {}),
                ))
        except BaseException:
            await asyncio.shield(ServerTools(built).aclose())
            raise
        return cls(built)._joined()

    @classmethod
    async def offered(
        cls, chat: dict[str, Any], catalog: ToolCatalog, tools: Sequence[Any] | None,
        tool_choice: Any, items: list[dict[str, Any]], history: list[dict[str, Any]],
        settings: Any, tenant: str, include: Sequence[str] = (), services: Any = None,
        reads: Mapping[str, str] | None = None,
    ) -> ServerTools | None:
        """The request's server tools built (:meth:`for_request`: an MCP server that cannot
        be listed is OpenAI's 424) and offered in ``chat`` (:meth:`offer`); a failure closes
        what was built and raises."""
        built = await cls.for_request(tools, tool_choice, items, history, settings, tenant,
                                      include=include, services=services, reads=reads)
        if built is None:
            return None
        try:
            built.offer(chat, catalog, tool_choice)
        except BaseException:
            await built.aclose()
            raise
        return built

    def _joined(self) -> ServerTools:
        for tool in self.by_kind.values():
            tool.join(self.by_kind)
        return self

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> ServerTools | None:
        tools = {kind: tool_class(kind).from_record(entry, rebuild)
                 for kind, entry in data.items() if kind in _BY_KIND}
        return cls(tools)._joined() if tools else None

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {kind: tool.to_record(seal) for kind, tool in self.by_kind.items()}

    def offer(self, chat: dict[str, Any], catalog: ToolCatalog, tool_choice: Any) -> None:
        """Every server tool's functions offered in ``chat`` (through ``catalog``), a
        ``tool_choice`` naming one of them honoured."""
        for kind, tool in self.by_kind.items():
            for namespace, function in tool.functions():
                catalog.add_server(kind, function, namespace)
        chat["tools"] = catalog.chat_tools
        for tool in self.by_kind.values():
            chosen = tool.tool_choice(tool_choice, catalog)
            if chosen is not None:
                chat["tool_choice"] = chosen
                break
        if not chat["tools"]:  # chat servers refuse an empty tool list and what goes with it
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                chat.pop(key, None)

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

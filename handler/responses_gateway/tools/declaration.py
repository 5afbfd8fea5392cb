"""How a tool the gateway runs declares itself: one :class:`Registration` in its own package.

A registration is data only: the gateway reads it on every process start (tools/registry.py
lists the packages), so declaring a tool must not import its code (search providers, image
backends, the ``mcp`` SDK). Its class (``target``) and the fields of the items a client may send
back (``ItemType.input_fields``), and its request models when it has some (``request_tool``),
are named by ``"module:NAME"`` strings, imported on first use.

Everything the rest of the gateway knows about a server tool comes from here: which request
tools it serves, what ``tool_choice`` names it, its output items and their ids, the ``include``
values it honours, what it adds to ``tool_usage`` and to the usage ledger, whether OpenAI hosts
it too and what turns it on, what the start line says about it.

Both classes compare by identity: nothing compares two registrations. Both are frozen records
written out (records.py), not dataclasses: every entry point imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from responses_gateway.records import Frozen


class ItemType(Frozen):
    """One output item type a server tool makes (``web_search_call``)."""

    __slots__ = (
        "answer",
        "counter",
        "has_status",
        "id_prefix",
        "id_required",
        "input_fields",
        "price",
        "shared",
        "type",
    )

    type: str
    #: the prefix of its ids (``ws_``): ids.new_id(prefix)
    id_prefix: str
    #: how a client sends it back as input: ``None`` keeps it as sent (its tool reads it when
    #: the conversation goes back to the model); else ``"module:NAME"`` of a mapping of field
    #: name to ``(annotation, default)`` (``...``: required), which translate/request_items.py
    #: makes into the item's model (strict, ``id`` an item id), imported with the request
    #: models (the first create), never at start
    input_fields: str | None
    #: a sent-back item without ``id`` gets one; ``id_required``: OpenAI requires it
    id_required: bool
    #: a sent-back item without ``status`` is stored ``completed`` (False: it has none)
    has_status: bool
    #: the usage ledger's counter (store/usage.py ``COUNTERS``) each such output item adds one to
    counter: str | None
    #: what each such output item costs: the Price field (prices.py: ``search``) and the Costs
    #: API line item it is billed under (``web search``)
    price: tuple[str, str] | None
    #: the input item a client answers it with, and the field of that answer naming it
    #: (``("mcp_approval_response", "approval_request_id")``): a response ending with it waits
    #: for the client (a steer then is pending: api/ws_steer.py)
    answer: tuple[str, str] | None
    #: the type is a client tool's too (tools/client_tools.py: hosted shell's ``shell_call``):
    #: the client path keeps its request model and ids, and the tool's history reader tells
    #: its own items from the client's (``HistoryReader.owns``, tools/server.py)
    shared: bool

    def __init__(self, type: str, id_prefix: str, input_fields: str | None = None,
                 id_required: bool = False, has_status: bool = True, counter: str | None = None,
                 price: tuple[str, str] | None = None, answer: tuple[str, str] | None = None,
                 shared: bool = False) -> None:
        init = object.__setattr__
        init(self, "type", type)
        init(self, "id_prefix", id_prefix)
        init(self, "input_fields", input_fields)
        init(self, "id_required", id_required)
        init(self, "has_status", has_status)
        init(self, "counter", counter)
        init(self, "price", price)
        init(self, "answer", answer)
        init(self, "shared", shared)


class Registration(Frozen):
    """One server tool as the gateway knows it before its module is imported (keywords but
    the first four)."""

    __slots__ = (
        "choices",
        "enabled_by",
        "hosted",
        "includes",
        "items",
        "keeps_reads",
        "kind",
        "needs",
        "request_choice",
        "request_tool",
        "serves",
        "settings",
        "start_line",
        "target",
        "tool_types",
        "tool_usage",
    )

    kind: str  # ToolSpec.kind of the functions it offers the model
    #: the request's ``tools[].type`` values it serves, the first its name, then aliases
    #: (``web_search_preview``, dated variants)
    tool_types: tuple[str, ...]
    items: tuple[ItemType, ...]  # the output (and input) items it makes
    target: str  # "module:Class", a ServerTool subclass
    #: ``"module:function"`` of a test of one request tool param (a model or a dict): the tool
    #: serves only the params of its types that pass (hosted shell: a ``shell`` whose
    #: ``environment`` is a container); the others stay with the client path
    #: (tools/client_tools.py). None: it serves every tool of its types. Keep its module light:
    #: it is imported with the first request that names one of the types
    serves: str | None
    #: a Settings field that must be set for the gateway to run it (else it stays hosted),
    #: or a test of the settings, given or named ``"module:NAME"`` (imported when first
    #: asked; file_search: ``platform:vector_stores_available``, vector stores on this storage)
    needs: str | Callable[[Any], bool] | None
    #: its calls give the model text their items do not hold (``ServerTool.reads``), kept
    #: for later requests (tools/reads.py)
    keeps_reads: bool
    #: ``tool_choice`` types that choose it (``{"type": "web_search_preview"}``), each with the
    #: type the Response echoes for it (a choice outside OpenAI's schema is echoed as the
    #: schema's name for the same tool)
    choices: Mapping[str, str]
    #: ``"module:NAME"`` of the pydantic model of its request tool, when the request models
    #: check it field by field (mcp; its ``echo()`` is what a Response lists, its
    #: ``check_tools([(index, tool), ...])`` checks across the request); ``None``: the tool is
    #: kept as sent and its package checks it. Imported with the request models (first create)
    request_tool: str | None
    #: ``"module:NAME"`` of the model of a ``tool_choice`` shaped its own way
    #: (``{"type": "mcp", "server_label"}``; its ``echo()`` and ``check(tools)``), beside
    #: ``choices``
    request_choice: str | None
    #: the ``include`` values it honours (``web_search_call.action.sources``)
    includes: tuple[str, ...]
    #: what it adds to a Response's ``tool_usage`` before any call: key and zero counts
    #: (``{"web_search": {"num_requests": 0}}``); its calls add theirs
    tool_usage: Mapping[str, Any]
    #: OpenAI hosts it too: when the gateway does not run it (``needs`` unmet) it is a hosted
    #: tool, left out for the model or refused as GATEWAY_HOSTED_TOOLS says (tools/hosted.py)
    hosted: bool
    #: what turns it on, as the refusal of a hosted tool names it ("GATEWAY_IMAGE_BACKEND is
    #: set"); ``None`` when it is always on
    enabled_by: str | None
    #: its settings section (a name for now: settings.py holds its fields)
    settings: str | None
    #: the Settings fields the start line shows about it (api/startup.py)
    start_line: tuple[str, ...]

    def __init__(
        self, kind: str, tool_types: tuple[str, ...], items: tuple[ItemType, ...], target: str,
        serves: str | None = None, needs: str | Callable[[Any], bool] | None = None,
        keeps_reads: bool = False, choices: Mapping[str, str] | None = None,
        request_tool: str | None = None, request_choice: str | None = None,
        includes: tuple[str, ...] = (), tool_usage: Mapping[str, Any] | None = None,
        hosted: bool = True, enabled_by: str | None = None, settings: str | None = None,
        start_line: tuple[str, ...] = (),
    ) -> None:
        init = object.__setattr__
        init(self, "kind", kind)
        init(self, "tool_types", tool_types)
        init(self, "items", items)
        init(self, "target", target)
        init(self, "serves", serves)
        init(self, "needs", needs)
        init(self, "keeps_reads", keeps_reads)
        init(self, "choices", {} if choices is None else choices)
        init(self, "request_tool", request_tool)
        init(self, "request_choice", request_choice)
        init(self, "includes", includes)
        init(self, "tool_usage", {} if tool_usage is None else tool_usage)
        init(self, "hosted", hosted)
        init(self, "enabled_by", enabled_by)
        init(self, "settings", settings)
        init(self, "start_line", start_line)

    @property
    def item_types(self) -> tuple[str, ...]:
        return tuple(item.type for item in self.items)

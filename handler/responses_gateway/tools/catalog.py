"""The request's tools as chat functions, and each chat function name mapped back.

Chat Completions has one kind of tool: a function whose name matches ``[a-zA-Z0-9_-]{1,64}``
(Bedrock enforces exactly that; OpenAI-compatible servers mostly do too). So:

- a plain ``function`` keeps its name (names the client chose claim theirs first);
- a member of a ``namespace`` becomes ``<namespace>__<name>``; a name that breaks the rule, or
  that another tool already holds, is cleaned and given a digest of the original, so it can
  neither collide nor be refused; the call comes back as a ``function_call`` with ``name`` and
  ``namespace`` as OpenAI reports them;
- a ``custom`` tool becomes a function of one string (:mod:`.custom`) and comes back as a
  ``custom_tool_call``;
- a server tool's function (tools/server.py) is flattened the same way, an MCP server's tool
  as ``<server_label>__<tool>``; its calls run in the gateway;
- a tool the client runs (``shell``, ``apply_patch``, ``computer``...: tools/client_tools.py)
  becomes a function named after it (cleaned the same way if the client's own tools hold the
  name); its calls come back as the typed items (``shell_call``...).

The mapping is kept in the stored request (``ToolCatalog.to_record``), so whichever process runs
the response (a background worker) reads calls back the same way.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from responses_gateway.records import Value
from responses_gateway.tools import custom

_NAME_OK = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_-]")
SEPARATOR = "__"


class ToolSpec(Value):
    """What a chat function stands for (a frozen value: records.py)."""

    __slots__ = ("kind", "name", "namespace")

    # "function", "custom", a server tool's kind (tools/registry.py: "mcp") or the type of a
    # tool the client runs (tools/client_tools.py: "shell", "apply_patch", "computer"...)
    kind: str
    name: str  # the name the client (or the MCP server) gave it
    namespace: str | None  # the namespace, or the MCP server's label

    def __init__(self, kind: str, name: str, namespace: str | None = None) -> None:
        init = object.__setattr__
        init(self, "kind", kind)
        init(self, "name", name)
        init(self, "namespace", namespace)


class ToolCatalog:
    """Chat tools in offer order; chat name -> :class:`ToolSpec` for everything not plain."""

    def __init__(self) -> None:
        self.chat_tools: list[dict[str, Any]] = []
        self.specs: dict[str, ToolSpec] = {}
        self._taken: set[str] = set()
        self._chat_names: dict[tuple[str, str, str | None], str] = {}

    # -- building --------------------------------------------------------------------------

    def claim(self, name: str) -> None:
        """A plain function's name: it is its own chat name, before anything is flattened."""
        self._taken.add(name)
        self._chat_names[("function", name, None)] = name

    def add_function(self, function: dict[str, Any], namespace: str | None = None) -> str:
        """``function`` is a chat ``function`` object; its name is the client's."""
        name = function["name"]
        chat = name if namespace is None else self._flat("function", name, namespace)
        if namespace is None:
            self.claim(name)
        else:
            self.specs[chat] = ToolSpec("function", name, namespace)
        self.chat_tools.append({"type": "function", "function": {**function, "name": chat}})
        return chat

    def add_custom(
        self, name: str, description: str | None, fmt: dict[str, Any] | None,
        namespace: str | None = None,
    ) -> str:
        chat = self._flat("custom", name, namespace)
        self.specs[chat] = ToolSpec("custom", name, namespace)
        function = custom.chat_function(chat, description, fmt)
        self.chat_tools.append({"type": "function", "function": function})
        return chat

    def add_server(self, kind: str, function: dict[str, Any], namespace: str | None) -> str:
        """A server tool's function (tools/server.py): always flattened, never taking a name
        the client's own tools hold."""
        chat = self._flat(kind, function["name"], namespace)
        self.specs[chat] = ToolSpec(kind, function["name"], namespace)
        self.chat_tools.append({"type": "function", "function": {**function, "name": chat}})
        return chat

    def add_client(self, kind: str, function: dict[str, Any]) -> str:
        """A client-run tool's function (tools/client_tools.py), named after the tool unless
        one of the client's own tools holds that name."""
        chat = self._flat(kind, function["name"], None)
        self.specs[chat] = ToolSpec(kind, function["name"])
        self.chat_tools.append({"type": "function", "function": {**function, "name": chat}})
        return chat

    def offered(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Whether a function for (kind, name, namespace) is known to this catalog."""
        return (kind, name, namespace) in self._chat_names

    def _flat(self, kind: str, name: str, namespace: str | None) -> str:
        key = (kind, name, namespace)
        known = self._chat_names.get(key)
        if known is not None:
            return known
        wanted = name if namespace is None else f"{namespace}{SEPARATOR}{name}"
        candidate = wanted
        if not _NAME_OK.fullmatch(candidate) or candidate in self._taken:
            digest = hashlib.sha256(f"{kind}:{namespace}:{name}".encode()).hexdigest()[:12]
            candidate = f"{_NAME_BAD.sub('_', wanted)[:51]}_{digest}"
        while candidate in self._taken:
            candidate = f"{candidate[:51]}_{hashlib.sha256(candidate.encode()).hexdigest()[:12]}"
        self._taken.add(candidate)
        self._chat_names[key] = candidate
        return candidate

    # -- reading ---------------------------------------------------------------------------

    def chat_name(self, kind: str, name: str, namespace: str | None = None) -> str:
        """The chat name for a call in the history: the offered one, else a stable flattening
        (a call to a tool no longer offered still reads as the same call)."""
        known = self._chat_names.get((kind, name, namespace))
        if known is not None:
            return known
        if namespace is None and kind in ("function", "custom"):
            return name
        return self._flat(kind, name, namespace)

    def to_record(self) -> dict[str, list[Any]]:
        """What the translator needs, JSON-safe: chat name -> [kind, name, namespace]."""
        return {chat: [s.kind, s.name, s.namespace] for chat, s in self.specs.items()}


def catalog_of(specs: dict[str, ToolSpec]) -> ToolCatalog:
    """A catalog that maps calls back to the chat names ``specs`` gave (a later model turn's
    history: responses/turns.py), without the chat tools themselves."""
    catalog = ToolCatalog()
    for chat, spec in specs.items():
        catalog._taken.add(chat)
        catalog._chat_names[(spec.kind, spec.name, spec.namespace)] = chat
    return catalog


def specs_from_record(data: dict[str, Any] | None) -> dict[str, ToolSpec]:
    return {chat: ToolSpec(*entry) for chat, entry in (data or {}).items()}

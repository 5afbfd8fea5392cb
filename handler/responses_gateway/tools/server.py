"""The seam for tools the gateway runs itself (remote MCP today; search, files, images next).

A chat model only knows functions. A server tool offers the model some (``functions``), and
when the model calls one, the turn loop (responses/turns.py) hands the call to the tool that
offered it (``run``) between two model turns, under the response's deadline and cancel. The
tool writes its output items through an :class:`ItemWriter` (the translator: it owns ids,
output indexes and sequence numbers for the whole response), and says how its items go back
to the model in a later turn or request (``history_reader``, with what the calls read:
``reads``, kept by tools/reads.py).

The loop knows the order (model turn, the calls, the next turn), ``max_tool_calls`` and the
deadline; a tool knows its own items, events and failures. Adding a tool is one package with
a :class:`ServerTool` subclass and its ``REGISTRATION`` (tools/declaration.py), and one line
in tools/registry.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from responses_gateway.errors import invalid_choice, invalid_type
from responses_gateway.records import Compared, Value
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec

if TYPE_CHECKING:  # types only: building a tool never imports the engines for them
    from responses_gateway.containers.service import Containers
    from responses_gateway.settings import Settings
    from responses_gateway.vectors.service import VectorStores

Event = dict[str, Any]
#: ``allowed_callers``' values (openai-python 3.57): the model itself, a program the model
#: wrote (tools/programmatic/); a tool without it is the model's only
Caller = Literal["direct", "programmatic"]
DIRECT: Caller = "direct"
PROGRAMMATIC: Caller = "programmatic"


def allowed_callers(tool: Any) -> tuple[str, ...]:
    """Who may call ``tool`` (a request tool param: a model or a dict, or a tool kept as
    sent): :data:`DIRECT` only unless its ``allowed_callers`` says otherwise."""
    value = tool.get("allowed_callers") if isinstance(tool, Mapping) else getattr(
        tool, "allowed_callers", None)
    if not isinstance(value, (list, tuple)):
        return (DIRECT,)
    return tuple(v for v in value if isinstance(v, str))


def tool_fields(tool: Any) -> dict[str, Any]:
    """A request tool's fields that are set, whatever form it came in (a dict, the request
    model of a tool kept as sent, an object): what a server tool's params check reads."""
    if isinstance(tool, Mapping):
        return {k: v for k, v in tool.items() if v is not None}
    dump = getattr(tool, "model_dump", None)
    if dump is not None:
        return dict(dump(exclude_none=True))
    return {k: v for k, v in vars(tool).items() if v is not None}


def check_callers(tool: Any, param: str) -> None:
    """A server tool kept as sent (code_interpreter, hosted shell) has its ``allowed_callers``
    checked as a function tool's model checks it: an array of :data:`Caller` values, else
    OpenAI's 400 naming ``param.allowed_callers`` (never read silently as no caller)."""
    value = tool.get("allowed_callers") if isinstance(tool, Mapping) else getattr(
        tool, "allowed_callers", None)
    if value is None:
        return
    where = f"{param}.allowed_callers"
    if not isinstance(value, (list, tuple)):
        raise invalid_type(where, "an array", value)
    for index, caller in enumerate(value):
        if caller not in (DIRECT, PROGRAMMATIC):
            raise invalid_choice(f"{where}[{index}]", (DIRECT, PROGRAMMATIC), caller)


def offered_directly(tool: Any) -> bool:
    """Whether the model is offered ``tool`` itself (not only through a program)."""
    return DIRECT in allowed_callers(tool)


Seal = Callable[[dict[str, Any]], str]
Unseal = Callable[[str], dict[str, Any]]


class ItemWriter(Protocol):
    """What a server tool may do to the response being built (the translator does it)."""

    def start_tool_item(self, item: dict[str, Any], progress: str | None) -> list[Event]:
        """Add ``item`` as the next output item (``response.output_item.added``) and, with
        ``progress``, that event about it (e.g. ``response.mcp_call.in_progress``)."""
        ...

    def tool_item_event(self, kind: str, **fields: Any) -> Event:
        """An event about the open item (``item_id`` and ``output_index`` filled in)."""
        ...

    def end_tool_item(self, status: str, event: str | None) -> list[Event]:
        """``event`` about the open item (e.g. ``response.mcp_call.completed``), then
        ``response.output_item.done`` with its final state."""
        ...

    @property
    def tool_item(self) -> dict[str, Any] | None:
        """The item open now (between start and end): the tool fills it in."""
        ...


class ServerCall:
    """A call the model made to a server tool's function, or one a tool runs unasked (a
    call the client approved in its previous request runs before the model)."""

    __slots__ = ("arguments", "call_id", "extra", "fragments", "made", "pauses", "spec",
                 "usage")

    def __init__(
        self, call_id: str, spec: ToolSpec, arguments: str, extra: dict[str, Any] | None = None,
        fragments: list[str] | None = None,
    ) -> None:
        self.call_id = call_id
        self.spec = spec  # kind (the tool's), name, namespace (an MCP server's label)
        self.arguments = arguments
        #: the arguments as the model streamed them (a tool may replay them as deltas)
        self.fragments = fragments if fragments is not None else [arguments]
        self.extra = extra or {}  # what the tool attached (an approval request's id)
        #: set by the tool: the response ends after this turn and waits for the client
        #: (an approval request); the model is not asked again
        self.pauses = False
        #: set by the tool: what the call counts in the response's ``tool_usage`` (a search
        #: run: ``{"web_search": {"num_requests": 1}}``; an image's tokens under ``image_gen``)
        self.usage: dict[str, Any] | None = None
        #: set by the tool: the tool calls this call made itself (a program's), which count
        #: against ``max_tool_calls`` with it; the loop sets ``extra["calls_left"]`` (how many
        #: it may still make) before running it
        self.made = 0


class ToolServices(Protocol):
    """What server tools use of the process-wide services (responses/gateway.py's Gateway
    provides it): only this, so a tool cannot reach the rest of the Gateway."""

    @property
    def vector_stores(self) -> VectorStores:
        """The vector stores file_search searches (built on first use)."""
        ...

    @property
    def containers(self) -> Containers:
        """Containers code_interpreter and hosted shell run code in (built on first use;
        OpenAI's 501 when GATEWAY_CODE_INTERPRETER is unset)."""
        ...


class RequestTools(Compared):
    """What building a server tool for one create can see (a record: records.py)."""

    __slots__ = ("every", "history", "include", "indexes", "items", "reads", "services",
                 "settings", "tenant", "tool_choice", "tools")

    tools: list[Any]  # the request's tool params this tool serves (pydantic models)
    tool_choice: Any  # the request's tool_choice (pydantic model or string)
    items: list[dict[str, Any]]  # this request's input items
    history: list[dict[str, Any]]  # earlier turns' items (previous_response_id, conversation)
    settings: Settings
    tenant: str
    indexes: list[int]  # where ``tools`` sit in the request's
    include: tuple[str, ...]  # the request's ``include`` (web_search_call.action.sources)
    #: every tool of the request, whoever serves it (a program calls the others)
    every: list[Any]
    #: what the server tools' calls in the conversation gave the model, by call id
    #: (tools/reads.py: this process's, else the store's): a paused program's journal
    reads: Mapping[str, str]
    services: ToolServices  # the process-wide services (the Gateway)

    def __init__(
        self, tools: list[Any], tool_choice: Any, items: list[dict[str, Any]],
        history: list[dict[str, Any]], settings: Settings, tenant: str,
        indexes: list[int] | None = None, include: tuple[str, ...] = (),
        every: list[Any] | None = None, reads: Mapping[str, str] | None = None, *,
        services: ToolServices,
    ) -> None:
        self.tools = tools
        self.tool_choice = tool_choice
        self.items = items
        self.history = history
        self.settings = settings
        self.tenant = tenant
        self.indexes = [] if indexes is None else indexes
        self.include = include
        self.every = [] if every is None else every
        self.reads = {} if reads is None else reads
        self.services = services


class Rebuild(Compared):
    """What rebuilding a server tool from a stored record can see (a background worker)."""

    __slots__ = ("extra", "services", "settings", "unseal")

    settings: Settings
    unseal: Unseal
    extra: dict[str, Any]
    services: ToolServices  # the process-wide services (the Gateway)

    def __init__(self, settings: Settings, unseal: Unseal, extra: dict[str, Any] | None = None,
                 *, services: ToolServices) -> None:
        self.settings = settings
        self.unseal = unseal
        self.extra = {} if extra is None else extra
        self.services = services


class ServerTool:
    """One server tool's state for one response: built before ``response.created``, run by
    the turn loop, kept in the stored request for a background worker.

    Subclasses set ``kind`` (the :class:`ToolSpec` kind of the functions they offer) and
    implement the methods that raise ``NotImplementedError``; the rest have defaults.
    """

    kind: ClassVar[str]

    # -- building (before response.created; a client mistake is an HTTP error here) ----------

    @classmethod
    async def for_request(cls, request: RequestTools) -> ServerTool:
        raise NotImplementedError

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        """(namespace, chat function) for each function the model is offered."""
        raise NotImplementedError

    def program_functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        """(namespace, chat function) for each function a program may call
        (``allowed_callers`` with ``programmatic``: tools/programmatic/); run by :meth:`run`
        as the model's calls are."""
        return []

    def join(self, peers: Mapping[str, ServerTool]) -> None:
        """The response's other server tools, by kind, once all are built (a program calls
        theirs: tools/programmatic/)."""

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | str | None:
        """The chat ``tool_choice`` for a request's ``tool_choice`` naming this tool (None:
        the choice is not about this tool); a choice it cannot honour raises a 400."""
        return None

    def to_record(self, seal: Seal) -> dict[str, Any]:
        """JSON-safe, secrets sealed with ``seal`` (the tenant-bound sealer)."""
        raise NotImplementedError

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> ServerTool:
        raise NotImplementedError

    # -- running (the turn loop) ---------------------------------------------------------------

    def opening_items(self, items: ItemWriter) -> list[Event]:
        """Items the response starts with, made while building (an MCP tool listing)."""
        return []

    def first_calls(self) -> list[ServerCall]:
        """Calls to run before the first model turn (calls the client approved)."""
        return []

    def skip_first_calls(self) -> None:
        """Nothing is generated (a WebSocket warm-up): nothing approved is acted on."""

    def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        """Run one call: yield batches of events (the first opens its item, the last closes
        it). The loop awaits each batch under the deadline and a cancel. A failure of the
        tool is the item's failure, never an exception (an exception fails the response)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections; called once the response ends, whatever its end."""

    def annotate(self, text: str) -> list[dict[str, Any]]:
        """Annotations (``url_citation``) for a text part of the model's message as it
        closes, each pointing at something this tool's calls returned; never invented."""
        return []

    def reads(self) -> dict[str, str]:
        """What this response's calls gave the model that their items do not hold (a page's
        text, passages), by call id: the next model turn reads it, and it is kept for later
        requests (tools/reads.py: in this process, and in the store with the response)."""
        return {}

    # -- history (translate/to_chat.py): how this tool's items go back to the model ------------

    @classmethod
    def history_reader(
        cls, items: Sequence[Mapping[str, Any]], reads: Mapping[str, str]
    ) -> HistoryReader:
        """A reader for this tool's items among ``items`` (a whole rendered conversation);
        ``reads``: what their calls gave the model, by call id, as far as it is kept (the
        request's tenant's only: tools/reads.py)."""
        raise NotImplementedError


class HistoryCall(Value):
    """One of a tool's items as the model reads it: a call it made, and the answer (a frozen
    value: records.py)."""

    __slots__ = ("arguments", "call_id", "image", "output", "spec")

    call_id: str
    spec: ToolSpec
    arguments: str
    output: str
    #: an image the call made (a data URL), sent after the output to a model that reads
    #: images (translate/to_chat.py); others read ``output`` alone
    image: str | None

    def __init__(self, call_id: str, spec: ToolSpec, arguments: str, output: str,
                 image: str | None = None) -> None:
        init = object.__setattr__
        init(self, "call_id", call_id)
        init(self, "spec", spec)
        init(self, "arguments", arguments)
        init(self, "output", output)
        init(self, "image", image)


class HistoryReader(Protocol):
    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        """The call ``item`` stands for, or None for bookkeeping the model never sees;
        a malformed item raises the 400 naming ``param``."""
        ...


class SharedHistoryReader(HistoryReader, Protocol):
    """The reader of a tool whose item types a client tool shares (``ItemType.shared``)."""

    def owns(self, item: Mapping[str, Any]) -> bool:
        """Whether ``item`` is this tool's (hosted shell: a ``shell_call`` that ran in a
        container, and its output) rather than the client's."""
        ...

"""A validated Responses request plus its conversation items → one Chat Completions body.

Choices made for OpenAI-compatible servers (documented here because clients cannot see them).
The body is OpenAI's own form (``max_completion_tokens``, ``content: null`` beside
``tool_calls``); ``backends/dialects.py`` rewrites it for the server actually upstream.

- ``developer`` messages become ``system`` messages: OpenAI's chat API accepts ``developer``,
  many compatible servers (vLLM templates, Groq, Mistral, Bedrock via our adapter) do not, and
  the two mean the same to a model. ``instructions`` is the first system message.
- System text parts are joined with newlines into one string (chat templates expect strings),
  unless one carries a ``prompt_cache_breakpoint``: then they stay text parts (docs/routing.md);
  a user message with one text part is sent as a string, otherwise as a parts array.
- ``input_file`` becomes a chat ``file`` part. ``file_data`` is passed through; a ``file_url``
  travels in ``file_data`` as well (the shape OpenRouter and LiteLLM accept for URLs; OpenAI's
  chat API has no ``file_url``). A missing ``filename`` is derived from the URL or ``"file"``.
- Assistant turns: text parts join into ``content``, refusals into ``refusal``; a
  ``function_call`` joins the open assistant message (so a text message followed by calls, or
  consecutive calls, make one assistant turn with ``tool_calls``).
- A ``function_call_output`` becomes a ``tool`` message whose content is its text parts joined
  by newlines. Chat tool messages cannot carry images or files, so those parts follow the run of
  tool messages as one ``user`` message, introduced by a line naming the call.
- Tools the client runs (tools/client_tools.py): a ``shell_call``, ``apply_patch_call``,
  ``local_shell_call``, ``computer_call`` or client ``tool_search_call`` goes back as the
  assistant's call of the function standing for it, its output item as that call's ``tool``
  message (a shell call's output chunks and an apply_patch result as JSON, a computer
  screenshot as an image in the ``user`` message after the tool messages). The tools a
  ``tool_search_output`` loaded are offered to the model from then on.
- Items of tools the gateway runs go back as their tool's reader says (a call and its text);
  an image one made (``image_generation_call``) follows the tool messages in a ``user``
  message, as a screenshot does, when the model reads images (``images``), else its text
  note alone.
- The newest ``compaction`` item stands for the items before it (all but ``system`` /
  ``developer`` messages and the user messages it kept) and becomes a user message giving its
  sealed summary (translate/compaction_items.py, docs/compaction.md).
- Reasoning items are dropped unless the backend accepts reasoning back: ``reasoning_input``
  names the assistant field that carries it (``"reasoning_content"`` for DeepSeek, vLLM, Z.ai;
  ``"reasoning"`` for OpenRouter). Their text goes onto the next assistant message, and a sealed
  ``encrypted_content`` is opened with ``unseal`` into ``reasoning_details``. Which ones go
  back is ``reasoning.context``'s (translate/reasoning_context.py): ``current_turn`` keeps
  only those after the last user message, ``all_turns`` (``auto`` here) every one.
- ``configuration_update`` items are not messages: their settings were applied to the
  request before rendering (responses/configuration.py).
- ``user`` and ``safety_identifier`` are both passed on under their own names (OpenAI's chat
  API takes both), as are ``service_tier``, ``prompt_cache_key``, ``prompt_cache_retention``,
  ``prompt_cache_options`` and an input part's ``prompt_cache_breakpoint`` (docs/routing.md:
  what each backend makes of them); ``metadata``, ``store``, ``truncation``, ``max_tool_calls``
  are not sent. Fields the client did not set are omitted so upstream defaults apply, and
  function tools carry ``strict`` only when the client set it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import GENERATED_IMAGE_INTRO
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.tools import client_tools, custom, registry
from responses_gateway.tools.catalog import ToolCatalog
from responses_gateway.tools.server import DIRECT, HistoryReader, offered_directly
from responses_gateway.translate import compaction_items, reasoning_context

if TYPE_CHECKING:  # the request models load with the first create (translate/request.py)
    from responses_gateway.translate.request_models import CreateResponseRequest
    from responses_gateway.translate.request_tools import CustomTool, FunctionTool

Unseal = Callable[[str], dict[str, Any]]

_DETAILS = frozenset({"low", "high", "auto"})


_MESSAGE_PARAM = re.compile(r"messages\[(\d+)\](.*)", re.S)


def client_param(exc: GatewayError, message_params: Sequence[str]) -> GatewayError:
    """A backend names chat messages (``messages[2].content[0]``); the client sent input:
    ``exc`` names that instead, from the ``message_params`` :func:`to_chat_request` filled."""
    match = _MESSAGE_PARAM.match(exc.param or "")
    if match and int(match[1]) < len(message_params):
        exc.param = message_params[int(match[1])] + match[2]
    return exc


def to_chat_request(
    req: CreateResponseRequest,
    items: list[dict[str, Any]],
    *,
    model: str,
    reasoning_input: str | None = None,
    unseal: Unseal | None = None,
    message_params: list[str] | None = None,
    catalog: ToolCatalog | None = None,
    omit: Collection[int] = (),
    output_items: Sequence[dict[str, Any]] = (),
    images: bool = False,
    reads: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Build the chat body. ``items`` is the whole conversation, this turn's input last.

    ``message_params``, when given, is filled with the client-side param of each chat message
    (``instructions``, ``input[3]``, ``previous_response_id``), so an error a backend raises
    about ``messages[k]...`` can name what the client sent. ``catalog``, when given, is filled
    with the tools as chat functions and the way back (tools/catalog.py); server tools'
    functions join it later, once built (an MCP server's are listed first). ``omit``:
    indexes of ``items`` left out (``truncation``);
    ``output_items``: items this response made before the model runs (a compaction item),
    after the input. The newest compaction item stands for what came before it
    (translate/compaction_items.py). ``images``: the model reads images, so an image a server
    tool made goes back as an image part (else its text note alone). ``reads``: what server
    tools' calls among the items gave the model, by call id (tools/reads.py).
    """
    catalog = catalog if catalog is not None else ToolCatalog()
    chat_tools = _catalog_tools(req, catalog)
    _loaded_tools([*items, *output_items], catalog)
    current = 0 if req.input is None else 1 if isinstance(req.input, str) else len(req.input)
    builder = _Messages(reasoning_input, unseal, first_current=len(items) - current,
                        catalog=catalog, history=items, known_calls=_call_ids(items),
                        images=images, reads=reads,
                        reasoning_from=reasoning_context.replay_from(
                            [*items, *output_items],
                            reasoning_context.effective(req.reasoning_context, reasoning_input)))
    sources = message_params if message_params is not None else []
    if req.instructions:
        builder.messages.append({"role": "system", "content": req.instructions})
        sources.append("instructions")
    if output_items:
        items = [*items, *output_items]
    view = compaction_items.view(items, unseal, builder.param)
    for index, item in enumerate(items):
        if index in view.hidden or index in omit:
            continue
        if view.message is not None and index == view.at:
            builder.finish()  # closes the open assistant turn: the summary is a user message
            builder.messages.append(view.message)
        else:
            builder.add(index, item)
        sources.extend([builder.param(index)] * (len(builder.messages) - len(sources)))
    body: dict[str, Any] = {"model": model, "messages": builder.finish()}
    sources.extend(["input"] * (len(body["messages"]) - len(sources)))
    _add_tools(body, req, chat_tools, catalog)
    _add_options(body, req)
    return body


def _catalog_tools(req: CreateResponseRequest, catalog: ToolCatalog) -> list[dict[str, Any]]:
    """Every tool the model is offered, as chat functions, in the client's order. Plain
    functions claim their names first, so a flattened name can never take one."""
    from responses_gateway.translate.request_tools import (
        CustomTool,
        FunctionTool,
        NamespaceTool,
        ToolChoiceAllowed,
    )

    tools = req.tools or []
    for tool in tools:
        if isinstance(tool, FunctionTool):
            catalog.claim(tool.name)
    choice = req.tool_choice
    allowed = (
        {(t.type, getattr(t, "name", None)) for t in choice.tools}
        if isinstance(choice, ToolChoiceAllowed) else None
    )
    for tool in tools:
        entry = client_tools.client_run(tool)
        if entry is not None:
            if (allowed is None or _client_allowed(entry, allowed)) and offered_directly(tool):
                catalog.add_client(entry.kind, client_tools.chat_function(entry, tool))
        elif isinstance(tool, NamespaceTool):
            for member in tool.tools:
                if (allowed is None or (member.type, member.name) in allowed) and offered_directly(
                        member if member.allowed_callers is not None else tool):
                    _add_member(catalog, member, tool.name)
        elif isinstance(tool, (FunctionTool, CustomTool)) and offered_directly(tool) and (
            allowed is None or (tool.type, tool.name) in allowed
        ):
            _add_member(catalog, tool, None)
    return catalog.chat_tools


def _client_allowed(entry: client_tools.ClientTool, allowed: set[tuple[str, Any]]) -> bool:
    """``allowed_tools`` names a client-run tool by its type (any computer type names the
    computer tool, as OpenAI's tool_choice does)."""
    return any(_same_client_tool(entry, kind) for kind, _ in allowed)


def _same_client_tool(entry: client_tools.ClientTool, tool_type: str) -> bool:
    other = client_tools.BY_TOOL_TYPE.get(tool_type)
    return other is not None and other.call_type == entry.call_type


def _client_choice(tool_type: str, catalog: ToolCatalog) -> str | None:
    """The chat name of the client-run tool a ``tool_choice`` of ``tool_type`` forces."""
    for chat, spec in catalog.specs.items():
        entry = client_tools.BY_KIND.get(spec.kind)
        if entry is not None and _same_client_tool(entry, tool_type):
            return chat
    return None


def _loaded_tools(items: Sequence[dict[str, Any]], catalog: ToolCatalog) -> None:
    """Tools a client ``tool_search_output`` loaded: callable from then on, as OpenAI does
    (function, custom and namespace tools; a name already offered stays as it is)."""
    from responses_gateway.translate.request_tools import CustomTool, FunctionTool, NamespaceTool

    loadable: dict[Any, Any] = {
        "function": FunctionTool, "custom": CustomTool, "namespace": NamespaceTool}
    for item in items:
        if not (isinstance(item, dict) and item.get("type") == "tool_search_output"
                and item.get("execution", "client") == "client"):
            continue
        for tool in item.get("tools") or ():
            model = loadable.get(tool.get("type")) if isinstance(tool, dict) else None
            if model is None:
                continue
            try:
                loaded = model.model_validate(tool)
            except ValueError:
                continue  # not a tool the model could call: left out, as a hosted one is
            members = loaded.tools if isinstance(loaded, NamespaceTool) else (loaded,)
            namespace = loaded.name if isinstance(loaded, NamespaceTool) else None
            for member in members:
                if not catalog.offered(member.type, member.name, namespace):
                    if isinstance(member, FunctionTool) and namespace is None:
                        catalog.claim(member.name)
                    _add_member(catalog, member, namespace)


def _add_member(
    catalog: ToolCatalog, tool: FunctionTool | CustomTool, namespace: str | None
) -> None:
    from responses_gateway.translate.request_tools import CustomTool

    if isinstance(tool, CustomTool):
        fmt = tool.format.model_dump() if tool.format is not None else None
        catalog.add_custom(tool.name, tool.description, fmt, namespace)
        return
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    catalog.add_function(function, namespace)


def _add_tools(
    body: dict[str, Any], req: CreateResponseRequest, chat_tools: list[dict[str, Any]],
    catalog: ToolCatalog,
) -> None:
    from responses_gateway.translate.request_tools import (
        ToolChoiceAllowed,
        ToolChoiceCustom,
        ToolChoiceFunction,
        ToolChoiceHosted,
        chooses_served,
    )

    choice: Any = req.tool_choice
    if isinstance(choice, ToolChoiceAllowed):
        choice = choice.mode
    elif isinstance(choice, (ToolChoiceFunction, ToolChoiceCustom)):
        name = catalog.chat_name(choice.type, choice.name)
        choice = {"type": "function", "function": {"name": name}}
    elif getattr(choice, "type", None) in client_tools.CLIENT_TOOL_TYPES:
        chosen = _client_choice(choice.type, catalog)
        # none: the tool of that type is a server tool's (hosted shell), whose functions come
        # later and narrow the choice, or a hosted one left out: the choice goes with it
        choice = ({"type": "function", "function": {"name": chosen}} if chosen
                  else "required" if chooses_served(choice.type, req.tools) else None)
    elif isinstance(choice, ToolChoiceHosted):
        # a tool the gateway runs: its functions come later and it narrows the choice; one
        # left out for the model cannot be forced
        choice = "required" if chooses_served(choice.type, req.tools) else None
    elif getattr(choice, "type", None) in registry.SERVER_TOOL_TYPES:
        choice = "required"  # a server tool's functions come later: it narrows the choice
    server = any(getattr(tool, "type", None) in registry.SERVER_TOOL_TYPES
                 and getattr(tool, "served", True) for tool in req.tools or ())
    if not chat_tools and not server:
        return  # chat rejects tool_choice / parallel_tool_calls without tools
    body["tools"] = chat_tools  # server tools' functions join these (responses/gateway.py)
    if choice is not None:
        body["tool_choice"] = choice
    if req.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = req.parallel_tool_calls


_PASSTHROUGH = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
)


def _add_options(body: dict[str, Any], req: CreateResponseRequest) -> None:
    from responses_gateway.translate.request_models import FormatJsonObject, FormatJsonSchema

    for name in _PASSTHROUGH:
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    if req.prompt_cache_options is not None:
        # ``prewarm`` is the gateway's to honour (responses/prewarm.py), not the upstream's
        body["prompt_cache_options"] = req.prompt_cache_options.model_dump(
            exclude_none=True, exclude={"prewarm"})
    if req.max_output_tokens is not None:
        body["max_completion_tokens"] = req.max_output_tokens
    if req.effort is not None:
        body["reasoning_effort"] = req.effort
    if req.text is not None:
        fmt = req.text.format
        if isinstance(fmt, FormatJsonObject):
            body["response_format"] = {"type": "json_object"}
        elif isinstance(fmt, FormatJsonSchema):
            schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
            if fmt.description is not None:
                schema["description"] = fmt.description
            if fmt.strict is not None:
                schema["strict"] = fmt.strict
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        if req.text.verbosity is not None:
            body["verbosity"] = req.text.verbosity
    if req.wants_logprobs:
        body["logprobs"] = True
        if req.top_logprobs is not None:
            body["top_logprobs"] = req.top_logprobs
    body["stream"] = req.streaming
    if req.streaming:
        body["stream_options"] = {"include_usage": True}


class _Messages:
    """Walks the items once, keeping the open assistant turn and what waits to attach to it."""

    __slots__ = (
        "_assistant",
        "_catalog",
        "_details",
        "_first_current",
        "_history",
        "_images",
        "_known_calls",
        "_media",
        "_program_calls",
        "_readers",
        "_reads",
        "_reasoning",
        "_reasoning_field",
        "_reasoning_from",
        "_tool_results",
        "_unseal",
        "messages",
    )

    def __init__(
        self, reasoning_field: str | None, unseal: Unseal | None, first_current: int,
        catalog: ToolCatalog, history: Sequence[dict[str, Any]] = (),
        known_calls: Collection[str] | None = None, images: bool = False,
        reads: Mapping[str, str] | None = None, reasoning_from: int = 0,
    ):
        self.messages: list[dict[str, Any]] = []
        # Reasoning items before this index are not replayed (``reasoning.context``).
        self._reasoning_from = reasoning_from
        self._reads = reads or {}  # what server tools' calls gave the model, by call id
        self._images = images  # the model reads images: a server tool's go back as parts
        self._catalog = catalog
        self._history = history  # every item rendered: a server tool reads its own among them
        #: calls a program made (their outputs are the program's too, ``caller`` or not)
        self._program_calls = {item.get("call_id") for item in history
                               if isinstance(item, dict) and _program_made(item)}
        self._known_calls = known_calls  # call ids an output may answer (None: not checked)
        self._readers: dict[str, HistoryReader] = {}
        # Results of the open assistant turn's server-tool calls: tool messages follow it.
        self._tool_results: list[dict[str, Any]] = []
        self._reasoning_field = reasoning_field
        self._unseal = unseal
        self._first_current = first_current
        # The open assistant turn accepts further tool calls. Pending reasoning waits for the
        # next assistant turn, so it is only ever non-empty while no turn is open.
        self._assistant: dict[str, Any] | None = None
        self._reasoning: list[str] = []
        self._details: list[Any] = []
        self._media: list[dict[str, Any]] = []  # tool-output images/files, sent after the tools

    def param(self, index: int) -> str:
        """Items before this turn's input came from the store via ``previous_response_id``."""
        if index < self._first_current:
            return "previous_response_id"
        return f"input[{index - self._first_current}]"

    def add(self, index: int, item: dict[str, Any]) -> None:
        if not isinstance(item, dict):
            raise invalid_request("Input items must be objects.", param=self.param(index))
        if _program_made(item) or item.get("call_id") in self._program_calls:
            return  # a program's call or its output: the model reads the program's result
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind in registry.SHARED_ITEM_TYPES and registry.owns(self._reader(kind), item):
            self._server_item(index, item, kind)  # a server tool's item of a client type
        elif kind == "message":
            self._message(index, item)
        elif kind == "function_call":
            self._function_call(index, item)
        elif kind == "custom_tool_call":
            self._custom_tool_call(index, item)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._function_call_output(index, item)
        elif kind in client_tools.CALL_TYPES:
            self._client_call(index, item)
        elif kind in client_tools.OUTPUT_TYPES:
            self._client_output(index, item)
        elif kind in registry.SERVER_ITEM_TYPES:
            self._server_item(index, item, kind)
        elif kind == "reasoning":
            self._reasoning_item(index, item)
        elif kind == "compaction_trigger":
            pass  # asked for the compaction before the model runs (compaction_items.py)
        elif kind == "configuration_update":
            pass  # applied to the request's options (responses/configuration.py)
        elif kind == "item_reference":
            raise invalid_request(
                f"Item reference '{item.get('id')}' cannot be resolved: no stored item has "
                f"this id for this API key.",
                param=self.param(index),
            )
        else:
            raise invalid_request(
                f"Input items of type '{kind}' are not supported by this gateway.",
                param=f"{self.param(index)}.type",
                code="invalid_value",
            )

    def finish(self) -> list[dict[str, Any]]:
        self._close_assistant()
        self._flush_media()
        return self.messages

    # -- items --

    def _message(self, index: int, item: dict[str, Any]) -> None:
        role = item.get("role")
        content = item.get("content")
        param = f"{self.param(index)}.content"
        if role == "assistant":
            self._assistant_message(content, param)
            return
        if role not in ("user", "system", "developer"):
            raise invalid_request(
                f"Invalid value: '{role}'. Supported values are: 'user', 'system', "
                f"'developer', and 'assistant'.",
                param=f"{self.param(index)}.role",
                code="invalid_value",
            )
        self._close_assistant()
        self._flush_media()
        if role == "user":
            self.messages.append({"role": "user", "content": self._user_content(content, param)})
        else:
            self.messages.append({"role": "system", "content": _system_content(content, param)})

    def _assistant_message(self, content: Any, param: str) -> None:
        texts: list[str] = []
        refusals: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        else:
            for j, part in enumerate(_parts(content, param)):
                if part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusals.append(part["refusal"])
                else:
                    texts.append(_text_of(part, f"{param}[{j}]", ("output_text", "input_text")))
        self._assistant = None  # a message starts a new assistant turn; calls may join it
        message = self._open_assistant()
        message["content"] = "".join(texts)  # "" rather than null: a refusal alone needs content
        if refusals:
            message["refusal"] = "".join(refusals)

    def _function_call(self, index: int, item: dict[str, Any]) -> None:
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        for key, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
            if not isinstance(value, str):
                raise missing_parameter(f"{self.param(index)}.{key}")
        namespace = item.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = self._catalog.chat_name("function", name, namespace)  # type: ignore[arg-type]
        self._add_call(call_id, name, arguments)  # type: ignore[arg-type]

    def _add_call(self, call_id: str, name: str, arguments: str) -> None:
        message = self._assistant or self._open_assistant()
        message.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    def _custom_tool_call(self, index: int, item: dict[str, Any]) -> None:
        """The model called a custom tool through the function standing for it: the same call
        goes back, its input as that function's one argument."""
        call_id, name, text = item.get("call_id"), item.get("name"), item.get("input")
        for key, value in (("call_id", call_id), ("name", name), ("input", text)):
            if not isinstance(value, str):
                raise missing_parameter(f"{self.param(index)}.{key}")
        namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
        chat_name = self._catalog.chat_name("custom", name, namespace)  # type: ignore[arg-type]
        self._add_call(call_id, chat_name, custom.arguments_for(text))  # type: ignore[arg-type]

    def _client_call(self, index: int, item: dict[str, Any]) -> None:
        """The model's call of a tool the client runs: the same call of the function standing
        for it goes back (a server-executed tool_search is OpenAI's: nothing to send)."""
        if item.get("type") == "tool_search_call" and item.get("execution") == "server":
            return
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            raise missing_parameter(f"{self.param(index)}.call_id")
        kinds = client_tools.KINDS_OF_CALL[item["type"]]
        kind = next((k for k in kinds
                     if self._catalog.offered(k, client_tools.BY_KIND[k].function)),
                    client_tools.kind_of_call(item))
        name = self._catalog.chat_name(kind, client_tools.BY_KIND[kind].function)
        self._add_call(call_id, name, client_tools.call_arguments(item))

    def _client_output(self, index: int, item: dict[str, Any]) -> None:
        """What the client's run of a tool returned, as that call's tool message."""
        kind = item["type"]
        if kind == "tool_search_output" and item.get("execution") == "server":
            return
        self._close_assistant()
        call_id = client_tools.output_call_id(item)
        if not isinstance(call_id, str):
            raise missing_parameter(f"{self.param(index)}.call_id")
        if self._known_calls is not None and call_id not in self._known_calls:
            what = kind.removesuffix("_output").replace("_", " ")
            raise invalid_request(
                f"No tool call found for {what} output with call_id {call_id}.", param="input")
        text = client_tools.output_text(item)
        if kind == "computer_call_output":
            url = client_tools.screenshot_url(item)
            if url is None:
                output = item.get("output")
                has_file = isinstance(output, dict) and output.get("file_id")
                raise _no_inline(f"{self.param(index)}.output", "image_url",
                                 {"file_id": has_file})
            intro = f"Screenshot returned by tool call {call_id}:"
            self._media.extend([{"type": "text", "text": intro},
                                {"type": "image_url", "image_url": {"url": url}}])
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _server_item(self, index: int, item: dict[str, Any], kind: str) -> None:
        """An item of a tool the gateway runs, as its tool says the model reads it: a call and
        its answer (calls in a row are one assistant turn, their answers follow it in order),
        or nothing (the tool's bookkeeping)."""
        call = self._reader(kind).read(item, self.param(index))
        if call is None:
            return
        spec = call.spec
        self._add_call(call.call_id, self._catalog.chat_name(spec.kind, spec.name, spec.namespace),
                       call.arguments)
        self._tool_results.append(
            {"role": "tool", "tool_call_id": call.call_id, "content": call.output})
        if call.image is not None and self._images:  # as a computer screenshot goes back
            # A backend knows a generated image by this line (backends/base.py).
            self._media.extend([{"type": "text",
                                 "text": f"{GENERATED_IMAGE_INTRO}{call.call_id}:"},
                                {"type": "image_url", "image_url": {"url": call.image}}])

    def _reader(self, kind: str) -> HistoryReader:
        """The reader of a server tool's items of ``kind``, made once per walk."""
        reader = self._readers.get(kind)
        if reader is None:
            reader = self._readers[kind] = registry.history_reader(kind, self._history,
                                                                   self._reads)
        return reader

    def _function_call_output(self, index: int, item: dict[str, Any]) -> None:
        self._close_assistant()
        call_id, output = item.get("call_id"), item.get("output")
        param = f"{self.param(index)}.output"
        if not isinstance(call_id, str):
            raise missing_parameter(f"{self.param(index)}.call_id")
        if self._known_calls is not None and call_id not in self._known_calls:
            # OpenAI's words, and its param: the output answers nothing the model was asked.
            what = "custom tool call" if item.get("type") == "custom_tool_call_output" else (
                "function call")
            raise invalid_request(
                f"No tool call found for {what} output with call_id {call_id}.", param="input")
        if isinstance(output, str):
            text = output
        else:
            texts: list[str] = []
            media: list[dict[str, Any]] = []
            for j, part in enumerate(_parts(output, param)):
                chat_part = _chat_part(part, f"{param}[{j}]")
                if chat_part["type"] == "text":
                    texts.append(chat_part["text"])
                else:
                    media.append(chat_part)
            if media:
                intro = f"Content returned by tool call {call_id}:"
                self._media.extend([{"type": "text", "text": intro}, *media])
            text = "\n".join(texts) if texts or not media else "(attached in the next message)"
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _reasoning_item(self, index: int, item: dict[str, Any]) -> None:
        if self._reasoning_field is None or index < self._reasoning_from:
            return
        self._assistant = None  # reasoning precedes the assistant turn it belongs to
        parts = item.get("content") or ()
        texts = [p.get("text") for p in parts if isinstance(p, dict)]
        joiner = ""
        if not any(texts):
            texts = [p.get("text") for p in item.get("summary") or () if isinstance(p, dict)]
            joiner = "\n\n"
        text = joiner.join(t for t in texts if isinstance(t, str))
        if text:
            self._reasoning.append(text)
        sealed = item.get("encrypted_content")
        if sealed and self._unseal is not None:
            opened = self._unseal(sealed)
            details = opened.get("reasoning_details") if isinstance(opened, dict) else None
            if isinstance(details, list):
                self._details.extend(details)

    # -- turn bookkeeping --

    def _open_assistant(self) -> dict[str, Any]:
        self._flush_tool_results()
        self._flush_media()
        message: dict[str, Any] = {"role": "assistant", "content": None}
        self._attach_reasoning(message)
        self.messages.append(message)
        self._assistant = message
        return message

    def _attach_reasoning(self, message: dict[str, Any]) -> None:
        if self._reasoning and self._reasoning_field:
            message[self._reasoning_field] = "\n\n".join(self._reasoning)
        if self._details:
            message["reasoning_details"] = self._details
        self._reasoning = []
        self._details = []

    def _close_assistant(self) -> None:
        """End the assistant turn; reasoning with no assistant message after it is dropped."""
        self._flush_tool_results()
        self._assistant = None
        self._reasoning = []
        self._details = []

    def _flush_tool_results(self) -> None:
        if self._tool_results:
            self._assistant = None  # answered: later calls start a new turn
            self.messages.extend(self._tool_results)
            self._tool_results = []

    def _flush_media(self) -> None:
        if self._media:
            self.messages.append({"role": "user", "content": self._media})
            self._media = []

    def _user_content(self, content: Any, param: str) -> Any:
        if isinstance(content, str):
            return content
        parts = [_chat_part(part, f"{param}[{j}]") for j, part in enumerate(_parts(content, param))]
        if not parts:
            return ""
        for part, chat_part in zip(_parts(content, param), parts, strict=True):
            if isinstance(part.get("prompt_cache_breakpoint"), dict):  # the chat API's too
                chat_part["prompt_cache_breakpoint"] = part["prompt_cache_breakpoint"]
        if len(parts) == 1 and parts[0].keys() == {"type", "text"}:
            return parts[0]["text"]
        return parts


def turn_messages(
    items: Sequence[dict[str, Any]], *, catalog: ToolCatalog, reasoning_input: str | None,
    unseal: Unseal | None, images: bool = False, reads: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One model turn's output items (text, reasoning, the items of the server tools the
    gateway ran) as the chat messages the next turn sends after the ones before (the turn
    loop: responses/turns.py)."""
    builder = _Messages(reasoning_input, unseal, first_current=0, catalog=catalog,
                        history=items, images=images, reads=reads)
    for index, item in enumerate(items):
        builder.add(index, item)
    return builder.finish()


_CALL_TYPES = frozenset({"function_call", "custom_tool_call", *client_tools.CALL_TYPES})


def _program_made(item: dict[str, Any]) -> bool:
    """A call something other than the model made (its ``caller`` not ``direct``: a program,
    tools/programmatic/), or its output: the model wrote the program, not the call."""
    caller = item.get("caller")
    return isinstance(caller, dict) and caller.get("type") not in (None, DIRECT)


def _call_ids(items: Sequence[dict[str, Any]]) -> set[str]:
    """The call ids of the client's calls among ``items`` (a whole conversation)."""
    return {item["call_id"] for item in items
            if isinstance(item, dict) and item.get("type") in _CALL_TYPES
            and isinstance(item.get("call_id"), str)}


def _parts(content: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise invalid_request(
            f"Invalid type for '{param}': expected one of a string or array of objects.",
            param=param,
            code="invalid_type",
        )
    return content


def _system_content(content: Any, param: str) -> Any:
    """A system or developer message's text, joined into one string; kept as text parts when
    one carries a ``prompt_cache_breakpoint`` (Bedrock places a ``cachePoint`` after it, OpenAI
    takes it on the part; dialects.py joins the parts again for servers that take neither)."""
    if isinstance(content, str):
        return content
    parts = _parts(content, param)
    texts = [_text_of(part, f"{param}[{j}]", ("input_text",)) for j, part in enumerate(parts)]
    if not any(isinstance(part.get("prompt_cache_breakpoint"), dict) for part in parts):
        return "\n".join(texts)
    chat_parts: list[dict[str, Any]] = []
    for part, text in zip(parts, texts, strict=True):
        chat_part: dict[str, Any] = {"type": "text", "text": text}
        if isinstance(part.get("prompt_cache_breakpoint"), dict):
            chat_part["prompt_cache_breakpoint"] = part["prompt_cache_breakpoint"]
        chat_parts.append(chat_part)
    return chat_parts


def _text_of(part: dict[str, Any], param: str, kinds: tuple[str, ...]) -> str:
    if part.get("type") not in kinds or not isinstance(part.get("text"), str):
        raise invalid_request(
            f"Invalid value: '{part.get('type')}'. Supported values are: "
            + ", ".join(f"'{k}'" for k in kinds)
            + ".",
            param=f"{param}.type",
            code="invalid_value",
        )
    return part["text"]


def _chat_part(part: dict[str, Any], param: str) -> dict[str, Any]:
    """One Responses input content part as a chat content part."""
    kind = part.get("type")
    if kind == "input_text":
        return {"type": "text", "text": _text_of(part, param, ("input_text",))}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise _no_inline(param, "image_url", part)
        image: dict[str, Any] = {"url": url}
        if part.get("detail") in _DETAILS:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        data = part.get("file_data") or part.get("file_url")
        if not isinstance(data, str):
            raise _no_inline(param, "file_data", part)
        filename = part.get("filename") or _filename(part.get("file_url"))
        return {"type": "file", "file": {"file_data": data, "filename": filename}}
    raise invalid_request(
        f"Invalid value: '{kind}'. Supported values are: 'input_text', 'input_image', "
        f"'input_file'.",
        param=f"{param}.type",
        code="invalid_value",
    )


def _no_inline(param: str, field: str, part: dict[str, Any]) -> GatewayError:
    if part.get("file_id"):
        return invalid_request(
            f"'file_id' is not supported by this gateway (it refers to OpenAI's file storage); "
            f"send the content inline with '{field}' instead.",
            param=f"{param}.file_id",
            code="unsupported_parameter",
        )
    return missing_parameter(f"{param}.{field}")


def _filename(url: Any) -> str:
    if isinstance(url, str) and not url.startswith("data:"):
        name = url.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if name and "." in name:
            return name
    return "file"

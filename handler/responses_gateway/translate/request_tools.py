"""The create body's ``tools`` and ``tool_choice``: their models, their echo, their checks.

Function, custom and namespace tools are offered to the model (tools/catalog.py); a server
tool's request tool is its package's model where its registration names one (``mcp``:
tools/mcp/params.py), else kept as sent; tools the client runs (shell, apply_patch,
computer...) are offered as functions whose calls come back typed (tools/client_tools.py);
OpenAI's hosted tools are left out for the model or refused, as GATEWAY_HOSTED_TOOLS says
(tools/hosted.py).
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    model_validator,
)

from responses_gateway.errors import (
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)
from responses_gateway.tools import client_tools, registry
from responses_gateway.tools.hosted import HOSTED_TYPES, refused
from responses_gateway.tools.server import Caller
from responses_gateway.translate.request_base import NAME_PATTERN, PARAMS_CONFIG, by_type

#: The validation context key naming the hosted tool types the gateway runs itself
#: (``CreateResponseRequest.model_validate(body, context={SERVED: types})``).
SERVED = "served_tools"

# --- tools and tool_choice -----------------------------------------------------------------


class FunctionTool(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    output_schema: dict[str, Any] | None = None  # echoed; the chat function has no place for it
    defer_loading: bool | None = None  # echoed; no tool search here hides it, so it is offered
    # Echoed as sent (openai-python 3.57): ``async`` marks a function whose result may come
    # later; the chat function has no place for it, the model is offered the function as is.
    async_: bool | None = Field(default=None, alias="async")
    allowed_callers: list[Caller] | None = None


class FormatGrammar(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str


class FormatFreeText(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["text"]


class CustomTool(BaseModel):
    """Freeform input (tools/custom.py): offered to the model as a function of one string."""

    model_config = PARAMS_CONFIG
    type: Literal["custom"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    description: str | None = None
    allowed_callers: list[Caller] | None = None
    format: (
        Annotated[
            Union[  # noqa: UP007
                Annotated[FormatFreeText, Tag("~text")],
                Annotated[FormatGrammar, Tag("~grammar")],
            ],
            Discriminator(by_type),
        ]
        | None
    ) = None


NamespaceMember = Annotated[
    Union[  # noqa: UP007
        Annotated[FunctionTool, Tag("~function")],
        Annotated[CustomTool, Tag("~custom")],
    ],
    Discriminator(by_type),
]


class NamespaceTool(BaseModel):
    """Tools grouped under a name (the Codex CLI's sub-agent tools): flattened for the model,
    their calls reported with ``namespace`` (tools/catalog.py)."""

    model_config = PARAMS_CONFIG
    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    description: str
    tools: list[NamespaceMember] = Field(min_length=1)
    allowed_callers: list[Caller] | None = None


def _imported(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


#: Server tools whose request tool has a model of its own (the registration's
#: ``request_tool``: mcp), each with the request tool type it serves; imported here, with the
#: request models, never at start.
SERVER_TOOL_MODELS: tuple[tuple[str, type[BaseModel]], ...] = tuple(
    (tool_type, _imported(r.request_tool))
    for r in registry.REGISTRATIONS if r.request_tool for tool_type in r.tool_types)
#: The ``tool_choice`` models server tools shape their own way (``request_choice``).
SERVER_CHOICE_MODELS: tuple[tuple[str, type[BaseModel]], ...] = tuple(
    (tool_type, _imported(r.request_choice))
    for r in registry.REGISTRATIONS if r.request_choice for tool_type in r.tool_types)
_MODELLED = tuple(model for _, model in SERVER_TOOL_MODELS)
_CHOICE_MODELLED = tuple(model for _, model in SERVER_CHOICE_MODELS)


class HostedTool(BaseModel):
    """A tool OpenAI runs on its servers (tools/hosted.py): omitted or refused by
    GATEWAY_HOSTED_TOOLS, unless the gateway runs it itself (a server tool with what it needs
    configured: tools/registry.py), which ``served`` says. Its fields stay as the client sent
    them: the server tool reads them."""

    model_config = ConfigDict(strict=True, extra="allow", defer_build=True)
    type: str
    _served: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _served_by_the_gateway(self, info: ValidationInfo) -> HostedTool:
        """Decided as it is built: the validation's context names the hosted types the
        gateway runs (:data:`SERVED`, request_models.parse_create_request)."""
        self._served = self.type in (info.context or {}).get(SERVED, ())
        return self

    @property
    def served(self) -> bool:
        return self._served


class ClientRunTool(BaseModel):
    """A tool the client runs (tools/client_tools.py: shell, apply_patch, local_shell,
    computer, tool_search with ``execution: "client"``): offered to the model as a function,
    its calls answered by the client. Its fields stay as the client sent them."""

    model_config = ConfigDict(strict=True, extra="allow", defer_build=True)
    type: str


class ComputerUsePreviewTool(ClientRunTool):
    """The preview computer tool: its display is required, as OpenAI requires it."""

    display_width: int
    display_height: int
    environment: Literal["windows", "mac", "linux", "ubuntu", "browser"]


#: Client-run tool types without a model of their own (kept as sent).
_CLIENT_RUN_TYPES = sorted(client_tools.CLIENT_TOOL_TYPES - HOSTED_TYPES - {"computer_use_preview"})
#: Types both the client and OpenAI (or the gateway) run, told apart by their params.
_EITHER_TYPES = sorted(client_tools.CLIENT_TOOL_TYPES & HOSTED_TYPES)


def _tool_tag(value: Any) -> str | None:
    """A type both sides run is the client's when its params say so (client_tools.client_run:
    ``tool_search`` with ``execution: "client"``; a ``shell`` whose environment is no
    container), else hosted (OpenAI's, or a server tool's: tools/registry.py ``serving``)."""
    tag = by_type(value)
    if (tag is not None and tag[1:] in _EITHER_TYPES and isinstance(value, dict)
            and client_tools.client_run(value) is not None):
        return f"~client:{tag[1:]}"
    return tag


Tool = Annotated[
    Union[
        Annotated[FunctionTool, Tag("~function")],
        Annotated[CustomTool, Tag("~custom")],
        Annotated[NamespaceTool, Tag("~namespace")],
        *(Annotated[model, Tag(f"~{kind}")] for kind, model in SERVER_TOOL_MODELS),
        *(Annotated[HostedTool, Tag(f"~{kind}")] for kind in sorted(HOSTED_TYPES)),
        *(Annotated[ClientRunTool, Tag(f"~{kind}")] for kind in _CLIENT_RUN_TYPES),
        Annotated[ComputerUsePreviewTool, Tag("~computer_use_preview")],
        *(Annotated[ClientRunTool, Tag(f"~client:{kind}")] for kind in _EITHER_TYPES),
    ],
    Discriminator(_tool_tag),
]


class ToolChoiceFunction(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["function"]
    name: str


class ToolChoiceCustom(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["custom"]
    name: str


#: OpenAI's ``ToolChoiceTypes``: use this built-in tool. The server tools' choices come from
#: their registrations (tools/registry.py), with the type each is echoed as: a choice outside
#: OpenAI's schema (``web_search``, which the Agents SDK sends for
#: ``ModelSettings(tool_choice="web_search")``) is echoed as the schema's name for the same
#: tool, so a Response stays valid for clients that check it.
HOSTED_CHOICES = ("computer", "computer_use_preview", "computer_use", *registry.CHOICES)


class ToolChoiceHosted(BaseModel):
    """``{"type": "file_search"}`` and the like: use that built-in tool (when the gateway
    runs it; one it leaves out for the model cannot be forced, so the choice is dropped)."""

    model_config = PARAMS_CONFIG
    type: Literal[HOSTED_CHOICES]  # type: ignore[valid-type]


#: tool_choice types naming a tool the client runs (the computer ones are ToolChoiceHosted's).
CLIENT_CHOICES = ("shell", "apply_patch")


class ToolChoiceClient(BaseModel):
    """``{"type": "shell"}``, ``{"type": "apply_patch"}``: call that client-run tool."""

    model_config = PARAMS_CONFIG
    type: Literal[CLIENT_CHOICES]  # type: ignore[valid-type]


class AllowedClientTool(BaseModel):
    """A client-run tool in ``allowed_tools``, named by its type."""

    model_config = PARAMS_CONFIG
    type: Literal[tuple(sorted(client_tools.CLIENT_TOOL_TYPES))]  # type: ignore[misc]


class ToolChoiceAllowed(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["allowed_tools"]
    mode: Literal["none", "auto", "required"] = "auto"
    tools: list[
        Annotated[
            Union[
                Annotated[ToolChoiceFunction, Tag("~function")],
                Annotated[ToolChoiceCustom, Tag("~custom")],
                *(Annotated[AllowedClientTool, Tag(f"~{kind}")]
                  for kind in sorted(client_tools.CLIENT_TOOL_TYPES)),
            ],
            Discriminator(by_type),
        ]
    ] = Field(min_length=1, max_length=128)


def _tool_choice_tag(value: Any) -> str | None:
    return "~mode" if isinstance(value, str) else by_type(value)


ToolChoice = Annotated[
    Union[
        Annotated[Literal["none", "auto", "required"], Tag("~mode")],
        Annotated[ToolChoiceFunction, Tag("~function")],
        Annotated[ToolChoiceCustom, Tag("~custom")],
        *(Annotated[model, Tag(f"~{kind}")] for kind, model in SERVER_CHOICE_MODELS),
        Annotated[ToolChoiceAllowed, Tag("~allowed_tools")],
        *(Annotated[ToolChoiceHosted, Tag(f"~{kind}")] for kind in HOSTED_CHOICES),
        *(Annotated[ToolChoiceClient, Tag(f"~{kind}")] for kind in CLIENT_CHOICES),
    ],
    Discriminator(_tool_choice_tag),
]


# --- what a Response repeats ---------------------------------------------------------------


def echo_tools(tools: list[BaseModel] | None) -> list[dict[str, Any]]:
    """The ``tools`` a Response lists, as OpenAI echoes them."""
    return [_echo_tool(tool) for tool in tools or () if _echoed(tool)]


def echo_tool_choice(choice: Any) -> Any:
    """The ``tool_choice`` a Response lists (``auto`` when none was sent)."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    if isinstance(choice, (ToolChoiceFunction, ToolChoiceCustom)):
        return {"type": choice.type, "name": choice.name}
    if isinstance(choice, _CHOICE_MODELLED):
        return choice.echo()  # type: ignore[attr-defined]
    if isinstance(choice, ToolChoiceHosted):
        return {"type": registry.CHOICES.get(choice.type, choice.type)}
    if isinstance(choice, ToolChoiceClient):
        return {"type": choice.type}
    return {
        "type": "allowed_tools",
        "mode": choice.mode,
        "tools": [{"type": t.type, "name": t.name} if hasattr(t, "name") else {"type": t.type}
                  for t in choice.tools],
    }


def _echoed(tool: BaseModel) -> bool:
    """Hosted tools left out for the model are left out of the echo too: the response lists
    what the model was offered (tools/hosted.py). One the gateway runs is echoed."""
    return not isinstance(tool, HostedTool) or tool.served


def _echo_tool(tool: BaseModel) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        # Responses function tools are strict unless the client says otherwise (OpenAI
        # echoes true).
        echoed: dict[str, Any] = {
            "type": "function",
            "description": tool.description,
            "name": tool.name,
            "output_schema": tool.output_schema,
            "parameters": tool.parameters,
            "strict": True if tool.strict is None else tool.strict,
        }
        for name, value in (("defer_loading", tool.defer_loading), ("async", tool.async_),
                            ("allowed_callers", tool.allowed_callers)):
            if value is not None:  # as sent; OpenAI's echo leaves out what was not
                echoed[name] = list(value) if isinstance(value, list) else value
        return echoed
    if isinstance(tool, CustomTool):
        echoed = {"type": "custom", "name": tool.name}
        if tool.description is not None:
            echoed["description"] = tool.description
        echoed["format"] = (
            tool.format.model_dump() if tool.format is not None else {"type": "text"}
        )
        return echoed
    if isinstance(tool, NamespaceTool):
        return {
            "type": "namespace",
            "name": tool.name,
            "description": tool.description,
            "tools": [_echo_member(member) for member in tool.tools],
        }
    if isinstance(tool, (HostedTool, ClientRunTool)):  # as the client sent it
        return tool.model_dump(exclude_unset=True)
    assert isinstance(tool, _MODELLED), tool
    return tool.echo()  # type: ignore[attr-defined,no-any-return]


def _echo_member(tool: BaseModel) -> dict[str, Any]:
    echoed = _echo_tool(tool)
    if isinstance(tool, FunctionTool):  # namespace members echo what was sent
        for name in ("strict", "output_schema"):
            if getattr(tool, name) is None:
                echoed.pop(name)
    return echoed


# --- checks pydantic cannot word the way OpenAI does ---------------------------------------


def choosable_names(tools: list[BaseModel] | None) -> set[tuple[str, str]]:
    """(type, name) a ``tool_choice`` may name: functions, namespace members, custom."""
    names: set[tuple[str, str]] = set()
    for tool in tools or ():
        members = tool.tools if isinstance(tool, NamespaceTool) else (tool,)
        for member in members:
            if isinstance(member, (FunctionTool, CustomTool)):
                names.add((member.type, member.name))
    return names


def refuse_hosted_tools(tools: list[BaseModel] | None) -> None:
    """GATEWAY_HOSTED_TOOLS=reject: a hosted tool is a 400 naming it."""
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, HostedTool) and not tool.served:
            raise refused(tool.type, i)


def check_tool_choice(choice: Any, tools: list[BaseModel] | None) -> None:
    """A forced ``tool_choice`` names a tool (or MCP server) that ``tools`` holds."""
    names = choosable_names(tools)
    if choice in (None, "auto", "none"):
        return
    if not tools:
        kind = choice if isinstance(choice, str) else choice.type
        raise invalid_request(
            f"Tool choice '{kind}' must be specified with 'tools' parameter.",
            param="tool_choice",
        )
    if isinstance(choice, (ToolChoiceFunction, ToolChoiceCustom)) and (
        (choice.type, choice.name) not in names
    ):
        noun = "function" if choice.type == "function" else "custom tool"
        raise invalid_request(
            f"Tool choice {noun} '{choice.name}' is not one of the {noun}s in 'tools'.",
            param="tool_choice.name",
            code="invalid_value",
        )
    if isinstance(choice, _CHOICE_MODELLED):
        choice.check(tools)  # type: ignore[attr-defined]
    if getattr(choice, "type", None) in client_tools.CLIENT_TOOL_TYPES:
        if not any(_same_client_tool(tool, choice.type)
                   or (isinstance(tool, HostedTool) and tool.type == choice.type)
                   for tool in tools):  # (a hosted one left out: the choice goes with it)
            raise invalid_request(
                f"Tool choice '{choice.type}' not found in 'tools' parameter.",
                param="tool_choice", code="invalid_value")
        return
    if isinstance(choice, ToolChoiceHosted) and not chooses_served(choice.type, tools):
        if any(isinstance(tool, HostedTool) and _same_tool(tool.type, choice.type)
               for tool in tools):
            return  # a hosted tool left out for the model: the choice goes with it
        raise invalid_request(
            f"Tool choice '{choice.type}' not found in 'tools' parameter.",
            param="tool_choice", code="invalid_value")
    if isinstance(choice, ToolChoiceAllowed):
        for i, allowed in enumerate(choice.tools):
            if isinstance(allowed, AllowedClientTool):
                if not any(_same_client_tool(tool, allowed.type)
                           or (isinstance(tool, HostedTool) and tool.type == allowed.type)
                           for tool in tools):
                    raise invalid_request(
                        f"Allowed tool '{allowed.type}' is not one of the tools in 'tools'.",
                        param=f"tool_choice.tools[{i}].type", code="invalid_value")
                continue
            if (allowed.type, allowed.name) not in names:
                raise invalid_request(
                    f"Allowed tool '{allowed.name}' is not one of the functions in 'tools'.",
                    param=f"tool_choice.tools[{i}].name",
                    code="invalid_value",
                )


def _same_client_tool(tool: BaseModel, tool_type: str) -> bool:
    """``tool`` is the client-run tool ``tool_type`` names (any computer type names the
    computer tool, as OpenAI's tool_choice does)."""
    entry = client_tools.client_run(tool) if isinstance(tool, ClientRunTool) else None
    named = client_tools.BY_TOOL_TYPE.get(tool_type)
    return entry is not None and named is not None and entry.call_type == named.call_type


def chooses_served(choice_type: str, tools: list[BaseModel] | None) -> bool:
    """A ``tool_choice`` of ``choice_type`` names a hosted tool the gateway runs."""
    return any(isinstance(tool, HostedTool) and tool.served and _same_tool(tool.type, choice_type)
               for tool in tools or ())


def _same_tool(tool_type: str, choice_type: str) -> bool:
    """``web_search_preview`` chooses any web_search tool, ``computer_use_preview`` any
    computer tool: OpenAI's choice names are older than some tool names."""
    return tool_type.split("_20")[0].removesuffix("_preview") == (
        choice_type.split("_20")[0].removesuffix("_preview"))


def check_server_tools(tools: list[BaseModel] | None) -> None:
    """Each modelled server tool's checks across the request's tools (an MCP server's label
    is unique, its URL usable), with each tool's index for the error's ``param``."""
    for model in _MODELLED:
        found = [(i, tool) for i, tool in enumerate(tools or ()) if isinstance(tool, model)]
        if found:
            model.check_tools(found)  # type: ignore[attr-defined]
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, ClientRunTool) and tool.type == "shell":
            _check_local_environment(getattr(tool, "environment", None),
                                     f"tools[{i}].environment")


#: a ``shell`` tool's environment types (openai-python 3.57 FunctionShellToolParam); the
#: container ones are hosted shell's (tools/hosted_shell/environment.py), never the client's
SHELL_ENVIRONMENTS = ("container_auto", "local", "container_reference")


def _check_local_environment(environment: Any, param: str) -> None:
    """A client-run ``shell``'s environment is none or ``{"type": "local"}``: any other value
    was read as the client's machine, silently (``"x"``, ``{"type": "mars"}``)."""
    if environment is None:
        return
    if not isinstance(environment, dict):
        raise invalid_type(param, "an object", environment)
    kind = environment.get("type")
    if kind is None:
        raise missing_parameter(f"{param}.type")
    if kind not in SHELL_ENVIRONMENTS:
        raise invalid_choice(f"{param}.type", SHELL_ENVIRONMENTS, kind)

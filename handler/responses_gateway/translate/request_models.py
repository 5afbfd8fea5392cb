"""The POST /v1/responses body: validated once, with OpenAI's limits and OpenAI's error shape.

Pydantic (strict, so ``"0.5"`` is not a temperature) checks structure and value limits; every
union is tagged with ``~``-prefixed tags so an error's location maps one-to-one onto OpenAI's
``param`` (``input[2].content[0].image_url``) by dropping the tags. Checks that span fields or
that OpenAI words specially (unsupported tools, ``file_id``, roles and content types) raise
:class:`GatewayError` directly after the structural pass. Unknown top-level fields are ignored
(forward compatibility); unknown keys inside items are kept so they survive into storage.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from responses_gateway import ids
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.tools.hosted import HOSTED_TYPES, refused

INCLUDABLE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)
LOGPROBS = "message.output_text.logprobs"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
NAME_PATTERN = r"^[a-zA-Z0-9_-]+$"
# Ids a client sends are store keys (DynamoDB: 1024 bytes per sort key, 2048 per partition
# key); 200 characters of at most 4 UTF-8 bytes each leave room for the key's prefix. The
# gateway's own ids are about 50.
MAX_ID_LENGTH = 200

# ``defer_build``: the validators are built on the first create, not at import. Building them
# is about 35 ms, a fifth of a cold start, and the worker Lambda, the WebSocket API's connect
# and disconnect, and every route but create never validate a create body.
_ITEMS = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, defer_build=True)
_PARAMS = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, defer_build=True)

Status = Literal["in_progress", "completed", "incomplete"]
ItemId = Annotated[str, Field(max_length=MAX_ID_LENGTH)]


def _by_type(value: Any) -> str | None:
    """Discriminator for ``{"type": ...}`` unions; tags carry a ``~`` so they leave no param."""
    if isinstance(value, dict) and value.get("type") is not None:
        return f"~{value['type']}"
    return None


def _str_or_list(value: Any) -> str | None:
    if isinstance(value, str):
        return "~str"
    return "~list" if isinstance(value, list) else None


def _str_or_parts(parts: Any) -> Any:
    return Annotated[
        Union[Annotated[str, Tag("~str")], Annotated[list[parts], Tag("~list")]],  # noqa: UP007
        Discriminator(
            _str_or_list,
            custom_error_type="invalid_type",
            custom_error_message="one of a string or array of objects",
        ),
    ]


# --- content parts -------------------------------------------------------------------------


class InputText(BaseModel):
    model_config = _ITEMS
    type: Literal["input_text"]
    text: str


class InputImage(BaseModel):
    model_config = _ITEMS
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


class InputFile(BaseModel):
    model_config = _ITEMS
    type: Literal["input_file"]
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None
    filename: str | None = None


class OutputText(BaseModel):
    model_config = _ITEMS
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class Refusal(BaseModel):
    model_config = _ITEMS
    type: Literal["refusal"]
    refusal: str


InputPart = Annotated[
    Union[  # noqa: UP007
        Annotated[InputText, Tag("~input_text")],
        Annotated[InputImage, Tag("~input_image")],
        Annotated[InputFile, Tag("~input_file")],
    ],
    Discriminator(_by_type),
]
MessagePart = Annotated[
    Union[  # noqa: UP007
        Annotated[InputText, Tag("~input_text")],
        Annotated[InputImage, Tag("~input_image")],
        Annotated[InputFile, Tag("~input_file")],
        Annotated[OutputText, Tag("~output_text")],
        Annotated[Refusal, Tag("~refusal")],
    ],
    Discriminator(_by_type),
]


class SummaryText(BaseModel):
    model_config = _ITEMS
    type: Literal["summary_text"]
    text: str


class ReasoningText(BaseModel):
    model_config = _ITEMS
    type: Literal["reasoning_text"]
    text: str


# --- input items ---------------------------------------------------------------------------


class Message(BaseModel):
    model_config = _ITEMS
    type: Literal["message"] = "message"
    id: ItemId | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: _str_or_parts(MessagePart)
    status: Status | None = None


class FunctionCall(BaseModel):
    model_config = _ITEMS
    type: Literal["function_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None
    status: Status | None = None


class FunctionCallOutput(BaseModel):
    model_config = _ITEMS
    type: Literal["function_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    output: _str_or_parts(InputPart)
    status: Status | None = None


class ReasoningItem(BaseModel):
    model_config = _ITEMS
    type: Literal["reasoning"]
    id: ItemId | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Status | None = None


class CustomToolCall(BaseModel):
    model_config = _ITEMS
    type: Literal["custom_tool_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None
    status: Status | None = None


class CustomToolCallOutput(BaseModel):
    model_config = _ITEMS
    type: Literal["custom_tool_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    output: _str_or_parts(InputPart)
    status: Status | None = None


class McpListToolsItem(BaseModel):
    model_config = _ITEMS
    type: Literal["mcp_list_tools"]
    id: ItemId | None = None
    server_label: str
    tools: list[dict[str, Any]]
    error: str | None = None


class McpCallItem(BaseModel):
    model_config = _ITEMS
    type: Literal["mcp_call"]
    id: ItemId | None = None
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: Any = None
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] | None = None
    approval_request_id: str | None = None


class McpApprovalRequestItem(BaseModel):
    model_config = _ITEMS
    type: Literal["mcp_approval_request"]
    id: ItemId | None = None
    server_label: str
    name: str
    arguments: str


class McpApprovalResponseItem(BaseModel):
    model_config = _ITEMS
    type: Literal["mcp_approval_response"]
    id: ItemId | None = None
    approval_request_id: str = Field(min_length=1)
    approve: bool
    reason: str | None = None


class ItemReference(BaseModel):
    model_config = _ITEMS
    type: Literal["item_reference"] = "item_reference"
    id: ItemId


class CompactionItem(BaseModel):
    """A window's summary made by ``/responses/compact`` or ``context_management``: sealed
    (translate/sealing.py), opened by to_chat.py into a message for the model."""

    model_config = _ITEMS
    type: Literal["compaction"]
    id: ItemId | None = None
    encrypted_content: str = Field(max_length=10_485_760)


class CompactionTrigger(BaseModel):
    """OpenAI's "Compacts the current context. Must be the final input item."
    (translate/compaction_items.py, responses/fitting/fit.py)."""

    model_config = _ITEMS
    type: Literal["compaction_trigger"]
    id: ItemId | None = None


def _item_tag(value: Any) -> str | None:
    """Easy messages (``{"role", "content"}``) and bare ``{"id"}`` references have no type."""
    if isinstance(value, dict) and value.get("type") is None:
        if "role" in value:
            return "~message"
        return "~item_reference" if "id" in value else None
    return _by_type(value)


InputItem = Annotated[
    Union[  # noqa: UP007
        Annotated[Message, Tag("~message")],
        Annotated[FunctionCall, Tag("~function_call")],
        Annotated[FunctionCallOutput, Tag("~function_call_output")],
        Annotated[ReasoningItem, Tag("~reasoning")],
        Annotated[CustomToolCall, Tag("~custom_tool_call")],
        Annotated[CustomToolCallOutput, Tag("~custom_tool_call_output")],
        Annotated[McpListToolsItem, Tag("~mcp_list_tools")],
        Annotated[McpCallItem, Tag("~mcp_call")],
        Annotated[McpApprovalRequestItem, Tag("~mcp_approval_request")],
        Annotated[McpApprovalResponseItem, Tag("~mcp_approval_response")],
        Annotated[ItemReference, Tag("~item_reference")],
        Annotated[CompactionItem, Tag("~compaction")],
        Annotated[CompactionTrigger, Tag("~compaction_trigger")],
    ],
    Discriminator(_item_tag),
]

# --- tools and tool_choice -----------------------------------------------------------------


class FunctionTool(BaseModel):
    model_config = _PARAMS
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FormatGrammar(BaseModel):
    model_config = _PARAMS
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str


class FormatFreeText(BaseModel):
    model_config = _PARAMS
    type: Literal["text"]


class CustomTool(BaseModel):
    """Freeform input (tools/custom.py): offered to the model as a function of one string."""

    model_config = _PARAMS
    type: Literal["custom"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    description: str | None = None
    format: (
        Annotated[
            Union[  # noqa: UP007
                Annotated[FormatFreeText, Tag("~text")],
                Annotated[FormatGrammar, Tag("~grammar")],
            ],
            Discriminator(_by_type),
        ]
        | None
    ) = None


NamespaceMember = Annotated[
    Union[  # noqa: UP007
        Annotated[FunctionTool, Tag("~function")],
        Annotated[CustomTool, Tag("~custom")],
    ],
    Discriminator(_by_type),
]


class NamespaceTool(BaseModel):
    """Tools grouped under a name (the Codex CLI's sub-agent tools): flattened for the model,
    their calls reported with ``namespace`` (tools/catalog.py)."""

    model_config = _PARAMS
    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    description: str
    tools: list[NamespaceMember] = Field(min_length=1)


class McpToolFilter(BaseModel):
    model_config = _PARAMS
    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpApprovalFilter(BaseModel):
    model_config = _PARAMS
    always: McpToolFilter | None = None
    never: McpToolFilter | None = None


def _list_or_object(value: Any) -> str | None:
    return "~list" if isinstance(value, list) else "~filter" if isinstance(value, dict) else None


def _mode_or_object(value: Any) -> str | None:
    return "~mode" if isinstance(value, str) else "~filter" if isinstance(value, dict) else None


class McpTool(BaseModel):
    """A remote MCP server whose tools the gateway runs (tools/mcp.py)."""

    model_config = _PARAMS
    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    server_url: str | None = Field(default=None, max_length=2048)
    connector_id: str | None = None
    tunnel_id: str | None = None
    server_description: str | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    allowed_tools: (
        Annotated[
            Union[  # noqa: UP007
                Annotated[list[str], Tag("~list")],
                Annotated[McpToolFilter, Tag("~filter")],
            ],
            Discriminator(_list_or_object),
        ]
        | None
    ) = None
    require_approval: (
        Annotated[
            Union[  # noqa: UP007
                Annotated[Literal["always", "never"], Tag("~mode")],
                Annotated[McpApprovalFilter, Tag("~filter")],
            ],
            Discriminator(_mode_or_object),
        ]
        | None
    ) = None


class HostedTool(BaseModel):
    """A tool only OpenAI runs (tools/hosted.py): omitted or refused by GATEWAY_HOSTED_TOOLS."""

    model_config = ConfigDict(strict=True, extra="allow", defer_build=True)
    type: str


Tool = Annotated[
    Union[
        Annotated[FunctionTool, Tag("~function")],
        Annotated[CustomTool, Tag("~custom")],
        Annotated[NamespaceTool, Tag("~namespace")],
        Annotated[McpTool, Tag("~mcp")],
        *(Annotated[HostedTool, Tag(f"~{kind}")] for kind in sorted(HOSTED_TYPES)),
    ],
    Discriminator(_by_type),
]


class ToolChoiceFunction(BaseModel):
    model_config = _PARAMS
    type: Literal["function"]
    name: str


class ToolChoiceCustom(BaseModel):
    model_config = _PARAMS
    type: Literal["custom"]
    name: str


class ToolChoiceMcp(BaseModel):
    """Use a tool of one MCP server (``name``), or any of its tools (no ``name``)."""

    model_config = _PARAMS
    type: Literal["mcp"]
    server_label: str
    name: str | None = None


class ToolChoiceAllowed(BaseModel):
    model_config = _PARAMS
    type: Literal["allowed_tools"]
    mode: Literal["none", "auto", "required"] = "auto"
    tools: list[
        Annotated[
            Union[  # noqa: UP007
                Annotated[ToolChoiceFunction, Tag("~function")],
                Annotated[ToolChoiceCustom, Tag("~custom")],
            ],
            Discriminator(_by_type),
        ]
    ] = Field(min_length=1, max_length=128)


def _tool_choice_tag(value: Any) -> str | None:
    return "~mode" if isinstance(value, str) else _by_type(value)


ToolChoice = Annotated[
    Union[  # noqa: UP007
        Annotated[Literal["none", "auto", "required"], Tag("~mode")],
        Annotated[ToolChoiceFunction, Tag("~function")],
        Annotated[ToolChoiceCustom, Tag("~custom")],
        Annotated[ToolChoiceMcp, Tag("~mcp")],
        Annotated[ToolChoiceAllowed, Tag("~allowed_tools")],
    ],
    Discriminator(_tool_choice_tag),
]

# --- text, reasoning, stream options -------------------------------------------------------


class FormatText(BaseModel):
    model_config = _PARAMS
    type: Literal["text"]


class FormatJsonObject(BaseModel):
    model_config = _PARAMS
    type: Literal["json_object"]


class FormatJsonSchema(BaseModel):
    model_config = ConfigDict(
        strict=True, extra="ignore", populate_by_name=True, defer_build=True
    )
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


TextFormat = Annotated[
    Union[  # noqa: UP007
        Annotated[FormatText, Tag("~text")],
        Annotated[FormatJsonObject, Tag("~json_object")],
        Annotated[FormatJsonSchema, Tag("~json_schema")],
    ],
    Discriminator(_by_type),
]


class TextConfig(BaseModel):
    model_config = _PARAMS
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


SummaryMode = Literal["auto", "concise", "detailed"]


class ReasoningConfig(BaseModel):
    model_config = _PARAMS
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: SummaryMode | None = None
    generate_summary: SummaryMode | None = None  # deprecated spelling of ``summary``


class PromptCacheOptions(BaseModel):
    """``prompt_cache_options``: the implicit breakpoint on or off, the minimum TTL."""

    model_config = _PARAMS
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    prewarm: bool | None = None
    comparison_response_id: str | None = None


class StreamOptions(BaseModel):
    model_config = _PARAMS
    include_obfuscation: bool | None = None


Metadata = dict[str, Annotated[str, Field(max_length=512)]]


class ContextManagement(BaseModel):
    """``context_management`` entry: compact the window before the model runs once the
    rendered input passes ``compact_threshold`` tokens (compaction.py)."""

    model_config = _PARAMS
    type: Literal["compaction"]
    compact_threshold: int | None = Field(default=None, ge=1)

# --- the request ---------------------------------------------------------------------------


class CreateResponseRequest(BaseModel):
    """The create body, as attributes. ``None`` means "not sent" so upstream defaults apply."""

    model_config = _PARAMS

    model: str
    input: _str_or_parts(InputItem) | None = None
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    max_output_tokens: int | None = Field(default=None, ge=16)
    max_tool_calls: int | None = Field(default=None, ge=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    user: str | None = None
    safety_identifier: str | None = Field(default=None, max_length=128)
    prompt_cache_key: str | None = Field(default=None, max_length=64)
    prompt_cache_retention: Literal["in_memory", "in-memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    include: list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    store: bool = True
    background: bool = False
    previous_response_id: ItemId | None = None
    metadata: Metadata | None = Field(default=None, max_length=16)
    truncation: Literal["auto", "disabled"] | None = None
    context_management: list[ContextManagement] | None = None
    service_tier: (
        Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None
    ) = None
    conversation: Any = None
    prompt: Any = None

    @field_validator("store", "background", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        if value is None:
            return info.field_name == "store"
        return value

    @field_validator("include")
    @classmethod
    def _known_includes(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or ():
            if entry not in INCLUDABLE:
                supported = ", ".join(f"'{v}'" for v in sorted(INCLUDABLE))
                raise PydanticCustomError(
                    "invalid_value",
                    "Invalid value: '{value}'. Supported values are: {supported}.",
                    {"value": entry, "supported": supported},
                )
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key in value or ():
            if len(key) > 64:
                raise PydanticCustomError(
                    "string_above_max_length",
                    "Invalid 'metadata': keys must be at most 64 characters, but got a key "
                    "with length {length}.",
                    {"length": len(key)},
                )
        return value

    # -- what the rest of the gateway asks of a request --

    @property
    def streaming(self) -> bool:
        return bool(self.stream)

    @property
    def summary(self) -> str | None:
        """``reasoning.summary`` (or its deprecated spelling ``generate_summary``)."""
        if self.reasoning is None:
            return None
        return self.reasoning.summary or self.reasoning.generate_summary

    @property
    def effort(self) -> str | None:
        return self.reasoning.effort if self.reasoning else None

    @property
    def wants_logprobs(self) -> bool:
        return LOGPROBS in (self.include or ())

    @property
    def wants_encrypted_reasoning(self) -> bool:
        return ENCRYPTED_REASONING in (self.include or ())

    @property
    def function_tools(self) -> list[FunctionTool]:
        """The plain ``function`` tools (the ones whose names are their own chat names)."""
        return [tool for tool in self.tools or () if isinstance(tool, FunctionTool)]

    def tool_names(self) -> set[tuple[str, str]]:
        """(type, name) a ``tool_choice`` may name: functions, namespace members, custom."""
        names: set[tuple[str, str]] = set()
        for tool in self.tools or ():
            members = tool.tools if isinstance(tool, NamespaceTool) else (tool,)
            for member in members:
                if isinstance(member, (FunctionTool, CustomTool)):
                    names.add((member.type, member.name))
        return names

    def echo(self) -> dict[str, Any]:
        """The request fields a Response object repeats, with OpenAI's defaults filled in."""
        return {
            "model": self.model,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "parallel_tool_calls": (
                True if self.parallel_tool_calls is None else self.parallel_tool_calls
            ),
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": self.effort, "summary": self.summary},
            "service_tier": self.service_tier or "auto",
            "store": self.store,
            "background": self.background,
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "presence_penalty": self.presence_penalty or 0.0,
            "frequency_penalty": self.frequency_penalty or 0.0,
            "text": self._echo_text(),
            "tool_choice": self._echo_tool_choice(),
            "tools": [_echo_tool(tool) for tool in self.tools or () if _echoed(tool)],
            "top_logprobs": self.top_logprobs or 0,
            "truncation": self.truncation or "disabled",
            "user": self.user,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
            "prompt_cache_retention": self.prompt_cache_retention,
            "metadata": dict(self.metadata or {}),
        }

    def _echo_text(self) -> dict[str, Any]:
        text = self.text or TextConfig()
        fmt = text.format
        if isinstance(fmt, FormatJsonSchema):
            echoed: dict[str, Any] = {
                "type": "json_schema",
                "description": fmt.description,
                "name": fmt.name,
                "schema": fmt.schema_,
                "strict": bool(fmt.strict),
            }
        else:
            echoed = {"type": fmt.type if fmt else "text"}
        return {"format": echoed, "verbosity": text.verbosity or "medium"}

    def _echo_tool_choice(self) -> Any:
        choice = self.tool_choice
        if choice is None:
            return "auto"
        if isinstance(choice, str):
            return choice
        if isinstance(choice, (ToolChoiceFunction, ToolChoiceCustom)):
            return {"type": choice.type, "name": choice.name}
        if isinstance(choice, ToolChoiceMcp):
            return {"type": "mcp", "server_label": choice.server_label, "name": choice.name}
        return {
            "type": "allowed_tools",
            "mode": choice.mode,
            "tools": [{"type": t.type, "name": t.name} for t in choice.tools],
        }


def _echoed(tool: BaseModel) -> bool:
    """Hosted tools left out for the model are left out of the echo too: the response lists
    what the model was offered (tools/hosted.py)."""
    return not isinstance(tool, HostedTool)


def _echo_tool(tool: BaseModel) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        # Responses function tools are strict unless the client says otherwise (OpenAI
        # echoes true).
        return {
            "type": "function",
            "description": tool.description,
            "name": tool.name,
            "parameters": tool.parameters,
            "strict": True if tool.strict is None else tool.strict,
        }
    if isinstance(tool, CustomTool):
        echoed: dict[str, Any] = {"type": "custom", "name": tool.name}
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
    assert isinstance(tool, McpTool)
    # headers and authorization are secrets: never echoed, stored or logged (OpenAI leaves
    # them out of the response too).
    echoed = {
        name: getattr(tool, name)
        for name in McpTool.model_fields
        if name not in ("headers", "authorization", "connector_id", "tunnel_id")
    }
    for name in ("allowed_tools", "require_approval"):  # filters: plain dicts, as sent
        if isinstance(echoed[name], BaseModel):
            echoed[name] = echoed[name].model_dump()
    return echoed


def _echo_member(tool: BaseModel) -> dict[str, Any]:
    echoed = _echo_tool(tool)
    if isinstance(tool, FunctionTool) and tool.strict is None:
        echoed.pop("strict")  # namespace members echo what was sent (NamespaceTool's shape)
    return echoed


# --- parsing -------------------------------------------------------------------------------


def parse_create_request(body: Any, *, hosted_tools: str = "reject") -> CreateResponseRequest:
    """Validate a decoded create body; any problem is a 400 naming the param as OpenAI does.

    ``hosted_tools`` is GATEWAY_HOSTED_TOOLS (tools/hosted.py): ``reject`` refuses a hosted
    tool, ``omit`` keeps it out of what the model is offered and of the echoed ``tools``.
    """
    if not isinstance(body, dict):
        raise invalid_request(
            f"The request body must be a JSON object, but got {_kind(body)} instead.",
            code="invalid_type",
        )
    try:
        req = CreateResponseRequest.model_validate(body)
    except ValidationError as exc:
        raise _from_validation(exc) from None
    _check(req)
    if hosted_tools == "reject":
        for i, tool in enumerate(req.tools or ()):
            if isinstance(tool, HostedTool):
                raise refused(tool.type, i)
    return req


def normalize_input(req: CreateResponseRequest) -> list[dict[str, Any]]:
    """This turn's input as Responses input items, each with a ``type`` and an ``id``.

    These are stored and listed by ``GET /v1/responses/{id}/input_items``, so they take the
    shape OpenAI lists: message content always a parts array (a string becomes one
    ``input_text``, or ``output_text`` for the assistant), ``status`` ``completed`` unless
    given, image ``detail`` ``auto`` unless given. ``item_reference`` entries are kept as they
    are for the caller to resolve.
    """
    if req.input is None:
        return []
    if isinstance(req.input, str):
        return [_message_item("user", [{"type": "input_text", "text": req.input}])]
    return [_normalize_item(item) for item in req.input]


def _message_item(role: str, content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    item = {"id": ids.new_id(ids.MESSAGE), "type": "message", "role": role, "content": content}
    item["status"] = "completed"
    item.update(extra)
    return item


_ID_PREFIX = {
    "message": ids.MESSAGE,
    "function_call": ids.FUNCTION_CALL,
    "function_call_output": ids.FUNCTION_CALL_OUTPUT,
    "reasoning": ids.REASONING,
    "custom_tool_call": ids.CUSTOM_TOOL_CALL,
    "custom_tool_call_output": ids.CUSTOM_TOOL_CALL_OUTPUT,
    "mcp_list_tools": ids.MCP_LIST_TOOLS,
    "mcp_call": ids.MCP_CALL,
    "mcp_approval_request": ids.MCP_APPROVAL_REQUEST,
    "mcp_approval_response": ids.MCP_APPROVAL_RESPONSE,
    "compaction": ids.COMPACTION,
    "compaction_trigger": ids.COMPACTION,
}
_NO_STATUS = frozenset(
    {"reasoning", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response",
     "compaction", "compaction_trigger"}
)


def _normalize_item(item: BaseModel) -> dict[str, Any]:
    kind = item.type  # type: ignore[attr-defined]
    fields = item.model_dump(exclude_unset=True, by_alias=True)
    if kind == "item_reference":
        return {"type": kind, "id": fields["id"]}
    item_id = fields.pop("id", None) or ids.new_id(_ID_PREFIX[kind])
    data = {"id": item_id, "type": kind, **fields}
    if kind == "reasoning":
        data.setdefault("summary", [])
        return data
    if kind in _NO_STATUS:
        return data
    if data.get("status") is None:
        data["status"] = "completed"
    if kind == "message":
        content = data["content"]
        if isinstance(content, str):
            if data["role"] == "assistant":
                part = {"type": "output_text", "text": content, "annotations": []}
            else:
                part = {"type": "input_text", "text": content}
            data["content"] = [part]
        else:
            assistant = data["role"] == "assistant"
            data["content"] = [_normalize_part(p, assistant) for p in content]
    elif kind.endswith("_output") and isinstance(data["output"], list):
        data["output"] = [_normalize_part(p) for p in data["output"]]
    return data


def _normalize_part(part: dict[str, Any], assistant: bool = False) -> dict[str, Any]:
    if assistant and part["type"] == "input_text":
        part = {**part, "type": "output_text"}  # assistant messages list output_text parts
    if part["type"] == "input_image" and part.get("detail") is None:
        part["detail"] = "auto"
    elif part["type"] == "output_text" and part.get("annotations") is None:
        part["annotations"] = []
    return part


# --- checks pydantic cannot word the way OpenAI does ---------------------------------------

_PARTS_BY_ROLE = {
    "user": ("input_text", "input_image", "input_file"),
    "system": ("input_text",),
    "developer": ("input_text",),
    "assistant": ("output_text", "refusal", "input_text"),
}


def _check(req: CreateResponseRequest) -> None:
    if req.conversation is not None:
        _check_conversation(req)
    if req.prompt is not None:
        raise _unsupported(
            "prompt",
            "Prompt templates are not supported by this gateway; send 'instructions' and "
            "'input' instead.",
        )
    if req.background and not req.store:
        raise invalid_request(
            "Background responses must be stored: 'background' requires 'store' to be true.",
            param="background",
        )
    if req.stream_options is not None and not req.stream:
        raise invalid_request(
            "'stream_options' is only allowed when 'stream' is true.", param="stream_options"
        )
    _check_tool_choice(req)
    _check_mcp_tools(req)
    if isinstance(req.input, list):
        for i, item in enumerate(req.input):
            if isinstance(item, Message) and isinstance(item.content, list):
                allowed = _PARTS_BY_ROLE[item.role]
                for j, part in enumerate(item.content):
                    param = f"input[{i}].content[{j}]"
                    if part.type not in allowed:
                        raise invalid_request(
                            f"Invalid value: '{part.type}'. Messages with role '{item.role}' "
                            f"accept {_quoted(allowed)} content.",
                            param=f"{param}.type",
                            code="invalid_value",
                        )
                    _check_media(part, param)
            elif isinstance(item, (FunctionCallOutput, CustomToolCallOutput)) and isinstance(
                item.output, list
            ):
                for j, part in enumerate(item.output):
                    _check_media(part, f"input[{i}].output[{j}]")


CONVERSATION_PREFIX = "conv"


def _check_conversation(req: CreateResponseRequest) -> None:
    """``conversation``: an id or ``{"id": ...}``, never beside ``previous_response_id``."""
    value = req.conversation
    if isinstance(value, dict):
        if "id" not in value:
            raise missing_parameter("conversation.id")
        value = value["id"]
        param = "conversation.id"
    else:
        param = "conversation"
    if not isinstance(value, str):
        expected = "a string" if param.endswith(".id") else "one of a string or an object"
        raise _invalid_type(param, expected, value)
    if not value.startswith(CONVERSATION_PREFIX) or len(value) > MAX_ID_LENGTH:
        raise invalid_request(
            f"Invalid '{param}': {_show(value)}. Expected an ID that begins with "
            f"'{CONVERSATION_PREFIX}'.",
            param=param,
            code="invalid_value",
        )
    if req.previous_response_id is not None:
        raise invalid_request(
            "Mutually exclusive parameters. Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            code="mutually_exclusive_parameters",
        )
    req.conversation = value  # from here on, the id


def _check_media(part: BaseModel, param: str) -> None:
    """Uploaded files live in OpenAI's file store, which a chat backend cannot read."""
    if isinstance(part, InputImage):
        if part.image_url is None:
            if part.file_id is not None:
                raise _file_id(f"{param}.file_id", "image_url")
            raise missing_parameter(f"{param}.image_url")
    elif isinstance(part, InputFile) and part.file_data is None and part.file_url is None:
        if part.file_id is not None:
            raise _file_id(f"{param}.file_id", "file_data")
        raise missing_parameter(f"{param}.file_data")
    elif isinstance(part, InputFile) and part.file_url is not None and not _is_url(part.file_url):
        raise invalid_request(  # the value is not echoed: it may be megabytes of anything
            f"Invalid '{param}.file_url': expected a URL (http, https or data).",
            param=f"{param}.file_url", code="invalid_value")


def _is_url(value: str) -> bool:
    """An absolute URL: a scheme (a letter, then letters, digits, ``+-.``), a colon, more, and
    no space around it. Which schemes a backend can fetch is the backend's to say."""
    scheme, sep, rest = value.partition(":")
    return bool(sep and rest.strip() and scheme[:1].isalpha() and scheme.isascii()
                and all(c.isalnum() or c in "+-." for c in scheme) and value == value.strip())


def _check_mcp_tools(req: CreateResponseRequest) -> None:
    """OpenAI's connectors and tunnels live inside OpenAI; the gateway reaches a server URL
    (tools/mcp.py runs it; where it may connect is decided when it connects)."""
    labels: set[str] = set()
    for i, tool in enumerate(req.tools or ()):
        if not isinstance(tool, McpTool):
            continue
        for field_name in ("connector_id", "tunnel_id"):
            if getattr(tool, field_name) is not None:
                raise _unsupported(
                    f"tools[{i}].{field_name}",
                    f"'{field_name}' is not supported by this gateway (OpenAI's connectors and "
                    f"tunnels run inside OpenAI); give the MCP server's 'server_url' instead.",
                )
        if tool.server_url is None:
            raise missing_parameter(f"tools[{i}].server_url")
        if tool.server_label in labels:
            raise invalid_request(
                f"Duplicate MCP server_label '{tool.server_label}': each MCP tool needs its own "
                f"label.",
                param=f"tools[{i}].server_label",
                code="invalid_value",
            )
        labels.add(tool.server_label)
        _check_server_url(tool.server_url, f"tools[{i}].server_url")


def _check_server_url(url: str, param: str) -> None:
    """A ``server_url`` the gateway can use at all: http(s), a host DNS can carry. Whether
    it may connect there is decided when it connects (net/policy.py, net/pinned.py)."""
    from responses_gateway.net import pinned, policy  # loads only for MCP requests

    try:
        pinned.http_url(url)
    except pinned.BadUrl as exc:
        raise invalid_request(
            f"Invalid 'server_url': {policy.shown_url(url)!r} is not a usable URL ({exc}).",
            param=param, code="invalid_value",
        ) from None


def _check_tool_choice(req: CreateResponseRequest) -> None:
    choice = req.tool_choice
    names = req.tool_names()
    if choice in (None, "auto", "none"):
        return
    if not req.tools:
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
    if isinstance(choice, ToolChoiceMcp) and choice.server_label not in {
        tool.server_label for tool in req.tools if isinstance(tool, McpTool)
    }:
        raise invalid_request(
            f"Tool choice MCP server '{choice.server_label}' is not one of the MCP servers in "
            "'tools'.",
            param="tool_choice.server_label",
            code="invalid_value",
        )
    if isinstance(choice, ToolChoiceAllowed):
        for i, allowed in enumerate(choice.tools):
            if (allowed.type, allowed.name) not in names:
                raise invalid_request(
                    f"Allowed tool '{allowed.name}' is not one of the functions in 'tools'.",
                    param=f"tool_choice.tools[{i}].name",
                    code="invalid_value",
                )


def _unsupported(param: str, message: str) -> GatewayError:
    return invalid_request(message, param=param, code="unsupported_parameter")


def _file_id(param: str, instead: str) -> GatewayError:
    return invalid_request(
        f"'file_id' is not supported by this gateway (it refers to OpenAI's file storage); "
        f"send the content inline with '{instead}' instead.",
        param=param,
        code="unsupported_parameter",
    )


# --- pydantic errors -> OpenAI errors -------------------------------------------------------

_TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a decimal",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}
_BOUNDS = {
    "greater_than_equal": ("below minimum", "below_min", ">="),
    "greater_than": ("below minimum", "below_min", ">"),
    "less_than_equal": ("above maximum", "above_max", "<="),
    "less_than": ("above maximum", "above_max", "<"),
}
# The declared constraint each error type broke.
_LIMITS = {
    "greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt",
    "string_too_long": "max_length", "too_long": "max_length",
    "string_too_short": "min_length", "too_short": "min_length",
    "string_pattern_mismatch": "pattern",
}
_SUPPORTED_ITEMS = (
    "'message', 'function_call', 'function_call_output', 'custom_tool_call', "
    "'custom_tool_call_output', 'reasoning', 'mcp_list_tools', 'mcp_call', "
    "'mcp_approval_request', 'mcp_approval_response', 'item_reference', 'compaction', "
    "'compaction_trigger'"
)


def _from_validation(exc: ValidationError) -> GatewayError:
    """Pydantic's first error as OpenAI's 400. Only the error's public ``type``, ``loc`` and
    ``input`` are read; limits and allowed values come from our own declarations at ``loc``
    (:func:`_declared`), lengths from the input: pydantic's ``ctx`` differs between versions
    (2.14 stopped reporting a dict's length: "got None properties")."""
    error = exc.errors(include_url=False)[0]
    kind, loc, value = error["type"], error["loc"], error.get("input")
    param = _param(loc)
    if kind == "missing":
        return missing_parameter(param)
    if kind in _TYPE_NAMES or kind == "invalid_type":
        expected = _TYPE_NAMES.get(kind) or error["msg"]  # the message is ours (Discriminator)
        return _invalid_type(param, expected, value)
    if kind == "union_tag_not_found":
        if not isinstance(value, dict):
            return _invalid_type(param, "an object", value)
        return missing_parameter(f"{param}.type")
    if kind in ("invalid_value", "string_above_max_length"):  # our own PydanticCustomErrors
        return invalid_request(error["msg"], param=param, code=kind)
    if kind == "finite_number":
        return invalid_request(
            f"Invalid '{param}': expected a finite number.", param=param, code="invalid_value"
        )
    declared, constraints = _declared(loc)
    if kind == "union_tag_invalid":
        return _invalid_tag(param, loc, value, _tags(declared))
    if kind == "literal_error" and get_origin(declared) is Literal:
        return invalid_request(
            f"Invalid value: {_show(value)}. Supported values are: "
            f"{_one_of(get_args(declared))}.",
            param=param,
            code="invalid_value",
        )
    limit = _constraint(constraints, _LIMITS.get(kind, ""))
    if limit is None:
        return invalid_request(f"Invalid '{param}': {error['msg']}.", param=param)
    if kind in _BOUNDS:
        words, short, op = _BOUNDS[kind]
        number = "decimal" if isinstance(limit, float) else "integer"
        return invalid_request(
            f"Invalid '{param}': {number} {words} value. Expected a value {op} "
            f"{_num(limit)}, but got {_num(value)} instead.",
            param=param,
            code=f"{number}_{short}_value",
        )
    if kind in ("string_too_long", "string_too_short"):
        longer = kind == "string_too_long"
        return invalid_request(
            f"Invalid '{param}': string too {'long' if longer else 'short'}. Expected a string "
            f"with {'maximum' if longer else 'minimum'} length {limit}, but got a string with "
            f"length {len(value) if isinstance(value, str) else '?'} instead.",
            param=param,
            code=f"string_{'above_max' if longer else 'below_min'}_length",
        )
    if kind in ("too_long", "too_short"):
        longer = kind == "too_long"
        noun = "object" if isinstance(value, dict) else "array"
        unit = " properties" if noun == "object" else ""
        size = len(value) if isinstance(value, (dict, list)) else "?"
        return invalid_request(
            f"Invalid '{param}': {noun} too {'long' if longer else 'short'}. Expected an {noun} "
            f"with {'maximum' if longer else 'minimum'} length {limit}{unit}, but got "
            f"{size}{unit} instead.",
            param=param,
            code=f"{noun}_{'above_max' if longer else 'below_min'}_length",
        )
    return invalid_request(  # string_pattern_mismatch
        f"Invalid '{param}': string does not match pattern. Expected a string that matches "
        f"the pattern '{limit}'.",
        param=param,
        code="invalid_value",
    )


def _invalid_tag(param: str, loc: tuple[Any, ...], value: Any, tags: list[str]) -> GatewayError:
    tag = value.get("type") if isinstance(value, dict) else value
    type_param = f"{param}.type"
    if loc[0] == "tools" and len(loc) == 2:
        message = (
            f"Tool type '{tag}' is not supported by this gateway. Supported values are: "
            f"'function', 'custom', 'namespace', 'mcp' and OpenAI's hosted tools (left out for "
            f"the model, or refused, as GATEWAY_HOSTED_TOOLS says)."
        )
    elif loc[0] == "tool_choice" and len(loc) == 1:
        message = (
            f"Tool choice type '{tag}' is not supported by this gateway. Supported values "
            f"are: 'none', 'auto', 'required', a 'function' or 'allowed_tools'."
        )
    elif loc[0] == "input" and len(loc) == 3:
        message = (
            f"Input items of type '{tag}' are not supported by this gateway. Supported "
            f"values are: {_SUPPORTED_ITEMS}."
        )
    else:
        message = f"Invalid value: '{tag}'. Supported values are: {_quoted(tuple(tags))}."
    return invalid_request(message, param=type_param, code="invalid_value")


def _declared(loc: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """The type :class:`CreateResponseRequest` declares at an error's ``loc``, and the
    constraints declared on it (``annotated_types`` objects: ``MaxLen``, ``Ge``, ...; a
    ``pattern``); ``(None, [])`` where the path leaves the declarations."""
    declared, constraints = _unwrap(CreateResponseRequest, [])
    for seg in loc:
        if isinstance(declared, type) and issubclass(declared, BaseModel):
            field = declared.model_fields.get(seg) or next(
                (f for f in declared.model_fields.values() if f.alias == seg), None)
            if field is None:
                return None, []
            declared, constraints = _unwrap(field.annotation, list(field.metadata))
        elif isinstance(seg, str) and seg.startswith("~"):
            arm = next((a for a in get_args(declared) if seg in _tags_of(a)), None)
            if arm is None:
                return None, []
            declared, constraints = _unwrap(arm, [])
        elif get_origin(declared) is list and isinstance(seg, int):
            declared, constraints = _unwrap(get_args(declared)[0], [])
        elif get_origin(declared) is dict and isinstance(seg, str):
            declared, constraints = _unwrap(get_args(declared)[1], [])
        else:
            return None, []
    return declared, constraints


def _unwrap(declared: Any, constraints: list[Any]) -> tuple[Any, list[Any]]:
    """``declared`` without ``Annotated`` (its constraints collected) or an ``| None``."""
    while True:
        if get_origin(declared) is Annotated:
            declared, *extras = get_args(declared)
            for extra in extras:
                constraints.extend(extra.metadata if isinstance(extra, FieldInfo) else [extra])
        elif get_origin(declared) in (Union, UnionType) and type(None) in get_args(declared):
            arms = [arm for arm in get_args(declared) if arm is not type(None)]
            declared = arms[0] if len(arms) == 1 else Union[tuple(arms)]  # noqa: UP007
        else:
            return declared, constraints


def _tags_of(arm: Any) -> list[str]:
    extras = get_args(arm)[1:] if get_origin(arm) is Annotated else ()
    return [extra.tag for extra in extras if isinstance(extra, Tag)]


def _tags(union: Any) -> list[str]:
    """A tagged union's tags as a client writes them (no ``~``)."""
    return [tag.removeprefix("~") for arm in get_args(union) for tag in _tags_of(arm)]


def _constraint(constraints: list[Any], name: str) -> Any:
    """The declared value of one constraint (``max_length``, ``ge``, ``pattern``...)."""
    found = (getattr(c, name, None) for c in constraints)
    return next((value for value in found if value is not None), None)


def _invalid_type(param: str, expected: str, value: Any) -> GatewayError:
    return invalid_request(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _param(loc: tuple[Any, ...]) -> str:
    """``('input', '~list', 2, '~message', 'content')`` -> ``input[2].content``."""
    out = ""
    for seg in loc:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif not str(seg).startswith("~"):
            out += f".{seg}" if out else str(seg)
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _show(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else repr(value)


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _one_of(values: tuple[Any, ...]) -> str:
    """``'a', 'b' or 'c'``: a Literal's values as OpenAI's message lists them."""
    quoted = [f"'{v}'" for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"

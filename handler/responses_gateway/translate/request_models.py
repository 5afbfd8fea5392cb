"""The POST /v1/responses body: validated once, with OpenAI's limits and OpenAI's error shape.

Pydantic (strict, so ``"0.5"`` is not a temperature) checks structure and value limits; every
union is tagged with ``~``-prefixed tags so an error's location maps one-to-one onto OpenAI's
``param`` (``input[2].content[0].image_url``) by dropping the tags. Checks that span fields or
that OpenAI words specially (unsupported tools, ``file_id``, roles and content types) raise
:class:`GatewayError` directly after the structural pass. Unknown top-level fields are ignored
(forward compatibility); unknown keys inside items are kept so they survive into storage.

This module holds the request itself and its top-level options; its parts live beside it and
are re-exported here, so callers import from this one module:

- request_base.py: the model configs (validators built on the first create, not at import)
  and the tagged-union helpers;
- request_items.py: ``input``: content parts, input items, their normal form, their checks;
- request_tools.py: ``tools`` and ``tool_choice``: models, echo, checks, hosted tools;
- request_errors.py: pydantic's errors as OpenAI's 400s;
- request_names.py: the constants code outside validation needs (id length, ``include``).

Code that runs at an entry point's import calls request.py instead, which loads this module
on the first create: building these classes is most of a cold start.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from responses_gateway.errors import (
    GatewayError,
    invalid_request,
    invalid_type,
    kind_of,
    missing_parameter,
    shown,
)
from responses_gateway.translate.request_base import (
    NAME_PATTERN,
    PARAMS_CONFIG,
    ItemId,
    by_type,
    str_or_parts,
)
from responses_gateway.translate.request_errors import from_validation, unsupported
from responses_gateway.translate.request_items import check_input, normalize_items, validate_items
from responses_gateway.translate.request_names import (
    ENCRYPTED_REASONING,
    INCLUDABLE,
    LOGPROBS,
    MAX_ID_LENGTH,
)
from responses_gateway.translate.request_options import check_options, echo_options
from responses_gateway.translate.request_tools import (
    SERVED,
    CustomTool,
    FunctionTool,
    NamespaceTool,
    Tool,
    ToolChoice,
    ToolChoiceAllowed,
    ToolChoiceCustom,
    ToolChoiceFunction,
    check_server_tools,
    check_tool_choice,
    choosable_names,
    echo_tool_choice,
    echo_tools,
    refuse_hosted_tools,
)

__all__ = [  # what other modules import from here
    "ENCRYPTED_REASONING",
    "INCLUDABLE",
    "MAX_ID_LENGTH",
    "CreateResponseRequest",
    "CustomTool",
    "FormatJsonObject",
    "FormatJsonSchema",
    "FunctionTool",
    "NamespaceTool",
    "ToolChoiceAllowed",
    "ToolChoiceCustom",
    "ToolChoiceFunction",
    "normalize_input",
    "parse_create_request",
]


# --- text, reasoning, stream options -------------------------------------------------------


class FormatText(BaseModel):
    model_config = PARAMS_CONFIG
    type: Literal["text"]


class FormatJsonObject(BaseModel):
    model_config = PARAMS_CONFIG
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
    Discriminator(by_type),
]


class TextConfig(BaseModel):
    model_config = PARAMS_CONFIG
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


SummaryMode = Literal["auto", "concise", "detailed"]


class ReasoningConfig(BaseModel):
    model_config = PARAMS_CONFIG
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: SummaryMode | None = None
    generate_summary: SummaryMode | None = None  # deprecated spelling of ``summary``
    # Which earlier reasoning goes back to the model (translate/reasoning_context.py).
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    # The execution mode: any string to the SDK; only ``standard`` runs here (_check).
    mode: str | None = None


#: ``reasoning.mode`` the gateway runs: a backend model has one way of reasoning.
STANDARD_MODE = "standard"


class BackgroundOptions(BaseModel):
    """``background_options`` (openai-python 3.57): a completion window and a continuation id.

    A gateway has no discounted batch capacity: every window runs as soon as the worker takes
    the job (``soonest``); the window and the id are checked as OpenAI checks them and kept on
    the record. docs/background.md says so."""

    model_config = PARAMS_CONFIG
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None  # opaque; bounded by the body size only


class AccessPrograms(BaseModel):
    """``access_programs``: OpenAI's Cyber access programs (docs/compatibility.md)."""

    model_config = PARAMS_CONFIG
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class ImageOptions(BaseModel):
    """``image``: request-level image options; compression is OpenAI's own transport."""

    model_config = PARAMS_CONFIG
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class PromptCacheOptions(BaseModel):
    """``prompt_cache_options``: the implicit breakpoint on or off, the minimum TTL."""

    model_config = PARAMS_CONFIG
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    prewarm: bool | None = None
    comparison_response_id: str | None = None


class StreamOptions(BaseModel):
    model_config = PARAMS_CONFIG
    include_obfuscation: bool | None = None


Metadata = dict[str, Annotated[str, Field(max_length=512)]]


class ContextManagement(BaseModel):
    """``context_management`` entry: compact the window before the model runs once the
    rendered input passes ``compact_threshold`` tokens (compaction.py)."""

    model_config = PARAMS_CONFIG
    type: Literal["compaction"]
    compact_threshold: int | None = Field(default=None, ge=1)


#: Where CreateResponseRequest._items leaves an input item's 400, and its pydantic error type.
_ITEM_ERROR = "input_item"


# --- the request ---------------------------------------------------------------------------


class CreateResponseRequest(BaseModel):
    """The create body, as attributes. ``None`` means "not sent" so upstream defaults apply."""

    model_config = PARAMS_CONFIG

    model: str
    input: str_or_parts(Any) | None = None  # the items: _items
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
    background_options: BackgroundOptions | None = None
    access_programs: AccessPrograms | None = None
    image: ImageOptions | None = None
    moderation: Any = None

    @field_validator("store", "background", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        if value is None:
            return info.field_name == "store"
        return value

    @field_validator("input")
    @classmethod
    def _items(cls, value: Any, info: ValidationInfo) -> Any:
        """Each item by its own type's model (request_items.validate_items): the validators
        of types a request does not send are never built. Its 400 waits in the context
        until pydantic has checked the fields before ``input``, whose errors come first."""
        if not isinstance(value, list):
            return value
        try:
            return validate_items(value, info.context)
        except GatewayError as exc:
            if isinstance(info.context, dict):
                info.context[_ITEM_ERROR] = exc
                raise PydanticCustomError(_ITEM_ERROR, "an invalid input item") from None
            raise

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
    def prewarm(self) -> bool:
        """``prompt_cache_options.prewarm``: warm the prompt cache, generate nothing."""
        return bool(self.prompt_cache_options and self.prompt_cache_options.prewarm)

    @property
    def reasoning_context(self) -> str | None:
        """``reasoning.context`` as sent (``None``: omitted, the same as ``auto``)."""
        return self.reasoning.context if self.reasoning else None

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
        return choosable_names(self.tools)

    def echo(self, reasoning_input: str | None = None) -> dict[str, Any]:
        """The request fields a Response object repeats, with OpenAI's defaults filled in.
        ``reasoning_input``: how the backend takes reasoning back, which resolves an ``auto``
        ``reasoning.context`` (translate/reasoning_context.py)."""
        return {
            "model": self.model,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "parallel_tool_calls": (
                True if self.parallel_tool_calls is None else self.parallel_tool_calls
            ),
            "previous_response_id": self.previous_response_id,
            "reasoning": self._echo_reasoning(reasoning_input),
            "service_tier": self.service_tier or "auto",
            "store": self.store,
            "background": self.background,
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "presence_penalty": self.presence_penalty or 0.0,
            "frequency_penalty": self.frequency_penalty or 0.0,
            "text": self._echo_text(),
            "tool_choice": echo_tool_choice(self.tool_choice),
            "tools": echo_tools(self.tools),
            "top_logprobs": self.top_logprobs or 0,
            "truncation": self.truncation or "disabled",
            "user": self.user,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
            "prompt_cache_retention": self.prompt_cache_retention,
            **self._echo_cache_options(),
            "metadata": dict(self.metadata or {}),
            **echo_options(self),
        }

    def _echo_cache_options(self) -> dict[str, Any]:
        """``prompt_cache_options`` as applied (OpenAI's defaults: ``implicit``, ``30m``),
        when the request set it."""
        options = self.prompt_cache_options
        if options is None:
            return {}
        echoed: dict[str, Any] = {"mode": options.mode or "implicit", "ttl": options.ttl or "30m"}
        if options.comparison_response_id is not None:
            echoed["comparison_response_id"] = options.comparison_response_id
        return {"prompt_cache_options": echoed}

    def _echo_reasoning(self, reasoning_input: str | None) -> dict[str, Any]:
        """``effort`` and ``summary`` always (OpenAI's recorded echo); ``context`` (``auto``
        resolved to what was done) and ``mode`` when the client sent them."""
        from responses_gateway.translate.reasoning_context import effective

        echoed: dict[str, Any] = {"effort": self.effort, "summary": self.summary}
        if self.reasoning is not None and self.reasoning.context is not None:
            echoed["context"] = effective(self.reasoning.context, reasoning_input)
        if self.reasoning is not None and self.reasoning.mode is not None:
            echoed["mode"] = STANDARD_MODE
        return echoed

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


# --- parsing -------------------------------------------------------------------------------


def parse_create_request(
    body: Any, *, hosted_tools: str = "reject", served: Collection[str] = ()
) -> CreateResponseRequest:
    """Validate a decoded create body; any problem is a 400 naming the param as OpenAI does.

    ``hosted_tools`` is GATEWAY_HOSTED_TOOLS (tools/hosted.py): ``reject`` refuses a hosted
    tool, ``omit`` keeps it out of what the model is offered and of the echoed ``tools``.
    ``served``: the hosted tool types the gateway runs itself (tools/registry.py), neither.
    """
    if not isinstance(body, dict):
        raise invalid_request(
            f"The request body must be a JSON object, but got {kind_of(body)} instead.",
            code="invalid_type",
        )
    context: dict[str, Any] = {SERVED: frozenset(served)}
    try:
        req = CreateResponseRequest.model_validate(body, context=context)
    except ValidationError as exc:
        if exc.errors(include_url=False)[0]["type"] == _ITEM_ERROR:
            raise context[_ITEM_ERROR] from None
        raise _from_validation(exc) from None
    _check(req)
    if hosted_tools == "reject":
        refuse_hosted_tools(req.tools)
    return req


def normalize_input(req: CreateResponseRequest) -> list[dict[str, Any]]:
    """This turn's input as Responses input items, each with a ``type`` and an ``id``
    (request_items.py: the shape OpenAI stores and lists them in)."""
    return normalize_items(req.input)


def _from_validation(exc: ValidationError) -> GatewayError:
    """Pydantic's first error about a create body as OpenAI's 400 (request_errors.py)."""
    return from_validation(exc, CreateResponseRequest)


# --- checks pydantic cannot word the way OpenAI does ---------------------------------------


def _check(req: CreateResponseRequest) -> None:
    if req.conversation is not None:
        _check_conversation(req)
    if req.prompt is not None:
        raise unsupported(
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
    check_options(req)
    check_tool_choice(req.tool_choice, req.tools)
    check_server_tools(req.tools)
    if isinstance(req.input, list):
        check_input(req.input)


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
        raise invalid_type(param, expected, value)
    if not value.startswith(CONVERSATION_PREFIX) or len(value) > MAX_ID_LENGTH:
        raise invalid_request(
            f"Invalid '{param}': {shown(value)}. Expected an ID that begins with "
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

"""The create body's ``input``: content parts, input items, and what OpenAI stores of them.

:func:`validate_items` checks each input item with its own type's model (:func:`item_model`),
so a create builds the validators of the types it sends only; untyped easy messages
(``{"role", "content"}``) and bare ``{"id"}`` references are told apart by their keys.
:func:`normalize_items` gives the items the shape OpenAI lists them in;
:func:`check_input` refuses what pydantic cannot word the way OpenAI does (a content type a
role does not take, ``file_id``, a ``file_url`` that is not a URL).
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
)

from responses_gateway import ids
from responses_gateway.errors import (
    GatewayError,
    invalid_request,
    invalid_type,
    missing_parameter,
)
from responses_gateway.tools import registry
from responses_gateway.translate.request_base import (
    ITEM_CONFIG,
    ItemId,
    Status,
    by_type,
    str_or_parts,
)
from responses_gateway.translate.request_errors import (
    from_validation,
    quoted,
    unknown_item_type,
)

# --- content parts -------------------------------------------------------------------------


class PromptCacheBreakpoint(BaseModel):
    """A part's ``prompt_cache_breakpoint``: the end of a reusable prefix (docs/routing.md);
    without ``ttl`` it has the request's ``prompt_cache_options.ttl``."""

    model_config = ITEM_CONFIG
    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class InputText(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["input_text"]
    text: str
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputImage(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputFile(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["input_file"]
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None
    filename: str | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class OutputText(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class Refusal(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["refusal"]
    refusal: str


InputPart = Annotated[
    Union[  # noqa: UP007
        Annotated[InputText, Tag("~input_text")],
        Annotated[InputImage, Tag("~input_image")],
        Annotated[InputFile, Tag("~input_file")],
    ],
    Discriminator(by_type),
]
MessagePart = Annotated[
    Union[  # noqa: UP007
        Annotated[InputText, Tag("~input_text")],
        Annotated[InputImage, Tag("~input_image")],
        Annotated[InputFile, Tag("~input_file")],
        Annotated[OutputText, Tag("~output_text")],
        Annotated[Refusal, Tag("~refusal")],
    ],
    Discriminator(by_type),
]


class SummaryText(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["summary_text"]
    text: str


class ReasoningText(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["reasoning_text"]
    text: str


# --- input items ---------------------------------------------------------------------------


class Message(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["message"] = "message"
    id: ItemId | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: str_or_parts(MessagePart)
    status: Status | None = None


class FunctionCall(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["function_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None
    status: Status | None = None


class FunctionCallOutput(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["function_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    output: str_or_parts(InputPart)
    status: Status | None = None


class ReasoningItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["reasoning"]
    id: ItemId | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Status | None = None


class CustomToolCall(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["custom_tool_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None
    status: Status | None = None


class CustomToolCallOutput(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["custom_tool_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    output: str_or_parts(InputPart)
    status: Status | None = None




class ItemReference(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["item_reference"] = "item_reference"
    id: ItemId


class CompactionItem(BaseModel):
    """A window's summary made by ``/responses/compact`` or ``context_management``: sealed
    (translate/sealing.py), opened by to_chat.py into a message for the model."""

    model_config = ITEM_CONFIG
    type: Literal["compaction"]
    id: ItemId | None = None
    encrypted_content: str = Field(max_length=10_485_760)


class CompactionTrigger(BaseModel):
    """OpenAI's "Compacts the current context. Must be the final input item."
    (translate/compaction_items.py, decided in responses/fitting/fit.py)."""

    model_config = ITEM_CONFIG
    type: Literal["compaction_trigger"]
    id: ItemId | None = None


_UPDATE_CONFIG = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, defer_build=True)


class UpdateReasoning(BaseModel):
    """``configuration_update.reasoning``: "Only effort is supported." (openai-python 3.57)."""

    model_config = _UPDATE_CONFIG
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None


class UpdateFormatText(BaseModel):
    model_config = _UPDATE_CONFIG
    type: Literal["text"]


class UpdateFormatJsonSchema(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True,
                              defer_build=True)
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


def _format_tag(value: Any) -> str | None:
    """:func:`by_type`, for validation (a dict) and for the dump (the model) alike."""
    kind = getattr(value, "type", None)
    return f"~{kind}" if isinstance(kind, str) else by_type(value)


class UpdateText(BaseModel):
    """``configuration_update.text``: a format, plain text or a JSON schema (no json_object)."""

    model_config = _UPDATE_CONFIG
    format: Annotated[
        Union[  # noqa: UP007
            Annotated[UpdateFormatText, Tag("~text")],
            Annotated[UpdateFormatJsonSchema, Tag("~json_schema")],
        ],
        Discriminator(_format_tag),
    ]


class ConfigurationUpdate(BaseModel):
    """A ``configuration_update`` input item: the reasoning effort and text format of the
    responses from here on, until a later update replaces a setting
    (responses/configuration.py applies the newest)."""

    model_config = _UPDATE_CONFIG
    type: Literal["configuration_update"]
    id: ItemId | None = None
    reasoning: UpdateReasoning | None = None
    text: UpdateText | None = None


def _item_tag(value: Any) -> str | None:
    """Easy messages (``{"role", "content"}``) and bare ``{"id"}`` references have no type."""
    if isinstance(value, dict) and value.get("type") is None:
        if "role" in value:
            return "~message"
        return "~item_reference" if "id" in value else None
    return by_type(value)


class ServerToolItem(BaseModel):
    """A server tool's call item sent back as input: kept as sent (its tool reads it when
    the conversation goes back to the model)."""

    model_config = ConfigDict(strict=True, extra="allow", defer_build=True)
    type: str
    id: ItemId | None = None


def _server_item_model(item: registry.ItemType) -> type[BaseModel]:
    """The model of a server tool's item sent back as input (tools/declaration.py): its
    package's fields, strict, ``id`` an item id; :class:`ServerToolItem` when it declares none."""
    if item.input_fields is None:
        return ServerToolItem
    module, _, name = item.input_fields.partition(":")
    fields: dict[str, Any] = getattr(importlib.import_module(module), name)
    model_name = "".join(word.title() for word in item.type.split("_")) + "Item"
    return create_model(  # type: ignore[call-overload, no-any-return]
        model_name, __config__=ITEM_CONFIG, type=(Literal[item.type], ...),
        id=(ItemId, ...) if item.id_required else (ItemId | None, None), **fields)


#: The item types a create body may send, by tag; the models of client-run tools' items
#: (request_client_items.py) and of server tools' (:func:`_server_item_model`) are made when
#: a request first sends one.
ITEM_MODELS: dict[str, type[BaseModel]] = {
    "~message": Message,
    "~function_call": FunctionCall,
    "~function_call_output": FunctionCallOutput,
    "~reasoning": ReasoningItem,
    "~custom_tool_call": CustomToolCall,
    "~custom_tool_call_output": CustomToolCallOutput,
    "~item_reference": ItemReference,
    "~compaction": CompactionItem,
    "~compaction_trigger": CompactionTrigger,
    "~configuration_update": ConfigurationUpdate,
}
#: The client-run tools' item types (the models: request_client_items.py).
CLIENT_ITEM_TYPES = frozenset({
    "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
    "local_shell_call", "local_shell_call_output", "computer_call", "computer_call_output",
    "tool_search_call", "tool_search_output",
})


def item_model(tag: str) -> type[BaseModel] | None:
    """The model of the item type ``tag`` (``~message``...); ``None``: not one a create takes."""
    model = ITEM_MODELS.get(tag)
    if model is None:
        kind = tag[1:]
        if kind in CLIENT_ITEM_TYPES:
            from responses_gateway.translate.request_client_items import BY_TYPE

            model = BY_TYPE[kind]
        elif kind in registry.ITEMS:
            model = _server_item_model(registry.ITEMS[kind])
        else:
            return None
        ITEM_MODELS[tag] = model
    return model


def validate_items(items: list[Any], context: dict[str, Any] | None) -> list[BaseModel]:
    """``input``'s items, each by its own type's model (:func:`item_model`): what one tagged
    union of every type would do, but building only the validators of the types a request
    sends (that union was most of the first create's validator building). Errors are
    OpenAI's 400s, worded as the union's were."""
    validated = []
    validators: dict[str | None, Any] = {}  # by tag, for this request's items
    for index, item in enumerate(items):
        tag = _item_tag(item)
        validate = validators.get(tag)
        if validate is None:
            model = None if tag is None else item_model(tag)
            if model is None:
                if tag is not None:
                    raise unknown_item_type(index, item)
                if not isinstance(item, dict):
                    raise invalid_type(f"input[{index}]", "an object", item)
                raise missing_parameter(f"input[{index}].type")
            # the class's own validator (built on first use), without model_validate's wrapper
            validate = validators[tag] = model.__pydantic_validator__.validate_python
        try:
            validated.append(validate(item, context=context))
        except ValidationError as exc:
            model = item_model(tag)  # type: ignore[arg-type]
            raise from_validation(exc, model, ("input", "~list", index, tag)) from None  # type: ignore[arg-type]
    return validated


# --- what OpenAI stores and lists ----------------------------------------------------------


def normalize_items(value: str | list[BaseModel] | None) -> list[dict[str, Any]]:
    """``input`` as Responses input items, each with a ``type`` and an ``id``.

    These are stored and listed by ``GET /v1/responses/{id}/input_items``, so they take the
    shape OpenAI lists: message content always a parts array (a string becomes one
    ``input_text``, or ``output_text`` for the assistant), ``status`` ``completed`` unless
    given, image ``detail`` ``auto`` unless given. ``item_reference`` entries are kept as they
    are for the caller to resolve.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [_message_item("user", [{"type": "input_text", "text": value}])]
    return [_normalize_item(item) for item in value]


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
    "compaction": ids.COMPACTION,
    "compaction_trigger": ids.COMPACTION,
    "configuration_update": ids.CONFIGURATION_UPDATE,
    **{kind: item.id_prefix for kind, item in registry.ITEMS.items()},
    "shell_call": ids.SHELL_CALL,
    "shell_call_output": ids.SHELL_CALL_OUTPUT,
    "apply_patch_call": ids.APPLY_PATCH_CALL,
    "apply_patch_call_output": ids.APPLY_PATCH_CALL_OUTPUT,
    "local_shell_call": ids.LOCAL_SHELL_CALL,
    "local_shell_call_output": ids.LOCAL_SHELL_CALL_OUTPUT,
    "computer_call": ids.COMPUTER_CALL,
    "computer_call_output": ids.COMPUTER_CALL_OUTPUT,
    "tool_search_call": ids.TOOL_SEARCH_CALL,
    "tool_search_output": ids.TOOL_SEARCH_OUTPUT,
}
_NO_STATUS = frozenset(
    {"reasoning", "compaction", "compaction_trigger", "configuration_update",
     *(kind for kind, item in registry.ITEMS.items() if not item.has_status)}
)


_PART_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


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
    elif kind in _PART_OUTPUTS and isinstance(data["output"], list):
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


def check_input(items: list[BaseModel]) -> None:
    """Each message's content types against its role, and each part's media."""
    for i, item in enumerate(items):
        if isinstance(item, Message) and isinstance(item.content, list):
            allowed = _PARTS_BY_ROLE[item.role]
            for j, part in enumerate(item.content):
                param = f"input[{i}].content[{j}]"
                if part.type not in allowed:
                    raise invalid_request(
                        f"Invalid value: '{part.type}'. Messages with role '{item.role}' "
                        f"accept {quoted(allowed)} content.",
                        param=f"{param}.type",
                        code="invalid_value",
                    )
                _check_media(part, param)
        elif isinstance(item, (FunctionCallOutput, CustomToolCallOutput)) and isinstance(
            item.output, list
        ):
            for j, part in enumerate(item.output):
                _check_media(part, f"input[{i}].output[{j}]")


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


def _file_id(param: str, instead: str) -> GatewayError:
    return invalid_request(
        f"'file_id' is not supported by this gateway (it refers to OpenAI's file storage); "
        f"send the content inline with '{instead}' instead.",
        param=param,
        code="unsupported_parameter",
    )

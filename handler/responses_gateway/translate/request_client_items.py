"""Input items of the tools the client runs (tools/client_tools.py), as openai-python types
them: shell, apply_patch, local_shell, computer and tool_search calls and their outputs.

A module of their own so that a create that sends none of them never builds these classes
(request_items.validate_items imports it when one is sent; building item classes is part of
a fresh process's first create, benchmarks/cold_start.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from responses_gateway.translate.request_base import ITEM_CONFIG, ItemId, Status


class ShellAction(BaseModel):
    model_config = ITEM_CONFIG
    commands: list[str]
    timeout_ms: int | None = None
    max_output_length: int | None = None


class ShellCallItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["shell_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    action: ShellAction
    status: Status | None = None


class ShellOutputChunk(BaseModel):
    model_config = ITEM_CONFIG
    stdout: str
    stderr: str
    outcome: dict[str, Any]


class ShellCallOutputItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["shell_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    output: list[ShellOutputChunk]
    max_output_length: int | None = None
    status: Status | None = None


class PatchOperation(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["create_file", "update_file", "delete_file"]
    path: str
    diff: str | None = None


class ApplyPatchCallItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["apply_patch_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    operation: PatchOperation
    status: Literal["in_progress", "completed"] | None = None


class ApplyPatchCallOutputItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["apply_patch_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    status: Literal["completed", "failed"]
    output: str | None = None


class ExecAction(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["exec"]
    command: list[str]
    env: dict[str, str]
    timeout_ms: int | None = None
    user: str | None = None
    working_directory: str | None = None


class LocalShellCallItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["local_shell_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    action: ExecAction
    status: Status | None = None


class LocalShellCallOutputItem(BaseModel):
    """openai-python: ``id`` is the call's ``call_id``; the Agents SDK sends ``call_id``."""

    model_config = ITEM_CONFIG
    type: Literal["local_shell_call_output"]
    id: ItemId | None = None
    call_id: str | None = None
    output: str
    status: Status | None = None


class ComputerCallItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["computer_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    action: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = None
    pending_safety_checks: list[dict[str, Any]] = Field(default_factory=list)
    status: Status | None = None


class ComputerScreenshot(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["computer_screenshot"]
    image_url: str | None = None
    file_id: str | None = None


class ComputerCallOutputItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["computer_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1)
    output: ComputerScreenshot
    acknowledged_safety_checks: list[dict[str, Any]] | None = None
    status: Literal["in_progress", "completed", "incomplete", "failed"] | None = None


class ToolSearchCallItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["tool_search_call"]
    id: ItemId | None = None
    call_id: str | None = None
    arguments: Any
    execution: Literal["server", "client"] | None = None
    status: Status | None = None


class ToolSearchOutputItem(BaseModel):
    model_config = ITEM_CONFIG
    type: Literal["tool_search_output"]
    id: ItemId | None = None
    call_id: str | None = None
    tools: list[dict[str, Any]]
    execution: Literal["server", "client"] | None = None
    status: Status | None = None


CLIENT_ITEMS: tuple[type[BaseModel], ...] = (
    ShellCallItem, ShellCallOutputItem, ApplyPatchCallItem, ApplyPatchCallOutputItem,
    LocalShellCallItem, LocalShellCallOutputItem, ComputerCallItem, ComputerCallOutputItem,
    ToolSearchCallItem, ToolSearchOutputItem,
)

#: By type.
BY_TYPE: dict[str, type[BaseModel]] = {
    model.model_fields["type"].annotation.__args__[0]: model  # type: ignore[union-attr]
    for model in CLIENT_ITEMS
}

"""Hosted shell's items and events, as OpenAI streams a shell call it runs itself.

One call is two items: the ``shell_call`` (the model's commands, ``environment`` naming the
container) and its ``shell_call_output`` (one entry per command: ``stdout``, ``stderr`` and
``outcome``, ``exit`` with its code or ``timeout``). Their events, in order:

- ``response.output_item.added`` (the ``shell_call``, ``in_progress``, no commands yet), then
  for each command ``response.shell_call_command.added`` / ``.delta`` / ``.done`` (these carry
  no ``item_id``, as OpenAI's and the client shell's do: translate/stream_calls.py), then
  ``response.output_item.done`` (``completed``);
- ``response.output_item.added`` (the ``shell_call_output``, ``in_progress``, no output),
  sent before the commands run; once they ran, for each command
  ``response.shell_call_output_content.delta`` (its ``stdout`` / ``stderr``) and
  ``response.shell_call_output_content.done`` (its entry), then
  ``response.output_item.done`` (``completed``).

Each command's output is bounded twice: by the engine (``GATEWAY_CODE_MAX_OUTPUT_BYTES``,
the rest counted and dropped) and by the call's ``max_output_length``, characters of stdout
and stderr together (stdout first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from responses_gateway import ids
from responses_gateway.containers.engine import CommandResult
from responses_gateway.tools.server import Event, ItemWriter

CALL, OUTPUT = "shell_call", "shell_call_output"
COMMAND = "response.shell_call_command"
CONTENT = "response.shell_call_output_content"


def open_call(items: ItemWriter, call_id: str, action: dict[str, Any], status: str,
              container_id: str | None) -> list[Event]:
    """The ``shell_call`` item, its commands streamed, closed with ``status``."""
    item: dict[str, Any] = {
        "id": ids.new_id(ids.SHELL_CALL), "type": CALL, "call_id": call_id,
        "action": {**action, "commands": []}, "status": "in_progress",
        "environment": (None if container_id is None else
                        {"type": "container_reference", "container_id": container_id}),
    }
    events = items.start_tool_item(item, None)
    for index, command in enumerate(action["commands"]):
        item["action"]["commands"].append(command)
        events.append(_command_event(items, "added", index, command=""))
        if command:
            events.append(_command_event(items, "delta", index, delta=command))
        events.append(_command_event(items, "done", index, command=command))
    return events + items.end_tool_item(status, None)


def _command_event(items: ItemWriter, kind: str, index: int, **fields: Any) -> Event:
    event = items.tool_item_event(f"{COMMAND}.{kind}", command_index=index, **fields)
    event.pop("item_id", None)  # OpenAI's command events name the item by output_index only
    return event


def open_output(items: ItemWriter, call_id: str, max_output_length: int | None) -> list[Event]:
    """The ``shell_call_output`` item, opened before the commands run."""
    return items.start_tool_item(
        {"id": ids.new_id(ids.SHELL_CALL_OUTPUT), "type": OUTPUT, "call_id": call_id,
         "output": [], "max_output_length": max_output_length, "status": "in_progress"},
        None)


def close_output(items: ItemWriter, chunks: Sequence[dict[str, Any]],
                 status: str = "completed") -> list[Event]:
    """Each command's output (its delta, then its entry), then the item closed."""
    item = items.tool_item
    assert item is not None
    events: list[Event] = []
    for index, chunk in enumerate(chunks):
        item["output"].append(chunk)
        delta = {k: chunk[k] for k in ("stdout", "stderr") if chunk[k]}
        if delta:
            events.append(items.tool_item_event(f"{CONTENT}.delta", command_index=index,
                                                delta=delta))
        events.append(items.tool_item_event(f"{CONTENT}.done", command_index=index,
                                            output=[dict(chunk)]))
    return events + items.end_tool_item(status, None)


def chunk_of(result: CommandResult, max_length: int | None) -> dict[str, Any]:
    """One command's entry: its output cut to ``max_length`` characters (stdout first)."""
    stdout, stderr = result.stdout, result.stderr
    if max_length is not None:
        limit = max(0, max_length)
        stdout = stdout[:limit]
        stderr = stderr[:max(0, limit - len(stdout))]
    outcome: dict[str, Any] = (
        {"type": "timeout"} if result.timed_out or result.exit_code is None
        else {"type": "exit", "exit_code": result.exit_code})
    return {"stdout": stdout, "stderr": stderr, "outcome": outcome}


def failed_chunk(reason: str) -> dict[str, Any]:
    """The entry of commands that could not run at all (no container, the engine failed):
    the model reads why; exit code 126, the shell's "cannot execute"."""
    return {"stdout": "", "stderr": reason, "outcome": {"type": "exit", "exit_code": 126}}

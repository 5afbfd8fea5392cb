"""Tools the client runs: ``shell``, ``apply_patch``, ``local_shell``, ``computer`` (and
``computer_use_preview``) and ``tool_search`` with ``execution: "client"``.

In OpenAI's API the model answers such a tool with a typed call item (``shell_call``, ...); the
client runs it on its own machine and sends the matching output item back (``shell_call_output``,
...). A chat model has only functions, so each is offered as a function whose parameters mirror
the call item's fields (:data:`CLIENT_TOOLS`, the table docs/tools.md renders); the call comes
back as the typed item (translate/stream_calls.py) and the output item goes back to the model as
the tool's result (translate/to_chat.py). Field shapes follow openai-python's types.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.json_depth import fits_depth
from responses_gateway.records import Value
from responses_gateway.tools import registry

_INT = {"type": "integer"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_KEYS = {**_STRINGS, "description": "Keys held down during the action (e.g. [\"CTRL\"])."}

_SHELL = {
    "type": "object",
    "properties": {
        "action": {
            "type": "object",
            "properties": {
                "commands": {**_STRINGS, "description": "Shell commands to run; they may run "
                             "concurrently, so join dependent steps with && in one command."},
                "timeout_ms": {**_INT, "description": "Optional timeout per command, in ms."},
                "max_output_length": {**_INT, "description": "Optional number of characters "
                                      "kept from each command's output."},
            },
            "required": ["commands"],
        },
    },
    "required": ["action"],
}
_PATH = {"type": "string", "description": "The file's path in the workspace."}
#: One branch per kind of operation (``anyOf``, which OpenAI's strict mode, Bedrock's
#: Converse and the open servers' grammar engines all take): create_file and update_file
#: need their ``diff`` (openai-python's types and the Agents SDK's ApplyPatchTool require
#: it), delete_file has none.
_APPLY_PATCH = {
    "type": "object",
    "properties": {
        "operation": {"anyOf": [
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["create_file", "update_file"]},
                    "path": _PATH,
                    "diff": {"type": "string", "description": "The V4A diff."},
                },
                "required": ["type", "path", "diff"],
            },
            {
                "type": "object",
                "properties": {"type": {"type": "string", "enum": ["delete_file"]},
                               "path": _PATH},
                "required": ["type", "path"],
            },
        ]},
    },
    "required": ["operation"],
}
_LOCAL_SHELL = {
    "type": "object",
    "properties": {
        "action": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["exec"]},
                "command": {**_STRINGS, "description": "The command's argv, e.g. "
                            "[\"bash\", \"-lc\", \"ls -la\"]."},
                "env": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Environment variables to set."},
                "working_directory": {"type": "string"},
                "timeout_ms": _INT,
                "user": {"type": "string"},
            },
            "required": ["type", "command"],
        },
    },
    "required": ["action"],
}
ACTION_TYPES = ("click", "double_click", "drag", "keypress", "move", "screenshot", "scroll",
                "type", "wait")
_ACTION = {
    "type": "object",
    "description": "One action: click (x, y, button), double_click (x, y), drag (path), "
                   "keypress (keys), move (x, y), scroll (x, y, scroll_x, scroll_y), type (text), "
                   "wait, screenshot.",
    "properties": {
        "type": {"type": "string", "enum": list(ACTION_TYPES)},
        "x": _INT,
        "y": _INT,
        "button": {"type": "string", "enum": ["left", "right", "wheel", "back", "forward"]},
        "path": {"type": "array", "items": {
            "type": "object", "properties": {"x": _INT, "y": _INT}, "required": ["x", "y"]}},
        "keys": _KEYS,
        "scroll_x": _INT,
        "scroll_y": _INT,
        "text": {"type": "string"},
    },
    "required": ["type"],
}
_COMPUTER = {
    "type": "object",
    "properties": {"actions": {"type": "array", "items": _ACTION,
                               "description": "The actions, done in order."}},
    "required": ["actions"],
}
_COMPUTER_PREVIEW = {"type": "object", "properties": {"action": _ACTION}, "required": ["action"]}
_TOOL_SEARCH = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What the tools should do."}},
    "required": ["query"],
}

_V4A = (
    "operation.diff is a V4A diff. For update_file: one or more hunks, each starting with a line "
    "'@@' (optionally '@@ <a line of the file near the change>'), then the changed region's "
    "lines, each prefixed with ' ' (unchanged context, about 3 lines around each change), '-' "
    "(removed) or '+' (added). For create_file: every line of the new file prefixed with '+'. "
    "delete_file takes no diff. Paths are relative to the workspace."
)


class ClientTool(Value):
    """One client-run tool: how the model is offered it and what its items look like (a
    frozen value: records.py)."""

    __slots__ = ("call_prefix", "call_type", "description", "field", "function", "kind",
                 "output_prefix", "output_type", "parameters", "tool_types")

    kind: str  # ToolSpec.kind (tools/catalog.py)
    tool_types: tuple[str, ...]  # the request's tools[].type values
    function: str  # the chat function's name, when no client tool holds it
    call_type: str
    output_type: str
    call_prefix: str
    output_prefix: str
    field: str  # the call item's field the chat arguments carry ("" for tool_search: all)
    description: str
    parameters: Mapping[str, Any]

    def __init__(self, kind: str, tool_types: tuple[str, ...], function: str, call_type: str,
                 output_type: str, call_prefix: str, output_prefix: str, field: str,
                 description: str, parameters: Mapping[str, Any]) -> None:
        init = object.__setattr__
        init(self, "kind", kind)
        init(self, "tool_types", tool_types)
        init(self, "function", function)
        init(self, "call_type", call_type)
        init(self, "output_type", output_type)
        init(self, "call_prefix", call_prefix)
        init(self, "output_prefix", output_prefix)
        init(self, "field", field)
        init(self, "description", description)
        init(self, "parameters", parameters)


CLIENT_TOOLS: tuple[ClientTool, ...] = (
    ClientTool(
        "shell", ("shell",), "shell", "shell_call", "shell_call_output",
        ids.SHELL_CALL, ids.SHELL_CALL_OUTPUT, "action",
        "Run shell commands on the user's machine; you get back each command's stdout, stderr "
        "and exit code. Use it to inspect files, run programs, builds and tests.",
        _SHELL,
    ),
    ClientTool(
        "apply_patch", ("apply_patch",), "apply_patch", "apply_patch_call",
        "apply_patch_call_output", ids.APPLY_PATCH_CALL, ids.APPLY_PATCH_CALL_OUTPUT,
        "operation",
        "Create, update or delete one file on the user's machine (operation.type create_file, "
        "update_file or delete_file, with operation.path). " + _V4A,
        _APPLY_PATCH,
    ),
    ClientTool(
        "local_shell", ("local_shell",), "local_shell", "local_shell_call",
        "local_shell_call_output", ids.LOCAL_SHELL_CALL, ids.LOCAL_SHELL_CALL_OUTPUT, "action",
        "Run one command on the user's machine (action.type is always 'exec'; action.command is "
        "its argv); you get back its output.",
        _LOCAL_SHELL,
    ),
    ClientTool(
        "computer", ("computer", "computer_use"), "computer", "computer_call",
        "computer_call_output", ids.COMPUTER_CALL, ids.COMPUTER_CALL_OUTPUT, "actions",
        "Operate the user's computer through its screen, mouse and keyboard: the actions are "
        "done in order, then you get a screenshot of the screen. Coordinates are pixels of the "
        "latest screenshot; start with a screenshot action to see the screen.",
        _COMPUTER,
    ),
    ClientTool(
        "computer_use_preview", ("computer_use_preview",), "computer", "computer_call",
        "computer_call_output", ids.COMPUTER_CALL, ids.COMPUTER_CALL_OUTPUT, "action",
        "Operate the user's computer through its screen, mouse and keyboard: one action, then "
        "you get a screenshot of the screen. Coordinates are pixels of the latest screenshot.",
        _COMPUTER_PREVIEW,
    ),
    ClientTool(
        "tool_search", ("tool_search",), "tool_search", "tool_search_call", "tool_search_output",
        ids.TOOL_SEARCH_CALL, ids.TOOL_SEARCH_OUTPUT, "",
        "Search for more tools: describe what you need and the matching tools become available "
        "to call.",
        _TOOL_SEARCH,
    ),
)

BY_KIND = {tool.kind: tool for tool in CLIENT_TOOLS}
BY_TOOL_TYPE = {t: tool for tool in CLIENT_TOOLS for t in tool.tool_types}
#: ToolSpec kinds of client-run tools: the translator makes their typed call items.
CLIENT_KINDS = frozenset(BY_KIND)
#: Request tool types that are client-run (tool_search only with execution "client").
CLIENT_TOOL_TYPES = frozenset(BY_TOOL_TYPE)
#: Call item type -> its output item type.
PAIRS = {tool.call_type: tool.output_type for tool in CLIENT_TOOLS}
CALL_TYPES = frozenset(PAIRS)
OUTPUT_TYPES = frozenset(PAIRS.values())
#: Call item type -> the kinds that make it (computer_call: computer, computer_use_preview).
KINDS_OF_CALL = {c: tuple(t.kind for t in CLIENT_TOOLS if t.call_type == c) for c in PAIRS}


def client_run(tool: Any) -> ClientTool | None:
    """The entry for a request tool the client runs (``tool_search`` only when the client
    executes it; OpenAI runs it otherwise), or None. One a server tool claims by its params
    (tools/registry.py ``serving``: a ``shell`` whose environment is a container) is not the
    client's, whether or not the gateway runs that tool."""
    entry = BY_TOOL_TYPE.get(_get(tool, "type"))
    if entry is not None and entry.kind == "tool_search" and _get(tool, "execution") != "client":
        return None
    if entry is not None and registry.serving(tool) is not None:
        return None
    return entry


def chat_function(entry: ClientTool, tool: Any) -> dict[str, Any]:
    """The chat function offering ``tool`` (the request's tool object or model)."""
    description = entry.description
    parameters: Any = entry.parameters
    if entry.kind == "computer_use_preview":
        width, height = _get(tool, "display_width"), _get(tool, "display_height")
        environment = _get(tool, "environment")
        if isinstance(width, int) and isinstance(height, int):
            description += f" The display is {width}x{height} pixels"
            description += f" ({environment})." if isinstance(environment, str) else "."
    elif entry.kind == "tool_search":
        description = _get(tool, "description") or description
        parameters = _get(tool, "parameters") or parameters
    return {"name": entry.function, "description": description,
            "parameters": json.loads(json.dumps(parameters))}


# -- the model's call as the typed item -------------------------------------------------------


def call_item(kind: str, call_id: str, arguments: str, status: str,
              item_id: str | None = None) -> dict[str, Any]:
    """The typed call item for the model's call of a client tool's function. Arguments that are
    not a JSON object (cut off, say) still make a valid item, ``incomplete``."""
    entry = BY_KIND[kind]
    args = _arguments(arguments)
    if args is None:
        args, status = {}, "incomplete"
    item: dict[str, Any] = {"id": item_id or ids.new_id(entry.call_prefix),
                            "type": entry.call_type, "call_id": call_id}
    if kind == "shell":
        item["action"] = _shell_action(_inner(args, "action"))
    elif kind == "apply_patch":
        item["operation"] = _operation(_inner(args, "operation"))
        if status == "incomplete" or not _runnable(item["operation"]):
            status = "in_progress"  # apply_patch_call has no "incomplete" (openai-python)
    elif kind == "local_shell":
        item["action"] = _exec_action(_inner(args, "action"))
    elif kind == "computer":
        raw = args.get("actions")
        if not isinstance(raw, list):
            raw = [args["action"]] if isinstance(args.get("action"), dict) else []
        item["actions"] = [a for a in map(_computer_action, raw) if a is not None]
        item["pending_safety_checks"] = []
    elif kind == "computer_use_preview":
        action = _computer_action(_inner(args, "action"))
        item["action"] = action if action is not None else {"type": "screenshot"}
        item["pending_safety_checks"] = []
    else:
        item["execution"] = "client"
        item["arguments"] = args
    item["status"] = status
    return item


def _arguments(arguments: str) -> dict[str, Any] | None:
    """The model's arguments as an object the item can hold, or None: not JSON, not an object,
    a number no double holds (``1e400``: orjson refuses it, where ``json`` would make it
    infinity), or nesting deeper than a request body may use (the item goes into the
    Response, its events and the store, which orjson encodes to 254 levels only)."""
    if not arguments.strip():
        return {}
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, dict) or not fits_depth(args):
        return None
    return args


def call_arguments(item: Mapping[str, Any]) -> str:
    """A call item's chat arguments (the model's own call, going back to it in history)."""
    if item.get("type") == "tool_search_call":
        value = item.get("arguments")
        return json.dumps(value if value is not None else {}, ensure_ascii=False)
    kind = kind_of_call(item)
    field = BY_KIND[kind].field
    return json.dumps({field: item.get(field)}, ensure_ascii=False)


def kind_of_call(item: Mapping[str, Any]) -> str:
    """Which client tool made a call item (a ``computer_call`` with ``action`` alone is the
    preview tool's)."""
    kinds = KINDS_OF_CALL[item["type"]]
    if len(kinds) > 1 and item.get("actions") is None and item.get("action") is not None:
        return "computer_use_preview"
    return kinds[0]


_COMMANDS = re.compile(r'"commands?"\s*:\s*\[')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}


def partial_commands(arguments: str) -> tuple[list[str], str | None]:
    """A shell call's commands while its arguments stream: the whole ones, and the text so
    far of the one being written (None when none is open), so they can stream as OpenAI
    streams them (``response.shell_call_command.delta``). The whole arguments decide the item
    (:func:`call_item`)."""
    found = _COMMANDS.search(arguments)
    if found is None:
        return [], None
    done: list[str] = []
    i, end = found.end(), len(arguments)
    while i < end:
        char = arguments[i]
        if char in " \t\r\n,":
            i += 1
            continue
        if char != '"':
            return done, None  # the array closed, or holds something else
        text, i = _string_prefix(arguments, i + 1)
        if i < 0:
            return done, text
        done.append(text)
    return done, None


def _string_prefix(source: str, i: int) -> tuple[str, int]:
    """The JSON string starting at ``i`` (after its quote), decoded, and the index after its
    closing quote; -1 when it is cut off (the text is then what is whole of it so far)."""
    out: list[str] = []
    end = len(source)
    while i < end:
        char = source[i]
        if char == '"':
            return "".join(out), i + 1
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= end:
            break
        code = source[i + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code == "u" and i + 6 <= end:
            try:
                value = int(source[i + 2:i + 6], 16)
            except ValueError:
                break
            if 0xD800 <= value < 0xDC00:  # a surrogate pair: decoded once both halves came
                if i + 12 > end:
                    break
                try:
                    out.append(json.loads(f'"{source[i:i + 12]}"'))
                except ValueError:
                    break
                i += 12
            else:
                out.append(chr(value))
                i += 6
        else:
            break
    return "".join(out), -1


# -- the client's output as the tool's result -------------------------------------------------


def output_call_id(item: Mapping[str, Any]) -> Any:
    """The call an output answers. openai-python's ``local_shell_call_output`` has no
    ``call_id``: its ``id`` is the call's ``call_id``; the Agents SDK sends ``call_id``."""
    call_id = item.get("call_id")
    if call_id is None and item.get("type") == "local_shell_call_output":
        return item.get("id")
    return call_id


def output_text(item: Mapping[str, Any]) -> str:
    """What the model reads of an output item (a screenshot goes as an image: to_chat.py)."""
    kind = item.get("type")
    if kind == "shell_call_output":
        chunks = item.get("output") if isinstance(item.get("output"), list) else []
        return json.dumps([_shell_chunk(c) for c in chunks if isinstance(c, dict)],
                          ensure_ascii=False)
    if kind == "apply_patch_call_output":
        result = {"status": item.get("status")}
        if item.get("output") is not None:
            result["output"] = item["output"]
        return json.dumps(result, ensure_ascii=False)
    if kind == "local_shell_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output)
    if kind == "tool_search_output":
        return json.dumps({"tools": item.get("tools") or []}, ensure_ascii=False)
    return "(screenshot attached in the next message)"


def screenshot_url(item: Mapping[str, Any]) -> str | None:
    output = item.get("output")
    url = output.get("image_url") if isinstance(output, dict) else None
    return url if isinstance(url, str) else None


# -- shaping what a chat model sent into OpenAI's fields ---------------------------------------


def _get(tool: Any, name: str) -> Any:
    if isinstance(tool, Mapping):
        return tool.get(name)
    value = getattr(tool, name, None)
    if value is None:
        extra = getattr(tool, "model_extra", None) or {}
        value = extra.get(name)
    return value


def _inner(args: dict[str, Any], field: str) -> dict[str, Any]:
    """Models sometimes flatten the one object parameter: take it from either level."""
    value = args.get(field)
    return value if isinstance(value, dict) else args


MAX_INT = 2**53  # beyond it a JSON number is not an exact integer for most clients


def _int(value: Any) -> int | None:
    """An integer field the model sent (a number or digits), None when it is none or does not
    fit (infinite, NaN, past :data:`MAX_INT`): the field's default then, as for a wrong type."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) else None
    elif isinstance(value, str):
        text = value.strip()
        value = int(text) if text.lstrip("-").isdigit() and len(text) <= 20 else None
    if isinstance(value, int) and -MAX_INT <= value <= MAX_INT:
        return value
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v if isinstance(v, str) else json.dumps(v) for v in value or ()] if isinstance(
        value, list) else []


def _shell_action(args: dict[str, Any]) -> dict[str, Any]:
    return {"commands": _strings(args.get("commands", args.get("command"))),
            "timeout_ms": _int(args.get("timeout_ms")),
            "max_output_length": _int(args.get("max_output_length"))}


def _operation(args: dict[str, Any]) -> dict[str, Any]:
    kind = args.get("type")
    if kind not in ("create_file", "update_file", "delete_file"):
        kind = "update_file"
    operation: dict[str, Any] = {"type": kind, "path": str(args.get("path") or "")}
    if kind != "delete_file":
        diff = args.get("diff")
        operation["diff"] = diff if isinstance(diff, str) else ""
    return operation


def _runnable(operation: dict[str, Any]) -> bool:
    """Whether the model gave what the operation needs (a path; a diff unless it deletes):
    one that did not is not ``completed``, as a call whose arguments were cut off is not."""
    return bool(operation["path"]) and (operation["type"] == "delete_file"
                                        or bool(operation.get("diff")))


def _exec_action(args: dict[str, Any]) -> dict[str, Any]:
    env = args.get("env")
    return {
        "type": "exec",
        "command": _strings(args.get("command", args.get("commands"))),
        "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
        "timeout_ms": _int(args.get("timeout_ms")),
        "user": args["user"] if isinstance(args.get("user"), str) else None,
        "working_directory": (args["working_directory"]
                              if isinstance(args.get("working_directory"), str) else None),
    }


_POINT = ("x", "y")
_ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "click": _POINT, "double_click": _POINT, "move": _POINT,
    "scroll": (*_POINT, "scroll_x", "scroll_y"), "drag": (), "keypress": (), "type": (),
    "screenshot": (), "wait": (),
}
_HOLDS_KEYS = frozenset({"click", "double_click", "drag", "move", "scroll"})
_BUTTONS = frozenset({"left", "right", "wheel", "back", "forward"})


def _computer_action(raw: Any) -> dict[str, Any] | None:
    """One action as openai-python's union has it; None for one that is none of them."""
    if not isinstance(raw, dict) or raw.get("type") not in _ACTION_FIELDS:
        return None
    kind = raw["type"]
    action: dict[str, Any] = {"type": kind}
    for name in _ACTION_FIELDS[kind]:
        action[name] = _int(raw.get(name)) or 0
    if kind == "click":
        action["button"] = raw.get("button") if raw.get("button") in _BUTTONS else "left"
    elif kind == "drag":
        points = raw.get("path") if isinstance(raw.get("path"), list) else []
        action["path"] = [{"x": _int(p.get("x")) or 0, "y": _int(p.get("y")) or 0}
                          for p in points if isinstance(p, dict)]
    elif kind == "keypress":
        action["keys"] = _strings(raw.get("keys"))
    elif kind == "type":
        action["text"] = raw.get("text") if isinstance(raw.get("text"), str) else ""
    if kind in _HOLDS_KEYS and isinstance(raw.get("keys"), list) and raw["keys"]:
        action["keys"] = _strings(raw["keys"])
    return action


def _shell_chunk(chunk: dict[str, Any]) -> dict[str, Any]:
    return {k: chunk[k] for k in ("stdout", "stderr", "outcome") if k in chunk}

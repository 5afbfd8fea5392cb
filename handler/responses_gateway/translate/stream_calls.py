"""Tool-call items of the translator (translate/stream.py): a ``function_call`` streamed as its
arguments arrive, a ``custom_tool_call`` with its input decoded as it streams, a call to a tool
the client runs (``shell_call``, ``apply_patch_call``...: tools/client_tools.py) made once its
arguments are whole, and a call to a server tool held until the turn ends (the turn loop runs
it: responses/turns.py).

Providers number calls by ``index``, by ``id``, by both or by neither, reuse index 0 for every
call, or send a name late; :meth:`CallItems._tool_call` finds the call each fragment belongs to.
A mixin of :class:`~responses_gateway.translate.stream.ResponseTranslator`.
"""

from __future__ import annotations

from typing import Any

from responses_gateway import ids
from responses_gateway.tools import client_tools
from responses_gateway.tools.catalog import ToolSpec
from responses_gateway.tools.custom import InputStream, input_of
from responses_gateway.tools.registry import SERVER_KINDS
from responses_gateway.translate.item_kinds import CALL as _CALL
from responses_gateway.translate.item_kinds import CLIENT as _CLIENT
from responses_gateway.translate.item_kinds import CUSTOM as _CUSTOM
from responses_gateway.translate.item_kinds import NONE as _NONE
from responses_gateway.translate.item_kinds import SERVER as _SERVER
from responses_gateway.translate.item_kinds import TranslationError

Event = dict[str, Any]


class _Call:
    __slots__ = (
        "args", "call_id", "commands", "commands_done", "index", "input", "item", "name",
        "output_index", "spec", "state",
    )

    def __init__(self, call_id: str, index: int | None) -> None:
        self.call_id = call_id
        self.index = index  # the upstream's tool call index, when it sends one
        self.name = ""
        self.args: list[str] = []
        self.item: dict[str, Any] | None = None
        self.output_index = -1
        self.state = 0  # 0 pending (no name yet), 1 open, 2 closed
        self.spec: ToolSpec | None = None  # what the chat function stands for (None: itself)
        self.input: InputStream | None = None  # a custom call's input, decoded as it streams
        self.commands: list[str] = []  # a shell call's commands as streamed so far
        self.commands_done = 0  # how many of them had their .done event

    @property
    def arguments(self) -> str:
        return "".join(self.args)


class CallItems:
    __slots__ = ()

    def _tool_call(self, tool_call: dict[str, Any], out: list[Event]) -> None:
        index = tool_call.get("index")
        upstream_id = tool_call.get("id") or ""
        call: _Call | None = None
        if index is not None:
            call = self._calls_by_index.get(index)
            if call is not None and upstream_id and upstream_id != call.call_id:
                call = None  # a new call reusing the index (some providers send 0 every time)
        if call is None and upstream_id:
            call = self._calls_by_id.get(upstream_id)
        if call is None and index is None and not upstream_id:
            call = self._call
        function = tool_call.get("function") or {}
        name = function.get("name")
        arguments = function.get("arguments")
        if (name and name.__class__ is not str) or (
            arguments and arguments.__class__ is not str
        ):
            raise TranslationError("a tool call whose name or arguments are not strings")
        if call is None:
            if not name and not arguments and not upstream_id:
                return  # an empty trailing fragment for nothing we know
            call = _Call(upstream_id or ids.new_id(ids.CALL), index)
            if index is not None:
                self._calls_by_index[index] = call
            if upstream_id:
                self._calls_by_id[upstream_id] = call
        if call.state == 2:
            if arguments:
                raise TranslationError(
                    f"arguments for tool call {call.call_id!r} arrived after it was closed"
                )
            return
        if name and not call.name:
            call.name = name
        if call.state == 0:
            if arguments:
                call.args.append(arguments)
            if call.name:
                self._open_call(call, out)
            return
        if self._call is not call:
            # Fragments of an open call always belong to the open item; an open call that
            # is not current cannot exist because opening one closes the other.
            raise TranslationError(f"tool call {call.call_id!r} is not the open item")
        if arguments:
            if self._kind == _CALL:
                self._fragment(arguments, out)
            else:
                self._more_input(call, arguments, out)

    def _open_call(self, call: _Call, out: list[Event]) -> None:
        self._close(out, "completed")
        spec = self._tools.get(call.name) if self._tools is not None else None
        call.spec = spec
        self._call = call
        self._open_index = call.index
        call.state = 1
        if spec is not None and spec.kind in SERVER_KINDS:
            self._kind = _SERVER  # no item yet: the gateway runs it once the turn ends
            return
        if spec is not None and spec.kind in client_tools.CLIENT_KINDS:
            self._kind = _CLIENT
            if spec.kind == "shell":
                self._open_shell(call, out)  # its commands stream as they come
            return  # the others' item is made once the arguments are whole
        if spec is not None and spec.kind == "custom":
            item: dict[str, Any] = {
                "id": ids.new_id(ids.CUSTOM_TOOL_CALL),
                "type": "custom_tool_call",
                "call_id": call.call_id,
                "input": "",
                "name": spec.name,
            }
            if spec.namespace is not None:
                item["namespace"] = spec.namespace
            self._kind = _CUSTOM
            call.input = InputStream()
            call.item = item
            self._add_item(item, out)
            call.output_index = self._output_index
            pending, call.args = call.args, []
            for piece in pending:
                self._more_input(call, piece, out)
            return
        item = {
            "id": ids.new_id(ids.FUNCTION_CALL),
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call.call_id,
            "name": call.name if spec is None else spec.name,
        }
        if spec is not None and spec.namespace is not None:
            item["namespace"] = spec.namespace
        self._kind = _CALL
        call.item = item
        self._add_item(item, out)
        call.output_index = self._output_index
        if call.args:
            self._seq += 1
            out.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": self._item_id,
                    "output_index": self._output_index,
                    "delta": "".join(call.args),
                    "sequence_number": self._seq - 1,
                }
            )

    def _more_input(self, call: _Call, arguments: str, out: list[Event]) -> None:
        """Arguments of a custom call (decoded into input deltas) or of a gateway-run call
        (kept until the turn ends)."""
        call.args.append(arguments)
        if call.input is None:
            if call.item is not None:
                self._shell_commands(call, out)
            return
        text = call.input.feed(arguments)
        if text:
            out.append(self._event({
                "type": "response.custom_tool_call_input.delta", "item_id": self._item_id,
                "output_index": self._output_index, "delta": text,
            }))

    def _close_custom(self, item: dict[str, Any], out: list[Event]) -> None:
        call = self._call
        assert call is not None and call.input is not None
        streamed = "".join(call.input.text)
        text = input_of(call.arguments)
        if text != streamed and text.startswith(streamed):
            out.append(self._event({
                "type": "response.custom_tool_call_input.delta", "item_id": self._item_id,
                "output_index": self._output_index, "delta": text[len(streamed):],
            }))
        item["input"] = text
        call.state = 2
        self._call = None
        out.append(self._event({
            "type": "response.custom_tool_call_input.done", "item_id": self._item_id,
            "output_index": self._output_index, "input": text,
        }))

    def _open_shell(self, call: _Call, out: list[Event]) -> None:
        """A shell call, announced as soon as it is known (``in_progress``, no commands yet):
        its commands then stream as OpenAI streams them."""
        item: dict[str, Any] = {
            "id": ids.new_id(ids.SHELL_CALL), "type": "shell_call", "call_id": call.call_id,
            "action": {"commands": [], "timeout_ms": None, "max_output_length": None},
            "status": "in_progress",
        }
        call.item = item
        self._add_item(item, out)
        call.output_index = self._output_index
        if call.args:
            self._shell_commands(call, out)

    def _shell_commands(self, call: _Call, out: list[Event],
                        final: list[str] | None = None) -> None:
        """``response.shell_call_command.added`` / ``.delta`` / ``.done`` for what the
        arguments so far add to the commands (``final``: the whole call's commands)."""
        if final is None:
            whole, open_text = client_tools.partial_commands(call.arguments)
            current = whole if open_text is None else [*whole, open_text]
        else:
            whole = current = final
        index = call.output_index
        for number, command in enumerate(current):
            base = {"output_index": index, "command_index": number}
            if number == len(call.commands):
                call.commands.append("")
                out.append(self._event(
                    {"type": "response.shell_call_command.added", **base, "command": ""}))
            streamed = call.commands[number]
            if number >= call.commands_done and len(command) > len(streamed) and (
                    command.startswith(streamed)):
                call.commands[number] = command
                out.append(self._event({"type": "response.shell_call_command.delta", **base,
                                        "delta": command[len(streamed):]}))
            if number < len(whole) and number == call.commands_done:
                call.commands_done += 1
                out.append(self._event(
                    {"type": "response.shell_call_command.done", **base, "command": command}))

    def _close_client(self, out: list[Event], status: str) -> None:
        """The call of a tool the client runs, whole: its typed item (``shell_call``...) from
        the whole arguments, with OpenAI's events: ``output_item.added`` (``in_progress``;
        a shell call's was sent when it opened, its commands as they streamed), then
        ``output_item.done``."""
        call = self._call
        assert call is not None and call.spec is not None
        call.state = 2
        self._call = None
        self._kind = _NONE
        self._item = None
        self.client_calls += 1
        opened = call.item
        item = client_tools.call_item(call.spec.kind, call.call_id, call.arguments, status,
                                      item_id=opened["id"] if opened is not None else None)
        if opened is not None:  # a shell call: its last commands, then the whole item
            self._output_index = call.output_index
            self._shell_commands(call, out, final=item["action"]["commands"])
            opened.clear()
            opened.update(item)
            item = opened
        else:
            output = self.response["output"]
            self._output_index = len(output)
            output.append(item)
            self._item_id = item["id"]
            out.append(self._event({"type": "response.output_item.added",
                                    "output_index": self._output_index,
                                    "item": {**item, "status": "in_progress"}}))
        out.append(self._event({"type": "response.output_item.done",
                                "output_index": self._output_index, "item": item}))

    def _abandon_call(self) -> None:
        """The response ends with a call whose arguments never finished: it stays open.

        No ``function_call_arguments.done`` or ``output_item.done``: clients run the calls
        those announce (the Codex CLI does, and keeps them in its history), and these
        arguments are cut off. The response's output keeps it, marked ``incomplete`` (a shell
        call with the commands streamed so far). A cut-off call of another tool the client runs
        never had an item: nothing announced it, nothing runs it.
        """
        call, item = self._call, self._item
        assert call is not None
        if item is not None:
            if self._kind == _CUSTOM:
                item["input"] = "".join(call.input.text) if call.input is not None else ""
            elif self._kind == _CLIENT:  # a shell call: the commands streamed so far
                item["action"]["commands"] = list(call.commands)
                item["status"] = "incomplete"
            else:
                item["arguments"] = "".join(call.args)
                item["status"] = "incomplete"
        call.state = 2
        self._call = None
        self._kind = _NONE
        self._item = None
        self._pieces = []

    def _close_pending_calls(self, out: list[Event]) -> None:
        """Calls whose name never came cannot be items; their arguments would be lost."""
        pending = {
            id(c): c
            for c in [*self._calls_by_index.values(), *self._calls_by_id.values()]
            if c.state == 0 and c.args
        }
        for call in pending.values():
            call.name = call.name or "unknown"
            self._open_call(call, out)
            self._close(out, "incomplete")

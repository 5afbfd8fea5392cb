"""Hosted shell as a server tool (tools/server.py): the model's shell calls run in a container.

The model is offered the same ``shell`` function as the client shell (its ``action``:
``commands``, ``timeout_ms``, ``max_output_length``). A call runs every command in the
container through the Containers service (``run_commands``: working directory ``/mnt/data``),
within the call's ``timeout_ms`` capped by ``GATEWAY_CODE_TIMEOUT`` and its output bounded
(:mod:`.items`), and becomes OpenAI's ``shell_call`` and ``shell_call_output`` items. A failure
(the container expired, the engine refused) is the output's ``stderr``, which the model reads,
never a failed response.

The container: ``container_reference`` names one, which must exist for the request's tenant
(else the service's 404, before the response starts). ``container_auto`` makes one on the
response's first call, with the environment's ``file_ids`` and ``memory_limit``, and every
later call of the response uses it; a later request of the chain (``previous_response_id``, a
conversation, the items given back as input) with ``container_auto`` goes on in the container
its latest hosted shell call ran in, while it lives, so files and state carry across turns.

Hosted items are told from the client shell's by the call's ``environment``: the gateway's
``shell_call`` always names its container (``container_reference``, as OpenAI's does for an
auto container too); the client's has none or ``local``. A ``shell_call_output`` is hosted when
it answers such a call. Hosted pairs go back to the model as this tool's function call and its
result; the client's keep the client path (translate/to_chat.py). The one hosted call that
names no container is one whose auto container could not be made (a missing file id, the
container bound): it reads as a client's call, with the output saying why, which is all the
model needs of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from responses_gateway.containers.engine import EngineError
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.tools import client_tools
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.hosted_shell import REGISTRATION, environment, items
from responses_gateway.tools.hosted_shell.environment import Environment
from responses_gateway.tools.server import (
    DIRECT,
    PROGRAMMATIC,
    Event,
    HistoryCall,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
    ToolServices,
    allowed_callers,
    check_callers,
)

KIND = REGISTRATION.kind
NAME = "shell"  # the function the model calls, as the client shell's
DESCRIPTION = (
    "Run shell commands in a sandboxed Linux container; you get back each command's stdout, "
    "stderr and exit code. The working directory is /mnt/data, which holds the user's files "
    "and keeps what you write there between calls. The container has no network access.")
#: the name of a container ``container_auto`` makes (the Containers API lists it)
AUTO_NAME = "shell auto container"
#: a model that reads ``max_output_length`` as bytes still gets whole characters: the engine
#: keeps up to this many bytes per asked character (UTF-8's longest), the rest is cut by count
_BYTES_PER_CHAR = 4


class HostedShellTool(ServerTool):
    """Hosted shell for one response: its environment and the container it runs in."""

    kind = KIND
    callers: tuple[str, ...] = (DIRECT,)  # (an instance's: __init__)

    def __init__(self, env: Environment, tenant: str, settings: Any, services: ToolServices,
                 earlier: str | None = None, callers: tuple[str, ...] = (DIRECT,)) -> None:
        self.env = env
        #: ``allowed_callers``: the model (``direct``), a program (``programmatic``)
        self.callers = callers
        self.tenant = tenant
        self.settings = settings
        self.services = services
        #: (auto) the container the chain's latest hosted call ran in: tried before a new one
        self.earlier = earlier

    # -- building ------------------------------------------------------------------------------

    @classmethod
    async def for_request(cls, request: RequestTools) -> HostedShellTool:
        if len(request.tools) > 1:
            raise invalid_request("Only one 'shell' tool with a container environment may be "
                                  "given.", param="tools", code="invalid_value")
        where = f"tools[{request.indexes[0] if request.indexes else 0}]"
        param = f"{where}.environment"
        env = Environment.of(request.tools[0], param)
        check_callers(request.tools[0], where)
        if env.container_id is not None:  # referenced: it must be this tenant's, and alive
            try:
                await request.services.containers.get(request.tenant, env.container_id)
            except GatewayError as exc:  # unknown, expired, another key's: OpenAI's 404
                raise GatewayError(exc.status, exc.message, type=exc.type,
                                   param=f"{param}.container_id", code=exc.code) from None
        earlier = None if not env.auto else _latest_container(
            [*request.history, *request.items])
        return cls(env, request.tenant, request.settings, request.services, earlier,
                   callers=allowed_callers(request.tools[0]))

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return self._function() if DIRECT in self.callers else []

    def program_functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        """A program (tools/programmatic/) may run commands here when ``allowed_callers``
        says so (tools.shell({action: {commands: [...]}}))."""
        return self._function() if PROGRAMMATIC in self.callers else []

    def _function(self) -> list[tuple[str | None, dict[str, Any]]]:
        parameters = client_tools.BY_KIND[NAME].parameters
        return [(None, {"name": NAME, "description": DESCRIPTION,
                        "parameters": json.loads(json.dumps(parameters))})]

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "shell"}``: the model runs commands first."""
        if isinstance(choice, str) or getattr(choice, "type", None) not in REGISTRATION.tool_types:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, NAME)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {"environment": asdict(self.env), "tenant": self.tenant, "earlier": self.earlier,
                "callers": list(self.callers)}

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> HostedShellTool:
        return cls(Environment(**data["environment"]), data["tenant"], rebuild.settings,
                   rebuild.services, data.get("earlier"),
                   callers=tuple(data.get("callers") or (DIRECT,)))

    # -- running -------------------------------------------------------------------------------

    async def run(self, call: ServerCall, writer: ItemWriter) -> AsyncIterator[list[Event]]:
        parsed = client_tools.call_item(NAME, call.call_id, call.arguments, "completed")
        action: dict[str, Any] = parsed["action"]
        commands: list[str] = action["commands"]
        failure: str | None = None
        container_id: str | None = self.env.container_id
        if parsed["status"] != "completed" or not commands:
            failure = "No commands were given: call shell with action.commands, a list of " \
                      "shell commands."
        else:
            try:
                container_id = await self._container()
            except (GatewayError, EngineError) as exc:
                failure = f"The container is not available: {_reason(exc)}"
        events = items.open_call(writer, call.call_id, action, parsed["status"], container_id)
        events += items.open_output(writer, call.call_id, action.get("max_output_length"))
        yield events  # the client sees the output open while the commands run
        if failure is not None or container_id is None:
            yield items.close_output(writer, [items.failed_chunk(failure or "")], "incomplete")
            return
        limit = action.get("max_output_length")
        try:
            results = await self.services.containers.run_commands(
                self.tenant, container_id, commands, timeout=self._timeout(action),
                max_output=self._max_output(limit))
        except (GatewayError, EngineError) as exc:
            reason = f"The commands could not run: {_reason(exc)}"
            yield items.close_output(writer, [items.failed_chunk(reason)], "incomplete")
            return
        yield items.close_output(writer, [items.chunk_of(r, limit) for r in results])

    async def _container(self) -> str:
        """The container this response's calls run in: the referenced one, else (auto) the
        one made by an earlier call, the chain's latest while it lives, or a new one."""
        if self.env.container_id is not None:
            return self.env.container_id
        containers = self.services.containers
        if self.earlier is not None:
            earlier, self.earlier = self.earlier, None
            try:
                self.env.container_id = (await containers.get(self.tenant, earlier)).id
                return self.env.container_id
            except GatewayError:  # expired or deleted since: a new one
                pass
        record = await containers.create(self.tenant, name=AUTO_NAME,
                                         file_ids=self.env.file_ids,
                                         memory_limit=self.env.memory_limit)
        self.env.container_id = record.id
        return record.id

    def _timeout(self, action: Mapping[str, Any]) -> float:
        """The call's ``timeout_ms``, capped by GATEWAY_CODE_TIMEOUT (its default)."""
        cap = float(self.settings.code_timeout)
        asked = action.get("timeout_ms")
        return min(cap, asked / 1000) if isinstance(asked, int) and asked > 0 else cap

    def _max_output(self, limit: int | None) -> int:
        """Bytes the engine keeps of each command: GATEWAY_CODE_MAX_OUTPUT_BYTES, less when
        the call asks for fewer characters."""
        cap = int(self.settings.code_max_output_bytes)
        if isinstance(limit, int) and limit >= 0:
            return max(1, min(cap, limit * _BYTES_PER_CHAR))
        return cap

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, history: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> HostedShellHistory:
        return HostedShellHistory(history)


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, GatewayError) else str(exc) or type(exc).__name__


def _latest_container(history: Sequence[Mapping[str, Any]]) -> str | None:
    """The container of the latest hosted ``shell_call`` among ``history``."""
    for item in reversed(history):
        if isinstance(item, Mapping) and item.get("type") == items.CALL:
            container_id = environment.container_of(item)
            if container_id is not None:
                return container_id
    return None


class HostedShellHistory:
    """Hosted ``shell_call`` / ``shell_call_output`` pairs as the model reads them: its call
    of ``shell`` and the output as the client shell's goes back (each command's stdout,
    stderr and outcome as JSON). The client's shell items are not this reader's
    (:meth:`owns`)."""

    def __init__(self, history: Sequence[Mapping[str, Any]]) -> None:
        self.calls: set[str] = set()
        self.outputs: dict[str, Mapping[str, Any]] = {}
        for item in history:
            if not isinstance(item, Mapping) or not isinstance(item.get("call_id"), str):
                continue
            if item.get("type") == items.CALL and environment.container_of(item) is not None:
                self.calls.add(item["call_id"])
            elif item.get("type") == items.OUTPUT:
                self.outputs[item["call_id"]] = item

    def owns(self, item: Mapping[str, Any]) -> bool:
        if item.get("type") == items.CALL:
            return environment.container_of(item) is not None
        return item.get("call_id") in self.calls

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        if item.get("type") != items.CALL:
            return None  # the output goes back with its call
        call_id = item["call_id"]
        output = self.outputs.get(call_id)
        text = (client_tools.output_text(output) if output is not None else
                "(no output: the commands did not run)")
        return HistoryCall(call_id, ToolSpec(KIND, NAME), client_tools.call_arguments(item), text)

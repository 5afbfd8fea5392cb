"""``code_interpreter`` as a server tool (tools/server.py).

The chat model is offered one function, ``python(code)``: OpenAI's own models know this tool
as "the python tool" (OpenAI's guide tells users to ask for it by that name, and gpt-oss was
trained on a ``python`` tool with the same contract: a stateful notebook with ``/mnt/data``),
so the name and the description below are what models already use well. A call runs the code
in the response's container (the Containers service: containers/service.py) and becomes a
``code_interpreter_call`` item with OpenAI's events, in OpenAI's order:

    response.output_item.added (status in_progress, code "", container_id)
    response.code_interpreter_call.in_progress
    response.code_interpreter_call_code.delta …  (the model's streamed code, decoded)
    response.code_interpreter_call_code.done
    response.code_interpreter_call.interpreting
    response.code_interpreter_call.completed      (not sent for a failed run)
    response.output_item.done

``outputs`` is null unless the request's ``include`` has ``code_interpreter_call.outputs``, as
OpenAI's. The model reads the call's output whatever ``include`` says (outputs.py
``model_text``): it is the call's ``reads``, kept for later requests (tools/reads.py). An
exception of the code is a ``completed`` call whose logs show the traceback (the model fixes
its code and goes on); a run past ``GATEWAY_CODE_TIMEOUT`` or a crash of the container's Python
is a ``failed`` call, and the model is told the container was reset. A container that cannot
be had (expired, the engine down) fails the call the same way; the response goes on.

The container: a ``container`` id is used as is (404 before the response if it is unknown or
expired, as OpenAI answers). ``auto`` uses the container of the latest ``code_interpreter_call``
in the conversation (``previous_response_id``, a conversation, items sent back) while it is
alive, so variables and files carry over between turns; else it makes one on first use, with
the tool's ``file_ids`` and ``memory_limit``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from responses_gateway import ids
from responses_gateway.containers.engine import EngineError
from responses_gateway.containers.service import Containers, safe_filename
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.code_interpreter import CALL_ID_PREFIX, ITEM, OUTPUTS, outputs
from responses_gateway.tools.code_interpreter.code_stream import code_deltas, code_of
from responses_gateway.tools.code_interpreter.params import ContainerParams
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
    allowed_callers,
    check_callers,
)

if TYPE_CHECKING:
    from responses_gateway.settings import Settings

KIND = "code_interpreter"
FUNCTION = "python"
_EVENT = "response.code_interpreter_call"
#: the name of a container ``auto`` makes (the Containers API lists it)
AUTO_NAME = "code_interpreter auto container"


class CodeInterpreterTool(ServerTool):
    """One response's code_interpreter: its container, the files its calls made, what the
    model read of each call."""

    kind = KIND

    def __init__(self, params: ContainerParams, *, tenant: str, containers: Containers,
                 settings: Settings, include_outputs: bool = False, container_id: str | None = None,
                 earlier: str | None = None,
                 files: dict[str, dict[str, str]] | None = None,
                 callers: tuple[str, ...] = (DIRECT,)) -> None:
        self.params = params
        #: ``allowed_callers``: the model (``direct``), a program (``programmatic``)
        self.callers = callers
        self.tenant = tenant
        self.containers = containers
        self.settings = settings
        self.include_outputs = include_outputs
        #: the container the calls run in, once known (an explicit one at once)
        self.container_id = container_id if container_id is not None else params.container_id
        #: ``auto``: the container of the conversation's latest call, tried on first use
        self.earlier = earlier
        #: container files this response knows (path -> id, container_id): what is cited
        self.files: dict[str, dict[str, str]] = files if files is not None else {}
        #: figures shown since the last text part: the next one cites them (0, 0)
        self.shown: list[str] = []
        self.read: dict[str, str] = {}

    # -- building (before response.created) ---------------------------------------------------

    @classmethod
    async def for_request(cls, request: RequestTools) -> CodeInterpreterTool:
        if len(request.tools) > 1:
            raise invalid_request("Only one 'code_interpreter' tool may be given.",
                                  param="tools", code="invalid_value")
        index = request.indexes[0] if request.indexes else 0
        params = ContainerParams.of(request.tools[0], f"tools[{index}]")
        check_callers(request.tools[0], f"tools[{index}]")
        containers = request.services.containers
        if not params.auto:
            assert params.container_id is not None
            try:
                await containers.get(request.tenant, params.container_id)
            except GatewayError as exc:  # unknown or another key's: 404; expired: 400
                raise GatewayError(exc.status, exc.message, type=exc.type,
                                   param=f"{params.param}.container", code=exc.code) from None
        return cls(params, tenant=request.tenant, containers=containers,
                   settings=request.settings, include_outputs=OUTPUTS in request.include,
                   earlier=None if not params.auto else latest_container(
                       [*request.history, *request.items]),
                   callers=allowed_callers(request.tools[0]))

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return self._function() if DIRECT in self.callers else []

    def program_functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        """A program (tools/programmatic/) may run Python here when ``allowed_callers``
        says so."""
        return self._function() if PROGRAMMATIC in self.callers else []

    def _function(self) -> list[tuple[str | None, dict[str, Any]]]:
        seconds = self.settings.code_timeout
        return [(None, {
            "name": FUNCTION,
            "description": (
                "Run Python code in a stateful Jupyter-like environment: variables, imports "
                "and files persist between calls. The value of the last line is shown, as "
                f"are stdout and stderr; a run stops after {seconds:g} seconds. Files are read "
                f"from and saved to {outputs.DATA} (the user's uploaded files are there). "
                "numpy, pandas and matplotlib are available; there is no internet access. To "
                "give the user a file you made, link it as sandbox:/mnt/data/NAME."),
            "parameters": {"type": "object", "properties": {"code": {
                "type": "string", "description": "The Python code to run."}},
                "required": ["code"], "additionalProperties": False},
        })]

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "code_interpreter"}``: the model must run code."""
        kind = choice.get("type") if isinstance(choice, Mapping) else getattr(choice, "type", None)
        if kind != KIND:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, FUNCTION, None)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {"params": self.params.to_record(), "tenant": self.tenant,
                "include_outputs": self.include_outputs, "container_id": self.container_id,
                "earlier": self.earlier, "files": self.files, "callers": list(self.callers)}

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> CodeInterpreterTool:
        return cls(ContainerParams.from_record(data.get("params") or {}),
                   tenant=str(data.get("tenant") or ""),
                   containers=rebuild.services.containers, settings=rebuild.settings,
                   include_outputs=bool(data.get("include_outputs")),
                   container_id=data.get("container_id"), earlier=data.get("earlier"),
                   files=dict(data.get("files") or {}),
                   callers=tuple(data.get("callers") or (DIRECT,)))

    # -- running -------------------------------------------------------------------------------

    async def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        code = code_of(call.arguments)
        try:
            container_id, note = await self._container()
        except (GatewayError, EngineError) as exc:
            yield self._unstarted(items, code, f"No container to run the code in: "
                                               f"{_reason(exc)}")
            return
        item: dict[str, Any] = {"id": ids.new_id(CALL_ID_PREFIX), "type": ITEM,
                                "status": "in_progress", "code": "",
                                "container_id": container_id,
                                "outputs": [] if self.include_outputs else None}
        events = items.start_tool_item(item, f"{_EVENT}.in_progress")
        for delta in code_deltas(call.fragments, code or ""):
            events.append(items.tool_item_event(f"{_EVENT}_code.delta", delta=delta))
        item["code"] = code or ""
        events.append(items.tool_item_event(f"{_EVENT}_code.done", code=code or ""))
        item["status"] = "interpreting"
        events.append(items.tool_item_event(f"{_EVENT}.interpreting"))
        yield events
        if code is None:
            self.read[item["id"]] = ("The python tool was called without code: send the code "
                                     "to run in the 'code' argument.")
            yield items.end_tool_item("failed", None)
            return
        try:
            ran = await self.containers.run_code(self.tenant, container_id, code)
        except (GatewayError, EngineError) as exc:
            if self.params.auto:
                self.container_id = None  # the next call starts a new one
            self.read[item["id"]] = (f"The code could not run: {_reason(exc)} Its container "
                                     f"may be gone: variables and files from earlier calls may "
                                     f"be lost.")
            yield items.end_tool_item("failed", None)
            return
        result = ran.result
        written = [f.path for f in ran.files]
        for file in ran.files:
            self.files[file.path] = {"id": file.id, "container_id": container_id}
            if outputs.figure(file.path):
                self.shown.append(file.path)
        self.read[item["id"]] = (note + outputs.model_text(
            result, written, timeout=self.settings.code_timeout))
        if self.include_outputs:
            item["outputs"] = await self._outputs(container_id, result, ran.files)
        if outputs.failed(result):
            yield items.end_tool_item("failed", None)
            return
        yield items.end_tool_item("completed", f"{_EVENT}.completed")

    async def _container(self) -> tuple[str, str]:
        """The container this call runs in, and a note for the model when it is a new one
        where it expected an old one."""
        if self.container_id is not None:
            return self.container_id, ""
        note = ""
        if self.earlier is not None:
            earlier, self.earlier = self.earlier, None
            try:
                found = await self.containers.get(self.tenant, earlier)
            except GatewayError:
                note = (f"[The container of the earlier calls ({earlier}) has expired: this "
                        f"code ran in a new one, without their variables and files.]\n")
            else:
                self.container_id = found.id
                return found.id, await self._add_files(found.id)
        made = await self.containers.create(
            self.tenant, name=AUTO_NAME, file_ids=self.params.file_ids,
            memory_limit=self.params.memory_limit)
        self.container_id = made.id
        for file in await self.containers.files(self.tenant, made.id):
            self.files[file.path] = {"id": file.id, "container_id": made.id}
        return made.id, note

    async def _add_files(self, container_id: str) -> str:
        """The tool's ``file_ids`` a reused container does not hold yet (by name under
        /mnt/data), copied in: a later turn's new files appear, a file the code changed is
        left as it is. A note for the model of any that could not be."""
        if not self.params.file_ids:
            return ""
        held = {file.path: file for file in await self.containers.files(self.tenant,
                                                                        container_id)}
        for file in held.values():
            self.files[file.path] = {"id": file.id, "container_id": container_id}
        missed = []
        files_api = self.containers.files_api
        if files_api is None:  # no file storage on this gateway
            return (f"[Files that could not be added: {', '.join(self.params.file_ids)} (file "
                    "storage is not configured on this gateway).]\n")
        for file_id in self.params.file_ids:
            try:
                found = await files_api.get(file_id, self.tenant)
                if f"{outputs.DATA}/{safe_filename(found.filename)}" in held:
                    continue
                added = await self.containers.add_file(self.tenant, container_id,
                                                       file_id=file_id)
            except GatewayError as exc:
                missed.append(f"{file_id} ({_reason(exc)})")
                continue
            self.files[added.path] = {"id": added.id, "container_id": container_id}
        return f"[Files that could not be added: {', '.join(missed)}]\n" if missed else ""

    def _unstarted(self, items: ItemWriter, code: str | None, why: str) -> list[Event]:
        """A call that could not start: its item opens and fails at once."""
        item = {"id": ids.new_id(CALL_ID_PREFIX), "type": ITEM, "status": "in_progress",
                "code": code or "", "container_id": self.container_id or "",
                "outputs": [] if self.include_outputs else None}
        events = items.start_tool_item(item, f"{_EVENT}.in_progress")
        self.read[item["id"]] = why
        return events + items.end_tool_item("failed", None)

    async def _outputs(self, container_id: str, result: Any, files: Sequence[Any]
                       ) -> list[dict[str, Any]]:
        """OpenAI's ``outputs``: an image per figure the code showed (a data URL, within
        GATEWAY_CODE_MAX_OUTPUT_BYTES each), then the logs."""
        found: list[dict[str, Any]] = []
        bound = self.settings.code_max_output_bytes
        for file in files:
            media = outputs.media_type(file.path)
            if (media is None or not outputs.figure(file.path) or file.bytes > bound
                    or len(found) >= outputs.MAX_IMAGES):
                continue
            try:
                _, chunks = await self.containers.file_content(self.tenant, container_id,
                                                               file.id)
                data = await _within(chunks, bound)
            except (GatewayError, EngineError):
                continue  # removed since: it stays out of the outputs
            if data is None:
                continue  # grew past the bound since: a file, not an output
            encoded = await asyncio.to_thread(base64.b64encode, data)
            found.append({"type": "image", "url": f"data:{media};base64,{encoded.decode()}"})
        printed = outputs.logs(result)
        if printed:
            found.append({"type": "logs", "logs": printed})
        return found

    def reads(self) -> dict[str, str]:
        return self.read

    async def aclose(self) -> None:
        """The Containers service is the process's (the Gateway's): nothing to release."""

    # -- citations -----------------------------------------------------------------------------

    def annotate(self, text: str) -> list[dict[str, Any]]:
        """The figures shown since the last text part (0, 0, as OpenAI cites a shown image),
        then the text's ``sandbox:/mnt/data/…`` links to files this response knows."""
        found = [outputs.shown(path, self.files[path]) for path in self.shown
                 if path in self.files]
        self.shown = []
        return found + outputs.citations(text, self.files, self.container_id)

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> CodeHistory:
        return CodeHistory(reads)


def latest_container(items: Sequence[Mapping[str, Any]]) -> str | None:
    """The container of the newest ``code_interpreter_call`` among ``items``."""
    for item in reversed(items):
        if item.get("type") == ITEM:
            found = item.get("container_id")
            if isinstance(found, str) and found:
                return found
    return None


async def _within(chunks: AsyncIterator[bytes], bound: int) -> bytes | None:
    """The chunks joined, or None past ``bound`` bytes (the file is read as it is now)."""
    parts, total = [], 0
    async for chunk in chunks:
        total += len(chunk)
        if total > bound:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _reason(exc: Exception) -> str:
    text = exc.message if isinstance(exc, GatewayError) else str(exc)
    return text if text.endswith(".") else text + "."


class CodeHistory:
    """A ``code_interpreter_call`` as the model reads it: its code, and what it printed (the
    call's reads, else the item's logs), with the first image it made for a model that reads
    images."""

    def __init__(self, reads: Mapping[str, str]) -> None:
        self.reads = reads

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        call_id = item.get("id")
        if not isinstance(call_id, str):
            raise invalid_request("A 'code_interpreter_call' item needs an 'id'.", param=param)
        code = item.get("code")
        arguments = orjson.dumps({"code": code if isinstance(code, str) else ""}).decode()
        found = item.get("outputs")
        listed = [o for o in found if isinstance(o, Mapping)] if isinstance(found, list) else []
        output = self.reads.get(call_id)
        if output is None:
            printed = [str(o.get("logs")) for o in listed if o.get("type") == "logs"]
            if printed:
                output = "\n".join(printed)
            elif item.get("status") == "failed":
                output = "This code did not finish (it failed or timed out)."
            else:
                output = ("This code ran in an earlier response; its output is no longer at "
                          "hand (run it again to see it).")
        image = next((str(o["url"]) for o in listed if o.get("type") == "image"
                      and isinstance(o.get("url"), str) and o["url"].startswith("data:image/")),
                     None)
        return HistoryCall(call_id, ToolSpec(KIND, FUNCTION, None), arguments, output, image)

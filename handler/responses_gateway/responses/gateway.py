"""The process-wide services a response needs, and the way from a create body to a job.

:meth:`Gateway.new_job` is where every client mistake in a create becomes an HTTP error,
before ``response.created``: the body validated and translated, item references and the
chain resolved, the conversation locked, the input fitted to the model's window, the server
tools built (an MCP server listed). What it returns, a :class:`~.job.Job`, runs the response.
A foreground stream's ``context_management`` compaction is the exception: its bounds are
checked here, its summarising calls run in the job after ``response.created`` (its
``response.compaction.compacting`` leaves meanwhile, as OpenAI streams it), and a failure
then is a ``response.failed``.

    create body -> new_job: parse (translate/request_models.py), history (history.py),
      conversation turn (conversations.py), fit (fitting/), server tools built and offered
      (tools/registry.py), the record, the turn locked
    -> Job (job.py), holding the turn and the tools: model turns and tool calls
      (turns.py), deadline, persistence
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from responses_gateway import ids
from responses_gateway.backends.base import Backend
from responses_gateway.config import Settings
from responses_gateway.heavy import heavy_items
from responses_gateway.platform import platform_for
from responses_gateway.responses import configuration, conversations, history
from responses_gateway.responses.fitting import fit
from responses_gateway.responses.fitting.compaction_bounds import CompactionLimits, Departure
from responses_gateway.responses.job import Compaction, Job
from responses_gateway.responses.local_feed import LocalFeed
from responses_gateway.store.base import Store, StoredResponse
from responses_gateway.tools import reads as tool_reads
from responses_gateway.tools.catalog import ToolCatalog
from responses_gateway.tools.registry import ServerTools, served_tool_types
from responses_gateway.translate import reasoning_context
from responses_gateway.translate.request import read_create
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.sealing import Sealer

logger = logging.getLogger("responses_gateway")

if TYPE_CHECKING:
    from responses_gateway.containers.service import Containers
    from responses_gateway.files.service import Files
    from responses_gateway.files.uploads import Uploads
    from responses_gateway.platform.base import Platform
    from responses_gateway.translate.request_models import CreateResponseRequest
    from responses_gateway.vectors.service import VectorStores

BackendFactory = Callable[[str], Backend]
#: limiter.py's token reservation for a record about to run (its JSON form, or None)
Reserve = Callable[[StoredResponse], Awaitable[dict[str, Any] | None]]


class Gateway:
    """Process-wide services a response needs: settings, store, backends, sealer, the
    platform that builds the other storage engines, and the live feed of the background
    responses this process runs."""

    def __init__(
        self, settings: Settings, store: Store, backend_for: BackendFactory, sealer: Sealer,
        *, platform: Platform | None = None,
    ) -> None:
        self.settings = settings
        #: the engines of the platform ``settings`` choose (platform/)
        self.platform = platform or platform_for(settings)
        self.store = store
        self.backend_for = backend_for
        self.sealer = sealer
        self.local_feed = LocalFeed()
        #: hosted tool types the gateway runs itself with these settings (tools/registry.py)
        self.served_tools = served_tool_types(settings)
        self.fitting = fit.Fitting(backend_for, sealer, windows=settings.context_windows,
                                   reasoning_input=settings.reasoning_input,
                                   vision=settings.vision_models,
                                   limits=CompactionLimits(
                                       calls=settings.max_compaction_calls,
                                       input_bytes=settings.max_compaction_input_bytes,
                                       seconds=settings.max_response_seconds))

    @cached_property
    def files(self) -> Files:
        """The Files API's storage, built on first use (a gateway that never serves files
        never imports its engines; api/file_routes.py uses this one). The Uploads API is
        built with it: its reclaim of expired Uploads joins the Files' own, so a tenant's
        expired parts give their bytes back before any write is refused for quota, whichever
        API this process served first."""
        files = self.platform.files()
        self.__dict__["uploads"] = self.platform.uploads(files)
        return files

    @cached_property
    def uploads(self) -> Uploads:
        """The Uploads API beside :attr:`files` (built with it)."""
        if "files" not in self.__dict__:
            self.files  # noqa: B018 - builds both
        uploads: Uploads = self.__dict__["uploads"]
        return uploads

    @cached_property
    def vector_stores(self) -> VectorStores:
        """The vector stores, built on first use: one instance for the routes and file_search
        (it owns the ingestion tasks)."""
        return self.platform.vector_stores(self.files)

    @cached_property
    def containers(self) -> Containers:
        """The Containers API and what runs code (code_interpreter, hosted shell), built on
        first use over the platform's engine; OpenAI's 501 when GATEWAY_CODE_INTERPRETER is
        unset (raised on every use: a failed build is not cached). ``file_ids`` come from
        :attr:`files` when this platform stores files."""
        from responses_gateway.errors import GatewayError
        from responses_gateway.platform.base import code_interpreter_off

        if self.settings.code_interpreter is None:
            raise code_interpreter_off()
        try:
            files: Files | None = self.files
        except GatewayError:
            files = None  # no file storage here (AWS without GATEWAY_FILES_BUCKET)
        return self.platform.containers(files)

    async def new_job(
        self, body: Any, tenant: str, *, cached: Mapping[str, StoredResponse] | None = None,
        generate: bool = True, client_left: Departure | None = None,
        reserve: Reserve | None = None,
    ) -> Job:
        """Validate and translate a create body; every client mistake raises a 4xx here.

        ``cached``: responses a WebSocket connection holds, found before the store (they may
        be ``store: false``). ``generate=False``: a warm-up, the model is not called.
        ``client_left``: resolves when the HTTP client leaves (stops a compaction, fitting/).
        ``reserve``: counts the request's estimated tokens against its key's limits before
        the upstream sees it (limiter.py; its 429 is raised here, nothing held after it).
        """
        started = time.time()  # the response's deadline counts from here (compaction too)
        # validated, ids minted, content as parts (a heavy body in a worker thread)
        req, given, heavy = await read_create(body, hosted_tools=self.settings.hosted_tools,
                                              served=self.served_tools)
        response_id = ids.new_id(ids.RESPONSE)  # its conversation turn's token starts with it
        items = await history.resolve_references(self.store, given, tenant)
        if req.store:  # its size: ~32 ms of JSON for 175,000 items (heavy.py)
            # Stored items named by reference weigh what they were stored with, not what the
            # body said: sized in a thread too (a new list means references were resolved).
            if heavy or items is not given:
                await asyncio.to_thread(self.store.check_input_items, items)
            else:
                self.store.check_input_items(items)
        earlier = await history.chain(self.store, req.previous_response_id, tenant, cached)
        turn = await conversations.begin(self.store, req, tenant, items, response_id)
        if turn is not None:  # ``conversation``: its items come before this turn's input
            earlier, turn.history = turn.history, []  # read here once: the job holds the turn
        turn_items = earlier + items
        # The newest configuration_update items set effort and format (configuration.py).
        configuration.apply_updates(req, turn_items)
        route = self.settings.route(req.model)
        # The turn's weight, decided once: each stage after this that walks all of it
        # (reads, render, compaction, truncation) does so in a worker thread when heavy.
        heavy = heavy_items(turn_items)
        # What the server tools' calls in it gave the model, this process's or the store's.
        reads = await tool_reads.gather(self.store, tenant, turn_items,
                                        self.settings.max_tool_output_bytes, heavy=heavy)
        # Rendered, and compacted or truncated to the model's window as asked (fitting/); a
        # foreground stream compacts after response.created (``pending``: the job runs it).
        defer = req.streaming and not req.background
        fitted = await self.fitting.fit(req, route, turn_items, tenant,
                                        new_catalog=ToolCatalog, left=client_left, reads=reads,
                                        defer=defer, heavy=heavy)
        chat, catalog = fitted.chat, fitted.catalog
        tools = await ServerTools.offered(
            chat, catalog, req.tools, req.tool_choice, items, earlier, self.settings, tenant,
            include=req.include or (), services=self, reads=reads)
        try:
            record = self._record(req, response_id, tenant, items, route.backend, fitted,
                                  catalog, tools, turn_items, turn)
            if turn is not None:
                await turn.lock()  # the request is ready: hold the conversation till it ends
            # (a deferred compaction's record is reserved once compacted: _compacted)
            if (reserve is not None and generate and fitted.pending is None
                    and record.request["model_runs"] is not False):
                try:
                    reserved = await reserve(record)
                except BaseException:
                    if turn is not None:
                        await turn.release()
                    raise
                if reserved is not None:  # settled when the response is counted
                    record.request["reserved"] = reserved
        except BaseException:
            if tools is not None:
                await tools.aclose()
            raise
        if tools is not None and req.background:
            await tools.aclose()  # the worker builds them again (it may run in another process)
            tools = None
        job = Job(self, record, stream=req.streaming, store=req.store, tools=tools,
                  conversation=turn, generate=generate, started_at=started)
        if fitted.pending is not None:
            job.compaction = Compaction(fitted.pending.item_id, partial(
                self._compacted, req, record, fitted.pending, tools,
                reserve if generate else None))
        return job

    async def _compacted(self, req: CreateResponseRequest, record: StoredResponse,
                         pending: fit.Pending, tools: ServerTools | None,
                         reserve: Reserve | None) -> None:
        """A streamed create's deferred compaction (fitting/, ``pending``) run, and the record
        made again of what it left, as :meth:`new_job` makes it: the chat body with the server
        tools offered, the compaction item and what it cost; then its tokens reserved
        (limiter.py). Its failures are the job's: the response fails with them."""
        fitted = await pending.run()
        chat, catalog = fitted.chat, fitted.catalog
        if tools is not None:
            tools.offer(chat, catalog, req.tool_choice)
        record.request.update({
            "chat": chat, "message_params": fitted.message_params,
            "output_items": fitted.output_items, "output_usage": fitted.usage,
            "tools": catalog.to_record(),
        })
        if reserve is not None and record.request["model_runs"] is not False:
            reserved = await reserve(record)
            if reserved is not None:
                record.request["reserved"] = reserved

    def _record(
        self, req: CreateResponseRequest, response_id: str, tenant: str,
        items: list[dict[str, Any]], backend: str, fitted: fit.Fitted, catalog: ToolCatalog,
        tools: ServerTools | None, conversation: list[dict[str, Any]],
        turn: conversations.Turn | None,
    ) -> StoredResponse:
        """The response's record, whole: its Response as created, what the job (here or in a
        worker) needs to run it, and the conversation turn it holds (``turn``)."""
        reasoning_input = self.backend_for(backend).reasoning_input(self.settings.reasoning_input)
        echo = req.echo(reasoning_input)
        if req.reasoning_context is not None:  # what ``current_turn`` kept from the model
            echo["input_transformations"] = reasoning_context.withheld(
                conversation, echo["reasoning"]["context"])
        response = new_response(
            echo,
            response_id=response_id,
            created_at=int(time.time()),
            status="queued" if req.background else "in_progress",
        )
        seal = partial(self.sealer.seal, tenant=tenant)
        request: dict[str, Any] = {
            "chat": fitted.chat,
            "backend": backend,
            "options": {
                "summary": bool(req.summary),
                "logprobs": req.wants_logprobs,
                "encrypted_reasoning": req.wants_encrypted_reasoning,
            },
            "sealed_reasoning": {},
            "message_params": fitted.message_params,
            "output_items": fitted.output_items,  # made before the model runs (compaction)
            "output_usage": fitted.usage,  # what making them cost (summarising calls)
            "model_runs": fitted.model_runs,  # False: a compaction_trigger's response
            "prewarm": req.prewarm,  # warm the prompt cache, generate nothing (job.py)
            "tools": catalog.to_record(),  # chat function name -> what it stands for
            # server tools (tools/registry.py): their state, secrets sealed
            "server_tools": tools.to_record(seal) if tools else None,
        }
        if turn is not None:  # the turn it holds (locked once the record is made)
            request["conversation"] = turn.held
            response["conversation"] = {"id": turn.conversation_id}
        return StoredResponse(
            id=response_id,
            tenant=tenant,
            response=response,
            request=request,
            input_items=items,
            previous_response_id=req.previous_response_id,
            background=req.background,
            expires_at=int(time.time()) + self.settings.retention_days * 86400,
        )

    async def resolve_references(
        self, items: list[dict[str, Any]], tenant: str, param: str = "input"
    ) -> list[dict[str, Any]]:
        return await history.resolve_references(self.store, items, tenant, param)

    async def aclose(self) -> None:
        await self.local_feed.stop_all()  # background responses running here
        # what was built on first use: ingestion tasks (and their extraction children) end
        # before the files they read, the embedder's and engines' connections close
        # containers first: their engine's processes end (no sandbox outlives the gateway)
        for name in ("containers", "vector_stores", "uploads", "files"):
            service = self.__dict__.get(name)
            if service is not None:
                try:
                    await service.aclose()
                except Exception:
                    logger.exception("closing the %s failed", name.replace("_", " "))
        aclose = getattr(self.backend_for, "aclose", None)
        if aclose is not None:
            await aclose()
        bookkeeping = sys.modules.get("responses_gateway.store.bookkeeping")
        if bookkeeping is not None:  # usage writes waiting for a retry, before the store goes
            await bookkeeping.drain()
        await self.store.aclose()


__all__ = ["Gateway", "Job"]

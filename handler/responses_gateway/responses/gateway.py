"""One response from a validated request to its terminal event.

The only place that connects request translation, a backend, the stream state machine and the
store. The HTTP surface (foreground, streaming or not) and the background worker both run
responses through :class:`Job`, so they cannot disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from responses_gateway import ids
from responses_gateway.backends.base import Backend, BackendRequest
from responses_gateway.config import Settings
from responses_gateway.errors import GatewayError, invalid_request, not_found
from responses_gateway.observability import ResponseMetrics
from responses_gateway.responses import conversations
from responses_gateway.responses.fitting import fit
from responses_gateway.store.base import CancelledError as StoreCancelled
from responses_gateway.store.base import Store, StoredResponse, StoreUnavailable
from responses_gateway.tools.catalog import ToolCatalog, catalog_of, specs_from_record
from responses_gateway.translate.request_models import (
    CreateResponseRequest,
    McpTool,
    ToolChoiceMcp,
    normalize_input,
    parse_create_request,
)
from responses_gateway.translate.response_object import new_response, response_error
from responses_gateway.translate.sealing import Sealer, with_sealed_reasoning
from responses_gateway.translate.stream import Event, ResponseTranslator, TranslateOptions
from responses_gateway.translate.to_chat import client_param, turn_messages
from responses_gateway.translate.upstream_sse import Chunk

if TYPE_CHECKING:  # tools/mcp.py (and the mcp SDK) load only for requests with MCP tools
    from responses_gateway.tools.mcp import McpTools

logger = logging.getLogger("responses_gateway")
MAX_ITEM_REFERENCES = 1000
#: Model turns with tool calls the gateway runs in one response, at most (a model that never
#: stops calling tools ends there, with what it produced; max_tool_calls bounds it sooner).
MAX_TOOL_TURNS = 64
BackendFactory = Callable[[str], Backend]


class Gateway:
    """Process-wide services a response needs: settings, store, backends, sealer."""

    def __init__(
        self, settings: Settings, store: Store, backend_for: BackendFactory, sealer: Sealer
    ) -> None:
        self.settings = settings
        self.store = store
        self.backend_for = backend_for
        self.sealer = sealer

    async def prepare(
        self, body: Any, tenant: str, *, cached: Mapping[str, StoredResponse] | None = None
    ) -> Job:
        """Validate and translate a create body; every client mistake raises a 4xx here.

        ``cached``: responses a WebSocket connection holds, found before the store (they may
        be ``store: false``).
        """
        req = parse_create_request(body, hosted_tools=self.settings.hosted_tools)
        items = await self._resolve_references(normalize_input(req), tenant)
        if req.store:
            self.store.check_input_items(items)
        history = await self._history(req.previous_response_id, tenant, cached)
        turn = await conversations.begin(self.store, req, tenant, items)
        if turn is not None:  # ``conversation``: its items come before this turn's input
            history = turn.history
        route = self.settings.route(req.model)
        reasoning_input = "reasoning_content" if route.backend == "bedrock" else (
            self.settings.reasoning_input
        )
        # Rendered, and compacted or truncated to the model's window as asked (context.py).
        fitted = await fit.fit(self, req, route, history + items, tenant, reasoning_input,
                                   new_catalog=ToolCatalog)
        chat, message_params, catalog = fitted.chat, fitted.message_params, fitted.catalog
        tools = await self._mcp_tools(req, chat, catalog, history, items, tenant)
        response_id = ids.new_id(ids.RESPONSE)
        response = new_response(
            req.echo(),
            response_id=response_id,
            created_at=int(time.time()),
            status="queued" if req.background else "in_progress",
        )
        record = StoredResponse(
            id=response_id,
            tenant=tenant,
            response=response,
            request={
                "chat": chat,
                "backend": route.backend,
                "options": _options_of(req),
                "sealed_reasoning": {},
                "message_params": message_params,
                "output_items": fitted.output_items,  # made before the model runs (compaction)
                "tools": catalog.to_record(),  # chat function name -> what it stands for
                # MCP servers (tools/mcp.py): their tools, approvals, headers sealed
                "mcp": tools.to_record(partial(self.sealer.seal, tenant=tenant)) if tools else None,
            },
            input_items=items,
            previous_response_id=req.previous_response_id,
            background=req.background,
            expires_at=int(time.time()) + self.settings.retention_days * 86400,
        )
        try:
            if turn is not None:
                await turn.lock(record)  # the request is ready: hold the conversation till it ends
        except BaseException:
            if tools is not None:
                await tools.aclose()
            raise
        if tools is not None and req.background:
            await tools.aclose()  # the worker connects again (it may run in another process)
            tools = None
        return Job(self, record, stream=req.streaming, store=req.store, tools=tools)

    async def _mcp_tools(
        self, req: CreateResponseRequest, chat: dict[str, Any], catalog: ToolCatalog,
        history: list[dict[str, Any]], items: list[dict[str, Any]], tenant: str,
    ) -> McpTools | None:
        """The request's MCP servers listed (or their listing found in the conversation),
        their tools offered to the model; a server that cannot be listed is OpenAI's 424."""
        wanted = [tool for tool in req.tools or () if isinstance(tool, McpTool)]
        if not wanted:
            return None
        from responses_gateway.tools.mcp import Limits, McpTools

        tools = McpTools.of(wanted, Limits.of(self.settings))
        tools.find_approval(items, history)
        await tools.list_all([*history, *items])
        for label, function in tools.functions():
            catalog.add_mcp(label, function)
        chat["tools"] = catalog.chat_tools
        choice = req.tool_choice
        if isinstance(choice, ToolChoiceMcp) and choice.name is not None:
            offered = {(label, function["name"]) for label, function in tools.functions()}
            if (choice.server_label, choice.name) not in offered:
                raise invalid_request(
                    f"Tool choice '{choice.name}' is not a tool of MCP server "
                    f"'{choice.server_label}'.",
                    param="tool_choice.name", code="invalid_value",
                )
            chat["tool_choice"] = {"type": "function", "function": {
                "name": catalog.chat_name("mcp", choice.name, choice.server_label)}}
        if not chat["tools"]:  # chat servers refuse an empty tool list and what goes with it
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                chat.pop(key, None)
        return tools

    async def aclose(self) -> None:
        feed = getattr(self, "local_feed", None)  # background responses running here
        if feed is not None:
            await feed.stop_all()
        aclose = getattr(self.backend_for, "aclose", None)
        if aclose is not None:
            await aclose()
        await self.store.aclose()

    def job_for(self, record: StoredResponse) -> Job:
        """A job for a stored (background) record, in whichever process runs it."""
        return Job(self, record, stream=True, store=True)

    async def _resolve_references(
        self, items: list[dict[str, Any]], tenant: str
    ) -> list[dict[str, Any]]:
        wanted = [item["id"] for item in items if item.get("type") == "item_reference"]
        if not wanted:
            return items
        if len(set(wanted)) > MAX_ITEM_REFERENCES:  # each one is a store lookup
            raise invalid_request(
                f"Too many item references: {len(set(wanted))}; at most {MAX_ITEM_REFERENCES} "
                "per request.",
                param="input",
            )
        found = await self.store.get_items(wanted, tenant)
        resolved = []
        for index, item in enumerate(items):
            if item.get("type") != "item_reference":
                resolved.append(item)
            elif item["id"] in found:
                resolved.append(found[item["id"]])
            else:
                raise not_found(f"Item with id '{item['id']}' not found.", param=f"input[{index}]")
        return resolved

    async def _history(
        self,
        previous_id: str | None,
        tenant: str,
        cached: Mapping[str, StoredResponse] | None = None,
    ) -> list[dict[str, Any]]:
        """Inputs and outputs of every earlier turn, oldest first (instructions not inherited)."""
        chain: list[StoredResponse] = []
        seen: set[str] = set()
        while previous_id and previous_id not in seen:
            seen.add(previous_id)
            record = cached.get(previous_id) if cached else None
            if record is None:
                record = await self.store.get(previous_id, tenant)
            if record is None:
                # OpenAI answers 400 here, not 404 (the id is a parameter, not the resource).
                raise invalid_request(
                    f"Previous response with id '{previous_id}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            chain.append(record)
            previous_id = record.previous_response_id
        history: list[dict[str, Any]] = []
        for record in reversed(chain):
            history.extend(record.input_items)
            history.extend(with_sealed_reasoning(record.response.get("output", ()),
                                                 record.request.get("sealed_reasoning") or {}))
        return history


class Job:
    """One response being produced. ``batches()`` is the whole lifecycle, terminal included."""

    def __init__(
        self, gateway: Gateway, record: StoredResponse, *, stream: bool, store: bool,
        tools: McpTools | None = None,
    ):
        self.gateway = gateway
        self.record = record
        self.store = store
        options = record.request["options"]
        #: MCP servers whose tools this response runs between model turns (tools/mcp.py)
        self.tools = tools if tools is not None else _tools_of(gateway, record)
        self.translator = ResponseTranslator(
            record.response,
            TranslateOptions(
                summary=options["summary"],
                logprobs=options["logprobs"],
                encrypted_reasoning=options["encrypted_reasoning"],
                seal=partial(gateway.sealer.seal, tenant=record.tenant),
                tools=specs_from_record(record.request.get("tools")),
            ),
        )
        chat = dict(record.request["chat"])
        if not stream:
            chat["stream"] = False
            chat.pop("stream_options", None)
        elif not chat.get("stream"):  # a background job streams, whatever its client asked
            chat["stream"] = True
            chat["stream_options"] = {"include_usage": True}
        self.backend = gateway.backend_for(record.request["backend"])
        self.backend_request = BackendRequest(body=chat, tenant=record.tenant, stream=stream)
        self.metrics = ResponseMetrics(
            record.id, record.response.get("model") or "", stream=stream, content=chat
        )
        self._chunks: AsyncIterator[list[Chunk]] | None = None
        self._first: asyncio.Future[list[Chunk]] | None = None
        self.conversation = conversations.turn_of(gateway.store, record)
        # The deadline: when, and the failure it becomes (see ``set_deadline``).
        self._deadline = float("inf")
        self._deadline_error: GatewayError | None = None
        self._expired = False  # the deadline passed
        self._task: asyncio.Task[Any] | None = None  # the task running batches()
        self._waiting = False  # it awaits the upstream (or a tool): the deadline may cancel it
        limit = gateway.settings.max_response_seconds
        if limit > 0:
            self.set_deadline(time.time() + limit, GatewayError(
                504,
                f"The response took longer than this gateway allows ({limit:g} s, "
                "GATEWAY_MAX_RESPONSE_SECONDS); the output so far is kept.",
                type="server_error", code="response_timeout",
            ))

    def set_deadline(self, when: float, error: GatewayError) -> None:
        """End the response ``failed`` with ``error`` at ``when`` (epoch seconds), partial
        output kept, if it has not ended by then; the earliest deadline set wins.

        An upstream that sends only keep-alive comments never trips the read timeout; this
        bounds the whole response instead (a Lambda would otherwise be killed mid-stream, with
        nothing stored). One timer per response: while the job waits for the upstream it is
        interrupted there; while it waits for its consumer, the next batch ends it.
        """
        if when < self._deadline:
            self._deadline, self._deadline_error = when, error

    @property
    def response(self) -> dict[str, Any]:
        return self.translator.response

    async def prepare(self) -> None:
        """The backend's local work before the upstream call (see ``backends.base``)."""
        prepare = getattr(self.backend, "prepare", None)
        if prepare is not None:
            try:
                await prepare(self.backend_request)
            except GatewayError as exc:
                raise self._client_param(exc) from None

    def open(self) -> asyncio.Future[list[Chunk]]:
        """Send the request upstream; the future resolves with the first chunks.

        An UpstreamError from it happened before any output: within a grace period it can
        still be an HTTP error. Calls the client approved run first (``batches``), and the
        model after them: then the future is resolved at once, with nothing.
        """
        if self._first is None:
            if self.conversation is not None:
                self.conversation.keep()  # the turn's lock outlives any long response
            if self.tools is not None and self.tools.approved:
                self._first = asyncio.get_running_loop().create_future()
                self._first.set_result([])
            else:
                self._start_turn()
        assert self._first is not None
        return self._first

    def _start_turn(self) -> None:
        """One model turn: the chat request (as it stands) upstream."""
        self._chunks = self.backend.stream(self.backend_request)
        self._first = asyncio.ensure_future(self._first_chunk())

    async def _first_chunk(self) -> list[Chunk]:
        assert self._chunks is not None
        try:
            return await anext(self._chunks)
        except GatewayError as exc:
            raise self._client_param(exc) from None

    def _client_param(self, exc: GatewayError) -> GatewayError:
        """A backend names chat messages (``messages[2].content[0]``); the client sent input."""
        return client_param(exc, self.record.request.get("message_params") or ())

    async def batches(self) -> AsyncIterator[list[Event]]:
        """``response.created`` first, then everything up to exactly one terminal event.

        Events come in batches, never empty: those one upstream read produced leave together
        (one socket write to a streaming client), which under load is many per read. The
        stored record is written before the terminal event leaves (read-your-writes). If the
        consumer goes away, the upstream request is closed and the record still ends in a
        true state (``cancelled``).
        """
        translator = self.translator
        metrics = self.metrics
        feed = translator.feed
        first = self.open()
        pending: list[Event] = []  # produced but not sent yet: a failure mid-batch keeps them
        timer = self._arm_deadline()
        self._task = asyncio.current_task()
        tools = self.tools
        try:
            started = translator.start()
            for item in self.record.request.get("output_items") or ():
                started += translator.add_finished_item(item)
            if tools is not None:  # the servers listed for this response (Gateway.prepare)
                for listed in tools.listed:
                    started += translator.mcp_list_tools_start(listed["server_label"])
                    started += translator.mcp_list_tools_end(listed["tools"])
            yield started
            turn_start = len(translator.response["output"])
            if tools is not None and tools.approved:  # approved last time: they run first
                for approved in tools.approved:
                    pending += translator.mcp_call_start(
                        approved.label, approved.name, approved.arguments,
                        approval_request_id=approved.approval_request_id)
                    events, pending = pending, []
                    yield events
                    result = await self._upstream(
                        tools.call(approved.label, approved.name, approved.arguments))
                    pending += translator.mcp_call_end(*result)
                events, pending = pending, []
                yield events
                first = await self._next_turn(turn_start)
                turn_start = len(translator.response["output"])
            turns = 0
            while True:  # one model turn, then the calls the gateway runs, while it has any
                try:
                    # shield: a cancelled consumer must not cancel ``first`` itself (anyio
                    # repeats a cancel, which would break httpx's shielded connection close);
                    # close() does.
                    chunks: list[Chunk] | None = await self._upstream(asyncio.shield(first))
                except StopAsyncIteration:
                    chunks = None
                source = self._chunks
                assert source is not None
                while chunks is not None:
                    for chunk in chunks:
                        pending += feed(chunk)
                        if translator.done:  # an upstream error chunk ended it
                            break
                    if pending:
                        if metrics.waiting:
                            metrics.first_content()
                        if translator.done:
                            pending = await self._stored(pending)
                        events, pending = pending, []
                        yield events
                    if translator.done:
                        break
                    if self._expired:  # the deadline passed while the consumer had the batch
                        raise self._deadline_error  # type: ignore[misc]
                    self._waiting = True  # as _upstream does, inline: this is per batch
                    try:
                        chunks = await anext(source)
                    except StopAsyncIteration:
                        chunks = None
                    except asyncio.CancelledError:
                        error = self._deadline_failure()
                        if error is None:
                            raise
                        raise error from None
                    finally:
                        self._waiting = False
                if translator.done or tools is None or not translator.wants_tool_turn:
                    break
                # The model called tools the gateway runs: their items, then the next turn.
                pending += translator.end_turn()
                stop = translator.client_calls > 0  # the client must answer its own calls
                ran = 0
                for call in translator.server_calls:
                    label, name = call.spec.namespace or "", call.spec.name
                    if tools.limit_reached(self.record.response.get("max_tool_calls")):
                        continue  # max_tool_calls: no more calls (and no more MCP tools)
                    ran += 1
                    if tools.needs_approval(label, name):
                        pending += translator.mcp_approval_request(label, name, call.arguments)
                        stop = True  # the response ends; the next request approves or not
                        continue
                    pending += translator.mcp_call_start(label, name, call.arguments)
                    events, pending = pending, []
                    yield events
                    result = await self._upstream(tools.call(label, name, call.arguments))
                    pending += translator.mcp_call_end(*result)
                if pending:
                    events, pending = pending, []
                    yield events
                turns += 1
                if stop or not ran or turns >= MAX_TOOL_TURNS:
                    break  # (a model that calls past max_tool_calls is not asked again)
                first = await self._next_turn(turn_start)
                turn_start = len(translator.response["output"])
            if not translator.done:
                yield await self._stored(translator.finish())
        except (StoreUnavailable, StoreCancelled):
            raise  # the store's own verdicts: a 503, or a background job that must stop
        except GatewayError as exc:
            # An upstream failure, or a backend refusing part of the request (a Bedrock
            # image it cannot fetch) after the stream had started: the response fails.
            if translator.done:
                return
            if exc.code == "upstream_connection_closed" and translator.finish_reason:
                ending = translator.finish()  # closed early, but after the model had finished
            else:
                ending = translator.fail(exc.code or "upstream_error", exc.message)
            yield await self._stored(pending + ending)
        except Exception:
            logger.exception("response %s failed inside the gateway", self.record.id)
            if translator.done:
                return
            yield await self._stored(pending + translator.fail(
                "server_error", "The gateway failed while producing this response."
            ))
        finally:
            if timer is not None:
                timer.cancel()
            if not translator.done:
                # The consumer went away (client disconnect, cancellation): stop for real.
                translator.cancel()
                await _shielded(self.persist())
            await _shielded(self.close())

    async def _next_turn(self, since: int) -> asyncio.Future[list[Chunk]]:
        """The next model turn: the chat request gets this turn's output (its text, reasoning
        and the calls the gateway ran with their results) and goes upstream again."""
        translator = self.translator
        translator.next_turn()
        items = with_sealed_reasoning(translator.response["output"][since:],
                                      translator.sealed_reasoning)
        reasoning_input = "reasoning_content" if self.record.request["backend"] == "bedrock" else (
            self.gateway.settings.reasoning_input)
        added = turn_messages(
            items, catalog=catalog_of(translator.options.tools or {}),
            reasoning_input=reasoning_input,
            unseal=partial(self.gateway.sealer.unseal, tenant=self.record.tenant),
        )
        body = self.backend_request.body
        messages = body["messages"] = list(body["messages"])  # the record's own stays as it was
        last = messages[-1] if messages else None
        if (added and last is not None and last.get("role") == "assistant"
                and not last.get("tool_calls") and added[0].get("role") == "assistant"
                and not added[0].get("content")):
            # Calls approved in the previous response belong to its last assistant turn.
            messages[-1] = {**last, **{k: v for k, v in added[0].items() if v is not None}}
            added = added[1:]
        messages.extend(added)
        if body.get("tool_choice") not in (None, "auto", "none"):
            # A forced choice ("required", one tool) is for the first model turn: forced
            # again, the model could never answer after the tools it called have run.
            body["tool_choice"] = "auto"
        if self.tools is not None and self.tools.limit_reached(
                self.record.response.get("max_tool_calls")):
            specs = translator.options.tools or {}
            kept = [t for t in body.get("tools") or ()
                    if getattr(specs.get(t["function"]["name"]), "kind", None) != "mcp"]
            body["tools"] = kept
            if not kept:
                for key in ("tools", "tool_choice", "parallel_tool_calls"):
                    body.pop(key, None)
        chunks, self._chunks = self._chunks, None
        if chunks is not None:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        self._start_turn()
        assert self._first is not None
        return self._first

    def seconds_left(self) -> float | None:
        """Until the deadline (None: none is set)."""
        if self._deadline_error is None:
            return None
        return max(0.0, self._deadline - time.time())

    def _arm_deadline(self) -> asyncio.TimerHandle | None:
        if self._deadline_error is None:
            return None
        loop = asyncio.get_running_loop()
        return loop.call_at(loop.time() + self._deadline - time.time(), self._expire)

    def _expire(self) -> None:
        self._expired = True
        if self._waiting and self._task is not None:
            self._task.cancel()  # the wait turns it into the deadline's failure (_deadline_failure)

    def _deadline_failure(self) -> GatewayError | None:
        """After a CancelledError in a wait: the deadline's failure if the deadline sent it,
        None if the cancel is another's (the client left, the process stops)."""
        task = self._task
        if not self._expired or task is None or task.uncancel() > 0:
            return None
        return self._deadline_error

    async def _upstream(self, awaitable: Awaitable[Any]) -> Any:
        """Await the upstream's first chunks, or a tool, where the deadline can interrupt.

        (The per-batch wait in ``batches()`` does the same inline: no coroutine per batch.)
        """
        if self._expired:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # never awaited: no "never awaited" warning
            raise self._deadline_error  # type: ignore[misc]
        if self._task is None:
            self._task = asyncio.current_task()
        self._waiting = True
        try:
            return await awaitable
        except asyncio.CancelledError:
            error = self._deadline_failure()
            if error is None:
                raise
            raise error from None
        finally:
            self._waiting = False

    async def run_to_end(self) -> dict[str, Any]:
        """Consume every event; the final Response object (non-stream requests)."""
        async for _ in self.batches():
            pass
        return self.response

    async def close(self) -> None:
        if self.conversation is not None and not self.record.background:
            await self.conversation.release()  # ended before its terminal write: let go
        if self.tools is not None:
            await self.tools.aclose()
        first, chunks = self._first, self._chunks
        self.metrics.finish(self.translator.response, first)
        if first is not None and not first.done():
            first.cancel()
            await asyncio.wait({first})  # the backend closes its upstream response on cancel
        if first is not None and first.done() and not first.cancelled():
            first.exception()  # retrieved: no "exception was never retrieved" warning
        if chunks is not None:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await aclose()  # the stream may already be dead; closing is best effort

    async def _stored(self, events: list[Event]) -> list[Event]:
        """Persist, then let ``events`` (the last one terminal) leave.

        When the store fails for good a stream cannot take back what it sent, so its terminal
        event becomes ``response.failed`` (nothing was stored: the client must not be told
        ``completed``); a non-stream request raises, which is a 503.
        """
        try:
            await self.persist()
        except StoreUnavailable as exc:
            if not self.backend_request.stream or not events:
                raise
            response = self.translator.response
            response.update(
                status="failed",
                completed_at=None,
                incomplete_details=None,
                error=response_error(exc.code or "store_unavailable", exc.message),
            )
            seq = events[-1]["sequence_number"]
            events[-1] = {"type": "response.failed", "response": response, "sequence_number": seq}
        return events

    async def persist(self) -> None:
        """Write the record before the terminal event leaves (background jobs replace this)."""
        record = self.record if self.store else None
        if record is not None:
            record.request["sealed_reasoning"] = self.translator.sealed_reasoning
        if self.conversation is not None:  # the record lands with the turn's append in one
            await self.conversation.finish(self, record)  # write: if it fails, neither does
        elif record is not None:
            await self.gateway.store.put(record)


def _options_of(req: CreateResponseRequest) -> dict[str, bool]:
    return {
        "summary": bool(req.summary),
        "logprobs": req.wants_logprobs,
        "encrypted_reasoning": req.wants_encrypted_reasoning,
    }


def _tools_of(gateway: Gateway, record: StoredResponse) -> McpTools | None:
    """The MCP servers a stored response runs (a background worker's job)."""
    data = record.request.get("mcp")
    if not data:
        return None
    from responses_gateway.tools.mcp import Limits, McpTools

    return McpTools.from_record(data, Limits.of(gateway.settings),
                                partial(gateway.sealer.unseal, tenant=record.tenant))


async def _shielded(awaitable: Awaitable[None]) -> None:
    """Finish cleanup even when the surrounding task is being cancelled."""
    with anyio.CancelScope(shield=True):
        await awaitable


__all__ = ["Gateway", "Job"]

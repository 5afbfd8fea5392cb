"""``file_search`` as a server tool (tools/server.py): the model gets one chat function,
``file_search(queries)``; each call is one ``file_search_call`` item with OpenAI's events
(``response.file_search_call.in_progress``, ``.searching`` before the stores are asked,
``.completed``), its ``results`` only when ``include`` has ``file_search_call.results``.

The stores are the gateway's (``Gateway.vector_stores``, the same instance as the
``/v1/vector_stores`` routes): each is checked before the response starts (another tenant's
store, or none, is the 404 of the Vector Stores API), and searched with the same call as
``POST /v1/vector_stores/{id}/search``. A search that fails (the embedding model is down, the
store was deleted meanwhile) is the item's ``failed`` status; the model reads why.

What the model read (numbered passages, passages.py) is the response's ``reads``: the next
model turn reads it, and tools/reads.py keeps it by tenant and ``file_search_call`` id, in this
process and, for a stored response, in the store with it, so a later request in any process
gives the model the same passages. An earlier call whose passages are not kept reads as its
``results`` when the item has them, else as a search to run again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.file_search import CALL_ID_PREFIX
from responses_gateway.tools.file_search.options import Options
from responses_gateway.tools.file_search.passages import Citations, earlier_results, search
from responses_gateway.tools.server import (
    Event,
    HistoryCall,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
)
from responses_gateway.vectors.filters import FilterLimits

KIND = "file_search"
FUNCTION = "file_search"
MAX_QUERIES = 5


class FileSearchTool(ServerTool):
    """``file_search`` for one response: its options, the stores, the passages returned."""

    kind = KIND

    def __init__(self, options: Options, stores: Any) -> None:
        self.options = options
        self.stores = stores  # vectors.service.VectorStores
        self.citations = Citations()
        self.read: dict[str, str] = {}  # what each call gave the model, by file_search_call id

    # -- building ------------------------------------------------------------------------------

    @classmethod
    async def for_request(cls, request: RequestTools) -> FileSearchTool:
        if len(request.tools) > 1:
            raise invalid_request("Only one 'file_search' tool may be given.",
                                  param="tools", code="invalid_value")
        index = request.indexes[0] if request.indexes else 0
        options = Options.of(request.tools[0], f"tools[{index}]", request.include,
                             request.tenant, FilterLimits.of(request.settings))
        stores = request.services.vector_stores
        for store_id in options.vector_store_ids:
            try:
                await stores.get(request.tenant, store_id)
            except GatewayError as error:
                if error.status == 404:
                    error.param = f"{options.param}.vector_store_ids"
                raise
        return cls(options, stores)

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return [(None, {
            "name": FUNCTION,
            "description": "Search the files the user provided for passages relevant to a "
                           "question. Returns numbered passages, each with its file's name. "
                           "Cite the passages you use by their marker, e.g. [^1].",
            "parameters": {
                "type": "object",
                "properties": {"queries": {
                    "type": "array", "items": {"type": "string"}, "minItems": 1,
                    "maxItems": MAX_QUERIES,
                    "description": "One or more search queries (keywords or a question)."}},
                "required": ["queries"], "additionalProperties": False},
        })]

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "file_search"}``: the model searches first."""
        kind = choice.get("type") if isinstance(choice, Mapping) else getattr(choice, "type", None)
        if kind != KIND:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, FUNCTION)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {"options": self.options.to_record()}  # no secret

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> FileSearchTool:
        return cls(Options.from_record(dict(data.get("options") or {})),
                   rebuild.services.vector_stores)

    # -- running -------------------------------------------------------------------------------

    async def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        # within what a search takes (GATEWAY_MAX_SEARCH_QUERIES), should it be below 5
        queries = _queries(call.arguments)[:self.stores.search_limits.queries]
        item_id = ids.new_id(CALL_ID_PREFIX)
        events = items.start_tool_item(
            {"id": item_id, "type": "file_search_call", "status": "in_progress",
             "queries": queries, "results": None}, "response.file_search_call.in_progress")
        item = items.tool_item
        assert item is not None
        item["status"] = "searching"
        events.append(items.tool_item_event("response.file_search_call.searching"))
        yield events
        options = self.options
        try:
            if not queries:
                raise invalid_request("The search has no query.")
            found = await search(self.stores, options.tenant, options.vector_store_ids,
                                 options.search_body(queries), options.max_num_results)
        except GatewayError as failure:
            self.read[item_id] = (f"The file search failed: {failure.message} Go on without "
                                  f"it, or try other queries.")
            yield items.end_tool_item("failed", None)
            return
        self.read[item_id] = self.citations.read(queries, found)
        if options.include_results:
            item["results"] = [passage.result() for passage in found]
        yield items.end_tool_item("completed", "response.file_search_call.completed")

    def annotate(self, text: str) -> list[dict[str, Any]]:
        return self.citations.annotate(text)

    def reads(self) -> dict[str, str]:
        return self.read

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> FileSearchHistory:
        return FileSearchHistory(reads)


def _queries(arguments: str) -> list[str]:
    """The model's queries (``queries``, or a lone ``query`` some models write)."""
    try:
        parsed = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return []
    if not isinstance(parsed, dict):
        return []
    value = parsed.get("queries", parsed.get("query"))
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [q.strip()[:1000] for q in values if isinstance(q, str) and q.strip()][:MAX_QUERIES]


class FileSearchHistory:
    """A ``file_search_call`` as the model reads it: the call, and the passages it read
    (``reads``, else its kept ``results``), else a search to run again."""

    def __init__(self, reads: Mapping[str, str]) -> None:
        self.reads = reads

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        call_id, queries = item.get("id"), item.get("queries")
        if not isinstance(call_id, str) or not isinstance(queries, list):
            raise invalid_request(
                "A 'file_search_call' item needs 'id' and 'queries'.", param=param)
        output = self.reads.get(call_id)
        if output is None:
            output = earlier_results(item.get("results")) or (
                "This file search failed." if item.get("status") == "failed" else
                "This file search ran in an earlier response; its passages are no longer at "
                "hand (search again to read and cite them).")
        arguments = orjson.dumps({"queries": [q for q in queries if isinstance(q, str)]})
        return HistoryCall(call_id, ToolSpec(KIND, FUNCTION), arguments.decode(), output)

"""A tiny server tool that lives only in the tests: ``lookup`` (alias ``lookup_preview``), which
"looks a word up" and answers with its length. It is declared the way a real tool's package
declares itself (tools/declaration.py) and registered with ``registry.register``, so a test can
show that the registration alone makes its item type, id prefix, ``include`` value,
``tool_choice`` and ``tool_usage`` appear, with no other module of the gateway touched.

Turned on by ``LOOKUP_ON=1`` in the environment (its ``needs``): off, it is a hosted tool, and
the refusal under GATEWAY_HOSTED_TOOLS=reject names what turns it on.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import orjson

from responses_gateway import ids
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.declaration import ItemType, Registration
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

KIND = "lookup"
ITEM = "lookup_call"
RESULTS = "lookup_call.results"


def _on(settings: Any) -> bool:
    return os.environ.get("LOOKUP_ON") == "1"


REGISTRATION = Registration(
    kind=KIND,
    tool_types=(KIND, "lookup_preview"),
    items=(ItemType(ITEM, "lk_", input_fields="tests.helpers.fake_server_tool:INPUT_FIELDS"),),
    target="tests.helpers.fake_server_tool:LookupTool",
    needs=_on,
    choices={KIND: KIND, "lookup_preview": KIND},
    includes=(RESULTS,),
    tool_usage={"lookup": {"num_requests": 0}},
    enabled_by="LOOKUP_ON=1 is set",
)

#: a ``lookup_call`` sent back as input: its word is required, its status one of these
INPUT_FIELDS: dict[str, tuple[Any, Any]] = {
    "word": (str, ...),
    "status": (Literal["completed", "failed"] | None, None),
}


class LookupTool(ServerTool):
    kind = KIND

    def __init__(self, include_results: bool) -> None:
        self.include_results = include_results

    @classmethod
    async def for_request(cls, request: RequestTools) -> LookupTool:
        return cls(RESULTS in request.include)

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return [(None, {"name": KIND, "description": "Look a word up.", "parameters": {
            "type": "object", "properties": {"word": {"type": "string"}},
            "required": ["word"]}})]

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        kind = getattr(choice, "type", None)
        if kind not in REGISTRATION.choices:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, KIND, None)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {"include_results": self.include_results}

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> LookupTool:
        return cls(bool(data.get("include_results")))

    async def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        word = str(orjson.loads(call.arguments or "{}").get("word", ""))
        item: dict[str, Any] = {"id": ids.new_id("lk_"), "type": ITEM, "status": "in_progress",
                                "word": word}
        yield items.start_tool_item(item, None)
        if self.include_results:
            item["results"] = [{"word": word, "length": len(word)}]
        call.usage = {"lookup": {"num_requests": 1}}
        yield items.end_tool_item("completed", None)

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> LookupHistory:
        return LookupHistory()


class LookupHistory:
    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        word = str(item.get("word", ""))
        return HistoryCall(str(item.get("id")), ToolSpec(KIND, KIND, None),
                           orjson.dumps({"word": word}).decode(),
                           f"{word!r} has {len(word)} letters.")

"""``web_search`` as a server tool (tools/server.py): what the model is offered, one call run
as a ``web_search_call`` item, and the citations of the text the model writes after.

The model gets chat functions: ``web_search(query)`` and, unless the request says
``external_web_access: false`` (search the provider's index, open no live page: the Codex
CLI's default), ``open_page(url)`` and ``find_in_page(url, pattern)``. Each call is one
``web_search_call`` item with its ``action`` (``search``, ``open_page``, ``find_in_page``)
and OpenAI's events: ``response.web_search_call.in_progress``, ``.searching`` (sent before the
provider is asked, so a client sees the search running), ``.completed``. A provider or page
failure is the item's ``failed`` status, and the model reads why and goes on.

Results go to the model as the call's answer, numbered, each with its exact URL, and the model
is asked to cite as Markdown links ``[title](url)``. When the final text's part closes, each
such link to a URL this response's calls returned becomes a ``url_citation`` annotation
spanning the link (translate/stream.py asks :meth:`WebSearchTool.annotate`); a link to
anything else is left alone, so no citation is ever made up.

What the model read (the numbered results, a page's text) is the response's ``reads``: the
next model turn reads it, and tools/reads.py keeps it by tenant and ``web_search_call`` id, in
this process and, for a stored response, in the store with it: a later request
(``previous_response_id``, a conversation, the item given back in ``input``) in any process
gives the model back what it read. An item whose text is not kept (a ``store: false`` response
of another process, or one deleted or expired) reads as the search it was: its query, and its
sources when kept.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.errors import invalid_request
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
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
from responses_gateway.tools.web_search import CALL_ID_PREFIX, pages, params
from responses_gateway.tools.web_search.providers import provider_class
from responses_gateway.tools.web_search.providers.base import (
    Location,
    Provider,
    ProviderConfig,
    ProviderError,
    Query,
    allowed,
    web_url,
)

KIND = "web_search"
TOOL_TYPES = ("web_search", "web_search_2025_08_26", "web_search_preview",
              "web_search_preview_2025_03_11")
SOURCES = "web_search_call.action.sources"
#: what a search counts in the response's ``tool_usage`` (OpenAI counts searches, not the
#: opening of a page or a find in it)
SEARCHED: dict[str, Any] = {"web_search": {"num_requests": 1}}
SEARCH, OPEN, FIND = "web_search", "open_page", "find_in_page"
# search_context_size: results per search, characters per result, characters of a page
CONTEXT = {"low": (3, 300, 4_000), "medium": (6, 800, 12_000), "high": (10, 2_000, 32_000)}
CITE = ("Cite the sources you use as Markdown links with their exact URL, e.g. "
        "[Title](https://example.com/page).")
_LINK_LABEL = re.compile(r"\[([^\[\]\n]{1,500})\]\(")


@dataclass
class Options:
    """The request's ``web_search`` tool, as the gateway keeps it (JSON-safe)."""

    context_size: str = "medium"
    allowed_domains: list[str] = field(default_factory=list)
    location: dict[str, str] = field(default_factory=dict)
    live: bool = True  # external_web_access
    include_sources: bool = False

    @classmethod
    def of(cls, tool: Any, include: Sequence[str]) -> Options:
        filters = _field(tool, "filters")
        domains = [params.domain_of(d) for d in _field(filters, "allowed_domains") or ()
                   if isinstance(d, str)]
        where = _field(tool, "user_location")
        location = {k: v for k in ("country", "city", "region", "timezone")
                    if isinstance(v := _field(where, k), str) and v}
        external = _field(tool, "external_web_access")
        size = _field(tool, "search_context_size")
        return cls(context_size=size if size in CONTEXT else "medium",
                   allowed_domains=[d for d in domains if d], location=location,
                   live=external is not False, include_sources=SOURCES in include)


def _field(value: Any, name: str) -> Any:
    """A field of the request's tool param (a model, or the plain dict of a nested field)."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


class WebSearchTool(ServerTool):
    """``web_search`` for one response: its options, the sources its calls returned."""

    kind = KIND

    def __init__(self, options: Options, settings: Any) -> None:
        self.options = options
        self.settings = settings
        self.sources: dict[str, str] = {}  # url -> title, every source this response returned
        self.pages: dict[str, pages.Page] = {}
        self.read: dict[str, str] = {}  # what each call gave the model, by web_search_call id
        self._client: Any = None
        self._provider: Provider | None = None

    # -- building ------------------------------------------------------------------------------

    @classmethod
    async def for_request(cls, request: RequestTools) -> WebSearchTool:
        if not request.settings.web_search_provider:  # request_models keeps it hosted then
            raise invalid_request("web_search is not configured on this gateway.",
                                  param="tools", code="invalid_value")
        include = getattr(request, "include", ()) or ()
        for tool, index in zip(request.tools, request.indexes or range(len(request.tools)),
                               strict=False):
            params.check(tool, f"tools[{index}]")
        return cls(Options.of(request.tools[0], include), request.settings)

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        offered: list[tuple[str | None, dict[str, Any]]] = [(None, {
            "name": SEARCH,
            "description": "Search the web. Returns numbered results, each with its title, "
                           "URL and an excerpt. " + CITE,
            "parameters": _object(query="The search query."),
        })]
        if self.options.live:
            offered += [(None, {
                "name": OPEN,
                "description": "Open a web page (a search result's URL, or one a page links "
                               "to) and read its text. " + CITE,
                "parameters": _object(url="The page's full http(s) URL."),
            }), (None, {
                "name": FIND,
                "description": "Find a word or phrase in a web page: the passages where it "
                               "occurs. " + CITE,
                "parameters": _object(url="The page's full http(s) URL.",
                                      pattern="The text to look for (any case)."),
            })]
        return offered

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "web_search"}`` (or a preview type): the model searches first."""
        if isinstance(choice, str) or getattr(choice, "type", None) not in TOOL_TYPES:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, SEARCH)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {"options": asdict(self.options)}  # no secret: the provider key is a setting

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> WebSearchTool:
        return cls(Options(**data.get("options") or {}), rebuild.settings)

    # -- running -------------------------------------------------------------------------------

    async def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        arguments = _arguments(call.arguments)
        name = call.spec.name
        context = CONTEXT.get(self.options.context_size, CONTEXT["medium"])
        if name == SEARCH:
            action: dict[str, Any] = {"type": "search",
                                      "query": str(arguments.get("query") or "")}
        elif name == OPEN:
            action = {"type": "open_page", "url": str(arguments.get("url") or "")}
        else:
            action = {"type": "find_in_page", "url": str(arguments.get("url") or ""),
                      "pattern": str(arguments.get("pattern") or "")}
        item_id = ids.new_id(CALL_ID_PREFIX)
        events = items.start_tool_item(
            {"id": item_id, "type": "web_search_call", "status": "in_progress",
             "action": dict(action)}, "response.web_search_call.in_progress")
        item = items.tool_item
        assert item is not None
        item["status"] = "searching"
        events.append(items.tool_item_event("response.web_search_call.searching"))
        yield events
        try:
            if name == SEARCH:
                output, sources = await self._search(action["query"], context)
                call.usage = SEARCHED  # a search the provider answered; pages are not counted
                if self.options.include_sources:
                    item["action"]["sources"] = [{"type": "url", "url": u} for u in sources]
            elif not self.options.live:  # not offered; a model may still name it
                raise pages.PageError("Opening live pages is off for this request "
                                      "(external_web_access is false).")
            elif name == OPEN:
                output = await self._open(action["url"], context[2])
            else:
                output = await self._find(action["url"], action["pattern"], context[2])
        except (ProviderError, pages.PageError) as failure:
            self.read[item_id] = (f"The {action['type'].replace('_', ' ')} failed: {failure} "
                                  f"Go on without it, or try something else.")
            yield items.end_tool_item("failed", None)
            return
        self.read[item_id] = output
        yield items.end_tool_item("completed", "response.web_search_call.completed")

    async def _search(self, text: str, context: tuple[int, int, int]) -> tuple[str, list[str]]:
        if not text.strip():
            raise ProviderError("The search query is empty.")
        where = self.options.location
        query = Query(text=text[:1000], count=context[0], snippet_chars=context[1],
                      allowed_domains=tuple(self.options.allowed_domains),
                      location=Location(**where))
        seconds = self.settings.web_search_timeout
        try:
            async with asyncio.timeout(seconds):  # the whole search, however the bytes trickle
                hits = await self.provider().search(self.client(), query)
        except TimeoutError:
            raise ProviderError(f"The search provider ({self.provider().name}) did not answer "
                                f"in time.") from None
        if not hits:
            return f"No results for {text!r}.", []
        lines = [f"Results for {text!r}:"]
        for hit in hits:
            self.sources.setdefault(hit.url, hit.title)
            lines.append(f"\n[{len(lines)}] {hit.title}\nURL: {hit.url}\n{hit.snippet}")
        lines.append("\n" + CITE)
        return "\n".join(lines), [hit.url for hit in hits]

    async def _page(self, url: str) -> pages.Page:
        if not allowed(url, tuple(self.options.allowed_domains)):
            raise pages.PageError("That page is outside the domains this search may use.")
        page = self.pages.get(url)
        if page is None:
            page = await pages.open_page(url, pages.PageLimits.of(self.settings))
            if len(self.pages) < 32:
                self.pages[url] = page
        self.sources.setdefault(url, page.title)
        if page.url != url:
            self.sources.setdefault(page.url, page.title)
        return page

    async def _open(self, url: str, limit: int) -> str:
        page = await self._page(url)
        text = page.text if len(page.text) <= limit else (
            page.text[:limit] + f"\n[… {len(page.text) - limit} more characters; use "
                                f"find_in_page to look for something further on]")
        return f"{page.title}\nURL: {url}\n\n{text}\n\n{CITE}"

    async def _find(self, url: str, pattern: str, limit: int) -> str:
        page = await self._page(url)
        found = pages.find(page.text, pattern)
        if not found:
            return f"{pattern!r} does not occur in {url}."
        shown, used = [], 0
        for passage in found:
            if used + len(passage) > limit:
                break
            shown.append(passage)
            used += len(passage)
        return (f"{len(shown)} passage(s) of {url} with {pattern!r}:\n\n"
                + "\n---\n".join(shown) + f"\n\n{CITE}")

    def provider(self) -> Provider:
        if self._provider is None:
            settings = self.settings
            name = settings.web_search_provider
            self._provider = provider_class(name)(ProviderConfig(
                name, settings.web_search_url, settings.web_search_api_key,
                settings.web_search_max_answer_bytes))
        return self._provider

    def client(self) -> Any:
        if self._client is None:
            import httpx

            seconds = self.settings.web_search_timeout
            self._client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(seconds),
                                             follow_redirects=False)
        return self._client

    def reads(self) -> dict[str, str]:
        return self.read

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- citations -----------------------------------------------------------------------------

    def annotate(self, text: str) -> list[dict[str, Any]]:
        """A ``url_citation`` for each Markdown link in ``text`` to a source this response
        returned, spanning the link (``start_index`` at ``[``, ``end_index`` after ``)``)."""
        if not self.sources or "](" not in text:
            return []
        found = []
        for link in _LINK_LABEL.finditer(text):
            after = link.end()
            url = _known_url(text, after, self.sources)
            if url is None or not web_url(url):  # only http(s) pages are ever cited
                continue
            found.append({"type": "url_citation", "start_index": link.start(),
                          "end_index": after + len(url) + 1, "url": url,
                          "title": self.sources[url] or url})
        return found

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> WebSearchHistory:
        return WebSearchHistory(reads)


def _known_url(text: str, at: int, sources: Mapping[str, str]) -> str | None:
    """The longest known URL that ``text`` spells at ``at``, followed by ``)``. Each source is
    compared in place, so a text of many links costs links x sources, never links x text (a
    scan for every ``)`` within 4 kB of each link took 25 s over 48 kB of ``[a](x)``)."""
    best = None
    for url in sources:
        if ((best is None or len(url) > len(best)) and text.startswith(url, at)
                and text.startswith(")", at + len(url))):
            best = url
    return best


def _object(**properties: str) -> dict[str, Any]:
    return {"type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in properties.items()},
            "required": list(properties), "additionalProperties": False}


def _arguments(text: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


class WebSearchHistory:
    """A ``web_search_call`` as the model reads it: the call, and what it read (``reads``),
    else what the item says was done."""

    def __init__(self, reads: Mapping[str, str]) -> None:
        self.reads = reads

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        call_id, action = item.get("id"), item.get("action")
        if not isinstance(call_id, str) or not isinstance(action, dict):
            raise invalid_request(
                "A 'web_search_call' item needs 'id' and 'action'.", param=param)
        kind = action.get("type")
        if kind == "search":
            name, arguments = SEARCH, {"query": action.get("query") or ""}
        elif kind == "open_page":
            name, arguments = OPEN, {"url": action.get("url") or ""}
        elif kind in ("find_in_page", "find"):
            name, arguments = FIND, {"url": action.get("url") or "",
                                     "pattern": action.get("pattern") or ""}
        else:
            return None
        output = self.reads.get(call_id)
        if output is None:
            output = _summary(item, action)
        return HistoryCall(call_id, ToolSpec(KIND, name), orjson.dumps(arguments).decode(),
                           output)


def _summary(item: Mapping[str, Any], action: Mapping[str, Any]) -> str:
    if item.get("status") == "failed":
        return "This web search step failed."
    sources = [s.get("url") for s in action.get("sources") or () if isinstance(s, dict)]
    shown = "".join(f"\n- {url}" for url in sources if isinstance(url, str))
    return ("This web search step ran in an earlier response; its text is no longer at hand "
            "(search again for details)." + (f" Sources:{shown}" if shown else ""))

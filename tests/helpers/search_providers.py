"""Search providers' HTTP APIs for tests, on 127.0.0.1: SearXNG, Tavily, Brave, Exa, and a
small web site to open pages on.

Each fake speaks its provider's real API as the provider's public docs give it (paths,
methods, how the key is sent, the JSON of the answer) and refuses a request without the key
as the provider does (401/403), so the adapter is tested against the wire, not against itself.

    with SearchProvider("brave", key="k") as fake:
        fake.base_url        # what GATEWAY_WEB_SEARCH_URL would be
        fake.requests        # (method, path, query params, headers, JSON body) received
        fake.on_search = f   # f(seen) runs as each search arrives, before it is answered
                             # (script the model's next turn: the search precedes it)

Results are ``RESULTS`` (three pages on example.com/org) unless ``results=`` says otherwise;
``fail_with=503`` answers that status; ``fake.body = b"..."`` answers those bytes (as JSON,
200) instead, once the request is accepted: what a broken or hostile provider may send.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route

from tests.helpers.gateway_server import bound_socket

RESULTS = [
    {"url": "https://example.com/rust-2024", "title": "Rust 2024 edition",
     "text": "The Rust 2024 edition was released with Rust 1.85 in February 2025."},
    {"url": "https://docs.example.org/guide", "title": "Edition guide",
     "text": "Editions are opt-in: each crate chooses its edition in Cargo.toml."},
    {"url": "https://blog.example.com/news", "title": "News (blog)",
     "text": "A blog post about editions and async closures."},
]


@dataclass
class Seen:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class _Threaded:
    app: Starlette
    sock: socket.socket = field(default_factory=bound_socket)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def start(self) -> None:
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, args=([self.sock],),
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.sock.close()


class SearchProvider:
    """One provider's API: ``searxng``, ``tavily``, ``brave`` or ``exa``."""

    def __init__(self, provider: str, *, key: str | None = None,
                 results: list[dict[str, str]] | None = None, fail_with: int | None = None,
                 delay: float = 0.0) -> None:
        self.provider = provider
        self.key = key
        self.results = RESULTS if results is None else results
        self.fail_with = fail_with
        self.delay = delay
        self.requests: list[Seen] = []
        self.on_search: Callable[[Seen], None] | None = None
        self.body: bytes | None = None
        routes = {
            "searxng": [Route("/search", self._searxng, methods=["GET", "POST"])],
            "tavily": [Route("/search", self._tavily, methods=["POST"])],
            "brave": [Route("/res/v1/web/search", self._brave, methods=["GET"])],
            "exa": [Route("/search", self._exa, methods=["POST"])],
        }[provider]
        self._server = _Threaded(Starlette(routes=routes))

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self._server.port}"
        return root + "/res/v1" if self.provider == "brave" else root

    def __enter__(self) -> SearchProvider:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    async def _seen(self, request: Request) -> Seen:
        raw = await request.body()
        import json

        body = json.loads(raw) if raw and request.method == "POST" and (
            request.headers.get("content-type", "").startswith("application/json")) else None
        seen = Seen(request.method, request.url.path, dict(request.query_params),
                    {k.lower(): v for k, v in request.headers.items()}, body)
        self.requests.append(seen)
        if self.on_search is not None:
            self.on_search(seen)
        if self.delay:
            import asyncio

            await asyncio.sleep(self.delay)
        return seen

    def _failure(self) -> StarletteResponse | None:
        if self.fail_with is not None:
            return JSONResponse({"error": f"failure {self.key or ''}"}, status_code=self.fail_with)
        if self.body is not None:
            return StarletteResponse(self.body, media_type="application/json")
        return None

    # SearXNG: GET /search?q=..&format=json -> {"query", "number_of_results", "results": [...]}
    async def _searxng(self, request: Request) -> StarletteResponse:
        seen = await self._seen(request)
        if (failed := self._failure()) is not None:
            return failed
        if seen.params.get("format") != "json":
            return PlainTextResponse("Forbidden", status_code=403)  # a format not enabled
        return JSONResponse({
            "query": seen.params.get("q"), "number_of_results": len(self.results),
            "results": [{"url": r["url"], "title": r["title"], "content": r["text"],
                         "engine": "duckduckgo", "parsed_url": [], "template": "default.html",
                         "engines": ["duckduckgo"], "positions": [i + 1], "score": 1.0,
                         "category": "general"} for i, r in enumerate(self.results)],
            "answers": [], "corrections": [], "infoboxes": [], "suggestions": [],
            "unresponsive_engines": []})

    # Tavily: POST /search, Authorization: Bearer tvly-..., JSON body -> {"results": [...]}
    async def _tavily(self, request: Request) -> StarletteResponse:
        seen = await self._seen(request)
        if seen.headers.get("authorization") != f"Bearer {self.key}":
            return JSONResponse({"detail": {"error": "Unauthorized: missing or invalid API key."}},
                                status_code=401)
        if (failed := self._failure()) is not None:
            return failed
        body = seen.body or {}
        wanted = int(body.get("max_results", 5))
        return JSONResponse({
            "query": body.get("query"), "follow_up_questions": None, "answer": None,
            "images": [],
            "results": [{"title": r["title"], "url": r["url"], "content": r["text"],
                         "score": 0.9 - i / 10, "raw_content": None}
                        for i, r in enumerate(self.results[:wanted])],
            "response_time": 0.5})

    # Brave: GET /res/v1/web/search?q=..&count=.., X-Subscription-Token -> {"web": {"results"}}
    async def _brave(self, request: Request) -> StarletteResponse:
        seen = await self._seen(request)
        if seen.headers.get("x-subscription-token") != self.key:
            return JSONResponse({"type": "ErrorResponse", "error": {
                "code": "SUBSCRIPTION_TOKEN_INVALID", "status": 401,
                "detail": "The provided subscription token is invalid."}}, status_code=401)
        if (failed := self._failure()) is not None:
            return failed
        wanted = int(seen.params.get("count", 20))
        return JSONResponse({
            "type": "search", "query": {"original": seen.params.get("q")},
            "web": {"type": "search", "results": [
                {"title": r["title"], "url": r["url"], "description": r["text"],
                 "is_source_local": False, "language": "en", "type": "search_result",
                 "extra_snippets": ["More about it."]}
                for r in self.results[:wanted]]}})

    # Exa: POST /search, x-api-key, {"query","numResults","contents"} -> {"results": [...]}
    async def _exa(self, request: Request) -> StarletteResponse:
        seen = await self._seen(request)
        if seen.headers.get("x-api-key") != self.key:
            return JSONResponse({"requestId": "r", "error": "Invalid API key"}, status_code=401)
        if (failed := self._failure()) is not None:
            return failed
        body = seen.body or {}
        wanted = int(body.get("numResults", 10))
        limit = (((body.get("contents") or {}).get("text") or {}).get("maxCharacters")) or 10_000
        return JSONResponse({
            "requestId": "a78ebce717f4d712b6f8fe0d5d7753f8", "resolvedSearchType": "neural",
            "results": [{"id": r["url"], "title": r["title"], "url": r["url"],
                         "publishedDate": "2025-02-20T00:00:00.000Z", "author": None,
                         "text": r["text"][:limit]} for r in self.results[:wanted]],
            "costDollars": {"total": 0.005}})


PAGE = """<!doctype html><html><head><title>Edition &amp; guide</title>
<style>body { color: red }</style><script>var secret = "not text";</script></head>
<body><nav>Home | Docs</nav><h1>The edition guide</h1>
<p>Editions are <b>opt-in</b>. Each crate picks its edition in <code>Cargo.toml</code>.</p>
<p>See <a href="/other">the other page</a>.</p>
<p>The 2024 edition changed the <i>RPIT lifetime capture</i> rules.</p></body></html>"""


#: pages that are slow to parse (issue 40): 105 kB of unclosed <title> tags (a quadratic
#: regex: 22 s on the loop); a 1.7 MB table (html2text: seconds); 200 kB of nested lists
#: (html2text's indentation grows with depth: quadratic, minutes).
SLOW_PAGES = {
    "/unclosed-title": "<!doctype html><html><head>" + "<title>" * 15_000,
    "/big-table": "<html><head><title>Table</title></head><body><h1>Rows</h1><table>"
                  + "".join(f"<tr><td>{i}</td><td>cell {i}</td></tr>" for i in range(42_000))
                  + "</table><p>the end</p></body></html>",
    "/nested": "<html><body><p>first words</p>" + "<ul><li>x" * 20_000,
}


class WebSite:
    """A small site: ``/page`` (HTML), ``/text`` (plain), ``/big`` (over any small limit),
    ``/binary`` (a PNG), ``/slow``, ``/redirect?to=URL`` (302 to anywhere), and each of
    ``SLOW_PAGES`` (HTML that is slow to turn into text)."""

    def __init__(self) -> None:
        self.hits: list[str] = []

        async def page(request: Request) -> StarletteResponse:
            self.hits.append(request.url.path)
            return HTMLResponse(PAGE)

        async def text(request: Request) -> StarletteResponse:
            self.hits.append(request.url.path)
            return PlainTextResponse("plain words, one two three")

        async def big(request: Request) -> StarletteResponse:
            self.hits.append(request.url.path)
            return PlainTextResponse("x" * 300_000)

        async def binary(request: Request) -> StarletteResponse:
            self.hits.append(request.url.path)
            return StarletteResponse(b"\x89PNG\r\n\x1a\n", media_type="image/png")

        async def slow(request: Request) -> StarletteResponse:
            import asyncio

            self.hits.append(request.url.path)
            await asyncio.sleep(5)
            return PlainTextResponse("late")

        async def redirect(request: Request) -> StarletteResponse:
            self.hits.append(request.url.path)
            return RedirectResponse(request.query_params["to"], status_code=302)

        async def slow_to_parse(request: Request) -> StarletteResponse:
            self.hits.append(request.url.path)
            return HTMLResponse(SLOW_PAGES[request.url.path])

        self._server = _Threaded(Starlette(routes=[
            Route("/page", page), Route("/text", text), Route("/big", big),
            Route("/binary", binary), Route("/slow", slow), Route("/redirect", redirect),
            *(Route(path, slow_to_parse) for path in SLOW_PAGES)]))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}"

    def __enter__(self) -> WebSite:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

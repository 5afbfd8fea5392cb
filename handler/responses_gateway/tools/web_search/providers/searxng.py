"""SearXNG, self-hosted: ``GET {url}/search?q=...&format=json`` (its JSON format must be
enabled in its settings.yml, ``search.formats``). No key unless a proxy in front asks one
(sent as ``Authorization: Bearer``). Domain filters become ``site:`` terms, which the engines
SearXNG asks mostly honour; the hits are filtered again in any case."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from responses_gateway.tools.web_search.providers.base import Hit, Provider, Query, text_of

if TYPE_CHECKING:
    import httpx


class SearXNG(Provider):
    name = "searxng"
    default_url = None  # self-hosted: GATEWAY_WEB_SEARCH_URL names it
    needs_key = False

    def request(self, client: httpx.AsyncClient, query: Query) -> httpx.Request:
        text = query.text
        if query.allowed_domains:
            text += " " + " OR ".join(f"site:{d}" for d in query.allowed_domains)
        params = {"q": text, "format": "json", "pageno": "1", "safesearch": "0"}
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return client.build_request("GET", f"{self.base_url}/search", params=params,
                                    headers=headers)

    def hits(self, answer: Any, query: Query) -> list[Hit]:
        return [Hit(r["url"], text_of(r.get("title")) or r["url"], text_of(r.get("content")))
                for r in answer["results"] if isinstance(r.get("url"), str)]

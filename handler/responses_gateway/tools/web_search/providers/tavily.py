"""Tavily: ``POST https://api.tavily.com/search`` with ``Authorization: Bearer tvly-...`` and
a JSON body (``query``, ``max_results``, ``search_depth``, ``include_domains``); the answer's
``results`` carry ``title``, ``url`` and ``content``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from responses_gateway.tools.web_search.providers.base import Hit, Provider, Query, text_of

if TYPE_CHECKING:
    import httpx


class Tavily(Provider):
    name = "tavily"
    default_url = "https://api.tavily.com"

    def request(self, client: httpx.AsyncClient, query: Query) -> httpx.Request:
        body: dict[str, Any] = {
            "query": query.text,
            "max_results": min(query.count, 20),
            "search_depth": "advanced" if query.count > 5 else "basic",
        }
        if query.allowed_domains:
            body["include_domains"] = list(query.allowed_domains)
        return client.build_request("POST", f"{self.base_url}/search", json=body, headers={
            "Authorization": f"Bearer {self._key}", "Accept": "application/json"})

    def hits(self, answer: Any, query: Query) -> list[Hit]:
        return [Hit(r["url"], text_of(r.get("title")) or r["url"], text_of(r.get("content")))
                for r in answer["results"] if isinstance(r.get("url"), str)]

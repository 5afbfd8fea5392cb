"""Exa: ``POST https://api.exa.ai/search`` with ``x-api-key`` and a JSON body (``query``,
``numResults``, ``includeDomains``, ``userLocation``, ``contents.text.maxCharacters``); the
answer's ``results`` carry ``title``, ``url`` and the page ``text`` asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from responses_gateway.tools.web_search.providers.base import Hit, Provider, Query, text_of

if TYPE_CHECKING:
    import httpx


class Exa(Provider):
    name = "exa"
    default_url = "https://api.exa.ai"

    def request(self, client: httpx.AsyncClient, query: Query) -> httpx.Request:
        body: dict[str, Any] = {
            "query": query.text,
            "numResults": min(query.count, 25),
            "contents": {"text": {"maxCharacters": query.snippet_chars}},
        }
        if query.allowed_domains:
            body["includeDomains"] = list(query.allowed_domains)
        country = query.location.country
        if country and len(country) == 2:
            body["userLocation"] = country.upper()
        return client.build_request("POST", f"{self.base_url}/search", json=body, headers={
            "x-api-key": self._key or "", "Accept": "application/json"})

    def hits(self, answer: Any, query: Query) -> list[Hit]:
        return [Hit(r["url"], text_of(r.get("title")) or r["url"],
                    text_of(r.get("text")) or " ".join(
                        h for h in r.get("highlights") or () if isinstance(h, str)))
                for r in answer["results"] if isinstance(r.get("url"), str)]

"""Brave Search: ``GET https://api.search.brave.com/res/v1/web/search?q=...&count=...`` with
``X-Subscription-Token``; the answer's ``web.results`` carry ``title``, ``url``,
``description`` (and ``extra_snippets``). ``country`` is the user's two-letter code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from responses_gateway.tools.web_search.providers.base import Hit, Provider, Query, text_of

if TYPE_CHECKING:
    import httpx


class Brave(Provider):
    name = "brave"
    default_url = "https://api.search.brave.com/res/v1"

    def request(self, client: httpx.AsyncClient, query: Query) -> httpx.Request:
        text = query.text
        if query.allowed_domains:
            text += " " + " OR ".join(f"site:{d}" for d in query.allowed_domains)
        params = {"q": text[:400], "count": str(min(query.count, 20))}
        country = query.location.country
        if country and len(country) == 2:
            params["country"] = country.lower()
        return client.build_request("GET", f"{self.base_url}/web/search", params=params,
                                    headers={"X-Subscription-Token": self._key or "",
                                             "Accept": "application/json"})

    def hits(self, answer: Any, query: Query) -> list[Hit]:
        results = (answer.get("web") or {}).get("results") or []
        hits = []
        for r in results:
            if not isinstance(r.get("url"), str):
                continue
            extra = [s for s in r.get("extra_snippets") or () if isinstance(s, str)]
            snippet = " ".join([text_of(r.get("description")), *extra])
            hits.append(Hit(r["url"], text_of(r.get("title")) or r["url"], snippet))
        return hits

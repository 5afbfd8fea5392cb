"""Search providers: one module each, behind :class:`~.base.Provider`.

``PROVIDERS`` names each provider's class (imported on first use); ``GATEWAY_WEB_SEARCH_PROVIDER``
picks one. Adding a provider is one module and one line here.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from responses_gateway.tools.web_search.providers.base import Provider

PROVIDERS: dict[str, str] = {
    "searxng": "responses_gateway.tools.web_search.providers.searxng:SearXNG",
    "tavily": "responses_gateway.tools.web_search.providers.tavily:Tavily",
    "brave": "responses_gateway.tools.web_search.providers.brave:Brave",
    "exa": "responses_gateway.tools.web_search.providers.exa:Exa",
}


@cache
def provider_class(name: str) -> type[Provider]:
    module, _, attr = PROVIDERS[name].partition(":")
    cls: type[Provider] = getattr(importlib.import_module(module), attr)
    return cls


def provider_url(text: str) -> str:
    """GATEWAY_WEB_SEARCH_URL: an http(s) base URL (SearXNG's; another provider's proxy)."""
    from urllib.parse import urlsplit

    url = text.strip().rstrip("/")
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// base URL, like "
                             "http://searxng:8080")
    return url


def provider_lacks(name: str, url: str | None, key: str | None) -> str | None:
    """What provider ``name`` lacks to search at all, naming the variable to set (checked at
    start by config.py, so a misconfigured provider never starts rather than failing every
    call); None when it has what it needs."""
    cls = provider_class(name)
    if cls.default_url is None and not url:
        return (f"GATEWAY_WEB_SEARCH_URL must be set when GATEWAY_WEB_SEARCH_PROVIDER is "
                f"{name} (its base URL, like http://searxng:8080)")
    if cls.needs_key and not key:
        return (f"GATEWAY_WEB_SEARCH_API_KEY (or GATEWAY_WEB_SEARCH_API_KEY_SECRET_ARN / "
                f"_PARAMETER) must be set when GATEWAY_WEB_SEARCH_PROVIDER is {name}")
    return None


def provider_named(text: str) -> str:
    """GATEWAY_WEB_SEARCH_PROVIDER, checked at start (config.py)."""
    name = text.strip().lower()
    if name not in PROVIDERS:
        raise ValueError(f"must be one of {', '.join(PROVIDERS)}, not {text!r}")
    return name

"""What every search provider gets and gives: one query in, hits out, a failure named.

A provider turns :class:`Query` into one HTTP request to its API and the answer into
:class:`Hit` s. It never puts its key, or the body of an error answer (which may echo it), in
a :class:`ProviderError`: that message reaches the client in the ``web_search_call`` and the
model's context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True, slots=True)
class Location:
    """The request's ``user_location`` (all optional): ISO country code, city, region."""

    country: str | None = None
    city: str | None = None
    region: str | None = None
    timezone: str | None = None


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    count: int  # results wanted (search_context_size)
    snippet_chars: int  # text kept per result
    allowed_domains: tuple[str, ...] = ()
    location: Location = field(default_factory=Location)


@dataclass(frozen=True, slots=True)
class Hit:
    url: str
    title: str
    snippet: str


class ProviderError(Exception):
    """A search that did not work; the message is safe to show (no key, no answer body)."""


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    base_url: str | None  # None: the provider's public endpoint
    api_key: str | None = field(default=None, repr=False)


class Provider:
    """One provider's API. Subclasses set ``name`` and ``default_url`` and implement
    :meth:`request` and :meth:`hits`; :meth:`search` is the same for all."""

    name: ClassVar[str]
    default_url: ClassVar[str | None]
    needs_key: ClassVar[bool] = True

    def __init__(self, config: ProviderConfig) -> None:
        base = config.base_url or self.default_url
        if base is None:
            raise ProviderError(f"{self.name} needs GATEWAY_WEB_SEARCH_URL (its base URL).")
        self.base_url = base.rstrip("/")
        self._key = config.api_key

    def request(self, client: httpx.AsyncClient, query: Query) -> httpx.Request:
        raise NotImplementedError

    def hits(self, answer: Any, query: Query) -> list[Hit]:
        raise NotImplementedError

    async def search(self, client: httpx.AsyncClient, query: Query) -> list[Hit]:
        """The provider's hits for ``query``, only from allowed domains, at most ``count``."""
        import httpx

        if self.needs_key and not self._key:
            raise ProviderError(f"No API key is configured for {self.name} "
                                f"(GATEWAY_WEB_SEARCH_API_KEY).")
        try:
            answer = await client.send(self.request(client, query))
            status = answer.status_code
            body = answer.json() if status < 400 else None
        except httpx.TimeoutException:
            raise ProviderError(f"The search provider ({self.name}) did not answer in time."
                                ) from None
        except (httpx.HTTPError, OSError):
            raise ProviderError(f"The search provider ({self.name}) could not be reached."
                                ) from None
        except ValueError:
            raise ProviderError(f"The search provider ({self.name}) answered something that "
                                f"is not JSON.") from None
        if status >= 400:
            raise ProviderError(f"The search provider ({self.name}) answered HTTP {status}.")
        try:
            found = self.hits(body, query)
        except (KeyError, TypeError, AttributeError):
            raise ProviderError(f"The search provider ({self.name}) answered in an unexpected "
                                f"shape.") from None
        kept = [hit for hit in found if allowed(hit.url, query.allowed_domains)]
        return [Hit(h.url, h.title, _cut(h.snippet, query.snippet_chars))
                for h in kept[:query.count]]


def allowed(url: str, domains: tuple[str, ...]) -> bool:
    """``url``'s host is one of ``domains`` or under one (OpenAI: subdomains allowed too)."""
    if not domains:
        return True
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return False
    return any(host == d or host.endswith("." + d) for d in domains)


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rstrip() + "…"

"""What every search provider gets and gives: one query in, hits out, a failure named.

A provider turns :class:`Query` into one HTTP request to its API and the answer into
:class:`Hit` s. It never puts its key, or the body of an error answer (which may echo it), in
a :class:`ProviderError`: that message reaches the client in the ``web_search_call`` and the
model's context.

The answer is a third party's: it is read up to ``max_answer_bytes``
(``GATEWAY_WEB_SEARCH_MAX_ANSWER_BYTES``) and parsed by orjson (which refuses nesting deeper
than 1024 rather than recursing), and what does not fit is a :class:`ProviderError`, i.e. a
failed ``web_search_call``, never a failed response. Only hits with an http(s) URL are kept
(a ``javascript:`` or ``data:`` URL never becomes a source or a citation), and each excerpt is
cut to the query's characters per result, each title to that or 300 characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from responses_gateway.html_text import TITLE_CHARS
from responses_gateway.net.bodies import read_capped

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


#: the longest URL a hit may have (the sitemaps protocol's limit; browsers and CDNs commonly
#: stop near it too): a longer one is no page a reader can be sent to, and it is dropped
MAX_URL_CHARS = 2048


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    base_url: str | None  # None: the provider's public endpoint
    api_key: str | None = field(default=None, repr=False)
    max_answer_bytes: int = 2 * 1024 * 1024  # GATEWAY_WEB_SEARCH_MAX_ANSWER_BYTES


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
        self.max_answer_bytes = config.max_answer_bytes

    def request(self, client: httpx.AsyncClient, query: Query) -> httpx.Request:
        raise NotImplementedError

    def hits(self, answer: Any, query: Query) -> list[Hit]:
        raise NotImplementedError

    async def search(self, client: httpx.AsyncClient, query: Query) -> list[Hit]:
        """The provider's hits for ``query``, only http(s) ones from allowed domains, at most
        ``count``, each excerpt cut to ``snippet_chars`` and each title to that or to
        ``TITLE_CHARS`` (a page's title is cut the same)."""
        if self.needs_key and not self._key:
            raise ProviderError(f"No API key is configured for {self.name} "
                                f"(GATEWAY_WEB_SEARCH_API_KEY).")
        body = await self._answer(client, query)
        try:
            found = self.hits(body, query)
        except (KeyError, TypeError, AttributeError, ValueError, IndexError, RecursionError):
            raise ProviderError(f"The search provider ({self.name}) answered in an unexpected "
                                f"shape.") from None
        kept = [hit for hit in found
                if web_url(hit.url) and allowed(hit.url, query.allowed_domains)]
        titled = min(query.snippet_chars, TITLE_CHARS)
        return [Hit(h.url, _cut(h.title, titled) or h.url, _cut(h.snippet, query.snippet_chars))
                for h in kept[:query.count]]

    async def _answer(self, client: httpx.AsyncClient, query: Query) -> Any:
        """The answer's JSON, read up to ``max_answer_bytes``; any fault a ProviderError."""
        import httpx

        try:
            answer = await client.send(self.request(client, query), stream=True)
            try:
                if answer.status_code >= 400:
                    raise ProviderError(f"The search provider ({self.name}) answered HTTP "
                                        f"{answer.status_code}.")
                data = await read_capped(answer, self.max_answer_bytes, lambda: ProviderError(
                    f"The search provider ({self.name}) answered more than "
                    f"{self.max_answer_bytes} bytes (GATEWAY_WEB_SEARCH_MAX_ANSWER_BYTES)."))
            finally:
                await answer.aclose()
        except httpx.TimeoutException:
            raise ProviderError(f"The search provider ({self.name}) did not answer in time."
                                ) from None
        except (httpx.HTTPError, httpx.StreamError, OSError):
            raise ProviderError(f"The search provider ({self.name}) could not be reached."
                                ) from None
        import orjson

        try:
            return orjson.loads(data)  # at most 1024 deep: deeper is a JSONDecodeError
        except (orjson.JSONDecodeError, RecursionError):
            raise ProviderError(f"The search provider ({self.name}) answered something that "
                                f"is not JSON (or nested too deeply).") from None


def web_url(url: str) -> bool:
    """``url`` is an http(s) URL with a host, at most :data:`MAX_URL_CHARS` long, with no
    whitespace or control characters: a page a reader can open (a ``javascript:``,
    ``data:`` or ``file:`` URL is not)."""
    from urllib.parse import urlsplit

    if not url or len(url) > MAX_URL_CHARS or any(c <= " " or c == "\x7f" for c in url):
        return False
    try:
        parts = urlsplit(url)
        return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return False


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
    """``text`` with its whitespace made single spaces, at most ``limit`` characters (and an
    ellipsis)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rstrip() + "…"

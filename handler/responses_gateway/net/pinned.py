"""One pinned, SSRF-safe HTTP request, for every connection a client's URL asks for.

net/policy.py decides *whether* a host may be reached; this module makes the connection go
*only* there: an HTTP transport that checks each request's host (every redirect hop is a new
request, so each is checked again), connects to the checked address while the Host header
and TLS SNI keep the name, so a second DNS answer cannot swap in a private address between
check and connect, and optionally stops reading an answer past a byte limit.

Used by the Bedrock media fetcher (backends/bedrock/images.py, on ``httpx``) and by remote
MCP (tools/mcp/client.py, on ``httpx2``, the MCP SDK's client). The two libraries share the
transport API, so the transport is built for whichever module the caller passes; neither is
imported here until a caller asks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from responses_gateway.net.policy import Refused, Resolver, checked_addresses, literal_address

BodyLimit = Callable[[Any], int | None]  # request -> most bytes its answer may have, or None
if TYPE_CHECKING:
    import httpx

TooLarge = Callable[[int], BaseException]  # limit -> what to raise when an answer passes it

NOT_HTTP = "only http and https URLs can be used"
NOT_VALID = "not a valid http(s) URL"


class BadUrl(Refused):
    """A URL the gateway cannot use at all; the message says why (no secrets in it)."""


def http_url(text: str, *, base: httpx.URL | None = None) -> httpx.URL:
    """``text`` (joined to ``base``, an ``httpx.URL``) as an ``httpx.URL`` the gateway may try:
    http(s), a host DNS can carry or a canonical IP literal, a port in range. Nothing is
    resolved here; :class:`BadUrl` says what is wrong."""
    import httpx

    try:
        url = base.join(text) if base is not None else httpx.URL(text)
        host = url.raw_host.decode("ascii").lower()  # IDNA-encoded, IPv6 unbracketed
    except (httpx.InvalidURL, ValueError):  # UnicodeError (IDNA) is a ValueError
        raise BadUrl(NOT_VALID) from None
    if url.scheme not in ("http", "https"):
        raise BadUrl(NOT_HTTP)
    try:
        if host and (url.port is None or 0 < url.port < 65536):
            literal_address(host)  # a host that looks like a number must be a canonical IP
            return url
    except ValueError:
        pass
    raise BadUrl(NOT_VALID)


def host_port(url: Any) -> tuple[str, int]:
    """The host (lower-case, IDNA-encoded, unbracketed) and port an http(s) URL connects to."""
    if url.scheme not in ("http", "https"):
        raise BadUrl(NOT_HTTP)
    return (url.raw_host.decode("ascii").lower(),
            url.port or (443 if url.scheme == "https" else 80))


def pinned_transport(
    http: ModuleType, *, resolver: Resolver | None = None,
    allow_hosts: frozenset[str] = frozenset(), inner: Any = None,
    body_limit: BodyLimit | None = None, too_large: TooLarge | None = None,
) -> Any:
    """An ``http.AsyncBaseTransport`` (``http`` is ``httpx`` or ``httpx2``) that sends each
    request only to an address net/policy.py allowed for its host, through ``inner`` (a plain
    ``AsyncHTTPTransport`` unless given). :class:`Refused` when the host may not be reached.

    ``body_limit`` caps an answer's body per request: past it, reading raises
    ``too_large(limit)`` (a plain :class:`ValueError` unless given)."""
    transport_class, _ = _classes(http)
    return transport_class(
        inner if inner is not None else http.AsyncHTTPTransport(trust_env=False),
        resolver, allow_hosts, body_limit, too_large or _too_large)


def _too_large(limit: int) -> BaseException:
    return ValueError(f"the answer is larger than {limit} bytes")


@functools.cache
def _classes(http: ModuleType) -> tuple[type, type]:
    """The transport and capped-body classes for one HTTP library (``httpx`` or ``httpx2``),
    whose responses accept only their own ``AsyncByteStream`` subclasses."""

    class Capped(http.AsyncByteStream):  # type: ignore[name-defined,misc]
        """An answer's body that stops past ``limit`` bytes."""

        def __init__(self, stream: Any, limit: int, too_large: TooLarge) -> None:
            self._stream, self._limit, self._too_large = stream, limit, too_large

        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self._stream:
                seen += len(chunk)
                if seen > self._limit:
                    raise self._too_large(self._limit)
                yield chunk

        async def aclose(self) -> None:
            await self._stream.aclose()

    class PinnedTransport(http.AsyncBaseTransport):  # type: ignore[name-defined,misc]
        """Each request checked by net/policy.py and sent to the checked address."""

        def __init__(self, inner: Any, resolver: Resolver | None, allow_hosts: frozenset[str],
                     body_limit: BodyLimit | None, too_large: TooLarge) -> None:
            self._inner, self._resolver, self._allow_hosts = inner, resolver, allow_hosts
            self._body_limit, self._too_large = body_limit, too_large

        async def handle_async_request(self, request: Any) -> Any:
            url = request.url
            host, port = host_port(url)
            addresses = await checked_addresses(host, port, resolver=self._resolver,
                                                allow_hosts=self._allow_hosts)
            # The Host header was set from the name when the request was built; TLS keeps it
            # through SNI, the connection goes to the address just checked.
            request.url = url.copy_with(host=str(addresses[0]))
            if url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
            response = await self._inner.handle_async_request(request)
            limit = self._body_limit(request) if self._body_limit is not None else None
            if limit is not None:
                response.stream = Capped(response.stream, limit, self._too_large)
            return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    return PinnedTransport, Capped

"""Fetching image (and document) URLs for Bedrock, which never fetches URLs itself.

The gateway runs inside a VPC / Lambda with access to metadata services and private
networks, so a client-supplied URL is an SSRF vector. Every hop (the first URL and each
redirect, followed by hand) is parsed strictly and resolved here, *all* its addresses must be
public, and the connection is pinned to the checked address (Host header and TLS SNI keep the
name) so a second DNS answer cannot swap in a private one. A host that looks like a number but
is not a canonical IP address (``0177.0.0.1``, ``0x7f.1``, ``2130706433``) is refused, never
handed to a resolver that would read it as some IPv4 address (those rules live in
``net/policy.py``, the pinned connection in ``net/pinned.py``, both shared with remote MCP).
Size, time and content type are capped per download; a request's downloads run a few at a
time and share one byte budget.

Errors are what OpenAI answers when its own downloader fails: 400, ``invalid_image_url`` (or
``invalid_file_url``), ``param`` null, a message that starts "Error while downloading <url>".

Test hook: ``allow_hosts`` (or ``GATEWAY_TEST_IMAGE_ALLOW_HOSTS``, comma-separated host names
or IP literals) exempts those exact hosts from the public-address check so end-to-end tests
can serve images from 127.0.0.1. Default off; never set it in a deployment.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from responses_gateway.backends.bedrock.media import DOCUMENT_FORMATS, IMAGE_FORMATS, media_type
from responses_gateway.errors import GatewayError
from responses_gateway.net.pinned import BadUrl, http_url, pinned_transport
from responses_gateway.net.policy import (  # the SSRF rules, shared with tools/mcp/
    Refused,
    Resolver,
    allow_list,
    is_public_address,
    literal_address,
    shown_url,
)

__all__ = ["Fetched", "MediaFetcher", "is_public_address", "literal_address", "shown_url"]

Kind = Literal["image", "document"]

ALLOW_HOSTS_ENV = "GATEWAY_TEST_IMAGE_ALLOW_HOSTS"
DEFAULT_TOTAL_BYTES = 20 * 1024 * 1024  # as much as a client may send inline in one body
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Types a server may label bytes with when it does not know better; the bytes decide then.
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})


@dataclass(frozen=True, slots=True)
class Fetched:
    content_type: str
    data: bytes


class _Budget:
    """Bytes one request's downloads may still receive, shared by all of them."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def fits(self, n: int) -> bool:
        return self.used + n <= self.limit

    def spend(self, n: int) -> bool:
        self.used += n
        return self.used <= self.limit

    @property
    def exceeded(self) -> str:
        return f"the request's downloads together exceed the {self.limit} byte limit"


class MediaFetcher:
    """Downloads URLs for image / document blocks under SSRF, size, time and type limits."""

    def __init__(
        self,
        *,
        max_image_bytes: int = 3_932_160,  # Bedrock's 3.75 MB per image
        max_document_bytes: int = 4_718_592,  # Bedrock's 4.5 MB per document
        max_total_bytes: int = DEFAULT_TOTAL_BYTES,
        concurrency: int = 4,
        timeout: float = 10.0,
        max_redirects: int = 5,
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        allow_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self.max_bytes = {"image": max_image_bytes, "document": max_document_bytes}
        self.max_total_bytes = max_total_bytes
        self.concurrency = max(1, concurrency)
        self.timeout = timeout
        self.max_redirects = max_redirects
        self._resolve = resolver
        self._transport = transport
        self._allow_hosts = allow_list(allow_hosts)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, *,
                 max_total_bytes: int = DEFAULT_TOTAL_BYTES) -> MediaFetcher:
        allow = environ.get(ALLOW_HOSTS_ENV, "")
        return cls(allow_hosts=frozenset(allow.split(",")) if allow else frozenset(),
                   max_total_bytes=max_total_bytes)

    async def fetch_all(self, wanted: Sequence[tuple[str, Kind]]) -> dict[str, Fetched]:
        """Every URL of one request, or the first failure.

        All URLs are parsed before anything is downloaded; then at most ``concurrency``
        downloads run at once, all drawing on one ``max_total_bytes`` budget, and the first
        refusal cancels the rest.
        """
        for url, kind in wanted:
            self._parse(url, _refuser(url, kind))
        budget = _Budget(self.max_total_bytes)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(url: str, kind: Kind) -> Fetched:
            async with gate:
                return await self.fetch(url, kind=kind, budget=budget)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(url, kind)) for url, kind in wanted]
        except BaseExceptionGroup as failed:
            first = next((e for e in failed.exceptions if isinstance(e, GatewayError)), None)
            if first is None:
                raise
            raise first from None
        return {url: task.result() for (url, _), task in zip(wanted, tasks, strict=True)}

    async def fetch(self, url: str, *, kind: Kind = "image",
                    budget: _Budget | None = None) -> Fetched:
        refuse = _refuser(url, kind)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(url, kind, refuse, budget or _Budget(self.max_total_bytes))
        except TimeoutError:
            raise GatewayError(400, f"Timeout while downloading {shown_url(url)} (no answer "
                               f"within {self.timeout:g}s).", code=_code(kind)) from None
        except Refused as exc:  # the pinned transport's check of a host (each redirect too)
            raise refuse(str(exc)) from None
        except httpx.HTTPError as exc:
            raise refuse(f"download failed ({type(exc).__name__})") from None

    async def _fetch(self, url: str, kind: Kind, refuse: Callable[[str], GatewayError],
                     budget: _Budget) -> Fetched:
        limit = self.max_bytes[kind]
        transport = pinned_transport(httpx, resolver=self._resolve,
                                     allow_hosts=self._allow_hosts, inner=self._transport)
        async with httpx.AsyncClient(transport=transport, trust_env=False,
                                     follow_redirects=False, timeout=self.timeout) as client:
            current = self._parse(url, refuse)
            for _ in range(self.max_redirects + 1):
                request = client.build_request("GET", current, headers={"Accept": "*/*"})
                response = await client.send(request, stream=True)
                try:
                    if response.status_code in _REDIRECTS:
                        location = response.headers.get("location")
                        if not location:
                            raise refuse("redirect without a Location header")
                        current = self._parse(location, refuse, base=current)
                        continue
                    if response.status_code != 200:
                        raise refuse(f"the server answered HTTP {response.status_code}")
                    ctype = media_type(response.headers.get("content-type"))
                    if not _acceptable_type(ctype, kind):
                        raise refuse(f"unsupported content type {ctype!r}")
                    length = response.headers.get("content-length")
                    if length and length.isdigit() and int(length) > limit:
                        raise refuse(f"larger than the {limit} byte limit")
                    if length and length.isdigit() and not budget.fits(int(length)):
                        raise refuse(budget.exceeded)
                    data = bytearray()
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > limit:
                            raise refuse(f"larger than the {limit} byte limit")
                        if not budget.spend(len(chunk)):
                            raise refuse(budget.exceeded)
                    return Fetched(ctype, bytes(data))
                finally:
                    await response.aclose()
            raise refuse(f"more than {self.max_redirects} redirects")

    @staticmethod
    def _parse(text: str, refuse: Callable[[str], GatewayError],
               base: httpx.URL | None = None) -> httpx.URL:
        """A fetchable http(s) URL, or the client's 400: nothing malformed gets further."""
        try:
            return http_url(text, base=base)
        except BadUrl as exc:
            raise refuse(str(exc)) from None


def _code(kind: Kind) -> str:
    return "invalid_image_url" if kind == "image" else "invalid_file_url"


def _refuser(url: str, kind: Kind) -> Callable[[str], GatewayError]:
    """What a refusal of ``url`` looks like: OpenAI's downloader error, with the reason."""
    shown = shown_url(url)
    code = _code(kind)

    def refuse(reason: str) -> GatewayError:
        return GatewayError(400, f"Error while downloading {shown}: {reason}.", code=code)
    return refuse


def _acceptable_type(ctype: str, kind: Kind) -> bool:
    if ctype in _GENERIC_TYPES:
        return True  # decided from the bytes afterwards
    return ctype in IMAGE_FORMATS if kind == "image" else ctype in DOCUMENT_FORMATS

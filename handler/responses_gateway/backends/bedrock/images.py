"""Fetching image (and document) URLs for Bedrock, which never fetches URLs itself.

The gateway runs inside a VPC / Lambda with access to metadata services and private
networks, so a client-supplied URL is an SSRF vector. Every hop (the first URL and each
redirect, followed by hand) is parsed strictly and resolved here, *all* its addresses must be
public, and the connection is pinned to the checked address (Host header and TLS SNI keep the
name) so a second DNS answer cannot swap in a private one. A host that looks like a number but
is not a canonical IP address (``0177.0.0.1``, ``0x7f.1``, ``2130706433``) is refused, never
handed to a resolver that would read it as some IPv4 address. Size, time and content type are
capped per download; a request's downloads run a few at a time and share one byte budget.

Errors are what OpenAI answers when its own downloader fails: 400, ``invalid_image_url`` (or
``invalid_file_url``), ``param`` null, a message that starts "Error while downloading <url>".

Test hook: ``allow_hosts`` (or ``GATEWAY_TEST_IMAGE_ALLOW_HOSTS``, comma-separated host names
or IP literals) exempts those exact hosts from the public-address check so end-to-end tests
can serve images from 127.0.0.1. Default off; never set it in a deployment.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from responses_gateway.backends.bedrock.media import DOCUMENT_FORMATS, IMAGE_FORMATS, media_type
from responses_gateway.errors import GatewayError

Resolver = Callable[[str, int], Awaitable[list[str]]]
Kind = Literal["image", "document"]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOW_HOSTS_ENV = "GATEWAY_TEST_IMAGE_ALLOW_HOSTS"
DEFAULT_TOTAL_BYTES = 20 * 1024 * 1024  # as much as a client may send inline in one body
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Types a server may label bytes with when it does not know better; the bytes decide then.
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
# A label WHATWG URL parsing (and inet_aton) reads as a number: decimal, octal or hex.
_NUMERIC_LABEL = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_DNS_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")  # 1-63 chars, no dots
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


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


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public_address(ip: IPAddress) -> bool:
    """Globally routable unicast only: no private, loopback, link-local (cloud metadata),
    shared (CGNAT), reserved, multicast or unspecified addresses, also when IPv4-mapped."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.is_global and not ip.is_multicast


def literal_address(host: str) -> IPAddress | None:
    """The address an (IDNA-encoded, unbracketed) host names literally, None for a DNS name.

    Raises ValueError for a name DNS cannot carry (a label over 63 characters, more than 253
    in all), and for a host whose last label is a number but which is not a canonical
    dotted quad: resolvers read ``0177.0.0.1``, ``0x7f.1``, ``127.1`` or ``2130706433`` as
    IPv4 addresses (127.0.0.1 each), each by its own rules, so they never reach one.
    """
    if ":" in host:
        return ipaddress.IPv6Address(host)
    labels = host.split(".")
    last = labels[-1] if labels[-1] or len(labels) == 1 else labels[-2]
    if not _NUMERIC_LABEL.fullmatch(last):
        if len(host.removesuffix(".")) > 253 or not all(map(_DNS_LABEL.fullmatch, labels[:-1])) \
                or not (labels[-1] == "" or _DNS_LABEL.fullmatch(labels[-1])):
            raise ValueError(f"not a DNS name: {host!r}")
        return None
    return ipaddress.IPv4Address(host)  # four decimal parts, no leading zeros, no dot after


def shown_url(url: str) -> str:
    """The URL as an error message may quote it: no user:password, no control characters,
    at most 200 characters."""
    url = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", _USERINFO.sub(r"\1", url))
    return url if len(url) <= 200 else url[:200] + "…"


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
        self._resolve = resolver or system_resolver
        self._transport = transport
        self._allow_hosts = frozenset(h.strip().lower().strip("[]") for h in allow_hosts if h)

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
        except httpx.HTTPError as exc:
            raise refuse(f"download failed ({type(exc).__name__})") from None

    async def _fetch(self, url: str, kind: Kind, refuse: Callable[[str], GatewayError],
                     budget: _Budget) -> Fetched:
        limit = self.max_bytes[kind]
        async with httpx.AsyncClient(transport=self._transport, trust_env=False,
                                     follow_redirects=False, timeout=self.timeout) as client:
            current = self._parse(url, refuse)
            for _ in range(self.max_redirects + 1):
                request = await self._pinned_request(client, current, refuse)
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
            url = base.join(text) if base is not None else httpx.URL(text)
            host = url.raw_host.decode("ascii").lower()  # IDNA-encoded, IPv6 unbracketed
            if url.scheme in ("http", "https") and host:
                literal_address(host)
                if url.port is None or 0 < url.port < 65536:
                    return url
        except (httpx.InvalidURL, ValueError):  # UnicodeError (IDNA) is a ValueError
            raise refuse("not a valid http(s) URL") from None
        if url.scheme not in ("http", "https"):
            raise refuse("only http and https URLs can be fetched")
        raise refuse("not a valid http(s) URL")

    async def _pinned_request(
        self, client: httpx.AsyncClient, url: httpx.URL, refuse: Callable[[str], GatewayError]
    ) -> httpx.Request:
        host = url.raw_host.decode("ascii").lower()
        port = url.port or (443 if url.scheme == "https" else 80)
        literal = literal_address(host)  # _parse checked it parses
        if literal is not None:
            addresses = [literal]
        else:
            try:
                answers = await self._resolve(host, port)
            except (OSError, UnicodeError):
                answers = []
            try:
                addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in answers]
            except ValueError:
                addresses = []
            if not addresses:
                raise refuse("the host name does not resolve") from None
        if host not in self._allow_hosts and not all(map(is_public_address, addresses)):
            raise refuse("the host resolves to a private, loopback, link-local or otherwise "
                         "non-public address")
        headers = {"Host": url.netloc.decode("ascii"), "Accept": "*/*"}
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return client.build_request("GET", url.copy_with(host=str(addresses[0])),
                                    headers=headers, extensions=extensions)


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

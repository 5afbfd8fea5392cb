"""Fetching image (and document) URLs for Bedrock, which never fetches URLs itself.

The gateway runs inside a VPC / Lambda with access to metadata services and private
networks, so a client-supplied URL is an SSRF vector. Every hop (the first URL and each
redirect, followed by hand) is resolved here, *all* its addresses must be public, and the
connection is pinned to the checked address (Host header and TLS SNI keep the name) so a
second DNS answer cannot swap in a private one. Size, time and content type are capped.

Test hook: ``allow_hosts`` (or ``GATEWAY_TEST_IMAGE_ALLOW_HOSTS``, comma-separated host names
or IP literals) exempts those exact hosts from the public-address check so end-to-end tests
can serve images from 127.0.0.1. Default off; never set it in a deployment.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import httpx

from responses_gateway.backends.bedrock.media import DOCUMENT_FORMATS, IMAGE_FORMATS, media_type
from responses_gateway.errors import GatewayError

Resolver = Callable[[str, int], Awaitable[list[str]]]
Kind = Literal["image", "document"]

ALLOW_HOSTS_ENV = "GATEWAY_TEST_IMAGE_ALLOW_HOSTS"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Types a server may label bytes with when it does not know better; the bytes decide then.
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})


@dataclass(frozen=True, slots=True)
class Fetched:
    content_type: str
    data: bytes


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Globally routable unicast only: no private, loopback, link-local (cloud metadata),
    shared (CGNAT), reserved, multicast or unspecified addresses, also when IPv4-mapped."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.is_global and not ip.is_multicast


class MediaFetcher:
    """Downloads URLs for image / document blocks under SSRF, size, time and type limits."""

    def __init__(
        self,
        *,
        max_image_bytes: int = 3_932_160,  # Bedrock's 3.75 MB per image
        max_document_bytes: int = 4_718_592,  # Bedrock's 4.5 MB per document
        timeout: float = 10.0,
        max_redirects: int = 5,
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        allow_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self.max_bytes = {"image": max_image_bytes, "document": max_document_bytes}
        self.timeout = timeout
        self.max_redirects = max_redirects
        self._resolve = resolver or system_resolver
        self._transport = transport
        self._allow_hosts = frozenset(h.strip().lower().strip("[]") for h in allow_hosts if h)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> MediaFetcher:
        allow = environ.get(ALLOW_HOSTS_ENV, "")
        return cls(allow_hosts=frozenset(allow.split(",")) if allow else frozenset())

    async def fetch(self, url: str, *, kind: Kind = "image", param: str = "url") -> Fetched:
        shown = url if len(url) <= 200 else url[:200] + "…"
        code = "invalid_image_url" if kind == "image" else "invalid_file_url"

        def refuse(reason: str) -> GatewayError:
            return GatewayError(400, f"Could not fetch {kind} URL {shown!r}: {reason}.",
                                param=param, code=code)

        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(url, kind, refuse)
        except TimeoutError:
            raise refuse(f"timed out after {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise refuse(f"download failed ({type(exc).__name__})") from None

    async def _fetch(self, url: str, kind: Kind, refuse: Callable[[str], GatewayError]) -> Fetched:
        limit = self.max_bytes[kind]
        async with httpx.AsyncClient(transport=self._transport, trust_env=False,
                                     follow_redirects=False, timeout=self.timeout) as client:
            current = httpx.URL(url)
            for _ in range(self.max_redirects + 1):
                request = await self._pinned_request(client, current, refuse)
                response = await client.send(request, stream=True)
                try:
                    if response.status_code in _REDIRECTS:
                        location = response.headers.get("location")
                        if not location:
                            raise refuse("redirect without a Location header")
                        current = current.join(location)
                        continue
                    if response.status_code != 200:
                        raise refuse(f"the server answered HTTP {response.status_code}")
                    ctype = media_type(response.headers.get("content-type"))
                    if not _acceptable_type(ctype, kind):
                        raise refuse(f"unsupported content type {ctype!r}")
                    length = response.headers.get("content-length")
                    if length and length.isdigit() and int(length) > limit:
                        raise refuse(f"larger than the {limit} byte limit")
                    data = bytearray()
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > limit:
                            raise refuse(f"larger than the {limit} byte limit")
                    return Fetched(ctype, bytes(data))
                finally:
                    await response.aclose()
            raise refuse(f"more than {self.max_redirects} redirects")

    async def _pinned_request(
        self, client: httpx.AsyncClient, url: httpx.URL, refuse: Callable[[str], GatewayError]
    ) -> httpx.Request:
        if url.scheme not in ("http", "https") or not url.host:
            raise refuse("only http and https URLs can be fetched")
        host = url.raw_host.decode("ascii").lower()  # IDNA-encoded, IPv6 without brackets
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                answers = await self._resolve(host, port)
            except OSError:
                answers = []
            addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in answers]
            if not addresses:
                raise refuse("the host name does not resolve") from None
        if host not in self._allow_hosts and not all(map(is_public_address, addresses)):
            raise refuse("the host resolves to a private, loopback, link-local or otherwise "
                         "non-public address")
        headers = {"Host": url.netloc.decode("ascii"), "Accept": "*/*"}
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return client.build_request("GET", url.copy_with(host=str(addresses[0])),
                                    headers=headers, extensions=extensions)


def _acceptable_type(ctype: str, kind: Kind) -> bool:
    if ctype in _GENERIC_TYPES:
        return True  # decided from the bytes afterwards
    return ctype in IMAGE_FORMATS if kind == "image" else ctype in DOCUMENT_FORMATS

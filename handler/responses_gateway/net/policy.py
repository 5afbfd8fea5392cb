"""Where the gateway may connect on a client's behalf: the SSRF rules, in one place.

A client names URLs the gateway then fetches (Bedrock image and file URLs,
backends/bedrock/images.py) or talks to (remote MCP servers, tools/mcp/client.py). The gateway
runs inside a VPC or a Lambda with access to metadata services and private networks, so every such
connection goes through the same checks: the URL is parsed strictly, its host resolved here,
*all* its addresses must be public unless the deployment lists the host as allowed, and the
connection is pinned to the checked address (Host header and TLS SNI keep the name) so a
second DNS answer cannot swap in a private one. A host that looks like a number but is not a
canonical IP address (``0177.0.0.1``, ``0x7f.1``, ``2130706433``) is refused, never handed to
a resolver that would read it as some IPv4 address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable

Resolver = Callable[[str, int], Awaitable[list[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 forms whose low 32 bits are the whole address: IPv4-compatible (deprecated), IPv4-
# translated (SIIT), NAT64's well-known prefix. (IPv4-mapped has ``ipv4_mapped``.)
_IPV4_SPELLINGS = tuple(map(ipaddress.IPv6Network, ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96")))
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# Inside 2000::/3 but not global, and not yet known to every Python's ``is_global``.
_NOT_GLOBAL_V6 = tuple(map(ipaddress.IPv6Network, ("2001::/23", "2001:db8::/32", "3fff::/20")))
# A label WHATWG URL parsing (and inet_aton) reads as a number: decimal, octal or hex.
_NUMERIC_LABEL = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_DNS_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")  # 1-63 chars, no dots
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

NOT_RESOLVED = "the host name does not resolve"
NOT_PUBLIC = ("the host resolves to a private, loopback, link-local or otherwise non-public "
              "address")


class Refused(ValueError):
    """A host the gateway will not connect to; the message says why (no secrets in it)."""


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public_address(ip: IPAddress) -> bool:
    """Globally routable unicast only: no private, loopback, link-local (cloud metadata),
    shared (CGNAT), reserved, multicast or unspecified addresses, in any spelling.

    An IPv6 address that only spells an IPv4 one (IPv4-mapped, -compatible, -translated, the
    NAT64 well-known prefix) is judged as that IPv4 address. Any other IPv6 address must lie
    in global unicast space (2000::/3, so no site-local ``fec0::/10``, local-use NAT64
    ``64:ff9b:1::/48`` or reserved ``::/8``), be global by IANA's registry, and every IPv4
    address it tunnels to (6to4, Teredo) must be public too.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        spelled = ipv4_spelled_by(ip)
        if spelled is not None:
            ip = spelled
        elif ip not in _GLOBAL_UNICAST or any(ip in net for net in _NOT_GLOBAL_V6) \
                or not all(map(is_public_address, _tunnelled_ipv4(ip))):
            return False
    return ip.is_global and not ip.is_multicast


def ipv4_spelled_by(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address is only another spelling of, if it is one."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if any(ip in net for net in _IPV4_SPELLINGS):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _tunnelled_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses a 6to4 or Teredo address sends its packets through or to."""
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    return ip.teredo or ()


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


def allow_list(hosts: Iterable[str]) -> frozenset[str]:
    """Host names or IP literals exempt from the public-address rule, as compared."""
    return frozenset(h.strip().lower().strip("[]") for h in hosts if h and h.strip())


async def checked_addresses(
    host: str, port: int, *, resolver: Resolver | None = None,
    allow_hosts: frozenset[str] = frozenset(),
) -> list[IPAddress]:
    """The addresses ``host`` (lower-case, IDNA-encoded, unbracketed) may be reached at, the
    first to connect to; :class:`Refused` when it does not resolve, or when any address is not
    public and the host is not in ``allow_hosts``."""
    literal = literal_address(host)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            answers = await (resolver or system_resolver)(host, port)
        except (OSError, UnicodeError):
            answers = []
        try:
            addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in answers]
        except ValueError:
            addresses = []
        if not addresses:
            raise Refused(NOT_RESOLVED)
    if host not in allow_hosts and not all(map(is_public_address, addresses)):
        raise Refused(NOT_PUBLIC)
    return addresses

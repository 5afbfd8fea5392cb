"""net/policy.py: which addresses count as public, in every spelling an address can take.

An IPv6 address can carry an IPv4 one (mapped, compatible, translated, NAT64, 6to4, Teredo);
each spelling of a private, loopback or metadata address must be refused like the address.
"""

from __future__ import annotations

import ipaddress

import pytest

from responses_gateway.net.policy import (
    NOT_PUBLIC,
    Refused,
    checked_addresses,
    ipv4_spelled_by,
    is_public_address,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


NOT_PUBLIC_V6 = [
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
    "::1", "::",
    "2002:a9fe:a9fe::",  # 6to4 through 169.254.169.254
    "2002:7f00:1::",  # 6to4 through 127.0.0.1
    "2002:a00:1::1",  # 6to4 through 10.0.0.1
    "::ffff:0:a9fe:a9fe",  # IPv4-translated 169.254.169.254
    "::ffff:a9fe:a9fe",  # IPv4-mapped 169.254.169.254
    "64:ff9b:1::a9fe:a9fe",  # local-use NAT64 prefix
    "64:ff9b:1:ffff::a00:1",
    "64:ff9b::a9fe:a9fe",  # well-known NAT64 prefix, private IPv4
    "64:ff9b::7f00:1",
    "64:ff9b::a00:1",
    "fec0::1",  # site-local (deprecated)
    "fed0::a9fe:a9fe",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "2001:0:a9fe:a9fe::1",  # Teredo server 169.254.169.254
    "2001:0:5db8:d822:0:0:80ff:fffe",  # Teredo client 127.0.0.1 (bits inverted)
    "fe80::1", "fd00:ec2::254", "fc00::1", "ff02::1", "100::1", "2001:db8::1",
    "3fff::1", "5f00::1", "::1:0:0:1",
]


@pytest.mark.parametrize("address", NOT_PUBLIC_V6)
async def test_ipv6_spellings_of_non_public_addresses_are_refused(address: str) -> None:
    assert not is_public_address(ipaddress.IPv6Address(address))
    with pytest.raises(Refused, match="non-public"):
        await checked_addresses(address, 80)

    async def resolve(host: str, port: int) -> list[str]:
        return [address]
    with pytest.raises(Refused) as info:
        await checked_addresses("name.example", 80, resolver=resolve)
    assert str(info.value) == NOT_PUBLIC


@pytest.mark.parametrize("address", [
    "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001:82a::200e",
    "::ffff:5db8:d822",  # IPv4-mapped 93.184.216.34
    "64:ff9b::5db8:d822",  # NAT64 of 93.184.216.34
    "::5db8:d822",  # IPv4-compatible 93.184.216.34
    "2002:5db8:d822::1",  # 6to4 through 93.184.216.34
])
async def test_public_addresses_in_any_spelling_pass(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))
    assert [str(a) for a in await checked_addresses(address, 443)] == [address]


@pytest.mark.parametrize(("address", "ipv4"), [
    ("::ffff:7f00:1", "127.0.0.1"), ("::7f00:1", "127.0.0.1"),
    ("::ffff:0:a9fe:a9fe", "169.254.169.254"), ("64:ff9b::a00:1", "10.0.0.1"),
    ("2002:7f00:1::", None), ("2606:4700::1111", None),
])
def test_ipv4_spelled_by(address: str, ipv4: str | None) -> None:
    found = ipv4_spelled_by(ipaddress.IPv6Address(address))
    assert (str(found) if found is not None else None) == ipv4


async def test_the_allow_list_still_exempts_a_listed_literal() -> None:
    assert await checked_addresses("::7f00:1", 80, allow_hosts=frozenset({"::7f00:1"}))

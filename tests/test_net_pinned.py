"""net/pinned.py: the one pinned request, on both HTTP libraries the gateway uses (httpx for
Bedrock media, httpx2 for the MCP SDK): checked host, connection to the checked address with
the name kept in Host and SNI, each redirect hop checked again, answers capped."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import httpx
import httpx2
import pytest

from responses_gateway.net.pinned import NOT_HTTP, NOT_VALID, BadUrl, http_url, pinned_transport
from responses_gateway.net.policy import Refused

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


DNS = {"api.example": ["93.184.216.34"], "evil.example": ["169.254.169.254"],
       "swap.example": ["93.184.216.34"]}


async def resolve(host: str, port: int) -> list[str]:
    return DNS[host]


class Seen:
    def __init__(self, http: ModuleType, body: bytes = b"ok") -> None:
        self.requests: list[Any] = []
        self.body = body
        self.transport = http.MockTransport(self.handle)
        self.http = http

    def handle(self, request: Any) -> Any:
        self.requests.append(request)
        if request.url.path == "/hop":
            return self.http.Response(302, headers={"Location": "http://evil.example/x"})
        body = self.body

        class Body(self.http.AsyncByteStream):  # streamed, as a real connection answers
            async def __aiter__(self) -> Any:
                for i in range(0, len(body), 8):
                    yield body[i:i + 8]
        return self.http.Response(200, stream=Body())


@pytest.mark.parametrize("http", [httpx, httpx2], ids=["httpx", "httpx2"])
async def test_the_request_goes_to_the_checked_address_under_its_name(http: ModuleType) -> None:
    seen = Seen(http)
    transport = pinned_transport(http, resolver=resolve, inner=seen.transport)
    async with http.AsyncClient(transport=transport) as client:
        answer = await client.get("https://api.example:8443/v1?q=1")
    assert answer.status_code == 200
    [request] = seen.requests
    assert (request.url.host, request.url.port, request.url.path) == ("93.184.216.34", 8443, "/v1")
    assert request.headers["host"] == "api.example:8443"
    assert request.extensions["sni_hostname"] == "api.example"


@pytest.mark.parametrize("http", [httpx, httpx2], ids=["httpx", "httpx2"])
async def test_non_public_hosts_and_each_redirect_hop_are_refused(http: ModuleType) -> None:
    seen = Seen(http)
    transport = pinned_transport(http, resolver=resolve, inner=seen.transport)
    async with http.AsyncClient(transport=transport, follow_redirects=True) as client:
        for url in ("http://evil.example/", "http://[::7f00:1]/", "http://[2002:a9fe:a9fe::]/",
                    "http://api.example/hop"):
            with pytest.raises(Refused, match="non-public"):
                await client.get(url)
    assert [r.url.path for r in seen.requests] == ["/hop"]  # the first hop only


@pytest.mark.parametrize("http", [httpx, httpx2], ids=["httpx", "httpx2"])
async def test_answers_are_capped_where_the_caller_says(http: ModuleType) -> None:
    class TooBig(Exception):
        pass

    seen = Seen(http, body=b"x" * 100)
    transport = pinned_transport(
        http, resolver=resolve, inner=seen.transport,
        body_limit=lambda request: 10 if request.method == "POST" else None,
        too_large=lambda limit: TooBig(limit))
    async with http.AsyncClient(transport=transport) as client:
        assert len((await client.get("http://api.example/")).content) == 100
        with pytest.raises(TooBig):
            await client.post("http://api.example/", content=b"{}")


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://api.example/x", NOT_HTTP), ("file:///etc/passwd", NOT_HTTP),
    ("http://0x7f.1/", NOT_VALID), ("http:///x", NOT_VALID), ("http://[::1", NOT_VALID),
    ("http://a b/", NOT_VALID), (f"http://{'a' * 64}.example/", NOT_VALID),
])
def test_http_url_refuses_what_cannot_be_used(url: str, reason: str) -> None:
    with pytest.raises(BadUrl) as info:
        http_url(url)
    assert str(info.value) == reason


def test_http_url_joins_redirects_to_their_base() -> None:
    assert str(http_url("/b?x=1", base=httpx.URL("https://api.example/a"))) == \
        "https://api.example/b?x=1"

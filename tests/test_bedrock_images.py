"""Image / document URL fetching for Bedrock: SSRF refusals, redirects, caps, content types.

A resolver is injected so host names can point anywhere without real DNS; a local HTTP
server on 127.0.0.1 (reachable only through the test allow-list) serves images, redirects,
oversized and slow bodies.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.bedrock import BedrockBackend
from responses_gateway.backends.bedrock.images import ALLOW_HOSTS_ENV, MediaFetcher
from responses_gateway.errors import GatewayError
from tests.helpers.eventstream_server import FakeBedrock, use_dummy_aws

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.4\n" + b"x" * 32


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Routes(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    routes: ClassVar[dict[str, tuple[int, dict[str, str], bytes, float]]] = {}
    seen_hosts: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.seen_hosts.append(self.headers.get("Host", ""))
        status, headers, body, delay = self.routes.get(self.path, (404, {}, b"", 0.0))
        if delay:
            time.sleep(delay)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Transfer-Encoding" not in headers:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.end_headers()
        for i in range(0, len(body), 1024):
            piece = body[i:i + 1024]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Routes)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    _Routes.routes = {
        "/cat.png": (200, {"Content-Type": "image/png"}, PNG, 0.0),
        "/cat-octet": (200, {"Content-Type": "application/octet-stream"}, PNG, 0.0),
        "/doc.pdf": (200, {"Content-Type": "application/pdf"}, PDF, 0.0),
        "/page.html": (200, {"Content-Type": "text/html"}, b"<html></html>", 0.0),
        "/big.png": (200, {"Content-Type": "image/png"}, PNG + b"\x00" * 5000, 0.0),
        "/big-chunked.png": (200, {"Content-Type": "image/png", "Transfer-Encoding": "chunked"},
                             PNG + b"\x00" * 5000, 0.0),
        "/slow.png": (200, {"Content-Type": "image/png"}, PNG, 1.5),
        "/to-cat": (302, {"Location": "/cat.png"}, b"", 0.0),
        "/to-metadata": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"", 0.0),
        "/to-internal": (301, {"Location": "http://internal.test/x.png"}, b"", 0.0),
        "/loop": (302, {"Location": "/loop"}, b"", 0.0),
    }
    yield f"http://127.0.0.1:{port}"
    httpd.shutdown()
    httpd.server_close()


def resolver(table: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("no such host")
        return table[host]
    return resolve


DNS = {
    "loopback.test": ["127.0.0.1"],
    "private.test": ["10.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "v6loop.test": ["::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "cgnat.test": ["100.100.100.200"],
    "ec2v6.test": ["fd00:ec2::254"],
    "mixed.test": ["93.184.216.34", "10.1.2.3"],
    "internal.test": ["10.0.0.5"],
}


@pytest.mark.parametrize("url", [
    "http://loopback.test/cat.png",
    "http://private.test/cat.png",
    "http://metadata.test/latest/meta-data/",
    "http://v6loop.test/cat.png",
    "http://mapped.test/cat.png",
    "http://cgnat.test/cat.png",
    "https://ec2v6.test/cat.png",
    "http://mixed.test/cat.png",
    "http://127.0.0.1/cat.png",
    "http://10.0.0.1/cat.png",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/cat.png",
    "http://0.0.0.0/cat.png",
])
async def test_non_public_addresses_are_refused_after_resolution(url: str) -> None:
    fetcher = MediaFetcher(resolver=resolver(DNS))
    with pytest.raises(GatewayError) as info:
        await fetcher.fetch(url, param="messages[0].content[0].image_url")
    assert info.value.status == 400
    assert info.value.param == "messages[0].content[0].image_url"
    assert "non-public address" in info.value.message


async def test_the_local_server_is_refused_without_the_test_allow_list(server: str) -> None:
    with pytest.raises(GatewayError, match="non-public"):
        await MediaFetcher().fetch(f"{server}/cat.png")


async def test_allow_listed_local_server_is_fetched(server: str) -> None:
    fetcher = MediaFetcher(allow_hosts=frozenset({"127.0.0.1"}))
    fetched = await fetcher.fetch(f"{server}/cat.png")
    assert (fetched.content_type, fetched.data) == ("image/png", PNG)
    assert (await fetcher.fetch(f"{server}/to-cat")).data == PNG  # redirects followed by hand


@pytest.mark.parametrize("path", ["/to-metadata", "/to-internal"])
async def test_redirect_to_a_non_public_address_is_refused(server: str, path: str) -> None:
    fetcher = MediaFetcher(resolver=resolver(DNS), allow_hosts=frozenset({"127.0.0.1"}))
    with pytest.raises(GatewayError) as info:
        await fetcher.fetch(f"{server}{path}")
    assert info.value.status == 400 and "non-public address" in info.value.message


async def test_connection_is_pinned_to_the_checked_address_with_the_original_host(
    server: str,
) -> None:
    port = server.rsplit(":", 1)[1]
    fetcher = MediaFetcher(resolver=resolver({"img.test": ["127.0.0.1"]}),
                           allow_hosts=frozenset({"img.test"}))
    _Routes.seen_hosts.clear()
    fetched = await fetcher.fetch(f"http://img.test:{port}/cat.png")
    assert fetched.data == PNG
    assert _Routes.seen_hosts == [f"img.test:{port}"]


@pytest.mark.parametrize(("path", "reason"), [
    ("/big.png", "byte limit"),
    ("/big-chunked.png", "byte limit"),
    ("/page.html", "unsupported content type"),
    ("/nothing.png", "HTTP 404"),
    ("/loop", "redirects"),
    ("/slow.png", "timed out"),
])
async def test_fetch_limits(server: str, path: str, reason: str) -> None:
    fetcher = MediaFetcher(max_image_bytes=1000, timeout=0.5,
                           allow_hosts=frozenset({"127.0.0.1"}))
    with pytest.raises(GatewayError) as info:
        await fetcher.fetch(f"{server}{path}")
    assert info.value.status == 400
    assert reason in info.value.message


async def test_allow_list_comes_only_from_the_documented_test_variable(server: str) -> None:
    assert (await MediaFetcher.from_env({ALLOW_HOSTS_ENV: "127.0.0.1"})
            .fetch(f"{server}/cat.png")).data == PNG
    with pytest.raises(GatewayError):
        await MediaFetcher.from_env({}).fetch(f"{server}/cat.png")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBedrock]:
    use_dummy_aws(monkeypatch)
    with FakeBedrock() as server:
        server.stream("us.amazon.nova-lite-v1:0", [
            {"messageStart": {"role": "assistant"}},
            {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "A cat."}}},
            {"messageStop": {"stopReason": "end_turn"}},
            {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                          "metrics": {"latencyMs": 1}}}])
        yield server


def image_request(*urls: str) -> BackendRequest:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "What is this?"}]
    for url in urls:
        if url.endswith(".pdf"):
            parts.append({"type": "file", "file": {"file_url": url, "filename": "doc.pdf"}})
        else:
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return BackendRequest(body={"model": "us.amazon.nova-lite-v1:0", "stream": True,
                                "messages": [{"role": "user", "content": parts}]})


async def test_backend_sends_fetched_bytes_to_bedrock(fake: FakeBedrock, server: str) -> None:
    fetcher = MediaFetcher(allow_hosts=frozenset({"127.0.0.1"}))
    backend = BedrockBackend(endpoint_url=fake.url, image_fetcher=fetcher, max_attempts=1)
    chunks = [c async for batch in backend.stream(image_request(
        f"{server}/cat-octet", f"{server}/doc.pdf")) for c in batch]
    assert chunks[1]["choices"][0]["delta"]["content"] == "A cat."
    await backend.aclose()
    content = fake.requests[-1].body["messages"][0]["content"]
    assert content[1] == {"image": {"format": "png",
                                    "source": {"bytes": base64.b64encode(PNG).decode()}}}
    assert content[2] == {"document": {"format": "pdf", "name": "doc",
                                       "source": {"bytes": base64.b64encode(PDF).decode()}}}


async def test_backend_refuses_before_calling_bedrock(fake: FakeBedrock, server: str) -> None:
    backend = BedrockBackend(endpoint_url=fake.url, max_attempts=1,
                             image_fetcher=MediaFetcher(resolver=resolver(DNS)))
    with pytest.raises(GatewayError) as info:
        async for _ in backend.stream(image_request("http://metadata.test/iam.png")):
            pass
    assert info.value.status == 400
    assert info.value.param == "messages[0].content[1].image_url"
    assert fake.requests == []

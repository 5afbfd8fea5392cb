"""Image / document URL fetching for Bedrock: SSRF refusals, redirects, caps, content types.

A resolver is injected so host names can point anywhere without real DNS; a local HTTP
server on 127.0.0.1 (reachable only through the test allow-list) serves images, redirects,
oversized and slow bodies.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.bedrock import BedrockBackend
from responses_gateway.backends.bedrock.images import (
    ALLOW_HOSTS_ENV,
    MediaFetcher,
    literal_address,
    shown_url,
)
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
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
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
        await fetcher.fetch(url)
    assert (info.value.status, info.value.code, info.value.param) == (
        400, "invalid_image_url", None)  # what OpenAI's own downloader answers
    assert info.value.message.startswith(f"Error while downloading {url}: ")
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
    ("/slow.png", "Timeout while downloading"),
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


@pytest.mark.slow
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
    assert (info.value.status, info.value.code) == (400, "invalid_image_url")
    assert fake.requests == []


# -- issue 16: malformed URLs, odd IPv4 spellings, file URLs, amplification ------------------


class Recorder:
    """A resolver and an httpx transport that record what reached them; the transport serves
    ``body`` (a PNG unless told) after ``delay`` seconds and tracks how many run at once."""

    def __init__(self, body: bytes = PNG, content_type: str = "image/png",
                 delay: float = 0.0) -> None:
        self.resolved: list[str] = []
        self.requested: list[str] = []
        self.running = self.most_running = 0
        self.body, self.content_type, self.delay = body, content_type, delay
        self.transport = httpx.MockTransport(self._handle)

    async def resolve(self, host: str, port: int) -> list[str]:
        self.resolved.append(host)
        return ["93.184.216.34"]  # public: every name may be fetched

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requested.append(f"{request.headers['host']}{request.url.raw_path.decode()}")
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.running -= 1
        return httpx.Response(200, headers={"Content-Type": self.content_type},
                              content=self.body)

    def fetcher(self, **options: Any) -> MediaFetcher:
        return MediaFetcher(resolver=self.resolve, transport=self.transport, **options)


MALFORMED = [
    "http://[::1",
    "http://[::1/a.png",
    "http://0177.0.0.1:1/a.png",
    "http://127.000.000.001/a.png",
    "http://①②⑦.0.0.1/a.png",
    f"http://{'a' * 300}.example.com/a.png",
    f"http://{'a' * 64}.example.com/a.png",
    f"http://{'abcdefgh.' * 30}example.com/a.png",
    "http://a\x00b.example.com/a.png",
    "http://example.com/a.png\r\nX-Injected: 1",
    "http://exa mple.com/a.png",
    "http://example.com:99999/a.png",
    "http://%31%32%37.0.0.1/a.png",
    "http:///a.png",
    "http://:80/a.png",
]


@pytest.mark.parametrize("url", MALFORMED)
async def test_malformed_urls_are_400s_and_nothing_is_resolved_or_fetched(url: str) -> None:
    seen = Recorder()
    for kind, code in (("image", "invalid_image_url"), ("document", "invalid_file_url")):
        with pytest.raises(GatewayError) as info:
            await seen.fetcher().fetch(url, kind=kind)
        assert (info.value.status, info.value.code, info.value.param) == (400, code, None)
        assert info.value.message.startswith("Error while downloading http")
        assert "\x00" not in info.value.message and "\r" not in info.value.message
    assert (seen.resolved, seen.requested) == ([], [])


# Spellings resolvers (inet_aton, WHATWG) read as an IPv4 address. 127.0.0.1 and a public
# address alike: no normalising rule to get wrong, none of them is resolved or fetched.
NUMERIC_HOSTS = [
    "0177.0.0.1", "0x7f.0.0.1", "0x7f.1", "127.1", "2130706433", "0x7f000001",
    "017700000001", "127.0.0.1.", "0x", "1.2.3.4.5", "0xa9.254.169.254", "0251.0376.0251.0376",
    "0x5d.0xb8.0xd8.0x22", "93.184.55298", "1572395042", "example.0x10", "example.123",
]


@pytest.mark.parametrize("host", NUMERIC_HOSTS)
async def test_odd_ipv4_spellings_are_refused_without_resolving(host: str) -> None:
    seen = Recorder()
    with pytest.raises(GatewayError) as info:
        await seen.fetcher().fetch(f"http://{host}/a.png")
    assert (info.value.status, info.value.code) == (400, "invalid_image_url")
    assert "not a valid http(s) URL" in info.value.message
    assert (seen.resolved, seen.requested) == ([], [])
    with pytest.raises(ValueError):
        literal_address(host.lower())


@pytest.mark.parametrize(("host", "expected"), [
    ("93.184.216.34", "93.184.216.34"), ("::1", "::1"), ("example.com", None),
    ("example.com.", None), ("xn--bcher-kva.example", None), ("my_host.example", None),
    ("1example.com", None), ("localhost", None),
])
def test_literal_address_reads_canonical_ips_and_leaves_names_to_dns(
    host: str, expected: str | None
) -> None:
    found = literal_address(host)
    assert (str(found) if found is not None else None) == expected


async def test_a_canonical_public_address_is_fetched_from_that_address() -> None:
    seen = Recorder()
    fetched = await seen.fetcher().fetch("http://93.184.216.34/a.png")
    assert fetched.data == PNG
    assert seen.resolved == [] and seen.requested == ["93.184.216.34/a.png"]


async def test_a_bad_redirect_location_is_a_400() -> None:
    def redirect(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://0x7f.1/a.png"})
    fetcher = MediaFetcher(resolver=Recorder().resolve, transport=httpx.MockTransport(redirect))
    with pytest.raises(GatewayError) as info:
        await fetcher.fetch("http://img.example/a.png")
    assert (info.value.status, info.value.code) == (400, "invalid_image_url")


def test_shown_url_drops_credentials_and_control_characters() -> None:
    assert shown_url("https://user:secret@example.com/a.png") == "https://example.com/a.png"
    assert shown_url("http://e.com/a\r\n\x00") == "http://e.com/a\\x0d\\x0a\\x00"
    assert len(shown_url("http://e.com/" + "a" * 500)) == 201


async def test_document_urls_fail_as_invalid_file_url(server: str) -> None:
    fetcher = MediaFetcher(allow_hosts=frozenset({"127.0.0.1"}))
    assert (await fetcher.fetch(f"{server}/doc.pdf", kind="document")).data == PDF
    with pytest.raises(GatewayError) as info:
        await fetcher.fetch(f"{server}/cat.png", kind="document")
    assert (info.value.code, info.value.param) == ("invalid_file_url", None)
    assert "unsupported content type 'image/png'" in info.value.message


async def test_fetch_all_runs_a_few_downloads_at_a_time() -> None:
    seen = Recorder(delay=0.02)
    urls = [(f"http://img{i}.example/a.png", "image") for i in range(12)]
    fetched = await seen.fetcher(concurrency=3).fetch_all(urls)  # type: ignore[arg-type]
    assert [fetched[u].data for u, _ in urls] == [PNG] * 12
    assert len(seen.requested) == 12
    assert seen.most_running == 3


async def test_fetch_all_parses_every_url_before_downloading_any() -> None:
    seen = Recorder()
    urls = [(f"http://img{i}.example/a.png", "image") for i in range(5)]
    with pytest.raises(GatewayError) as info:
        await seen.fetcher().fetch_all([*urls, ("http://[::1", "image")])  # type: ignore[list-item]
    assert info.value.code == "invalid_image_url"
    assert (seen.resolved, seen.requested) == ([], [])


async def test_fetch_all_shares_one_byte_budget_per_request() -> None:
    seen = Recorder(body=PNG + b"\x00" * 960)  # 1000 bytes each
    urls = [(f"http://img{i}.example/a.png", "image") for i in range(3)]
    fetched = await seen.fetcher(max_total_bytes=3000).fetch_all(urls)  # type: ignore[arg-type]
    assert len(fetched) == 3
    with pytest.raises(GatewayError) as info:
        await seen.fetcher(max_total_bytes=2500, concurrency=1).fetch_all(
            urls)  # type: ignore[arg-type]
    assert (info.value.status, info.value.code) == (400, "invalid_image_url")
    assert "downloads together exceed the 2500 byte limit" in info.value.message
    assert len(seen.requested) == 3 + 3  # the third is refused (its Content-Length says so)


async def test_fetch_all_budget_also_counts_bodies_without_a_length() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield PNG
        yield b"\x00" * 960

    def chunked(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "image/png"},
                              content=body())  # no Content-Length
    fetcher = MediaFetcher(resolver=Recorder().resolve, transport=httpx.MockTransport(chunked),
                           max_total_bytes=2500, concurrency=1)
    with pytest.raises(GatewayError, match="together exceed the 2500 byte limit"):
        await fetcher.fetch_all([(f"http://i{i}.example/a.png", "image") for i in range(3)])


async def test_backend_counts_parts_before_downloading_anything() -> None:
    """400 image URLs: one 400 and not a single download (was: 400 downloads at once)."""
    seen = Recorder()
    backend = BedrockBackend(endpoint_url="http://127.0.0.1:9", max_attempts=1,
                             image_fetcher=seen.fetcher())
    request = image_request(*(f"http://img{i}.example/a.png" for i in range(400)))
    with pytest.raises(GatewayError) as info:
        await backend.prepare(request)
    assert (info.value.status, info.value.param) == (400, "messages[0].content[21].image_url")
    assert "at most 20 images" in info.value.message
    assert (seen.resolved, seen.requested) == ([], [])


async def test_backend_downloads_file_urls_sent_as_chat_file_data(fake: FakeBedrock) -> None:
    """A Responses ``input_file.file_url`` reaches the backend as chat ``file_data`` (see
    translate/to_chat.py): it is downloaded, not base64-decoded as if it were the file."""
    seen = Recorder(body=PDF, content_type="application/pdf")
    backend = BedrockBackend(endpoint_url=fake.url, max_attempts=1, image_fetcher=seen.fetcher())
    request = BackendRequest(body={"model": "us.amazon.nova-lite-v1:0", "stream": True,
                                   "messages": [{"role": "user", "content": [
                                       {"type": "text", "text": "Summarise."},
                                       {"type": "file", "file": {
                                           "file_data": "https://docs.example/q3.pdf",
                                           "filename": "q3.pdf"}}]}]})
    await backend.prepare(request)
    [_ async for _ in backend.stream(request)]
    await backend.aclose()
    assert seen.requested == ["docs.example/q3.pdf"]
    assert fake.requests[-1].body["messages"][0]["content"][1] == {"document": {
        "format": "pdf", "name": "q3", "source": {"bytes": base64.b64encode(PDF).decode()}}}

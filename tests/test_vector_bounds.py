"""Issue 40, vector stores: what a tenant supplies cannot hold the event loop. Through
openai-python against the gateway on both engines (local SQLite; DynamoDB on moto and S3
Vectors on its fake):

- a search's ``filters`` are bounded (values in in/nin lists, filters, nesting, key and string
  lengths: a 400 naming the param), and a store's rows are tested in a thread when many;
- a search takes at most GATEWAY_MAX_SEARCH_QUERIES queries, and this process embeds at most
  GATEWAY_MAX_SEARCH_EMBEDDINGS searches' queries at once;
- a file's text is extracted in a child process under GATEWAY_EXTRACT_TIMEOUT and
  GATEWAY_MAX_FILE_TOKENS: a crafted PDF (25 pages sharing one content stream of 1 MB) and a
  20 MB HTML file end ``failed`` while ``GET /health`` keeps answering.

Embeddings come from tests/helpers/embedding_server.py (a deterministic hashing embedder).
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types import VectorStore

from responses_gateway.errors import GatewayError
from responses_gateway.vectors import service
from responses_gateway.vectors.chunking import parse_strategy
from responses_gateway.vectors.extract import ExtractLimits, Invalid, extract_chunks
from responses_gateway.vectors.filters import FilterLimits, compile_filter
from tests.helpers.embedding_server import EmbeddingServer
from tests.helpers.file_storage import ENGINES, gateway_on
from tests.helpers.gateway_server import GatewayServer

KEY = "key-bounds"
EXTRACT_TIMEOUT = 2.0  # seconds: the crafted files take pypdf / html.parser far longer
HEALTH_BOUND = 5.0  # seconds: generous; before the fix /health waited 10-100 s


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, embeddings: EmbeddingServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with gateway_on(request.param, tmp_path_factory.mktemp("bounds"), api_keys=(KEY,),
                    embedding_url=embeddings.base_url, embedding_model="hashing-384",
                    extract_timeout=EXTRACT_TIMEOUT, max_search_embeddings=1,
                    max_body_bytes=32 * 1024 * 1024) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def store(client: OpenAI) -> VectorStore:
    vs = client.vector_stores.create(name="bounds")
    for name, text, attributes in (
            ("lava.txt", "Lava flows from the volcano.", {"topic": "geology", "flag": True}),
            ("bread.txt", "Bread rises in the oven.", {"topic": "food", "flag": 1})):
        f = client.vector_stores.files.upload_and_poll(
            vector_store_id=vs.id, file=(name, text.encode()), poll_interval_ms=50)
        assert f.status == "completed", f.last_error
        client.vector_stores.files.update(f.id, vector_store_id=vs.id, attributes=attributes)
    return vs


def _bad_request(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as caught:
        call()
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error", body
    return body


def _names(client: OpenAI, store: VectorStore, filters: Any) -> set[str]:
    page = client.vector_stores.search(store.id, query="lava bread", filters=filters)
    return {r.filename for r in page.data}


# -- filters --------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_million_value_nin_list_is_a_400(gateway: GatewayServer, store: VectorStore) -> None:
    """The issue's 15 MB body, refused by its size before any of it is compared (sent with
    httpx: openai-python takes ~40 s to walk a million values before sending them)."""
    values = [f"value-{i:08d}" for i in range(1_000_000)]
    answer = httpx.post(f"{gateway.base_url}/vector_stores/{store.id}/search",
                        headers={"authorization": f"Bearer {KEY}"}, timeout=120,
                        json={"query": "lava", "filters": {"type": "nin", "key": "topic",
                                                           "value": values}})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "filters.value"
    assert "GATEWAY_MAX_FILTER_VALUES" in error["message"]


def test_filter_bounds_name_the_param(client: OpenAI, store: VectorStore) -> None:
    def search(filters: Any) -> dict[str, Any]:
        return _bad_request(lambda: client.vector_stores.search(store.id, query="lava",
                                                                filters=filters))

    eq = {"type": "eq", "key": "topic", "value": "food"}
    # values of every in / nin list together
    half = [str(i) for i in range(600)]
    body = search({"type": "and", "filters": [
        {"type": "in", "key": "topic", "value": half},
        {"type": "nin", "key": "topic", "value": half}]})
    assert body["param"] == "filters.filters[1].value"
    # filters in one filter
    body = search({"type": "or", "filters": [eq] * 64})
    assert body["param"] == "filters.filters" and "GATEWAY_MAX_FILTER_CONDITIONS" in \
        body["message"]
    # nesting
    nested: dict[str, Any] = eq
    for _ in range(9):
        nested = {"type": "and", "filters": [nested]}
    body = search(nested)
    assert "GATEWAY_MAX_FILTER_DEPTH" in body["message"]
    assert body["param"] == "filters" + ".filters[0]" * 8
    # a key or a string longer than an attribute's (OpenAI: 64 and 512 characters)
    body = search({"type": "eq", "key": "k" * 65, "value": "x"})
    assert body["param"] == "filters.key" and body["code"] == "string_above_max_length"
    body = search({"type": "in", "key": "topic", "value": ["ok", "v" * 513]})
    assert body["param"] == "filters.value[1]"


def test_filters_at_their_bounds_still_filter(client: OpenAI, store: VectorStore) -> None:
    """An in / nin list of the most values allowed works, with OpenAI's typing: a boolean is
    never equal to a number (Python's ``True == 1`` is)."""
    many = [f"other-{i}" for i in range(999)]
    assert _names(client, store, {"type": "in", "key": "topic",
                                  "value": [*many, "food"]}) == {"bread.txt"}
    assert _names(client, store, {"type": "nin", "key": "topic",
                                  "value": [*many, "food"]}) == {"lava.txt"}
    assert _names(client, store, {"type": "in", "key": "flag", "value": [1]}) == {"bread.txt"}
    assert _names(client, store, {"type": "in", "key": "flag", "value": [True]}) == \
        {"lava.txt"}
    assert _names(client, store, {"type": "nin", "key": "missing", "value": ["x"]}) == \
        {"lava.txt", "bread.txt"}
    nested: dict[str, Any] = {"type": "eq", "key": "topic", "value": "food"}
    for _ in range(8):
        nested = {"type": "or", "filters": [nested]}
    assert _names(client, store, nested) == {"bread.txt"}


def test_file_search_tool_filters_have_the_same_bounds() -> None:
    from responses_gateway.config import Settings
    from responses_gateway.tools.file_search.options import Options

    limits = FilterLimits.of(Settings(max_filter_values=3))
    tool = {"type": "file_search", "vector_store_ids": ["vs_1"],
            "filters": {"type": "in", "key": "a", "value": ["1", "2", "3", "4"]}}
    with pytest.raises(GatewayError) as caught:
        Options.of(tool, "tools[2]", (), "t", limits)
    assert caught.value.status == 400 and caught.value.param == "tools[2].filters.value"


def test_many_rows_are_tested_in_a_thread() -> None:
    """A store's rows times the filter's size past a few thousand tests run in a thread, not
    on the event loop; a few run inline."""
    keep = compile_filter({"type": "in", "key": "n", "value": list(range(0, 2_000, 2))})
    threads: set[str] = set()

    def recording(attrs: dict[str, Any]) -> bool:
        threads.add(threading.current_thread().name)
        return keep(attrs)

    watched = type(keep)(recording, keep.size)
    many = {f"file-{i}": {"attributes": {"n": i}} for i in range(10_000)}
    few = {f"file-{i}": {"attributes": {"n": i}} for i in range(10)}

    async def run() -> tuple[set[str], set[str], str]:
        return (await service._allowed(many, watched), await service._allowed(few, watched),
                threading.current_thread().name)

    allowed_many, allowed_few, loop_thread = asyncio.run(run())
    assert len(allowed_many) == 1_000 and allowed_few == {f"file-{i}" for i in range(0, 10, 2)}
    assert loop_thread in threads and len(threads) == 2  # the few inline, the many elsewhere


def test_settings_reach_the_bounds() -> None:
    from responses_gateway.config import settings_from_env

    settings = settings_from_env({
        "GATEWAY_MAX_SEARCH_QUERIES": "2", "GATEWAY_MAX_SEARCH_EMBEDDINGS": "3",
        "GATEWAY_MAX_FILTER_VALUES": "4", "GATEWAY_MAX_FILTER_CONDITIONS": "5",
        "GATEWAY_MAX_FILTER_DEPTH": "6", "GATEWAY_EXTRACT_TIMEOUT": "7.5",
        "GATEWAY_MAX_FILE_TOKENS": "8"})
    assert service.SearchLimits.of(settings) == service.SearchLimits(2, 3, FilterLimits(4, 5, 6))
    assert ExtractLimits.of(settings) == ExtractLimits(7.5, 8)


# -- queries --------------------------------------------------------------------------------

def test_queries_are_bounded(client: OpenAI, store: VectorStore) -> None:
    body = _bad_request(lambda: client.vector_stores.search(
        store.id, query=[f"query {i}" for i in range(5_000)]))
    assert body["param"] == "query" and body["code"] == "array_above_max_length"
    assert "GATEWAY_MAX_SEARCH_QUERIES" in body["message"]
    page = client.vector_stores.search(store.id, query=["lava", "bread", "a", "b", "c"])
    assert {r.filename for r in page.data} == {"lava.txt", "bread.txt"}


def test_query_embeddings_in_flight_are_bounded(client: OpenAI, store: VectorStore,
                                                embeddings: EmbeddingServer) -> None:
    """GATEWAY_MAX_SEARCH_EMBEDDINGS=1 here: three searches at once, one embeddings call
    reaches the model while it stalls; all three answer once it resumes."""
    before = embeddings.arrived
    embeddings.stall("zebra")
    try:
        with ThreadPoolExecutor(3) as pool:
            calls = [pool.submit(client.vector_stores.search, store.id, query=f"zebra {i}")
                     for i in range(3)]
            deadline = time.monotonic() + 10
            while embeddings.arrived == before and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.5)  # room for the others to arrive, were they let through
            assert embeddings.arrived - before == 1
            embeddings.resume()
            for call in calls:
                assert call.result(timeout=30).object == "vector_store.search_results.page"
    finally:
        embeddings.resume()
    assert embeddings.arrived - before == 3


# -- text extraction ------------------------------------------------------------------------

def build_pdf(streams: list[bytes], page_streams: list[int]) -> bytes:
    """A PDF of pages drawn by ``streams`` (FlateDecode), page i by ``page_streams[i]``."""
    first_stream, first_page = 4, 4 + len(streams)
    kids = " ".join(f"{first_page + i} 0 R" for i in range(len(page_streams)))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {len(page_streams)} >>".encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for data in streams:
        packed = zlib.compress(data, 9)
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream"
                       % (len(packed), packed))
    objects += [f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font "
                f"<< /F1 3 0 R >> >> /Contents {first_stream + s} 0 R >>".encode()
                for s in page_streams]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def crafted_pdf() -> bytes:
    """The issue's PDF: 25 pages sharing one content stream of 1 MB (7 kB in all)."""
    line = b"BT /F1 12 Tf 72 712 Td (Hello world) Tj ET\n"
    return build_pdf([line * (1_000_000 // len(line))], [0] * 25)


class HealthProbe:
    """``GET /health`` again and again in a thread; the slowest answer it saw."""

    def __init__(self, url: str) -> None:
        self.url, self.slowest, self.answers, self.failures = url + "/health", 0.0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=120) as http:
            while not self._stop.is_set():
                started = time.monotonic()
                self.failures += http.get(self.url).status_code != 200
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.answers += 1
                time.sleep(0.05)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(130)


def _ingest(client: OpenAI, gateway: GatewayServer, name: str, data: bytes) -> Any:
    vs = client.vector_stores.create(name=name)
    with HealthProbe(gateway.url) as probe:
        f = client.vector_stores.files.upload_and_poll(
            vector_store_id=vs.id, file=(name, data), poll_interval_ms=100)
    assert probe.answers >= 2 and not probe.failures
    assert probe.slowest < HEALTH_BOUND, probe.slowest
    return f


@pytest.mark.slow
def test_crafted_pdf_fails_on_time_and_the_loop_answers(client: OpenAI,
                                                         gateway: GatewayServer) -> None:
    data = crafted_pdf()
    assert len(data) < 10_000
    f = _ingest(client, gateway, "crafted.pdf", data)
    assert f.status == "failed" and f.last_error is not None
    assert f.last_error.code == "invalid_file"
    assert "GATEWAY_EXTRACT_TIMEOUT" in f.last_error.message


@pytest.mark.slow
def test_big_html_fails_on_time_and_the_loop_answers(client: OpenAI,
                                                      gateway: GatewayServer) -> None:
    data = b"<html><body>" + b"<div><p>word and more</p></div>" * 650_000 + b"</body></html>"
    assert len(data) > 20_000_000
    f = _ingest(client, gateway, "big.html", data)
    assert f.status == "failed" and f.last_error is not None
    assert f.last_error.code == "invalid_file"
    assert "GATEWAY_EXTRACT_TIMEOUT" in f.last_error.message


def test_a_pdf_is_read_in_its_child_and_searchable(client: OpenAI) -> None:
    data = build_pdf([b"BT /F1 12 Tf 72 712 Td (Basalt columns form as lava cools) Tj ET"],
                     [0])
    vs = client.vector_stores.create(name="pdf")
    f = client.vector_stores.files.upload_and_poll(vector_store_id=vs.id,
                                                   file=("columns.pdf", data),
                                                   poll_interval_ms=50)
    assert f.status == "completed", f.last_error
    hit = client.vector_stores.search(vs.id, query="basalt columns").data[0]
    assert "Basalt columns form as lava cools" in hit.content[0].text


@pytest.mark.slow
def test_token_bound_fails_the_file_invalid() -> None:
    """OpenAI's 5,000,000 tokens per file (GATEWAY_MAX_FILE_TOKENS), here 1,000: a small file
    (read in a thread) and a large one (read in the child) past it are invalid_file."""
    strategy = parse_strategy(None)
    limits = ExtractLimits(timeout=60, max_tokens=1_000)
    small = b"word " * 1_001
    large = b"word " * 100_000
    for name, data in (("small.txt", small), ("large.txt", large), ("page.html", large)):
        with pytest.raises(Invalid, match="more than 1000 tokens"):
            asyncio.run(extract_chunks(name, data, strategy, limits))
    assert len(asyncio.run(extract_chunks("fine.txt", b"word " * 1_000, strategy,
                                          limits))) == 2

"""web_search run by the gateway (issue 30), end to end: openai-python against the gateway,
the scripted Chat Completions upstream as the model, a local SearXNG-speaking provider and a
local web site. Every streamed event is validated against the SDK's models and the grammar."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.search_providers import RESULTS, SearchProvider, WebSite

KEY = "sk-searxng-proxy-secret-31"
CITED = RESULTS[0]


@pytest.fixture(scope="module")
def provider() -> Iterator[SearchProvider]:
    with SearchProvider("searxng", key=KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def site() -> Iterator[WebSite]:
    with WebSite() as web:
        yield web


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, provider: SearchProvider,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("web_search") / "gateway.db"
    settings = e2e_settings(upstream, db, web_search_provider="searxng",
                            web_search_url=provider.base_url, web_search_api_key=KEY,
                            web_allow_hosts=("127.0.0.1",), web_page_timeout=5.0)
    with GatewayServer(settings) as server:
        yield server


def searching(marker: str, answer: str, name: str = "web_search",
              args: str = '{"query": "rust edition"}') -> str:
    """The model calls ``name`` once, then answers ``answer`` (citing as it likes)."""
    return (f"[[script:tool names={name} args='{args}' times=1 then=text "
            f"text=\"{answer}\" key={marker}]] {marker}")


def answer_citing(url: str = CITED["url"], title: str = "Rust") -> str:
    return f"Rust 2024 shipped in 1.85 [{title}]({url}); see also [x](https://not.a.source/)."


def web_search_items(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in response["output"] if i["type"] == "web_search_call"]


@pytest.mark.parametrize("stream", [True, False])
def test_search_streams_events_and_cites(client: OpenAI, upstream: ScriptedUpstream,
                                         provider: SearchProvider, stream: bool) -> None:
    marker = f"search-{stream}"
    text = answer_citing()
    kwargs: Any = {"model": "m", "input": searching(marker, text),
                   "tools": [{"type": "web_search"}],
                   "include": ["web_search_call.action.sources"]}
    if stream:
        events = sdk_events(client.responses.create(stream=True, **kwargs))
        check_stream(events)
        response = events[-1]["response"]
        kinds = [e["type"] for e in events]
        at = kinds.index("response.web_search_call.in_progress")
        assert kinds[at - 1:at + 4] == [
            "response.output_item.added", "response.web_search_call.in_progress",
            "response.web_search_call.searching", "response.web_search_call.completed",
            "response.output_item.done"]
        added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
        assert [e["annotation"]["url"] for e in added] == [CITED["url"]]
        assert added[0]["annotation_index"] == 0
    else:
        response = check_response(client.responses.create(**kwargs))
    [call] = web_search_items(response)
    assert call["id"].startswith("ws_") and call["status"] == "completed"
    assert call["action"]["type"] == "search" and call["action"]["query"] == "rust edition"
    assert [s["url"] for s in call["action"]["sources"]] == [r["url"] for r in RESULTS]
    message = response["output"][-1]
    part = message["content"][0]
    assert part["text"] == text
    link = f"[Rust]({CITED['url']})"
    start = text.index(link)
    # Only the link to a source this response returned is cited, exactly where it is.
    assert part["annotations"] == [{"type": "url_citation", "start_index": start,
                                    "end_index": start + len(link), "url": CITED["url"],
                                    "title": CITED["title"]}]
    assert response["tools"][0]["type"] == "web_search"
    assert response["tool_usage"]["web_search"] == {"num_requests": 1}  # one search ran
    assert list(response["tool_usage"]) == ["image_gen", "web_search"]  # OpenAI's order
    assert response["tool_usage"]["image_gen"]["total_tokens"] == 0
    # The provider was asked; the model got the results, numbered with URLs, next turn.
    asked = [r for r in provider.requests if r.params.get("q") == "rust edition"]
    assert asked and asked[-1].headers["authorization"] == f"Bearer {KEY}"
    second = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    result = second["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    assert f"[1] {CITED['title']}\nURL: {CITED['url']}" in result["content"]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "web_search"
    assert response["usage"]["input_tokens"] > 0


def test_sources_only_when_included(client: OpenAI) -> None:
    response = check_response(client.responses.create(
        model="m", input=searching("no-sources", "Done."), tools=[{"type": "web_search"}]))
    [call] = web_search_items(response)
    assert call["action"] == {"type": "search", "query": "rust edition"}


@pytest.mark.slow
def test_open_page_and_find_in_page(client: OpenAI, upstream: ScriptedUpstream,
                                    site: WebSite) -> None:
    url = site.url + "/page"
    cited = f"Editions are opt-in [guide]({url})."
    response = check_response(client.responses.create(
        model="m", input=searching("open", cited, name="open_page",
                                   args=json.dumps({"url": url})),
        tools=[{"type": "web_search"}]))
    [call] = web_search_items(response)
    assert call["action"] == {"type": "open_page", "url": url}
    assert call["status"] == "completed"
    assert response["tool_usage"]["web_search"] == {"num_requests": 0}  # a page, no search
    read = [b for b in upstream.requests if "open" in str(b["messages"])][-1]["messages"][-1]
    assert "# The edition guide" in read["content"] and "var secret" not in read["content"]
    part = response["output"][-1]["content"][0]
    assert part["annotations"][0]["url"] == url
    assert part["annotations"][0]["title"] == "Edition & guide"

    response = check_response(client.responses.create(
        model="m", input=searching("find", "Found.", name="find_in_page",
                                   args=json.dumps({"url": url, "pattern": "RPIT"})),
        tools=[{"type": "web_search"}]))
    [call] = web_search_items(response)
    assert call["action"] == {"type": "find_in_page", "url": url, "pattern": "RPIT"}
    read = [b for b in upstream.requests if "find" in str(b["messages"])][-1]["messages"][-1]
    assert "RPIT lifetime capture" in read["content"]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/unclosed-title", "/big-table"])
def test_pages_slow_to_parse_never_hold_the_event_loop(
        gateway: GatewayServer, client: OpenAI, upstream: ScriptedUpstream, site: WebSite,
        path: str) -> None:
    """A page of 105 kB of unclosed ``<title>`` (a quadratic regex held the loop 22 s) or a
    1.7 MB table (html2text on the loop: seconds) is read off the loop, within
    GATEWAY_WEB_PAGE_TIMEOUT (5 s here, so a plain page is read on a loaded machine):
    ``GET /health`` answers all along, and the response completes, the page read (or cut at
    the deadline, or failed past it)."""
    url = site.url + path
    marker = f"slow-parse{path}:"
    answer: dict[str, Any] = {}

    def create() -> None:
        answer["response"] = client.responses.create(
            model="m", input=searching(marker, "Read.", name="open_page",
                                       args=json.dumps({"url": url})),
            tools=[{"type": "web_search"}])

    worker = threading.Thread(target=create)
    started = time.monotonic()
    worker.start()
    waits = []
    with httpx.Client(timeout=60) as probe:
        while worker.is_alive():
            asked = time.monotonic()
            assert probe.get(gateway.url + "/health").status_code == 200
            waits.append(time.monotonic() - asked)
            time.sleep(0.05)
    worker.join()
    elapsed = time.monotonic() - started
    response = check_response(answer["response"])
    assert path in site.hits
    assert waits and max(waits) < 3.0, waits  # before: 22 s (title), 4.4 s (table)
    assert elapsed < 25  # the page's 5 s, the model's two turns, a loaded machine
    assert response["status"] == "completed"
    [call] = web_search_items(response)
    read = tool_result(upstream, marker, call["id"])
    if call["status"] == "completed":
        assert url in read
        if path == "/big-table":
            assert "cell 1" in read


def test_page_refused_is_a_failed_call_and_the_model_goes_on(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    url = "http://169.254.169.254/latest/meta-data/"
    events = sdk_events(client.responses.create(
        model="m", input=searching("metadata", "I could not open it.", name="open_page",
                                   args=json.dumps({"url": url})),
        tools=[{"type": "web_search"}], stream=True))
    check_stream(events)
    response = events[-1]["response"]
    assert response["status"] == "completed"
    [call] = web_search_items(response)
    assert call["status"] == "failed"
    read = [b for b in upstream.requests if "metadata" in str(b["messages"])][-1]
    assert "non-public" in read["messages"][-1]["content"]
    assert response["output"][-1]["content"][0]["text"] == "I could not open it."


def test_external_web_access_false_offers_no_page(client: OpenAI,
                                                  upstream: ScriptedUpstream) -> None:
    check_response(client.responses.create(
        model="m", input=searching("offline", "ok"),
        tools=[{"type": "web_search", "external_web_access": False}]))
    first = next(b for b in upstream.requests if "offline" in str(b["messages"]))
    assert [t["function"]["name"] for t in first["tools"]] == ["web_search"]


def test_options_reach_the_provider(client: OpenAI, provider: SearchProvider) -> None:
    response = check_response(client.responses.create(
        model="m", input=searching("options", "ok", args='{"query": "opts"}'),
        include=["web_search_call.action.sources"],
        tools=[{"type": "web_search", "search_context_size": "low",
                "filters": {"allowed_domains": ["https://www.example.com/"]},
                "user_location": {"type": "approximate", "country": "DE"}}]))
    [call] = web_search_items(response)
    # low: three results at most; only example.com and its subdomains
    assert [s["url"] for s in call["action"]["sources"]] == [
        "https://example.com/rust-2024", "https://blog.example.com/news"]
    assert "site:example.com" in provider.requests[-1].params["q"]


@pytest.mark.parametrize(("tool", "param", "code", "message"), [
    # each was accepted with a 200 and dropped (or read as the default) before
    ({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size",
     "invalid_value", "Invalid value: 'huge'. Supported values are: 'low', 'medium', and "
     "'high'."),
    ({"type": "web_search_preview", "search_context_size": 1}, "tools[0].search_context_size",
     "invalid_type", "Invalid type for 'tools[0].search_context_size': expected one of 'low', "
     "'medium', or 'high', but got an integer instead."),
    ({"type": "web_search", "user_location": "Paris"}, "tools[0].user_location",
     "invalid_type", "Invalid type for 'tools[0].user_location': expected an object, but got a "
     "string instead."),
    ({"type": "web_search", "user_location": {"type": "exact"}}, "tools[0].user_location.type",
     "invalid_value", "Invalid value: 'exact'. Supported values are: 'approximate'."),
    ({"type": "web_search_preview", "user_location": {"city": "Paris"}},
     "tools[0].user_location.type", "missing_required_parameter",
     "Missing required parameter: 'tools[0].user_location.type'."),
    ({"type": "web_search", "user_location": {"type": "approximate", "city": 5}},
     "tools[0].user_location.city", "invalid_type", "Invalid type for "
     "'tools[0].user_location.city': expected a string, but got an integer instead."),
    ({"type": "web_search", "filters": {"allowed_domains": "example.com"}},
     "tools[0].filters.allowed_domains", "invalid_type", "Invalid type for "
     "'tools[0].filters.allowed_domains': expected an array, but got a string instead."),
    ({"type": "web_search", "filters": {"allowed_domains": [f"d{i}.com" for i in range(101)]}},
     "tools[0].filters.allowed_domains", "array_above_max_length", "Invalid "
     "'tools[0].filters.allowed_domains': array too long. Expected an array with maximum "
     "length 100, but got an array with length 101 instead."),
    # an entry naming no domain was dropped, and with it the whole filter: any site searched
    ({"type": "web_search", "filters": {"allowed_domains": ["https://"]}},
     "tools[0].filters.allowed_domains[0]", "invalid_value", "Invalid "
     "'tools[0].filters.allowed_domains[0]': expected a domain such as 'openai.com', but got "
     "'https://'."),
    ({"type": "web_search", "external_web_access": "false"}, "tools[0].external_web_access",
     "invalid_type", "Invalid type for 'tools[0].external_web_access': expected a boolean, but "
     "got a string instead."),
    ({"type": "web_search_preview", "search_content_types": ["video"]},
     "tools[0].search_content_types[0]", "invalid_value",
     "Invalid value: 'video'. Supported values are: 'text' and 'image'."),
])
def test_tool_mistakes_in_openais_words(client: OpenAI, tool: dict[str, Any], param: str,
                                        code: str, message: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="hi", tools=[tool])  # type: ignore[list-item]
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"], error["message"]) == (param, code, message)


@pytest.mark.parametrize(("chosen", "echoed"), [
    ("web_search", "web_search_preview"), ("web_search_2025_08_26", "web_search_preview"),
    ("web_search_preview", "web_search_preview"),
    ("web_search_preview_2025_03_11", "web_search_preview_2025_03_11")])
def test_tool_choice_forces_the_search(client: OpenAI, upstream: ScriptedUpstream,
                                       chosen: str, echoed: str) -> None:
    """``{"type": "web_search"}`` (the Agents SDK's ``tool_choice="web_search"``), its dated
    name and OpenAI's preview names all force the model's first turn to search."""
    marker = f"choice:{chosen}:"
    response = check_response(client.responses.create(
        model="m", input=searching(marker, "ok"), tools=[{"type": "web_search"}],
        tool_choice={"type": chosen}))  # type: ignore[misc,typeddict-item]
    # echoed as OpenAI's schema names that choice, so a typed client can read it
    assert response["tool_choice"] == {"type": echoed}
    first = next(b for b in upstream.requests if marker in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    assert [i["status"] for i in web_search_items(response)] == ["completed"]


def test_max_tool_calls(client: OpenAI) -> None:
    # max_tool_calls is at least 1 (the Open Responses schema's minimum); the loop's bound on
    # calls is the same for every server tool (tests/test_tool_bounds.py).
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", input=searching("max-calls", "no search"),
                                tools=[{"type": "web_search"}], max_tool_calls=0)
    assert refused.value.body["param"] == "max_tool_calls"  # type: ignore[index]


def test_provider_failure_never_leaks_the_key(
        upstream: ScriptedUpstream, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with SearchProvider("brave", key="right-key") as brave:
        settings = e2e_settings(upstream, tmp_path / "g.db", web_search_provider="brave",
                                web_search_url=brave.base_url,
                                web_search_api_key="sk-brave-wrong-key-555")
        with GatewayServer(settings) as server, client_for(server) as c:
            events = sdk_events(c.responses.create(
                model="m", input=searching("fails", "Search is down."),
                tools=[{"type": "web_search_preview"}], stream=True))
            check_stream(events)
            response = events[-1]["response"]
            stored = c.responses.retrieve(response["id"]).model_dump_json()
            db = (tmp_path / "g.db").read_bytes()
        assert brave.requests[0].headers["x-subscription-token"] == "sk-brave-wrong-key-555"
    [call] = web_search_items(response)
    assert call["status"] == "failed" and response["status"] == "completed"
    read = [b for b in upstream.requests if "fails" in str(b["messages"])][-1]
    assert "answered HTTP 401" in read["messages"][-1]["content"]
    for text in (json.dumps(events), stored, caplog.text, db.decode("latin-1"),
                 json.dumps(upstream.requests)):
        assert "sk-brave-wrong-key-555" not in text


def test_provider_fault_fails_the_call_not_the_response(
        client: OpenAI, upstream: ScriptedUpstream, provider: SearchProvider) -> None:
    """A 200,000-deep JSON answer (a RecursionError in the stdlib's parser) is a failed
    ``web_search_call``; the model reads why and the response completes."""
    provider.body = b"[" * 200_000 + b"]" * 200_000
    try:
        response = check_response(client.responses.create(
            model="m", input=searching("deep-json", "The search failed."),
            tools=[{"type": "web_search"}]))
    finally:
        provider.body = None
    assert response["status"] == "completed"
    [call] = web_search_items(response)
    assert call["status"] == "failed"
    assert "not JSON" in tool_result(upstream, "deep-json", call["id"])
    assert response["output"][-1]["content"][0]["text"] == "The search failed."


def test_only_http_sources_and_citations_and_cut_titles(
        client: OpenAI, upstream: ScriptedUpstream, provider: SearchProvider) -> None:
    """javascript:, data: and file: hits are no sources, so a link to one is no citation;
    a 600 kB title and excerpt reach the model cut to search_context_size's length."""
    good = "https://example.com/big-title"
    provider.results = [
        {"url": "javascript:alert(1)", "title": "js", "text": "script"},
        {"url": "data:text/html,hi", "title": "data", "text": "inline"},
        {"url": "file:///etc/passwd", "title": "file", "text": "local"},
        {"url": good, "title": "T" * 600_000, "text": "z" * 600_000}]
    text = f"See [x](javascript:alert(1)), [d](data:text/html,hi) and [ok]({good})."
    try:
        response = check_response(client.responses.create(
            model="m", input=searching("hostile-hits", text), tools=[{"type": "web_search"}],
            include=["web_search_call.action.sources"]))
    finally:
        provider.results = RESULTS
    [call] = web_search_items(response)
    assert call["action"]["sources"] == [{"type": "url", "url": good}]
    part = response["output"][-1]["content"][0]
    assert part["text"] == text
    [cited] = part["annotations"]
    assert cited["url"] == good and cited["title"] == "T" * 300 + "…"
    read = tool_result(upstream, "hostile-hits", call["id"])
    assert "javascript:" not in read and "data:" not in read and "file:" not in read
    second = [b for b in upstream.requests if "hostile-hits" in str(b["messages"])][-1]
    assert len(json.dumps(second)) < 20_000  # not the 1.2 MB the provider sent


def test_annotate_cites_only_http_urls() -> None:
    """Even a non-http source that got in some other way is never a url_citation."""
    from responses_gateway.settings import Settings
    from responses_gateway.tools.web_search.tool import Options, WebSearchTool

    tool = WebSearchTool(Options(), Settings())
    tool.sources = {"javascript:alert(1)": "js", "https://a.example/": "A"}
    text = "[x](javascript:alert(1)) [a](https://a.example/)"
    assert [a["url"] for a in tool.annotate(text)] == ["https://a.example/"]
    # Many links cost links x sources, not links x text: 48 kB of "[a](x)" took 25 s before,
    # on the event loop (annotate runs as a text part closes).
    tool.sources = {"https://a.example/": "A", "https://a.example/(x)": "B"}
    started = time.monotonic()
    assert tool.annotate("[a](x)" * 10_000) == []
    assert time.monotonic() - started < 5  # ~0.02 s
    found = tool.annotate("[b](https://a.example/(x)) [a](https://a.example/)")
    assert [(a["url"], a["end_index"]) for a in found] == [
        ("https://a.example/(x)", 26), ("https://a.example/", 50)]


def test_background_and_conversation(client: OpenAI) -> None:
    import time

    conversation = client.conversations.create()
    response = client.responses.create(
        model="m", input=searching("background", answer_citing()), background=True,
        tools=[{"type": "web_search"}], conversation=conversation.id)
    deadline = time.monotonic() + 20
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        response = client.responses.retrieve(response.id)
    done = check_response(response)
    assert done["status"] == "completed"
    [_call] = web_search_items(done)
    assert done["output"][-1]["content"][0]["annotations"][0]["url"] == CITED["url"]
    items = client.conversations.items.list(conversation.id).model_dump()["data"]
    assert "web_search_call" in [i["type"] for i in items]
    # The next turn reads the earlier search as what it was.
    later = check_response(client.responses.create(
        model="m", input="[[script:echo]] and now?", conversation=conversation.id,
        tools=[{"type": "web_search"}]))
    assert later["status"] == "completed"



def tool_result(upstream: ScriptedUpstream, marker: str, call_id: str) -> str:
    """What the model read for ``call_id`` in the last upstream request holding ``marker``."""
    body = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    [result] = [m for m in body["messages"]
                if m["role"] == "tool" and m.get("tool_call_id") == call_id]
    return str(result["content"])


def test_later_requests_read_what_the_model_read(client: OpenAI,
                                                 upstream: ScriptedUpstream) -> None:
    """previous_response_id, a conversation and the item given back in input all give the
    model back the results it read (titles, URLs, excerpts), not only the query."""
    conversation = client.conversations.create()
    first = check_response(client.responses.create(
        model="m", input=searching("read-once", answer_citing()), conversation=conversation.id,
        tools=[{"type": "web_search"}], include=["web_search_call.action.sources"]))
    [call] = web_search_items(first)
    read = tool_result(upstream, "read-once", call["id"])
    assert RESULTS[1]["text"] in read and f"URL: {RESULTS[1]['url']}" in read
    chained = check_response(client.responses.create(
        model="m", input="[[script:text text=ok]] chained-later", previous_response_id=first["id"],
        tools=[{"type": "web_search"}]))
    assert chained["status"] == "completed"
    assert tool_result(upstream, "chained-later", call["id"]) == read
    check_response(client.responses.create(
        model="m", input="[[script:text text=ok]] conversation-later",
        conversation=conversation.id, tools=[{"type": "web_search"}]))
    assert tool_result(upstream, "conversation-later", call["id"]) == read
    # Stateless (store=false, the items given back, as the Codex CLI does); the item alone
    # (no sources kept) still reads as the results.
    given_back = [i for i in first["output"] if i["type"] != "web_search_call"]
    bare = dict(call, action={"type": "search", "query": call["action"]["query"]})
    check_response(client.responses.create(
        model="m", store=False, tools=[{"type": "web_search"}],
        input=[{"role": "user", "content": "search please"}, bare, *given_back,
               {"role": "user", "content": "[[script:text text=ok]] stateless-later"}]))
    assert tool_result(upstream, "stateless-later", call["id"]) == read


def test_what_the_model_read_is_bounded() -> None:
    """Kept past its response within GATEWAY_MAX_TOOL_OUTPUT_BYTES, oldest forgotten first;
    an item whose text is gone reads as the search it was."""
    from responses_gateway.tools.reads import ReadOutputs
    from responses_gateway.tools.web_search.tool import WebSearchHistory

    kept = ReadOutputs()
    for n in range(5):
        kept.keep("t", f"ws_{n}", "é" * 50, most_bytes=250)  # 100 UTF-8 bytes each
    assert [kept.get("t", f"ws_{n}") is not None for n in range(5)] == [False] * 3 + [True] * 2
    assert kept.get("another tenant", "ws_4") is None  # by tenant and call id
    kept.keep("t", "ws_big", "x" * 1000, most_bytes=250)  # the newest stays
    assert kept.get("t", "ws_big") and kept.get("t", "ws_4") is None
    call = WebSearchHistory({}).read(
        {"id": "ws_never_read_here", "type": "web_search_call", "status": "completed",
         "action": {"type": "search", "query": "q",
                    "sources": [{"type": "url", "url": "https://a.example/"}]}}, "input[0]")
    assert call is not None and "https://a.example/" in call.output
    assert "no longer at hand" in call.output

def test_without_provider_web_search_stays_hosted(upstream: ScriptedUpstream,
                                                  tmp_path: Any) -> None:
    settings = e2e_settings(upstream, tmp_path / "h.db")
    with GatewayServer(settings) as server, client_for(server) as c:
        response = check_response(c.responses.create(
            model="m", input="[[script:text text=plain]] hosted", tools=[{"type": "web_search"}]))
        assert response["tools"] == [] and web_search_items(response) == []
        request = [b for b in upstream.requests if "hosted" in str(b["messages"])][-1]
        assert "tools" not in request

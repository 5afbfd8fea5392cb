"""The Codex CLI with its default configuration completing a turn in which a web search really
runs (issue 30): Codex sends ``web_search`` unasked; with a provider configured the gateway
runs it against the local SearXNG-speaking provider, the scripted upstream playing a model
that searches and then answers from the results. Codex's install, run and proxy sink are
test_clients_codex's (``codex exec`` with its sandbox off, where Codex's default search mode
is live: it sends ``{"type": "web_search", "external_web_access": true}``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.e2e import e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.helpers.search_providers import RESULTS, SearchProvider
from tests.test_clients_codex import (  # noqa: F401
    CODEX_KEY,
    ProxySink,
    codex_bin,
    codex_exec,
    pytestmark,
    sink,
    upstream_turns,
)


@pytest.fixture(scope="module")
def provider() -> Iterator[SearchProvider]:
    with SearchProvider("searxng") as fake:
        yield fake


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, provider: SearchProvider,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("web-search-codex") / "gateway.db"
    settings = e2e_settings(upstream, db, api_keys=(CODEX_KEY,), web_search_provider="searxng",
                            web_search_url=provider.base_url)
    with GatewayServer(settings) as server:
        yield server


def test_codex_default_web_search_runs_a_search(
    codex_bin: str, gateway: GatewayServer, upstream: ScriptedUpstream,  # noqa: F811
    provider: SearchProvider, sink: ProxySink, tmp_path: Path,  # noqa: F811
) -> None:
    """Codex's configuration as docs/codex.md gives it: its own web_search, run here."""
    marker = "codex-search-1"
    cited = RESULTS[0]
    answer = f"Rust 2024 shipped with Rust 1.85 [Rust 2024]({cited['url']})."
    args = json.dumps({"query": "codex rust edition"})
    prompt = (f"{marker} what is new? [[script:tool name=web_search args='{args}' "
              f"times=1 then=text text=\"{answer}\" key={marker}]]")

    run = codex_exec(codex_bin, gateway, sink, tmp_path, prompt)

    assert run.returncode == 0, run.stderr + run.stdout
    assert run.events[-1]["type"] == "turn.completed"
    # Codex saw the search (its web_search item, with the query) and got the answer.
    searches = run.items("web_search")
    assert searches and searches[-1]["query"] == "codex rust edition"
    [message] = run.items("agent_message")
    assert message["text"] == answer
    assert run.last_message.strip() == answer
    # The provider was asked once, and the model read its results before answering.
    assert [r.params.get("q") for r in provider.requests].count("codex rust edition") == 1
    first, second = upstream_turns(upstream, marker)
    offered = [t["function"]["name"] for t in first["tools"]]
    assert "exec_command" in offered and "web_search" in offered
    assert "open_page" in offered  # live search: pages may be opened
    call_turn, tool_turn = second["messages"][-2:]
    [call] = call_turn["tool_calls"]
    assert call["function"]["name"] == "web_search"
    assert json.loads(call["function"]["arguments"]) == json.loads(args)
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == call["id"]
    assert f"URL: {cited['url']}" in tool_turn["content"] and cited["text"] in tool_turn["content"]
    assert sink.attempts == []  # nothing left 127.0.0.1

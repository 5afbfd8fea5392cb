"""The Codex CLI (npm ``@openai/codex``) against the gateway (issue 7): ``codex exec`` with a
custom model provider speaking the Responses wire API, the scripted upstream playing the model.

Codex is installed once per session into ``.cache/npm-codex`` (kept between runs; gitignored)
with the pinned version below (``RG_CODEX_PACKAGE`` overrides it, ``RG_CODEX_BIN`` points at an
existing binary). Without npm, without the registry, or on a platform Codex has no binary for,
the tests skip with the reason.

Codex runs with a throwaway ``CODEX_HOME`` and ``HOME``, and with every proxy variable pointing
at a local sink that refuses and records connections: the configuration documented in
docs/codex.md must keep Codex on 127.0.0.1, and the tests assert that it does.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cache_lock import held
from tests.helpers.e2e import e2e_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "npm-codex"
# The version these tests were written against; Codex changes its tool set between releases.
CODEX_PACKAGE = os.environ.get("RG_CODEX_PACKAGE", "@openai/codex@0.169.0")
INSTALL_TIMEOUT = 300
RUN_TIMEOUT = 120
MODEL = "scripted-model"
API_KEY_ENV = "GATEWAY_API_KEY"
# pytest-timeout counts fixture setup: the first test may include the npm install.
pytestmark = [pytest.mark.timeout(INSTALL_TIMEOUT + RUN_TIMEOUT + 60), pytest.mark.node,
              pytest.mark.slow]
CODEX_KEY = "sk-codex-test"

# What docs/codex.md tells users to put in config.toml, minus the [model_providers] table:
# Codex's default tools (its sub-agent ``namespace``, the hosted ``web_search``) stay on.
QUIET = """
[features]
plugins = false

[analytics]
enabled = false
"""


# -- installing Codex ----------------------------------------------------------------------


def _wanted_version() -> str | None:
    name, sep, version = CODEX_PACKAGE.rpartition("@")
    return version if sep and name else None


def _installed_version() -> str | None:
    manifest = CACHE / "node_modules" / "@openai" / "codex" / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """The codex executable, installed from the npm registry on first use."""
    if os.environ.get("RG_CODEX_BIN"):
        return os.environ["RG_CODEX_BIN"]
    binary = CACHE / "node_modules" / ".bin" / "codex"
    npm = shutil.which("npm")
    if npm is None and not binary.exists():
        pytest.skip("npm is not installed: cannot install the Codex CLI")
    with held(CACHE):  # another xdist worker may be installing it
        installed = _installed_version()
        if (not binary.exists() or installed is None
                or installed != (_wanted_version() or installed)):
            if npm is None:
                pytest.skip("npm is not installed: cannot install the Codex CLI")
            try:
                done = subprocess.run(
                    [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund",
                     "--save-exact", "--loglevel=error", CODEX_PACKAGE],
                    capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
                )
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm install {CODEX_PACKAGE} took longer than {INSTALL_TIMEOUT} s")
            if done.returncode != 0 or not binary.exists():
                pytest.skip(f"npm install {CODEX_PACKAGE} failed: {done.stderr.strip()[-600:]}")
    try:
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                                 timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the Codex CLI does not run here: {exc}")
    if version.returncode != 0:
        pytest.skip(f"the Codex CLI does not run here: {version.stderr.strip()[-600:]}")
    return str(binary)


# -- a sink for anything that is not 127.0.0.1 ---------------------------------------------


class ProxySink:
    """An HTTP proxy that refuses every request and remembers its first line
    (``CONNECT github.com:443 HTTP/1.1``): where Codex tried to go outside."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    head = conn.recv(4096)
                    self.attempts.append(head.split(b"\r\n", 1)[0].decode(errors="replace"))
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self._sock.close()


# -- running codex exec --------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("clients-codex") / "gateway.db"
    # reasoning_content: earlier reasoning goes back upstream, so its round trip is visible;
    # api_keys: Codex authenticates with the key its provider's env_key names.
    settings = e2e_settings(upstream, db, reasoning_input="reasoning_content",
                            api_keys=(CODEX_KEY,))
    with GatewayServer(settings) as server:
        yield server


@pytest.fixture
def sink() -> Iterator[ProxySink]:
    proxy = ProxySink()
    yield proxy
    proxy.close()


def codex_config(base_url: str, quiet: str = QUIET) -> str:
    return f"""model = "{MODEL}"
model_provider = "gateway"
{quiet}
[model_providers.gateway]
name = "Responses gateway"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{API_KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0
"""


@dataclass
class CodexRun:
    returncode: int
    stdout: str
    stderr: str
    workdir: Path
    last_message: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def items(self, kind: str) -> list[dict[str, Any]]:
        return [e["item"] for e in self.events
                if e.get("type") == "item.completed" and e["item"].get("type") == kind]


def codex_exec(
    codex: str, gateway: GatewayServer, sink: ProxySink, tmp: Path, prompt: str,
    *, config: str | None = None,
) -> CodexRun:
    home, codex_home, workdir = tmp / "home", tmp / "codex-home", tmp / "work"
    for path in (home, codex_home, workdir):
        path.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(config or codex_config(gateway.base_url))
    last = tmp / "last-message.txt"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        API_KEY_ENV: CODEX_KEY,
        "NO_COLOR": "1",
        "TERM": "dumb",
        **{name: sink.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                       "http_proxy", "https_proxy", "all_proxy")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    done = subprocess.run(
        [codex, "exec", "--json", "--strict-config", "--ephemeral", "--skip-git-repo-check",
         "--dangerously-bypass-approvals-and-sandbox", "-C", str(workdir),
         "-o", str(last), prompt],
        env=env, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT, check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return CodexRun(done.returncode, done.stdout, done.stderr, workdir,
                    last.read_text() if last.exists() else "", events)


def upstream_turns(upstream: ScriptedUpstream, marker: str) -> list[dict[str, Any]]:
    return [body for body in upstream.requests if marker in str(body["messages"])]


# -- tests ---------------------------------------------------------------------------------


def test_codex_exec_runs_a_shell_tool_through_the_gateway(
    codex_bin: str, gateway: GatewayServer, upstream: ScriptedUpstream, sink: ProxySink,
    tmp_path: Path,
) -> None:
    command = "echo codex-gateway-ok | tee proof.txt"
    args = json.dumps({"cmd": command})
    prompt = f"codex-shell-1 run it [[script:tool name=exec_command args='{args}']]"

    run = codex_exec(codex_bin, gateway, sink, tmp_path, prompt)

    assert run.returncode == 0, run.stderr + run.stdout
    # Codex ran the command the scripted model asked for...
    [execution] = run.items("command_execution")
    assert command in execution["command"]
    assert execution["exit_code"] == 0
    assert execution["aggregated_output"] == "codex-gateway-ok\n"
    assert (run.workdir / "proof.txt").read_text() == "codex-gateway-ok\n"
    # ...and finished the turn with the model's answer, which quotes the tool output.
    [message] = run.items("agent_message")
    assert message["text"].startswith("Tool output: ")
    assert "codex-gateway-ok" in message["text"]
    assert run.last_message.strip() == message["text"].strip()
    assert run.events[-1]["type"] == "turn.completed"

    # Upstream: a first turn with Codex's tools, a second with the call and its output.
    first, second = upstream_turns(upstream, "codex-shell-1")
    assert first["stream"] is True and second["stream"] is True
    names = [tool["function"]["name"] for tool in first["tools"]]
    assert "exec_command" in names
    assert {tool["type"] for tool in first["tools"]} == {"function"}
    assert first["messages"][0]["role"] == "system"  # Codex's instructions
    call_turn, tool_turn = second["messages"][-2:]
    [call] = call_turn["tool_calls"]
    assert call["function"] == {"name": "exec_command", "arguments": args}
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == call["id"]
    assert "codex-gateway-ok" in tool_turn["content"]
    assert sink.attempts == []  # nothing left 127.0.0.1


def test_codex_exec_keeps_signed_reasoning_across_the_tool_call(
    codex_bin: str, gateway: GatewayServer, upstream: ScriptedUpstream, sink: ProxySink,
    tmp_path: Path,
) -> None:
    """Codex sends store=false and include=[reasoning.encrypted_content]: the signed reasoning
    of the first turn reaches the upstream again only through the blob Codex sends back."""
    thought = "I will run echo first."
    args = json.dumps({"cmd": "echo reasoned"})
    prompt = (f"codex-reasoning-1 [[script:tool name=exec_command reasoning='{thought}' "
              f"signature=sig-codex-1 args='{args}']]")

    run = codex_exec(codex_bin, gateway, sink, tmp_path, prompt)

    assert run.returncode == 0, run.stderr + run.stdout
    assert [item["text"] for item in run.items("reasoning")] == [thought, thought]
    [execution] = run.items("command_execution")
    assert execution["aggregated_output"] == "reasoned\n"
    [message] = run.items("agent_message")
    assert "reasoned" in message["text"]

    first, second = upstream_turns(upstream, "codex-reasoning-1")
    assert "reasoning_content" not in str(first["messages"])
    call_turn = second["messages"][-2]
    assert call_turn["reasoning_content"] == thought
    assert call_turn["reasoning_details"] == [{
        "type": "reasoning.text", "text": thought, "signature": "sig-codex-1",
        "format": "anthropic-claude-v1",
    }]
    assert sink.attempts == []


def test_codex_default_tools_call_a_namespace_tool(
    codex_bin: str, gateway: GatewayServer, upstream: ScriptedUpstream, sink: ProxySink,
    tmp_path: Path,
) -> None:
    """Codex's default configuration: its sub-agent tools come as the ``namespace`` tool
    ``multi_agent_v1`` and ``web_search`` is on. The model sees the namespace's functions
    flattened (``multi_agent_v1__close_agent``) and no web_search (GATEWAY_HOSTED_TOOLS=omit);
    its call comes back to Codex as ``close_agent`` in namespace ``multi_agent_v1``, which
    Codex runs and answers, and the turn completes."""
    args = json.dumps({"target": "no-such-agent"})
    prompt = (f"codex-namespace-1 [[script:tool name=multi_agent_v1__close_agent "
              f"args='{args}']]")

    run = codex_exec(codex_bin, gateway, sink, tmp_path, prompt)

    assert run.returncode == 0, run.stderr + run.stdout
    assert run.events[-1]["type"] == "turn.completed"
    [message] = run.items("agent_message")
    assert message["text"].startswith("Tool output: ")

    first, second = upstream_turns(upstream, "codex-namespace-1")
    names = [tool["function"]["name"] for tool in first["tools"]]
    assert "multi_agent_v1__close_agent" in names and "exec_command" in names
    assert {tool["type"] for tool in first["tools"]} == {"function"}  # web_search left out
    call_turn, tool_turn = second["messages"][-2:]
    [call] = call_turn["tool_calls"]
    # Codex sent the call back as OpenAI reported it (name + namespace): flattened again.
    assert call["function"] == {"name": "multi_agent_v1__close_agent", "arguments": args}
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == call["id"]
    assert tool_turn["content"]  # Codex's answer for an agent that does not exist
    assert tool_turn["content"] in message["text"]
    assert sink.attempts == []


def test_codex_applies_a_patch_through_the_custom_tool(
    codex_bin: str, gateway: GatewayServer, upstream: ScriptedUpstream, sink: ProxySink,
    tmp_path: Path,
) -> None:
    """For models it knows to take freeform patches (``gpt-5.5`` here, mapped by the gateway to
    any backend model) Codex offers ``apply_patch`` as a ``custom`` tool with a Lark grammar.
    The model calls the function standing for it with ``{"input": patch}``; Codex receives a
    ``custom_tool_call`` and applies the patch."""
    patch = ("*** Begin Patch\n*** Add File: hello.txt\n+hello from the gateway\n"
             "*** End Patch\n")
    args = json.dumps({"input": patch})
    prompt = f"codex-custom-1 [[script:tool name=apply_patch args='{args}']]"
    config = codex_config(gateway.base_url).replace(f'model = "{MODEL}"', 'model = "gpt-5.5"')

    run = codex_exec(codex_bin, gateway, sink, tmp_path, prompt, config=config)

    assert run.returncode == 0, run.stderr + run.stdout
    assert (run.workdir / "hello.txt").read_text() == "hello from the gateway\n"
    assert run.events[-1]["type"] == "turn.completed"

    first, second = upstream_turns(upstream, "codex-custom-1")
    [offered] = [t["function"] for t in first["tools"] if t["function"]["name"] == "apply_patch"]
    assert offered["parameters"]["required"] == ["input"]
    assert "lark grammar" in offered["description"] and "*** Begin Patch" in offered["description"]
    assert {tool["type"] for tool in first["tools"]} == {"function"}  # tool_search, web_search out
    call_turn, tool_turn = second["messages"][-2:]
    [call] = call_turn["tool_calls"]
    assert call["function"]["name"] == "apply_patch"
    assert json.loads(call["function"]["arguments"]) == json.loads(args)
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == call["id"]
    assert "hello.txt" in tool_turn["content"]
    assert sink.attempts == []


def test_codex_default_tools_are_refused_when_hosted_tools_are_rejected(
    codex_bin: str, upstream: ScriptedUpstream, sink: ProxySink, tmp_path: Path,
) -> None:
    """GATEWAY_HOSTED_TOOLS=reject: Codex's default ``web_search`` is OpenAI's 400 naming the
    tool, and nothing goes upstream."""
    settings = e2e_settings(upstream, tmp_path / "reject.db", api_keys=(CODEX_KEY,),
                            hosted_tools="reject")
    with GatewayServer(settings) as server:
        run = codex_exec(codex_bin, server, sink, tmp_path, "codex-default-1 say hi")

    assert run.returncode != 0
    assert "Tool type 'web_search' is not supported by this gateway" in run.stdout + run.stderr
    assert "tools[" in run.stdout + run.stderr
    assert upstream_turns(upstream, "codex-default-1") == []
    assert sink.attempts == []

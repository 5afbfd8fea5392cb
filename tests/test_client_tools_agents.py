"""Tools the client runs (issue 29), driven by the OpenAI Agents SDK as an agent would run them:
``ShellTool`` with a real executor, ``ApplyPatchTool`` with an editor writing real files, and
``ComputerTool`` with a fake computer returning a PNG, through the gateway over the scripted
upstream, streamed and not. Each run ends with the model reading what the tool returned.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (test extra)")

from agents import (  # noqa: E402
    Agent,
    ApplyPatchOperation,
    ApplyPatchResult,
    ApplyPatchTool,
    AsyncComputer,
    ComputerTool,
    LocalShellCommandRequest,
    LocalShellTool,
    OpenAIResponsesModel,
    Runner,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
    ShellTool,
    apply_diff,
)
from openai import AsyncOpenAI  # noqa: E402

from tests.helpers.e2e import e2e_settings  # noqa: E402
from tests.helpers.gateway_server import GatewayServer  # noqa: E402
from tests.helpers.responses_validation import (  # noqa: E402
    sdk_validate_event,
    sdk_validate_response,
)
from tests.helpers.scripted_upstream import ScriptedUpstream  # noqa: E402

MODEL = "scripted-model"
agents.set_tracing_disabled(True)


@pytest.fixture(scope="module")
def gateway(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    db = tmp_path_factory.mktemp("client-tools-agents") / "gateway.db"
    with GatewayServer(e2e_settings(upstream, db)) as server:
        yield server


def run_agent(gateway: GatewayServer, tools: list[Any], prompt: str, *, stream: bool,
              instructions: str = "Use the tools.") -> tuple[Any, list[dict[str, Any]]]:
    """The agent's result and, streamed, the raw Responses events (each SDK-validated)."""

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-agents",
                               max_retries=0, timeout=30) as client:
            agent = Agent(name="coder", instructions=instructions, tools=tools,
                          model=OpenAIResponsesModel(MODEL, client))
            if not stream:
                result = await Runner.run(agent, prompt)
                return result, []
            streamed = Runner.run_streamed(agent, prompt)
            events = [e async for e in streamed.stream_events()]
            raw = [e.data.to_dict(mode="json") for e in events
                   if e.type == "raw_response_event"]
            return streamed, raw

    result, raw = asyncio.run(main())
    for event in raw:
        sdk_validate_event(event)
    for response in result.raw_responses:  # each model turn, as the gateway stored it
        stored = httpx.get(f"{gateway.base_url}/responses/{response.response_id}", timeout=10)
        sdk_validate_response(stored.json())
    return result, raw


def turns_sent(upstream: ScriptedUpstream, marker: str) -> list[dict[str, Any]]:
    return [body for body in upstream.requests if marker in str(body["messages"])]


# -- shell ------------------------------------------------------------------------------------


def shell_executor(workdir: Path, ran: list[list[str]]) -> Any:
    def execute(request: ShellCommandRequest) -> ShellResult:
        commands = request.data.action.commands
        ran.append(list(commands))
        outputs = []
        for command in commands:
            done = subprocess.run(command, shell=True, cwd=workdir, capture_output=True,
                                  text=True, timeout=10)
            outputs.append(ShellCommandOutput(
                stdout=done.stdout, stderr=done.stderr, command=command,
                outcome=ShellCallOutcome(type="exit", exit_code=done.returncode)))
        return ShellResult(output=outputs)

    return execute


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_shell_tool_runs_a_command_and_the_model_reads_its_output(
    gateway: GatewayServer, upstream: ScriptedUpstream, tmp_path: Path, stream: bool
) -> None:
    (tmp_path / "notes.txt").write_text("gateway")
    ran: list[list[str]] = []
    marker = f"shell-{stream}"
    args = '{"action": {"commands": ["cat notes.txt", "ls"], "timeout_ms": 5000}}'
    result, raw = run_agent(
        gateway, [ShellTool(executor=shell_executor(tmp_path, ran))],
        f"{marker} [[script:call name=shell args='{args}']]", stream=stream)

    assert ran == [["cat notes.txt", "ls"]]
    assert [item.type for item in result.new_items] == [
        "tool_call_item", "tool_call_output_item", "message_output_item"]
    call = result.new_items[0].raw_item
    call = call if isinstance(call, dict) else call.model_dump()
    assert call["type"] == "shell_call" and call["id"].startswith("sh_")
    assert call["action"]["commands"] == ["cat notes.txt", "ls"]
    assert call["action"]["timeout_ms"] == 5000 and call["status"] == "completed"
    # The model's second turn: its call, then the tool message with the real output.
    first, second = turns_sent(upstream, marker)
    assert [t["function"]["name"] for t in first["tools"]] == ["shell"]
    history = second["messages"][2:]
    assert history[0]["tool_calls"][0]["function"]["name"] == "shell"
    assert history[1]["role"] == "tool"
    assert history[1]["tool_call_id"] == history[0]["tool_calls"][0]["id"] == call["call_id"]
    assert '"stdout": "gateway"' in history[1]["content"]
    assert "notes.txt" in history[1]["content"] and '"exit_code": 0' in history[1]["content"]
    assert result.final_output.startswith("Tool output: [")
    assert "gateway" in result.final_output
    if stream:
        kinds = [e["type"] for e in raw]
        commands = [e for e in raw if e["type"].startswith("response.shell_call_command.")]
        assert [(e["type"].rsplit(".", 1)[1], e["command_index"]) for e in commands] == [
            ("added", 0), ("delta", 0), ("done", 0), ("added", 1), ("delta", 1), ("done", 1)]
        assert [e["command"] for e in commands if e["type"].endswith(".done")] == [
            "cat notes.txt", "ls"]
        added = next(e for e in raw if e["type"] == "response.output_item.added"
                     and e["item"]["type"] == "shell_call")
        assert added["item"]["status"] == "in_progress"
        assert added["item"]["action"]["commands"] == []
        assert kinds.count("response.completed") == 2


def test_local_shell_tool_runs_its_argv(
    gateway: GatewayServer, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """The older local_shell tool: one argv, its output sent back by ``call_id``."""
    ran: list[list[str]] = []

    def execute(request: LocalShellCommandRequest) -> str:
        action = request.data.action
        ran.append(list(action.command))
        done = subprocess.run(action.command, cwd=action.working_directory or tmp_path,
                              capture_output=True, text=True, timeout=10)
        return done.stdout

    args = ('{"action": {"type": "exec", "command": ["echo", "local-ok"], "env": {}, '
            f'"working_directory": "{tmp_path}"}}}}')
    result, _ = run_agent(gateway, [LocalShellTool(executor=execute)],
                          f"local-shell [[script:call name=local_shell args='{args}']]",
                          stream=False)
    assert ran == [["echo", "local-ok"]]
    call = result.new_items[0].raw_item
    call = call if isinstance(call, dict) else call.model_dump()
    assert call["type"] == "local_shell_call" and call["id"].startswith("lsh_")
    assert call["action"]["working_directory"] == str(tmp_path)
    last = turns_sent(upstream, "local-shell")[-1]["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": call["call_id"], "content": "local-ok\n"}
    assert result.final_output == "Tool output: local-ok\n"


# -- apply_patch ------------------------------------------------------------------------------


class DiskEditor:
    """Applies the model's V4A diffs to files under ``root`` (the Agents SDK's apply_diff)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: list[tuple[str, str]] = []

    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        path = self.root / operation.path
        path.write_text(apply_diff("", operation.diff or "", mode="create"))
        self.done.append(("create_file", operation.path))
        return ApplyPatchResult(output=f"Created {operation.path}")

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        path = self.root / operation.path
        path.write_text(apply_diff(path.read_text(), operation.diff or ""))
        self.done.append(("update_file", operation.path))
        return ApplyPatchResult(output=f"Updated {operation.path}")

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        (self.root / operation.path).unlink()
        self.done.append(("delete_file", operation.path))
        return ApplyPatchResult(output=f"Deleted {operation.path}")


UPDATE = '{"operation": {"type": "update_file", "path": "app.py", "diff": "@@\\n def main():\\n-    return 1\\n+    return 2\\n"}}'  # noqa: E501
CREATE = '{"operation": {"type": "create_file", "path": "new.txt", "diff": "+hello\\n+world\\n"}}'


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_apply_patch_tool_edits_real_files(
    gateway: GatewayServer, upstream: ScriptedUpstream, tmp_path: Path, stream: bool
) -> None:
    (tmp_path / "app.py").write_text("def main():\n    return 1\n")
    editor = DiskEditor(tmp_path)
    marker = f"patch-{stream}"
    result, raw = run_agent(
        gateway, [ApplyPatchTool(editor=editor)],
        f"{marker} [[script:call names=apply_patch,apply_patch args1='{UPDATE}' "
        f"args2='{CREATE}']]", stream=stream)

    assert (tmp_path / "app.py").read_text() == "def main():\n    return 2\n"
    assert (tmp_path / "new.txt").read_text() == "hello\nworld"  # apply_diff's create
    assert editor.done == [("update_file", "app.py"), ("create_file", "new.txt")]
    calls = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    calls = [c if isinstance(c, dict) else c.model_dump() for c in calls]
    assert [c["type"] for c in calls] == ["apply_patch_call"] * 2
    assert all(c["id"].startswith("apc_") and c["status"] == "completed" for c in calls)
    assert calls[1]["operation"] == {"type": "create_file", "path": "new.txt",
                                     "diff": "+hello\n+world\n"}
    last = turns_sent(upstream, marker)[-1]
    tool_messages = [m for m in last["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [
        '{"status": "completed", "output": "Updated app.py"}',
        '{"status": "completed", "output": "Created new.txt"}']
    assert "Updated app.py" in result.final_output and "Created new.txt" in result.final_output
    # The function offered requires the diff ApplyPatchTool needs for create_file and
    # update_file (issue 40: it was optional, a model left it out, the SDK raised
    # ModelBehaviorError); delete_file takes none.
    import jsonschema

    [offered] = turns_sent(upstream, marker)[0]["tools"]
    validator = jsonschema.Draft202012Validator(offered["function"]["parameters"])
    for args in (UPDATE, CREATE, '{"operation": {"type": "delete_file", "path": "a.py"}}'):
        validator.validate(json.loads(args))
    for kind in ("create_file", "update_file"):
        assert not validator.is_valid({"operation": {"type": kind, "path": "new.txt"}})
    if stream:
        done = [e["item"] for e in raw if e["type"] == "response.output_item.done"
                and e["item"]["type"] == "apply_patch_call"]
        assert [d["operation"]["path"] for d in done] == ["app.py", "new.txt"]


# -- computer ---------------------------------------------------------------------------------


def tiny_png() -> bytes:
    """A real 2x1 RGB PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    pixels = zlib.compress(b"\x00" + bytes([255, 0, 0, 0, 0, 255]))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(
        b"IEND", b"")


class FakeComputer(AsyncComputer):
    """Records the actions and returns the same PNG for every screenshot."""

    def __init__(self) -> None:
        self.actions: list[tuple[Any, ...]] = []

    @property
    def environment(self) -> Any:
        return "browser"

    @property
    def dimensions(self) -> tuple[int, int]:
        return (1024, 768)

    async def screenshot(self) -> str:
        self.actions.append(("screenshot",))
        return base64.b64encode(tiny_png()).decode()

    async def click(self, x: int, y: int, button: Any) -> None:
        self.actions.append(("click", x, y, button))

    async def double_click(self, x: int, y: int) -> None:
        self.actions.append(("double_click", x, y))

    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None:
        self.actions.append(("scroll", x, y, scroll_x, scroll_y))

    async def type(self, text: str) -> None:
        self.actions.append(("type", text))

    async def wait(self) -> None:
        self.actions.append(("wait",))

    async def move(self, x: int, y: int) -> None:
        self.actions.append(("move", x, y))

    async def keypress(self, keys: list[str]) -> None:
        self.actions.append(("keypress", tuple(keys)))

    async def drag(self, path: list[tuple[int, int]]) -> None:
        self.actions.append(("drag", tuple(path)))


ACTIONS = ('{"actions": [{"type": "click", "x": 10, "y": 20, "button": "left"}, '
           '{"type": "type", "text": "hello"}, {"type": "keypress", "keys": ["ENTER"]}]}')


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_computer_tool_acts_and_the_model_sees_the_screenshot(
    gateway: GatewayServer, upstream: ScriptedUpstream, stream: bool
) -> None:
    computer = FakeComputer()
    marker = f"computer-{stream}"
    # The directive rides in the instructions: the screenshot's user message comes last.
    result, raw = run_agent(
        gateway, [ComputerTool(computer=computer)], f"{marker}: type hello",
        instructions=f"Use the computer. [[script:call name=computer args='{ACTIONS}']]",
        stream=stream)

    assert computer.actions == [("click", 10, 20, "left"), ("type", "hello"),
                                ("keypress", ("ENTER",)), ("screenshot",)]
    call = next(i.raw_item for i in result.new_items if i.type == "tool_call_item")
    call = call if isinstance(call, dict) else call.model_dump()
    assert call["type"] == "computer_call" and call["id"].startswith("cu_")
    assert call["pending_safety_checks"] == [] and len(call["actions"]) == 3
    url = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
    last = turns_sent(upstream, marker)[-1]
    roles = [m["role"] for m in last["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]
    image = last["messages"][-1]["content"][1]
    assert image == {"type": "image_url", "image_url": {"url": url}}
    seen = "image:" + hashlib.sha256(url.encode()).hexdigest()[:12]
    assert result.final_output.endswith(seen)
    assert [t["function"]["name"] for t in last["tools"]] == ["computer"]
    if stream:
        assert any(e["type"] == "response.output_item.done"
                   and e["item"]["type"] == "computer_call" for e in raw)

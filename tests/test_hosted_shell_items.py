"""Hosted shell's seam, items and events, without a container engine (issue 42).

- The seam: a ``shell`` tool is hosted shell's when its ``environment`` is a container
  (``Registration.serves``), else the client's; the request models, the client path and
  ``ServerTools.for_request`` agree; hosted ``shell_call`` / ``shell_call_output`` items go
  back to the model as the server tool's call and result, the client's as the client's.
- One call through the real translator's ItemWriter, the Containers service faked: the
  ``shell_call`` then the ``shell_call_output``, OpenAI's events in order, every event and the
  Response validated against openai-python's types; output bounded by ``max_output_length``;
  a timeout; failures the model reads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from responses_gateway.config import Settings
from responses_gateway.containers.engine import CommandResult
from responses_gateway.errors import GatewayError, not_found
from responses_gateway.tools import client_tools, registry
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.hosted_shell import items as shell_items
from responses_gateway.tools.hosted_shell.tool import HostedShellTool
from responses_gateway.tools.server import Rebuild, ServerCall
from responses_gateway.translate.request_models import parse_create_request
from responses_gateway.translate.request_tools import ClientRunTool, HostedTool
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from responses_gateway.translate.to_chat import to_chat_request, turn_messages
from tests.helpers.responses_validation import sdk_validate_event, sdk_validate_response

AUTO = {"type": "shell", "environment": {"type": "container_auto"}}
SETTINGS = Settings(upstream_url="http://up.invalid", code_interpreter="sandbox",
                    code_timeout=30, code_max_output_bytes=4096)


# -- the seam ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("tool", "hosted"), [
    ({"type": "shell"}, False),
    ({"type": "shell", "environment": None}, False),
    ({"type": "shell", "environment": {"type": "local"}}, False),
    (AUTO, True),
    ({"type": "shell", "environment": {"type": "container_reference",
                                       "container_id": "cntr_1"}}, True),
])
def test_a_shell_is_hosted_when_its_environment_is_a_container(
        tool: dict[str, Any], hosted: bool) -> None:
    assert (registry.serving(tool) is not None) is hosted
    assert (client_tools.client_run(tool) is None) is hosted
    req = parse_create_request({"model": "m", "input": "hi", "tools": [tool]},
                               served=frozenset({"shell"}))
    assert isinstance(req.tools[0], HostedTool if hosted else ClientRunTool)
    assert (registry.serving(req.tools[0]) is not None) is hosted
    assert req.echo()["tools"] == [tool]


def test_a_hosted_shell_the_gateway_does_not_run_is_hosted_policy() -> None:
    body = {"model": "m", "input": "hi", "tools": [AUTO, {"type": "shell"}]}
    req = parse_create_request(body, hosted_tools="omit", served=frozenset())
    assert req.echo()["tools"] == [{"type": "shell"}]  # left out: OpenAI's to run
    with pytest.raises(GatewayError) as refused:
        parse_create_request(body, hosted_tools="reject", served=frozenset())
    assert refused.value.param == "tools[0].type"
    assert "GATEWAY_CODE_INTERPRETER" in refused.value.message


def test_the_client_shell_is_still_offered_as_the_clients() -> None:
    req = parse_create_request({"model": "m", "input": "hi", "tools": [
        {"type": "shell"}, AUTO]}, served=frozenset({"shell"}))
    catalog = ToolCatalog()
    body = to_chat_request(req, [{"type": "message", "role": "user", "content": "hi"}],
                           model="m", catalog=catalog)
    assert [t["function"]["name"] for t in body["tools"]] == ["shell"]
    assert catalog.specs["shell"].kind == "shell"  # the client's; hosted's joins when built


def test_tool_choice_shell_names_the_hosted_one() -> None:
    req = parse_create_request({"model": "m", "input": "hi", "tools": [AUTO],
                                "tool_choice": {"type": "shell"}}, served=frozenset({"shell"}))
    body = to_chat_request(req, [{"type": "message", "role": "user", "content": "hi"}],
                           model="m", catalog=ToolCatalog())
    assert body["tool_choice"] == "required"  # the server tool narrows it once built
    tool = HostedShellTool.__new__(HostedShellTool)
    catalog = ToolCatalog()
    catalog.add_server("hosted_shell", tool.functions()[0][1], None)
    assert tool.tool_choice(req.tool_choice, catalog) == {
        "type": "function", "function": {"name": "shell"}}
    omitted = parse_create_request({"model": "m", "input": "hi", "tools": [
        AUTO, {"type": "function", "name": "f"}], "tool_choice": {"type": "shell"}},
        hosted_tools="omit", served=frozenset())
    body = to_chat_request(omitted, [{"type": "message", "role": "user", "content": "hi"}],
                           model="m", catalog=ToolCatalog())
    assert "tool_choice" not in body  # a hosted tool left out: its choice goes with it


# -- the Containers service, faked ------------------------------------------------------------


@dataclass
class Record:
    id: str


class FakeContainers:
    """The service's API the tool uses (containers/service.py), answering from a table."""

    def __init__(self, results: list[CommandResult] | None = None,
                 alive: Sequence[str] = ()) -> None:
        self.alive = set(alive)
        self.results = results or []
        self.created: list[dict[str, Any]] = []
        self.ran: list[tuple[str, list[str], float | None, int | None]] = []

    async def get(self, tenant: str, container_id: str) -> Record:
        if container_id not in self.alive:
            raise not_found(f"Container with id '{container_id}' not found.")
        return Record(container_id)

    async def create(self, tenant: str, *, name: str, file_ids: Sequence[str] = (),
                     memory_limit: str | None = None, expires_minutes: int | None = None
                     ) -> Record:
        container_id = f"cntr_{len(self.created) + 1}"
        self.created.append({"name": name, "file_ids": list(file_ids),
                             "memory_limit": memory_limit})
        self.alive.add(container_id)
        return Record(container_id)

    async def run_commands(self, tenant: str, container_id: str, commands: Sequence[str], *,
                           timeout: float | None = None, max_output: int | None = None
                           ) -> list[CommandResult]:
        self.ran.append((container_id, list(commands), timeout, max_output))
        return self.results[:len(commands)]


def build(tools: list[dict[str, Any]], containers: FakeContainers,
          history: list[dict[str, Any]] | None = None) -> registry.ServerTools | None:
    req = parse_create_request({"model": "m", "input": "hi", "tools": tools},
                               served=frozenset({"shell"}))
    return asyncio.run(registry.ServerTools.for_request(
        req.tools, req.tool_choice, [], history or [], SETTINGS, "tenant-a",
        services=SimpleNamespace(containers=containers)))


def test_for_request_builds_only_the_hosted_shell() -> None:
    assert build([{"type": "shell"}], FakeContainers()) is None
    tools = build([{"type": "shell"}, AUTO], FakeContainers())
    assert tools is not None and list(tools.by_kind) == ["hosted_shell"]


def test_a_referenced_container_must_exist() -> None:
    ref = {"type": "shell", "environment": {"type": "container_reference",
                                            "container_id": "cntr_gone"}}
    with pytest.raises(GatewayError) as missing:
        build([ref], FakeContainers())
    assert missing.value.status == 404
    assert missing.value.param == "tools[0].environment.container_id"
    with pytest.raises(GatewayError) as two:
        build([AUTO, AUTO], FakeContainers())
    assert (two.value.status, two.value.param) == (400, "tools")
    assert build([ref], FakeContainers(alive=["cntr_gone"])) is not None


@pytest.mark.parametrize(("environment", "param"), [
    ({"type": "container_reference"}, "tools[0].environment.container_id"),
    ({"type": "container_auto", "memory_limit": "3g"}, "tools[0].environment.memory_limit"),
    ({"type": "container_auto", "file_ids": "file_1"}, "tools[0].environment.file_ids"),
    ({"type": "container_auto", "network_policy": {"type": "allowlist",
                                                   "allowed_domains": ["x.com"]}},
     "tools[0].environment.network_policy"),
])
def test_a_malformed_environment_is_a_400(environment: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as bad:
        build([{"type": "shell", "environment": environment}], FakeContainers())
    assert (bad.value.status, bad.value.param) == (400, param)


# -- one call ---------------------------------------------------------------------------------


def new_translator() -> ResponseTranslator:
    response = new_response(parse_create_request({"model": "m"}).echo(), response_id="resp_t",
                            created_at=1, status="in_progress")
    translator = ResponseTranslator(response, TranslateOptions(
        tools={"shell": ToolSpec("hosted_shell", "shell")}))
    translator.start()
    return translator


def run(tool: HostedShellTool, arguments: dict[str, Any] | str,
        translator: ResponseTranslator) -> list[list[dict[str, Any]]]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = ServerCall("call_1", ToolSpec("hosted_shell", "shell"), text)

    async def collect() -> list[list[dict[str, Any]]]:
        return [batch async for batch in tool.run(call, translator)]

    return asyncio.run(collect())


def auto_tool(containers: FakeContainers, earlier: list[dict[str, Any]] | None = None
              ) -> HostedShellTool:
    tools = build([{"type": "shell", "environment": {
        "type": "container_auto", "file_ids": ["file_a"], "memory_limit": "4g"}}],
        containers, earlier)
    assert tools is not None
    tool = tools.by_kind["hosted_shell"]
    assert isinstance(tool, HostedShellTool)
    return tool


def test_a_call_makes_the_call_and_its_output_with_openais_events() -> None:
    containers = FakeContainers([CommandResult(stdout="hi\n", exit_code=0),
                                 CommandResult(stderr="nope\n", exit_code=2)])
    tool = auto_tool(containers)
    translator = new_translator()
    batches = run(tool, {"action": {"commands": ["echo hi", "false"], "timeout_ms": 5000}},
                  translator)
    assert containers.created == [{"name": "shell auto container", "file_ids": ["file_a"],
                                   "memory_limit": "4g"}]
    assert containers.ran == [("cntr_1", ["echo hi", "false"], 5.0, 4096)]
    events = [e for batch in batches for e in batch]
    for event in events:
        sdk_validate_event(event)
    assert [e["type"] for e in batches[0]][-1] == "response.output_item.added"  # output open
    kinds = [(e["type"], e.get("command_index")) for e in events]
    assert kinds == [
        ("response.output_item.added", None),
        ("response.shell_call_command.added", 0), ("response.shell_call_command.delta", 0),
        ("response.shell_call_command.done", 0),
        ("response.shell_call_command.added", 1), ("response.shell_call_command.delta", 1),
        ("response.shell_call_command.done", 1),
        ("response.output_item.done", None),
        ("response.output_item.added", None),
        ("response.shell_call_output_content.delta", 0),
        ("response.shell_call_output_content.done", 0),
        ("response.shell_call_output_content.delta", 1),
        ("response.shell_call_output_content.done", 1),
        ("response.output_item.done", None),
    ]
    assert [e["sequence_number"] for e in events] == sorted(e["sequence_number"] for e in events)
    call, output = translator.response["output"]
    assert call["type"] == "shell_call" and call["id"].startswith("sh_")
    assert call["status"] == "completed" and call["call_id"] == "call_1"
    assert call["action"] == {"commands": ["echo hi", "false"], "timeout_ms": 5000,
                              "max_output_length": None}
    assert call["environment"] == {"type": "container_reference", "container_id": "cntr_1"}
    assert output["id"].startswith("sho_") and output["status"] == "completed"
    assert output["output"] == [
        {"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
        {"stdout": "", "stderr": "nope\n", "outcome": {"type": "exit", "exit_code": 2}}]
    assert events[1] == {"type": "response.shell_call_command.added", "output_index": 0,
                         "command_index": 0, "command": "",
                         "sequence_number": events[1]["sequence_number"]}
    # the same container for the response's next call
    run(tool, {"action": {"commands": ["ls"]}}, translator)
    assert len(containers.created) == 1 and containers.ran[-1][0] == "cntr_1"
    assert containers.ran[-1][2] == 30.0  # no timeout_ms: GATEWAY_CODE_TIMEOUT
    translator.feed({"choices": [{"index": 0, "delta": {"content": "done"},
                                  "finish_reason": "stop"}]})
    sdk_validate_response(translator.response)


def test_output_is_bounded_and_a_timeout_is_its_outcome() -> None:
    containers = FakeContainers([CommandResult(stdout="x" * 50, stderr="e" * 50, exit_code=0),
                                 CommandResult(stdout="part", timed_out=True)])
    tool = auto_tool(containers)
    translator = new_translator()
    run(tool, {"action": {"commands": ["yes", "sleep 99"], "max_output_length": 60,
                          "timeout_ms": 999_000}}, translator)
    assert containers.ran[0][2:] == (30.0, 240)  # timeout capped; bytes for 60 characters
    output = translator.response["output"][1]
    assert output["max_output_length"] == 60
    first, second = output["output"]
    assert (first["stdout"], first["stderr"]) == ("x" * 50, "e" * 10)
    assert second["outcome"] == {"type": "timeout"} and second["stdout"] == "part"


def test_a_chain_with_container_auto_goes_on_in_its_container() -> None:
    earlier = [{"type": "shell_call", "id": "sh_1", "call_id": "c0", "status": "completed",
                "action": {"commands": ["touch a"]},
                "environment": {"type": "container_reference", "container_id": "cntr_old"}}]
    containers = FakeContainers([CommandResult(exit_code=0)], alive=["cntr_old"])
    run(auto_tool(containers, earlier), {"action": {"commands": ["ls"]}}, new_translator())
    assert containers.created == [] and containers.ran[0][0] == "cntr_old"
    gone = FakeContainers([CommandResult(exit_code=0)])  # expired since: a new one
    run(auto_tool(gone, earlier), {"action": {"commands": ["ls"]}}, new_translator())
    assert len(gone.created) == 1 and gone.ran[0][0] == "cntr_1"


def test_failures_are_outputs_the_model_reads() -> None:
    translator = new_translator()
    run(auto_tool(FakeContainers()), "{not json", translator)
    call, output = translator.response["output"]
    assert call["status"] == "incomplete" and output["status"] == "incomplete"
    assert "No commands" in output["output"][0]["stderr"]

    class Failing(FakeContainers):
        async def run_commands(self, *args: Any, **kwargs: Any) -> list[CommandResult]:
            raise not_found("Container with id 'cntr_1' not found.")

    translator = new_translator()
    batches = run(auto_tool(Failing()), {"action": {"commands": ["ls"]}}, translator)
    for event in (e for batch in batches for e in batch):
        sdk_validate_event(event)
    output = translator.response["output"][1]
    assert output["status"] == "incomplete"
    assert "not found" in output["output"][0]["stderr"]
    assert output["output"][0]["outcome"] == {"type": "exit", "exit_code": 126}


def test_the_record_rebuilds_the_tool() -> None:
    containers = FakeContainers([CommandResult(exit_code=0)])
    tool = auto_tool(containers)
    run(tool, {"action": {"commands": ["ls"]}}, new_translator())
    record = json.loads(json.dumps(tool.to_record(lambda data: "sealed")))
    again = HostedShellTool.from_record(record, Rebuild(
        SETTINGS, lambda text: {}, services=SimpleNamespace(containers=containers)))
    run(again, {"action": {"commands": ["ls"]}}, new_translator())
    assert len(containers.created) == 1 and containers.ran[-1][0] == "cntr_1"


# -- history ----------------------------------------------------------------------------------


HOSTED_PAIR = [
    {"type": "shell_call", "id": "sh_1", "call_id": "call_h", "status": "completed",
     "action": {"commands": ["ls"], "timeout_ms": None, "max_output_length": None},
     "environment": {"type": "container_reference", "container_id": "cntr_1"}},
    {"type": "shell_call_output", "id": "sho_1", "call_id": "call_h", "status": "completed",
     "output": [{"stdout": "a.txt\n", "stderr": "", "outcome": {"type": "exit",
                                                               "exit_code": 0}}]},
]
CLIENT_PAIR = [
    {"type": "shell_call", "id": "sh_2", "call_id": "call_c", "status": "completed",
     "action": {"commands": ["pwd"], "timeout_ms": None, "max_output_length": None}},
    {"type": "shell_call_output", "id": "sho_2", "call_id": "call_c", "status": "completed",
     "output": [{"stdout": "/home\n", "stderr": "", "outcome": {"type": "exit",
                                                               "exit_code": 0}}]},
]


def test_hosted_pairs_go_back_as_the_server_tools_and_client_ones_as_the_clients() -> None:
    catalog = ToolCatalog()
    catalog.add_client("shell", {"name": "shell", "parameters": {}})
    catalog.add_server("hosted_shell", {"name": "shell", "parameters": {}}, None)
    messages = turn_messages([*HOSTED_PAIR, *CLIENT_PAIR], catalog=catalog,
                             reasoning_input=None, unseal=None)
    hosted_name = catalog.chat_name("hosted_shell", "shell")
    assert hosted_name != "shell"
    calls = [(c["id"], c["function"]["name"]) for m in messages
             for c in m.get("tool_calls") or ()]
    assert calls == [("call_h", hosted_name), ("call_c", "shell")]
    results = {m["tool_call_id"]: json.loads(m["content"]) for m in messages
               if m["role"] == "tool"}
    assert results == {"call_h": [{"stdout": "a.txt\n", "stderr": "", "outcome": {
        "type": "exit", "exit_code": 0}}], "call_c": [{"stdout": "/home\n", "stderr": "",
                                                      "outcome": {"type": "exit",
                                                                  "exit_code": 0}}]}


def test_a_hosted_pair_sent_back_as_input_reads_as_the_server_tools() -> None:
    req = parse_create_request({"model": "m", "input": [*HOSTED_PAIR, {
        "type": "message", "role": "user", "content": "and then?"}], "tools": [AUTO]},
        served=frozenset({"shell"}))
    from responses_gateway.translate.request import normalize_input
    items = normalize_input(req)
    assert items[0]["environment"]["container_id"] == "cntr_1"  # kept as sent
    body = to_chat_request(req, items, model="m", catalog=ToolCatalog())
    assert body["messages"][0]["tool_calls"][0]["function"]["name"] == "shell"
    assert body["messages"][1] == {"role": "tool", "tool_call_id": "call_h",
                                   "content": json.dumps(HOSTED_PAIR[1]["output"])}


def test_bounding_keeps_stdout_first() -> None:
    chunk = shell_items.chunk_of(CommandResult(stdout="abc", stderr="def", exit_code=1), 4)
    assert chunk == {"stdout": "abc", "stderr": "d", "outcome": {"type": "exit",
                                                                "exit_code": 1}}
    assert shell_items.chunk_of(CommandResult(stdout="abc"), None)["outcome"] == {
        "type": "timeout"}


def test_allowed_tools_may_name_the_hosted_shell() -> None:
    req = parse_create_request({"model": "m", "input": "hi", "tools": [AUTO], "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "shell"}]}},
        served=frozenset({"shell"}))
    assert req.tool_choice.mode == "required"

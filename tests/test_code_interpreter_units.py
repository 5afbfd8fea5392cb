"""code_interpreter's parts on their own (issue 42): the request tool's 400s, the code deltas
decoded from the model's streamed arguments, one call's item and events through the real
translator (validated against openai-python's models and the stream grammar), the container
across turns, failures, citations, history and the record a background worker rebuilds from.

The Containers service is a small in-test double (:class:`FakeContainers`, running the code with
``exec`` in a dict per container): these tests are about the tool, not the engines, which
tests/test_code_interpreter.py runs end to end with the real sandbox.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import random
import traceback
from dataclasses import dataclass, field
from typing import Any

import pytest

from responses_gateway.config import Settings
from responses_gateway.containers.engine import CodeResult, EngineError
from responses_gateway.errors import GatewayError, not_found
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.code_interpreter.code_stream import CodeDecoder, code_deltas, code_of
from responses_gateway.tools.code_interpreter.params import ContainerParams
from responses_gateway.tools.code_interpreter.tool import CodeInterpreterTool
from responses_gateway.tools.server import Rebuild, RequestTools, ServerCall
from responses_gateway.translate.request_models import parse_create_request
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.responses_validation import (
    check_grammar,
    sdk_validate_event,
    sdk_validate_response,
)

SPEC = ToolSpec("code_interpreter", "python")
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
SETTINGS = Settings(code_interpreter="sandbox", code_timeout=5.0)


# -- the Containers service double ------------------------------------------------------------


@dataclass
class File:
    id: str
    container_id: str
    path: str
    bytes: int


@dataclass
class Record:
    id: str
    tenant: str
    memory_limit: str | None
    file_ids: tuple[str, ...]


@dataclass
class Ran:
    result: CodeResult
    files: list[File]


@dataclass
class FakeContainers:
    """Containers as the service keeps them, code run by ``exec``. ``PLOT`` in the code
    writes /mnt/data/plot.png, ``FIGURE`` a figure left open (/mnt/data/figure_N.png, as the
    engines save one), ``SLEEP_FOREVER`` times out (and resets), ``BROKEN`` makes the
    engine fail."""

    made: list[Record] = field(default_factory=list)
    live: dict[str, Record] = field(default_factory=dict)
    spaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)  # file id -> bytes
    ran: list[tuple[str, str]] = field(default_factory=list)
    looked_up: list[str] = field(default_factory=list)

    async def create(self, tenant: str, *, name: str, file_ids: Any = (),
                     memory_limit: str | None = None, expires_minutes: int | None = None
                     ) -> Record:
        record = Record(f"cntr_{len(self.made) + 1}", tenant, memory_limit, tuple(file_ids))
        self.made.append(record)
        self.live[record.id] = record
        self.spaces[record.id] = {}
        return record

    async def get(self, tenant: str, container_id: str) -> Record:
        record = self.live.get(container_id)
        if record is None or record.tenant != tenant:
            raise not_found(f"Container with id '{container_id}' not found.")
        return record

    async def files(self, tenant: str, container_id: str) -> list[File]:
        record = await self.get(tenant, container_id)
        return [File(f"cfile_{fid}", container_id, f"/mnt/data/{fid}.csv", 3)
                for fid in record.file_ids]

    async def add_file(self, tenant: str, container_id: str, *, file_id: str) -> File:
        record = await self.get(tenant, container_id)
        record.file_ids = (*record.file_ids, file_id)
        return File(f"cfile_{file_id}", container_id, f"/mnt/data/{file_id}.csv", 3)

    @property
    def files_api(self) -> Any:
        outer = self

        class Files:  # the Files API: a File's filename
            async def get(self, file_id: str, tenant: str) -> Any:
                if file_id == "file_gone":
                    raise not_found(f"No such File object: {file_id}")
                outer.looked_up.append(file_id)
                return type("F", (), {"filename": f"{file_id}.csv"})()

        return Files()

    async def run_code(self, tenant: str, container_id: str, code: str) -> Ran:
        await self.get(tenant, container_id)
        self.ran.append((container_id, code))
        if "BROKEN" in code:
            raise EngineError("the jail would not start")
        if "SLEEP_FOREVER" in code:
            self.spaces[container_id] = {}
            return Ran(CodeResult(stdout="started\n", timed_out=True, reset=True), [])
        out = io.StringIO()
        result = CodeResult()
        with contextlib.redirect_stdout(out):
            try:
                exec(code, self.spaces[container_id])  # the test's own code
            except Exception:
                result.error = traceback.format_exc(limit=0)
        result.stdout = out.getvalue()
        files = []
        for marker, path in (("PLOT", "/mnt/data/plot.png"),
                             ("FIGURE", f"/mnt/data/figure_{len(self.data) + 1}.png")):
            if marker in code:
                file = File(f"cfile_{len(self.data)}", container_id, path, len(PNG))
                self.data[file.id] = PNG
                files.append(file)
        return Ran(result, files)

    async def file_content(self, tenant: str, container_id: str, file_id: str
                           ) -> tuple[File, Any]:
        data = self.data[file_id]

        async def chunks() -> Any:
            yield data[:5]
            yield data[5:]

        return File(file_id, container_id, "/mnt/data/plot.png", len(data)), chunks()


@dataclass
class Services:
    containers: FakeContainers


# -- helpers -------------------------------------------------------------------------------------


def request(tool: dict[str, Any], *, history: list[dict[str, Any]] | None = None,
            include: tuple[str, ...] = (), containers: FakeContainers | None = None,
            tenant: str = "t1") -> RequestTools:
    return RequestTools(tools=[tool], tool_choice="auto", items=[], history=history or [],
                        settings=SETTINGS, tenant=tenant, indexes=[0], include=include,
                        services=Services(containers or FakeContainers()))  # type: ignore[arg-type]


def build(req: RequestTools) -> CodeInterpreterTool:
    return asyncio.run(CodeInterpreterTool.for_request(req))


def new_translator(annotate: Any = None) -> ResponseTranslator:
    response = new_response(parse_create_request({"model": "m"}).echo(), response_id="resp_ci",
                            created_at=1, status="in_progress")
    return ResponseTranslator(response, TranslateOptions(tools={"python": SPEC},
                                                         annotate=annotate))


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def model_calls(translator: ResponseTranslator, fragments: list[str]) -> list[dict[str, Any]]:
    """A model turn that calls ``python`` with its arguments streamed in ``fragments``."""
    events = translator.feed(chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {
        "name": "python", "arguments": ""}}]}))
    for piece in fragments:
        events += translator.feed(chunk({"tool_calls": [{"index": 0, "function": {
            "arguments": piece}}]}))
    events += translator.feed(chunk({}, "tool_calls"))
    return events + translator.end_turn()


def run(tool: CodeInterpreterTool, call: ServerCall,
        translator: ResponseTranslator) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        async for batch in tool.run(call, translator):
            events += batch
        return events

    return asyncio.run(collect())


def one_response(tool: CodeInterpreterTool, fragments: list[str], answer: str = "Done."
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A whole response: the model's call, the tool's item, the model's answer; every event
    validated against the SDK and the stream grammar."""
    translator = new_translator(tool.annotate)
    events = translator.start()
    events += model_calls(translator, fragments)
    [call] = translator.server_calls
    events += run(tool, call, translator)
    translator.next_turn()
    events += translator.feed(chunk({"content": answer}, "stop"))
    events += translator.finish()
    for event in events:
        sdk_validate_event(event)
    check_grammar(events)
    response = events[-1]["response"]
    sdk_validate_response(response)
    return events, response


def split(text: str, pieces: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(pieces, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


# -- the request tool --------------------------------------------------------------------------


@pytest.mark.parametrize(("tool", "param", "code"), [
    ({"type": "code_interpreter"}, "tools[0].container", "missing_required_parameter"),
    ({"type": "code_interpreter", "container": 3}, "tools[0].container", "invalid_type"),
    ({"type": "code_interpreter", "container": {}}, "tools[0].container.type",
     "missing_required_parameter"),
    ({"type": "code_interpreter", "container": {"type": "manual"}}, "tools[0].container.type",
     "invalid_value"),
    ({"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "2g"}},
     "tools[0].container.memory_limit", "invalid_value"),
    ({"type": "code_interpreter", "container": {"type": "auto", "file_ids": "file_1"}},
     "tools[0].container.file_ids", "invalid_type"),
    ({"type": "code_interpreter", "container": {"type": "auto", "file_ids": [1]}},
     "tools[0].container.file_ids[0]", "invalid_type"),
    ({"type": "code_interpreter", "container": {"type": "auto", "size": 1}},
     "tools[0].container.size", "unknown_parameter"),
    ({"type": "code_interpreter", "container": {
        "type": "auto", "network_policy": {"type": "allowlist", "allowed_domains": ["x.io"]}}},
     "tools[0].container.network_policy.type", "invalid_value"),
])
def test_bad_tools_are_openais_400s(tool: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(GatewayError) as caught:
        build(request(tool))
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_an_unknown_or_other_tenants_container_is_a_404_naming_it() -> None:
    containers = FakeContainers()
    asyncio.run(containers.create("t2", name="theirs"))
    for container in ("cntr_nope", "cntr_1"):
        with pytest.raises(GatewayError) as caught:
            build(request({"type": "code_interpreter", "container": container},
                          containers=containers))
        assert (caught.value.status, caught.value.param) == (404, "tools[0].container")
        assert container in caught.value.message


def test_auto_params_are_kept() -> None:
    params = ContainerParams.of({"type": "code_interpreter", "container": {
        "type": "auto", "file_ids": ["file_a", "file_b", "file_a"], "memory_limit": "4g",
        "network_policy": {"type": "disabled"}}}, "tools[2]")
    assert (params.auto, params.file_ids, params.memory_limit) == (
        True, ("file_a", "file_b"), "4g")
    assert ContainerParams.from_record(params.to_record()) == params


# -- code deltas -------------------------------------------------------------------------------


CODES = ['print("hi")', 'x = "a\\"b"\nprint(x)\t# tab', "s = 'ünïcødé ✓ 🐍'\nprint(s)",
         "path = r'C:\\\\data'\n", ""]


@pytest.mark.parametrize("code", CODES)
def test_deltas_spell_the_code_however_the_arguments_were_cut(code: str) -> None:
    for ascii_only in (True, False):
        arguments = json.dumps({"code": code}, ensure_ascii=ascii_only)
        for seed in range(40):
            fragments = split(arguments, 1 + seed % 12, seed)
            deltas = code_deltas(fragments, code)
            assert "".join(deltas) == code
            assert all(deltas)
    if code:  # each fragment that adds code is one delta: the model's pace
        arguments = json.dumps({"code": code})
        fragments = [arguments[:10], *arguments[10:]]
        assert len(code_deltas(fragments, code)) > 1


def test_other_argument_shapes_give_one_delta() -> None:
    assert code_deltas(['{"reason": "x", ', '"code": "print(1)"}'], "print(1)") == ["print(1)"]
    assert code_of("print(1)") == "print(1)"  # raw code, not JSON: taken as the code
    assert code_of('{"script": "print(2)"}') == "print(2)"  # one string, another key
    assert code_of('{"code": "  "}') is None and code_of("{}") is None
    decoder = CodeDecoder()
    assert decoder.feed('{"code": "a\\u00') == "a" and decoder.feed("e9b") == "\u00e9b"


# -- one call ----------------------------------------------------------------------------------


def test_a_call_is_a_code_interpreter_call_with_openais_events() -> None:
    containers = FakeContainers()
    tool = build(request({"type": "code_interpreter", "container": {"type": "auto"}},
                         containers=containers))
    code = "x = 6 * 7\nprint(x)"
    fragments = split(json.dumps({"code": code}), 6, 1)
    events, response = one_response(tool, fragments)
    [item, message] = response["output"]
    assert item["type"] == "code_interpreter_call" and item["id"].startswith("ci_")
    assert (item["code"], item["container_id"], item["status"]) == (code, "cntr_1", "completed")
    assert item["outputs"] is None  # not included: null, as OpenAI's
    assert message["content"][0]["text"] == "Done."
    kinds = [e["type"] for e in events if e.get("item_id") == item["id"]
             or e.get("item", {}).get("id") == item["id"]]
    deltas = kinds.count("response.code_interpreter_call_code.delta")
    assert deltas >= 2
    assert kinds == ["response.output_item.added", "response.code_interpreter_call.in_progress",
                     *["response.code_interpreter_call_code.delta"] * deltas,
                     "response.code_interpreter_call_code.done",
                     "response.code_interpreter_call.interpreting",
                     "response.code_interpreter_call.completed", "response.output_item.done"]
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added"
                 and e["item"]["id"] == item["id"])
    assert added == {"id": item["id"], "type": "code_interpreter_call", "status": "in_progress",
                     "code": "", "container_id": "cntr_1", "outputs": None}
    assert tool.reads() == {item["id"]: "42\n".rstrip("\n")}
    assert containers.made[0].file_ids == () and containers.ran == [("cntr_1", code)]


def test_included_outputs_hold_figures_then_logs_citations_as_openais() -> None:
    """As OpenAI's recordings: a figure the code showed is an image output and a citation
    spanning nothing; a file it saved is cited where the answer links it."""
    tool = build(request({"type": "code_interpreter", "container": {"type": "auto"}},
                         include=("code_interpreter_call.outputs",)))
    code = "print('plotted')  # PLOT FIGURE"
    events, response = one_response(
        tool, [json.dumps({"code": code})],
        answer="Here it is: [the plot](sandbox:/mnt/data/plot.png).")
    item = response["output"][0]
    assert item["outputs"] == [
        {"type": "image", "url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        {"type": "logs", "logs": "plotted"}]
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    assert added["outputs"] == []
    # the model read where the file is, and its link is cited as OpenAI cites it
    assert "/mnt/data/plot.png" in tool.reads()[item["id"]]
    assert "/mnt/data/figure_1.png" in tool.reads()[item["id"]]
    text = response["output"][1]["content"][0]
    start = text["text"].index("sandbox:")
    assert text["annotations"] == [{
        "type": "container_file_citation", "container_id": "cntr_1", "file_id": "cfile_1",
        "filename": "figure_1.png", "start_index": 0, "end_index": 0}, {
        "type": "container_file_citation", "container_id": "cntr_1", "file_id": "cfile_0",
        "filename": "plot.png", "start_index": start,
        "end_index": start + len("sandbox:/mnt/data/plot.png")}]
    added = [e["annotation"] for e in events
             if e["type"] == "response.output_text.annotation.added"]
    assert added == text["annotations"]


def test_an_exception_is_completed_with_its_traceback_a_timeout_is_failed() -> None:
    tool = build(request({"type": "code_interpreter", "container": {"type": "auto"}},
                         include=("code_interpreter_call.outputs",)))
    events, response = one_response(tool, [json.dumps({"code": "1 / 0"})])
    item = response["output"][0]
    assert item["status"] == "completed"
    assert "ZeroDivisionError" in item["outputs"][0]["logs"]
    assert "ZeroDivisionError" in tool.reads()[item["id"]]
    events, response = one_response(tool, [json.dumps({"code": "SLEEP_FOREVER = 1"})])
    item = response["output"][0]
    assert item["status"] == "failed"
    assert "response.code_interpreter_call.completed" not in [e["type"] for e in events]
    told = tool.reads()[item["id"]]
    assert "5-second limit" in told and "reset" in told and "started" in told
    assert response["status"] == "completed"  # the response goes on


def test_an_engine_failure_or_no_code_fails_the_call_not_the_response() -> None:
    tool = build(request({"type": "code_interpreter", "container": {"type": "auto"}}))
    _, response = one_response(tool, [json.dumps({"code": "BROKEN"})])
    item = response["output"][0]
    assert item["status"] == "failed" and "jail would not start" in tool.reads()[item["id"]]
    _, response = one_response(tool, ['{"code": ""}'])
    item = response["output"][0]
    assert item["status"] == "failed" and "without code" in tool.reads()[item["id"]]


# -- the container across calls and turns --------------------------------------------------------


def test_auto_reuses_the_conversations_live_container_else_makes_one() -> None:
    containers = FakeContainers()
    auto = {"type": "code_interpreter",
            "container": {"type": "auto", "file_ids": ["file_x"], "memory_limit": "4g"}}
    first = build(request(auto, containers=containers))
    _, response = one_response(first, [json.dumps({"code": "n = 41"})])
    assert containers.made[0].file_ids == ("file_x",) and containers.made[0].memory_limit == "4g"
    assert "/mnt/data/file_x.csv" in first.files  # the given files can be cited
    history = response["output"]
    # a later turn (previous_response_id): the same container, its variables still there
    later = build(request(auto, history=history, containers=containers))
    _, response = one_response(later, [json.dumps({"code": "print(n + 1)"})])
    assert response["output"][0]["container_id"] == "cntr_1" and len(containers.made) == 1
    assert later.reads()[response["output"][0]["id"]] == "42"
    # once it expired: a new one, and the model is told its state is gone
    del containers.live["cntr_1"]
    again = build(request(auto, history=history, containers=containers))
    _, response = one_response(again, [json.dumps({"code": "print(2)"})])
    item = response["output"][0]
    assert item["container_id"] == "cntr_2"
    assert "expired" in again.reads()[item["id"]]
    # a later turn's new file_ids join a reused container; those it holds are left alone
    more = {"type": "code_interpreter", "container": {
        "type": "auto", "file_ids": ["file_x", "file_y", "file_gone"]}}
    added = build(request(more, history=response["output"], containers=containers))
    _, response = one_response(added, [json.dumps({"code": "print(4)"})])
    item = response["output"][0]
    assert item["container_id"] == "cntr_2" and containers.live["cntr_2"].file_ids == (
        "file_x", "file_y")
    assert "/mnt/data/file_y.csv" in added.files
    assert "file_gone" in added.reads()[item["id"]]
    # another key's container is never reused
    theirs = build(request(auto, history=history, containers=containers, tenant="t9"))
    _, response = one_response(theirs, [json.dumps({"code": "print(3)"})])
    assert response["output"][0]["container_id"] == "cntr_3"
    assert len(containers.made) == 3


def test_a_reused_container_without_file_storage_runs_and_says_so() -> None:
    """Where the gateway stores no Files (AWS without a files bucket), a later turn's
    ``file_ids`` cannot join the container: the call runs and the model is told."""

    class NoFiles(FakeContainers):
        files_api = None  # type: ignore[assignment]

    containers = NoFiles()
    auto = {"type": "code_interpreter", "container": {"type": "auto"}}
    _, response = one_response(build(request(auto, containers=containers)),
                               [json.dumps({"code": "n = 1"})])
    more = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file_x"]}}
    later = build(request(more, history=response["output"], containers=containers))
    _, response = one_response(later, [json.dumps({"code": "print(n)"})])
    item = response["output"][0]
    assert item["status"] == "completed" and item["container_id"] == "cntr_1"
    assert "file_x" in later.reads()[item["id"]]


def test_an_explicit_container_that_expires_mid_chain_fails_the_call() -> None:
    containers = FakeContainers()
    made = asyncio.run(containers.create("t1", name="mine"))
    tool = build(request({"type": "code_interpreter", "container": made.id},
                         containers=containers))
    del containers.live[made.id]
    _, response = one_response(tool, [json.dumps({"code": "print(1)"})])
    item = response["output"][0]
    assert (item["status"], item["container_id"]) == ("failed", made.id)
    assert "not found" in tool.reads()[item["id"]]


# -- tool_choice, record, history ----------------------------------------------------------------


def test_tool_choice_forces_the_python_function() -> None:
    tool = build(request({"type": "code_interpreter", "container": {"type": "auto"}}))
    catalog = ToolCatalog()
    for namespace, function in tool.functions():
        catalog.add_server("code_interpreter", function, namespace)
    assert tool.tool_choice({"type": "code_interpreter"}, catalog) == {
        "type": "function", "function": {"name": "python"}}
    assert tool.tool_choice({"type": "web_search"}, catalog) is None
    assert tool.tool_choice("required", catalog) is None
    [(_, function)] = tool.functions()
    assert function["parameters"]["required"] == ["code"]
    assert "5 seconds" in function["description"] and "/mnt/data" in function["description"]


def test_the_record_rebuilds_the_tool_for_a_background_worker() -> None:
    containers = FakeContainers()
    tool = build(request({"type": "code_interpreter", "container": {"type": "auto"}},
                         containers=containers, include=("code_interpreter_call.outputs",)))
    one_response(tool, [json.dumps({"code": "v = 1  # PLOT FIGURE"})])
    data = json.loads(json.dumps(tool.to_record(lambda d: "sealed")))
    again = CodeInterpreterTool.from_record(data, Rebuild(
        settings=SETTINGS, unseal=lambda s: {}, services=Services(containers)))  # type: ignore[arg-type]
    assert (again.container_id, again.tenant, again.include_outputs) == ("cntr_1", "t1", True)
    assert again.files == tool.files and again.params == tool.params
    _, response = one_response(again, [json.dumps({"code": "print(v)"})])
    assert response["output"][0]["container_id"] == "cntr_1"
    assert again.reads()[response["output"][0]["id"]] == "1"


def test_history_reads_the_call_as_the_model_made_it() -> None:
    item = {"type": "code_interpreter_call", "id": "ci_1", "code": "print(1)",
            "container_id": "cntr_1", "status": "completed",
            "outputs": [{"type": "image", "url": "data:image/png;base64,AAAA"},
                        {"type": "logs", "logs": "1"}]}
    kept = CodeInterpreterTool.history_reader([item], {"ci_1": "1\n[Files written: x]"})
    call = kept.read(item, "input[0]")
    assert call is not None
    assert (call.spec, json.loads(call.arguments)) == (SPEC, {"code": "print(1)"})
    assert call.output == "1\n[Files written: x]" and call.image == "data:image/png;base64,AAAA"
    bare = CodeInterpreterTool.history_reader([item], {}).read({**item, "outputs": None}, "x")
    assert bare is not None and "no longer at hand" in bare.output and bare.image is None
    logs = CodeInterpreterTool.history_reader([item], {}).read(item, "x")
    assert logs is not None and logs.output == "1"
    with pytest.raises(GatewayError):
        CodeInterpreterTool.history_reader([], {}).read({"type": "code_interpreter_call"}, "p")

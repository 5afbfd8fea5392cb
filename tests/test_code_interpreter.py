"""code_interpreter run by the gateway (issue 42), end to end with the real sandbox engine:
openai-python streamed and not (every event validated against the SDK's types, OpenAI's order
asserted), state kept across calls and across responses, a Files API file read by pandas, a
plot cited with ``container_file_citation``, ``include`` outputs on and off, a timeout, an
explicit container, ``tool_choice``, background and conversations; the scripted upstream plays
the model (its ``steps`` script: one call a turn with each code in turn, then an answer).

"Done when" (the issue's scenario) is :func:`test_done_when_a_csv_is_analysed_plotted_and_cited`.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response, check_stream, client_for, e2e_settings, sdk_events
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

OUTPUTS = "code_interpreter_call.outputs"
AUTO: Any = [{"type": "code_interpreter", "container": {"type": "auto"}}]
CODE_EVENTS = ["response.output_item.added", "response.code_interpreter_call.in_progress",
               "response.code_interpreter_call_code.delta",
               "response.code_interpreter_call_code.done",
               "response.code_interpreter_call.interpreting",
               "response.code_interpreter_call.completed", "response.output_item.done"]
CSV = b"month,amount\njan,120\nfeb,80\nmar,150\napr,90\n"


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def steps(marker: str, *codes: str, text: str = "Done.", quote: bool = True) -> str:
    """The user message whose model runs each of ``codes`` in turn, then answers ``text``
    (followed by what the runs printed when ``quote``)."""
    calls = [json.dumps({"code": code}) for code in codes]
    return (f"[[script:steps calls={_b64(json.dumps(calls))} text={_b64(text)} "
            f"quote={int(quote)}]] {marker}")


def calls_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in response["output"] if i["type"] == "code_interpreter_call"]


def tool_messages(upstream: ScriptedUpstream, marker: str) -> list[str]:
    """What the model read of its calls in the last turn of the request with ``marker``."""
    body = [b for b in upstream.requests if marker in str(b["messages"])][-1]
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "tool"]


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    where = tmp_path_factory.mktemp("code")
    settings = e2e_settings(upstream, where / "gateway.db", code_interpreter="sandbox",
                            container_dir=str(where / "containers"), code_timeout=60.0,
                            api_keys=("sk-test", "sk-other"))  # two tenants
    with GatewayServer(settings) as server:
        yield server


@pytest.mark.parametrize("stream", [True, False])
def test_state_is_kept_across_calls_and_responses(client: OpenAI, upstream: ScriptedUpstream,
                                                  stream: bool) -> None:
    marker = f"state-{stream}"
    kwargs: Any = {"model": "m", "tools": AUTO, "include": [OUTPUTS],
                   "input": steps(marker, "x = 20\nprint(x)", "x += 22\nprint('x is', x)",
                                  text="Computed.")}
    if stream:
        events = sdk_events(client.responses.create(stream=True, **kwargs))
        check_stream(events)
        first = events[-1]["response"]
        for call in calls_of(first):
            kinds = [e["type"] for e in events if e.get("item_id") == call["id"]
                     or e.get("item", {}).get("id") == call["id"]]
            deltas = kinds.count(CODE_EVENTS[2])
            assert deltas >= 1
            assert kinds == [*CODE_EVENTS[:2], *[CODE_EVENTS[2]] * deltas, *CODE_EVENTS[3:]]
            code = "".join(e["delta"] for e in events if e["type"] == CODE_EVENTS[2]
                           and e["item_id"] == call["id"])
            assert code == call["code"]  # the deltas are code text, not JSON
    else:
        first = check_response(client.responses.create(**kwargs))
    assert [i["type"] for i in first["output"]] == [
        "code_interpreter_call", "code_interpreter_call", "message"]
    one, two = calls_of(first)
    assert one["id"].startswith("ci_") and one["status"] == two["status"] == "completed"
    assert one["container_id"].startswith("cntr_") and two["container_id"] == one["container_id"]
    assert (one["code"], two["code"]) == ("x = 20\nprint(x)", "x += 22\nprint('x is', x)")
    assert one["outputs"] == [{"type": "logs", "logs": "20\n"}] or one["outputs"][-1][
        "logs"].strip() == "20"
    assert two["outputs"][-1]["logs"].strip() == "x is 42"
    assert "x is 42" in first["output"][-1]["content"][0]["text"]
    assert first.get("tool_usage", {}).keys() <= {"web_search", "image_gen"}  # none of ours

    # a later response (previous_response_id): the same container, x still there
    later = check_response(client.responses.create(
        model="m", tools=AUTO, previous_response_id=first["id"],
        input=steps(f"later-{stream}", "print(x * 2)")))
    [again] = calls_of(later)
    assert again["container_id"] == one["container_id"] and again["outputs"] is None
    assert tool_messages(upstream, f"later-{stream}")[-1].strip() == "84"
    # the earlier calls go back to the model as its calls and what they printed
    body = next(b for b in upstream.requests if f"later-{stream}" in str(b["messages"]))
    codes = [json.loads(c["function"]["arguments"])["code"] for m in body["messages"]
             for c in m.get("tool_calls") or ()]
    assert codes == [one["code"], two["code"]]
    assert client.containers.retrieve(one["container_id"]).status == "running"
    # a later request without the tool still reads the calls back (the model's own history)
    plain = check_response(client.responses.create(
        model="m", previous_response_id=later["id"], input=f"[[script:text text=ok]] p{stream}"))
    assert plain["status"] == "completed"
    body = next(b for b in upstream.requests if f"] p{stream}" in str(b["messages"]))
    assert sum(1 for m in body["messages"] if m.get("role") == "tool") == 3


def test_done_when_a_csv_is_analysed_plotted_and_cited(client: OpenAI,
                                                       upstream: ScriptedUpstream) -> None:
    """The issue's scenario: a CSV uploaded through the Files API, analysed with pandas,
    plotted with matplotlib, the plot cited in the answer; the next turn uses a variable."""
    uploaded = client.files.create(file=("sales.csv", CSV), purpose="user_data")
    tools: Any = [{"type": "code_interpreter",
                   "container": {"type": "auto", "file_ids": [uploaded.id]}}]
    analyse = ("import pandas as pd\ndf = pd.read_csv('/mnt/data/sales.csv')\n"
               "total = int(df['amount'].sum())\nprint('total', total)")
    plot = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "df.plot(x='month', y='amount', kind='bar')\n"
            "plt.savefig('/mnt/data/sales.png')\nprint('saved')")
    answer = "Sales total 440. Here is the chart: [sales chart](sandbox:/mnt/data/sales.png)"
    first = check_response(client.responses.create(
        model="m", tools=tools, include=[OUTPUTS],
        input=steps("csv", analyse, plot, text=answer, quote=False)))
    read, drawn = calls_of(first)
    assert read["outputs"][-1] == {"type": "logs", "logs": "total 440\n"} or (
        read["outputs"][-1]["logs"].strip() == "total 440")
    assert drawn["status"] == "completed"
    [image] = [o for o in drawn["outputs"] if o["type"] == "image"]
    assert image["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(image["url"].partition(",")[2])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "/mnt/data/sales.png" in tool_messages(upstream, "csv")[-1]
    part = first["output"][-1]["content"][0]
    assert part["text"] == answer
    # as OpenAI's: the figure shown (left open: saved as figure_1.png) spans nothing, the
    # linked file spans its sandbox: target
    shown, citation = part["annotations"]
    assert (shown["filename"], shown["start_index"], shown["end_index"]) == (
        "figure_1.png", 0, 0)
    start = answer.index("sandbox:")
    assert citation == {"type": "container_file_citation", "container_id": read["container_id"],
                        "file_id": citation["file_id"], "filename": "sales.png",
                        "start_index": start, "end_index": len(answer) - 1}
    assert citation["file_id"].startswith("cfile_")
    # the cited file is the container file, served by the Containers API
    files = {f.path: f for f in client.containers.files.list(read["container_id"])}
    assert files["/mnt/data/sales.png"].id == citation["file_id"]
    assert files["/mnt/data/figure_1.png"].id == shown["file_id"]
    assert files["/mnt/data/sales.csv"].source == "user"
    assert files["/mnt/data/sales.png"].source == "assistant"
    content = client.containers.files.content.retrieve(
        shown["file_id"], container_id=read["container_id"]).read()
    assert base64.b64decode(image["url"].partition(",")[2]) == content

    # turn two: the variable of turn one, and a file given now joins the same container
    extra = client.files.create(file=("extra.csv", b"x\n1\n"), purpose="user_data")
    tools[0]["container"]["file_ids"].append(extra.id)
    second = check_response(client.responses.create(
        model="m", tools=tools, previous_response_id=first["id"],
        input=steps("csv-2", "print(total / len(df), len(pd.read_csv('/mnt/data/extra.csv')))")))
    [mean] = calls_of(second)
    assert mean["container_id"] == read["container_id"]
    assert tool_messages(upstream, "csv-2")[-1].strip() == "110.0 1"
    sources = {f.path: f.source for f in client.containers.files.list(read["container_id"])}
    assert sources["/mnt/data/extra.csv"] == "user" and "/mnt/data/sales.csv" in sources


def test_outputs_only_when_included_the_model_reads_them_anyway(
        client: OpenAI, upstream: ScriptedUpstream) -> None:
    events = sdk_events(client.responses.create(
        model="m", tools=AUTO, stream=True,
        input=steps("no-include", "import sys\nprint('out')\nprint('err', file=sys.stderr)")))
    check_stream(events)
    [added] = [e["item"] for e in events if e["type"] == "response.output_item.added"
               and e["item"]["type"] == "code_interpreter_call"]
    assert added["outputs"] is None and added["code"] == ""
    [call] = calls_of(events[-1]["response"])
    assert call["outputs"] is None
    read = tool_messages(upstream, "no-include")[-1]
    assert "out" in read and "err" in read
    # retrieved later: as stored, still null
    assert calls_of(client.responses.retrieve(events[-1]["response"]["id"]).to_dict())[0][
        "outputs"] is None


def test_an_exception_is_shown_and_the_model_goes_on(client: OpenAI,
                                                     upstream: ScriptedUpstream) -> None:
    response = check_response(client.responses.create(
        model="m", tools=AUTO, include=[OUTPUTS],
        input=steps("raise", "1 / 0", "print('recovered')")))
    failed, fixed = calls_of(response)
    assert failed["status"] == "completed"  # the code's own error: shown, not a failed call
    assert "ZeroDivisionError" in failed["outputs"][-1]["logs"]
    assert fixed["outputs"][-1]["logs"].strip() == "recovered"
    assert "ZeroDivisionError" in tool_messages(upstream, "raise")[0]


def test_an_explicit_container_is_used_and_an_unknown_one_is_openais_404(
        client: OpenAI) -> None:
    made = client.containers.create(name="mine")
    response = check_response(client.responses.create(
        model="m", tools=[{"type": "code_interpreter", "container": made.id}],
        input=steps("explicit", "open('/mnt/data/note.txt', 'w').write('hi')")))
    [call] = calls_of(response)
    assert call["container_id"] == made.id
    paths = [f.path for f in client.containers.files.list(made.id)]
    assert "/mnt/data/note.txt" in paths
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="m", input="hi", tools=[
            {"type": "code_interpreter", "container": "cntr_doesnotexist"}])
    assert caught.value.body["param"] == "tools[0].container"  # type: ignore[index]
    with client_for_key(client, "sk-other") as other, pytest.raises(openai.NotFoundError):
        other.responses.create(model="m", input="hi", tools=[
            {"type": "code_interpreter", "container": made.id}])
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="m", input="hi", tools=[{"type": "code_interpreter"}])
    assert bad.value.body["param"] == "tools[0].container"  # type: ignore[index]


def client_for_key(client: OpenAI, key: str) -> OpenAI:
    return OpenAI(base_url=str(client.base_url), api_key=key, max_retries=0, timeout=30)


def test_tool_choice_forces_the_python_function(client: OpenAI,
                                                upstream: ScriptedUpstream) -> None:
    response = check_response(client.responses.create(
        model="m", tools=AUTO, tool_choice={"type": "code_interpreter"},
        input=steps("choice", "print(1)")))
    assert response["tool_choice"] == {"type": "code_interpreter"}
    first = next(b for b in upstream.requests if "choice" in str(b["messages"]))
    assert first["tool_choice"] == {"type": "function", "function": {"name": "python"}}
    [tool] = first["tools"]
    assert tool["function"]["name"] == "python"
    assert tool["function"]["parameters"]["required"] == ["code"]


def test_background_and_conversations(client: OpenAI, upstream: ScriptedUpstream) -> None:
    started = client.responses.create(
        model="m", tools=AUTO, background=True, include=[OUTPUTS],
        input=steps("background", "y = 7\nprint(y)"))
    deadline = time.monotonic() + 120
    while True:
        done = client.responses.retrieve(started.id)
        if done.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    response = check_response(done)
    assert response["status"] == "completed"
    [call] = calls_of(response)
    assert call["outputs"][-1]["logs"].strip() == "7"

    conversation = client.conversations.create()
    one = check_response(client.responses.create(
        model="m", tools=AUTO, conversation=conversation.id,
        input=steps("conv-1", "z = 5")))
    two = check_response(client.responses.create(
        model="m", tools=AUTO, conversation=conversation.id,
        input=steps("conv-2", "print(z + 1)")))
    assert calls_of(two)[0]["container_id"] == calls_of(one)[0]["container_id"]
    assert tool_messages(upstream, "conv-2")[-1].strip() == "6"


def test_a_timeout_fails_the_call_resets_and_the_response_goes_on(
        upstream: ScriptedUpstream, tmp_path: Path) -> None:
    settings = e2e_settings(upstream, tmp_path / "g.db", code_interpreter="sandbox",
                            container_dir=str(tmp_path / "containers"), code_timeout=5.0)
    with GatewayServer(settings) as server, client_for(server) as client:
        events = sdk_events(client.responses.create(
            model="m", tools=AUTO, stream=True, include=[OUTPUTS],
            input=steps("timeout", "kept = 1\nopen('/mnt/data/k.txt', 'w').write('k')",
                        "while True:\n    pass",
                        "import os\nprint('kept' in globals(), "
                        "os.path.exists('/mnt/data/k.txt'))")))
    check_stream(events)
    response = events[-1]["response"]
    assert response["status"] == "completed"
    first, stuck, after = calls_of(response)
    assert stuck["status"] == "failed"
    kinds = [e["type"] for e in events if e.get("item_id") == stuck["id"]]
    assert "response.code_interpreter_call.completed" not in kinds
    told = tool_messages(upstream, "timeout")
    assert "5-second limit" in told[1] and "reset" in told[1]
    assert after["outputs"][-1]["logs"].strip() == "False True"  # variables gone, files kept
    assert after["container_id"] == first["container_id"]


def test_items_sent_back_stateless_reuse_the_container(client: OpenAI,
                                                      upstream: ScriptedUpstream) -> None:
    """``store: false``, the output given back as input (as the Agents SDK does without
    ``previous_response_id``): the call items are validated, read back to the model, and
    their container is the one the next call runs in."""
    first = check_response(client.responses.create(
        model="m", tools=AUTO, store=False, include=[OUTPUTS],
        input=steps("stateless", "v = 'kept'")))
    [call] = calls_of(first)
    replay = [*first["output"], {"role": "user", "content": steps("stateless-2", "print(v)")}]
    second = check_response(client.responses.create(
        model="m", tools=AUTO, store=False, input=replay))
    [again] = calls_of(second)
    assert again["container_id"] == call["container_id"]
    assert tool_messages(upstream, "stateless-2")[-1].strip() == "kept"
    with pytest.raises(openai.BadRequestError) as caught:  # a call item missing its fields
        client.responses.create(model="m", tools=AUTO, store=False, input=[
            {"type": "code_interpreter_call", "id": call["id"], "code": "x"},
            {"role": "user", "content": "hi"}])
    assert caught.value.body["param"].startswith("input[0].")  # type: ignore[index]

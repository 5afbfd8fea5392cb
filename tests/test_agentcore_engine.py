"""The agentcore engine against the fake AgentCore (tests/helpers/agentcore_server.py) with
its files on S3 in moto: what the fake refuses, sessions carried over, /mnt/data mapped."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from responses_gateway.containers.agentcore import AgentCoreEngine
from responses_gateway.containers.engine import Box, EngineError
from tests.helpers.agentcore_server import Clock, FakeAgentCore
from tests.helpers.moto_server import use_moto

pytestmark = pytest.mark.slow  # a Python process per session

INTERPRETER = "aws.codeinterpreter.v1"
LIMIT = 1 << 20


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> Iterator[FakeAgentCore]:
    """The fake AgentCore; every request the engine sent must have passed the model."""
    with FakeAgentCore(clock=clock) as server:
        yield server
        assert [r for r in server.refused if r[1] == "ValidationException"] == []


@pytest.fixture
def bare_fake() -> Iterator[FakeAgentCore]:
    """The fake AgentCore for tests that send it what it must refuse."""
    with FakeAgentCore() as server:
        yield server


@pytest.fixture
def bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    use_moto(monkeypatch, moto_endpoint)
    name = f"containers-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=name)
    return name


def engine_for(fake: FakeAgentCore, bucket: str, moto_endpoint: str, clock: Clock,
               **kwargs: Any) -> AgentCoreEngine:
    return AgentCoreEngine(interpreter_id=kwargs.pop("interpreter_id", INTERPRETER),
                           region="us-east-1", endpoint_url=fake.url, bucket=bucket,
                           session_seconds=kwargs.pop("session_seconds", 900),
                           s3_endpoint_url=moto_endpoint, clock=clock, **kwargs)


@pytest.fixture
def engine(fake: FakeAgentCore, bucket: str, moto_endpoint: str, clock: Clock
           ) -> AgentCoreEngine:
    return engine_for(fake, bucket, moto_endpoint, clock)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def s3_keys(moto_endpoint: str, bucket: str) -> list[str]:
    listed = boto3.client("s3", endpoint_url=moto_endpoint).list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listed.get("Contents") or ())


# -- the fake refuses what AWS refuses ---------------------------------------------------------

def raw(fake: FakeAgentCore, method: str, path: str, body: Any, headers: dict[str, str]
        ) -> tuple[int, dict[str, str], dict[str, Any]]:
    request = urllib.request.Request(fake.url + path, method=method,
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), {}
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def test_fake_refuses_a_misnamed_member_as_aws_does(bare_fake: FakeAgentCore) -> None:
    fake = bare_fake
    status, headers, _ = raw(fake, "PUT", f"/code-interpreters/{INTERPRETER}/sessions/start",
                             {"sessionTimeoutSeconds": 60}, {})
    assert status == 200
    session = fake.sessions.popitem()[1].id
    for body in ({"name": "executeCommand", "arguments": {"cmd": "ls"}},   # unknown member
                 {"tool": "executeCode", "arguments": {"code": "1"}},     # name missing
                 {"name": "runPython", "arguments": {"code": "1"}},       # not in the enum
                 {"name": "executeCode", "arguments": {"code": 1}}):      # wrong type
        status, headers, error = raw(
            fake, "POST", f"/code-interpreters/{INTERPRETER}/tools/invoke", body,
            {"x-amzn-code-interpreter-session-id": session})
        assert status == 400, body
        assert headers["x-amzn-ErrorType"] == "ValidationException"
        assert set(error) == {"message", "reason", "fieldList"}
        assert error["reason"] in ("CannotParse", "FieldValidationFailed")
    assert fake.calls("InvokeCodeInterpreter") == []


def test_fake_errors_parse_as_botocore_exceptions(bare_fake: FakeAgentCore,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = bare_fake
    from tests.helpers.eventstream_server import use_dummy_aws

    use_dummy_aws(monkeypatch)
    client = boto3.client("bedrock-agentcore", region_name="us-east-1", endpoint_url=fake.url,
                          config=Config(parameter_validation=False))
    with pytest.raises(client.exceptions.ValidationException) as caught:
        client.start_code_interpreter_session(codeInterpreterIdentifier=INTERPRETER,
                                              sessionTimeoutSeconds=28801)  # over the max
    assert caught.value.response["reason"] == "FieldValidationFailed"
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.start_code_interpreter_session(codeInterpreterIdentifier="nope")
    started = client.start_code_interpreter_session(codeInterpreterIdentifier=INTERPRETER)
    with pytest.raises(client.exceptions.ValidationException):  # a session id's pattern
        client.get_code_interpreter_session(codeInterpreterIdentifier=INTERPRETER,
                                            sessionId="not-a-session-id!")
    got = client.get_code_interpreter_session(codeInterpreterIdentifier=INTERPRETER,
                                              sessionId=started["sessionId"])
    assert got["status"] == "READY" and got["sessionTimeoutSeconds"] == 900


# -- the engine ----------------------------------------------------------------------------------

def test_code_keeps_state_and_every_request_passes_the_model(engine: AgentCoreEngine,
                                                             fake: FakeAgentCore) -> None:
    box = Box("cntr_state", 1024)

    async def scenario() -> tuple[Any, Any, Any]:
        state = await engine.start(box)
        first = await engine.run_code(Box(box.id, 1024, state), "x = 41", timeout=30,
                                      max_output=LIMIT)
        second = await engine.run_code(Box(box.id, 1024, state), "print(x + 1)", timeout=30,
                                       max_output=LIMIT)
        failed = await engine.run_code(Box(box.id, 1024, state), "1/0", timeout=30,
                                       max_output=LIMIT)
        return first, second, failed

    first, second, failed = run(scenario())
    assert first.error is None and not first.reset
    assert second.stdout == "42\n"
    assert failed.error is not None and failed.error.startswith("Traceback")
    assert "ZeroDivisionError" in failed.error
    assert fake.refused == []
    calls = fake.calls("InvokeCodeInterpreter", "executeCode")
    assert all(c["arguments"]["clearContext"] is False for c in calls)
    assert [c["sessionTimeoutSeconds"] for c in fake.calls("StartCodeInterpreterSession")] == [
        900]


def test_mnt_data_is_mapped_for_code_commands_and_paths(engine: AgentCoreEngine,
                                                        fake: FakeAgentCore) -> None:
    box = Box("cntr_paths", 1024)

    async def scenario() -> tuple[Any, ...]:
        await engine.write_file(box, "/mnt/data/in.csv", b"a,b\n1,2\n")
        ran = await engine.run_code(box, (
            "import os\n"
            "print(open('/mnt/data/in.csv').read().splitlines()[1])\n"
            "os.makedirs('/mnt/data/out', exist_ok=True)\n"
            "open('/mnt/data/out/result.txt', 'w').write('done')\n"
            "print(os.path.abspath('/mnt/data/out/result.txt'))\n"
            "open('/mnt/data/missing.txt')\n"), timeout=30, max_output=LIMIT)
        commands = await engine.run_commands(box, ["pwd", "cat out/result.txt", "exit 3"],
                                             timeout=30, max_output=LIMIT)
        listed = await engine.list_files(box)
        read = await engine.read_file(box, "/mnt/data/out/result.txt", limit=LIMIT)
        return ran, commands, listed, read

    ran, commands, listed, read = run(scenario())
    assert ran.stdout == "1,2\n/mnt/data/out/result.txt\n"
    assert ran.files == ["/mnt/data/out/result.txt"]  # in.csv was written, not made by code
    assert "'/mnt/data/missing.txt'" in ran.error and "FileNotFoundError" in ran.error
    assert [c.stdout for c in commands[:2]] == ["/mnt/data\n", "done"]
    assert [c.exit_code for c in commands] == [0, 0, 3]
    assert [(f.path, f.bytes) for f in listed] == [("/mnt/data/in.csv", 8),
                                                   ("/mnt/data/out/result.txt", 4)]
    assert read == b"done"
    # what AgentCore saw: the working folder, never /mnt/data (it cannot be made there)
    (session,) = fake.sessions.values()
    code = fake.calls("InvokeCodeInterpreter", "executeCode")[-2]["arguments"]["code"]
    assert "/mnt/data/in.csv" not in code.replace(str(session.workdir), "")
    assert (session.workdir / "mnt" / "data" / "in.csv").read_bytes() == b"a,b\n1,2\n"
    written = fake.calls("InvokeCodeInterpreter", "writeFiles")[-1]["arguments"]["content"]
    assert [c["path"] for c in written] == ["mnt/data/in.csv"]


def test_session_ended_by_agentcore_is_carried_over_with_files(
        fake: FakeAgentCore, clock: Clock, bucket: str, moto_endpoint: str) -> None:
    # the engine's own clock stays put: it believes the session lives, AgentCore says not
    engine = engine_for(fake, bucket, moto_endpoint, Clock())
    box = Box("cntr_carry", 1024)

    async def before() -> Any:
        state = await engine.start(box)
        await engine.write_file(box, "/mnt/data/upload.bin", b"\x00\xffbinary")
        await engine.run_code(box, "v = 7\nopen('/mnt/data/made.txt', 'w').write('kept')",
                              timeout=30, max_output=LIMIT)
        return state

    state = run(before())
    assert s3_keys(moto_endpoint, bucket) == [f"containers/{box.id}.session",
                                              f"containers/{box.id}/made.txt",
                                              f"containers/{box.id}/upload.bin"]
    (old,) = fake.live()
    clock.advance(901)  # AgentCore ends the session

    async def after() -> Any:
        return await engine.run_code(Box(box.id, 1024, state), (
            "print(open('/mnt/data/made.txt').read(), "
            "open('/mnt/data/upload.bin', 'rb').read())\n"
            "print('v' in globals())"), timeout=30, max_output=LIMIT)

    ran = run(after())
    assert ran.reset is True  # variables are gone: a new session
    assert ran.stdout == "kept b'\\x00\\xffbinary'\nFalse\n"
    assert ran.error is None
    (new,) = fake.live()
    assert new.id != old.id
    assert json.loads(run(engine.start(Box(box.id, 1024, state))))["session"] == new.id


def test_session_past_its_time_is_replaced_before_use(engine: AgentCoreEngine,
                                                      fake: FakeAgentCore,
                                                      clock: Clock) -> None:
    box = Box("cntr_due", 1024)
    state = run(engine.start(box))
    clock.advance(900 - 10)  # 10 s left: less than the call's timeout

    ran = run(engine.run_code(Box(box.id, 1024, state), "print(1)", timeout=30,
                              max_output=LIMIT))
    assert ran.reset is True and ran.stdout == "1\n"
    assert len(fake.calls("StartCodeInterpreterSession")) == 2
    assert len(fake.calls("StopCodeInterpreterSession")) == 1  # the old one, not left running


def test_a_new_engine_carries_over_a_session_agentcore_ended(
        fake: FakeAgentCore, bucket: str, moto_endpoint: str, clock: Clock) -> None:
    box = Box("cntr_restart", 1024)
    first = engine_for(fake, bucket, moto_endpoint, Clock())
    state = run(first.start(box))
    run(first.run_code(Box(box.id, 1024, state), "open('/mnt/data/f.txt','w').write('f')",
                       timeout=30, max_output=LIMIT))
    clock.advance(901)
    second = engine_for(fake, bucket, moto_endpoint, Clock())  # after a restart
    ran = run(second.run_code(Box(box.id, 1024, state), "print(open('/mnt/data/f.txt').read())",
                              timeout=30, max_output=LIMIT))
    assert ran.reset and ran.stdout == "f\n"
    assert [g["sessionId"] for g in fake.calls("GetCodeInterpreterSession")] == [
        json.loads(state)["session"]]  # asked, TERMINATED, replaced


def test_another_engine_follows_a_carried_over_session(
        fake: FakeAgentCore, bucket: str, moto_endpoint: str, clock: Clock) -> None:
    """Lambda instance A carried the container to a new session; B, holding the service's
    older state, goes to that session (the pointer in S3) instead of starting one more."""
    box = Box("cntr_follow", 1024)
    first = engine_for(fake, bucket, moto_endpoint, Clock())
    state = run(first.start(box))
    clock.advance(901)
    run(first.run_code(Box(box.id, 1024, state), "w = 3", timeout=30, max_output=LIMIT))
    second = engine_for(fake, bucket, moto_endpoint, Clock())
    ran = run(second.run_code(Box(box.id, 1024, state), "print(w)", timeout=30,
                              max_output=LIMIT))
    assert (ran.stdout, ran.error, ran.reset) == ("3\n", None, False)
    assert len(fake.calls("StartCodeInterpreterSession")) == 2
    run(second.stop(Box(box.id, 1024, state)))
    assert fake.live() == [] and s3_keys(moto_endpoint, bucket) == []


def test_open_figures_are_saved_as_png_files(engine: AgentCoreEngine) -> None:
    pytest.importorskip("matplotlib")
    ran = run(engine.run_code(Box("cntr_plot", 1024), (
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3])"), timeout=60, max_output=LIMIT))
    assert ran.error is None
    (figure,) = ran.files
    assert figure.startswith("/mnt/data/figure_") and figure.endswith(".png")
    data = run(engine.read_file(Box("cntr_plot", 1024), figure, limit=LIMIT))
    assert data.startswith(b"\x89PNG")


def test_a_new_engine_adopts_a_live_session_from_the_state(
        fake: FakeAgentCore, bucket: str, moto_endpoint: str, clock: Clock) -> None:
    box = Box("cntr_adopt", 1024)
    first = engine_for(fake, bucket, moto_endpoint, clock)
    state = run(first.start(box))
    run(first.run_code(Box(box.id, 1024, state), "z = 5", timeout=30, max_output=LIMIT))
    second = engine_for(fake, bucket, moto_endpoint, clock)  # another Lambda instance
    ran = run(second.run_code(Box(box.id, 1024, state), "print(z)", timeout=30,
                              max_output=LIMIT))
    assert ran.stdout == "5\n" and not ran.reset
    assert len(fake.calls("GetCodeInterpreterSession")) == 1


def test_files_survive_stop_nowhere_and_stop_cleans_s3(engine: AgentCoreEngine,
                                                       fake: FakeAgentCore, bucket: str,
                                                       moto_endpoint: str) -> None:
    box = Box("cntr_stop", 1024)

    async def scenario() -> None:
        await engine.write_file(box, "/mnt/data/a.txt", b"a")
        await engine.run_code(box, "open('/mnt/data/b.txt','w').write('b')", timeout=30,
                              max_output=LIMIT)
        await engine.remove_file(box, "/mnt/data/a.txt")
        assert [f.path for f in await engine.list_files(box)] == ["/mnt/data/b.txt"]
        await engine.stop(box)
        await engine.stop(box)  # idempotent

    run(scenario())
    assert fake.live() == []
    assert s3_keys(moto_endpoint, bucket) == []


def test_read_file_falls_back_to_s3_when_the_session_is_gone(
        engine: AgentCoreEngine, fake: FakeAgentCore, clock: Clock) -> None:
    box = Box("cntr_read", 1024)
    run(engine.run_code(box, "open('/mnt/data/r.txt','w').write('from s3')", timeout=30,
                        max_output=LIMIT))
    clock.advance(1000)
    assert run(engine.read_file(box, "/mnt/data/r.txt", limit=LIMIT)) == b"from s3"
    with pytest.raises(FileNotFoundError):
        run(engine.read_file(box, "/mnt/data/none.txt", limit=LIMIT))
    with pytest.raises(EngineError):
        run(engine.read_file(box, "/mnt/data/r.txt", limit=3))
    with pytest.raises(EngineError):
        run(engine.read_file(box, "/etc/passwd", limit=LIMIT))


def test_output_is_cut_at_max_output(engine: AgentCoreEngine) -> None:
    ran = run(engine.run_code(Box("cntr_out", 1024), "print('x' * 5000)", timeout=30,
                              max_output=1000))
    assert len(ran.stdout.encode()) == 1000 and ran.dropped == 4001


def test_a_hang_times_out_and_resets_the_container(engine: AgentCoreEngine,
                                                   fake: FakeAgentCore) -> None:
    box = Box("cntr_hang", 1024)

    async def scenario() -> tuple[Any, Any]:
        await engine.run_code(box, "keep = 1\nopen('/mnt/data/k.txt','w').write('k')",
                              timeout=30, max_output=LIMIT)
        hung = await engine.run_code(box, "import time\ntime.sleep(60)", timeout=1,
                                     max_output=LIMIT)
        after = await engine.run_code(box, "print('keep' in globals(), "
                                           "open('/mnt/data/k.txt').read())",
                                      timeout=30, max_output=LIMIT)
        return hung, after

    hung, after = run(scenario())
    assert hung.timed_out and hung.reset
    assert after.stdout == "False k\n" and not after.reset
    assert len(fake.live()) == 1


def test_a_bad_interpreter_id_is_an_engine_error_with_a_safe_message(
        fake: FakeAgentCore, bucket: str, moto_endpoint: str, clock: Clock) -> None:
    engine = engine_for(fake, bucket, moto_endpoint, clock,
                        interpreter_id="arn-of-nothing-123456789012")
    with pytest.raises(EngineError) as caught:
        run(engine.run_code(Box("cntr_bad", 1024), "print(1)", timeout=30, max_output=LIMIT))
    message = str(caught.value)
    assert "GATEWAY_AGENTCORE_INTERPRETER_ID" in message and "not found" in message
    assert "123456789012" not in message and "arn" not in message.lower()


def test_unreachable_agentcore_is_an_engine_error(bucket: str, moto_endpoint: str,
                                                  clock: Clock) -> None:
    engine = AgentCoreEngine(interpreter_id=INTERPRETER, region="us-east-1",
                             endpoint_url="http://127.0.0.1:9", bucket=bucket,
                             s3_endpoint_url=moto_endpoint, clock=clock)
    with pytest.raises(EngineError, match="could not be reached"):
        run(engine.start(Box("cntr_down", 1024)))


def test_listing_after_an_execution_costs_no_call(engine: AgentCoreEngine,
                                                  fake: FakeAgentCore) -> None:
    box = Box("cntr_list", 1024)

    async def scenario() -> list[Any]:
        await engine.run_code(box, "open('/mnt/data/l.txt', 'w').write('l')", timeout=30,
                              max_output=LIMIT)
        calls = len(fake.calls("InvokeCodeInterpreter"))
        listed = await engine.list_files(box)
        assert len(fake.calls("InvokeCodeInterpreter")) == calls  # the scan it just made
        await engine.write_file(box, "/mnt/data/w.txt", b"w")
        return [listed, await engine.list_files(box)]  # written since: looked at again

    first, second = run(scenario())
    assert [f.path for f in first] == ["/mnt/data/l.txt"]
    assert [f.path for f in second] == ["/mnt/data/l.txt", "/mnt/data/w.txt"]


def test_the_s3_copy_of_one_execution_is_bounded(fake: FakeAgentCore, bucket: str,
                                                 moto_endpoint: str, clock: Clock) -> None:
    engine = engine_for(fake, bucket, moto_endpoint, clock, sync_max_files=2,
                        sync_max_bytes=10)
    ran = run(engine.run_code(Box("cntr_bound", 1024), (
        "for name, size in (('a', 4), ('b', 20), ('c', 4), ('d', 1)):\n"
        "    open(f'/mnt/data/{name}', 'w').write('x' * size)"), timeout=30, max_output=LIMIT))
    assert ran.files == ["/mnt/data/a", "/mnt/data/b", "/mnt/data/c", "/mnt/data/d"]
    # a (4 bytes) and c (4): b is past the bytes left, d past the count
    assert s3_keys(moto_endpoint, bucket) == ["containers/cntr_bound.session",
                                              "containers/cntr_bound/a",
                                              "containers/cntr_bound/c"]


def test_copies_of_a_live_container_are_written_again_before_the_lifecycle_drops_them(
        fake: FakeAgentCore, clock: Clock, bucket: str, moto_endpoint: str) -> None:
    """The files bucket drops ``containers/`` objects COPY_DAYS after they were written
    (template.yaml), so an abandoned container's copy goes; a live one's copies are written
    again when a new session restores them, once they are older than ``refresh_seconds``."""
    for refresh, rewritten in ((0.0, True), (3 * 86400.0, False)):
        engine = engine_for(fake, bucket, moto_endpoint, Clock(), refresh_seconds=refresh)
        box = Box(f"cntr_refresh{int(refresh)}", 1024)
        run(engine.write_file(box, "/mnt/data/kept.txt", b"kept"))
        put: list[str] = []
        real = engine._put_object

        def recording(key: str, data: bytes, real: Any = real, put: list[str] = put) -> None:
            put.append(key)
            real(key, data)

        engine._put_object = recording  # type: ignore[method-assign]
        clock.advance(901)  # AgentCore ends the session: the next call restores
        ran = run(engine.run_code(box, "print(open('/mnt/data/kept.txt').read())",
                                  timeout=30, max_output=LIMIT))
        assert ran.stdout == "kept\n"
        assert (f"containers/{box.id}/kept.txt" in put) is rewritten

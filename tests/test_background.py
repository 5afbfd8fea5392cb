"""Background responses, cancel and stream resume, on the embedded SQLite store and on DynamoDB
(moto in server mode over HTTP): every test runs against both.

Gateways run under uvicorn (GatewayServer) in front of a ScriptedUpstream and are driven with the
official ``openai`` client; raw SSE is read with httpx where the exact bytes matter. A second
gateway instance on the same SQLite file / DynamoDB table stands for "another invocation".
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
import pytest
from openai import OpenAI

from responses_gateway.config import Settings
from responses_gateway.responses import background
from responses_gateway.store.base import CancelledError, Store
from responses_gateway.store.dynamodb import DynamoDBStore
from responses_gateway.store.sqlite import SQLiteStore
from tests.helpers.e2e import check_response, check_stream, sdk_events, split_frames
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.helpers.responses_validation import (
    TERMINAL_TYPES,
    events_from_sse,
    failed_code,
    reconstruct,
)
from tests.helpers.scripted_upstream import ScriptedUpstream, StreamRecord

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

MODEL = "scripted-model"
RUNNING = ("queued", "in_progress")
T = TypeVar("T")


def sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run one store call from a (synchronous) test."""
    return asyncio.run(coro)


def tag() -> str:
    return uuid.uuid4().hex[:10]


# -- fixtures -------------------------------------------------------------------------------------


@dataclass
class Env:
    """One store (a SQLite file or a DynamoDB table) and the gateways sharing it."""

    kind: str
    store_setting: str
    upstream: ScriptedUpstream
    servers: list[GatewayServer] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "upstream_url": self.upstream.base_url,
            "store": self.store_setting,
            "max_retries": 0,
            "keepalive_seconds": 0.5,
            "read_timeout": 20.0,
        }
        values.update(overrides)
        return Settings(**values)

    def server(self, **overrides: Any) -> GatewayServer:
        server = GatewayServer(self.settings(**overrides)).__enter__()
        self.servers.append(server)
        return server

    def store(self) -> Store:
        """The test's own handle on the same database (not any gateway's)."""
        kind, _, target = self.store_setting.partition(":")
        store: Store = SQLiteStore(target) if kind == "sqlite" else DynamoDBStore(target)
        self.stores.append(store)
        return store

    def stream_of(self, tag: str) -> StreamRecord:
        found = [s for s in self.upstream.streams if tag in s.script]
        assert len(found) == 1, f"expected one upstream stream tagged {tag}, got {len(found)}"
        return found[0]


@pytest.fixture(params=["sqlite", "dynamodb"])
def env(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    upstream: ScriptedUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Env]:
    if request.param == "sqlite":
        setting = f"sqlite:{tmp_path / 'gateway.db'}"
    else:
        use_moto(monkeypatch, request.getfixturevalue("moto_endpoint"))
        setting = f"dynamodb:{create_dynamodb_table()}"
    env = Env(request.param, setting, upstream)
    try:
        yield env
    finally:
        for server in reversed(env.servers):
            server.__exit__(None, None, None)
        for store in env.stores:
            sync(store.aclose())


def client(server: GatewayServer) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=30)


def create(c: OpenAI, script: str, **kwargs: Any) -> Any:
    kwargs.setdefault("background", True)
    return c.responses.create(model=MODEL, input=f"[[script:{script}]]", **kwargs)


def wait_until(predicate: Callable[[], T], timeout: float = 15, every: float = 0.03) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting ({timeout}s)")
        time.sleep(every)


def wait_terminal(c: OpenAI, response_id: str, timeout: float = 15, every: float = 0.03) -> Any:
    def done() -> Any:
        response = c.responses.retrieve(response_id)
        return response if response.status not in RUNNING else None

    return wait_until(done, timeout, every)


def read_sse(url: str, *, stop_after: int | None = None, timeout: float = 30) -> list[dict]:
    """GET an SSE stream with httpx; the event dicts (stop early after ``stop_after``)."""
    events: list[dict[str, Any]] = []
    with httpx.Client(timeout=timeout) as http, http.stream("GET", url) as response:
        assert response.status_code == 200, response.read()
        pending = b""
        for piece in response.iter_raw():
            frames, pending = split_frames(pending + piece)
            events += events_from_sse([f for f in frames if not f.startswith(b":")])
            if stop_after is not None and len(events) >= stop_after:
                break
    return events


def resume_url(server: GatewayServer, response_id: str, after: int | None) -> str:
    url = f"{server.base_url}/responses/{response_id}?stream=true"
    return url if after is None else f"{url}&starting_after={after}"


class FakeLambdaClient:
    """Stands in for boto3's Lambda client: records each asynchronous invoke."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("lambda is down")
        self.calls.append(kwargs)
        return {"StatusCode": 202}

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(call["Payload"]) for call in self.calls]


@pytest.fixture
def lambda_client(monkeypatch: pytest.MonkeyPatch) -> FakeLambdaClient:
    from responses_gateway.platform import worker as invoke

    fake = FakeLambdaClient()
    monkeypatch.setattr(invoke, "_lambda_client", lambda: fake)
    return fake


# -- create and poll ------------------------------------------------------------------------------


def test_background_returns_at_once_and_polls_to_completion(env: Env) -> None:
    server = env.server(lease_seconds=1.5)  # renewals and snapshots every 0.5 s
    c = client(server)
    text = " ".join(f"word{i}" for i in range(32))
    create(c, "text")  # warm up (first-request imports), so the timing below is the create's
    start = time.monotonic()
    # The upstream waits 2.5 s before its first chunk; the create, one store write (moto's
    # DynamoDB on a loaded machine: it can take a few hundred ms), answers well before that.
    created = create(c, f'slow n=16 delay=0.1 first_delay=2.5 text="{text}"')
    assert time.monotonic() - start < 1.5, "background=true must not wait for the upstream"
    assert created.status in RUNNING
    assert created.background is True and created.output == []
    check_response(created)

    seen: list[tuple[str, int]] = []
    while True:
        response = c.responses.retrieve(created.id)
        seen.append((response.status, len(response.output_text)))
        if response.status not in RUNNING:
            break
        time.sleep(0.05)
    final = check_response(response)
    assert response.status == "completed" and response.output_text == text
    assert final["id"] == created.id and final["background"] is True

    statuses = [s for s, _ in seen]
    order = {"queued": 0, "in_progress": 1, "completed": 2}
    assert statuses == sorted(statuses, key=order.__getitem__), statuses
    assert "in_progress" in statuses
    lengths = [n for _, n in seen]
    assert lengths == sorted(lengths), "the output only grows"
    partial = [n for s, n in seen if s == "in_progress" and 0 < n < len(text)]
    assert partial, f"no poll saw the output growing: {seen}"
    # The record is what another invocation sees, not just this process's memory.
    stored = sync(env.store().get(created.id, "default"))
    assert stored is not None and stored.status == "completed"
    assert stored.response["output"] == final["output"]


def test_background_upstream_failure_and_sealed_reasoning(env: Env) -> None:
    server = env.server()
    c = client(server)
    refused = wait_terminal(c, create(c, "error status=500").id)
    assert refused.status == "failed" and refused.error is not None
    broken = wait_terminal(c, create(c, "error_event after=2").id)
    assert broken.status == "failed" and len(broken.output_text) > 0
    events = read_sse(resume_url(server, broken.id, None))
    check_stream(events)
    assert events[-1]["type"] == "response.failed"
    # Reasoning signatures a later turn sends back upstream are kept, as in the foreground.
    fixture = "fixture:openrouter-claude-sonnet45-reasoning-details-signature.sse"
    reasoned = wait_terminal(c, create(c, fixture).id)
    assert reasoned.status == "completed"
    stored = sync(env.store().get(reasoned.id, "default"))
    assert stored is not None and stored.request["sealed_reasoning"]
    assert set(stored.request["sealed_reasoning"]) == {
        item.id for item in reasoned.output if item.type == "reasoning"}


def test_store_failure_ends_failed(env: Env) -> None:
    """A flush that finally fails ends the response failed (not stuck in_progress) and
    closes the upstream."""
    from responses_gateway.store.base import StoreUnavailable

    server = env.server()
    c = client(server)
    store = server.gateway.store
    append = store.append_events
    calls = [0]

    async def flaky(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise StoreUnavailable("DynamoDB TransactWriteItems failed: throttled (test)")
        await append(*args, **kwargs)

    store.append_events = flaky
    t = tag()
    failed = wait_terminal(c, create(c, f"slow n=40 delay=0.05 tag={t}").id)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "server_error" and "store_unavailable" in failed.error.message
    assert "throttled" not in failed.error.message  # the store's detail stays in the log
    stream = env.stream_of(t)
    wait_until(lambda: stream.closed_at is not None, timeout=10)
    assert not stream.completed


def test_background_requires_store(env: Env) -> None:
    c = client(env.server())
    with pytest.raises(openai.BadRequestError) as caught:
        create(c, "text", store=False)
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == "background"  # type: ignore[index]


# -- cancel ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["same", "other"])
def test_cancel_mid_stream(env: Env, via: str) -> None:
    """Cancelled through the instance running it (the task is stopped at once) or through
    another one (the worker learns it from its next conditional flush)."""
    runner = env.server()
    canceller = runner if via == "same" else env.server()
    c, cc = client(runner), client(canceller)
    t = tag()
    created = create(c, f"slow n=80 delay=0.05 tag={t}")
    wait_until(lambda: env.upstream.streams and any(
        t in s.script and s.items_sent >= 5 for s in env.upstream.streams))
    wait_until(lambda: c.responses.retrieve(created.id).status == "in_progress")
    # Followers on both instances, live while the cancel happens (issue 16, item 11).
    followed: dict[str, list[dict[str, Any]]] = {}
    followers = [
        threading.Thread(target=lambda s=s, k=k: followed.__setitem__(
            k, read_sse(resume_url(s, created.id, None), timeout=20)))
        for k, s in (("runner", runner), ("canceller", canceller))
    ]
    for follower in followers:
        follower.start()
    time.sleep(0.3)

    cancelled_at = time.monotonic()
    cancelled = cc.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id
    check_response(cancelled)
    for follower in followers:
        follower.join(timeout=20)
    for events in followed.values():  # each got a terminal event carrying the cancelled object
        check_stream(events)
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["status"] == "cancelled"
        assert events[-1]["response"]["error"] is None
    # The cancelled object holds everything logged before the cancel, each item's status true.
    logged = reconstruct(read_sse(resume_url(canceller, created.id, None)))
    text = "".join(p.text for i in cancelled.output for p in i.content)  # type: ignore[union-attr]
    assert text and text == logged.text
    assert all(item.status != "in_progress" for item in cancelled.output)  # type: ignore[union-attr]

    stream = env.stream_of(t)
    wait_until(lambda: stream.closed_at is not None, timeout=5)
    assert stream.closed_at is not None
    assert stream.closed_at - cancelled_at < (0.75 if via == "same" else 1.5)
    assert not stream.completed and stream.items_sent < 80

    deadline = time.monotonic() + 1.5  # stays cancelled, on every instance
    while time.monotonic() < deadline:
        for cl in (c, cc):
            assert cl.responses.retrieve(created.id).status == "cancelled"
        time.sleep(0.1)
    again = cc.responses.cancel(created.id)
    assert again.to_dict() == cc.responses.retrieve(created.id).to_dict()
    assert again.status == "cancelled"

    store = env.store()
    assert sync(store.get(created.id, "default")).status == "cancelled"  # type: ignore[union-attr]
    assert not [e for e in sync(store.read_events(created.id)) if e["type"] in TERMINAL_TYPES]
    # A follower of a cancelled response gets what was stored, then a terminal event.
    replay = read_sse(resume_url(canceller, created.id, None))
    assert replay and replay[0]["type"] == "response.created"
    check_stream(replay)
    assert [e["type"] for e in replay if e["type"] in TERMINAL_TYPES] == ["response.failed"]
    assert replay[-1]["response"] == cc.responses.retrieve(created.id).to_dict()


def test_cancel_errors(env: Env) -> None:
    c = client(env.server())
    foreground = c.responses.create(model=MODEL, input="[[script:text]]", store=True)
    assert foreground.status == "completed"
    with pytest.raises(openai.BadRequestError) as caught:
        c.responses.cancel(foreground.id)
    assert caught.value.status_code == 400
    assert "background" in caught.value.message
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel("resp_" + "0" * 48)

    done = create(c, "text n=2")
    finished = wait_terminal(c, done.id)
    assert finished.status == "completed"
    assert c.responses.cancel(done.id).to_dict() == finished.to_dict()  # returned unchanged


def test_other_tenants_cannot_see_or_cancel(env: Env) -> None:
    server = env.server(api_keys=("key-a", "key-b"))
    ca = OpenAI(base_url=server.base_url, api_key="key-a", max_retries=0)
    cb = OpenAI(base_url=server.base_url, api_key="key-b", max_retries=0)
    created = create(ca, "slow n=6 delay=0.05")
    with pytest.raises(openai.NotFoundError):
        cb.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        cb.responses.cancel(created.id)
    resumed = httpx.get(resume_url(server, created.id, 0),
                        headers={"authorization": "Bearer key-b"}, timeout=10)
    assert resumed.status_code == 404
    assert wait_terminal(ca, created.id).status == "completed"  # untouched by the attempts


# -- streaming and resume -------------------------------------------------------------------------


def test_stream_live_and_resume_from_any_point_on_any_instance(env: Env) -> None:
    a, b = env.server(), env.server()  # b never runs the response: it reads the store only
    ca = client(a)
    t = tag()
    original: list[dict[str, Any]] = []
    started = threading.Event()
    ids: list[str] = []

    def consume() -> None:
        with ca.responses.create(
            model=MODEL, input=f"[[script:slow n=24 delay=0.05 tag={t}]]",
            background=True, stream=True,
        ) as stream:
            for event in stream:
                original.append(event.to_dict(mode="json"))
                if len(original) == 1:
                    ids.append(original[0]["response"]["id"])
                    started.set()

    thread = threading.Thread(target=consume)
    thread.start()
    assert started.wait(10)
    rid = ids[0]
    # Live followers, started while it runs: on the other instance (store) and on this one.
    live: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    points: list[tuple[GatewayServer, str, int | None]] = [
        (b, "b", None), (b, "b", -1), (b, "b", 0), (b, "b", 5), (a, "a", 3),
    ]

    def follow(server: GatewayServer, name: str, after: int | None) -> None:
        live[(name, after)] = read_sse(resume_url(server, rid, after))

    with ThreadPoolExecutor(len(points)) as pool:
        list(pool.map(lambda p: follow(*p), points))
    thread.join(20)
    assert not thread.is_alive()

    check_stream(original)
    assert original[1]["type"] == "response.queued"
    assert original[-1]["type"] == "response.completed"
    # The upstream's thread records its end just after its last write: the gateway, and
    # through it this client, may see the terminal event first.
    stream = env.stream_of(t)
    wait_until(lambda: stream.closed_at is not None, timeout=10)
    assert stream.completed
    for (name, after), events in live.items():
        n = -1 if after is None else after
        assert original[: n + 1] + events == original, f"live resume from {name} after {after}"
    # After the end, from a fresh instance: the middle, the last event, and past the start.
    c_ = env.server()
    last = original[-1]["sequence_number"]
    for after in (None, 0, last // 2, last - 1, last):
        n = -1 if after is None else after
        events = read_sse(resume_url(c_, rid, after))
        assert original[: n + 1] + events == original, f"replay after {after}"
    # The official client reads the resumed stream too.
    resumed = sdk_events(client(c_).responses.retrieve(rid, stream=True, starting_after=2))
    assert resumed == original[3:]
    # The stored log is exactly the stream.
    assert sync(env.store().read_events(rid)) == original


def test_stream_client_disconnect_leaves_the_work_running(env: Env) -> None:
    server = env.server()
    c = client(server)
    t = tag()
    body = {"model": MODEL, "input": f"[[script:slow n=15 delay=0.05 tag={t}]]",
            "background": True, "stream": True}
    events: list[dict[str, Any]] = []
    with httpx.Client(timeout=30) as http, http.stream(
        "POST", f"{server.base_url}/responses", json=body
    ) as response:
        pending = b""
        for piece in response.iter_raw():
            frames, pending = split_frames(pending + piece)
            events += events_from_sse([f for f in frames if not f.startswith(b":")])
            if any(e["type"] == "response.output_text.delta" for e in events):
                break  # the client goes away mid-stream
    rid = events[0]["response"]["id"]
    final = wait_terminal(c, rid)
    assert final.status == "completed"
    stream = env.stream_of(t)
    wait_until(lambda: stream.closed_at is not None, timeout=10)  # recorded after its end
    assert stream.completed and not stream.client_disconnected
    full = read_sse(resume_url(server, rid, None))
    check_stream(full)
    assert full[: len(events)] == events


# -- lease, crash, time limit ---------------------------------------------------------------------


def test_worker_crash_is_failed_after_lease_expiry(
    env: Env, lambda_client: FakeLambdaClient
) -> None:
    """A worker that claimed the response, wrote some events and died (nothing more written)."""
    server = env.server(worker_function="gateway-worker")  # nobody runs what it queues
    c = client(server)
    created = create(c, "text")
    store = env.store()
    record = sync(store.get(created.id, "default"))
    assert record is not None and record.status == "queued"
    claimed = dict(record.response, status="in_progress")
    # 3 s: the lease must outlast the two store calls and the retrieve below (DynamoDB under
    # moto on a loaded machine), or the retrieve rightly ends it worker_lost already.
    assert sync(store.update_response(
        created.id, claimed, expect_status={"queued"}, lease_until=time.time() + 3))
    events = [
        {"type": "response.created", "response": record.response, "sequence_number": 0},
        {"type": "response.in_progress", "response": claimed, "sequence_number": 1},
    ]
    sync(store.append_events(created.id, events))
    assert c.responses.retrieve(created.id).status == "in_progress"  # the lease still holds

    def ended() -> Any:  # a retrieve past the lease ends it
        response = c.responses.retrieve(created.id)
        return response if response.status != "in_progress" else None

    failed = wait_until(ended, timeout=20, every=0.1)
    check_response(failed)
    assert failed.status == "failed"
    assert failed.error is not None and failed_code(failed.error) == "worker_lost"
    assert "worker" in failed.error.message and "stopped" in failed.error.message
    stored = sync(store.get(created.id, "default"))
    assert stored is not None and stored.status == "failed"  # stored, not just reported
    assert failed_code(stored.response["error"]) == "worker_lost"
    time.sleep(0.2)
    assert c.responses.retrieve(created.id).status == "failed"
    # A follower gets the stored events, then a failed terminal in sequence.
    replay = read_sse(resume_url(server, created.id, None))
    assert replay[:2] == json.loads(json.dumps(events))
    assert replay[2]["type"] == "response.failed" and replay[2]["sequence_number"] == 2
    assert failed_code(replay[2]["response"]["error"]) == "worker_lost"


def test_worker_never_started_is_failed_after_lease_expiry(
    env: Env, lambda_client: FakeLambdaClient
) -> None:
    # 3 s: the create's store write and the retrieve below fit in it on a loaded machine
    server = env.server(worker_function="gateway-worker", lease_seconds=0.3, queued_seconds=3)
    c = client(server)
    created = create(c, "text")
    assert created.status == "queued"
    assert c.responses.retrieve(created.id).status == "queued"
    failed = wait_terminal(c, created.id, timeout=20, every=0.1)  # past the queued bound
    assert failed.status == "failed" and failed_code(failed.error) == "worker_lost"  # type: ignore[union-attr]


def test_stopped_worker_ends_failed_at_once(env: Env) -> None:
    """The process running it stops (its task is cancelled, or the server shuts down)."""
    server = env.server()
    c = client(server)
    t1, t2 = tag(), tag()
    first = create(c, f"slow n=60 delay=0.05 tag={t1}")
    second = create(c, f"slow n=60 delay=0.05 tag={t2}")
    feed = server.gateway.local_feed

    def streaming(t: str) -> bool:
        return any(t in s.script and s.items_sent >= 3 for s in env.upstream.streams)

    wait_until(lambda: streaming(t1) and streaming(t2))
    task = feed.tasks[first.id]
    task.get_loop().call_soon_threadsafe(task.cancel)
    failed = wait_terminal(c, first.id, timeout=5)
    assert failed.status == "failed" and failed_code(failed.error) == "worker_stopped"
    wait_until(lambda: env.stream_of(t1).closed_at is not None, timeout=10)

    assert c.responses.retrieve(second.id).status == "in_progress"
    server.__exit__(None, None, None)
    env.servers.remove(server)
    stored = sync(env.store().get(second.id, "default"))
    assert stored is not None and stored.status == "failed"
    assert failed_code(stored.response["error"]) == "worker_stopped"
    assert not env.stream_of(t2).completed


def test_worker_time_limit_ends_failed(env: Env, lambda_client: FakeLambdaClient) -> None:
    from responses_gateway.responses.services import build_gateway

    server = env.server(worker_function="gateway-worker")
    c = client(server)
    t = tag()
    created = create(c, f"slow n=60 delay=0.15 tag={t}")  # 33 pieces: 5 s unless cut
    payload = lambda_client.payloads[-1]
    assert payload == {"response_id": created.id, "tenant": "default"}

    async def work() -> float:
        gateway = build_gateway(env.settings())
        try:
            # The worker's store client is made before the clock starts: on DynamoDB its first
            # call loads botocore's service model (over a second on a loaded machine), which
            # would spend the deadline before the response began and time boto, not the job.
            assert await gateway.store.get(created.id, "default") is not None
            start = time.monotonic()
            await background.run(gateway, created.id, "default", deadline=time.time() + 1.0)
            return time.monotonic() - start
        finally:
            await gateway.aclose()

    elapsed = sync(work())
    # Ended at the 1 s deadline, not with the upstream (5 s); after it, the failed record's
    # writes (moto's DynamoDB on a loaded machine: a second or more) are in the time too.
    assert 0.9 < elapsed < 4.5
    final = c.responses.retrieve(created.id)
    check_response(final)
    assert final.status == "failed" and final.error is not None
    assert failed_code(final.error) == "worker_timeout"
    assert 0 < len(final.output_text) < len("Hello from the scripted upstream.")  # partial kept
    events = sync(env.store().read_events(created.id))
    check_stream(events)  # items closed properly, one terminal, in sequence
    assert events[-1]["type"] == "response.failed"
    stream = env.stream_of(t)
    # The job closed its upstream connection; the upstream's thread sees that a moment later.
    wait_until(lambda: stream.closed_at is not None, timeout=10)
    assert not stream.completed


# -- the race -------------------------------------------------------------------------------------


def test_cancel_versus_complete_race(env: Env) -> None:
    """Cancels at random moments against short responses: a cancel that answered ``cancelled``
    is never followed by ``completed``, in the record or in the event log."""
    a, b = env.server(), env.server()
    ca, cb = client(a), client(b)
    rng = random.Random(4)
    scripts = ["text n=3", "slow n=3 delay=0.02", "deltas n=40", "slow n=2 delay=0.05"]

    def one(plan: tuple[str, float, bool]) -> tuple[str, str]:
        script, pause, other = plan
        created = create(ca, script)
        time.sleep(pause)
        got = (cb if other else ca).responses.cancel(created.id)
        return created.id, got.status

    # Rounds of 8 concurrent races; the pause range adapts so both orders keep happening (at
    # least five rounds, more while one order is still rare: a slower store needs longer).
    results: list[tuple[str, str]] = []
    longest = 0.1
    with ThreadPoolExecutor(8) as pool:
        for round_ in range(12):
            plans = [(rng.choice(scripts), rng.uniform(0, longest), rng.random() < 0.5)
                     for _ in range(8)]
            batch = list(pool.map(one, plans))
            results += batch
            cancelled = sum(status == "cancelled" for _, status in batch)
            longest *= 1.6 if cancelled > 5 else 0.6 if cancelled < 3 else 1.0
            seen = [status for _, status in results]
            if round_ >= 4 and min(seen.count("cancelled"), seen.count("completed")) >= 5:
                break
    store = env.store()
    time.sleep(0.5)  # whatever was still running has ended
    outcomes = {"cancelled": 0, "completed": 0}
    for rid, answered in results:
        assert answered in outcomes, answered
        outcomes[answered] += 1
        final = wait_terminal(ca, rid)
        stored = sync(store.get(rid, "default"))
        assert stored is not None and stored.status == final.status
        terminals = [e["type"] for e in sync(store.read_events(rid)) if e["type"] in TERMINAL_TYPES]
        if answered == "cancelled":
            assert final.status == "cancelled", rid
            assert terminals == [], rid
        else:
            assert final.status == "completed", rid
            assert terminals == ["response.completed"], rid
    # Both orders happened, or the race was not exercised.
    print("race outcomes", outcomes, "pause range", round(longest, 3))
    assert outcomes["cancelled"] >= 5 and outcomes["completed"] >= 5, outcomes


# -- write volume ---------------------------------------------------------------------------------


def test_writes_grow_with_duration_not_tokens(env: Env) -> None:
    """2000 deltas: one write per flush (~250 ms), not per token. Counted at the Store interface
    for both stores and, for DynamoDB, as API calls on the running store's boto3 client."""
    server = env.server()
    c = client(server)
    store = server.gateway.store
    calls: list[str] = []
    for name in ("put", "update_response", "append_events", "renew_lease", "delete"):
        method = getattr(store, name)

        def counted(*args: Any, __m: Any = method, __n: str = name, **kwargs: Any) -> Any:
            calls.append(__n)
            return __m(*args, **kwargs)

        setattr(store, name, counted)
    api_writes: list[str] = []
    if env.kind == "dynamodb":
        writes = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}

        def hook(model: Any, **_: Any) -> None:
            if model.name in writes:
                api_writes.append(model.name)

        store.client.meta.events.register("before-call.dynamodb", hook)

    start = time.monotonic()
    created = create(c, "deltas n=2000 delay=0.001")
    final = wait_terminal(c, created.id, timeout=30)
    duration = time.monotonic() - start
    assert final.status == "completed"
    assert final.output_text == "".join(f"{i} " for i in range(2000))
    events = sync(env.store().read_events(created.id))
    assert len(events) > 2000 and events[-1]["type"] == "response.completed"

    bound = duration / background.FLUSH_SECONDS + 6
    print(f"writes: {len(calls)} store calls, {len(api_writes)} DynamoDB API writes,"
          f" {len(events)} events in {duration:.2f}s (bound {bound:.1f})")
    assert duration > 1.0, "the stream must last long enough to need several flushes"
    assert 3 <= len(calls) <= bound, (len(calls), duration, calls)
    if env.kind == "dynamodb":
        assert 3 <= len(api_writes) <= bound, (len(api_writes), duration, api_writes)
        assert len(api_writes) < 100


# -- the AWS worker path --------------------------------------------------------------------------


class FakeContext:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def lambda_env(env: Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The worker Lambda's module, configured from the environment as in AWS."""
    from responses_gateway.entry import lambda_worker as lambda_handler

    monkeypatch.setenv("GATEWAY_STORE", env.store_setting)
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", env.upstream.base_url)
    monkeypatch.setenv("GATEWAY_MAX_RETRIES", "0")
    monkeypatch.setattr(lambda_handler, "_gateway", None)
    yield lambda_handler
    if lambda_handler._gateway is not None:
        lambda_handler._loop.run_until_complete(lambda_handler._gateway.aclose())


def test_lambda_worker_runs_the_response(
    env: Env, lambda_client: FakeLambdaClient, lambda_env: Any
) -> None:
    server = env.server(worker_function="gateway-worker")
    c = client(server)
    created = create(c, "slow n=4 delay=0.02")
    assert created.status == "queued"
    [call] = lambda_client.calls
    assert call["FunctionName"] == "gateway-worker" and call["InvocationType"] == "Event"
    payload = lambda_client.payloads[0]
    assert payload == {"response_id": created.id, "tenant": "default"}
    time.sleep(0.3)
    assert c.responses.retrieve(created.id).status == "queued"  # nothing runs it here

    result = lambda_env.handler(payload, FakeContext(60_000))
    assert result == {"response_id": created.id, "status": "completed"}
    final = c.responses.retrieve(created.id)
    check_response(final)
    assert final.output_text == "Hello from the scripted upstream."
    check_stream(read_sse(resume_url(server, created.id, None)))
    # A retried invocation (Lambda retries async events) finds it done and leaves it alone.
    assert lambda_env.handler(payload, FakeContext(60_000))["status"] == "completed"


def test_lambda_dead_letters_end_failed(
    env: Env, lambda_client: FakeLambdaClient, lambda_env: Any
) -> None:
    c = client(env.server(worker_function="gateway-worker"))
    first, second = create(c, "text"), create(c, "text")
    p1, p2 = lambda_client.payloads
    event = {"Records": [
        {"eventSource": "aws:sqs", "body": json.dumps(p1)},  # DLQ: the original event
        {"eventSource": "aws:sqs", "body": json.dumps({"requestPayload": p2})},  # destination
        {"eventSource": "aws:sqs", "body": "not json"},
    ]}
    assert lambda_env.handler(event, FakeContext(60_000)) == {"failed": [first.id, second.id]}
    for rid in (first.id, second.id):
        failed = c.responses.retrieve(rid)
        assert failed.status == "failed" and failed_code(failed.error) == "worker_unavailable"  # type: ignore[union-attr]


def test_lambda_worker_time_limit(
    env: Env, lambda_client: FakeLambdaClient, lambda_env: Any
) -> None:
    c = client(env.server(worker_function="gateway-worker"))
    created = create(c, "slow n=60 delay=0.05")
    margin_ms = int(lambda_env.SAFETY_MARGIN_SECONDS * 1000)
    result = lambda_env.handler(lambda_client.payloads[0], FakeContext(margin_ms + 800))
    assert result["status"] == "failed"
    final = c.responses.retrieve(created.id)
    assert final.error is not None and failed_code(final.error) == "worker_timeout"


def test_worker_invoke_failure_is_a_503(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from responses_gateway.platform import worker as invoke

    monkeypatch.setattr(invoke, "_lambda_client", lambda: FakeLambdaClient(fail=True))
    server = env.server(worker_function="gateway-worker")
    with httpx.Client(timeout=10) as http:
        response = http.post(f"{server.base_url}/responses", json={
            "model": MODEL, "input": "hi", "background": True})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "worker_unavailable"


# -- store extension: the worker's flush --------------------------------------------------------


def test_store_flush_carries_the_record_conditionally(env: Env) -> None:
    from responses_gateway.store.base import StoredResponse

    store = env.store()

    def fresh(status: str) -> StoredResponse:
        rid = "resp_" + uuid.uuid4().hex
        record = StoredResponse(
            id=rid, tenant="default", background=True, request={},
            response={"id": rid, "object": "response", "status": status, "output": []},
        )
        sync(store.put(record))
        return record

    def ev(seq: int, kind: str = "response.output_text.delta") -> dict[str, Any]:
        return {"type": kind, "sequence_number": seq}

    running = fresh("in_progress")
    snapshot = dict(running.response, output=[{"id": "msg_1", "type": "message"}])
    sync(store.append_events(running.id, [ev(0), ev(1)], response=snapshot, lease_until=123.0))
    got = sync(store.get(running.id, "default"))
    assert got is not None and got.response == snapshot and got.lease_until == 123.0
    item = {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}]}
    final = dict(running.response, status="completed", output=[item])
    sync(store.append_events(running.id, [ev(2, "response.completed")], response=final,
                             lease_until=0))
    assert [e["sequence_number"] for e in sync(store.read_events(running.id))] == [0, 1, 2]
    assert sync(store.get(running.id, "default")).status == "completed"  # type: ignore[union-attr]
    assert sync(store.get_items(["msg_2"], "default")) == {"msg_2": item}  # output indexed
    # Once ended, a worker's flush writes nothing at all, events included.
    with pytest.raises(CancelledError):
        sync(store.append_events(running.id, [ev(3)], response=snapshot))
    assert len(sync(store.read_events(running.id))) == 3
    for status in ("cancelled", "failed", "queued"):
        other = fresh(status)
        with pytest.raises(CancelledError):
            sync(store.append_events(other.id, [ev(0)], response=dict(other.response)))
        assert sync(store.read_events(other.id)) == []
        assert sync(store.get(other.id, "default")).status == status  # type: ignore[union-attr]


def test_store_huge_terminal_flush_is_all_or_nothing(env: Env) -> None:
    """A terminal flush too big for one DynamoDB transaction (big output, events repeating
    it) still lands with its record, or not at all when the response was cancelled."""
    import base64
    import os

    from responses_gateway.store.base import StoredResponse

    store = env.store()
    transactions: list[str] = []
    if isinstance(store, DynamoDBStore):
        store.client.meta.events.register(
            "before-call.dynamodb.TransactWriteItems", lambda **_: transactions.append("t"))
    text = base64.b64encode(os.urandom(1_500_000)).decode()  # ~2 MB that will not compress
    item = {"id": "msg_big", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    for status in ("in_progress", "cancelled"):
        rid = "resp_" + uuid.uuid4().hex
        base = {"id": rid, "object": "response", "status": status, "output": []}
        sync(store.put(StoredResponse(id=rid, tenant="default", background=True, request={},
                                      response=base)))
        final = dict(base, status="completed", output=[item])
        events = [
            {"type": "response.output_text.done", "text": text, "sequence_number": 0},
            {"type": "response.output_item.done", "item": item, "sequence_number": 1},
            {"type": "response.completed", "response": final, "sequence_number": 2},
        ]
        if status == "in_progress":
            sync(store.append_events(rid, events, response=final, lease_until=0))
            if env.kind == "dynamodb":
                assert len(transactions) > 1  # it did not fit one transaction
            assert sync(store.read_events(rid)) == events
            assert sync(store.get(rid, "default")).response == final  # type: ignore[union-attr]
        else:
            with pytest.raises(CancelledError):
                sync(store.append_events(rid, events, response=final, lease_until=0))
            assert sync(store.read_events(rid)) == []
            assert sync(store.get(rid, "default")).status == "cancelled"  # type: ignore[union-attr]


def test_progress_snapshot_follows_the_deltas() -> None:
    progress = background.Progress()
    base = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    message = {"id": "msg_1", "type": "message", "status": "in_progress", "content": [],
               "role": "assistant"}
    call = {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "",
            "call_id": "c1", "name": "f"}
    for event in [
        {"type": "response.in_progress", "response": base},
        {"type": "response.output_item.added", "output_index": 0, "item": message},
        {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "delta": "Hel"},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "delta": "lo"},
    ]:
        progress.apply(event)
    snap = progress.snapshot()
    assert snap["status"] == "in_progress" and snap["output"][0]["content"][0]["text"] == "Hello"
    assert message["content"] == []  # the events themselves are untouched
    done = dict(message, status="completed", content=[
        {"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}])
    progress.apply({"type": "response.output_item.done", "output_index": 0, "item": done})
    progress.apply({"type": "response.output_item.added", "output_index": 1, "item": call})
    progress.apply({"type": "response.function_call_arguments.delta", "output_index": 1,
                    "delta": '{"a":'})
    snap = progress.snapshot()
    assert snap["output"][0] == done and snap["output"][1]["arguments"] == '{"a":'


# -- store init -----------------------------------------------------------------------------------


def test_store_init_creates_the_table(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from responses_gateway.entry import cli
    from responses_gateway.store.dynamodb import make_client
    from responses_gateway.store.dynamodb_schema import table_definition, ttl_specification

    use_moto(monkeypatch, moto_endpoint)
    name = "init-" + tag()
    assert cli.main(["store", "init", "--table", name]) == 0
    assert name in capsys.readouterr().out
    dynamodb = make_client()
    table = dynamodb.describe_table(TableName=name)["Table"]
    expected = table_definition(name)
    assert table["KeySchema"] == expected["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(
        expected["AttributeDefinitions"], key=str)
    assert table["BillingModeSummary"]["BillingMode"] == expected["BillingMode"]
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED"
    assert ttl["AttributeName"] == ttl_specification()["AttributeName"]
    # GATEWAY_STORE names the table when --table is absent; a second run is harmless.
    monkeypatch.setenv("GATEWAY_STORE", f"dynamodb:{name}")
    assert cli.main(["store", "init"]) == 0
    # The store works on it.
    store = DynamoDBStore(name)
    assert sync(store.get("resp_missing", "default")) is None


def test_resume_at_or_past_the_end_sends_nothing_more(env: Env) -> None:
    """A cursor at the terminal event, or past it, has nothing left to replay."""
    server = env.server()
    c = client(server)
    created = create(c, "deltas n=5")
    wait_terminal(c, created.id)
    everything = read_sse(resume_url(server, created.id, None))
    last = everything[-1]["sequence_number"]
    assert everything[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in everything] == list(range(last + 1))
    assert read_sse(resume_url(server, created.id, last)) == []
    assert read_sse(resume_url(server, created.id, last + 500)) == []
    tail = read_sse(resume_url(server, created.id, last - 1))
    assert [e["sequence_number"] for e in tail] == [last]


def test_local_feed_keeps_each_event_once_in_order() -> None:
    """The final flush republishes its batch; events already published must not repeat."""
    feed = background.LocalFeed()
    feed.open("resp_1")
    events = [{"type": "response.output_text.delta", "sequence_number": n} for n in range(6)]
    feed.publish("resp_1", events[:4])
    feed.publish("resp_1", events[2:])  # overlaps 2 and 3
    assert [e["sequence_number"] for e in feed.events["resp_1"]] == list(range(6))
    after = feed.after("resp_1", 3)
    assert after is not None
    assert [e["sequence_number"] for e in after[0]] == [4, 5]

"""Load: concurrent streaming responses through the gateway, beside the same load sent directly.

    python benchmarks/load.py [--streams 200] [--deltas 500] [--rounds 3] [--delay SECONDS]
                              [--relay] [--profile FILE]

Starts the scripted upstream's app (tests/helpers/scripted_upstream.py, script ``deltas``) and
the gateway (one uvicorn worker, started as handler/run.sh starts it, SQLite store) as two
subprocesses on 127.0.0.1, so neither shares a GIL with the other or with this load generator.
Each round sends the same load twice: ``--streams`` concurrent chat streams straight to the
upstream (the very chat request the gateway sends for the Responses create, usage included, so
the upstream does the same work either way), then ``--streams`` concurrent Responses streams
through the gateway, each of ``--deltas`` text deltas, ``--delay`` seconds apart (0: as fast as
the upstream can). Then 30 streams one at a time, each way, show the latency without load.
Every stream is checked: it completed, its sequence numbers run 0..N-1, its deltas concatenate
to the text the upstream sent (nothing lost or reordered) and the terminal response carries that
same text.

Figures per stream, p50 and p99 (medians over the rounds): time to the first event (the first
SSE frame: a chat chunk directly, ``response.created`` through the gateway), to the first text
delta, and to the end; the wall time of the whole load; the gateway's CPU time per event.
Targets: added time to first event <= 1 ms at p50; total <= 1.2x direct. ``--relay`` also
sends each round's load through benchmarks/relay.py, a byte relay that parses and translates
nothing: the cost of an extra process on the same cores, beside the gateway's. ``--profile
FILE`` samples the gateway with py-spy (``pip install py-spy``) during the gateway load.

Loopback only, bounded: each round has a deadline and the subprocesses are always stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
ROUND_DEADLINE = 180.0  # seconds for one round's streams, both kinds
TTFE_ADDED_TARGET_MS = 1.0
TOTAL_RATIO_TARGET = 1.2


# -- the two servers ------------------------------------------------------------------------


def serve_upstream(port: int) -> None:
    """Subprocess mode: the scripted upstream's app under uvicorn on ``port``.

    Bound by uvicorn itself (not ScriptedUpstream.start, whose pre-made socket has proto 0, so
    asyncio never sets TCP_NODELAY on its connections and Nagle + delayed ACK stall the first
    chunk of a reused connection by ~40 ms), as any real server would be.
    """
    sys.path[:0] = [str(ROOT), str(ROOT / "handler")]
    import uvicorn
    from tests.helpers.scripted_upstream import ScriptedUpstream

    uvicorn.run(ScriptedUpstream().app, host="127.0.0.1", port=port, log_level="warning",
                access_log=False, lifespan="off", timeout_keep_alive=30)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


@contextlib.contextmanager
def servers(tmp: Path, **env: str) -> Iterator[tuple[str, str, int, int]]:
    """(upstream URL, gateway URL, upstream pid, gateway pid), running until the block ends."""
    port = _free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-upstream", str(port)]
    )
    gateway: subprocess.Popen[bytes] | None = None
    try:
        upstream_url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(upstream_url + "/models", upstream, "the upstream")
        gateway_port = _free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "handler"),
            "GATEWAY_UPSTREAM_URL": upstream_url,
            "GATEWAY_MAX_RETRIES": "0",
            "GATEWAY_STORE": f"sqlite:{tmp / 'gateway.db'}",
            "GATEWAY_LOG_LEVEL": "warning",
            **env,
        }
        gateway = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "responses_gateway.api.app:create_app",
             "--host", "127.0.0.1", "--port", str(gateway_port), "--workers", "1",
             "--no-access-log", "--log-level", "warning", "--timeout-graceful-shutdown", "5"],
            env=env,
        )
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        _wait_ready(gateway_url + "/health", gateway, "the gateway")
        yield upstream_url, gateway_url + "/v1", upstream.pid, gateway.pid
    finally:
        for process in (gateway, upstream):
            if process is None:
                continue
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def relay_server(upstream_url: str) -> Iterator[tuple[str, int]]:
    """(relay URL, pid): benchmarks/relay.py in front of the upstream, until the block ends."""
    upstream_port = upstream_url.rsplit(":", 1)[1].split("/")[0]
    port = _free_port()
    relay = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "relay.py"), upstream_port, str(port)])
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(url + "/chat/completions", timeout=5,
                           json={"model": _model(2, 0.0), "stream": True, "messages": []})
                break
            except httpx.HTTPError:
                if relay.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the relay did not start") from None
                time.sleep(0.05)
        yield url, relay.pid
    finally:
        relay.terminate()
        relay.wait(timeout=10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def profiling(pid: int, out: str | None) -> Iterator[None]:
    """py-spy (pip install py-spy) samples the gateway process while the block runs."""
    if not out:
        yield
        return
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw",
                            "--rate", "250", "--output", out, "--nonblocking"])
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(2)  # SIGINT: write the profile and exit
        spy.wait(timeout=30)


# -- one stream -----------------------------------------------------------------------------


@dataclass
class Stream:
    first_event: float  # seconds from the request to the first complete SSE frame
    first_delta: float  # ... to the first text delta
    total: float  # ... to the end of the body
    events: int
    ok: bool
    problem: str = ""


def _expected(deltas: int) -> str:
    return "".join(f"{i} " for i in range(deltas))


def _model(deltas: int, delay: float) -> str:
    """The scripted upstream's ``deltas`` script: delta i is "{i} ", ``delay`` s apart."""
    return f"script/deltas n={deltas}" + (f" delay={delay}" if delay else "")


async def direct_stream(
    client: httpx.AsyncClient, url: str, deltas: int, delay: float = 0.0
) -> Stream:
    # The chat request the gateway itself sends for gateway_stream's create (usage included:
    # a Response always carries it), so the upstream does the same work for both loads.
    body = {"model": _model(deltas, delay), "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "count"}]}
    start = time.perf_counter()
    first = first_delta = 0.0
    text: list[str] = []
    frames = 0
    done = False
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        if response.status_code != 200:
            return Stream(0, 0, 0, 0, False, f"HTTP {response.status_code}")
        pending = b""
        async for piece in response.aiter_raw():
            parts = (pending + piece).split(b"\n\n")
            pending = parts.pop()
            for frame in parts:
                frames += 1
                if not first:
                    first = time.perf_counter() - start
                data = frame[6:]
                if data == b"[DONE]":
                    done = True
                    continue
                for choice in orjson.loads(data)["choices"]:
                    content = choice["delta"].get("content")
                    if content:
                        if not first_delta:
                            first_delta = time.perf_counter() - start
                        text.append(content)
    total = time.perf_counter() - start
    problem = ""
    if not done:
        problem = "no [DONE]"
    elif "".join(text) != _expected(deltas):
        problem = "text differs"
    return Stream(first, first_delta, total, frames, not problem, problem)


async def gateway_stream(
    client: httpx.AsyncClient, url: str, deltas: int, delay: float = 0.0
) -> Stream:
    body = {"model": _model(deltas, delay), "input": "count", "stream": True}
    start = time.perf_counter()
    first = first_delta = 0.0
    text: list[str] = []
    expected_seq = 0
    terminal: dict | None = None
    problem = ""
    async with client.stream("POST", url + "/responses", json=body) as response:
        if response.status_code != 200:
            return Stream(0, 0, 0, 0, False, f"HTTP {response.status_code}")
        pending = b""
        async for piece in response.aiter_raw():
            parts = (pending + piece).split(b"\n\n")
            pending = parts.pop()
            for frame in parts:
                if frame[:1] == b":":  # keep-alive comment
                    continue
                if not first:
                    first = time.perf_counter() - start
                event = orjson.loads(frame[frame.index(b"\ndata: ") + 7 :])
                if event["sequence_number"] != expected_seq and not problem:
                    problem = f"sequence {event['sequence_number']} where {expected_seq} was due"
                expected_seq += 1
                kind = event["type"]
                if kind == "response.output_text.delta":
                    if not first_delta:
                        first_delta = time.perf_counter() - start
                    text.append(event["delta"])
                elif kind in ("response.completed", "response.failed", "response.incomplete"):
                    if terminal is not None and not problem:
                        problem = "two terminal events"
                    terminal = event
    total = time.perf_counter() - start
    expected = _expected(deltas)
    if not problem:
        if terminal is None:
            problem = "no terminal event"
        elif terminal["type"] != "response.completed":
            problem = f"ended {terminal['type']}"
        elif "".join(text) != expected:
            problem = "deltas lost or reordered"
        elif terminal["response"]["output"][0]["content"][0]["text"] != expected:
            problem = "terminal text differs"
    return Stream(first, first_delta, total, expected_seq, not problem, problem)


# -- a round --------------------------------------------------------------------------------


def _client(timeout: httpx.Timeout, limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    """The load generator's client, on the gateway's own lean transport (backends/http11.py).

    httpx's default transport parses every HTTP chunk through h11: as the client of 200
    streams it used more CPU than the upstream and the gateway together, on the same two cores,
    so it set the pace of both loads. Both loads use this one.
    """
    sys.path.insert(0, str(ROOT / "handler"))
    from responses_gateway.backends.http11 import Http11Transport, install

    client = httpx.AsyncClient(timeout=timeout, trust_env=False)
    install(client, Http11Transport(
        max_connections=None if limits is None else limits.max_connections))
    return client


async def load(
    kind: str, url: str, streams: int, deltas: int, delay: float
) -> tuple[list[Stream], float]:
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    timeout = httpx.Timeout(120.0, connect=30.0, pool=60.0)
    one = direct_stream if kind == "direct" else gateway_stream
    async with _client(limits=limits, timeout=timeout) as client:
        await asyncio.gather(*(one(client, url, 5) for _ in range(min(streams, 20))))  # warm
        start = time.perf_counter()
        results = await asyncio.wait_for(
            asyncio.gather(*(one(client, url, deltas, delay) for _ in range(streams))),
            ROUND_DEADLINE,
        )
        return list(results), time.perf_counter() - start


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass
class Round:
    direct: list[Stream]
    gateway: list[Stream]
    direct_wall: float
    gateway_wall: float
    gateway_cpu: float  # seconds the gateway process used during the gateway load
    upstream_cpu: tuple[float, float]  # seconds the upstream used: direct load, gateway load
    client_cpu: tuple[float, float]  # seconds this load generator used: direct, gateway
    relay: list[Stream] | None = None  # --relay: the direct load sent through the byte relay
    relay_cpu: float = 0.0

    def figure(self, kind: str, attr: str, p: float) -> float:
        return _pct([getattr(s, attr) for s in getattr(self, kind)], p)


METRICS = (("first event", "first_event"), ("first delta", "first_delta"), ("total", "total"))


def _ratio(rounds: list[Round], kind: str) -> float:
    """Median over the rounds of the load's total p50 over the direct one's."""
    return statistics.median(r.figure(kind, "total", 50) / r.figure("direct", "total", 50)
                             for r in rounds)


def report(rounds: list[Round], unloaded: tuple[list[Stream], list[Stream]], deltas: int) -> bool:
    """Medians over the rounds of each figure; returns whether every stream was whole."""
    med = statistics.median
    print(f"{'(ms, median of rounds)':24}{'direct':>9}{'gateway':>9}{'added':>9}{'ratio':>7}")
    for name, attr in METRICS:
        for p in (50, 99):
            d = med(r.figure("direct", attr, p) for r in rounds)
            g = med(r.figure("gateway", attr, p) for r in rounds)
            print(f"{name + f' p{p}':24}{d * 1000:9.1f}{g * 1000:9.1f}{(g - d) * 1000:9.1f}"
                  f"{g / d:7.2f}")
    d, g = med(r.direct_wall for r in rounds), med(r.gateway_wall for r in rounds)
    print(f"{'wall, whole load':24}{d * 1000:9.1f}{g * 1000:9.1f}{(g - d) * 1000:9.1f}"
          f"{g / d:7.2f}")
    streams = len(rounds[0].gateway)
    events = streams * statistics.median(s.events for s in rounds[0].gateway)
    cpu = med(r.gateway_cpu for r in rounds)
    print(f"gateway CPU: {cpu:.2f} s per round = {cpu / events * 1e6:.1f} us per event "
          f"({events:.0f} events); upstream CPU: "
          f"{med(r.upstream_cpu[0] for r in rounds):.2f} s direct, "
          f"{med(r.upstream_cpu[1] for r in rounds):.2f} s via the gateway; client CPU: "
          f"{med(r.client_cpu[0] for r in rounds):.2f} s direct, "
          f"{med(r.client_cpu[1] for r in rounds):.2f} s via the gateway")
    for i, r in enumerate(rounds, 1):
        print(f"  round {i}: total p50 {r.figure('direct', 'total', 50) * 1000:.0f} -> "
              f"{r.figure('gateway', 'total', 50) * 1000:.0f} ms, wall "
              f"{r.direct_wall * 1000:.0f} -> {r.gateway_wall * 1000:.0f} ms, "
              f"first event p50 {r.figure('direct', 'first_event', 50) * 1000:.1f} -> "
              f"{r.figure('gateway', 'first_event', 50) * 1000:.1f} ms")
    if rounds[0].relay is not None:
        print(f"byte relay (parses nothing): total p50 "
              f"{med(r.figure('relay', 'total', 50) for r in rounds) * 1000:.1f} ms, "
              f"{_ratio(rounds, 'relay'):.2f}x direct (the gateway: "
              f"{_ratio(rounds, 'gateway'):.2f}x); relay CPU "
              f"{med(r.relay_cpu for r in rounds):.2f} s per round")
    one_d, one_g = unloaded
    fd, fg = _pct([s.first_event for s in one_d], 50), _pct([s.first_event for s in one_g], 50)
    td, tg = _pct([s.total for s in one_d], 50), _pct([s.total for s in one_g], 50)
    print(f"unloaded (one stream at a time, unpaced, {len(one_d)} each): first event p50 "
          f"{fd * 1000:.2f} -> {fg * 1000:.2f} ms (+{(fg - fd) * 1000:.2f}); total p50 "
          f"{td * 1000:.1f} -> {tg * 1000:.1f} ms ({tg / td:.2f}x)")

    everything = [s for r in rounds for s in r.direct + r.gateway] + one_d + one_g
    whole = sum(s.ok for s in everything)
    problems = sorted({s.problem for s in everything if s.problem})
    print(f"streams whole: {whole}/{len(everything)}"
          + (f"; problems: {problems}" if problems else
             f"; no lost or reordered events ({deltas} deltas each, sequence numbers checked)"))
    added = med(r.figure("gateway", "first_event", 50) - r.figure("direct", "first_event", 50)
                for r in rounds)
    ratio = _ratio(rounds, "gateway")
    print(f"target added first event p50 <= {TTFE_ADDED_TARGET_MS:g} ms under load: "
          f"{'met' if added * 1000 <= TTFE_ADDED_TARGET_MS else 'MISSED'} "
          f"({added * 1000:.1f} ms); unloaded: "
          f"{'met' if (fg - fd) * 1000 <= TTFE_ADDED_TARGET_MS else 'MISSED'} "
          f"({(fg - fd) * 1000:.2f} ms)")
    print(f"target total p50 <= {TOTAL_RATIO_TARGET:g}x direct: "
          f"{'met' if ratio <= TOTAL_RATIO_TARGET else 'MISSED'} ({ratio:.2f}x)")
    return whole == len(everything)


async def one_at_a_time(up: str, gw: str, count: int, deltas: int, delay: float
                        ) -> tuple[list[Stream], list[Stream]]:
    """Streams one after another, direct and through the gateway in turn: latency alone."""
    direct: list[Stream] = []
    gateway: list[Stream] = []
    async with _client(timeout=httpx.Timeout(60.0)) as client:
        for _ in range(count):
            direct.append(await direct_stream(client, up, deltas, delay))
            gateway.append(await gateway_stream(client, gw, deltas, delay))
    return direct, gateway


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.0,
                        help="seconds between the upstream's deltas (0: as fast as it can)")
    parser.add_argument("--relay", action="store_true",
                        help="also send each round's load through a byte relay (a floor)")
    parser.add_argument("--profile", metavar="FILE",
                        help="record the gateway with py-spy during the gateway load "
                             "(collapsed stacks, for flamegraph tools)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    pace = f"{args.delay * 1000:g} ms apart" if args.delay else "as fast as they come"
    print(f"{args.streams} concurrent streams x {args.deltas} deltas ({pace}), "
          f"{args.rounds} round(s)")
    rounds: list[Round] = []
    with (tempfile.TemporaryDirectory() as tmp, servers(Path(tmp)) as (up, gw, up_pid, gw_pid),
          contextlib.ExitStack() as stack):
        relay_url, relay_pid = (stack.enter_context(relay_server(up)) if args.relay
                                else ("", 0))
        for _ in range(args.rounds):
            cpu_up, cpu_me = cpu_seconds(up_pid), time.process_time()
            direct, direct_wall = asyncio.run(
                load("direct", up, args.streams, args.deltas, args.delay))
            cpu_up_direct = cpu_seconds(up_pid) - cpu_up
            cpu_me_direct = time.process_time() - cpu_me
            cpu_gw, cpu_up, cpu_me = cpu_seconds(gw_pid), cpu_seconds(up_pid), time.process_time()
            with profiling(gw_pid, args.profile):
                gateway, gateway_wall = asyncio.run(
                    load("gateway", gw, args.streams, args.deltas, args.delay))
            rounds.append(Round(
                direct, gateway, direct_wall, gateway_wall, cpu_seconds(gw_pid) - cpu_gw,
                (cpu_up_direct, cpu_seconds(up_pid) - cpu_up),
                (cpu_me_direct, time.process_time() - cpu_me),
            ))
            if relay_url:  # last, so the gateway's load runs where it does without --relay
                relay_cpu = cpu_seconds(relay_pid)
                rounds[-1].relay, _ = asyncio.run(
                    load("direct", relay_url, args.streams, args.deltas, args.delay))
                rounds[-1].relay_cpu = cpu_seconds(relay_pid) - relay_cpu
        unloaded = asyncio.run(one_at_a_time(up, gw, 30, args.deltas, 0.0))
    return 0 if report(rounds, unloaded, args.deltas) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Cold start: what each Lambda entry point costs a fresh interpreter, beside a bare one.

    python benchmarks/cold_start.py [--runs 9] [--importtime]

Each figure is the median (and min) over ``--runs`` fresh interpreters, all in this one run:

- ``bare interpreter``: ``python -c pass``, wall time of the whole process;
- ``framework floor``: asyncio, orjson and the Starlette modules the app uses, what any app on
  this stack imports before its own code (the gateway's own share is the difference);
- ``streaming entry``: ``import responses_gateway.api.app`` + ``create_app()``, timed inside the
  process (what uvicorn does before the Lambda Web Adapter's readiness check can pass);
- ``streaming entry, no bytecode``: the same from a copy of the code without ``__pycache__``,
  what Lambda paid at every cold start when our code shipped as source (it cannot write
  bytecode into /var/task; ``sam build`` now compiles it: handler/Makefile);
- ``streaming entry + uvicorn``: the same plus uvicorn with the event loop and HTTP parser it
  picks when they are installed, uvloop and httptools (run.sh's whole import);
- ``streaming ready``: the above plus the app's lifespan startup (services built) under a
  Lambda-like environment (JSON logging configured), i.e. until /health could answer;
- ``ready + first create``: the above plus what a fresh process's first create builds: the
  request validators (one create body validated), the backend, its HTTP client and TLS
  context. In Lambda the lifespan builds them (api/warm_start.py: paid in the init phase, before
  any request when Lambda initializes ahead of traffic); the ``lazy`` pair leaves them to the
  first create, as outside Lambda;
- ``worker handler``: ``import responses_gateway.entry.lambda_worker``;
- ``buffered handler``: ``import responses_gateway.entry.lambda_buffered`` (Mangum, services built).

The environment is the deployed one (DynamoDB store, worker function set) with dummy values;
nothing is contacted, and so are the packages: a child finds only what Lambda's dependency layer
ships (layers/dependencies/requirements.txt), since optional imports change cost with what is
installed (``import httpx`` imports rich and pygments for its command line when they are
there, about half the floor on this machine); ``--installed`` measures with everything installed
here instead. ``--cpu`` measures each case's CPU time (user + system) instead of the
wall clock: on a machine that other work loads, the wall clock of a fresh interpreter
varies 2-3x from one run to the next, its CPU time much less. The last lines print the two
ratios of issue 46, each the median over runs of that run's figure against that run's floor
(so machine noise hits both sides alike):
the first-create ratio (``ready + first create`` / floor) and the own-share ratio
((``streaming entry`` - floor) / floor). ``--importtime`` prints the 15 slowest imports of
the streaming entry (``python -X importtime``) to show what to make lazy.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 150.0  # issue 21: the streaming entry and the worker each
FIRST_CREATE_GOAL = 2.5  # issue 46: ready + first create, as a multiple of the floor
OWN_SHARE_GOAL = 0.35  # issue 46: (streaming entry - floor) / floor

ENV = {
    "GATEWAY_STORE": "dynamodb:cold-start-bench",
    "GATEWAY_WORKER_FUNCTION": "responses-gateway-worker",
    "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "dummy",
    "AWS_SECRET_ACCESS_KEY": "dummy",
    "POWERTOOLS_SERVICE_NAME": "cold-start-bench",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",  # template.yaml sets it
}
LAMBDA_ENV = {"AWS_LAMBDA_FUNCTION_NAME": "cold-start-bench", "POWERTOOLS_METRICS_DISABLED": "1"}

TIMED = """
{hide}
import time
t0, c0 = time.perf_counter(), time.process_time()
{body}
print((time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000)
"""

UVICORN = "import uvicorn, uvloop, uvicorn.protocols.http.httptools_impl"
FLOOR = ("import asyncio, orjson\nimport starlette.applications, starlette.datastructures, "
         "starlette.exceptions, starlette.requests, starlette.responses, starlette.routing, "
         "starlette.websockets")
ENTRY = "from responses_gateway.api.app import create_app\napp = create_app()"
NO_BYTECODE = {"PYTHONDONTWRITEBYTECODE": "1", "COLD_START_SOURCE_ONLY": "1"}
#: What a fresh process's first create builds: the request validators (one create body
#: validated), the backend and its HTTP client with its TLS context (api/warm_start.py builds the
#: same; run inside the lifespan, as a request is). Already built, it costs next to nothing.
CREATE = ("        from responses_gateway.api import warm_start as first_create\n"
          "        first_create.warm(app.state.gateway)\n")


def _ready(then: str = "", *, lazy: bool = False) -> str:
    """The streaming entry up to /health answering (the Lambda Web Adapter's readiness), then
    ``then`` inside the lifespan; ``lazy``: without api/warm_start.py at startup (the first
    create builds what it needs)."""
    off = "from responses_gateway.api import warm_start\nwarm_start.wanted = lambda: False\n"
    return (f"import asyncio\n{UVICORN}\n{off if lazy else ''}"
            "from responses_gateway.api.app import create_app\n"
            "app = create_app()\n"
            "async def ready():\n"
            "    async with app.router.lifespan_context(app):\n"
            f"{then}"
            "        pass\n"
            "asyncio.run(ready())\n")


CASES: dict[str, tuple[str, dict[str, str]]] = {
    "framework floor": (FLOOR, {}),
    "streaming entry": (ENTRY, {}),
    "streaming entry, no bytecode": (ENTRY, NO_BYTECODE),
    "streaming entry + uvicorn": (
        f"{UVICORN}\nfrom responses_gateway.api.app import create_app\napp = create_app()",
        {}),
    "streaming ready": (_ready(), LAMBDA_ENV),
    "ready + first create": (_ready(CREATE), LAMBDA_ENV),
    "streaming ready, lazy": (_ready(lazy=True), LAMBDA_ENV),
    "ready + first create, lazy": (_ready(CREATE, lazy=True), LAMBDA_ENV),
    "worker handler": ("import responses_gateway.entry.lambda_worker", {}),
    "buffered handler": ("import responses_gateway.entry.lambda_buffered", {}),
}


SOURCE_ONLY = Path(tempfile.gettempdir()) / f"cold-start-source-{os.getpid()}"


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GATEWAY_", "AWS_", "POWERTOOLS_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Lambda runs from compiled bytecode too
    env.update(ENV)
    env.update(extra)
    source_only = env.pop("COLD_START_SOURCE_ONLY", None)
    env["PYTHONPATH"] = str(SOURCE_ONLY if source_only else ROOT / "handler")
    return env


def bare_start_ms() -> float:
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=child_env({}))
    if CPU:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return (time.perf_counter() - start) * 1000


CPU = False  # --cpu: CPU time of the process instead of the wall clock


LAYER = ROOT / "layers" / "dependencies" / "requirements.txt"
#: Installed in a child before its clock starts (with ``{hidden}`` filled in): refuses the
#: top-level modules of distributions Lambda's dependency layer does not ship, as the deployed
#: function would not find them. Optional imports then take the path they take in Lambda:
#: httpx, for one, imports its command-line interface (rich, pygments) on ``import httpx``
#: whenever those happen to be installed, and decoders (brotli, zstandard) likewise.
HIDE = """
import sys
class _NotInLayer:
    hidden = frozenset({hidden!r})
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.hidden:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the Lambda layer)")
        return None
sys.meta_path.insert(0, _NotInLayer())
"""


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def not_in_layer() -> frozenset[str]:
    """Top-level modules installed here whose distribution the Lambda layer does not ship
    (the gateway itself and the standard library aside)."""
    from importlib import metadata

    shipped = {_canonical(line.split("==")[0]) for line in LAYER.read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    shipped.add("responses-gateway")
    hidden = set()
    for module, dists in metadata.packages_distributions().items():
        if module.startswith("_") or module in sys.stdlib_module_names:
            continue
        if not any(_canonical(dist) in shipped for dist in dists):
            hidden.add(module)
    return frozenset(hidden)


HIDDEN: frozenset[str] = frozenset()  # --installed leaves it empty


def timed_ms(body: str, extra: dict[str, str]) -> float:
    hide = HIDE.format(hidden=sorted(HIDDEN)) if HIDDEN else ""
    out = subprocess.run([sys.executable, "-c", TIMED.format(body=body, hide=hide)], check=True,
                         capture_output=True, text=True, env=child_env(extra), cwd=ROOT)
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(cpu if CPU else wall)


def slowest_imports(count: int = 15) -> list[tuple[int, int, str]]:
    body = CASES["streaming entry"][0]
    if HIDDEN:
        body = HIDE.format(hidden=sorted(HIDDEN)) + body
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", body], check=True,
                         capture_output=True, text=True, env=child_env({}), cwd=ROOT)
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, cumulative, name = line[len("import time:"):].split("|")
        rows.append((int(cumulative), int(own), name.rstrip()))
    return sorted(rows, reverse=True)[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU time (user + system) instead of the wall clock: steadier "
                             "on a machine other work loads")
    parser.add_argument("--installed", action="store_true",
                        help="import from everything installed here, not only what the "
                             "Lambda dependency layer ships")
    args = parser.parse_args()
    global CPU, HIDDEN
    CPU = args.cpu
    HIDDEN = frozenset() if args.installed else not_in_layer()

    shutil.rmtree(SOURCE_ONLY, ignore_errors=True)
    shutil.copytree(ROOT / "handler" / "responses_gateway", SOURCE_ONLY / "responses_gateway",
                    ignore=shutil.ignore_patterns("__pycache__"))
    try:
        return measure(args.runs, args.importtime)
    finally:
        shutil.rmtree(SOURCE_ONLY, ignore_errors=True)


def measure(runs: int, importtime: bool) -> int:
    timed_ms(CASES["buffered handler"][0], {})  # warm the bytecode caches once
    results: dict[str, list[float]] = {"bare interpreter": []}
    results.update({name: [] for name in CASES})
    for _ in range(runs):  # interleaved, so machine noise hits every case alike
        results["bare interpreter"].append(bare_start_ms())
        for name, (body, extra) in CASES.items():
            results[name].append(timed_ms(body, extra))

    clock = "CPU time" if CPU else "wall time"
    modules = "the Lambda layer's packages" if HIDDEN else "every installed package"
    print(f"python {sys.version.split()[0]}, {runs} fresh interpreters per case, {clock}, "
          f"{modules}")
    print(f"{'':28}{'median ms':>10}{'min ms':>10}")
    for name, values in results.items():
        note = "  (process wall time)" if name == "bare interpreter" else ""
        print(f"{name:28}{statistics.median(values):10.1f}{min(values):10.1f}{note}")
    own = [entry - floor for entry, floor in
           zip(results["streaming entry"], results["framework floor"], strict=True)]
    ratio = statistics.median(results["streaming entry"]) / statistics.median(
        results["framework floor"])
    print(f"the gateway's own share of the streaming entry (entry - floor, per run): "
          f"{statistics.median(own):.1f} ms median; the entry is {ratio:.2f}x the floor")
    floors = results["framework floor"]
    first = statistics.median(c / f for c, f in zip(results["ready + first create"], floors,
                                                     strict=True))
    share = statistics.median((e - f) / f for e, f in zip(results["streaming entry"], floors,
                                                          strict=True))
    print(f"first-create ratio (ready + first create / floor, median per run): {first:.2f}x "
          f"(goal <= {FIRST_CREATE_GOAL}x)")
    print(f"own-share ratio ((streaming entry - floor) / floor, median per run): {share:.2f}x "
          f"(goal <= {OWN_SHARE_GOAL}x)")
    for lazy in ("", ", lazy"):
        after = statistics.median(
            c - r for c, r in zip(results["ready + first create" + lazy],
                                  results["streaming ready" + lazy], strict=True))
        how = "built by the first create" if lazy else "built at init (api/warm_start.py)"
        print(f"first create after ready, validators and client {how}: {after:.1f} ms median, "
              f"{after / statistics.median(floors):.2f}x the floor")
    for name in ("streaming entry", "worker handler"):
        median = statistics.median(results[name])
        verdict = "under" if median <= TARGET_MS else "OVER"
        print(f"{name}: {median:.1f} ms median, {verdict} the {TARGET_MS:.0f} ms target")
    if importtime:
        print("\nslowest imports of the streaming entry (cumulative us, own us):")
        for cumulative, own, name in slowest_imports():
            print(f"{cumulative:10d}{own:10d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

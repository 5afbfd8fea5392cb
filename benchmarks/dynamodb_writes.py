"""What one request costs in DynamoDB, measured: items written and read, WCU and RCU, and how
the writes spread over partition keys (docs/store.md, "Capacity" prints these figures).

    python benchmarks/dynamodb_writes.py [--responses 300] 2>/dev/null

(the table goes to stdout, the gateway's log lines to stderr)

A gateway (in this process) on a DynamoDB table in moto, every call through the recording
proxy (tests/helpers/dynamodb_proxy.py), which parses each DynamoDB JSON request and records
the items it writes (table or index, partition and sort key, in a transaction or not) and the
items each read returns. Four kinds of request, each run many times across 8 keys and 3 models
on one day, averaged:

- ``response``: ``POST /v1/responses`` (stored, not streamed);
- ``conversation turn``: the same with ``conversation`` (the turn's lock, items, settle);
- ``background response``: ``background: true``, then retrieved until done (the polls'
  reads are counted apart);
- ``limited request``: a response for a key with requests, tokens per minute and a budget
  (admission, the tokens' reservation, their settlement).

Capacity units as DynamoDB bills them on demand: a write is ``ceil(size / 1 KB)`` WCU, twice
that in a transaction; a strongly consistent read ``ceil(size / 4 KB)`` RCU per item (GetItem,
BatchGetItem) or per call's total (Query), at least 1. A Put's size is its item's; an Update's
or Delete's is the item's size as the table holds it at the end (read once the run is over).
A global index's entry is one more write on the index's partition.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "handler")]

from tests.helpers.dynamodb_proxy import (  # noqa: E402
    Read,
    RecordingProxy,
    Write,
    is_bookkeeping,
    item_size,
)

KEYS = tuple(f"sk-bench-key-{n}-0123456789" for n in range(8))
MODELS = ("model-a", "model-b", "model-c")
ADMIN = "admin-bench-0123456789abcdef"
LIMITS = {"default": {"requests_per_minute": 100000, "tokens_per_minute": 10**9,
                      "tokens_per_period": 10**10, "period": "month"}}


def wcu(writes: list[Write], sizes: dict[tuple[str, str, str], int]) -> int:
    total = 0
    for w in writes:
        size = w.size or sizes.get((w.table, w.pk, w.sk), 0)
        units = max(1, math.ceil(size / 1024))
        total += units * (2 if w.transactional else 1)
    return total


def rcu(reads: list[Read]) -> float:
    total = 0.0
    for r in reads:
        units = max(1, math.ceil(r.size / 4096)) if r.operation == "Query" else max(
            r.items, 1) * max(1, math.ceil(r.size / max(r.items, 1) / 4096))
        total += units if r.consistent else units / 2
    return total


def final_sizes(client: Any, table: str, writes: list[Write]) -> dict[tuple[str, str, str], int]:
    """The stored size of every item an Update or Delete touched (0 if gone)."""
    sizes = {}
    for w in {(w.table, w.pk, w.sk) for w in writes if not w.size and "/" not in w.table}:
        item = client.get_item(TableName=table, Key={"pk": {"S": w[1]}, "sk": {"S": w[2]}}
                               ).get("Item")
        sizes[w] = item_size(item) if item else 0
    return sizes


def measure(name: str, proxy: RecordingProxy, runs: int, one: Callable[[int], None],
            rows: list[dict[str, Any]], client: Any, table: str,
            polls: Callable[[], int] | None = None) -> None:
    proxy.clear()
    for i in range(runs):
        one(i)
    writes, reads = list(proxy.writes), list(proxy.reads)
    sizes = final_sizes(client, table, writes)
    book = [w for w in writes if "/" not in w.table and is_bookkeeping(w.pk)]
    shared = Counter(w.pk for w in book if not w.pk.startswith("USAGE#ID#"))
    spread = Counter(w.pk for w in writes)
    top_pk, top = spread.most_common(1)[0] if spread else ("", 0)
    rows.append({
        "request": name, "runs": runs,
        "items written": len(writes) / runs, "WCU": wcu(writes, sizes) / runs,
        "bookkeeping items": len(book) / runs,
        "reads (calls)": len(reads) / runs, "items read": sum(r.items for r in reads) / runs,
        "RCU": rcu(reads) / runs,
        "partitions written": len(spread),
        "hottest partition": f"{top_pk[:20]} {100 * top / max(len(writes), 1):.1f}%",
        "shared bookkeeping keys": len(shared),
        "largest shared share": (f"{100 * max(shared.values()) / len(book):.1f}%"
                                 if shared else "-"),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=300)
    args = parser.parse_args()

    from openai import OpenAI
    from tests.helpers.gateway_server import GatewayServer
    from tests.helpers.moto_server import aws_env, create_dynamodb_table, shared_endpoint
    from tests.helpers.scripted_upstream import ScriptedUpstream

    from responses_gateway.config import Settings
    from responses_gateway.key_limits import parse_limits
    from responses_gateway.store.dynamodb import make_client

    endpoint = shared_endpoint()
    os.environ.update(aws_env(endpoint))
    rows: list[dict[str, Any]] = []
    with RecordingProxy(endpoint) as proxy, ScriptedUpstream() as upstream:
        os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = proxy.url
        client = make_client()
        n = args.responses

        def gateway(table: str, **more: Any) -> GatewayServer:
            return GatewayServer(Settings(upstream_url=upstream.base_url,
                                          store=f"dynamodb:{table}", api_keys=KEYS,
                                          admin_keys=(ADMIN,), max_retries=0, **more))

        table = create_dynamodb_table()
        with gateway(table) as gw:
            def openai(i: int) -> OpenAI:
                return OpenAI(base_url=gw.base_url, api_key=KEYS[i % 8], max_retries=0)

            def response(i: int) -> None:
                openai(i).responses.create(model=MODELS[i % 3], input=f"hello {i}")

            measure("response", proxy, n, response, rows, client, table)

            conversations = [openai(k).conversations.create().id for k in range(8)]

            def turn(i: int) -> None:
                openai(i).responses.create(model=MODELS[i % 3], input=f"turn {i}",
                                           conversation=conversations[i % 8])

            measure("conversation turn", proxy, max(8, n // 3), turn, rows, client, table)

            def background(i: int) -> None:
                c = openai(i)
                made = c.responses.create(model=MODELS[i % 3], input=f"later {i}",
                                          background=True)
                while c.responses.retrieve(made.id).status in ("queued", "in_progress"):
                    time.sleep(0.05)

            measure("background response (with its polls)", proxy, max(8, n // 3),
                    background, rows, client, table)

        table = create_dynamodb_table()
        with gateway(table, limits=parse_limits(json.dumps(LIMITS))) as gw:
            def limited(i: int) -> None:
                OpenAI(base_url=gw.base_url, api_key=KEYS[i % 8], max_retries=0
                       ).responses.create(model=MODELS[i % 3], input=f"limited {i}")

            measure("limited request", proxy, n, limited, rows, client, table)

    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v)
                                for v in row.values()) + " |")


if __name__ == "__main__":
    main()

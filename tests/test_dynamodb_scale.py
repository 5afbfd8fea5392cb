"""DynamoDB at scale (issue 45), on moto in server mode behind a recording proxy
(tests/helpers/dynamodb_proxy.py): no partition key is written by every response, reads fan
in across the shards with paging that stays correct, limits stay exact across processes, and
bookkeeping that DynamoDB throttles never fails a response nor loses its usage."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from responses_gateway.store.base import StoredConversation
from responses_gateway.store.dynamodb import DynamoDBStore, make_client
from responses_gateway.store.dynamodb_schema import SHARDS
from responses_gateway.store.usage import DAY, UsageEntry, day_of
from tests.helpers.dynamodb_proxy import RecordingProxy
from tests.helpers.gateway_process import GatewayProcess
from tests.helpers.moto_server import aws_env, create_dynamodb_table, use_moto
from tests.helpers.scripted_upstream import ScriptedUpstream

KEYS = tuple(f"sk-scale-key-{n}-0123456789" for n in range(8))
MODELS = ("model-a", "model-b", "model-c")
ADMIN = "admin-key-scale-0123456789"


def tenant_of(key: str) -> str:
    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


@pytest.fixture
def proxy(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingProxy]:
    """Every DynamoDB call of this process (and of gateways it starts with ``env``) goes
    through the proxy."""
    use_moto(monkeypatch, moto_endpoint)
    with RecordingProxy(moto_endpoint) as recording:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", recording.url)
        yield recording


@pytest.fixture
def no_transaction_backup(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto deep-copies the whole table for every item of every transaction (its rollback),
    which makes 1,500 recordings quadratic (minutes). While this is on no transaction may
    fail (the tests assert each recording counts), so the copy is skipped."""
    import types

    import moto.dynamodb.models as models

    real = models.copy

    def deepcopy(value: Any, *args: Any) -> Any:
        return value if isinstance(value, models.Table) else real.deepcopy(value, *args)

    monkeypatch.setattr(models, "copy", types.SimpleNamespace(deepcopy=deepcopy,
                                                              copy=real.copy))


def store_on(table: str) -> DynamoDBStore:
    return DynamoDBStore(table, client=make_client())


def assert_spread(counts: Counter[str], at_least: int = 16, most: float = 0.10) -> None:
    total = sum(counts.values())
    assert len(counts) >= at_least, counts
    top, n = counts.most_common(1)[0]
    assert n <= most * total, (top, n, total)


@pytest.mark.slow
def test_1500_responses_spread_their_bookkeeping_and_read_back_whole(
    proxy: RecordingProxy, no_transaction_backup: None,
) -> None:
    table = create_dynamodb_table()
    ledger = store_on(table).usage_store()
    day = int(time.time()) // DAY * DAY
    entries = [
        UsageEntry(response_id=f"resp_{uuid.uuid4().hex}", tenant=tenant_of(KEYS[i % 8]),
                   model=MODELS[i % 3], status="completed",
                   created_at=day + (i * 53) % (DAY - 1), finished_at=time.time(),
                   counts={"requests": 1, "input_tokens": 10 + i % 7, "output_tokens": i % 5})
        for i in range(1500)
    ]
    proxy.clear()

    async def record_all() -> None:
        gate = asyncio.Semaphore(16)

        async def one(entry: UsageEntry) -> None:
            async with gate:
                assert await ledger.record(entry, None)

        await asyncio.gather(*(one(e) for e in entries))

    asyncio.run(record_all())

    # The create path reads nothing that grows: no Query, no Scan.
    assert not [r for r in proxy.reads if r.operation in ("Query", "Scan")]
    writes = proxy.bookkeeping()
    assert len(writes) == 3 * 1500  # the USAGE#ID row, the log row, the bucket
    assert_spread(proxy.spread(writes))
    # The keys responses share (all but each one's own USAGE#ID row) spread too.
    shared = proxy.spread([w for w in writes if not w.pk.startswith("USAGE#ID#")])
    assert len(shared) == 2 * SHARDS
    assert_spread(shared)

    # A bucket and a log row written before the shards still count.
    client = make_client()
    old_id = "resp_unsharded0001"
    client.put_item(TableName=table, Item={
        "pk": {"S": f"USAGE#{day_of(day)}"}, "sk": {"S": f"{day:010d}#{tenant_of(KEYS[0])}#old"},
        "tenant": {"S": tenant_of(KEYS[0])}, "model": {"S": "old"},
        "requests": {"N": "1"}, "input_tokens": {"N": "5"}})
    client.put_item(TableName=table, Item={
        "pk": {"S": f"LOG#{day_of(day)}"}, "sk": {"S": f"{day + 1:010d}#{old_id}"},
        "row": {"S": json.dumps({"id": old_id, "created_at": day + 1})}})

    expected: dict[tuple[str, str], list[int]] = {(tenant_of(KEYS[0]), "old"): [1, 5, 0]}
    for e in entries:
        t = expected.setdefault((e.tenant, e.model), [0, 0, 0])
        t[0] += 1
        t[1] += e.counts["input_tokens"]
        t[2] += e.counts["output_tokens"]
    rows = asyncio.run(ledger.buckets(day, day + DAY))
    totals: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        t = totals.setdefault((row.tenant, row.model), [0, 0, 0])
        t[0] += row.counts["requests"]
        t[1] += row.counts["input_tokens"]
        t[2] += row.counts["output_tokens"]
    assert totals == expected
    assert len({(r.hour, r.tenant, r.model) for r in rows}) == len(rows)  # shards summed

    # The log, newest first, page after page, whole.
    listed: list[dict[str, Any]] = []
    before = None
    while True:
        page = asyncio.run(ledger.log(day, day + DAY, 200, before))
        listed += page
        if len(page) < 200:
            break
        before = (page[-1]["created_at"], page[-1]["id"])
    order = [(e.created_at, e.response_id) for e in entries] + [(day + 1, old_id)]
    assert [(r["created_at"], r["id"]) for r in listed] == sorted(order, reverse=True)


def test_a_quiet_month_of_the_log_asks_each_days_shards_side_by_side(
    proxy: RecordingProxy,
) -> None:
    """The admin listing walks back day by day until its page fills: over days with nothing
    in them that is a Query per shard (and the unsharded partition) of every day, asked side
    by side, not one after another (a month was 527 round trips in a row)."""
    table = create_dynamodb_table()
    ledger = store_on(table).usage_store()
    now = int(time.time())
    start = now // DAY * DAY - 30 * DAY
    proxy.clear()
    assert asyncio.run(ledger.log(start, now, 50)) == []
    days = (now // DAY * DAY - start) // DAY + 1
    assert proxy.calls["Query"] == days * (SHARDS + 1)
    assert proxy.most_in_flight >= 2


@pytest.mark.slow
def test_1000_conversations_spread_the_index_and_list_newest_first(
    proxy: RecordingProxy,
) -> None:
    table = create_dynamodb_table()
    store = store_on(table)
    ledger = store.usage_store()
    start = int(time.time()) - 10_000
    made = [StoredConversation(id=f"conv_{uuid.uuid4().hex}", tenant=tenant_of(KEYS[i % 8]),
                               created_at=start + i // 7, metadata={"n": str(i)})
            for i in range(1000)]
    proxy.clear()

    async def create_all() -> None:
        gate = asyncio.Semaphore(16)

        async def one(conv: StoredConversation) -> None:
            async with gate:
                await store.create_conversation(conv, [])

        await asyncio.gather(*(one(c) for c in made))

    asyncio.run(create_all())
    index = [w for w in proxy.writes if w.table.endswith("/conversations")]
    assert len(index) == 1000
    assert_spread(proxy.spread(index))

    def every_page(limit: int, tenant: str | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        after = None
        while True:  # as the admin route pages: limit + 1 tells whether there is more
            page = asyncio.run(ledger.conversations(limit + 1, after, tenant))
            rows += page[:limit]
            if len(page) <= limit:
                return rows
            after = page[limit - 1]["id"]

    newest_first = sorted(made, key=lambda c: (c.created_at, c.id), reverse=True)
    rows = every_page(100)
    assert [r["id"] for r in rows] == [c.id for c in newest_first]
    assert rows[0]["metadata"] == {"n": str(int(newest_first[0].metadata["n"]))}
    one = tenant_of(KEYS[3])
    assert [r["id"] for r in every_page(7, one)] == [
        c.id for c in newest_first if c.tenant == one]


def at_window_start(width: int, need: float) -> None:
    """Wait, if need be, until the window has ``need`` seconds left, so a burst does not
    straddle two windows (the count would be two windows' then)."""
    while width - time.time() % width < need:
        time.sleep(0.05)


@pytest.mark.slow
def test_two_processes_keep_a_limit_exact_under_40_concurrent_requests(
    proxy: RecordingProxy, moto_endpoint: str, upstream: ScriptedUpstream, tmp_path: Path,
) -> None:
    table = create_dynamodb_table()
    env = {**aws_env(moto_endpoint), "AWS_ENDPOINT_URL_DYNAMODB": proxy.url,
           "GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_STORE": f"dynamodb:{table}",
           "GATEWAY_API_KEYS": KEYS[0],
           "GATEWAY_LIMITS": json.dumps({"default": {"requests_per_minute": 10}})}
    with GatewayProcess(env, tmp_path) as one, GatewayProcess(env, tmp_path) as two:
        at_window_start(60, need=20)

        def create(url: str) -> int:
            return httpx.post(url + "/v1/responses", json={"model": "m", "input": "hi"},
                              headers={"Authorization": f"Bearer {KEYS[0]}"},
                              timeout=60).status_code

        with ThreadPoolExecutor(40) as pool:
            codes = Counter(pool.map(create, [one.url, two.url] * 20))
    assert codes == {200: 10, 429: 30}, codes


@pytest.mark.slow
def test_with_30_percent_of_bookkeeping_throttled_every_response_completes_and_counts(
    proxy: RecordingProxy, moto_endpoint: str, upstream: ScriptedUpstream, tmp_path: Path,
) -> None:
    """End to end through openai-python against a gateway process on DynamoDB: the proxy
    throttles 30% of the usage and log writes; every response completes, and the usage API's
    totals come to the client's own tally (the failed writes retried in the background)."""
    table = create_dynamodb_table()
    proxy.throttle = 0.3
    env = {**aws_env(moto_endpoint), "AWS_ENDPOINT_URL_DYNAMODB": proxy.url,
           "GATEWAY_UPSTREAM_URL": upstream.base_url, "GATEWAY_STORE": f"dynamodb:{table}",
           "GATEWAY_API_KEYS": ",".join(KEYS[:3]), "GATEWAY_ADMIN_KEYS": ADMIN}
    with GatewayProcess(env, tmp_path) as gw:
        tally: Counter[tuple[str, str, str]] = Counter()

        def one(i: int) -> None:
            key, model = KEYS[i % 3], MODELS[i % 2]
            client = OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
            if i % 3 == 0:
                with client.responses.stream(model=model, input="word " * (i + 1)) as stream:
                    response = stream.get_final_response()
            else:
                response = client.responses.create(model=model, input="word " * (i + 1))
            assert response.status == "completed"
            assert response.usage is not None
            group = (model, tenant_of(key))
            tally[(*group, "requests")] += 1
            tally[(*group, "input")] += response.usage.input_tokens
            tally[(*group, "output")] += response.usage.output_tokens

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(60)))
        assert sum(proxy.refused.values()) > 0  # the throttling did happen

        deadline = time.monotonic() + 180  # the background retries back off up to a minute
        while True:
            totals = usage_totals(gw.url)
            if totals == tally or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert totals == tally
        assert "could not record the usage" not in gw.stderr()  # nothing given up


def usage_totals(url: str) -> Counter[tuple[str, str, str]]:
    answer = httpx.get(url + "/v1/organization/usage/completions",
                       params={"start_time": int(time.time()) - DAY, "bucket_width": "1d",
                               "limit": 3, "group_by": "model,api_key_id"},
                       headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    totals: Counter[tuple[str, str, str]] = Counter()
    for bucket in answer.json()["data"]:
        for r in bucket["results"]:
            group = (r["model"], r["api_key_id"])
            totals[(*group, "requests")] += r["num_model_requests"]
            totals[(*group, "input")] += r["input_tokens"]
            totals[(*group, "output")] += r["output_tokens"]
    return totals


@pytest.mark.slow
def test_a_throttled_token_reservation_is_retried_and_counted_once(
    proxy: RecordingProxy,
) -> None:
    """The reservation of a key with a tokens-per-minute limit and a budget is one
    transaction over two counters; DynamoDB cancels it with ``ThrottlingError`` when a
    counter's partition runs hot, which botocore does not retry: the store does, and each
    reservation counts once."""
    from responses_gateway.key_limits import Caps, Windows

    table = create_dynamodb_table()
    ledger = store_on(table).usage_store()
    proxy.throttle = 0.5
    proxy.throttled = lambda pk: pk.startswith(("RATE#", "BUDGET#"))
    now = int(time.time())
    windows = Windows(60, now // 60, "2026-12", now + DAY)
    caps = Caps(tokens=10_000, budget=100_000)
    for _ in range(20):
        assert asyncio.run(ledger.reserve("t_throttled", caps, windows, 7)).admitted
    assert proxy.refused["TransactWriteItems"] > 0
    counts = asyncio.run(ledger.counts("t_throttled", windows))
    assert (counts.tokens, counts.budget_tokens) == (140, 140)

"""Usage accounting (issue 34), one suite on SQLite and DynamoDB (moto over HTTP): the ledger's
totals are the sum of the responses' ``usage``, however many run at once, counted once when a
response is run again; the usage API is shaped like OpenAI's and only admin keys read it."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from responses_gateway.api.auth import Authenticator
from responses_gateway.config import Settings, SettingsError, settings_from_env
from responses_gateway.errors import GatewayError
from responses_gateway.responses.job import Job
from responses_gateway.responses.services import build_gateway
from responses_gateway.store.usage import UsageEntry
from responses_gateway.tools.registry import ITEM_COUNTERS
from tests.helpers.file_storage import storage_settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import create_dynamodb_table, use_moto
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

KEYS = ("sk-tenant-one-0123456789", "sk-tenant-two-0123456789")
ADMIN = "admin-key-0123456789abcdef"


@pytest.fixture(params=["sqlite", "dynamodb"])
def settings(request: pytest.FixtureRequest, tmp_path: Path, upstream: ScriptedUpstream,
             monkeypatch: pytest.MonkeyPatch) -> Settings:
    if request.param == "sqlite":
        store = f"sqlite:{tmp_path / 'gateway.db'}"
    else:
        use_moto(monkeypatch, request.getfixturevalue("moto_endpoint"))
        store = "dynamodb:" + create_dynamodb_table()
    return Settings(upstream_url=upstream.base_url, store=store, api_keys=KEYS,
                    admin_keys=(ADMIN,))


def usage_totals(base_url: str, key: str = ADMIN, **params: Any) -> dict[tuple[Any, Any], Any]:
    start = int(time.time()) - 86400
    answer = httpx.get(
        base_url + "/organization/usage/completions",
        params={"start_time": start, "bucket_width": "1h", "limit": 48,
                "group_by": "model,api_key_id", **params},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,  # the ledger's read on moto's DynamoDB on a loaded machine
    )
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert page["object"] == "page"
    totals: dict[tuple[Any, Any], Any] = {}
    for bucket in page["data"]:
        assert bucket["object"] == "bucket"
        assert bucket["end_time"] - bucket["start_time"] == 3600
        for r in bucket["results"]:
            assert r["object"] == "organization.usage.completions.result"
            t = totals.setdefault((r["model"], r["api_key_id"]), [0, 0, 0, 0])
            t[0] += r["num_model_requests"]
            t[1] += r["input_tokens"]
            t[2] += r["output_tokens"]
            t[3] += r["input_cached_tokens"]
    return totals


def tenant_of(key: str) -> str:
    import hashlib

    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def test_concurrent_responses_are_counted_exactly(settings: Settings) -> None:
    """Many responses at once, two keys, two models, stream and not: each (model, key)'s
    totals are the sum of its responses' usage, requests included."""
    with GatewayServer(settings) as gw:
        expected: dict[tuple[str, str], list[int]] = {}

        async def one(i: int) -> None:
            key, model = KEYS[i % 2], ("model-a", "model-b")[i // 2 % 2]
            client = AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
            text = "word " * (i + 1)
            if i % 3 == 0:
                final = None
                async with client.responses.stream(model=model, input=text) as stream:
                    final = await stream.get_final_response()
                usage = final.usage
            else:
                usage = (await client.responses.create(model=model, input=text)).usage
            await client.close()
            assert usage is not None and usage.input_tokens > 0
            t = expected.setdefault((model, tenant_of(key)), [0, 0, 0, 0])
            t[0] += 1
            t[1] += usage.input_tokens
            t[2] += usage.output_tokens
            t[3] += usage.input_tokens_details.cached_tokens

        async def burst() -> None:
            await asyncio.gather(*(one(i) for i in range(24)))

        asyncio.run(burst())
        assert usage_totals(gw.base_url) == expected
        # Filters: one model, one key.
        only = usage_totals(gw.base_url, models="model-a", api_key_ids=tenant_of(KEYS[0]))
        assert only == {k: v for k, v in expected.items()
                        if k == ("model-a", tenant_of(KEYS[0]))}


def test_background_responses_counted_once_when_run_again(settings: Settings) -> None:
    """A background response, then its record run again (a second worker, a retried
    invocation): the ledger refuses the second count, the totals stay the response's."""
    with GatewayServer(settings) as gw:
        client = OpenAI(base_url=gw.base_url, api_key=KEYS[0], max_retries=0)
        created = client.responses.create(model="model-bg", input="hello there",
                                          background=True)
        deadline = time.monotonic() + 20
        final = client.responses.retrieve(created.id)
        while final.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.05)
            final = client.responses.retrieve(created.id)
        assert final.status == "completed" and final.usage is not None
        expected = {("model-bg", tenant_of(KEYS[0])): [
            1, final.usage.input_tokens, final.usage.output_tokens, 0]}
        deadline = time.monotonic() + 5
        while usage_totals(gw.base_url) != expected and time.monotonic() < deadline:
            time.sleep(0.05)  # the worker counts as its job closes, after the terminal write
        assert usage_totals(gw.base_url) == expected

        async def run_again() -> None:
            gateway = build_gateway(settings)
            try:
                record = await gateway.store.get(created.id, tenant_of(KEYS[0]))
                assert record is not None
                again = await Job.from_record(gateway, record).run_to_end()
                assert again["usage"]["input_tokens"] > 0  # it did run and spend
            finally:
                await gateway.aclose()

        asyncio.run(run_again())
        assert usage_totals(gw.base_url) == expected
        # A resumed stream (GET ?stream=true&starting_after=N) replays; it counts nothing.
        replay = httpx.get(f"{gw.base_url}/responses/{created.id}",
                           params={"stream": "true", "starting_after": 0},
                           headers={"Authorization": f"Bearer {KEYS[0]}"}, timeout=20)
        assert "response.completed" in replay.text
        assert usage_totals(gw.base_url) == expected


async def _record_twice(settings: Settings) -> list[bool]:
    gateway = build_gateway(settings)
    try:
        ledger = gateway.store.usage_store()
        assert ledger is not None
        response = {"id": "resp_twice", "created_at": int(time.time()), "output": [
            {"type": "function_call"}, {"type": "mcp_call"}, {"type": "mcp_call"},
            {"type": "image_generation_call"}, {"type": "message"}],
            "usage": {"input_tokens": 11, "output_tokens": 7,
                      "input_tokens_details": {"cached_tokens": 3},
                      "output_tokens_details": {"reasoning_tokens": 2}}}
        entry = UsageEntry.of(response, tenant="t_x", model="m", status="completed",
                              counters=ITEM_COUNTERS)  # the server tools' counters
        results = await asyncio.gather(*(ledger.record(entry, None) for _ in range(5)))
        rows = await ledger.buckets(entry.hour, entry.hour + 1)
        assert len(rows) == 1
        assert rows[0].counts == {"requests": 1, "input_tokens": 11, "cached_tokens": 3,
                                  "output_tokens": 7, "reasoning_tokens": 2,
                                  "image_generations": 1}
        assert rows[0].tool_calls == {"function_call": 1, "mcp_call": 2,
                                      "image_generation_call": 1}
        return list(results)
    finally:
        await gateway.aclose()


def test_a_response_recorded_at_once_from_many_places_counts_once(settings: Settings) -> None:
    assert sorted(asyncio.run(_record_twice(settings))) == [False] * 4 + [True]


def test_usage_api_is_admin_only_and_shaped_like_openais(settings: Settings) -> None:
    with GatewayServer(settings) as gw:
        url = gw.base_url + "/organization/usage/completions"
        start = {"start_time": int(time.time()) - 3600}
        assert httpx.get(url, params=start).status_code == 401
        tenant = httpx.get(url, params=start, headers={"Authorization": f"Bearer {KEYS[0]}"})
        assert tenant.status_code == 403
        assert tenant.json()["error"]["code"] == "insufficient_permissions"
        admin = {"Authorization": f"Bearer {ADMIN}"}
        missing = httpx.get(url, headers=admin)
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "start_time"
        minute = httpx.get(url, params={**start, "bucket_width": "1m"}, headers=admin)
        assert minute.status_code == 400 and minute.json()["error"]["param"] == "bucket_width"
        bogus = httpx.get(url, params={**start, "group_by": "colour"}, headers=admin)
        assert bogus.status_code == 400 and bogus.json()["error"]["param"] == "group_by"
        empty = httpx.get(url, params={**start, "group_by": "project_id"}, headers=admin,
                          timeout=30)
        assert empty.status_code == 200  # OpenAI's value, no projects here: nothing counted
        assert all(b["results"] == [] for b in empty.json()["data"])
        # Days: default 7 buckets of 1d, and paging by next_page.
        page = httpx.get(url, params={"start_time": int(time.time()) - 10 * 86400,
                                      "limit": 3}, headers=admin, timeout=30).json()
        assert len(page["data"]) == 3 and page["has_more"] is True
        following = httpx.get(url, params={"start_time": 0, "page": page["next_page"],
                                           "limit": 3}, headers=admin, timeout=30).json()
        assert following["data"][0]["start_time"] == page["data"][-1]["end_time"]
        # An admin key is no tenant key.
        refused = httpx.post(gw.base_url + "/responses", json={"model": "m", "input": "x"},
                             headers=admin)
        assert refused.status_code == 401


@pytest.mark.parametrize(("path", "param", "value"), [
    ("/organization/usage/completions", "page", "page_" + base64.urlsafe_b64encode(
        b"9" * 60).decode()),
    ("/organization/costs", "page", "page_" + base64.urlsafe_b64encode(
        str(2**70).encode()).decode()),
    ("/organization/usage/completions", "page", "page_wrI="),  # "²": a digit int() refuses
    ("/admin/responses", "after", f"{2**70}:resp_x"),
    ("/admin/responses", "after", "\u00b2:resp_x"),
])
def test_cursors_no_store_can_hold_are_400s(settings: Settings, path: str, param: str,
                                             value: str) -> None:
    """A page token or ``after`` cursor is the client's text: one whose number no 64-bit
    column holds, or that is no number at all, is a 400 naming it, never the store's 500."""
    with GatewayServer(settings) as gw, httpx.Client(
            headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        for _ in range(2):  # the connection is still good after the first answer
            answer = client.get(gw.base_url + path, params={"start_time": 0, param: value})
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] == param
            assert answer.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(("path", "params", "param"), [
    ("/organization/usage/completions", {"start_time": -(2**61), "bucket_width": "1h"},
     "start_time"),
    ("/organization/usage/completions", {"start_time": 2**61}, "start_time"),
    ("/organization/costs", {"start_time": 0, "end_time": -5}, "end_time"),
    ("/organization/costs", {"start_time": 0, "page": "page_" + base64.urlsafe_b64encode(
        str(2**61).encode()).decode()}, "page"),
    ("/admin/responses", {"start_time": -1}, "start_time"),
    ("/organization/costs", {"start_time": 9_999_990_000, "end_time": 10_000_090_000},
     "end_time"),  # the ledger's keys hold 10 digits
])
def test_times_no_calendar_day_holds_are_400s(settings: Settings, path: str,
                                              params: dict[str, Any], param: str) -> None:
    """Usage is kept by UTC day and 10-digit time: a time before the epoch or past 2286 has
    no key (on DynamoDB its day could not even be named: a 500), so it is OpenAI's 400."""
    with GatewayServer(settings) as gw:
        answer = httpx.get(gw.base_url + path, params=params,
                           headers={"Authorization": f"Bearer {ADMIN}"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param


def test_an_after_older_than_start_time_is_an_empty_page(upstream: ScriptedUpstream,
                                                        tmp_path: Path) -> None:
    """``after`` naming a time before ``start_time`` leaves nothing to list: an empty page,
    not a DynamoDB key condition ``BETWEEN`` whose lower bound is above its upper (its
    ValidationException, a 500; moto answers none, so the proxy answers as DynamoDB)."""
    with storage_settings("aws", tmp_path, strict_keys=True) as storage, GatewayServer(
            Settings(upstream_url=upstream.base_url, api_keys=KEYS, admin_keys=(ADMIN,),
                     **storage)) as gw:
        now = int(time.time())
        answer = httpx.get(gw.base_url + "/admin/responses",
                           params={"start_time": now - 3600, "after": f"{now - 7200}:resp_x"},
                           headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["data"] == [] and answer.json()["has_more"] is False


def test_an_admin_key_that_is_also_an_api_key_is_refused_at_start() -> None:
    """Issue 40: a key in both lists silently turned the admin routes off ("set
    GATEWAY_ADMIN_KEYS" although it was set). The settings refuse it, naming the problem and
    the key's position, never the key."""
    shared = "sk-shared-key-0123456789"
    with pytest.raises(SettingsError) as refused:
        settings_from_env({"GATEWAY_API_KEYS": f"{KEYS[0]},{shared}",
                           "GATEWAY_ADMIN_KEYS": f"{ADMIN}, {shared}"})
    message = str(refused.value)
    assert message.startswith("GATEWAY_ADMIN_KEYS and GATEWAY_API_KEYS share a key (the 2nd "
                              "of GATEWAY_ADMIN_KEYS)")
    assert shared not in message and ADMIN not in message
    kept = settings_from_env({"GATEWAY_API_KEYS": KEYS[0], "GATEWAY_ADMIN_KEYS": ADMIN})
    assert (kept.api_keys, kept.admin_keys) == ((KEYS[0],), (ADMIN,))


def test_admin_routes_say_why_they_are_off_when_every_admin_key_is_shared() -> None:
    """Settings built without config.py (as the tests do) still get a message that says
    why, not "set GATEWAY_ADMIN_KEYS"."""
    with pytest.raises(GatewayError) as off:
        Authenticator(KEYS, (KEYS[0],)).admin(f"Bearer {KEYS[0]}")
    assert off.value.status == 403 and off.value.code == "admin_disabled"
    assert "also in GATEWAY_API_KEYS" in off.value.message
    with pytest.raises(GatewayError) as unset:
        Authenticator(KEYS, ()).admin(f"Bearer {KEYS[0]}")
    assert "set GATEWAY_ADMIN_KEYS" in unset.value.message

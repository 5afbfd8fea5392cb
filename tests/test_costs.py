"""Prices and costs (issue 44): GATEWAY_PRICES priced over the usage ledger; OpenAI's Costs API
(``GET /v1/organization/costs``) answers what the gateway's own responses cost, equal to a
tally of their ``usage`` under the same prices; the usage API carries the cost beside the
tokens; a key's dollar budget (``usd_per_day``) refuses with OpenAI's 429."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.admin.organization.usage_costs_response import UsageCostsResponse

from responses_gateway.config import Settings, SettingsError, settings_from_env
from responses_gateway.key_limits import parse_limits
from responses_gateway.prices import (
    BEDROCK_ON_DEMAND,
    Price,
    Prices,
    Pricing,
    parse_prices,
)
from responses_gateway.settings import Route
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import sqlite_or_dynamodb
from tests.helpers.scripted_upstream import ScriptedUpstream

KEYS = ("sk-priced-one-0123456789", "sk-priced-two-0123456789")
ADMIN = "admin-key-0123456789abcdef"
PRICES = {"model-a": {"input": 2.5, "output": 10.0},
          "model-b": {"input": 0.15, "cached_input": 0.075, "output": 0.6},
          "default": {"image": 0.04, "search": 0.01}}


def tenant_of(key: str) -> str:
    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


# -- prices, unit ------------------------------------------------------------------------------


def test_prices_are_read_and_checked() -> None:
    prices = parse_prices(json.dumps(PRICES))
    assert prices.models["model-a"] == Price(input=2.5, output=10.0)
    assert prices.default == Price(image=0.04, search=0.01)
    for bad, says in [("[1]", "expected an object"), ('{"m": {"inputs": 1}}', "unknown field"),
                      ('{"m": {"input": -1}}', "US dollars"), ('{"m": 3}', "m: expected"),
                      ("{", "not JSON")]:
        with pytest.raises(ValueError, match=says):
            parse_prices(bad)
    with pytest.raises(SettingsError, match="GATEWAY_PRICES"):
        settings_from_env({"GATEWAY_PRICES": '{"m": {"input": "cheap"}}'})
    assert settings_from_env({"GATEWAY_PRICES": json.dumps(PRICES)}).prices == prices


def test_a_bedrock_model_is_priced_by_its_model_id_and_the_setting_wins() -> None:
    def route(model: str) -> Route:
        return Route("bedrock", "us.anthropic.claude-3-5-haiku-20241022-v1:0") \
            if model == "haiku" else Route("openai", model)

    shipped = BEDROCK_ON_DEMAND["anthropic.claude-3-5-haiku-20241022-v1:0"]
    pricing = Pricing(None, route)
    assert pricing.price("haiku").input == shipped.input
    assert pricing.price("gpt-x") == Price(0.0, 0.0, 0.0, 0.0, 0.0)  # unknown: free
    cost = pricing.cost("haiku", {"input_tokens": 1_000_000, "cached_tokens": 400_000,
                                  "output_tokens": 10})
    assert cost.amounts["input"] == pytest.approx(600_000 * shipped.input / 1e6)
    assert cost.amounts["cached input"] == pytest.approx(400_000 * shipped.cached_input / 1e6)
    # The setting wins field by field; the default entry fills the rest.
    mine = Pricing(Prices(Price(image=0.5), {"haiku": Price(output=1.0)}), route)
    assert mine.price("haiku") == Price(input=shipped.input, cached_input=shipped.cached_input,
                                        output=1.0, image=0.5, search=0.0)
    assert mine.cost("gpt-x", {"image_generations": 3}).amounts["image generation"] == 1.5


def test_dollar_budgets_are_read_from_the_limits() -> None:
    limits = parse_limits('{"default": {"usd_per_day": 2.5}, "t_x": {"usd_per_month": 40}}')
    assert limits.default.dollars == (("day", 2.5),)
    assert limits.keys["t_x"].dollars == (("day", 2.5), ("month", 40.0))
    assert limits.default.any and not limits.default.counted
    with pytest.raises(ValueError, match="US dollars"):
        parse_limits('{"default": {"usd_per_day": "ten"}}')


# -- the Costs API, end to end -----------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("dynamodb", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return sqlite_or_dynamodb(request, tmp_path)


def costs(base_url: str, key: str = ADMIN, **params: Any) -> httpx.Response:
    return httpx.get(base_url + "/organization/costs",  # 30 s: the ledger on a loaded moto
                     params={"start_time": int(time.time()) - 86400, **params},
                     headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_the_costs_api_prices_the_gateways_own_usage(upstream: ScriptedUpstream,
                                                     store: str) -> None:
    settings = Settings(upstream_url=upstream.base_url, store=store, api_keys=KEYS,
                        admin_keys=(ADMIN,), prices=parse_prices(json.dumps(PRICES)))
    with GatewayServer(settings) as gw:
        tally: dict[tuple[str, str], float] = {}  # (line item, tenant): USD
        quantities: dict[str, int] = {}
        for i in range(6):
            key, model = KEYS[i % 2], ("model-a", "model-b", "model-c")[i % 3]
            client = OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
            usage = client.responses.create(model=model, input="word " * (3 + i)).usage
            assert usage is not None and usage.input_tokens > 0
            price = PRICES.get(model, {})
            cached = usage.input_tokens_details.cached_tokens
            for line, n, per in [
                    ("input", usage.input_tokens - cached, price.get("input", 0)),
                    ("cached input", cached, price.get("cached_input", price.get("input", 0))),
                    ("output", usage.output_tokens, price.get("output", 0))]:
                if n:
                    item = f"{model}, {line}"
                    tally[item, tenant_of(key)] = (tally.get((item, tenant_of(key)), 0.0)
                                                   + n * per / 1e6)
                    quantities[item] = quantities.get(item, 0) + n

        answer = costs(gw.base_url, group_by=["line_item", "api_key_id"], limit=2)
        assert answer.status_code == 200, answer.text
        page = UsageCostsResponse.model_validate(answer.json())  # openai-python's own type
        assert page.object == "page" and len(page.data) == 2
        found: dict[tuple[str, str], float] = {}
        counted: dict[str, int] = {}
        for bucket in page.data:
            assert bucket.end_time - bucket.start_time == 86400
            assert bucket.start_time % 86400 == 0
            for result in bucket.results:
                assert result.object == "organization.costs.result"
                assert result.amount is not None and result.amount.currency == "usd"
                assert result.project_id is None
                assert result.line_item is not None and result.api_key_id is not None
                found[result.line_item, result.api_key_id] = result.amount.value
                counted[result.line_item] = counted.get(result.line_item, 0) \
                    + int(result.quantity or 0)
                assert result.quantity_unit == "tokens"
        assert found.keys() == tally.keys()  # model-c is unpriced: it costs $0
        for item, value in tally.items():
            assert found[item] == pytest.approx(value, rel=1e-9), item
        assert counted == quantities
        # Ungrouped: one total a day, the sum of everything.
        total = sum(r["amount"]["value"] for b in costs(gw.base_url).json()["data"]
                    for r in b["results"])
        assert total == pytest.approx(sum(tally.values()), rel=1e-9)
        # Filters: one key, one line item.
        only = costs(gw.base_url, api_key_ids=tenant_of(KEYS[0]),
                     line_items="model-a, output").json()
        value = sum(r["amount"]["value"] for b in only["data"] for r in b["results"])
        assert value == pytest.approx(tally.get(("model-a, output", tenant_of(KEYS[0])), 0.0))
        # The usage API carries each group's cost beside its tokens.
        usage_page = httpx.get(gw.base_url + "/organization/usage/completions",
                               params={"start_time": int(time.time()) - 86400,
                                       "group_by": "api_key_id"},
                               headers={"Authorization": f"Bearer {ADMIN}"},
                               timeout=30).json()
        by_key: dict[str, float] = {}
        for bucket in usage_page["data"]:
            for r in bucket["results"]:
                assert r["cost"]["currency"] == "usd"
                by_key[r["api_key_id"]] = by_key.get(r["api_key_id"], 0.0) + r["cost"]["value"]
        for key in KEYS:
            assert by_key[tenant_of(key)] == pytest.approx(
                sum(v for (_, t), v in tally.items() if t == tenant_of(key)), rel=1e-9)


def test_the_costs_api_checks_its_parameters_like_openai(upstream: ScriptedUpstream,
                                                         tmp_path: Path) -> None:
    settings = Settings(upstream_url=upstream.base_url, store=f"sqlite:{tmp_path / 'g.db'}",
                        api_keys=KEYS, admin_keys=(ADMIN,))
    with GatewayServer(settings) as gw:
        assert costs(gw.base_url, key=KEYS[0]).status_code == 403
        missing = httpx.get(gw.base_url + "/organization/costs",
                            headers={"Authorization": f"Bearer {ADMIN}"})
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "start_time"
        for params, param in [({"bucket_width": "1h"}, "bucket_width"),
                              ({"limit": 181}, "limit"), ({"group_by": "model"}, "group_by")]:
            refused = costs(gw.base_url, **params)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param
        page = costs(gw.base_url, start_time=int(time.time()) - 10 * 86400, limit=3).json()
        assert len(page["data"]) == 3 and page["has_more"] is True
        following = costs(gw.base_url, page=page["next_page"], limit=3).json()
        assert following["data"][0]["start_time"] == page["data"][-1]["end_time"]
        assert costs(gw.base_url, project_ids="proj_1").json()["data"][-1]["results"] == []


# -- a dollar budget ---------------------------------------------------------------------------


def test_a_key_past_its_dollar_budget_gets_openais_429(upstream: ScriptedUpstream,
                                                       store: str) -> None:
    """One response costs more than the key's day budget: the next create is refused with
    ``insufficient_quota`` (openai-python's RateLimitError), the other key still passes."""
    limits = parse_limits(json.dumps({tenant_of(KEYS[0]): {"usd_per_day": 0.0001}}))
    settings = Settings(upstream_url=upstream.base_url, store=store, api_keys=KEYS,
                        admin_keys=(ADMIN,), limits=limits,
                        prices=parse_prices('{"model-a": {"input": 100, "output": 100}}'))
    with GatewayServer(settings) as gw:
        client = OpenAI(base_url=gw.base_url, api_key=KEYS[0], max_retries=0)
        first = client.responses.create(model="model-a", input="word " * 20)
        assert first.usage is not None
        spent = (first.usage.input_tokens + first.usage.output_tokens) * 100 / 1e6
        assert spent > 0.0001
        with pytest.raises(openai.RateLimitError) as refused:
            client.responses.create(model="model-a", input="again")
        error = refused.value
        assert error.code == "insufficient_quota" and error.type == "insufficient_quota"
        assert "usd_per_day" in error.message and f"{spent:.4f}" in error.message
        assert int(error.response.headers["retry-after"]) <= 86400
        other = OpenAI(base_url=gw.base_url, api_key=KEYS[1], max_retries=0)
        assert other.responses.create(model="model-a", input="hi").status == "completed"
        # The limits view shows the budget.
        limits_view = httpx.get(gw.base_url + "/admin/limits", timeout=30,
                                headers={"Authorization": f"Bearer {ADMIN}"}).json()
        mine = next(k for k in limits_view["keys"] if k["api_key_id"] == tenant_of(KEYS[0]))
        assert mine["limits"]["usd_per_day"] == 0.0001


def test_a_keys_spend_sums_closed_hours_once_and_reads_the_current_hour_again() -> None:
    """limiter.spent: the day's closed hours are read once per ledger; the current hour on
    every call, so a response counted now is seen by the next request."""
    import asyncio

    from responses_gateway.limiter import spent
    from responses_gateway.store.usage import UsageRow

    day = 86400 * 20000
    now = day + 5 * 3600 + 120  # 05:02 UTC

    class Ledger:
        def __init__(self) -> None:
            self.asked: list[tuple[int, int]] = []
            self.rows = [UsageRow(day + 3600, "t_a", "m", {"input_tokens": 1_000_000}),
                         UsageRow(day + 3 * 3600, "t_b", "m", {"input_tokens": 1_000_000}),
                         UsageRow(day - 3600, "t_a", "m", {"input_tokens": 9_000_000})]

        async def buckets(self, start: int, end: int) -> list[UsageRow]:
            self.asked.append((start, end))
            return [r for r in self.rows if start <= r.hour < end]

    pricing = Pricing(Prices(models={"m": Price(input=2.0)}))
    ledger = Ledger()
    assert asyncio.run(spent(ledger, pricing, "t_a", "day", now)) == pytest.approx(2.0)
    assert ledger.asked == [(day, day + 5 * 3600), (day + 5 * 3600, day + 6 * 3600)]
    ledger.rows.append(UsageRow(day + 5 * 3600, "t_a", "m", {"input_tokens": 500_000}))
    assert asyncio.run(spent(ledger, pricing, "t_a", "day", now + 60)) == pytest.approx(3.0)
    assert ledger.asked[2:] == [(day + 5 * 3600, day + 6 * 3600)]  # the closed hours: kept
    # Another ledger (another store) has its own.
    assert asyncio.run(spent(Ledger(), pricing, "t_b", "day", now)) == pytest.approx(2.0)

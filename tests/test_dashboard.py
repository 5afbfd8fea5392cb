"""The admin surface (issue 34.3, 34.4), on SQLite and DynamoDB (moto): only admin keys open
the admin routes, what they and the dashboard show holds no key or MCP header, and the
dashboard works in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium; nothing is downloaded): it lists a stored response, opens it, shows its
events and draws the usage chart.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from responses_gateway.api.app import ADMIN_PATHS
from responses_gateway.config import Settings
from responses_gateway.prices import parse_prices
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.mcp_server import McpTestServer
from tests.helpers.moto_server import create_dynamodb_table, moto_server, use_moto
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

TENANT_KEY = "sk-tenant-dashboard-0123456789"
ADMIN_KEY = "admin-dashboard-key-0123456789"
UPSTREAM_KEY = "sk-upstream-secret-0123456789"
MCP_SECRET = "mcp-header-secret-0123456789"
MCP_TOKEN = "mcp-bearer-token-0123456789"
SECRETS = (TENANT_KEY, ADMIN_KEY, UPSTREAM_KEY, MCP_SECRET, MCP_TOKEN)
TENANT = "t_" + hashlib.sha256(TENANT_KEY.encode()).hexdigest()[:32]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path_factory.mktemp('dashboard') / 'gateway.db'}"
        return
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as env:
        use_moto(env, endpoint)
        yield "dynamodb:" + create_dynamodb_table()


@pytest.fixture(scope="module")
def site(store: str) -> Iterator[dict[str, Any]]:
    """A gateway with a background MCP response, a foreground one and a conversation."""
    with ScriptedUpstream() as upstream, McpTestServer() as mcp:
        settings = Settings(upstream_url=upstream.base_url, upstream_api_key=UPSTREAM_KEY,
                            store=store, api_keys=(TENANT_KEY,),
                            admin_keys=(ADMIN_KEY,), mcp_allow_hosts=("127.0.0.1",),
                            prices=parse_prices('{"default": {"input": 1000, "output": 2000}}'))
        with GatewayServer(settings) as gw:
            client = OpenAI(base_url=gw.base_url, api_key=TENANT_KEY, max_retries=0)
            tool: Any = {"type": "mcp", "server_label": "lab", "server_url": mcp.url,
                         "require_approval": "never", "headers": {"X-Api-Key": MCP_SECRET},
                         "authorization": MCP_TOKEN}
            background = client.responses.create(
                model="model-mcp", tools=[tool], background=True,
                input="[[script:tool names=lab__search args='{\"query\": \"mcp\"}']] go")
            deadline = time.monotonic() + 30
            while client.responses.retrieve(background.id).status in ("queued", "in_progress"):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            foreground = client.responses.create(model="model-plain", input="plain hello")
            conversation = client.conversations.create(
                items=[{"type": "message", "role": "user", "content": "conversation hello"}])
            client.responses.create(model="model-plain", input="in the conversation",
                                    conversation=conversation.id)
            time.sleep(0.3)  # the background worker counts its usage as its job closes
            yield {"gw": gw, "background": background.id, "foreground": foreground.id,
                   "conversation": conversation.id}


def admin_get(gw: GatewayServer, path: str, key: str | None = ADMIN_KEY,
              **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(gw.url + path, params=params, headers=headers, timeout=20)


def concrete(path: str, site: dict[str, Any]) -> str:
    return path.replace("{response_id}", site["background"]).replace(
        "{conversation_id}", site["conversation"])


def test_every_admin_route_refuses_tenant_keys_and_strangers(site: dict[str, Any]) -> None:
    gw = site["gw"]
    for path in ADMIN_PATHS:
        url = concrete(path, site)
        params = {"start_time": 0}
        assert admin_get(gw, url, None, **params).status_code == 401, path
        assert admin_get(gw, url, "not-a-key", **params).status_code == 401, path
        tenant = admin_get(gw, url, TENANT_KEY, **params)
        assert tenant.status_code == 403, path
        assert tenant.json()["error"]["code"] == "insufficient_permissions"
        assert admin_get(gw, url, **params).status_code == 200, path


def test_admin_routes_list_across_tenants_and_hold_no_secret(site: dict[str, Any]) -> None:
    gw = site["gw"]
    listed = admin_get(gw, "/v1/admin/responses").json()
    ids = [row["id"] for row in listed["data"]]
    assert site["background"] in ids and site["foreground"] in ids
    assert {row["api_key_id"] for row in listed["data"]} == {TENANT}
    only_mcp = admin_get(gw, "/v1/admin/responses", model="model-mcp").json()
    assert [row["id"] for row in only_mcp["data"]] == [site["background"]]
    detail = admin_get(gw, f"/v1/admin/responses/{site['background']}").json()
    assert [e["type"] for e in detail["events"]][:2] == ["response.created", "response.queued"]
    assert detail["events"][-1]["type"] == "response.completed"
    assert [i["type"] for i in detail["response"]["output"]] == [
        "mcp_list_tools", "mcp_call", "message"]
    assert detail["summary"]["tool_calls"] == {"mcp_call": 1}
    conversations = admin_get(gw, "/v1/admin/conversations").json()
    assert site["conversation"] in [c["id"] for c in conversations["data"]]
    items = admin_get(gw, f"/v1/admin/conversations/{site['conversation']}/items").json()
    assert len(items["data"]) == 3  # its first item, the turn's input, the answer
    bodies = [admin_get(gw, concrete(path, site), start_time=0).text for path in ADMIN_PATHS]
    bodies += [httpx.get(gw.url + path).text for path in
               ("/dashboard", "/dashboard/app.js", "/dashboard/style.css")]
    for body in bodies:
        for secret in SECRETS:
            assert secret not in body


@pytest.mark.browser
def test_dashboard_in_headless_chromium(site: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager never downloads a thing
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import Select, WebDriverWait

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("no chromium and chromedriver on this machine: scripts/test-deps.sh "
                    "installs them where apt-get exists (README, Run the tests)")
    gw = site["gw"]
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        wait = WebDriverWait(driver, 20)
        driver.get(gw.url + "/dashboard")
        status = driver.find_element(By.ID, "status")
        wait.until(lambda _: "admin key" in status.text)  # nothing shown without a key
        driver.find_element(By.ID, "key").send_keys(ADMIN_KEY)
        driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        row = wait.until(ready.presence_of_element_located(
            (By.CSS_SELECTOR, f"#response-list tr[data-id='{site['background']}']")))
        assert "model-mcp" in row.text and TENANT in row.text
        row.click()
        events = wait.until(ready.visibility_of_element_located((By.ID, "detail-events")))
        wait.until(lambda _: "response.completed" in events.text)
        assert "response.mcp_call.completed" in events.text
        output = driver.find_element(By.ID, "detail-output").text
        assert "mcp_call" in output and "3 results for mcp" in output
        assert "go" in driver.find_element(By.ID, "detail-input").text
        # Usage: a bar per model in today's bucket, the table's totals.
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=usage]").click()
        bars = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#usage-chart rect.bar"))
        assert len(bars) >= 2 and all(float(b.get_attribute("height")) > 0 for b in bars)
        table = driver.find_element(By.ID, "usage-table").text
        assert "model-mcp" in table and "model-plain" in table
        # The cost beside the tokens (GATEWAY_PRICES), and the chart in dollars.
        costs = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#usage-table td.cost")]
        assert costs and all(c.startswith("$") and float(c[1:]) > 0 for c in costs), costs
        Select(driver.find_element(By.CSS_SELECTOR, "#usage-filters select[name=measure]")
               ).select_by_value("cost")
        driver.find_element(By.CSS_SELECTOR, "#usage-filters button[type=submit]").click()
        wait.until(lambda d: any(t.text.startswith("$") for t in d.find_elements(
            By.CSS_SELECTOR, "#usage-chart text")))
        # Conversations and their items; limits.
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=conversations]").click()
        conv = wait.until(lambda d: [r for r in d.find_elements(
            By.CSS_SELECTOR, "#conversation-list tr.row") if site["conversation"] in r.text])
        conv[0].click()
        wait.until(lambda d: "conversation hello" in d.find_element(
            By.ID, "conversation-items").text)
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=limits]").click()
        wait.until(lambda d: TENANT in d.find_element(By.ID, "limits-keys").text)
        page = driver.page_source
        for secret in SECRETS:
            assert secret not in page
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], json.dumps(errors)  # no script error, no CSP refusal
    finally:
        driver.quit()


def test_through_a_function_url_event(tmp_path: Path) -> None:
    """The page and the admin routes answer a function URL's event (the buffered entry)."""
    from responses_gateway.entry.lambda_buffered import make_handler

    root = Path(__file__).resolve().parent.parent
    template = json.loads((root / "events" / "retrieve_response.json").read_text())
    handler = make_handler(Settings(store=f"sqlite:{tmp_path / 'g.db'}",
                                    api_keys=(TENANT_KEY,), admin_keys=(ADMIN_KEY,)))

    def invoke(path: str, key: str) -> dict[str, Any]:
        event = json.loads(json.dumps(template))
        event["rawPath"] = event["requestContext"]["http"]["path"] = path
        event["headers"]["authorization"] = f"Bearer {key}"
        return handler(event, None)

    page = invoke("/dashboard", "")
    assert page["statusCode"] == 200 and "dashboard/app.js" in page["body"]
    assert "script-src 'self'" in page["headers"]["content-security-policy"]
    assert invoke("/v1/admin/limits", ADMIN_KEY)["statusCode"] == 200
    assert invoke("/v1/admin/limits", TENANT_KEY)["statusCode"] == 403

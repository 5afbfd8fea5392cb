"""The admin surface (issue 34.3, 34.4, 44), on SQLite and DynamoDB (moto): only admin keys
open the admin routes, what they and the dashboard show holds no key or MCP header, and the
dashboard works in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium; nothing is downloaded): it lists a stored response, opens it, shows its
events and draws the usage chart; a failed, a cancelled (client gone), an incomplete, a
background-cancelled, a tool-running and an image response each open at their own URL
with their error, timing, steps and image (screenshots kept in ``$DASHBOARD_SCREENSHOTS``
when set); keys show by name; "Forget key" empties the page.
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
import openai
import pytest
from openai import OpenAI

from responses_gateway.api.app import ADMIN_PATHS
from responses_gateway.config import Settings
from responses_gateway.prices import parse_prices
from responses_gateway.settings import ApiKeys
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.image_servers import FakeImagesServer
from tests.helpers.mcp_server import McpTestServer
from tests.helpers.moto_server import (
    create_dynamodb_table,
    moto_server,
    unique_table_name,
    use_moto,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

TENANT_KEY = "sk-tenant-dashboard-0123456789"
ADMIN_KEY = "admin-dashboard-key-0123456789"
UPSTREAM_KEY = "sk-upstream-secret-0123456789"
MCP_SECRET = "mcp-header-secret-0123456789"
MCP_TOKEN = "mcp-bearer-token-0123456789"
IMAGE_KEY = "sk-image-server-secret-0123456789"
KEY_NAME = "team-a"
SECRETS = (TENANT_KEY, ADMIN_KEY, UPSTREAM_KEY, MCP_SECRET, MCP_TOKEN, IMAGE_KEY)
TENANT = "t_" + hashlib.sha256(TENANT_KEY.encode()).hexdigest()[:32]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Any]]:
    """The store's settings (with DynamoDB, generated images go to an S3 bucket)."""
    if request.param == "sqlite":
        yield {"store": f"sqlite:{tmp_path_factory.mktemp('dashboard') / 'gateway.db'}"}
        return
    import boto3

    with moto_server() as endpoint, pytest.MonkeyPatch.context() as env:
        use_moto(env, endpoint)
        bucket = unique_table_name("dashboard-images")
        boto3.client("s3").create_bucket(Bucket=bucket)
        yield {"store": "dynamodb:" + create_dynamodb_table(), "image_bucket": bucket}


TOOL_ARGS = json.dumps({"query": "mcp", "size": 3000, "message": "the tool broke"})


@pytest.fixture(scope="module")
def site(store: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A gateway with a background MCP response, a foreground one and a conversation; a
    failed, a cancelled, a tool-running (one call fails, one answers at length) and an image
    response. The tenant's key is named (GATEWAY_API_KEYS' JSON form)."""
    with ScriptedUpstream() as upstream, McpTestServer() as mcp, \
            FakeImagesServer(api_key=IMAGE_KEY) as images:
        settings = Settings(upstream_url=upstream.base_url, upstream_api_key=UPSTREAM_KEY,
                            api_keys=ApiKeys.named({KEY_NAME: TENANT_KEY}),
                            admin_keys=(ADMIN_KEY,), mcp_allow_hosts=("127.0.0.1",),
                            image_backend="openai", image_url=images.base_url,
                            image_api_key=IMAGE_KEY, image_model="gpt-image-1",
                            image_timeout=10.0,
                            prices=parse_prices('{"default": {"input": 1000, "output": 2000}}'),
                            **store)
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
            failed = None
            for event in client.responses.create(
                    model="model-fails", stream=True,
                    input="[[script:error_event after=2 message='the model broke down' "
                          "code=model_error]]"):
                if event.type == "response.failed":
                    failed = event.response
            assert failed is not None and failed.error is not None
            tools = client.responses.create(
                model="model-tools", tools=[tool],
                input=f"[[script:tool names=lab__search,lab__huge,lab__fail args='{TOOL_ARGS}']]")
            image = client.responses.create(
                model="model-image", tools=[{"type": "image_generation"}],
                input="[[script:tool names=image_generation "
                      "args='{\"prompt\": \"a lighthouse\"}']] draw")
            cancelled = _cancelled(gw)
            incomplete = client.responses.create(model="model-length",
                                                 input="[[script:length]] go")
            assert incomplete.status == "incomplete"
            stopped = _background_cancelled(client)
            time.sleep(0.3)  # the background worker counts its usage as its job closes
            deadline = time.monotonic() + 20  # the cancelled one is counted as its job closes
            for done in (cancelled, stopped):
                while (admin_get(gw, f"/v1/admin/responses/{done}").json().get("summary")
                       or {}).get("status") != "cancelled":
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            yield {"gw": gw, "background": background.id, "foreground": foreground.id,
                   "conversation": conversation.id, "failed": failed, "tools": tools,
                   "image": image, "cancelled": cancelled, "incomplete": incomplete,
                   "stopped": stopped}


def _cancelled(gw: GatewayServer) -> str:
    """A streamed response whose client goes away after its first delta: its id."""
    with httpx.stream("POST", gw.base_url + "/responses", timeout=30,
                      headers={"Authorization": f"Bearer {TENANT_KEY}"},
                      json={"model": "model-slow", "stream": True,
                            "input": "[[script:slow n=40 delay=0.1]]"}) as stream:
        response_id = None
        for line in stream.iter_lines():
            if line.startswith("data: ") and response_id is None:
                response_id = json.loads(line[6:])["response"]["id"]
            if '"response.output_text.delta"' in line:
                break
    assert response_id is not None
    return response_id


def _background_cancelled(client: OpenAI) -> str:
    """A background response cancelled (POST /v1/responses/{id}/cancel) while it streams: its
    id."""
    started = client.responses.create(model="model-slow-background", background=True,
                                      input="[[script:slow n=200 delay=0.1]]")
    deadline = time.monotonic() + 20
    while client.responses.retrieve(started.id).status == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert client.responses.cancel(started.id).status == "cancelled"
    return started.id


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
    from selenium.common.exceptions import StaleElementReferenceException
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
        assert "model-mcp" in row.text and TENANT in row.text and KEY_NAME in row.text
        row.click()
        wait.until(ready.visibility_of_element_located((By.ID, "detail-events-title"))).click()
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
        # (a response cancelled before any usage, model-slow's, costs nothing)
        rows = {r.find_element(By.CSS_SELECTOR, "td").text: r.find_element(
            By.CSS_SELECTOR, "td.cost").text for r in driver.find_elements(
            By.CSS_SELECTOR, "#usage-table tbody tr")}
        assert costs and all(c.startswith("$") for c in costs), costs
        assert float(rows["model-mcp"][1:]) > 0 and float(rows["model-plain"][1:]) > 0, rows
        Select(driver.find_element(By.CSS_SELECTOR, "#usage-filters select[name=measure]")
               ).select_by_value("cost")
        driver.find_element(By.CSS_SELECTOR, "#usage-filters button[type=submit]").click()
        # (the chart is drawn again as the answer comes: an element read may go stale)
        WebDriverWait(driver, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: any(t.text.startswith("$") for t in d.find_elements(
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



def detail_of(gw: GatewayServer, response_id: str) -> dict[str, Any]:
    answer = admin_get(gw, f"/v1/admin/responses/{response_id}")
    assert answer.status_code == 200, answer.text
    detail: dict[str, Any] = answer.json()
    return detail


def test_admin_detail_says_why_it_failed_and_where_the_time_went(site: dict[str, Any]) -> None:
    """Issue 44: the summary carries the error, the timing and the steps; keys by name."""
    gw = site["gw"]
    failed = site["failed"]
    summary = detail_of(gw, failed.id)["summary"]
    assert summary["status"] == "failed"
    assert summary["error"] == {"code": failed.error.code, "message": failed.error.message}
    assert "the model broke down" in summary["error"]["message"]
    timing = summary["timing"]
    assert timing["duration_ms"] >= timing["first_output_ms"] > 0
    assert abs(timing["started_at"] - summary["created_at"]) < 5
    [turn] = timing["steps"]  # the one model turn, failed with the response's code
    assert turn["type"] == "model" and turn["error"] == failed.error.code
    assert turn["start_ms"] + turn["duration_ms"] <= timing["duration_ms"] + 0.2

    steps = detail_of(gw, site["tools"].id)["summary"]["timing"]["steps"]
    assert [(s["type"], s["name"]) for s in steps] == [
        ("model", "model-tools"), ("mcp", "lab.search"), ("model", "model-tools"),
        ("mcp", "lab.huge"), ("model", "model-tools"), ("mcp", "lab.fail"),
        ("model", "model-tools")]
    assert [s["error"] for s in steps] == [None] * 5 + ["mcp_tool_execution_error", None]
    starts = [s["start_ms"] for s in steps]
    assert starts == sorted(starts)
    assert all(s["duration_ms"] >= 0 for s in steps)

    cancelled = detail_of(gw, site["cancelled"])["summary"]
    assert cancelled["status"] == "cancelled" and cancelled["error"]["code"] == "cancelled"
    assert "went away" in cancelled["error"]["message"]
    assert cancelled["timing"]["steps"][0]["error"] == "cancelled"
    stopped = detail_of(gw, site["stopped"])["summary"]
    assert stopped["status"] == "cancelled" and stopped["error"]["code"] == "cancelled"
    assert "/cancel" in stopped["error"]["message"]
    incomplete = detail_of(gw, site["incomplete"].id)["summary"]
    assert incomplete["status"] == "incomplete"
    assert incomplete["error"]["code"] == "max_output_tokens"

    image = detail_of(gw, site["image"].id)
    assert [s["type"] for s in image["summary"]["timing"]["steps"]] == [
        "model", "image_generation", "model"]
    assert image["summary"]["error"] is None
    [call] = [i for i in image["response"]["output"] if i["type"] == "image_generation_call"]
    assert call["result"] == site["image"].output[0].result  # the image itself, to show it

    # Refused by the upstream before any output (the client got the HTTP error): "rejected".
    client = OpenAI(base_url=gw.base_url, api_key=TENANT_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="model-refused", input=(
            "[[script:error status=400 code=context_length_exceeded "
            "message='too long for this model']]"))
    deadline = time.monotonic() + 10
    while not (refused := admin_get(gw, "/v1/admin/responses", model="model-refused"
                                    ).json()["data"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    summary = detail_of(gw, refused[0]["id"])["summary"]
    assert summary["status"] == "rejected"
    assert "too long for this model" in summary["error"]["message"]
    assert summary["timing"]["steps"][0]["error"] == summary["error"]["code"]
    assert summary["timing"]["first_output_ms"] is None

    listed = admin_get(gw, "/v1/admin/responses", limit=100).json()["data"]
    assert {row["api_key_name"] for row in listed} == {KEY_NAME}
    assert all("steps" not in row["timing"] for row in listed if "timing" in row)
    by_name = admin_get(gw, "/v1/admin/responses", api_key_id=KEY_NAME).json()["data"]
    assert len(by_name) == len(listed)
    conversations = admin_get(gw, "/v1/admin/conversations").json()["data"]
    assert {c["api_key_name"] for c in conversations} == {KEY_NAME}
    limits = admin_get(gw, "/v1/admin/limits").json()
    assert [(k["api_key_id"], k["api_key_name"]) for k in limits["keys"]] == [
        (TENANT, KEY_NAME)]


def test_usage_api_names_the_key_beside_its_id(site: dict[str, Any]) -> None:
    """OpenAI's usage result has no key name (its API key objects do, as ``name``): the
    gateway adds ``api_key_name`` beside ``api_key_id``, and the page still validates as
    OpenAI's."""
    from openai.types.admin.organization.usage_completions_response import (
        UsageCompletionsResponse,
    )

    gw = site["gw"]
    start = int(time.time()) - 3600
    by_key = admin_get(gw, "/v1/organization/usage/completions", start_time=start,
                       bucket_width="1h", group_by="api_key_id").json()
    UsageCompletionsResponse.model_validate(by_key)
    results = [r for b in by_key["data"] for r in b["results"]]
    assert results and {(r["api_key_id"], r["api_key_name"]) for r in results} == {
        (TENANT, KEY_NAME)}
    by_model = admin_get(gw, "/v1/organization/usage/completions", start_time=start,
                         bucket_width="1h", group_by="model").json()
    assert {r["api_key_name"] for b in by_model["data"] for r in b["results"]} == {None}
    for body in (json.dumps(by_key), json.dumps(by_model)):
        assert TENANT_KEY not in body


def _chromium(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager never downloads a thing
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("no chromium and chromedriver on this machine: scripts/test-deps.sh "
                    "installs them where apt-get exists (README, Run the tests)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@pytest.mark.browser
def test_dashboard_opens_failed_cancelled_tool_and_image_responses(
        site: dict[str, Any], store: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Each opened at its own URL and read from the DOM; screenshots of each; Forget key
    empties the page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    engine = store["store"].partition(":")[0]
    gw = site["gw"]
    driver = _chromium(monkeypatch)
    try:
        wait = WebDriverWait(driver, 20)
        by_id = driver.find_element

        def opened(response_id: str) -> None:
            wait.until(lambda d: d.find_element(By.ID, "detail-title").text == response_id
                       and d.find_element(By.ID, "response-detail").is_displayed())
            assert driver.current_url.endswith(f"#/responses/{response_id}")

        def click_row(response_id: str) -> None:
            wait.until(lambda d: d.find_elements(
                By.CSS_SELECTOR, f"#response-list tr[data-id='{response_id}']"))[0].click()
            opened(response_id)

        # A shared link to the failed response: it opens once the key is given.
        failed = site["failed"]
        driver.get(gw.url + f"/dashboard#/responses/{failed.id}")
        wait.until(lambda _: "admin key" in by_id(By.ID, "status").text)
        by_id(By.ID, "key").send_keys(ADMIN_KEY)
        by_id(By.CSS_SELECTOR, "#login button[type=submit]").click()
        opened(failed.id)
        error = by_id(By.ID, "detail-error").text
        assert failed.error.code in error and failed.error.message in error
        summary = by_id(By.ID, "detail-summary").text
        assert "duration" in summary and "time to first output" in summary
        assert KEY_NAME in summary and TENANT in summary
        [step] = driver.find_elements(By.CSS_SELECTOR, "#detail-steps li.step")
        assert "failed" in step.get_attribute("class")
        assert f"failed: {failed.error.code}" in step.text and "model-fails" in step.text
        driver.save_screenshot(str(shots / f"{engine}-failed.png"))

        # The list shows the key by name and id, the failure's code and durations.
        # (the list loads beside the detail: on DynamoDB it merges the log's shards first)
        [row] = wait.until(lambda d: d.find_elements(
            By.CSS_SELECTOR, f"#response-list tr[data-id='{failed.id}']"))
        assert KEY_NAME in row.text and TENANT in row.text and failed.error.code in row.text

        click_row(site["cancelled"])
        assert "cancelled" in by_id(By.ID, "detail-error").text
        assert "went away" in by_id(By.ID, "detail-error").text
        [step] = driver.find_elements(By.CSS_SELECTOR, "#detail-steps li.step")
        assert "cancelled" in step.text and "failed" in step.get_attribute("class")
        driver.save_screenshot(str(shots / f"{engine}-cancelled.png"))

        # Incomplete: the reason, the text it had; a background response cancelled by the
        # cancel endpoint says so (not a client gone away).
        incomplete = site["incomplete"]
        click_row(incomplete.id)
        error = by_id(By.ID, "detail-error").text
        assert "incomplete" in error and "max_output_tokens" in error, error
        assert "reached max_output_tokens" in error
        assert incomplete.output_text in by_id(By.ID, "detail-output").text
        driver.save_screenshot(str(shots / f"{engine}-incomplete.png"))
        click_row(site["stopped"])
        error = by_id(By.ID, "detail-error").text
        assert "cancelled" in error and "/cancel" in error and "went away" not in error
        assert "background" in by_id(By.ID, "detail-summary").text.lower()
        driver.save_screenshot(str(shots / f"{engine}-background-cancelled.png"))

        tools = site["tools"]
        click_row(tools.id)
        assert not by_id(By.ID, "detail-error").is_displayed()
        steps = driver.find_elements(By.CSS_SELECTOR, "#detail-steps li.step")
        assert [s.text.split(" ")[0] for s in steps] == ["model", "mcp", "model", "mcp",
                                                         "model", "mcp", "model"]
        failures = driver.find_elements(By.CSS_SELECTOR, "#detail-steps li.step.failed")
        assert len(failures) == 1 and "lab.fail" in failures[0].text
        assert "mcp_tool_execution_error" in failures[0].text
        bars = driver.find_elements(By.CSS_SELECTOR, "#detail-steps .bar")
        assert len(bars) == 7 and all(b.size["width"] >= 1 for b in bars)
        # The huge tool output is folded: its summary shows, its 3000 characters do not.
        folds = driver.find_elements(By.CSS_SELECTOR, "#detail-output details.fold")
        assert folds and "characters)" in folds[0].text
        assert not folds[0].find_element(By.TAG_NAME, "pre").is_displayed()
        assert "the tool broke" in by_id(By.ID, "detail-output").text
        driver.save_screenshot(str(shots / f"{engine}-tools.png"))

        image = site["image"]
        click_row(image.id)
        thumb = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR,
                                                     "#detail-output img.thumb"))[0]
        wait.until(lambda d: d.execute_script("return arguments[0].naturalWidth", thumb) > 0)
        assert thumb.size["width"] <= 160
        assert "iVBOR" not in driver.find_element(By.TAG_NAME, "body").text  # no base64 wall
        assert "image_generation" in by_id(By.ID, "detail-steps").text
        driver.save_screenshot(str(shots / f"{engine}-image.png"))
        thumb.click()
        full = by_id(By.ID, "lightbox-image")
        wait.until(lambda d: d.find_element(By.ID, "lightbox").is_displayed())
        # (a data: URL decodes asynchronously: waited for, not read at once)
        wait.until(lambda d: d.execute_script("return arguments[0].naturalWidth", full) > 160)
        wait.until(lambda _: full.size["width"] > thumb.size["width"])
        driver.save_screenshot(str(shots / f"{engine}-image-full.png"))
        by_id(By.ID, "lightbox").click()
        wait.until(lambda d: not d.find_element(By.ID, "lightbox").is_displayed())

        # Usage by key: named; then Forget key leaves nothing of the gateway on the page.
        by_id(By.CSS_SELECTOR, "#tabs button[data-tab=usage]").click()
        driver.execute_script("document.querySelector('#usage-filters [name=group]').value"
                              " = 'api_key_id'")
        by_id(By.CSS_SELECTOR, "#usage-filters button[type=submit]").click()
        wait.until(lambda d: KEY_NAME in d.find_element(By.ID, "usage-table").text)
        assert wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#usage-chart rect.bar"))
        by_id(By.ID, "logout").click()
        wait.until(lambda d: "forgotten" in d.find_element(By.ID, "status").text)
        assert driver.execute_script(
            "return [...document.querySelectorAll('tbody tr, #usage-chart *, "
            "#usage-legend *, #limits-default *, #detail-output *')].length") == 0
        assert driver.execute_script(
            "return [...document.querySelectorAll('article')].every(a => a.hidden)")
        assert driver.execute_script("return sessionStorage.length") == 0
        assert "#/responses" not in driver.current_url
        for tab in ("responses", "conversations", "limits"):
            by_id(By.CSS_SELECTOR, f"#tabs button[data-tab={tab}]").click()
            wait.until(lambda d: "admin key" in d.find_element(By.ID, "status").text)
        assert driver.execute_script("return document.querySelectorAll('tbody tr').length") == 0
        page = driver.page_source
        assert KEY_NAME not in page and TENANT not in page
        driver.save_screenshot(str(shots / f"{engine}-forgotten.png"))
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], json.dumps(errors)  # no script error, no CSP refusal
    finally:
        driver.quit()

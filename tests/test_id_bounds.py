"""Ids no store key can hold, on every route that looks one up: OpenAI's 404 (400 for a
cursor), never DynamoDB's ``ValidationException`` as a 500. DynamoDB refuses a sort key past
1024 bytes and a partition key past 2048 on reads too, which moto does not: the gateway runs
on DynamoDB and S3 (moto) behind tests/helpers/dynamodb_proxy.py's ``strict_keys``, which
answers as DynamoDB does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from responses_gateway.platform.base import Platform
from tests.helpers.fake_container_engine import FakeContainerEngine
from tests.helpers.file_storage import gateway_on
from tests.helpers.gateway_server import GatewayServer

KEY, ADMIN = "key-tenant-a", "admin-key-0123456789abcdef"
LONG = "x" * 1100  # past a sort key's 1024 bytes


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("ids")
    engine = FakeContainerEngine(tmp / "boxes")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Platform, "container_engine", lambda self: engine)
        with gateway_on("aws", tmp, strict_keys=True, api_keys=(KEY,), admin_keys=(ADMIN,),
                        code_interpreter="sandbox") as server:
            yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {KEY}"},
                      timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def made(client: httpx.Client) -> dict[str, str]:
    return {"vs": client.post("/v1/vector_stores", json={"name": "v"}).json()["id"],
            "cntr": client.post("/v1/containers", json={"name": "c"}).json()["id"]}


ROUTES = [
    ("GET", "/v1/files/{id}"), ("DELETE", "/v1/files/{id}"), ("GET", "/v1/files/{id}/content"),
    ("POST", "/v1/uploads/{id}/cancel"), ("POST", "/v1/uploads/{id}/complete"),
    ("GET", "/v1/vector_stores/{id}"), ("POST", "/v1/vector_stores/{id}"),
    ("DELETE", "/v1/vector_stores/{id}"), ("POST", "/v1/vector_stores/{id}/search"),
    ("GET", "/v1/vector_stores/{vs}/files/{id}"), ("DELETE", "/v1/vector_stores/{vs}/files/{id}"),
    ("GET", "/v1/vector_stores/{vs}/file_batches/{id}"),
    ("POST", "/v1/vector_stores/{vs}/file_batches/{id}/cancel"),
    ("GET", "/v1/containers/{id}"), ("DELETE", "/v1/containers/{id}"),
    ("GET", "/v1/containers/{cntr}/files/{id}"), ("DELETE", "/v1/containers/{cntr}/files/{id}"),
    ("GET", "/v1/admin/responses/{id}"), ("GET", "/v1/admin/conversations/{id}/items"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_an_id_no_key_holds_is_not_found(client: httpx.Client, made: dict[str, str],
                                         method: str, path: str) -> None:
    headers = {"authorization": f"Bearer {ADMIN}"} if "/admin/" in path else {}
    body: dict[str, Any] = {"json": {"query": "q", "part_ids": []}} if method == "POST" else {}
    answer = client.request(method, path.format(id=LONG, **made), headers=headers, **body)
    assert answer.status_code == 404, answer.text
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
    assert LONG not in answer.json()["error"]["message"]  # cut, not echoed whole


@pytest.mark.parametrize("body", [
    {"model": "m", "input": "x", "tools": [{"type": "file_search", "vector_store_ids": [LONG]}]},
    {"model": "m", "input": "x", "tools": [{"type": "code_interpreter", "container": LONG}]},
])
def test_an_id_in_a_body_no_key_holds_is_not_found(client: httpx.Client,
                                                   body: dict[str, Any]) -> None:
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 404, answer.text


def test_a_cursor_no_key_holds_is_a_400(client: httpx.Client) -> None:
    answer = client.get("/v1/admin/conversations", params={"after": LONG},
                        headers={"authorization": f"Bearer {ADMIN}"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "after"

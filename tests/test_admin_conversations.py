"""The admin list of conversations (issue 34, 45): every key's, or one key's, newest first
(created_at, then id), paged by ``after``; on DynamoDB Queries of the table's sharded
``conversations`` index, merged (never a Scan), the same order and pages on SQLite; ``store
init`` indexes conversations written before the index (or its shards) existed. One suite on
SQLite and DynamoDB (moto over HTTP)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from responses_gateway.config import Settings
from responses_gateway.store.dynamodb import create_table, make_client
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import (
    create_dynamodb_table,
    sqlite_or_dynamodb,
    use_moto,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

KEYS = ("sk-conv-one-0123456789", "sk-conv-two-0123456789", "sk-conv-three-0123456789")
ADMIN = "admin-key-0123456789abcdef"


def tenant_of(key: str) -> str:
    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return sqlite_or_dynamodb(request, tmp_path)


def gateway(upstream: ScriptedUpstream, store: str) -> GatewayServer:
    return GatewayServer(Settings(upstream_url=upstream.base_url, store=store, api_keys=KEYS,
                                  admin_keys=(ADMIN,)))


def listing(gw: GatewayServer, **params: Any) -> httpx.Response:
    return httpx.get(gw.base_url + "/admin/conversations", params=params,  # 30 s: a scan on
                     headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)  # a loaded moto


def every_page(gw: GatewayServer, limit: int, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = None
    while True:
        answer = listing(gw, limit=limit, **params, **({"after": after} if after else {}))
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page["data"]) <= limit
        rows += page["data"]
        if page["data"]:
            assert page["first_id"] == page["data"][0]["id"]
            assert page["last_id"] == page["data"][-1]["id"]
        if not page["has_more"]:
            return rows
        assert len(page["data"]) == limit
        after = page["last_id"]


def newest_first(pairs: list[tuple[int, str]]) -> list[str]:
    return [cid for _, cid in sorted(pairs, reverse=True)]


def test_pages_newest_first_and_one_keys_alone(upstream: ScriptedUpstream, store: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with gateway(upstream, store) as gw:
        made: dict[str, list[str]] = {}
        created: dict[str, int] = {}
        for key, count in zip(KEYS, (5, 3, 0), strict=True):
            client = OpenAI(base_url=gw.base_url, api_key=key)
            made[tenant_of(key)] = []
            for n in range(count):
                conversation = client.conversations.create(metadata={"n": str(n)})
                made[tenant_of(key)].append(conversation.id)
                created[conversation.id] = conversation.created_at
        if store.startswith("dynamodb:"):  # the listing is a Query: a Scan would fail here
            client = gw.gateway.store.usage_store().client
            monkeypatch.setattr(client, "scan", None)
        expected = newest_first([(created[c], c) for c in created])

        rows = every_page(gw, 3)
        assert [r["id"] for r in rows] == expected
        owners = {cid: tenant for tenant, ids in made.items() for cid in ids}
        assert all(r["api_key_id"] == owners[r["id"]] for r in rows)
        first = next(r for r in rows if r["id"] == made[tenant_of(KEYS[0])][2])
        assert first["metadata"] == {"n": "2"} and first["created_at"] > 0

        # One key's conversations and no other's, whatever page size.
        for key in KEYS:
            tenant = tenant_of(key)
            for limit in (1, 2, 100):
                mine = every_page(gw, limit, api_key_id=tenant)
                assert [r["id"] for r in mine] == newest_first(
                    [(created[c], c) for c in made[tenant]])
                assert {r["api_key_id"] for r in mine} <= {tenant}
        # In a one-key list, ``after`` is a place among that key's ids (even another key's).
        one, two = tenant_of(KEYS[0]), tenant_of(KEYS[1])
        cursor = made[one][2]
        after_other = listing(gw, api_key_id=two, after=cursor).json()
        assert [r["id"] for r in after_other["data"]] == newest_first(
            [(created[c], c) for c in made[two] if (created[c], c) < (created[cursor], cursor)])

        # A deleted conversation leaves the list; a cursor naming no conversation is a 400.
        gone = made[one][0]
        OpenAI(base_url=gw.base_url, api_key=KEYS[0]).conversations.delete(gone)
        assert gone not in [r["id"] for r in every_page(gw, 2)]
        refused = listing(gw, after=gone)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "after"
        # A tenant key cannot list them.
        tenant = httpx.get(gw.base_url + "/admin/conversations",
                           headers={"Authorization": f"Bearer {KEYS[0]}"})
        assert tenant.status_code == 403


def test_store_init_indexes_conversations_written_before_the_index(
    upstream: ScriptedUpstream, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_moto(monkeypatch, moto_endpoint)
    table = create_dynamodb_table()
    with gateway(upstream, f"dynamodb:{table}") as gw:
        new = OpenAI(base_url=gw.base_url, api_key=KEYS[0]).conversations.create().id
        client = make_client()
        # A conversation record as the store wrote them before the index: no index keys.
        client.put_item(TableName=table, Item={
            "pk": {"S": "conv_old0123"}, "sk": {"S": "C"},
            "tenant": {"S": tenant_of(KEYS[1])}, "created": {"N": "1700000000"},
            "meta": {"S": "{}"}, "n": {"N": "0"}})
        # One indexed before the index was sharded: one partition, by tenant then id.
        client.put_item(TableName=table, Item={
            "pk": {"S": "conv_unsharded"}, "sk": {"S": "C"},
            "cpk": {"S": "CONV"}, "csk": {"S": f"{tenant_of(KEYS[2])}#conv_unsharded"},
            "tenant": {"S": tenant_of(KEYS[2])}, "created": {"N": "1700000001"},
            "meta": {"S": "{}"}, "n": {"N": "0"}})
        assert [r["id"] for r in every_page(gw, 1)] == [new, "conv_unsharded"]
        assert create_table(table, client) is False  # store init on the existing table
        moved = client.get_item(TableName=table, Key={"pk": {"S": "conv_unsharded"},
                                                      "sk": {"S": "C"}})["Item"]
        assert moved["cpk"]["S"].startswith("CONV#")
        rows = every_page(gw, 1)
        assert [r["id"] for r in rows] == [new, "conv_unsharded", "conv_old0123"]
        old = next(r for r in rows if r["id"] == "conv_old0123")
        assert old["api_key_id"] == tenant_of(KEYS[1]) and old["created_at"] == 1700000000


def test_store_init_adds_the_index_to_a_table_made_without_it(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_moto(monkeypatch, moto_endpoint)
    from responses_gateway.store.dynamodb_schema import table_definition

    client = make_client()
    name = "old-table-" + hashlib.sha256(str(id(client)).encode()).hexdigest()[:8]
    old = table_definition(name)
    old.pop("GlobalSecondaryIndexes")
    old["AttributeDefinitions"] = old["AttributeDefinitions"][:2]
    client.create_table(**old)
    assert create_table(name, client) is False
    indexes = client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
    assert [i["IndexName"] for i in indexes] == ["conversations"]

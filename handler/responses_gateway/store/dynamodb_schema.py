"""The DynamoDB table definition, in one place for the store, `store init` and template.yaml.

Plain data, no boto3 import: ``responses-gateway store init`` passes ``table_definition(name)``
to ``create_table``; template.yaml declares the same keys, billing mode and TTL attribute.
The layout of the items is described in docs/store.md.
"""

from __future__ import annotations

from typing import Any

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expires_at"
BILLING_MODE = "PAY_PER_REQUEST"

#: The index that lists conversations across tenants (the admin views) without a Scan: every
#: conversation record carries ``cpk`` = :data:`CONVERSATIONS` and ``csk`` = ``<tenant>#<id>``,
#: so one Query reads them in (key, id) order, and one key's by its prefix. Only the record's
#: tenant, creation time and metadata are projected: a turn's writes (its length, its lock)
#: never touch the index.
CONVERSATION_INDEX = "conversations"
CONVERSATION_INDEX_PK = "cpk"
CONVERSATION_INDEX_SK = "csk"
CONVERSATIONS = "CONV"

ATTRIBUTE_DEFINITIONS: list[dict[str, str]] = [
    {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
    {"AttributeName": SORT_KEY, "AttributeType": "S"},
    {"AttributeName": CONVERSATION_INDEX_PK, "AttributeType": "S"},
    {"AttributeName": CONVERSATION_INDEX_SK, "AttributeType": "S"},
]
KEY_SCHEMA: list[dict[str, str]] = [
    {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
    {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
]
GLOBAL_SECONDARY_INDEXES: list[dict[str, Any]] = [{
    "IndexName": CONVERSATION_INDEX,
    "KeySchema": [
        {"AttributeName": CONVERSATION_INDEX_PK, "KeyType": "HASH"},
        {"AttributeName": CONVERSATION_INDEX_SK, "KeyType": "RANGE"},
    ],
    "Projection": {"ProjectionType": "INCLUDE",
                   "NonKeyAttributes": ["tenant", "created", "meta"]},
}]


def table_definition(table_name: str) -> dict[str, Any]:
    """Keyword arguments for ``client.create_table`` (TTL is a separate call: ``create_table``)."""
    import copy

    return {
        "TableName": table_name,
        "AttributeDefinitions": [dict(a) for a in ATTRIBUTE_DEFINITIONS],
        "KeySchema": [dict(k) for k in KEY_SCHEMA],
        "BillingMode": BILLING_MODE,
        "GlobalSecondaryIndexes": copy.deepcopy(GLOBAL_SECONDARY_INDEXES),
    }


def conversation_index_keys(tenant: str, conversation_id: str) -> dict[str, dict[str, str]]:
    """The index attributes of a conversation record (DynamoDB's attribute-value form)."""
    return {CONVERSATION_INDEX_PK: {"S": CONVERSATIONS},
            CONVERSATION_INDEX_SK: {"S": f"{tenant}#{conversation_id}"}}


def ttl_specification() -> dict[str, Any]:
    """``TimeToLiveSpecification`` for ``update_time_to_live`` (and template.yaml)."""
    return {"Enabled": True, "AttributeName": TTL_ATTRIBUTE}

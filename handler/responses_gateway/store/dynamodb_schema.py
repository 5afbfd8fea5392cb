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

ATTRIBUTE_DEFINITIONS: list[dict[str, str]] = [
    {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
    {"AttributeName": SORT_KEY, "AttributeType": "S"},
]
KEY_SCHEMA: list[dict[str, str]] = [
    {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
    {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
]


def table_definition(table_name: str) -> dict[str, Any]:
    """Keyword arguments for ``client.create_table`` (TTL is a separate call: ``create_table``)."""
    return {
        "TableName": table_name,
        "AttributeDefinitions": [dict(a) for a in ATTRIBUTE_DEFINITIONS],
        "KeySchema": [dict(k) for k in KEY_SCHEMA],
        "BillingMode": BILLING_MODE,
    }


def ttl_specification() -> dict[str, Any]:
    """``TimeToLiveSpecification`` for ``update_time_to_live`` (and template.yaml)."""
    return {"Enabled": True, "AttributeName": TTL_ATTRIBUTE}

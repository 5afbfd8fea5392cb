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

#: How many partitions a key written by every response (or every conversation) is split
#: over: ``USAGE#<day>#<n>``, ``LOG#<day>#<n>``, ``CONV#<n>`` with ``n`` = :func:`shard_of` the
#: response's (conversation's) id. Fixed: readers query every shard, and a row's shard must
#: not move. 16 partitions of 1,000 WCU/s each carry 16,000 bookkeeping writes a second
#: (docs/store.md, "Capacity").
SHARDS = 16

#: The index that lists conversations across tenants (the admin views) without a Scan: every
#: conversation record carries ``cpk`` = ``CONV#<shard>`` and ``csk`` = ``<created>#<id>``,
#: so a Query per shard reads them newest first, merged (store/dynamodb/usage.py). Only the
#: record's tenant, creation time and metadata are projected: a turn's writes (its length, its
#: lock) never touch the index. Records written before the shards sit in ``CONV`` with
#: ``csk`` = ``<tenant>#<id>`` (:data:`CONVERSATIONS`) until ``store init`` moves them.
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


def shard_of(identifier: str) -> int:
    """The shard (0 .. SHARDS-1) of a response or conversation id: a hash, stable across
    processes and versions (not Python's ``hash``, which is salted per process)."""
    import hashlib

    digest = hashlib.blake2b(identifier.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % SHARDS


def conversation_index_keys(conversation_id: str, created: int) -> dict[str, dict[str, str]]:
    """The index attributes of a conversation record (DynamoDB's attribute-value form)."""
    return {CONVERSATION_INDEX_PK: {"S": f"{CONVERSATIONS}#{shard_of(conversation_id)}"},
            CONVERSATION_INDEX_SK: {"S": conversation_index_sort(conversation_id, created)}}


def conversation_index_sort(conversation_id: str, created: int) -> str:
    """Where a conversation sorts in its shard: by creation time, then id."""
    return f"{created:010d}#{conversation_id}"


def ttl_specification() -> dict[str, Any]:
    """``TimeToLiveSpecification`` for ``update_time_to_live`` (and template.yaml)."""
    return {"Enabled": True, "AttributeName": TTL_ATTRIBUTE}

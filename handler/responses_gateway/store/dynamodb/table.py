"""The DynamoDB client and the table's plumbing every part of the store shares: one call with
its retries and error mapping, paged queries, batch reads and writes that resubmit what DynamoDB
left unprocessed, and ``create_table`` (``responses-gateway store init``)."""

from __future__ import annotations

import copy
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

from responses_gateway.store.base import StoreLimits, StoreUnavailable
from responses_gateway.store.dynamodb.codec import (
    _CONFLICT_ATTEMPTS,
    CONVERSATION,
    RECORD,
    _ConditionFailed,
    _n,
    _s,
)
from responses_gateway.store.dynamodb_schema import (
    ATTRIBUTE_DEFINITIONS,
    CONVERSATION_INDEX_PK,
    CONVERSATION_INDEX_SK,
    CONVERSATIONS,
    GLOBAL_SECONDARY_INDEXES,
    conversation_index_keys,
    table_definition,
    ttl_specification,
)

#: Why a transaction is cancelled that a retry can cure: another transaction on an item, or an
#: item's partition over its throughput (a hot key; DynamoDB's code for it in a transaction).
_RETRIED_REASONS = frozenset({"TransactionConflict", "ThrottlingError",
                              "ProvisionedThroughputExceeded"})


def make_client(max_attempts: int = 5) -> Any:
    """A DynamoDB client with standard retries.

    botocore reads ``AWS_ENDPOINT_URL_DYNAMODB`` (or ``AWS_ENDPOINT_URL``) itself, so local
    DynamoDB and moto need no extra code here.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        connect_timeout=5,
        read_timeout=15,
        max_pool_connections=32,
    )
    # A session of its own: creating clients from the default session is not thread-safe.
    return boto3.session.Session().client("dynamodb", config=config)


def create_table(table_name: str, client: Any = None) -> bool:
    """Create the table (same definition as template.yaml) and enable TTL; True if created."""
    from botocore.exceptions import ClientError

    client = client or make_client()
    created = True
    try:
        client.create_table(**table_definition(table_name))
    except client.exceptions.ResourceInUseException:
        created = False
    client.get_waiter("table_exists").wait(
        TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )
    if not created:  # a table made before its indexes: add them, and put what they list in
        _add_indexes(client, table_name)
        backfill_conversation_index(client, table_name)
    try:
        client.update_time_to_live(
            TableName=table_name, TimeToLiveSpecification=ttl_specification()
        )
    except ClientError as e:
        if "already enabled" not in str(e):
            raise
    return created



def _add_indexes(client: Any, table_name: str) -> None:
    """Create the table's missing global secondary indexes, one at a time as DynamoDB asks,
    waiting until each is active."""
    for index in GLOBAL_SECONDARY_INDEXES:
        while True:
            table = client.describe_table(TableName=table_name)["Table"]
            status = {i["IndexName"]: i.get("IndexStatus", "ACTIVE")
                      for i in table.get("GlobalSecondaryIndexes") or []}
            if status.get(index["IndexName"]) == "ACTIVE":
                break
            if index["IndexName"] not in status:
                client.update_table(
                    TableName=table_name,
                    AttributeDefinitions=[dict(a) for a in ATTRIBUTE_DEFINITIONS],
                    GlobalSecondaryIndexUpdates=[{"Create": copy.deepcopy(index)}],
                )
            time.sleep(1)


def backfill_conversation_index(client: Any, table_name: str) -> int:
    """Give conversations written before the conversations index, or before its shards (in
    ``CONV``, by tenant and id), their sharded keys (one Scan of the table, an update per
    conversation); how many were updated. ``store init`` runs it on an existing table."""
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "FilterExpression": "sk = :c AND (attribute_not_exists(#p) OR #p = :legacy)",
        "ProjectionExpression": "pk, created",
        "ExpressionAttributeNames": {"#p": CONVERSATION_INDEX_PK},
        "ExpressionAttributeValues": {":c": _s(CONVERSATION), ":legacy": _s(CONVERSATIONS)},
    }
    updated = 0
    while True:
        page = client.scan(**kwargs)
        for item in page.get("Items", []):
            keys = conversation_index_keys(item["pk"]["S"], int(item["created"]["N"]))
            try:
                client.update_item(
                    TableName=table_name, Key={"pk": item["pk"], "sk": _s(CONVERSATION)},
                    UpdateExpression="SET #p = :p, #s = :s",
                    ConditionExpression="attribute_exists(pk)",  # deleted since: leave it
                    ExpressionAttributeNames={"#p": CONVERSATION_INDEX_PK,
                                              "#s": CONVERSATION_INDEX_SK},
                    ExpressionAttributeValues={":p": keys[CONVERSATION_INDEX_PK],
                                               ":s": keys[CONVERSATION_INDEX_SK]},
                )
                updated += 1
            except client.exceptions.ConditionalCheckFailedException:
                pass
        if "LastEvaluatedKey" not in page:
            return updated
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


class _Table:
    """The table and its client: the calls every part of the store is built on."""

    def __init__(
        self,
        table_name: str,
        *,
        retention_days: int = 30,
        client: Any = None,
        max_attempts: int = 5,
        limits: StoreLimits | None = None,
    ) -> None:
        self.table_name = table_name
        self._limits = limits
        self.retention_s = retention_days * 86400
        self._client = client
        self._max_attempts = max_attempts
        self._client_lock = threading.Lock()
        self._single_try: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = make_client(self._max_attempts)
        return self._client

    @property
    def single_try_client(self) -> Any:
        """A client that retries once (botocore's ``max_attempts`` 2: a dropped connection,
        not a backoff), made on first use: for writes whose retries belong off the request's
        path."""
        if self._single_try is None:
            with self._client_lock:
                if self._single_try is None:
                    self._single_try = make_client(2)
        return self._single_try

    def _record_key(self, response_id: str) -> dict[str, Any]:
        return {"pk": _s(response_id), "sk": _s(RECORD)}

    def _ttl(self) -> dict[str, Any]:
        return _n(int(time.time()) + self.retention_s)

    def _conv_key(self, conversation_id: str) -> dict[str, Any]:
        return {"pk": _s(conversation_id), "sk": _s(CONVERSATION)}

    def _call(self, operation: str, *, once: bool = False, **kwargs: Any) -> dict[str, Any]:
        """One API call: condition failures become _ConditionFailed, transaction conflicts and
        transactions cancelled for throttling are retried here with jittered backoff (botocore
        retries neither: both come as TransactionCanceledException), anything else left after
        botocore's retries becomes StoreUnavailable. ``once``: one try (botocore's one quick
        retry aside), the caller retrying later, off a response's path
        (store/bookkeeping.py)."""
        from botocore.exceptions import BotoCoreError, ClientError

        attempts = 1 if once else _CONFLICT_ATTEMPTS
        client = self.single_try_client if once else self.client
        for attempt in range(attempts):
            try:
                return getattr(client, operation)(**kwargs)
            except ClientError as e:
                error = e.response.get("Error", {})
                code = error.get("Code", "")
                if code == "ConditionalCheckFailedException":
                    raise _ConditionFailed from None
                conflict = code == "TransactionConflictException"
                if code == "TransactionCanceledException":
                    reasons = [r.get("Code") for r in e.response.get("CancellationReasons", [])]
                    if "ConditionalCheckFailed" in reasons:
                        raise _ConditionFailed(tuple(
                            i for i, r in enumerate(reasons) if r == "ConditionalCheckFailed"
                        )) from None
                    conflict = bool(_RETRIED_REASONS.intersection(reasons))
                if not conflict or attempt + 1 == attempts:
                    message = f"DynamoDB {operation} failed: {code}: {error.get('Message', '')}"
                    raise StoreUnavailable(message) from e
            except BotoCoreError as e:
                raise StoreUnavailable(f"DynamoDB {operation} failed: {e}") from e
            time.sleep(random.uniform(0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """All items of a strongly consistent Query, page after page."""
        kwargs = {"TableName": self.table_name, "ConsistentRead": True, **kwargs}
        while True:
            page = self._call("query", **kwargs)
            yield from page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _delete_owned(self, key: dict[str, Any], tenant: str) -> bool:
        """Delete the record at ``key`` if ``tenant`` owns it; False if not (or not there)."""
        try:
            self._call(
                "delete_item",
                TableName=self.table_name,
                Key=key,
                ConditionExpression="tenant = :t",
                ExpressionAttributeValues={":t": _s(tenant)},
            )
        except _ConditionFailed:
            return False
        return True

    def _partition_keys(self, pk: str) -> list[dict[str, Any]]:
        """The keys of every item in partition ``pk`` (a record and what hangs off it)."""
        return [
            {"pk": item["pk"], "sk": item["sk"]}
            for item in self._query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(pk)},
                ProjectionExpression="pk, sk",
            )
        ]

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """BatchWriteItem in groups of 25, resubmitting what DynamoDB left unprocessed."""
        for start in range(0, len(requests), 25):
            pending = {self.table_name: requests[start : start + 25]}
            for attempt in range(10):
                result = self._call("batch_write_item", RequestItems=pending)
                pending = result.get("UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(random.uniform(0, 0.05 * 2**attempt))
            else:
                raise StoreUnavailable("DynamoDB batch_write_item left items unprocessed")

    def _batch_put(self, items: list[dict[str, Any]]) -> None:
        self._batch_write([{"PutRequest": {"Item": item}} for item in items])

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), 100):
            request = {self.table_name: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            for attempt in range(10):
                result = self._call("batch_get_item", RequestItems=request)
                found += result.get("Responses", {}).get(self.table_name, [])
                request = result.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(random.uniform(0, 0.05 * 2**attempt))
            else:
                raise StoreUnavailable("DynamoDB batch_get_item left keys unprocessed")
        return found

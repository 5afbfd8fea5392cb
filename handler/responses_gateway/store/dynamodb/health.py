"""Routed deployments' health in the response store's DynamoDB table (store/health.py says why).

One item per failing deployment: ``pk = HEALTH#<route>``, ``sk = <deployment name>``, with
``failures`` (moved by ``ADD``, so every Lambda instance adds to one count), ``until`` and
``expires_at`` (TTL). A route's items are one Query; a success deletes its item.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from responses_gateway.store.dynamodb.codec import _ConditionFailed, _n, _s
from responses_gateway.store.dynamodb.table import _Table
from responses_gateway.store.dynamodb_schema import TTL_ATTRIBUTE
from responses_gateway.store.health import FORGET_AFTER, Health, HealthStore

_NAMES = {"#until": "until", "#expires": TTL_ATTRIBUTE}


def _key(route: str, deployment: str) -> dict[str, Any]:
    return {"pk": _s(f"HEALTH#{route}"), "sk": _s(deployment)}


class DynamoDBHealth(_Table, HealthStore):
    """The records of one table (the response store's client is shared)."""

    async def read(self, route: str) -> dict[str, Health]:
        return await asyncio.to_thread(self._read, route, time.time())

    def _read(self, route: str, now: float) -> dict[str, Health]:
        found: dict[str, Health] = {}
        for item in self._query(TableName=self.table_name,
                                KeyConditionExpression="pk = :pk",
                                ExpressionAttributeValues={":pk": _s(f"HEALTH#{route}")}):
            if float(item[TTL_ATTRIBUTE]["N"]) > now:  # TTL deletes lazily: expired is gone
                found[item["sk"]["S"]] = Health(int(item["failures"]["N"]),
                                                float(item["until"]["N"]))
        return found

    async def failed(self, route: str, deployment: str, until: float) -> Health:
        return await asyncio.to_thread(self._failed, route, deployment, until, time.time())

    def _failed(self, route: str, deployment: str, until: float, now: float) -> Health:
        values = {":one": _n(1), ":until": _n(until),
                  ":expires": _n(math.ceil(max(until, now) + FORGET_AFTER))}
        try:  # one more on a live record (or a new one)
            item = self._call(
                "update_item", TableName=self.table_name, Key=_key(route, deployment),
                UpdateExpression="ADD failures :one SET #until = :until, #expires = :expires",
                ConditionExpression="attribute_not_exists(pk) OR #expires > :now",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={**values, ":now": _n(now)},
                ReturnValues="ALL_NEW")["Attributes"]
        except _ConditionFailed:  # expired, not yet removed by TTL: it starts again at 1
            item = self._call(
                "update_item", TableName=self.table_name, Key=_key(route, deployment),
                UpdateExpression="SET failures = :one, #until = :until, #expires = :expires",
                ExpressionAttributeNames=_NAMES, ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW")["Attributes"]
        return Health(int(item["failures"]["N"]), float(item["until"]["N"]))

    async def cleared(self, route: str, deployment: str) -> None:
        await asyncio.to_thread(self._call, "delete_item", TableName=self.table_name,
                                Key=_key(route, deployment))

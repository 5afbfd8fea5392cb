"""Hand a background response to the worker Lambda (asynchronous invoke)."""

from __future__ import annotations

import asyncio
from functools import cache
from typing import Any

import orjson


@cache
def _lambda_client() -> Any:
    import boto3  # lazy: only deployments with a worker function pay for it

    return boto3.client("lambda")


async def invoke_worker(function: str, response_id: str, tenant: str) -> None:
    payload = orjson.dumps({"response_id": response_id, "tenant": tenant})
    await asyncio.to_thread(
        _lambda_client().invoke,
        FunctionName=function,
        InvocationType="Event",
        Payload=payload,
    )

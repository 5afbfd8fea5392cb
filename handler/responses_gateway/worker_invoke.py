"""Hand work to the worker Lambda (asynchronous invoke): a background response, or a file
to ingest into a vector store."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson

_client: Any = None
_client_lock = threading.Lock()


def _lambda_client() -> Any:
    """One client per process, made on first use (only deployments with a worker pay for it)."""
    global _client
    with _client_lock:
        if _client is None:
            import boto3
            from botocore.config import Config

            # A session of its own: the default session is not thread-safe. botocore reads
            # AWS_ENDPOINT_URL_LAMBDA / AWS_ENDPOINT_URL itself (local and test endpoints).
            _client = boto3.session.Session().client(
                "lambda", config=Config(retries={"mode": "standard", "max_attempts": 5})
            )
        return _client


async def invoke_worker(function: str, response_id: str, tenant: str) -> None:
    """Queue one run of the worker (``InvocationType=Event``: returns once Lambda accepted it)."""
    await invoke_worker_event(function, {"response_id": response_id, "tenant": tenant})


async def invoke_worker_event(function: str, event: dict[str, Any]) -> None:
    """Queue one event for the worker: a background response (no ``kind``), or another kind
    of work it runs (``{"kind": "vector_store_file", ...}``: entry/lambda_worker.py)."""
    payload = orjson.dumps(event)
    result = await asyncio.to_thread(
        _lambda_client().invoke,
        FunctionName=function,
        InvocationType="Event",
        Payload=payload,
    )
    status = result.get("StatusCode")
    if status != 202:
        raise RuntimeError(f"Lambda did not accept the worker invocation (status {status})")

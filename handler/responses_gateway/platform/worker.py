"""Where work that outlives its request runs: a task of this process, or the worker Lambda.

A background response, or a file to ingest into a vector store, is started by a request that
answers before the work ends. Locally (and in AWS without ``GATEWAY_WORKER_FUNCTION``) it runs
as a task of this process; with a worker function it is queued for that Lambda (an
asynchronous invoke: the request waits only until Lambda took the event, since a Lambda
process may be frozen once it answered). :meth:`Platform.worker
<responses_gateway.platform.base.Platform.worker>` builds the one the settings choose; callers
start their own task when :attr:`Worker.in_process`, else :meth:`Worker.queue` the event.
"""

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


class Worker:
    """The worker Lambda ``function``, or this process (``None``)."""

    def __init__(self, function: str | None = None) -> None:
        self.function = function

    @property
    def in_process(self) -> bool:
        """The work runs as a task of this process: the caller starts it."""
        return self.function is None

    @property
    def shown(self) -> str:
        """What the start line says (api/startup.py)."""
        return "in process" if self.function is None else "worker function"

    async def queue(self, event: dict[str, Any]) -> None:
        """Queue one event for the worker (``InvocationType=Event``: returns once Lambda
        accepted it): a background response (``{"response_id", "tenant"}``), or another kind
        of work it runs (``{"kind": "vector_store_file", ...}``: entry/lambda_worker.py)."""
        if self.function is None:
            raise RuntimeError("no worker function: this work runs in the process")
        result = await asyncio.to_thread(
            _lambda_client().invoke,
            FunctionName=self.function,
            InvocationType="Event",
            Payload=orjson.dumps(event),
        )
        status = result.get("StatusCode")
        if status != 202:
            raise RuntimeError(f"Lambda did not accept the worker invocation (status {status})")

"""One way to make a boto3 client for Bedrock's services (runtime, control plane, agent
runtime), so the chat backend (backends/bedrock/), the image models
(tools/image_generation/backends/) and the embedding models and knowledge bases (vectors/)
share their timeouts and retry policy. It sits below all three: none imports another for it.

boto3 is imported here, on the first client made: nothing at the gateway's start needs it.
"""

from __future__ import annotations

import threading
from typing import Any


def make_client(
    service: str, *, region: str | None, endpoint_url: str | None, read_timeout: float,
    max_attempts: int, connect_timeout: float | None = None, pool: int = 10,
) -> Any:
    """A new client of ``service`` (botocore's standard retries, ``max_attempts`` in all)."""
    import boto3
    from botocore.config import Config

    options: dict[str, Any] = {
        "read_timeout": read_timeout,
        "retries": {"mode": "standard", "total_max_attempts": max_attempts},
        "max_pool_connections": pool,
        "user_agent_extra": "responses-gateway",
    }
    if connect_timeout is not None:
        options["connect_timeout"] = connect_timeout
    return boto3.session.Session().client(
        service, region_name=region, endpoint_url=endpoint_url, config=Config(**options))


class LazyClient:
    """A client of ``service`` made on its first use (the thread pool's threads share it)
    with :func:`make_client`'s options, or the one given (tests); ``close`` lets it go."""

    def __init__(self, service: str, *, client: Any = None, **options: Any) -> None:
        self._service = service
        self._options = options
        self._client = client
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = make_client(self._service, **self._options)
            return self._client

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

"""Building the process-wide services from settings: store, backends, sealer.

Heavy clients (boto3 for DynamoDB and Bedrock) are imported only when configured, and backends
are created on first use, so the streaming entry point starts fast.
"""

from __future__ import annotations

from responses_gateway import observability
from responses_gateway.backends.base import Backend
from responses_gateway.config import Settings
from responses_gateway.responses.gateway import Gateway
from responses_gateway.store.base import Store
from responses_gateway.translate.sealing import Sealer


def build_store(settings: Settings) -> Store:
    kind, _, target = settings.store.partition(":")
    if kind == "sqlite":
        from responses_gateway.store.sqlite import SQLiteStore

        return SQLiteStore(target or "gateway.db", retention_days=settings.retention_days)
    if kind == "dynamodb":
        from responses_gateway.store.dynamodb import DynamoDBStore

        if not target:
            raise ValueError("GATEWAY_STORE=dynamodb:TABLE needs a table name")
        return DynamoDBStore(target, retention_days=settings.retention_days)
    raise ValueError(f"GATEWAY_STORE must be sqlite:PATH or dynamodb:TABLE, not {settings.store!r}")


class Backends:
    """One backend instance per kind, created on first use and closed with the app."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._made: dict[str, Backend] = {}

    def __call__(self, kind: str) -> Backend:
        backend = self._made.get(kind)
        if backend is None:
            backend = self._made[kind] = observability.trace_backend(self._make(kind))
        return backend

    def _make(self, kind: str) -> Backend:
        s = self._settings
        if kind == "bedrock":
            from responses_gateway.backends.bedrock import BedrockBackend

            return BedrockBackend(
                region=s.bedrock_region,
                endpoint_url=s.bedrock_endpoint_url,
                read_timeout=s.read_timeout,
                connect_timeout=s.connect_timeout,
                max_attempts=s.max_retries + 1,  # botocore counts the first attempt
                media_budget_bytes=s.bedrock_media_budget_bytes,
            )
        from responses_gateway.backends.openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(
            s.upstream_url,
            s.upstream_api_key,
            connect_timeout=s.connect_timeout,
            read_timeout=s.read_timeout,
            max_retries=s.max_retries,
            dialect=s.upstream_dialect,
        )

    async def aclose(self) -> None:
        for backend in self._made.values():
            await backend.aclose()
        self._made.clear()


def build_gateway(settings: Settings, store: Store | None = None) -> Gateway:
    observability.configure(settings)
    return Gateway(
        settings,
        store or observability.trace_store(build_store(settings)),
        Backends(settings),
        Sealer.from_secret(settings.seal_key),
    )

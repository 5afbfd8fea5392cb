"""The composition root: the process-wide gateway built from settings (the platform's store,
backends, sealer).

Heavy clients (boto3 for DynamoDB and Bedrock) are imported only when configured, and backends
are created on first use (backends/instances.py), so the streaming entry point starts fast.
"""

from __future__ import annotations

from responses_gateway import observability
from responses_gateway.backends.instances import Backends
from responses_gateway.config import Settings
from responses_gateway.platform import platform_for
from responses_gateway.responses.gateway import BackendFactory, Gateway
from responses_gateway.store.base import Store
from responses_gateway.translate.sealing import Sealer


def build_gateway(
    settings: Settings, store: Store | None = None, backends: BackendFactory | None = None
) -> Gateway:
    """The gateway for ``settings``; ``store`` and ``backends`` replace the configured ones."""
    observability.configure(settings)
    platform = platform_for(settings)
    if store is None:
        store = platform.store()
        if observability.tracing_enabled():  # every store call a subsegment
            from responses_gateway.traced_store import TracedStore  # made only when tracing

            store = TracedStore(store)
    return Gateway(
        settings,
        store,
        backends or Backends(settings, health=store.health_store),
        Sealer.from_secret(settings.seal_key),
        platform=platform,
    )

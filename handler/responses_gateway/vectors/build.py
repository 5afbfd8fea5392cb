"""The vector stores ``GATEWAY_STORE`` implies, with the configured embedding model. Only the
local engine exists so far; with ``dynamodb:TABLE`` the routes answer 501."""

from __future__ import annotations

from typing import TYPE_CHECKING

from responses_gateway.errors import GatewayError

if TYPE_CHECKING:
    from responses_gateway.config import Settings
    from responses_gateway.files.service import Files
    from responses_gateway.vectors.service import VectorStores


def build_vector_stores(settings: Settings, files: Files) -> VectorStores:
    kind, _, target = settings.store.partition(":")
    if kind != "sqlite":
        raise GatewayError(
            501, "Vector stores are not available on this gateway's storage yet (they need "
            "GATEWAY_STORE=sqlite:PATH).", type="server_error", code="vector_stores_unavailable")
    from responses_gateway.vectors.embeddings import OpenAICompatEmbedder
    from responses_gateway.vectors.local import LocalVectorEngine
    from responses_gateway.vectors.service import VectorStores

    embedder = OpenAICompatEmbedder(
        settings.embedding_url or settings.upstream_url,
        settings.embedding_api_key or settings.upstream_api_key,
        settings.embedding_model, batch=settings.embedding_batch,
        max_retries=settings.max_retries, timeout=settings.read_timeout)
    return VectorStores(LocalVectorEngine(target or "gateway.db"), files, embedder,
                        max_files=settings.max_vector_store_files,
                        lease_seconds=settings.lease_seconds)

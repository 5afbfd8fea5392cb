"""The vector stores ``GATEWAY_STORE`` implies, with the configured embedding model:
``sqlite:PATH`` keeps them in PATH (vectors/local.py); ``dynamodb:TABLE`` keeps records in
TABLE and vectors in the S3 Vectors bucket ``GATEWAY_VECTOR_BUCKET`` (vectors/aws.py; without
it the routes answer 501). Each engine is imported only when configured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from responses_gateway.errors import GatewayError

if TYPE_CHECKING:
    from responses_gateway.files.service import Files
    from responses_gateway.vectors.embeddings import Embedder
    from responses_gateway.vectors.engine import VectorEngine
    from responses_gateway.vectors.knowledge_bases import KnowledgeBases
    from responses_gateway.vectors.service import VectorStores


def vector_stores_available(settings: Any) -> bool:
    """Whether this storage has vector stores (file_search runs in the gateway then; else it
    stays a hosted tool, tools/hosted.py)."""
    kind = settings.store.partition(":")[0]
    return kind == "sqlite" or (kind == "dynamodb" and bool(settings.vector_bucket))


def build_vector_stores(settings: Any, files: Files) -> VectorStores:
    target = settings.store.partition(":")[2]
    if not vector_stores_available(settings):
        raise GatewayError(
            501, "Vector stores are not configured on this gateway (GATEWAY_STORE=sqlite:PATH, "
            "or dynamodb:TABLE with GATEWAY_VECTOR_BUCKET).", type="server_error",
            code="vector_stores_unavailable")
    from responses_gateway.vectors.extract import ExtractLimits
    from responses_gateway.vectors.service import SearchLimits, VectorStores

    return VectorStores(_engine(settings, target), files, _embedder(settings),
                        max_files=settings.max_vector_store_files,
                        lease_seconds=settings.lease_seconds,
                        worker_function=settings.worker_function,
                        knowledge_bases=_knowledge_bases(settings),
                        search_limits=SearchLimits.of(settings),
                        extract_limits=ExtractLimits.of(settings))


def _embedder(settings: Any) -> Embedder:
    """GATEWAY_EMBEDDING_BACKEND: an OpenAI-compatible /embeddings, or Bedrock's InvokeModel."""
    if settings.embedding_backend == "bedrock":
        from responses_gateway.vectors.bedrock_embeddings import BedrockEmbedder

        return BedrockEmbedder(
            settings.embedding_model, region=settings.bedrock_region,
            endpoint_url=settings.bedrock_endpoint_url, batch=settings.embedding_batch,
            retries=settings.embedding_retries, timeout=settings.read_timeout)
    from responses_gateway.vectors.embeddings import OpenAICompatEmbedder

    return OpenAICompatEmbedder(
        settings.embedding_url or settings.upstream_url,
        settings.embedding_api_key or settings.upstream_api_key,
        settings.embedding_model, batch=settings.embedding_batch,
        retries=settings.embedding_retries, backoff=settings.embedding_backoff_seconds,
        timeout=settings.read_timeout)


def _knowledge_bases(settings: Any) -> KnowledgeBases | None:
    """GATEWAY_KNOWLEDGE_BASES: Bedrock Knowledge Bases served as read-only vector stores."""
    if not settings.knowledge_bases:
        return None
    from responses_gateway.vectors.knowledge_bases import KnowledgeBases

    return KnowledgeBases(settings.knowledge_bases, region=settings.bedrock_region,
                          max_retries=settings.max_retries, timeout=settings.read_timeout)


def _engine(settings: Any, target: str) -> VectorEngine:
    if settings.store.startswith("sqlite"):
        from responses_gateway.vectors.local import LocalVectorEngine

        return LocalVectorEngine(target or "gateway.db", settings.vector_cache_bytes)
    from responses_gateway.vectors.aws import AWSVectorEngine

    assert settings.vector_bucket
    return AWSVectorEngine(target, settings.vector_bucket)

"""What every platform builds: the engines (abstract here, one subclass per platform) and the
services the gateway assembles from them with their settings' bounds (here, once).

Each method imports its engine's module when called, so choosing a platform costs nothing
and a process imports only what it uses (tests/test_entry_imports.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from responses_gateway.errors import GatewayError

if TYPE_CHECKING:
    from responses_gateway.containers.engine import ContainerEngine
    from responses_gateway.containers.records import ContainerRecords
    from responses_gateway.containers.service import Containers
    from responses_gateway.files.service import Files
    from responses_gateway.files.store import Blobs as FileBlobs
    from responses_gateway.files.store import FileRecords, UploadRecords
    from responses_gateway.files.uploads import Uploads
    from responses_gateway.platform.worker import Worker
    from responses_gateway.settings import Settings
    from responses_gateway.store.base import Store, StoreLimits
    from responses_gateway.store.blobs import Blobs
    from responses_gateway.store.connections import Connections
    from responses_gateway.vectors.embeddings import Embedder
    from responses_gateway.vectors.engine import VectorEngine
    from responses_gateway.vectors.knowledge_bases import KnowledgeBases
    from responses_gateway.vectors.service import VectorStores


class Platform(ABC):
    """The engines of one platform, built from ``settings`` when asked."""

    #: ``local`` or ``aws``
    name: str
    #: whether this process removes every tenant's expired Files and Uploads on a timer
    #: (``GATEWAY_FILE_SWEEP_SECONDS``); else each tenant's are reclaimed as they are served
    sweeps_expired_files: bool = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def shown(self) -> str:
        """``GATEWAY_STORE`` as the start line shows it (api/startup.py)."""
        return self.settings.store

    # -- engines (one implementation per platform) ------------------------------------------

    @abstractmethod
    def response_store(self, limits: StoreLimits) -> Store:
        """Responses, events, conversations, usage, routing health (store/)."""

    @abstractmethod
    def file_records(self) -> FileRecords:
        """The Files API's records (files/)."""

    @abstractmethod
    def file_blobs(self) -> FileBlobs:
        """The Files API's bytes (files/)."""

    @abstractmethod
    def upload_records(self, clock: Callable[[], float]) -> UploadRecords:
        """The Uploads API's records (files/uploads.py), on the Files' ``clock``."""

    @property
    @abstractmethod
    def has_vector_stores(self) -> bool:
        """Whether :meth:`vector_engine` has something to build."""

    @abstractmethod
    def vector_engine(self) -> VectorEngine:
        """Vector stores' records and vectors (vectors/); only when :attr:`has_vector_stores`."""

    @abstractmethod
    def blobs_beside_store(self) -> Blobs:
        """Where large values of stored records (images) go without ``GATEWAY_IMAGE_BUCKET``."""

    def connections(self, dynamodb: Any) -> Connections:
        """API Gateway WebSocket connections' state (store/connections.py), through the
        ``dynamodb`` client; only AWS has them."""
        raise RuntimeError("the WebSocket function needs GATEWAY_STORE=dynamodb:TABLE")

    @abstractmethod
    def container_records(self) -> ContainerRecords:
        """The Containers API's records (containers/)."""

    def sandbox_engine(self) -> ContainerEngine:
        """The bubblewrap sandbox engine; only where this platform can run a jail."""
        raise GatewayError(
            501, "GATEWAY_CODE_INTERPRETER=sandbox runs on a machine the gateway runs on "
            "(GATEWAY_STORE=sqlite:PATH), not on Lambda: use agentcore there.",
            type="server_error", code="code_interpreter_unavailable")

    def container_engine(self) -> ContainerEngine:
        """Where containers run code (``GATEWAY_CODE_INTERPRETER``): the sandbox (local) or
        Amazon Bedrock AgentCore Code Interpreter (any platform; the engine on Lambda)."""
        s = self.settings
        if s.code_interpreter == "agentcore":
            if not s.files_bucket:  # where a container's files outlive its sessions
                raise GatewayError(
                    501, "GATEWAY_CODE_INTERPRETER=agentcore keeps containers' files in S3: "
                    "set GATEWAY_FILES_BUCKET.", type="server_error",
                    code="code_interpreter_unavailable")
            from responses_gateway.containers.agentcore import AgentCoreEngine

            return AgentCoreEngine(
                bucket=s.files_bucket, interpreter_id=s.agentcore_interpreter_id,
                region=s.bedrock_region, endpoint_url=s.agentcore_endpoint_url,
                session_seconds=s.agentcore_session_seconds)
        if s.code_interpreter == "sandbox":
            return self.sandbox_engine()
        raise code_interpreter_off()

    def files_stored(self) -> bool:
        """Whether any file may have been stored (the sweep skips building the engines
        before then)."""
        return True

    def worker(self) -> Worker:
        """Where background work runs (platform/worker.py): the worker Lambda when
        ``GATEWAY_WORKER_FUNCTION`` names one (AWS), else a task of this process."""
        from responses_gateway.platform.worker import Worker

        return Worker(self.settings.worker_function)

    # -- services assembled from the engines ------------------------------------------------

    def store(self) -> Store:
        """The response store; with an image backend, its large values (images) kept beside
        it (store/blobs.py)."""
        from responses_gateway.store.base import StoreLimits

        s = self.settings
        store = self.response_store(StoreLimits(
            conversation_items=s.max_conversation_items,
            conversation_bytes=s.max_conversation_bytes,
            response_bytes=s.max_stored_response_bytes,
        ))
        if s.image_backend is None:
            return store
        from responses_gateway.store.blobs import BlobbedStore

        return BlobbedStore(store, self.image_blobs())

    def image_blobs(self) -> Blobs:
        """Where large values of stored records go: S3 (``GATEWAY_IMAGE_BUCKET``) on any
        platform, else the platform's own place."""
        if self.settings.image_bucket:
            from responses_gateway.store.blobs import S3Blobs

            return S3Blobs(self.settings.image_bucket)
        return self.blobs_beside_store()

    def files(self) -> Files:
        """The Files API's storage, with its bounds."""
        from responses_gateway.files.service import FileLimits, Files

        s = self.settings
        limits = FileLimits(file_bytes=s.max_file_bytes, tenant_bytes=s.max_tenant_file_bytes,
                            name_chars=s.max_name_chars,
                            description_chars=s.max_description_chars)
        return Files(self.file_records(), self.file_blobs(), limits)

    def uploads(self, files: Files) -> Uploads:
        """The Uploads API beside ``files``: its records in the same engine, parts as its
        blobs."""
        from responses_gateway.files.uploads import Uploads

        return Uploads(self.upload_records(files.clock), files.blobs, files,
                       self.settings.max_upload_part_bytes)

    def containers(self, files: Files | None) -> Containers:
        """The Containers API over this platform's engine and records, with its bounds;
        ``files``: the Files API ``file_ids`` are copied from (None: not configured). A 501
        when ``GATEWAY_CODE_INTERPRETER`` is unset."""
        if self.settings.code_interpreter is None:
            raise code_interpreter_off()
        from responses_gateway.containers.service import ContainerLimits, Containers

        s = self.settings
        limits = ContainerLimits(
            idle_seconds=s.container_idle_seconds, code_timeout=s.code_timeout,
            memory_mb=s.code_memory_mb, max_output=s.code_max_output_bytes,
            file_bytes=s.max_file_bytes, name_chars=s.max_name_chars,
            max_running=s.max_containers, keep_expired_seconds=s.retention_days * 86400.0,
            disk_bytes=s.container_max_bytes)
        engine = self.container_engine()
        return Containers(self.container_records(), engine, files, limits)

    def vector_stores(self, files: Files) -> VectorStores:
        """The vector stores over ``files``, with the configured embedding model and Bedrock
        Knowledge Bases; a 501 where this platform has none."""
        if not self.has_vector_stores:
            raise GatewayError(
                501, "Vector stores are not configured on this gateway (GATEWAY_STORE="
                "sqlite:PATH, or dynamodb:TABLE with GATEWAY_VECTOR_BUCKET).",
                type="server_error", code="vector_stores_unavailable")
        from responses_gateway.vectors.extract import ExtractLimits
        from responses_gateway.vectors.service import SearchLimits, VectorStores

        s, worker = self.settings, self.worker()
        return VectorStores(self.vector_engine(), files, self._embedder(),
                            max_files=s.max_vector_store_files,
                            lease_seconds=s.lease_seconds,
                            hand_off=None if worker.in_process else worker.queue,
                            knowledge_bases=self._knowledge_bases(),
                            search_limits=SearchLimits.of(s),
                            extract_limits=ExtractLimits.of(s))

    def _embedder(self) -> Embedder:
        """GATEWAY_EMBEDDING_BACKEND: an OpenAI-compatible /embeddings, or Bedrock's
        InvokeModel (imported only then: it loads boto3)."""
        s = self.settings
        if s.embedding_backend == "bedrock":
            from responses_gateway.vectors.bedrock_embeddings import BedrockEmbedder

            return BedrockEmbedder(
                s.embedding_model, region=s.bedrock_region,
                endpoint_url=s.bedrock_endpoint_url, batch=s.embedding_batch,
                retries=s.embedding_retries, timeout=s.read_timeout)
        from responses_gateway.vectors.embeddings import OpenAICompatEmbedder

        return OpenAICompatEmbedder(
            s.embedding_url or s.upstream_url, s.embedding_api_key or s.upstream_api_key,
            s.embedding_model, batch=s.embedding_batch, retries=s.embedding_retries,
            backoff=s.embedding_backoff_seconds, timeout=s.read_timeout)

    def _knowledge_bases(self) -> KnowledgeBases | None:
        """GATEWAY_KNOWLEDGE_BASES: Bedrock Knowledge Bases served as read-only vector stores."""
        s = self.settings
        if not s.knowledge_bases:
            return None
        from responses_gateway.vectors.knowledge_bases import KnowledgeBases

        return KnowledgeBases(s.knowledge_bases, region=s.bedrock_region,
                              max_retries=s.max_retries, timeout=s.read_timeout)


def code_interpreter_off() -> GatewayError:
    """The Containers API (and what runs code) where no engine is configured."""
    return GatewayError(
        501, "Code execution is not configured on this gateway (GATEWAY_CODE_INTERPRETER=sandbox"
        " or agentcore).", type="server_error", code="code_interpreter_not_configured")

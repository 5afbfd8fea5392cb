"""Bring your own Bedrock Knowledge Base: ``GATEWAY_KNOWLEDGE_BASES`` maps vector store ids to
existing Knowledge Bases, served read-only: retrieve and search (bedrock-agent-runtime
``Retrieve``, ``filters`` translated to its ``RetrievalFilter``); writes are OpenAI's 400.

The setting is a JSON object: ``{"vs_handbook": "KB12345678"}`` (every tenant of the gateway
may search it) or ``{"vs_handbook": {"knowledge_base_id": "KB12345678", "name": "Handbook",
"tenants": ["t_..."]}}`` (only those tenants; another one gets the 404 of a missing store).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from responses_gateway.aws_clients import LazyClient
from responses_gateway.errors import GatewayError, invalid_request

MAX_RESULTS = 100  # Retrieve's numberOfResults
_COMPARISONS = {"eq": "equals", "ne": "notEquals", "gt": "greaterThan",
                "gte": "greaterThanOrEquals", "lt": "lessThan", "lte": "lessThanOrEquals",
                "in": "in", "nin": "notIn"}


@dataclass(frozen=True, slots=True)
class KnowledgeBase:
    store_id: str
    knowledge_base_id: str
    name: str
    tenants: frozenset[str] | None  # None: every tenant

    def to_object(self) -> dict[str, Any]:
        """The VectorStore object (its files live in the Knowledge Base, not counted here)."""
        counts = {"in_progress": 0, "completed": 0, "cancelled": 0, "failed": 0, "total": 0}
        return {"id": self.store_id, "object": "vector_store", "created_at": 0,
                "name": self.name, "usage_bytes": 0, "file_counts": counts,
                "status": "completed", "expires_after": None, "expires_at": None,
                "last_active_at": None, "metadata": {"knowledge_base_id": self.knowledge_base_id}}


def parse_knowledge_bases(text: str) -> dict[str, KnowledgeBase]:
    """GATEWAY_KNOWLEDGE_BASES; ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError("must be a JSON object of vector store id to Knowledge Base")
    out = {}
    for store_id, spec in raw.items():
        if not isinstance(store_id, str) or not store_id.startswith("vs_"):
            raise ValueError(f"{store_id!r}: a vector store id starts with 'vs_'")
        if isinstance(spec, str):
            spec = {"knowledge_base_id": spec}
        kb = spec.get("knowledge_base_id") if isinstance(spec, dict) else None
        if not isinstance(kb, str) or not kb.isalnum() or len(kb) > 10:
            raise ValueError(f"{store_id}: knowledge_base_id must be a Knowledge Base id "
                             "(up to 10 letters and digits)")
        tenants = spec.get("tenants")
        if tenants is not None and (not isinstance(tenants, list) or not all(
                isinstance(t, str) for t in tenants)):
            raise ValueError(f"{store_id}: tenants must be a list of tenant ids")
        out[store_id] = KnowledgeBase(store_id, kb, str(spec.get("name") or kb),
                                      None if tenants is None else frozenset(tenants))
    return out


def read_only(store_id: str) -> GatewayError:
    return invalid_request(
        f"Vector store '{store_id}' is a Bedrock Knowledge Base served read-only by this "
        "gateway (GATEWAY_KNOWLEDGE_BASES): manage its documents in Bedrock.",
        param="vector_store_id", code="read_only_vector_store")


def to_bedrock_filter(value: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI filter (validated by vectors/filters.py) as a RetrievalFilter; a compound of
    one filter is that filter (andAll / orAll need two)."""
    kind = value["type"]
    if kind in ("and", "or"):
        parts = [to_bedrock_filter(p) for p in value["filters"]]
        return parts[0] if len(parts) == 1 else {"andAll" if kind == "and" else "orAll": parts}
    return {_COMPARISONS[kind]: {"key": value["key"], "value": value["value"]}}


class KnowledgeBases:
    def __init__(self, bases: dict[str, KnowledgeBase], *, region: str | None,
                 max_retries: int = 2, timeout: float = 120.0, client: Any = None) -> None:
        self.bases = bases
        # botocore reads AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME itself (tests)
        self._client = LazyClient(
            "bedrock-agent-runtime", client=client, region=region, endpoint_url=None,
            read_timeout=timeout, max_attempts=max_retries + 1)

    def get(self, tenant: str, store_id: str) -> KnowledgeBase | None:
        kb = self.bases.get(store_id)
        if kb is None or (kb.tenants is not None and tenant not in kb.tenants):
            return None
        return kb

    def client(self) -> Any:
        return self._client.get()

    async def search(self, kb: KnowledgeBase, queries: list[str], limit: int,
                     filters: dict[str, Any] | None, hybrid: bool) -> list[dict[str, Any]]:
        """Results as the search endpoint returns them, best first, ``score`` Bedrock's."""
        config: dict[str, Any] = {"numberOfResults": min(limit, MAX_RESULTS)}
        if filters is not None:
            config["filter"] = to_bedrock_filter(filters)
        if hybrid:
            config["overrideSearchType"] = "HYBRID"
        answers = await asyncio.gather(*(asyncio.to_thread(self._retrieve, kb, q, config)
                                         for q in queries))
        best: dict[tuple[str, str], dict[str, Any]] = {}
        for answer in answers:
            for hit in answer:
                found = _result(hit)
                key = (found["file_id"], found["content"][0]["text"])
                if key not in best or best[key]["score"] < found["score"]:
                    best[key] = found
        return sorted(best.values(), key=lambda r: -r["score"])[:limit]

    def _retrieve(self, kb: KnowledgeBase, query: str, config: dict[str, Any]
                  ) -> list[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client().retrieve(
                knowledgeBaseId=kb.knowledge_base_id, retrievalQuery={"text": query},
                retrievalConfiguration={"vectorSearchConfiguration": config})
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise GatewayError(
                502, f"The Bedrock Knowledge Base answered {error.get('Code', 'an error')}: "
                f"{str(error.get('Message', ''))[:300]}", type="server_error",
                code="knowledge_base_failed") from None
        except BotoCoreError as exc:
            raise GatewayError(502, f"The Bedrock Knowledge Base could not be reached "
                               f"({type(exc).__name__}).", type="server_error",
                               code="knowledge_base_failed") from None
        return list(answer.get("retrievalResults") or [])

    async def aclose(self) -> None:
        self._client.close()


def _result(hit: dict[str, Any]) -> dict[str, Any]:
    location = hit.get("location") or {}
    uri = ""
    for value in location.values():
        if isinstance(value, dict):
            uri = str(value.get("uri") or value.get("url") or value.get("id") or "")
            if uri:
                break
    file_id = str(hit.get("documentId") or uri or "knowledge-base")
    attributes = {k: v for k, v in (hit.get("metadata") or {}).items()
                  if isinstance(v, str | int | float | bool)
                  and not k.startswith("x-amz-bedrock-kb-")}
    return {"file_id": file_id, "filename": uri.rstrip("/").rsplit("/", 1)[-1] or file_id,
            "score": round(max(0.0, min(1.0, float(hit.get("score") or 0.0))), 6),
            "attributes": attributes,
            "content": [{"type": "text", "text": str((hit.get("content") or {}).get("text")
                                                     or "")}]}

"""Embeddings from Amazon Bedrock through InvokeModel (``GATEWAY_EMBEDDING_BACKEND=bedrock``):
Titan Text Embeddings v2 (``amazon.titan-embed-text-v2:0``: one text a call, the calls of a
batch at once) and Cohere Embed (``cohere.embed-*``: up to 96 texts a call, documents and
queries embedded as such). boto3 is imported on the first embedding; botocore retries what a
retry can fix (throttling, 5xx, a dropped connection) in its standard mode,
``GATEWAY_EMBEDDING_RETRIES`` times; every answer passes the same check as the
OpenAI-compatible one's (finite numbers, one dimension) before it is used.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from responses_gateway.aws_clients import LazyClient
from responses_gateway.vectors.embeddings import Dimensions, EmbeddingError

COHERE_BATCH = 96  # Cohere Embed's texts per request
TITAN_MAX_CHARS = 50_000  # Titan v2's inputText bound
FAMILIES = ("amazon.titan-embed-text", "cohere.embed")


def family_of(model: str) -> str | None:
    """The model family (a cross-region profile like ``us.cohere.embed-v4:0`` included)."""
    for family in FAMILIES:
        if family in model:
            return family
    return None


class BedrockEmbedder:
    def __init__(self, model: str, *, region: str | None, endpoint_url: str | None = None,
                 batch: int = 64, retries: int = 3, timeout: float = 120.0,
                 client: Any = None) -> None:
        self.model = model
        self.family = family_of(model)
        if self.family is None:
            raise ValueError(f"GATEWAY_EMBEDDING_MODEL {model!r} is not a Bedrock embedding "
                             "model this gateway speaks (amazon.titan-embed-text-v2:0, "
                             "cohere.embed-*)")
        self.batch = max(1, batch)
        self.dimensions = Dimensions()
        self._client = LazyClient(
            "bedrock-runtime", client=client, region=region, endpoint_url=endpoint_url,
            read_timeout=timeout, max_attempts=max(0, retries) + 1, pool=max(10, self.batch))

    def client(self) -> Any:
        return self._client.get()

    async def embed(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        if self.family == "cohere.embed":
            size = min(self.batch, COHERE_BATCH)
            bodies = [{"texts": texts[i:i + size],
                       "input_type": "search_query" if query else "search_document",
                       "truncate": "END", "embedding_types": ["float"]}
                      for i in range(0, len(texts), size)]
        else:
            bodies = [{"inputText": t[:TITAN_MAX_CHARS], "normalize": True,
                       "embeddingTypes": ["float"]} for t in texts]
        slots = asyncio.Semaphore(self.batch)

        async def one(body: dict[str, Any]) -> list[list[float]]:
            async with slots:
                return await asyncio.to_thread(self._invoke, body)

        results = await asyncio.gather(*(one(b) for b in bodies))
        vectors = [v for result in results for v in result]
        if len(vectors) != len(texts):
            raise EmbeddingError(f"The embedding model returned {len(vectors)} vectors for "
                                 f"{len(texts)} inputs.")
        return self.dimensions.check(vectors)

    def _invoke(self, body: dict[str, Any]) -> list[list[float]]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client().invoke_model(
                modelId=self.model, body=json.dumps(body), contentType="application/json",
                accept="application/json")
            answer = json.loads(response["body"].read())
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise EmbeddingError(f"Bedrock answered {error.get('Code', 'an error')}: "
                                 f"{str(error.get('Message', ''))[:300]}") from None
        except BotoCoreError as exc:
            raise EmbeddingError(f"Bedrock could not be reached ({type(exc).__name__}).") \
                from None
        except ValueError:
            raise EmbeddingError("Bedrock's answer is not JSON.") from None
        try:
            if self.family == "cohere.embed":
                found = answer["embeddings"]
                found = found["float"] if isinstance(found, dict) else found
                return [list(map(float, v)) for v in found]
            found = (answer.get("embeddingsByType") or {}).get("float") or answer["embedding"]
            return [list(map(float, found))]
        except (KeyError, TypeError, ValueError):
            raise EmbeddingError("Bedrock's answer is not an embedding.") from None

    async def aclose(self) -> None:
        self._client.close()

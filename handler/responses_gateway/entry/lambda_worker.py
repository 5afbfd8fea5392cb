"""The worker Lambda: runs one background response per asynchronous invocation.

Event: ``{"response_id": "resp_...", "tenant": "..."}``; or ``{"kind": "vector_store_file",
"tenant", "store_id", "file_id"}``: ingest one file into a vector store (vectors/service.py; a
failed one ends ``failed``, one cut short is taken up again when its lease runs out). A failed
asynchronous invocation that
reaches the dead-letter queue arrives here too (``Records`` from SQS, the body being the
original event, or an on-failure destination record holding it as ``requestPayload``): the
response is ended ``failed`` so nobody waits on it forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from responses_gateway.api.auth import OPEN_TENANT
from responses_gateway.config import settings_from_env
from responses_gateway.responses.gateway import Gateway

if TYPE_CHECKING:
    from responses_gateway.vectors.service import VectorStores

logger = logging.getLogger("responses_gateway.worker")

#: stop this long before Lambda's own limit, to end the response ``failed`` and store it
SAFETY_MARGIN_SECONDS = 10.0
_gateway: Gateway | None = None
_vector_stores: VectorStores | None = None
VECTOR_STORE_FILE = "vector_store_file"  # the event kind of a file to ingest
# One loop for the life of the execution environment: pooled clients stay bound to it.
_loop = asyncio.new_event_loop()


def _get_gateway() -> Gateway:
    global _gateway
    if _gateway is None:
        from responses_gateway.responses.services import build_gateway

        _gateway = build_gateway(settings_from_env())
    return _gateway


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _loop.run_until_complete(_handle(event, context))


async def _handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from responses_gateway.responses import background

    if event.get("kind") == VECTOR_STORE_FILE:
        return await _ingest(event)
    gateway = _get_gateway()
    if "Records" in event:  # dead letters: the invocation itself failed
        ended = []
        for record in event["Records"]:
            payload = _dead_letter_payload(record)
            if payload is None:
                logger.warning("dead letter without a response id: %r", record.get("body"))
                continue
            response_id = payload["response_id"]
            await background.fail_dead_letter(
                gateway, response_id, payload.get("tenant", OPEN_TENANT)
            )
            ended.append(response_id)
        return {"failed": ended}
    response_id = event["response_id"]
    tenant = event.get("tenant", OPEN_TENANT)
    deadline = None
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        remaining = context.get_remaining_time_in_millis() / 1000
        deadline = time.time() + remaining - SAFETY_MARGIN_SECONDS
    await background.run(gateway, response_id, tenant, deadline=deadline)
    record = await gateway.store.get(response_id, tenant)
    return {"response_id": response_id, "status": record.status if record else None}


async def _ingest(event: dict[str, Any]) -> dict[str, Any]:
    global _vector_stores
    if _vector_stores is None:
        from responses_gateway.platform import platform_for

        platform = platform_for(settings_from_env())
        _vector_stores = platform.vector_stores(platform.files())
    tenant, store_id, file_id = event["tenant"], event["store_id"], event["file_id"]
    status = await _vector_stores.ingest(tenant, store_id, file_id)
    return {"file_id": file_id, "vector_store_id": store_id, "status": status}


def _dead_letter_payload(record: dict[str, Any]) -> dict[str, Any] | None:
    try:
        body = orjson.loads(record.get("body") or "{}")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    payload = body.get("requestPayload", body)
    if not isinstance(payload, dict) or not isinstance(payload.get("response_id"), str):
        return None
    return payload

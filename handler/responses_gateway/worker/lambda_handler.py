"""The worker Lambda: runs one background response per asynchronous invocation.

Event: ``{"response_id": "resp_...", "tenant": "..."}``. A failed asynchronous invocation that
reaches the dead-letter target arrives here too (``Records`` from SQS): the response is ended
``failed`` so nobody waits on it forever.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from responses_gateway.config import Settings
from responses_gateway.runner import Gateway

SAFETY_MARGIN_SECONDS = 10.0
_gateway: Gateway | None = None
# One loop for the life of the execution environment: pooled clients stay bound to it.
_loop = asyncio.new_event_loop()


def _get_gateway() -> Gateway:
    global _gateway
    if _gateway is None:
        from responses_gateway.services import build_gateway

        _gateway = build_gateway(Settings.from_env())
    return _gateway


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _loop.run_until_complete(_handle(event, context))


async def _handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from responses_gateway.worker import background

    gateway = _get_gateway()
    if "Records" in event:  # dead letters: the invocation itself failed
        import orjson

        ended = []
        for record in event["Records"]:
            body = orjson.loads(record.get("body") or "{}")
            payload = body.get("requestPayload", body)
            if "response_id" in payload:
                await background.fail_dead_letter(gateway, payload["response_id"],
                                                  payload.get("tenant", "default"))
                ended.append(payload["response_id"])
        return {"failed": ended}
    deadline = None
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        remaining = context.get_remaining_time_in_millis() / 1000
        deadline = time.time() + remaining - SAFETY_MARGIN_SECONDS
    await background.run(gateway, event["response_id"], event.get("tenant", "default"),
                         deadline=deadline)
    record = await gateway.store.get(event["response_id"], event.get("tenant", "default"))
    return {"response_id": event["response_id"], "status": record.status if record else None}

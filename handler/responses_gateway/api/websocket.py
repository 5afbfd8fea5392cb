"""``/v1/responses`` as a WebSocket, on the same app and port as the HTTP routes (uvicorn).

The handshake is authenticated like an HTTP request (its ``Authorization`` header); a bad key
is refused with the HTTP 401 error body before the socket opens. Then each text message goes
to a :class:`~responses_gateway.api.ws_session.Session`, which runs responses in tasks beside
this receive loop, so a second message (another lane, an ``error``) is answered while one runs.

Close codes: ``1000`` after an idle spell with nothing running (``GATEWAY_WS_IDLE_SECONDS``)
and after the connection's age limit (``GATEWAY_WS_MAX_CONNECTION_SECONDS``, announced by an
``error`` event ``websocket_connection_limit_reached``, as OpenAI does at 60 minutes). A client
that goes away cancels its running responses; each is stored ``cancelled`` if it was to be
stored. Messages above ``GATEWAY_MAX_BODY_BYTES`` get an ``error`` event; uvicorn's own frame
limit (``--ws-max-size``, which the CLI sets just above it) closes with ``1009`` beyond that.

Nothing a client does is logged as a server error: a refused handshake (uvicorn's
websockets-sansio protocol logs "ASGI callable returned without completing handshake" after
every denial response it sent itself; :class:`_QuietDenials` drops that line for the
connections this route refused) and a client gone while events are sent (its responses end
``cancelled``, as when the receive loop sees it leave).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Any

import anyio
import anyio.lowlevel
import orjson
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from responses_gateway.api.stalled_client import (
    ClientStalled,
    gave_up_on_client,
    write_deadline,
    written,
)
from responses_gateway.api.ws_session import Event, Session, error_event
from responses_gateway.errors import GatewayError

_dumps = orjson.dumps
_UNFINISHED_HANDSHAKE = "ASGI callable returned without completing handshake."
#: set in the task of a connection this route refused with an HTTP response
_denied: contextvars.ContextVar[bool] = contextvars.ContextVar("ws_denied", default=False)


class _QuietDenials(logging.Filter):
    """Drops uvicorn's "returned without completing handshake" for a denied connection: the
    denial (``websocket.http.response``, allowed by the ASGI spec) was sent, but uvicorn's
    websockets-sansio protocol only counts a handshake done once the connection is lost.
    uvicorn logs it in the connection's task, right after this route returns, so the
    connection's context says whether this route refused it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_denied.get() and record.getMessage() == _UNFINISHED_HANDSHAKE)


logging.getLogger("uvicorn.error").addFilter(_QuietDenials())


def connection_limit_reached(seconds: float) -> GatewayError:
    return GatewayError(
        400,
        f"Responses websocket connection limit reached ({seconds:g} seconds). Create a new "
        "websocket connection to continue.",
        code="websocket_connection_limit_reached",
    )


async def responses_socket(websocket: WebSocket) -> None:
    """The WebSocket route of ``/v1/responses``."""
    app = websocket.app
    gateway = app.state.gateway
    settings = gateway.settings
    try:
        tenant = app.state.auth.tenant(websocket.headers.get("authorization"))
    except GatewayError as exc:
        await _deny(websocket, exc)
        return
    await websocket.accept()
    send_lock = asyncio.Lock()
    deadline = time.monotonic() + settings.ws_max_connection_seconds
    idle = settings.ws_idle_seconds
    stall = settings.send_timeout_seconds  # a client that stops reading (stalled_client.py)
    sending_until: float | None = None  # when the message being written counts as stalled
    previous_bytes = 0  # the message written before it, which its write waits to drain
    gone = False
    async with anyio.create_task_group() as group:

        async def emit(events: list[Event]) -> None:
            # One text message per event (clients parse one event per message); one writer at
            # a time, so two lanes never interleave inside a batch's order.
            nonlocal gone, sending_until, previous_bytes
            async with send_lock:
                try:
                    for event in events:
                        text = _dumps(event).decode()
                        sending_until = write_deadline(  # timed by watch_stalls
                            time.monotonic(), stall, previous_bytes)
                        await websocket.send({"type": "websocket.send", "text": text})
                        previous_bytes = len(text)
                except WebSocketDisconnect:  # the client left while we wrote
                    gone = True
                    group.cancel_scope.cancel()  # its responses end ``cancelled``
                    await anyio.lowlevel.checkpoint()  # this one too, from here
                    raise
                finally:
                    sending_until = None

        async def watch_stalls() -> None:
            """A message that waited past the send timeout: the client stopped reading
            (stalled_client.py); it counts as gone, and its responses end ``cancelled``."""
            nonlocal gone
            while True:
                until = sending_until
                wait = stall if until is None else until - time.monotonic()
                if wait <= 0:
                    gave_up_on_client(stall)
                    gone = True  # nothing more is written to it, not even a close frame
                    group.cancel_scope.cancel()
                    return
                await anyio.sleep(wait)

        if stall > 0:
            group.start_soon(watch_stalls)

        session = Session(gateway, tenant, emit, spawn=group.start_soon)
        while True:
            wait = deadline - time.monotonic()
            if idle > 0:
                wait = min(wait, idle)
            message: dict[str, Any] | None = None
            with anyio.move_on_after(max(wait, 0)):
                message = await websocket.receive()
            if message is None:  # quiet for a while, or the connection is old
                if time.monotonic() >= deadline:
                    await _wait_idle(session)
                    await emit([error_event(connection_limit_reached(
                        settings.ws_max_connection_seconds))])
                    break
                if session.busy:
                    continue
                break
            if message["type"] == "websocket.disconnect":
                gone = True
                break
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await session.receive(data)
        group.cancel_scope.cancel()  # running responses end ``cancelled``
    if not gone:
        try:  # the close frame waits for the client like any message
            await written(websocket.close(1000), stall)
        except ClientStalled:
            gave_up_on_client(stall)
        except WebSocketDisconnect:
            pass


async def _wait_idle(session: Session) -> None:
    """Let running responses end before the connection closes for its age."""
    while session.busy:
        await asyncio.sleep(0.05)


async def _deny(websocket: WebSocket, exc: GatewayError) -> None:
    """Refuse the handshake with the HTTP error OpenAI answers (or close 1008 without it)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = _dumps(exc.body())
        await websocket.send_denial_response(
            Response(body, status_code=exc.status, media_type="application/json")
        )
        _denied.set(True)
        return
    await websocket.close(1008, exc.message[:120])

"""The ASGI app: routes, error rendering, and the process-wide services built at startup."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from responses_gateway import collector
from responses_gateway.api import (
    common,
    container_routes,
    context_routes,
    conversation_routes,
    file_routes,
    models,
    response_routes,
    startup,
    vector_store_routes,
    warm_start,
)
from responses_gateway.api.auth import Authenticator
from responses_gateway.api.lazy_route import Route
from responses_gateway.config import Settings, settings_from_env
from responses_gateway.errors import GatewayError
from responses_gateway.ids import request_id
from responses_gateway.observability import RequestContext, scrub_server_logs
from responses_gateway.responses.gateway import Gateway
from responses_gateway.responses.services import build_gateway

logger = logging.getLogger("responses_gateway")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return common.error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"Invalid URL ({request.method} {request.url.path})"
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed for {request.url.path}."
    else:
        message = str(exc.detail)
    return common.error_response(GatewayError(exc.status_code, message))


async def _client_gone(request: Request, exc: Exception) -> Response:
    """The client left while sending its body: nothing to answer, nothing went wrong here."""
    return Response(status_code=499)


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    rid = request_id.get()
    quote = f" (Please include the request ID {rid} if you report it.)" if rid else ""
    return common.error_response(
        GatewayError(
            500,
            "The server had an error while processing your request. Sorry about that!" + quote,
            type="server_error",
            code="server_error",
        )
    )


async def _responses_socket(websocket: WebSocket) -> None:
    """WebSocket mode, imported on first use (cold start of the streaming entry point)."""
    from responses_gateway.api.websocket import responses_socket

    await responses_socket(websocket)


#: api/admin_routes.py's paths (its ROUTES), here so the app is built without importing it
ADMIN_PATHS = (
    "/v1/organization/usage/completions",
    "/v1/organization/costs",
    "/v1/admin/responses",
    "/v1/admin/responses/{response_id}",
    "/v1/admin/conversations",
    "/v1/admin/conversations/{conversation_id}/items",
    "/v1/admin/limits",
)


#: api/image_routes.py's paths (its ROUTES), imported on first use: a deployment that never
#: draws never loads the image backends
IMAGE_PATHS = ("/v1/images/generations", "/v1/images/edits")


def _images(path: str) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        from responses_gateway.api.image_routes import ROUTES

        [handler] = [fn for p, fn, _ in ROUTES if p == path]
        return await handler(request)

    return route


def _admin(path: str) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        from responses_gateway.api.admin_routes import handler_for

        return await handler_for(path)(request)

    return route


async def _dashboard(request: Request) -> Response:
    """The admin dashboard's static page (api/dashboard/), imported on first use."""
    from responses_gateway.api.dashboard import serve

    return serve(request)


def create_app(
    settings: Settings | None = None, gateway: Gateway | None = None, *,
    check_upstream: bool = False,
) -> Starlette:
    """The gateway app; services are built at startup from ``settings`` (default: env).

    ``check_upstream`` (``responses-gateway serve``) asks the upstream's ``GET /models`` once
    after start and logs what looks wrong with ``GATEWAY_UPSTREAM_URL``.
    """
    settings = settings or settings_from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own = gateway is None
        app.state.gateway = gateway or build_gateway(settings)
        scrub_server_logs()  # after the server configured its loggers
        startup.log_summary(settings)
        collector.tune()
        if warm_start.wanted():  # Lambda: what the first create builds, paid in init
            warm_start.warm(app.state.gateway)  # after tune(): the build's young collections
            collector.freeze_startup()  # then kept out of every later collection
        check = asyncio.ensure_future(startup.check_upstream(settings)) if check_upstream \
            else None
        # expired Files, Uploads and containers of every tenant (local: AWS reclaims per
        # tenant), vector files whose ingestion stopped, the container engine checked once
        sweep = startup.sweep_expired(app.state.gateway)
        reclaim = startup.reclaim_vector_files(app.state.gateway)
        engine = startup.check_containers(app.state.gateway)
        try:
            yield
        finally:
            # the app's own tasks end (and are waited for) before what they use closes
            tasks = [task for task in (check, sweep, reclaim, engine)
                     if task is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            if own:
                await app.state.gateway.aclose()

    app = Starlette(
        routes=[
            # Paths compiled on first match, in this order (api/lazy_route.py): the create,
            # then /health (the Lambda Web Adapter's readiness check) come first.
            Route("/v1/responses", response_routes.create_response, methods=["POST"]),
            Route("/health", response_routes.health, methods=["GET"]),
            WebSocketRoute("/v1/responses", _responses_socket),
            # Before {response_id}, every method: "compact" is never taken for an id
            # (api/context_routes.py).
            Route("/v1/responses/compact", context_routes.compact_response,
                  methods=context_routes.METHODS),
            Route("/v1/responses/input_tokens", context_routes.count_input_tokens,
                  methods=context_routes.METHODS),
            Route("/v1/responses/{response_id}", response_routes.retrieve_response,
                  methods=["GET"]),
            Route("/v1/responses/{response_id}", response_routes.delete_response,
                  methods=["DELETE"]),
            Route("/v1/responses/{response_id}/cancel", response_routes.cancel_response,
                  methods=["POST"]),
            Route(
                "/v1/responses/{response_id}/input_items",
                response_routes.list_input_items,
                methods=["GET"],
            ),
            *(Route(path, fn, methods=[m]) for path, fn, m in conversation_routes.ROUTES),
            *(Route(path, fn, methods=[m]) for path, fn, m in file_routes.ROUTES),
            *(Route(path, fn, methods=[m]) for path, fn, m in vector_store_routes.ROUTES),
            *(Route(path, fn, methods=[m]) for path, fn, m in container_routes.ROUTES),
            *(Route(path, _images(path), methods=["POST"]) for path in IMAGE_PATHS),
            Route("/v1/models", models.list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", models.retrieve_model, methods=["GET"]),
            # Admin routes and the dashboard, imported on first use (admin keys only).
            *(Route(path, _admin(path), methods=["GET"]) for path in ADMIN_PATHS),
            Route("/dashboard", _dashboard, methods=["GET"]),
            Route("/dashboard/{name}", _dashboard, methods=["GET"]),
        ],
        exception_handlers={
            GatewayError: _gateway_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            Exception: _unexpected,
        },
        lifespan=lifespan,
    )
    # A path with a trailing slash is OpenAI's 404 "Invalid URL (POST /v1/responses/)", not
    # Starlette's 307 to the path without it.
    app.router.redirect_slashes = False
    app.add_middleware(RequestContext)  # Lambda request id / trace header for logs, traces
    app.state.auth = Authenticator(settings.api_keys, settings.admin_keys)
    app.state.settings = settings
    app.state.upstream_models = models.UpstreamModels()  # GET /v1/models's cache
    return app

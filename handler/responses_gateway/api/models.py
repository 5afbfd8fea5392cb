"""``GET /v1/models``: the names a client may send as ``model``; ``GET /v1/models/{model}``:
one of them (OpenAI's 404 ``model_not_found`` for any other).

The mapped names (``GATEWAY_MODEL_MAP`` keys, ``GATEWAY_MODELS``) first, then what the default
backend lists itself (its server's ``GET /models``; Bedrock's foundation models and inference
profiles), since unmapped names pass through to it. Clients that check names (model pickers,
LlamaIndex's ``OpenAIResponses``) then accept every model the upstream serves.

The upstream's list is cached per process for :data:`FRESH_SECONDS`; when it cannot be read,
the mapped names are still listed (a picker keeps working) and the failure is logged once per
:data:`RETRY_SECONDS`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway.api.common import JSON, gateway_of, tenant_of
from responses_gateway.errors import GatewayError
from responses_gateway.responses.gateway import Gateway

logger = logging.getLogger("responses_gateway.models")
FRESH_SECONDS = 300.0
RETRY_SECONDS = 15.0
OWNER = "responses-gateway"
_STARTED = int(time.time())  # a mapped name's ``created``: stable across calls


class UpstreamModels:
    """The default backend's model list, asked at most once per :data:`FRESH_SECONDS`."""

    def __init__(self) -> None:
        self._listed: list[dict[str, Any]] = []
        self._until = 0.0

    async def get(self, gateway: Gateway) -> list[dict[str, Any]]:
        now = time.monotonic()
        if now < self._until:
            return self._listed
        backend = gateway.backend_for(gateway.settings.backend)
        try:
            listed = await backend.list_models()
        except GatewayError as exc:
            logger.warning("could not list the upstream's models: %s", exc.message,
                           extra={"backend": gateway.settings.backend})
            self._until = now + RETRY_SECONDS  # keep what was listed before, if anything
            return self._listed
        unique = {e["id"]: e for e in listed if isinstance(e.get("id"), str)}
        self._listed = [_model(entry) for entry in unique.values()]
        self._until = now + FRESH_SECONDS
        return self._listed


def _model(entry: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's model object: exactly its four fields, whatever else the server sent."""
    created = entry.get("created")
    owner = entry.get("owned_by")
    return {
        "id": entry["id"],
        "object": "model",
        "created": created if isinstance(created, int) else 0,
        "owned_by": owner if isinstance(owner, str) and owner else OWNER,
    }


async def list_models(request: Request) -> Response:
    tenant_of(request)
    return JSON({"object": "list", "data": await _listed(request)})


async def retrieve_model(request: Request) -> Response:
    """One listed model (a name may hold slashes: ``org/model``). A name the list lacks may
    still pass through to the upstream as ``model``; OpenAI answers a model it does not
    serve with a 404, and so does this."""
    tenant_of(request)
    name = request.path_params["model"]
    if not name:  # ``/v1/models/``: no route, as any trailing slash (api/app.py)
        raise GatewayError(404, f"Invalid URL (GET {request.url.path})")
    for entry in await _listed(request):
        if entry["id"] == name:
            return JSON(entry)
    raise GatewayError(404, f"The model `{name[:256]}` does not exist or you do not have access "
                       "to it.", code="model_not_found")


async def _listed(request: Request) -> list[dict[str, Any]]:
    """The mapped names first, then the default backend's own (cached)."""
    gateway = gateway_of(request)
    settings = gateway.settings
    data = [{"id": name, "object": "model", "created": _STARTED, "owned_by": OWNER}
            for name in dict.fromkeys([*settings.models, *settings.model_map,
                                       *(settings.routes.routes if settings.routes else ())])]
    named = {entry["id"] for entry in data}
    cache: UpstreamModels = request.app.state.upstream_models
    return data + [entry for entry in await cache.get(gateway) if entry["id"] not in named]

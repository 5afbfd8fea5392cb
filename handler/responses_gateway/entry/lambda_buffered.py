"""The buffered Lambda entry point: the same ASGI app, wrapped by Mangum.

For function URLs in ``BUFFERED`` invoke mode, ``sam local invoke`` and tests driven by Lambda
events (``events/``). A streaming request still gets the whole SSE body, in one response.
The deployed API function streams instead: the Lambda Web Adapter runs the app under uvicorn
(``run.sh``).

The services are built once per execution environment, not per invocation (Mangum runs the
app's lifespan on every call): warm invocations keep their connection pools and clients,
which stay bound to Mangum's one event loop.

    Handler: responses_gateway.entry.lambda_buffered.handler
"""

from __future__ import annotations

from typing import Any

from mangum import Mangum

from responses_gateway.api.app import create_app
from responses_gateway.config import Settings, settings_from_env
from responses_gateway.responses.services import build_gateway


def make_handler(settings: Settings | None = None) -> Any:
    """A Mangum handler for ``settings`` (default: the environment)."""
    settings = settings or settings_from_env()
    app = create_app(settings, gateway=build_gateway(settings))
    return Mangum(app, lifespan="auto")


handler = make_handler()

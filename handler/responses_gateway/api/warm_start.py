"""What a fresh process's first create builds, built in Lambda's init phase instead.

The first create of a process imports pydantic and the request models and builds their
validators (about 1.5x the framework floor's import time, benchmarks/cold_start.py), and makes
the backend's HTTP client and TLS context. Under the Lambda Web Adapter the init phase lasts
until ``/health`` answers, i.e. until the app's lifespan startup ends; work done there is paid
before the first request when Lambda initializes an environment ahead of traffic (proactive
initialization, provisioned concurrency, SnapStart's snapshot), and never after a request has
arrived. On an on-demand cold start the first request waits for init anyway, so the total is
the same either way (docs/cold_start.md has the figures). Outside Lambda (``serve``, tests)
nothing is built early: a local process starts as fast as it can, and the entry's import stays
lazy everywhere (tests/test_entry_imports.py).
"""

from __future__ import annotations

import logging
import os
import weakref

from responses_gateway.responses.gateway import Gateway

logger = logging.getLogger("responses_gateway.warm_start")

#: A create body that reaches every validator a plain create uses (a function tool included).
_BODY = {"model": "warm-start", "input": "warm start",
         "tools": [{"type": "function", "name": "warm_start"}]}
#: Gateways already warmed: once each (Mangum's buffered entry runs the lifespan per call).
_warmed: weakref.WeakSet[Gateway] = weakref.WeakSet()


def wanted() -> bool:
    """In a Lambda environment (the streaming function under the Lambda Web Adapter)."""
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def warm(gateway: Gateway) -> None:
    """Build the request validators and the configured backend's client now (on the event
    loop the requests will use: the client's pool is bound to it). Never fails startup: what
    could not be built here is built by the first create, as without this."""
    if gateway in _warmed:
        return
    _warmed.add(gateway)
    try:
        from responses_gateway.translate.request import parse_create_request

        parse_create_request(_BODY, served=gateway.served_tools)
        gateway.sealer.ready()  # the reasoning sealer's cipher (translate/sealing.py)
    except Exception:  # an optimization only
        logger.warning("could not build the request validators at init", exc_info=True)
    try:
        backend = gateway.backend_for(gateway.settings.route(_BODY["model"]).backend)
        backend = getattr(backend, "_inner", backend)  # under tracing (backends/traced.py)
        http = getattr(backend, "_http", None)  # a Chat Completions backend's client
        if callable(http):
            http()
    except Exception:  # an optimization only
        logger.warning("could not build the backend's client at init", exc_info=True)

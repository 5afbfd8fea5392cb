"""Lambda's init builds what a fresh process's first create builds (api/warm_start.py): the
request validators and the backend's client, on the loop requests use; outside Lambda nothing
is built early, and a failure to build never stops startup. End to end through run.sh under
a Lambda environment: tests/test_lwa_startup.py."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from responses_gateway.api import warm_start
from responses_gateway.api.app import create_app
from responses_gateway.config import Settings


def _started(tmp_path: Path) -> dict[str, object]:
    """Start and stop the app's lifespan; what the backend held while it ran."""
    app = create_app(Settings(upstream_url="http://127.0.0.1:9/v1",
                              store=f"sqlite:{tmp_path / 'g.db'}"))
    seen: dict[str, object] = {}

    async def run() -> None:
        async with app.router.lifespan_context(app):
            gateway = app.state.gateway
            backend = gateway.backend_for(gateway.settings.route("m").backend)
            backend = getattr(backend, "_inner", backend)
            seen["client"] = backend._client
            seen["loop"] = backend._loop
            seen["running"] = asyncio.get_running_loop()

    asyncio.run(run())
    return seen


def test_lambda_init_builds_the_backend_client_on_the_requests_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm_start, "wanted", lambda: True)
    seen = _started(tmp_path)
    assert seen["client"] is not None
    assert seen["loop"] is seen["running"]  # the pool is bound to the loop requests run on


def test_outside_lambda_the_first_create_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    assert not warm_start.wanted()
    assert _started(tmp_path)["client"] is None


def test_lambda_init_builds_the_request_validators(monkeypatch: pytest.MonkeyPatch) -> None:
    from responses_gateway.translate import request_models

    built: list[dict] = []
    real = request_models.parse_create_request
    monkeypatch.setattr(request_models, "parse_create_request",
                        lambda body, **kw: built.append(body) or real(body, **kw))

    class Gateway:  # what warm_start reads of the gateway
        served_tools = frozenset()
        settings = Settings(upstream_url="http://127.0.0.1:9/v1")

        def backend_for(self, kind: str) -> object:
            return object()

    warm_start.warm(Gateway())  # type: ignore[arg-type]
    assert built and built[0]["tools"][0]["type"] == "function"
    assert request_models.CreateResponseRequest.__pydantic_complete__


def test_a_failure_to_build_early_does_not_stop_startup(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Gateway:
        served_tools = frozenset()
        settings = Settings(upstream_url="http://127.0.0.1:9/v1")

        def backend_for(self, kind: str) -> object:
            raise RuntimeError("no backend here")

    with caplog.at_level(logging.WARNING, logger="responses_gateway.warm_start"):
        warm_start.warm(Gateway())  # type: ignore[arg-type]
    assert "could not build the backend's client at init" in caplog.text


def test_each_gateway_is_warmed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mangum's buffered entry runs the lifespan on every call: the work is done once."""
    asked: list[str] = []

    class Gateway:
        served_tools = frozenset()
        settings = Settings(upstream_url="http://127.0.0.1:9/v1")

        def backend_for(self, kind: str) -> object:
            asked.append(kind)
            return object()

    gateway = Gateway()
    warm_start.warm(gateway)  # type: ignore[arg-type]
    warm_start.warm(gateway)  # type: ignore[arg-type]
    assert asked == ["openai"]

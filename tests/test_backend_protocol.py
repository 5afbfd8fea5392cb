"""The Backend seam (backends/base.py, backends/instances.py): every capability declared with a
default, kinds registered in one table that config checks against, and the tracing wrapper
passing every capability through."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest

from responses_gateway.backends import instances
from responses_gateway.backends import traced as traced_module
from responses_gateway.backends.base import Backend, BackendRequest, BaseBackend, Chunk
from responses_gateway.config import Settings, settings_from_env

#: What Backend declares beyond ``name`` and ``stream``.
CAPABILITIES = ("aclose", "prepare", "count_tokens", "context_window", "reasoning_input",
                "list_models")


class _Offers(BaseBackend):
    """A backend that offers everything, and remembers what it was asked."""

    name = "offers"

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        yield [{"choices": []}]

    async def aclose(self) -> None:
        self.asked.append(("aclose", None))

    async def prepare(self, request: BackendRequest) -> None:
        request.extra["prepared"] = True

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        self.asked.append(("count_tokens", body))
        return 7

    async def context_window(self, model: str) -> int | None:
        return {"m": 4096}.get(model)

    def reasoning_input(self, configured: str | None) -> str | None:
        return "reasoning_content"

    async def list_models(self) -> list[dict[str, Any]]:
        return [{"id": "m", "object": "model", "created": 0, "owned_by": "me"}]


def test_the_protocol_and_the_base_class_declare_the_same_capabilities() -> None:
    declared = {name for name, _ in inspect.getmembers(Backend) if not name.startswith("_")}
    assert set(CAPABILITIES) | {"stream"} <= declared
    for name in CAPABILITIES:
        assert callable(getattr(BaseBackend, name)), name


def test_base_backend_offers_nothing_by_default() -> None:
    class Bare(BaseBackend):
        async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
            yield [{"choices": []}]

    bare = Bare()
    request = BackendRequest(body={"model": "m"})

    async def ask() -> tuple[Any, ...]:
        return (await bare.prepare(request), await bare.count_tokens({}),
                await bare.context_window("m"), await bare.list_models(), await bare.aclose())

    assert asyncio.run(ask()) == (None, None, None, [], None)
    assert request.extra == {}
    assert bare.reasoning_input("reasoning_content") == "reasoning_content"
    assert bare.reasoning_input(None) is None


def test_the_tracing_wrapper_passes_every_capability_through() -> None:
    inner = _Offers()
    traced: Any = traced_module._TracedBackend(inner)
    request = BackendRequest(body={"model": "m"})

    async def ask() -> tuple[Any, ...]:
        await traced.prepare(request)
        chunks = [c async for batch in traced.stream(request) for c in batch]
        answers = (chunks, await traced.count_tokens({"x": 1}),
                   await traced.context_window("m"), await traced.list_models())
        await traced.aclose()
        return answers

    chunks, counted, window, listed = asyncio.run(ask())
    assert traced.name == "offers" and request.extra == {"prepared": True}
    assert chunks == [{"choices": []}] and counted == 7 and window == 4096
    assert listed[0]["id"] == "m"
    assert traced.reasoning_input(None) == "reasoning_content"
    assert inner.asked == [("count_tokens", {"x": 1}), ("aclose", None)]
    assert "__getattr__" not in vars(type(traced))  # declared, not discovered


@pytest.mark.parametrize("kind", instances.KINDS)
def test_every_registered_kind_builds_from_settings(kind: str) -> None:
    backend = instances.make(kind, Settings(bedrock_region="us-east-1"))
    assert isinstance(backend, BaseBackend) and backend.name == kind


def test_config_checks_kinds_against_the_registry() -> None:
    assert settings_from_env({"GATEWAY_BACKEND": "Bedrock"}).backend == "bedrock"
    with pytest.raises(ValueError, match="'openai', 'bedrock'"):
        settings_from_env({"GATEWAY_BACKEND": "vertex"})
    settings = settings_from_env({"GATEWAY_MODEL_MAP": "a=bedrock:x,b=llama3:8b,c=vertex:y"})
    assert (settings.route("a").backend, settings.route("a").model) == ("bedrock", "x")
    # a prefix that names no backend is part of the model name (Ollama's tags)
    assert (settings.route("b").backend, settings.route("b").model) == ("openai", "llama3:8b")
    assert settings.route("c").model == "vertex:y"

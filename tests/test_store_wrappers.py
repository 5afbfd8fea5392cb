"""The stores that wrap another (large values moved to blobs, tracing) cover every member of
every store role (store/base.py ``ROLES``) by name, with no ``__getattr__`` fallback: a member
a wrapper forgot answered with the base class's default (``None`` for ``usage_store``: usage
and limits went quiet once an image backend was configured), and any other name reached the
engine behind the wrapper's back."""

from __future__ import annotations

import asyncio
import inspect
from abc import abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from unittest import mock

import pytest

from responses_gateway import observability
from responses_gateway.errors import GatewayError
from responses_gateway.store.base import ROLES, Store, StoreLimits, ToolReadStore
from responses_gateway.store.blobs import BlobbedStore, MemoryBlobs
from responses_gateway.store.sqlite import SQLiteStore
from responses_gateway.store.wrapper import StoreWrapper, role_calls, role_members, uncovered
from responses_gateway.traced_store import TracedStore as _TracedStore

WRAPPERS = [BlobbedStore, _TracedStore]


def _wrap(wrapper: type, inner: Any) -> Store:
    return BlobbedStore(inner, MemoryBlobs()) if wrapper is BlobbedStore else wrapper(inner)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_the_wrappers_are_store_wrappers() -> None:
    """Every wrapper the gateway builds goes through the checked base (none bypasses it)."""
    assert set(WRAPPERS) <= _subclasses(StoreWrapper)
    for wrapper in WRAPPERS:
        assert issubclass(wrapper, Store)


@pytest.mark.parametrize("wrapper", sorted(_subclasses(StoreWrapper) | {StoreWrapper},
                                           key=lambda c: c.__qualname__))
def test_no_store_wrapper_falls_back_to_getattr(wrapper: type) -> None:
    assert not [c.__qualname__ for c in wrapper.__mro__ if "__getattr__" in vars(c)]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_every_role_member_is_written_out_or_listed(wrapper: type) -> None:
    """For every public member of every role: the wrapper's own (its ``__dict__``), written
    out in its body or generated from its declared lists; never a role's default."""
    listed = set(wrapper.passed_through) | set(wrapper.around_each)
    for role in ROLES:
        for name, member in vars(role).items():
            if name.startswith("_") or not (inspect.isfunction(member)
                                            or isinstance(member, property)):
                continue
            assert name in vars(wrapper), f"{wrapper.__name__} misses {role.__name__}.{name}"
            own = vars(wrapper)[name]
            generated = getattr(own.fget if isinstance(own, property) else own,
                                "_generated", False)
            assert generated == (name in listed), f"{wrapper.__name__}.{name}"
    assert uncovered(wrapper) == set()


def test_a_member_added_to_a_role_is_missed_by_both_wrappers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the check above catches: a role that grows a method no wrapper covers."""

    @abstractmethod
    async def drop_tool_reads(self: Any, tenant: str) -> None:
        """A new call."""

    monkeypatch.setattr(ToolReadStore, "drop_tool_reads", drop_tool_reads, raising=False)
    assert "drop_tool_reads" in role_members()
    for wrapper in WRAPPERS:
        assert uncovered(wrapper) == {"drop_tool_reads"}
        assert "drop_tool_reads" not in vars(wrapper)


def test_a_wrapper_that_misses_a_member_is_refused_when_defined() -> None:
    everything = tuple(name for name in role_members() if name != "usage_store")
    with pytest.raises(TypeError, match="usage_store neither written out nor listed"):
        type("Forgetful", (StoreWrapper,), {"passed_through": everything})
    with pytest.raises(TypeError, match="no role's member"):
        type("Unknown", (StoreWrapper,), {"passed_through": (*everything, "usage_store",
                                                             "vacuum")})
    with pytest.raises(TypeError, match="also written out"):
        type("Twice", (StoreWrapper,), {"passed_through": (*everything, "usage_store"),
                                        "usage_store": lambda self: None})
    with pytest.raises(TypeError, match="not a coroutine"):
        type("Traced", (StoreWrapper,), {"passed_through": everything,
                                         "around_each": ("usage_store",)})


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_name_no_role_declares_is_not_found(wrapper: type, tmp_path) -> None:
    inner = SQLiteStore(str(tmp_path / "g.db"))
    try:
        with pytest.raises(AttributeError):
            _wrap(wrapper, inner).path  # noqa: B018  # the engine's, not the interface's
    finally:
        asyncio.run(inner.aclose())


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_wrappers_hand_on_the_inner_stores_bounds(wrapper: type, tmp_path) -> None:
    limits = StoreLimits(conversation_items=7, response_bytes=100)
    inner = SQLiteStore(str(tmp_path / "g.db"), limits=limits)
    try:
        wrapped = _wrap(wrapper, inner)
        assert wrapped.limits is limits
        with pytest.raises(GatewayError, match="100 bytes"):
            wrapped.check_input_items([{"type": "message", "content": "x" * 200}])
        assert type(wrapped.usage_store()) is type(inner.usage_store())
        assert type(wrapped.health_store()) is type(inner.health_store())
    finally:
        asyncio.run(inner.aclose())


def test_generated_members_carry_the_roles_signature() -> None:
    for wrapper in WRAPPERS:
        for name in (*wrapper.passed_through, *wrapper.around_each):
            own, declared = vars(wrapper)[name], getattr(Store, name)
            if isinstance(own, property):
                continue
            assert inspect.signature(own) == inspect.signature(declared), name
            assert own.__doc__ == declared.__doc__


def test_every_traced_call_is_one_subsegment_and_handed_on_as_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert set(_TracedStore.around_each) == set(role_calls()) - {"aclose"}
    names: list[str] = []

    @asynccontextmanager
    async def recorded(name: str, **annotations: str) -> AsyncIterator[None]:
        names.append(name)
        yield

    monkeypatch.setattr(observability, "subsegment", recorded)
    for name in _TracedStore.around_each:
        names.clear()
        inner = mock.AsyncMock()
        asyncio.run(getattr(_TracedStore(inner), name)("a", 1, key="v"))
        assert names == [f"store.{name}"]
        getattr(inner, name).assert_awaited_once_with("a", 1, key="v")


def test_blobbed_pass_throughs_hand_on_as_called() -> None:
    inner = mock.AsyncMock()
    inner.usage_store = mock.Mock(return_value="ledger")
    inner.health_store = mock.Mock(return_value="health")
    inner.check_input_items = mock.Mock(return_value=None)
    wrapped = BlobbedStore(inner, MemoryBlobs())
    for name in BlobbedStore.passed_through:
        if name == "limits":
            continue
        member = getattr(wrapped, name)
        if inspect.iscoroutinefunction(getattr(Store, name)):
            asyncio.run(member("a", 1, key="v"))
            getattr(inner, name).assert_awaited_once_with("a", 1, key="v")
        else:
            member("a")
            getattr(inner, name).assert_called_once_with("a")
    assert wrapped.usage_store() == "ledger" and wrapped.health_store() == "health"


def test_blobbed_store_hands_on_the_inner_usage_and_health(tmp_path) -> None:
    inner = SQLiteStore(str(tmp_path / "g.db"))
    wrapped = BlobbedStore(inner, MemoryBlobs())
    assert wrapped.usage_store() is not None
    assert type(wrapped.usage_store()) is type(inner.usage_store())
    assert type(wrapped.health_store()) is type(inner.health_store())

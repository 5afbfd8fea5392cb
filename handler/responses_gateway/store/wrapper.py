"""A store around another store (tracing, large values in blobs), with no fallback.

A wrapper that forwarded unknown names (``__getattr__``) answered a method it forgot with the
base class's default instead of the inner store's: ``usage_store()`` once answered None behind
the blob store, and usage and limits went quiet whenever an image backend was configured.

So a :class:`StoreWrapper` covers every member of every role (``store.base.ROLES``) by name,
and its class is refused (TypeError, at import) when one is missing. Each member is either
written out in the subclass, or named in one of its two lists, from which this module
generates the method:

- ``passed_through``: handed to the inner store as called;
- ``around_each``: handed on inside ``self._around(name)`` (an async context manager: the
  tracing wrapper's subsegment).

A name no role declares is not found on a wrapper (AttributeError); reach the engine through
what a role gives, not through the wrapper.
"""

from __future__ import annotations

import inspect
from abc import update_abstractmethods
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

from responses_gateway.store.base import ROLES, Store


def role_members() -> dict[str, type]:
    """Every public member (method or property) of every role, with the role declaring it."""
    members: dict[str, type] = {}
    for role in ROLES:
        for name, member in vars(role).items():
            if not name.startswith("_") and (inspect.isfunction(member)
                                             or isinstance(member, property)):
                members[name] = role
    return members


def role_calls(*, but: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The role members that are coroutines (every store call that does I/O), but ``but``."""
    return tuple(name for name, role in role_members().items()
                 if inspect.iscoroutinefunction(vars(role)[name]) and name not in but)


def uncovered(cls: type) -> set[str]:
    """The role members ``cls`` neither writes out nor declares in one of its lists."""
    declared = set(getattr(cls, "passed_through", ())) | set(getattr(cls, "around_each", ()))
    written = {name for name, member in vars(cls).items() if not _generated(member)}
    return set(role_members()) - written - declared


def _generated(member: Any) -> bool:
    """Whether ``member`` was generated from a list (not written out)."""
    return getattr(member.fget if isinstance(member, property) else member, "_generated", False)


class StoreWrapper(Store):
    """The inner store, every role member covered (see the module docstring)."""

    passed_through: ClassVar[tuple[str, ...]] = ()
    around_each: ClassVar[tuple[str, ...]] = ()

    def __init__(self, inner: Store) -> None:
        self._inner = inner

    def _around(self, name: str) -> AbstractAsyncContextManager[Any]:
        """What each ``around_each`` call runs inside; a subclass that declares some says."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        members = role_members()
        calls = set(role_calls())
        listed = list(cls.passed_through) + list(cls.around_each)
        problems = [f"{name} is no role's member" for name in listed if name not in members]
        problems += [f"{name} is listed twice or also written out" for name in set(listed)
                     if listed.count(name) > 1 or name in vars(cls)]
        problems += [f"{name} is not a coroutine: pass it through" for name in cls.around_each
                     if name in members and name not in calls]
        missing = uncovered(cls)
        if missing:
            problems.append(f"{', '.join(sorted(missing))} neither written out nor listed")
        if problems:
            raise TypeError(f"{cls.__name__} does not cover the store roles: "
                            + "; ".join(problems))
        for name in cls.passed_through:
            setattr(cls, name, _forwarder(cls, name, members, around=False))
        for name in cls.around_each:
            setattr(cls, name, _forwarder(cls, name, members, around=True))
        update_abstractmethods(cls)


def _forwarder(cls: type, name: str, members: dict[str, type], *, around: bool) -> Any:
    """The generated member ``name`` of ``cls``: the inner store's, with the role's signature
    and doc (``members``: :func:`role_members`, read once per class)."""
    declared = vars(members[name])[name]
    if isinstance(declared, property):
        def read(self: StoreWrapper) -> Any:
            return getattr(self._inner, name)

        _describe(read, declared.fget, cls, name)
        return property(read, doc=declared.__doc__)
    if around:
        async def forward(self: StoreWrapper, *args: Any, **kwargs: Any) -> Any:
            async with self._around(name):
                return await getattr(self._inner, name)(*args, **kwargs)
    elif inspect.iscoroutinefunction(declared):
        async def forward(self: StoreWrapper, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self._inner, name)(*args, **kwargs)
    else:
        def forward(self: StoreWrapper, *args: Any, **kwargs: Any) -> Any:
            return getattr(self._inner, name)(*args, **kwargs)
    _describe(forward, declared, cls, name)
    return forward


def _describe(forward: Any, declared: Callable[..., Any], cls: type, name: str) -> None:
    """Mark a generated member as such, named and documented as the role declares it; its
    signature is the declared one's, which ``inspect.signature`` finds through ``__wrapped__``
    when asked (computing it for every member here cost the entry points ~1 ms at import)."""
    forward._generated = True
    forward.__name__ = name
    forward.__qualname__ = f"{cls.__qualname__}.{name}"
    forward.__doc__ = declared.__doc__
    forward.__wrapped__ = declared

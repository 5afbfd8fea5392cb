"""Bases of the records the entry points import, written out instead of made by ``@dataclass``.

``@dataclass`` generates each class's methods as source text and compiles it (``exec``) when the
module is imported: ~0.5 ms a class, and the streaming entry imports a few dozen records, so
that was a third of the gateway's own share of a cold start (benchmarks/cold_start.py). A
record here is a plain class with ``__slots__``, its fields declared as annotations (in
order) and its own ``__init__``; these bases give what the dataclass gave besides: ``repr``
over the fields (a field whose name starts with ``_`` is not shown), ``Frozen``'s assignment
errors (``dataclasses.FrozenInstanceError``, as ``frozen=True``), ``Compared``'s field-wise
comparison (``eq=True``: a mutable record is then unhashable) and ``Value``'s, with a hash
(``eq=True, frozen=True``). ``Record`` and ``Frozen`` compare by identity (``eq=False``). No
record here is a dataclass: ``dataclasses.replace`` and ``fields`` do not apply to them.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any


class Record:
    """A record's ``repr``: ``Name(field=value, ...)``, as a dataclass's."""

    __slots__ = ()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}"
                          for name in self.__class__.__annotations__ if not name.startswith("_"))
        return f"{self.__class__.__qualname__}({shown})"


class Compared(Record):
    """A record equal to another of its class with equal fields; unhashable, as a mutable
    dataclass."""

    __slots__ = ()

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__class__.__annotations__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]


class Frozen(Record):
    """A record no one may change after ``__init__`` (which sets its fields with
    ``object.__setattr__``); copied and pickled field by field, as a frozen dataclass."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> list[Any]:
        return [getattr(self, name) for name in self.__class__.__annotations__]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(self.__class__.__annotations__, state, strict=True):
            object.__setattr__(self, name, value)


class Value(Frozen, Compared):
    """A frozen record equal to another of its class with equal fields, hashed by them."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._key())

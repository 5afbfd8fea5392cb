"""The stores that wrap another (large values moved to blobs, tracing) forward every method
the base classes give a default to: their ``__getattr__`` is never asked for a name the base
class defines, so a method left out silently answers with the base's default (``None`` for
``usage_store``: usage and limits went quiet once an image backend was configured)."""

from __future__ import annotations

import inspect

import pytest

from responses_gateway.observability import _TracedStore
from responses_gateway.store.base import ConversationStore, Store
from responses_gateway.store.blobs import BlobbedStore, MemoryBlobs
from responses_gateway.store.sqlite import SQLiteStore


def _defaults(cls: type) -> set[str]:
    """Public methods a base class implements itself (not abstract)."""
    return {
        name for name, member in vars(cls).items()
        if inspect.isfunction(member) and not name.startswith("_")
        and not getattr(member, "__isabstractmethod__", False)
    }


@pytest.mark.parametrize("wrapper", [BlobbedStore, _TracedStore])
def test_wrappers_define_every_defaulted_method(wrapper: type) -> None:
    defaulted = (_defaults(Store) | _defaults(ConversationStore)) - {"check_input_items"}
    missing = {name for name in defaulted if name not in vars(wrapper)}
    assert not missing, f"{wrapper.__name__} does not forward {sorted(missing)}"


def test_blobbed_store_hands_on_the_inner_usage_and_health(tmp_path) -> None:
    inner = SQLiteStore(str(tmp_path / "g.db"))
    wrapped = BlobbedStore(inner, MemoryBlobs())
    assert wrapped.usage_store() is not None
    assert type(wrapped.usage_store()) is type(inner.usage_store())
    assert type(wrapped.health_store()) is type(inner.health_store())

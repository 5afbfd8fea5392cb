"""The store behind tracing: every store call in an X-Ray subsegment (made by
responses/services.py's ``build_gateway``, in Lambda with tracing on).

Its own module so that a process that does not trace never makes the class: a
:class:`~responses_gateway.store.wrapper.StoreWrapper` subclass checks every role member and
generates its forwarders when it is made (~1.5 ms of each cold start when observability.py,
which every entry point imports, made it).
"""

from __future__ import annotations

import contextlib

from responses_gateway import observability
from responses_gateway.store.wrapper import StoreWrapper, role_calls


class TracedStore(StoreWrapper):
    """Every store call (each role's coroutines, conversation calls included) in a
    ``store.<method>`` subsegment; the rest handed on as is."""

    passed_through = ("limits", "check_input_items", "usage_store", "health_store", "aclose")
    around_each = role_calls(but=passed_through)

    def _around(self, name: str) -> contextlib.AbstractAsyncContextManager[None]:
        return observability.subsegment(f"store.{name}")

"""A Starlette route whose path regex is compiled when it is first matched, not when the app
is built.

Starlette compiles each route's path into a regex in ``Route.__init__``: ~3 ms of every cold
start for the gateway's ~60 routes (``re`` compiles in Python), most of which a Lambda instance
that only serves creates never matches. The router tries the routes in order and stops at the
first full match, so a request compiles the routes up to its own, once per process; the
create route and ``/health`` (the Lambda Web Adapter's readiness check) come first.
Everything else is Starlette's ``Route``: the same matching, methods (``HEAD`` with ``GET``),
405s and ``url_path_for``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any

from starlette import routing

_COMPILED = frozenset(("path_regex", "path_format", "param_convertors"))


class Route(routing.Route):
    """``starlette.routing.Route`` for a function endpoint, its path compiled on first use."""

    def __init__(self, path: str, endpoint: Callable[..., Any], *,
                 methods: Collection[str]) -> None:
        # starlette.routing.Route.__init__ for a function endpoint without middleware, but
        # compile_path (its last line), left to __getattr__
        assert path.startswith("/"), "Routed paths must start with '/'"
        assert inspect.isfunction(endpoint), endpoint
        self.path = path
        self.endpoint = endpoint
        self.name = routing.get_name(endpoint)
        self.include_in_schema = True
        self.app = routing.request_response(endpoint)
        self.methods = {method.upper() for method in methods}
        if "GET" in self.methods:
            self.methods.add("HEAD")

    def __getattr__(self, name: str) -> Any:
        """The compiled path's parts, made the first time one is read (then plain
        attributes: this is not called again)."""
        if name not in _COMPILED:
            raise AttributeError(name)
        self.path_regex, self.path_format, self.param_convertors = routing.compile_path(
            self.path)
        return self.__dict__[name]

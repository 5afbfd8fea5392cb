"""How many tokens a model's context window holds: what ``truncation`` fits the input into,
what ``truncation: "disabled"`` refuses beyond, and the default compaction threshold.

In this order, the first that knows:

1. ``GATEWAY_CONTEXT_WINDOWS`` (``model=tokens,...``, by client or backend model name, parsed
   in config.py): an operator's word wins over what a server reports (a server may allow more
   than the deployment should use);
2. the backend (``Backend.context_window``): an OpenAI-compatible server's ``GET /models``
   (backends/server_info.py), a Bedrock model family's documented window
   (backends/bedrock/models.py).

Unknown (None) means: no truncation, no refusal, no default threshold. Each answer is
remembered for the life of the process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from responses_gateway.backends.base import Backend
from responses_gateway.config import Route


class ContextWindows:
    """Windows by route, asked of the backends once each."""

    def __init__(self, configured: Mapping[str, int], backend_for: Callable[[str], Backend]
                 ) -> None:
        self._configured = configured
        self._backend_for = backend_for
        self._known: dict[tuple[str, str], int | None] = {}

    async def window(self, client_model: str, route: Route) -> int | None:
        for name in (client_model, route.model):
            if name in self._configured:
                return self._configured[name]
        key = (route.backend, route.model)
        if key not in self._known:
            self._known[key] = await self._backend_for(route.backend).context_window(route.model)
        return self._known[key]

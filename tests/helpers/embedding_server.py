"""An OpenAI-compatible ``POST /v1/embeddings`` on 127.0.0.1 for tests.

The model is a DETERMINISTIC HASHING EMBEDDER, not a trained model: each word of the input
(lower-cased ``\\w+``) adds +-1 to one of ``DIMENSIONS`` coordinates chosen by its hash, and the
vector is normalised. Texts sharing words are near; that is what retrieval tests need to tell
documents on distinct topics apart. It records every input it embedded (``inputs``), counts
the requests that ``arrived``, and ``hold`` makes it stall requests (a gateway killed
mid-ingestion, calls in flight at once). It refuses (400) what OpenAI's embeddings endpoint
refuses (:func:`invalid`).

Faults, each spent by one request (``fail(*faults)`` queues them, in order): ``"drop"``
closes the connection without an answer, ``"not_json"`` answers 200 with an HTML page,
``"nan"`` / ``"inf"`` answer vectors holding NaN / infinity (written as Python's json writes
them, ``NaN`` / ``Infinity``, which json readers accept), ``"short"`` answers vectors of
another dimension, ``"echo_key"`` answers OpenAI's 401 quoting the key it was sent, and a
number answers that HTTP status with OpenAI's error body. A request
that holds ``fault_word`` only spends a fault when one is set (else every request may).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIMENSIONS = 384
_WORD = re.compile(r"\w+")


def hashing_vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dimensions
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = sum(x * x for x in vector) ** 0.5 or 1.0
    return [x / norm for x in vector]


FIELDS = {"input", "model", "encoding_format", "dimensions", "user"}  # additionalProperties
MAX_INPUTS = 2048


def invalid(body: Any) -> str | None:
    """What OpenAI's CreateEmbeddingRequest refuses (its API reference): unknown fields, no
    ``model``, an ``input`` that is an empty string or an array of 0 or more than 2048 items
    (strings here: the gateway sends text, never token arrays), an ``encoding_format`` other
    than ``float`` / ``base64``, ``dimensions`` below 1."""
    if not isinstance(body, dict) or set(body) - FIELDS:
        return f"Unrecognized request argument(s): {sorted(set(body) - FIELDS)}"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not 1 <= len(texts) <= MAX_INPUTS or not all(
            isinstance(t, str) and t for t in texts):
        return "'input' : input must be a non-empty string or an array of 1 to 2048 of them"
    if body.get("encoding_format", "float") not in ("float", "base64"):
        return "'encoding_format' must be 'float' or 'base64'"
    dims = body.get("dimensions", 1)
    if not isinstance(dims, int) or dims < 1:
        return "'dimensions' must be at least 1"
    return None


class EmbeddingServer:
    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.requests = 0
        self.arrived = 0  # requests received, answered or still held
        self.hold = threading.Event()  # set: requests wait until it is cleared
        self.released = threading.Event()
        self.released.set()
        self.hold_word: str | None = None  # stall only requests with a text holding it
        self.faults: list[str | int] = []
        self.fault_word: str | None = None  # spend faults only on requests holding it
        self.spent: list[str | int] = []  # the faults answered, in order
        lock = self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length))
                problem = invalid(body)
                if problem is not None:
                    payload = json.dumps({"error": {
                        "message": problem, "type": "invalid_request_error", "param": None,
                        "code": None}}).encode()
                    self.send_response(400)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                server.arrived += 1
                if server.hold.is_set() and (server.hold_word is None or any(
                        server.hold_word in t for t in texts)):
                    server.released.wait(60)
                with lock:
                    fault = server.faults.pop(0) if server.faults and (
                        server.fault_word is None or any(server.fault_word in t
                                                         for t in texts)) else None
                    if fault is not None:
                        server.spent.append(fault)
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                server.requests += 1
                if fault is None:
                    server.inputs += texts
                self._answer(fault, texts, body["model"])

            def _answer(self, fault: str | int | None, texts: list[str], model: str) -> None:
                status, kind = 200, "application/json"
                if fault == "echo_key":  # OpenAI's 401 quotes the key it was sent
                    status = 401
                    sent = self.headers.get("authorization", "").removeprefix("Bearer ")
                    payload = json.dumps({"error": {
                        "message": f"Incorrect API key provided: {sent}.",
                        "type": "invalid_request_error", "param": None,
                        "code": "invalid_api_key"}}).encode()
                elif fault == "not_json":
                    payload = b"<html><body>502 Bad Gateway</body></html>"
                    kind = "text/html"
                elif isinstance(fault, int):
                    status = fault
                    payload = json.dumps({"error": {"message": "try again", "type": "server_error",
                                                    "param": None, "code": None}}).encode()
                else:
                    def vector(text: str) -> list[float]:
                        if fault in ("nan", "inf"):
                            return [float(fault)] * DIMENSIONS
                        return hashing_vector(text, DIMENSIONS // 2 if fault == "short"
                                              else DIMENSIONS)
                    data = [{"object": "embedding", "index": i, "embedding": vector(t)}
                            for i, t in enumerate(texts)]
                    payload = json.dumps({"object": "list", "data": data, "model": model,
                                          "usage": {"prompt_tokens": 0,
                                                    "total_tokens": 0}}).encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stall(self, word: str | None = None) -> None:
        self.hold_word = word
        self.released.clear()
        self.hold.set()

    def fail(self, *faults: str | int, word: str | None = None) -> None:
        """The next requests (those holding ``word``, if given) answer these faults."""
        with self._lock:
            self.fault_word = word
            self.faults = list(faults)

    def resume(self) -> None:
        self.hold.clear()
        self.released.set()

    def settle(self) -> None:
        """No stall and no fault left for whoever uses the server next (the session shares
        one: tests/conftest.py); what it counted goes on counting (tests compare counts
        before and after)."""
        self.resume()
        self.hold_word = None
        self.fail()

    @contextmanager
    def running(self) -> Iterator[EmbeddingServer]:
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                  daemon=True)  # polls for shutdown every 50 ms, not 500
        thread.start()
        try:
            yield self
        finally:
            self.resume()
            self._server.shutdown()
            self._server.server_close()

"""A fake Bedrock Agent Runtime on 127.0.0.1 answering ``Retrieve`` (``POST
/knowledgebases/{id}/retrieve``, REST-JSON as in botocore's bedrock-agent-runtime model) from
documents the test gives each Knowledge Base, scored with the hashing embedder of
tests/helpers/embedding_server.py, ``RetrievalFilter`` applied to their metadata (``andAll`` /
``orAll`` of at least two, as the service requires). ``requests`` keeps each request body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers.embedding_server import hashing_vector

_OPS = {"equals": lambda h, w: h == w, "notEquals": lambda h, w: h != w,
        "greaterThan": lambda h, w: h > w, "greaterThanOrEquals": lambda h, w: h >= w,
        "lessThan": lambda h, w: h < w, "lessThanOrEquals": lambda h, w: h <= w,
        "in": lambda h, w: h in w, "notIn": lambda h, w: h not in w}


class Invalid(Exception):
    pass


def _keep(condition: dict[str, Any], metadata: dict[str, Any]) -> bool:
    if len(condition) != 1:
        raise Invalid("a RetrievalFilter holds exactly one member")
    ((op, value),) = condition.items()
    if op in ("andAll", "orAll"):
        if not isinstance(value, list) or len(value) < 2:
            raise Invalid(f"{op}: at least 2 filters")
        parts = [_keep(v, metadata) for v in value]
        return all(parts) if op == "andAll" else any(parts)
    if op not in _OPS or set(value) != {"key", "value"}:
        raise Invalid(f"unknown filter {op}")
    if value["key"] not in metadata:
        return op in ("notEquals", "notIn")
    try:
        return bool(_OPS[op](metadata[value["key"]], value["value"]))
    except TypeError:
        return False


class FakeKnowledgeBases:
    def __init__(self, bases: dict[str, list[dict[str, Any]]]) -> None:
        self.bases = bases  # id -> [{"text", "uri", "metadata"}]
        self.requests: list[tuple[str, dict[str, Any]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                parts = self.path.split("/")  # "", "knowledgebases", id, "retrieve"
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                fake.requests.append((parts[2], body))
                try:
                    status, payload, kind = 200, fake.retrieve(parts[2], body), None
                except KeyError:
                    status, payload = 404, {"message": f"Knowledge base {parts[2]} not found"}
                    kind = "ResourceNotFoundException"
                except Invalid as exc:
                    status, payload, kind = 400, {"message": str(exc)}, "ValidationException"
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if kind:
                    self.send_header("x-amzn-errortype", kind)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def retrieve(self, kb: str, body: dict[str, Any]) -> dict[str, Any]:
        documents = self.bases[kb]
        if set(body) - {"retrievalQuery", "retrievalConfiguration", "nextToken"}:
            raise Invalid(f"unexpected members {sorted(body)}")
        query = body["retrievalQuery"]["text"]
        config = body.get("retrievalConfiguration", {}).get("vectorSearchConfiguration", {})
        count = config.get("numberOfResults", 5)
        if not 1 <= count <= 100:
            raise Invalid("numberOfResults: 1 to 100")
        q = hashing_vector(query)
        scored = []
        for doc in documents:
            if "filter" in config and not _keep(config["filter"], doc["metadata"]):
                continue
            similarity = sum(a * b for a, b in zip(q, hashing_vector(doc["text"]), strict=True))
            scored.append(((similarity + 1) / 2, doc))
        scored.sort(key=lambda s: -s[0])
        return {"retrievalResults": [
            {"content": {"text": doc["text"], "type": "TEXT"}, "score": score,
             "location": {"type": "S3", "s3Location": {"uri": doc["uri"]}},
             "metadata": {**doc["metadata"], "x-amz-bedrock-kb-source-uri": doc["uri"]}}
            for score, doc in scored[:count]]}

    @contextmanager
    def running(self) -> Iterator[FakeKnowledgeBases]:
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()

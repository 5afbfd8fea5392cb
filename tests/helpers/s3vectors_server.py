"""A fake Amazon S3 Vectors on 127.0.0.1 speaking its real wire format (REST-JSON: ``POST
/<Operation>`` with a JSON body; errors as the ``x-amzn-errortype`` header and a JSON
``message``), shapes as in botocore's ``data/s3vectors/2025-07-15/service-2.json``. moto does
not serve S3 Vectors' QueryVectors, so the tests point boto3 here
(``AWS_ENDPOINT_URL_S3VECTORS``) and botocore's own serializer and parsers run.

Search is exact (cosine or euclidean distance over every vector of the index) with S3
Vectors' metadata filter language: ``{"k": v}``, ``$eq $ne $gt $gte $lt $lte $in $nin
$exists``, ``$and`` / ``$or``. ``requests`` records (operation, body) for assertions.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_TOP_K = 100


class Failure(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _invalid(message: str) -> Failure:
    return Failure(400, "ValidationException", message)


@dataclass
class Index:
    name: str
    dimension: int
    metric: str
    vectors: dict[str, tuple[list[float], dict[str, Any]]] = field(default_factory=dict)


class FakeS3Vectors:
    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, Index]] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                operation = self.path.strip("/").split("?")[0]
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0))
                                  or b"{}")
                try:
                    with fake._lock:
                        fake.requests.append((operation, body))
                        answer = fake.handle(operation, body)
                    status, payload, headers = 200, answer, {}
                except Failure as failure:
                    status, payload = failure.status, {"message": failure.message}
                    headers = {"x-amzn-errortype": failure.kind}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                """Quiet: pytest shows failures."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[FakeS3Vectors]:
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()

    # -- operations -------------------------------------------------------------------------

    def handle(self, operation: str, body: dict[str, Any]) -> dict[str, Any]:
        handler = getattr(self, "_" + operation, None)
        if handler is None:
            raise Failure(400, "ValidationException", f"Unknown operation {operation}")
        return handler(body)

    def _bucket(self, body: dict[str, Any]) -> dict[str, Index]:
        name = body.get("vectorBucketName")
        if name not in self.buckets:
            raise Failure(404, "NotFoundException", f"Vector bucket {name} not found")
        return self.buckets[name]

    def _index(self, body: dict[str, Any]) -> Index:
        indexes = self._bucket(body)
        name = body.get("indexName")
        if name not in indexes:
            raise Failure(404, "NotFoundException", f"Index {name} not found")
        return indexes[name]

    def _CreateVectorBucket(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["vectorBucketName"]
        if name in self.buckets:
            raise Failure(409, "ConflictException", f"Vector bucket {name} already exists")
        self.buckets[name] = {}
        return {}

    def _CreateIndex(self, body: dict[str, Any]) -> dict[str, Any]:
        indexes = self._bucket(body)
        name = body["indexName"]
        if not 3 <= len(name) <= 63 or not all(c.islower() or c.isdigit() or c in "-."
                                               for c in name):
            raise _invalid(f"Invalid index name {name!r}")
        if body.get("dataType") != "float32" or body.get("distanceMetric") not in (
                "cosine", "euclidean") or not 1 <= int(body.get("dimension", 0)) <= 4096:
            raise _invalid("dataType, dimension and distanceMetric are required")
        if name in indexes:
            raise Failure(409, "ConflictException", f"Index {name} already exists")
        indexes[name] = Index(name, int(body["dimension"]), body["distanceMetric"])
        return {"indexArn": f"arn:aws:s3vectors:us-east-1:123456789012:bucket/"
                            f"{body['vectorBucketName']}/index/{name}"}

    def _GetIndex(self, body: dict[str, Any]) -> dict[str, Any]:
        index = self._index(body)
        return {"index": {"vectorBucketName": body["vectorBucketName"],
                          "indexName": index.name, "indexArn": "arn:" + index.name,
                          "creationTime": 0, "dataType": "float32",
                          "dimension": index.dimension, "distanceMetric": index.metric}}

    def _DeleteIndex(self, body: dict[str, Any]) -> dict[str, Any]:
        self._index(body)
        del self._bucket(body)[body["indexName"]]
        return {}

    def _PutVectors(self, body: dict[str, Any]) -> dict[str, Any]:
        index = self._index(body)
        vectors = body["vectors"]
        if not 1 <= len(vectors) <= 500:
            raise _invalid("vectors: between 1 and 500 per request")
        for v in vectors:
            data = v["data"]["float32"]
            if len(data) != index.dimension:
                raise _invalid(f"Vector dimension {len(data)} does not match the index's "
                               f"{index.dimension}")
            if len(json.dumps(v.get("metadata", {}))) > 40 * 1024:
                raise _invalid("metadata is larger than 40 KB")
        for v in vectors:
            index.vectors[v["key"]] = (list(v["data"]["float32"]), v.get("metadata") or {})
        return {}

    def _DeleteVectors(self, body: dict[str, Any]) -> dict[str, Any]:
        index = self._index(body)
        if not 1 <= len(body["keys"]) <= 500:
            raise _invalid("keys: between 1 and 500 per request")
        for key in body["keys"]:
            index.vectors.pop(key, None)
        return {}

    def _GetVectors(self, body: dict[str, Any]) -> dict[str, Any]:
        index = self._index(body)
        out = []
        for key in body["keys"]:
            if key in index.vectors:
                vector, metadata = index.vectors[key]
                item: dict[str, Any] = {"key": key}
                if body.get("returnData"):
                    item["data"] = {"float32": vector}
                if body.get("returnMetadata"):
                    item["metadata"] = metadata
                out.append(item)
        return {"vectors": out}

    def _ListVectors(self, body: dict[str, Any]) -> dict[str, Any]:
        index = self._index(body)
        return {"vectors": [{"key": k} for k in sorted(index.vectors)]}

    def _QueryVectors(self, body: dict[str, Any]) -> dict[str, Any]:
        index = self._index(body)
        top_k = int(body["topK"])
        if not 1 <= top_k <= MAX_TOP_K:
            raise _invalid(f"topK must be between 1 and {MAX_TOP_K}")
        query = body["queryVector"]["float32"]
        if len(query) != index.dimension:
            raise _invalid(f"Query vector dimension {len(query)} does not match the index's "
                           f"{index.dimension}")
        condition = body.get("filter")
        scored = []
        for key, (vector, metadata) in index.vectors.items():
            if condition is not None and not _matches(condition, metadata):
                continue
            scored.append((_distance(index.metric, query, vector), key, metadata))
        scored.sort(key=lambda s: (s[0], s[1]))
        out = []
        for distance, key, metadata in scored[:top_k]:
            item: dict[str, Any] = {"key": key}
            if body.get("returnDistance"):
                item["distance"] = distance
            if body.get("returnMetadata"):
                item["metadata"] = metadata
            out.append(item)
        return {"vectors": out, "distanceMetric": index.metric}


def _distance(metric: str, a: list[float], b: list[float]) -> float:
    if metric == "euclidean":
        return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)) or 1.0
    return 1.0 - dot / norm


def _matches(condition: Any, metadata: dict[str, Any]) -> bool:
    if not isinstance(condition, dict) or not condition:
        raise _invalid(f"Invalid filter: {condition!r}")
    results = []
    for key, spec in condition.items():
        if key in ("$and", "$or"):
            if not isinstance(spec, list) or not spec:
                raise _invalid(f"{key} takes a non-empty array")
            parts = [_matches(s, metadata) for s in spec]
            results.append(all(parts) if key == "$and" else any(parts))
        elif key.startswith("$"):
            raise _invalid(f"Unknown operator {key}")
        else:
            results.append(_compare(key, spec if isinstance(spec, dict) else {"$eq": spec},
                                    metadata))
    return all(results)


def _compare(key: str, spec: dict[str, Any], metadata: dict[str, Any]) -> bool:
    present = key in metadata
    have = metadata.get(key)
    for op, want in spec.items():
        if op == "$exists":
            ok = present == bool(want)
        elif op in ("$in", "$nin"):
            if not isinstance(want, list):
                raise _invalid(f"{op} takes an array")
            inside = present and (any(h in want for h in have) if isinstance(have, list)
                                  else have in want)
            ok = inside if op == "$in" else not inside
        elif op == "$eq":
            ok = present and (want in have if isinstance(have, list) else have == want)
        elif op == "$ne":
            ok = not present or have != want
        elif op in ("$gt", "$gte", "$lt", "$lte"):
            if not isinstance(want, int | float) or isinstance(want, bool):
                raise _invalid(f"{op} takes a number")
            ok = present and isinstance(have, int | float) and not isinstance(have, bool) and {
                "$gt": have > want, "$gte": have >= want, "$lt": have < want,
                "$lte": have <= want}[op]
        else:
            raise _invalid(f"Unknown operator {op}")
        if not ok:
            return False
    return True

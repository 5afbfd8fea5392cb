"""A recording proxy in front of DynamoDB (moto here): a small HTTP forwarder that parses each
DynamoDB JSON request (``X-Amz-Target: DynamoDB_20120810.<Operation>``), records which items
it writes (table or index, partition key, sort key, whether in a transaction) and what the
answers read, and can answer a share of the bookkeeping writes as DynamoDB does when a
partition runs hot: ``ProvisionedThroughputExceededException``, ``ThrottlingException``, or
for a transaction ``TransactionCanceledException`` with the reason ``ThrottlingError``.

With ``strict_keys`` it answers as DynamoDB does where moto does not: a key past DynamoDB's
sizes (partition key 2048 bytes, sort key 1024) on any operation (moto checks them only where
an item is written, never on a ``GetItem``, ``DeleteItem``, ``UpdateItem`` or a ``Query``'s
``ExclusiveStartKey``), and a ``BETWEEN`` whose lower bound is above its upper (moto answers
no items), each with DynamoDB's ``ValidationException``.

Used by tests/test_dynamodb_scale.py and benchmarks/dynamodb_writes.py::

    with RecordingProxy(moto_endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)
        ...
        proxy.writes  # [Write(table, pk, sk, operation, transactional, index), ...]
"""

from __future__ import annotations

import http.client
import json
import random
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from responses_gateway.store.dynamodb_schema import (
    CONVERSATION_INDEX,
    CONVERSATION_INDEX_PK,
    CONVERSATION_INDEX_SK,
)

BOOKKEEPING_PREFIXES = ("USAGE#", "LOG#")


def is_bookkeeping(pk: str) -> bool:
    """A usage or log row: what every response writes besides its own partition."""
    return pk.startswith(BOOKKEEPING_PREFIXES)


@dataclass(frozen=True, slots=True)
class Write:
    """One item written (a Put, an Update, a Delete, a transaction's condition check)."""

    table: str  # the table, or "<table>/<index>" for an entry a global index writes
    pk: str
    sk: str
    operation: str  # Put, Update, Delete, ConditionCheck
    transactional: bool
    size: int  # bytes of the item as the request gives it (a Put), else 0: see item_size


@dataclass(frozen=True, slots=True)
class Read:
    """One read call and the items it returned (their size in bytes)."""

    table: str
    operation: str  # GetItem, Query, BatchGetItem, Scan
    items: int
    size: int
    consistent: bool
    index: str | None


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (numbers approximated by their
    digits' length, as the docs allow for an estimate)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    (kind, inner), = value.items()
    if kind in ("S", "B"):
        return len(str(inner).encode())
    if kind == "N":
        return (len(str(inner).lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(len(str(v).encode()) for v in inner)
    return 0


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timed-out call botocore retries) is not news."""


class RecordingProxy:
    """The proxy, on 127.0.0.1 on a free port, in a thread of its own."""

    def __init__(self, upstream: str, *, throttle: float = 0.0,
                 throttled: Callable[[str], bool] = is_bookkeeping, seed: int = 45,
                 strict_keys: bool = False) -> None:
        self.upstream = urlsplit(upstream)
        self.strict_keys = strict_keys
        self.throttle = throttle
        self.throttled = throttled
        self.writes: list[Write] = []
        self.reads: list[Read] = []
        self.calls: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # throttling answers given, by operation
        self.in_flight = 0  # requests being forwarded now
        self.most_in_flight = 0  # the most at once since the last clear()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, answer = proxy._handle(self.headers, body)
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "transfer-encoding",
                                            "connection", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def clear(self) -> None:
        with self._lock:
            self.writes.clear()
            self.reads.clear()
            self.calls.clear()
            self.refused.clear()
            self.most_in_flight = 0

    # -- one request ----------------------------------------------------------------------

    def _handle(self, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        operation = (headers.get("X-Amz-Target") or "").rpartition(".")[2]
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        writes = _writes(operation, request)
        refusal = (_oversized_key(request) or _inverted_between(request)) \
            if self.strict_keys else None
        refusal = refusal or self._refusal(operation, writes)
        if refusal is not None:
            with self._lock:
                self.refused[operation] += 1
            return 400, [("Content-Type", "application/x-amz-json-1.0")], refusal
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            status, answer_headers, answer = self._forward(headers, body)
        finally:
            with self._lock:
                self.in_flight -= 1
        with self._lock:
            self.calls[operation] += 1
            if status == 200:
                self.writes += writes
                read = _read(operation, request, answer)
                if read is not None:
                    self.reads.append(read)
        return status, answer_headers, answer

    def _refusal(self, operation: str, writes: list[Write]) -> bytes | None:
        if not self.throttle or not any(self.throttled(w.pk) for w in writes
                                        if "/" not in w.table):
            return None
        with self._lock:
            if self._random.random() >= self.throttle:
                return None
            coin = self._random.random()
        if operation == "TransactWriteItems" and coin < 0.7:
            reasons = [{"Code": "ThrottlingError", "Message": "Throughput exceeds the current "
                        "capacity of your table or index."} if self.throttled(w.pk)
                       else {"Code": "None"} for w in writes if "/" not in w.table]
            names = ", ".join(r["Code"] for r in reasons)
            return json.dumps({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for "
                           f"specific reasons [{names}]",
                "CancellationReasons": reasons}).encode()
        if coin < 0.85:
            return json.dumps({
                "__type": "com.amazonaws.dynamodb.v20120810#"
                          "ProvisionedThroughputExceededException",
                "message": "The level of configured provisioned throughput for the table was "
                           "exceeded."}).encode()
        return json.dumps({"__type": "com.amazon.coral.availability#ThrottlingException",
                           "message": "Throughput exceeds the current capacity of your table "
                                      "or index."}).encode()

    def _forward(self, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = getattr(self._local, "connection", None)
        for attempt in range(2):  # a kept-alive connection the server closed: once more
            if connection is None:
                connection = http.client.HTTPConnection(
                    self.upstream.hostname, self.upstream.port, timeout=60)
                self._local.connection = connection
            try:
                connection.request("POST", "/", body=body, headers={
                    k: v for k, v in headers.items() if k.lower() not in ("host", "connection")})
                answer = connection.getresponse()
                return answer.status, answer.getheaders(), answer.read()
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = self._local.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    # -- what was written -----------------------------------------------------------------

    def bookkeeping(self) -> list[Write]:
        """The table's writes to usage and log rows."""
        return [w for w in self.writes if "/" not in w.table and is_bookkeeping(w.pk)]

    @staticmethod
    def spread(writes: list[Write]) -> Counter[str]:
        """Writes by partition key (a sharded key's shards apart)."""
        return Counter(w.pk for w in writes)


KEY_LIMITS = (("pk", 2048, "Size of hashkey has exceeded the maximum size limit of2048 bytes"),
              ("sk", 1024, "Aggregated size of all range keys has exceeded the size limit of "
                           "1024 bytes"))


def _oversized_key(request: Any) -> bytes | None:
    """DynamoDB's refusal of the first key (``Key``, ``ExclusiveStartKey``, an item's keys,
    anywhere in the request) whose ``pk`` or ``sk`` is past its size; None when none is."""
    stack = [request]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, dict):
            for name, limit, message in KEY_LIMITS:
                key = value.get(name)
                text = key.get("S") if isinstance(key, dict) else None
                if isinstance(text, str) and len(text.encode()) > limit:
                    return json.dumps({
                        "__type": "com.amazon.coral.validate#ValidationException",
                        "message": f"One or more parameter values were invalid: {message}",
                    }).encode()
            stack.extend(value.values())
    return None


def _inverted_between(request: dict[str, Any]) -> bytes | None:
    """DynamoDB's refusal of a key condition ``BETWEEN :lo AND :hi`` with ``lo`` above ``hi``
    (strings, compared as DynamoDB does: by their UTF-8 bytes); None otherwise."""
    found = re.search(r"BETWEEN\s+(:\w+)\s+AND\s+(:\w+)",
                      request.get("KeyConditionExpression") or "")
    values = request.get("ExpressionAttributeValues") or {}
    if found is None:
        return None
    low, high = (values.get(name, {}).get("S") for name in found.groups())
    if not isinstance(low, str) or not isinstance(high, str) or \
            low.encode() <= high.encode():
        return None
    return json.dumps({
        "__type": "com.amazon.coral.validate#ValidationException",
        "message": "Invalid KeyConditionExpression: The BETWEEN operator requires upper bound "
                   "to be greater than or equal to lower bound",
    }).encode()


def _writes(operation: str, request: dict[str, Any]) -> list[Write]:
    table = request.get("TableName", "")
    if operation == "PutItem":
        return _entry(table, "Put", request.get("Item") or {}, False, put=True)
    if operation in ("UpdateItem", "DeleteItem"):
        return _entry(table, operation[:-4], request.get("Key") or {}, False)
    found: list[Write] = []
    if operation == "BatchWriteItem":
        for name, requests in (request.get("RequestItems") or {}).items():
            for r in requests:
                if "PutRequest" in r:
                    found += _entry(name, "Put", r["PutRequest"]["Item"], False, put=True)
                elif "DeleteRequest" in r:
                    found += _entry(name, "Delete", r["DeleteRequest"]["Key"], False)
    elif operation == "TransactWriteItems":
        for action in request.get("TransactItems") or ():
            (kind, spec), = action.items()
            if kind == "Put":
                found += _entry(spec["TableName"], kind, spec["Item"], True, put=True)
            else:
                found += _entry(spec["TableName"], kind, spec["Key"], True)
    return found


def _entry(table: str, operation: str, item: dict[str, Any], transactional: bool,
           put: bool = False) -> list[Write]:
    pk = (item.get("pk") or {}).get("S", "")
    sk = (item.get("sk") or {}).get("S", "")
    size = item_size(item) if put else 0
    writes = [Write(table, pk, sk, operation, transactional, size)]
    if put and CONVERSATION_INDEX_PK in item:  # the index's entry: a write of its own
        writes.append(Write(f"{table}/{CONVERSATION_INDEX}", item[CONVERSATION_INDEX_PK]["S"],
                            item.get(CONVERSATION_INDEX_SK, {}).get("S", ""), "Put",
                            False, size))
    return writes


def _read(operation: str, request: dict[str, Any], answer: bytes) -> Read | None:
    if operation not in ("GetItem", "Query", "BatchGetItem", "Scan"):
        return None
    try:
        data = json.loads(answer)
    except ValueError:
        return None
    if operation == "GetItem":
        items = [data["Item"]] if "Item" in data else []
    elif operation == "BatchGetItem":
        items = [i for found in (data.get("Responses") or {}).values() for i in found]
    else:
        items = data.get("Items") or []
    table = request.get("TableName") or next(iter(request.get("RequestItems") or {}), "")
    return Read(table, operation, len(items), sum(item_size(i) for i in items),
                bool(request.get("ConsistentRead")), request.get("IndexName"))

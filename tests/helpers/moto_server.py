"""A moto server on 127.0.0.1 for tests: boto3 talks to it over real HTTP, as in AWS.

Usage in a test module (``moto_endpoint`` is tests/conftest.py's, one server per session)::

    @pytest.fixture
    def aws(moto_endpoint, monkeypatch):
        use_moto(monkeypatch, moto_endpoint)   # dummy credentials, region, endpoint URLs
        return moto_endpoint

Then ``create_dynamodb_table(unique_table_name())`` or any boto3 client created afterwards talks
to the server. ``reset(endpoint)`` drops every resource moto holds (in the whole process).
"""

from __future__ import annotations

import atexit
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import ThreadedMotoServer
from werkzeug.serving import WSGIRequestHandler, make_server

REGION = "us-east-1"


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        """One line per request would drown pytest's output."""


class SerializedMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose requests run one at a time.

    DynamoDB applies a conditional write atomically; moto's in-memory backend checks and writes
    in Python without a lock, so two server threads can both pass a condition. Serialising the
    requests restores DynamoDB's guarantee, which the race tests depend on.
    """

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)
        lock = threading.Lock()

        def serialized(
            environ: dict[str, Any], start_response: Callable[..., Any]
        ) -> Iterable[bytes]:
            with lock:
                return list(app(environ, start_response))

        self._server = make_server(
            self._ip_address, self._port, serialized, True, request_handler=_QuietHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


_shared: str | None = None
_shared_lock = threading.Lock()


def shared_endpoint() -> str:
    """The endpoint of the process's one moto server, started on first use and stopped at
    exit. One is enough: moto keeps its resources in process-wide backends whatever server
    serves them, so a server per module isolated nothing (tests isolate by unique table and
    bucket names) and cost a start and a stop each."""
    global _shared
    with _shared_lock:
        if _shared is None:
            server = SerializedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            atexit.register(server.stop)
            host, port = server.get_host_and_port()
            _shared = f"http://{host}:{port}"
        return _shared


@contextmanager
def moto_server() -> Iterator[str]:
    """Yield the endpoint URL of moto on 127.0.0.1 (the process's shared server)."""
    yield shared_endpoint()


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment that points every boto3 client at ``endpoint`` with dummy credentials."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def use_moto(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Apply ``aws_env`` for one test (undone by monkeypatch afterwards)."""
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    for key, value in aws_env(endpoint).items():
        monkeypatch.setenv(key, value)


def reset(endpoint: str) -> None:
    """Forget every resource moto holds."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def unique_table_name(prefix: str = "responses") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_dynamodb_table(table_name: str | None = None) -> str:
    """Create the gateway's table (the production definition, TTL on) in the current env."""
    from responses_gateway.store.dynamodb import create_table

    name = table_name or unique_table_name()
    create_table(name)
    return name


def sqlite_or_dynamodb(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """``GATEWAY_STORE`` for a test parametrized over both stores (``request.param``):
    a SQLite file in ``tmp_path``, or a fresh table on the module's moto server."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'g.db'}"
    use_moto(request.getfixturevalue("monkeypatch"), request.getfixturevalue("moto_endpoint"))
    return "dynamodb:" + create_dynamodb_table()

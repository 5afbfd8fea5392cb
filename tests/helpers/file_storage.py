"""Gateways on each file-storage engine for the Files and vector store suites: ``local``
(SQLite + a folder beside it) and ``aws`` (DynamoDB + S3 on a moto server over HTTP, S3
Vectors on tests/helpers/s3vectors_server.py, its real wire format)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.config import Settings
from tests.helpers.dynamodb_proxy import RecordingProxy
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.moto_server import aws_env, create_dynamodb_table, moto_server
from tests.helpers.s3vectors_server import FakeS3Vectors

ENGINES = ("local", "aws")


@contextmanager
def storage_settings(engine: str, tmp: Path, *, strict_keys: bool = False
                     ) -> Iterator[dict[str, Any]]:
    """The settings (``store``, ``files_bucket``, ``vector_bucket``) of one engine, its
    services running. ``strict_keys`` (aws): DynamoDB calls pass a proxy that refuses an
    oversized key as DynamoDB does, which moto does not on reads
    (tests/helpers/dynamodb_proxy.py)."""
    if engine == "local":
        yield {"store": f"sqlite:{tmp / 'gateway.db'}"}
        return
    with moto_server() as endpoint, FakeS3Vectors().running() as vectors, \
            pytest.MonkeyPatch.context() as patch, ExitStack() as stack:
        for key, value in aws_env(endpoint).items():
            patch.setenv(key, value)
        if strict_keys:
            proxy = stack.enter_context(RecordingProxy(endpoint, strict_keys=True))
            patch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)
        patch.setenv("AWS_ENDPOINT_URL_S3VECTORS", vectors.endpoint)
        patch.delenv("AWS_PROFILE", raising=False)
        import boto3

        bucket = f"files-{uuid.uuid4().hex[:12]}"
        boto3.session.Session().client("s3").create_bucket(Bucket=bucket)
        vector_bucket = f"vectors-{uuid.uuid4().hex[:12]}"
        boto3.session.Session().client("s3vectors").create_vector_bucket(
            vectorBucketName=vector_bucket)
        yield {"store": f"dynamodb:{create_dynamodb_table()}", "files_bucket": bucket,
               "vector_bucket": vector_bucket}


@contextmanager
def gateway_on(engine: str, tmp: Path, *, strict_keys: bool = False,
               **overrides: Any) -> Iterator[GatewayServer]:
    with storage_settings(engine, tmp, strict_keys=strict_keys) as storage:
        values: dict[str, Any] = {"upstream_url": "http://127.0.0.1:9/v1", "max_retries": 0}
        values.update(storage)
        values.update(overrides)
        with GatewayServer(Settings(**values)) as server:
            yield server


def move_clock(monkeypatch: pytest.MonkeyPatch, server: GatewayServer, seconds: float) -> None:
    """Move the gateway's Files clock (which its Uploads read) ``seconds`` ahead until the
    test ends: the gateway's own clock, never the process's ``time.time``, which the test,
    the HTTP client and every other thread share."""
    files = server.gateway.files
    real = files.clock
    monkeypatch.setattr(files, "clock", lambda: real() + seconds)

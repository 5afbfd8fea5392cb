"""The platform the gateway runs on, chosen once from ``GATEWAY_STORE``; the one module that
reads that setting.

- ``sqlite:PATH``: **local** (platform/local.py): responses, conversations, file records and
  vectors (sqlite-vec) in the SQLite file PATH, file bytes in ``PATH.files/``, images in
  ``PATH.blobs/``; background work runs in the process.
- ``dynamodb:TABLE``: **AWS** (platform/aws.py): DynamoDB TABLE, file bytes in S3
  (``GATEWAY_FILES_BUCKET``), vectors in S3 Vectors (``GATEWAY_VECTOR_BUCKET``), images in S3,
  WebSocket connections of API Gateway in TABLE.

A :class:`~responses_gateway.platform.base.Platform` builds each engine when asked, importing
its module then: a process loads boto3 only for AWS, and an engine it never uses not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from responses_gateway.platform.base import Platform
    from responses_gateway.settings import Settings

LOCAL = "sqlite"  # GATEWAY_STORE=sqlite:PATH
AWS = "dynamodb"  # GATEWAY_STORE=dynamodb:TABLE


def store_parts(text: str) -> tuple[str, str]:
    """A ``GATEWAY_STORE`` value as (kind, target): ``("sqlite", PATH)``, ``("dynamodb",
    TABLE)``; the kind is whatever precedes the colon (config.py refuses an unknown one)."""
    kind, _, target = text.partition(":")
    return kind, target


def platform_for(settings: Settings) -> Platform:
    """The platform ``settings`` choose (cheap: no engine is built or imported yet)."""
    kind, target = store_parts(settings.store)
    if kind == LOCAL:
        from responses_gateway.platform.local import LocalPlatform

        return LocalPlatform(settings, target)
    if kind == AWS:
        from responses_gateway.platform.aws import AWSPlatform

        if not target:
            raise ValueError("GATEWAY_STORE=dynamodb:TABLE needs a table name")
        return AWSPlatform(settings, target)
    raise ValueError(f"GATEWAY_STORE must be sqlite:PATH or dynamodb:TABLE, not {settings.store!r}")


def vector_stores_available(settings: Settings) -> bool:
    """Whether this platform has vector stores (file_search runs in the gateway then; else it
    stays a hosted tool, tools/hosted.py)."""
    return platform_for(settings).has_vector_stores


def dynamodb_table(text: str) -> str | None:
    """The DynamoDB table a ``GATEWAY_STORE`` value names, None for another platform
    (``responses-gateway store init``)."""
    kind, target = store_parts(text)
    return (target or None) if kind == AWS else None

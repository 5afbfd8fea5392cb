"""The store ``GATEWAY_STORE`` names: ``sqlite:PATH`` (embedded) or ``dynamodb:TABLE``.

Each is imported only when configured, so boto3 loads only for DynamoDB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from responses_gateway.settings import Settings
    from responses_gateway.store.base import Store


def build_store(settings: Settings) -> Store:
    """The configured store; with an image backend, its large values (images) beside it
    (store/blobs.py)."""
    from responses_gateway.store.blobs import with_blobs

    return with_blobs(_engine(settings), settings)


def _engine(settings: Settings) -> Store:
    from responses_gateway.store.base import StoreLimits

    limits = StoreLimits(
        conversation_items=settings.max_conversation_items,
        conversation_bytes=settings.max_conversation_bytes,
        response_bytes=settings.max_stored_response_bytes,
    )
    kind, _, target = settings.store.partition(":")
    if kind == "sqlite":
        from responses_gateway.store.sqlite import SQLiteStore

        return SQLiteStore(target or "gateway.db", retention_days=settings.retention_days,
                           limits=limits)
    if kind == "dynamodb":
        from responses_gateway.store.dynamodb import DynamoDBStore

        if not target:
            raise ValueError("GATEWAY_STORE=dynamodb:TABLE needs a table name")
        return DynamoDBStore(target, retention_days=settings.retention_days, limits=limits)
    raise ValueError(f"GATEWAY_STORE must be sqlite:PATH or dynamodb:TABLE, not {settings.store!r}")

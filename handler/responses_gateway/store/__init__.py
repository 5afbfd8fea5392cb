"""Stored responses: an embedded SQLite store locally, DynamoDB in AWS, one interface."""

from responses_gateway.store.base import CancelledError, Store, StoredResponse

__all__ = ["CancelledError", "Store", "StoredResponse"]

"""DynamoDB store (``GATEWAY_STORE=dynamodb:TABLE``): one table, one partition per response.

The item layout and why it serves each access pattern is in docs/store.md. In short, partition
``pk = <response id>`` holds the record ``R``, the input items ``R#IN#<idx>``, the parts of a
request or response too large to sit in the record (``R#RQ#<n>``, ``R#RS#<n>``) and the event
batches ``EV#<last seq>``; partition ``ITEM#<tenant>#<item id>`` points at the responses holding
that item (``item_reference``); partition ``READ#<tenant>#<call id>`` holds what a server tool's
call gave the model; partition ``pk = <conversation id>`` holds a conversation. Every response
item carries ``expires_at`` (TTL).

One module per concern, each a layer of the one class: ``codec`` (packing, keys, limits),
``table`` (client, retries, batches), ``responses``, ``conversations``, ``turns`` (the turn
lock and appends), ``events`` (the background event log), ``tool_reads``.

boto3 is imported on first use (cold start); blocking calls run in threads. Throttling and
transient errors are retried by botocore's standard mode; what still fails raises
StoreUnavailable so the caller can end the response ``failed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from responses_gateway.store.base import Store
from responses_gateway.store.dynamodb.codec import INPUT_ITEM_LIMIT, _pack
from responses_gateway.store.dynamodb.events import _Events
from responses_gateway.store.dynamodb.table import create_table, make_client
from responses_gateway.store.dynamodb.tool_reads import _ToolReads

if TYPE_CHECKING:
    from responses_gateway.store.dynamodb.health import DynamoDBHealth
    from responses_gateway.store.dynamodb.usage import DynamoDBUsage


class DynamoDBStore(_ToolReads, _Events, Store):
    """Responses and conversations in one DynamoDB table (layout in docs/store.md)."""

    _usage: DynamoDBUsage | None = None

    def usage_store(self) -> DynamoDBUsage:
        """The usage ledger's items in this table, on this store's client."""
        if self._usage is None:
            from responses_gateway.store.dynamodb.usage import DynamoDBUsage

            self._usage = DynamoDBUsage(self.table_name, client=self.client,
                                        retention_days=self.retention_s // 86400)
        return self._usage

    def health_store(self) -> DynamoDBHealth:
        """Routed deployments' health in this table, on this store's client (store/health.py)."""
        from responses_gateway.store.dynamodb.health import DynamoDBHealth

        return DynamoDBHealth(self.table_name, client=self.client)


__all__ = ["INPUT_ITEM_LIMIT", "DynamoDBStore", "_pack", "create_table", "make_client"]

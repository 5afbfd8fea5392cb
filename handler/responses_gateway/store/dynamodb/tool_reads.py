"""What a response's server-tool calls gave the model, on DynamoDB (layout in docs/store.md).

One partition per read, ``pk = READ#<tenant>#<call id>``, so a request's reads are one
BatchGetItem however many responses they come from: the head ``sk = H`` holds the text
(zlib) or its first 350 KB, the response it belongs to, a version token and the number of
parts; a read too large for one item (400 KB) goes on in parts ``P#<k>`` that repeat the
token. Each row carries the response's ``expires_at`` (TTL). The response's own partition
gets a row ``D#<call id>#<parts>`` per read (no payload; ``D`` sorts before the event log and
the record, so no read of the response meets it), and deleting the response, which deletes
its partition, finds the read's rows without reading them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import zlib
from typing import Any

from responses_gateway.store.base import ToolReadStore
from responses_gateway.store.dynamodb.codec import _expired, _n, _s, _split
from responses_gateway.store.dynamodb.table import _Table
from responses_gateway.store.dynamodb_schema import TTL_ATTRIBUTE

log = logging.getLogger(__name__)
HEAD = "H"
MARK = "D#"  # a read's row in its response's partition: D#<call id>#<parts>


def _read_pk(tenant: str, call_id: str) -> str:
    return f"READ#{tenant}#{call_id}"


def _part_sk(k: int) -> str:
    return f"P#{k:04d}"


def read_keys(tenant: str, partition: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The keys of the reads a response's partition names (its ``D#`` rows): deleted with
    the response."""
    keys = []
    for key in partition:
        sk = key["sk"]["S"]
        if not sk.startswith(MARK):
            continue
        call_id, _, parts = sk[len(MARK):].rpartition("#")
        pk = _s(_read_pk(tenant, call_id))
        keys.append({"pk": pk, "sk": _s(HEAD)})
        keys += [{"pk": pk, "sk": _s(_part_sk(k))} for k in range(1, int(parts or 1))]
    return keys


class _ToolReads(_Table, ToolReadStore):
    """``put_tool_reads`` / ``get_tool_reads`` (store/base.py)."""

    async def put_tool_reads(
        self, tenant: str, response_id: str, reads: dict[str, str], *,
        expires_at: int | None = None,
    ) -> None:
        if reads:
            await asyncio.to_thread(self._put_reads, tenant, response_id, reads, expires_at)

    def _put_reads(
        self, tenant: str, response_id: str, reads: dict[str, str], expires_at: int | None
    ) -> None:
        ttl = _n(expires_at) if expires_at is not None else self._ttl()
        rows: list[dict[str, Any]] = []
        for call_id, text in reads.items():
            chunks = _split(zlib.compress(text.encode(), 6))
            pk, version = _s(_read_pk(tenant, call_id)), _s(secrets.token_hex(6))
            rows += [{"pk": pk, "sk": _s(_part_sk(k)), "d": {"B": chunk}, "v": version,
                      TTL_ATTRIBUTE: ttl} for k, chunk in enumerate(chunks[1:], start=1)]
            rows.append({"pk": pk, "sk": _s(HEAD), "d": {"B": chunks[0]}, "v": version,
                         "np": _n(len(chunks)), "resp": _s(response_id), TTL_ATTRIBUTE: ttl})
            rows.append({"pk": _s(response_id), "sk": _s(f"{MARK}{call_id}#{len(chunks)}"),
                         TTL_ATTRIBUTE: ttl})
        self._batch_put(rows)  # before the record (Job.persist): its readers find them whole

    async def get_tool_reads(self, tenant: str, call_ids: list[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(call_ids))
        if not wanted:
            return {}
        return await asyncio.to_thread(self._get_reads, tenant, wanted)

    def _get_reads(self, tenant: str, call_ids: list[str]) -> dict[str, str]:
        now = time.time()
        heads = {
            item["pk"]["S"]: item
            for item in self._batch_get(
                [{"pk": _s(_read_pk(tenant, c)), "sk": _s(HEAD)} for c in call_ids])
            if not _expired(item, now)
        }
        more = [{"pk": head["pk"], "sk": _s(_part_sk(k))}
                for head in heads.values() for k in range(1, int(head["np"]["N"]))]
        parts = {(p["pk"]["S"], p["sk"]["S"]): p for p in self._batch_get(more)} if more else {}
        found: dict[str, str] = {}
        for call_id in call_ids:
            head = heads.get(_read_pk(tenant, call_id))
            if head is None:
                continue
            chunks = [head["d"]["B"]]
            for k in range(1, int(head["np"]["N"])):
                part = parts.get((head["pk"]["S"], _part_sk(k)))
                if part is None or part["v"] != head["v"]:
                    log.warning("tool read %s is missing a part (rewritten meanwhile?); "
                                "the model reads its item's summary", call_id)
                    break
                chunks.append(part["d"]["B"])
            else:
                found[call_id] = zlib.decompress(b"".join(chunks)).decode()
        return found

"""Large values of stored records kept beside the store: a local directory or an S3 bucket.

Generated images make records large (a PNG is megabytes of base64; a DynamoDB item holds
400 KB). :class:`BlobbedStore` wraps the configured store: before a write, every string of at
least ``threshold`` bytes in what is written (the Response, the create's record, input items,
events, conversation items) goes to the blob store under its SHA-256 and is replaced by a
reference; after a read, references are replaced by the bytes again. The store stays the
truth (the record says which blob it holds); a retrieved, chained or resumed response carries
its values exactly as first sent.

Moving a record's values out and back walks it whole in Python (a record of 100,000 items:
~480 ms out, ~580 ms back) and hashes its large strings: for a heavy value (heavy.py) the
walks run in a worker thread, so the event loop goes on meanwhile.

References cannot be forged by a client: a stored string that begins like a reference is
escaped on write (one more marker character) and unescaped on read, so only references this
module wrote are ever resolved.

Blobs belong to what holds them, so they go when it goes: a key is ``<owner>/<sha256>``, the
owner a response id (its Response, record, input items and events: the copies of one image in
the item, its ``output_item.done`` event and the terminal Response are one blob) or
``<conversation id>/<item id>`` (a conversation's item). Deleting a response, a conversation
or a conversation item deletes its blobs first (a failure is the store's 503, the record
stays); an expired response's go by age, as its record does (``DirectoryBlobs.sweep`` on
start; in S3 the ImagesBucket's lifecycle rule on ``blobs/resp_``). References written before
owners (a bare ``<sha256>``) are still read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson

from responses_gateway.heavy import heavy_json
from responses_gateway.store.base import (
    Store,
    StoredConversation,
    StoredResponse,
    StoreUnavailable,
    TurnSettle,
)
from responses_gateway.store.wrapper import StoreWrapper

MARK = "\x00blob:"  # a reference: MARK + sha256 hex
ESCAPE = "\x00"  # a client's string that starts with ESCAPE gets one more on write
DEFAULT_THRESHOLD = 64 * 1024  # bytes (characters) of one string value
WRITTEN_KEPT = 4096  # blob keys remembered as written (so repeated writes skip the put)
RESPONSE_PREFIX = "resp_"  # owners that expire with their response (ids.py's prefix)
_SAFE_OWNER = re.compile(r"[A-Za-z0-9_-]{1,128}")


def owner_key(*parts: str) -> str:
    """The owner path of ids (``resp_1``, ``conv_1/msg_2``): ids as they are when they are
    plain, else their hash (a key never leaves its owner's directory or prefix)."""
    return "/".join(p if _SAFE_OWNER.fullmatch(p) else hashlib.sha256(p.encode()).hexdigest()
                    for p in parts)


class Blobs(ABC):
    """Bytes by key; writes are idempotent (a key always holds the same bytes)."""

    @abstractmethod
    async def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def delete_owner(self, owner: str) -> None:
        """Delete every blob of ``owner`` (the keys ``<owner>/...``)."""

    async def aclose(self) -> None:
        return None


class MemoryBlobs(Blobs):
    """In-process (an in-memory SQLite store, tests)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes) -> None:
        self.data[key] = data

    async def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    async def delete_owner(self, owner: str) -> None:
        for key in [k for k in self.data if k.startswith(owner + "/")]:
            del self.data[key]


class DirectoryBlobs(Blobs):
    """One file per blob under ``root`` (written to a temporary name, then renamed)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        if "/" in key:
            return self.root / key  # <owner>/<sha256>
        return self.root / key[:2] / key  # written before owners

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, key, data)

    def _put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)

    async def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return None

    async def delete_owner(self, owner: str) -> None:
        await asyncio.to_thread(self._delete_owner, owner)

    def _delete_owner(self, owner: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # it had no blobs
            shutil.rmtree(self.root / owner)

    def sweep(self, retention_days: int | None, now: float | None = None) -> int:
        """Delete the blobs of responses older than ``retention_days`` (their records have
        expired: a blob is never written before its record); returns how many owners went."""
        if retention_days is None or not self.root.is_dir():
            return 0
        cutoff = (time.time() if now is None else now) - retention_days * 86400
        gone = 0
        for owner in self.root.glob(RESPONSE_PREFIX + "*"):
            try:
                newest = max((f.stat().st_mtime for f in owner.iterdir()), default=0.0)
            except OSError:
                continue
            if newest < cutoff:
                shutil.rmtree(owner, ignore_errors=True)
                gone += 1
        return gone


class S3Blobs(Blobs):
    """Objects ``<prefix><key>`` in one S3 bucket (boto3, in a thread)."""

    def __init__(self, bucket: str, prefix: str = "blobs/", client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._client = client

    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.session.Session().client("s3")
        return self._client

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(lambda: self.client().put_object(
            Bucket=self.bucket, Key=self.prefix + key, Body=data))

    async def get(self, key: str) -> bytes | None:
        def read() -> bytes | None:
            client = self.client()
            try:
                answer = client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            except client.exceptions.NoSuchKey:
                return None
            return bytes(answer["Body"].read())

        return await asyncio.to_thread(read)

    async def delete_owner(self, owner: str) -> None:
        def delete() -> None:
            client = self.client()
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}{owner}/")
            for page in pages:
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:  # a page holds at most 1,000 keys, as many as one delete takes
                    answer = client.delete_objects(Bucket=self.bucket,
                                                   Delete={"Objects": keys, "Quiet": True})
                    if answer.get("Errors"):
                        raise OSError(f"S3 kept {len(answer['Errors'])} blob(s) of {owner}")

        await asyncio.to_thread(delete)


# -- moving values out and back -----------------------------------------------------------------


class _Out:
    """One write's large strings: replaced by references, their bytes collected."""

    def __init__(self, threshold: int, owner: str) -> None:
        self.threshold = threshold
        self.owner = owner
        self.found: dict[str, bytes] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            if len(value) >= self.threshold:
                data = value.encode()
                key = f"{self.owner}/{hashlib.sha256(data).hexdigest()}"
                self.found[key] = data
                return MARK + key
            return ESCAPE + value if value.startswith(ESCAPE) else value
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


def _references(value: Any, into: set[str]) -> None:
    if isinstance(value, str):
        if value.startswith(MARK):
            into.add(value[len(MARK):])
    elif isinstance(value, dict):
        for v in value.values():
            _references(v, into)
    elif isinstance(value, list):
        for v in value:
            _references(v, into)


def _expanded_size(moved: Any, found: dict[str, bytes]) -> int:
    """The JSON size of ``moved`` with its references replaced by their blobs: what the
    value is as the API returns it (each place a blob is referenced counts its bytes)."""
    size = len(orjson.dumps(moved))
    counts: dict[str, int] = {}
    _count_references(moved, counts)
    for key, times in counts.items():
        data = found.get(key)
        if data is not None:
            size += times * (len(data) - len(MARK) - len(key))
    return size


def _count_references(value: Any, counts: dict[str, int]) -> None:
    if isinstance(value, str):
        if value.startswith(MARK):
            key = value[len(MARK):]
            counts[key] = counts.get(key, 0) + 1
    elif isinstance(value, dict):
        for v in value.values():
            _count_references(v, counts)
    elif isinstance(value, list):
        for v in value:
            _count_references(v, counts)


def _restored(value: Any, blobs: dict[str, str]) -> Any:
    if isinstance(value, str):
        if value.startswith(MARK):
            return blobs[value[len(MARK):]]
        return value[1:] if value.startswith(ESCAPE) else value
    if isinstance(value, dict):
        return {k: _restored(v, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [_restored(v, blobs) for v in value]
    return value


class BlobbedStore(StoreWrapper):
    """The store, its large values in ``blobs`` (see the module docstring): every call that
    writes or reads items, events or a Response is written out below; the rest (leases, locks,
    metadata, tool reads, the ledgers beside the store) hand on what they are given."""

    passed_through = (
        "limits", "check_input_items", "usage_store", "health_store",
        "renew_lease", "put_tool_reads", "get_tool_reads",
        "get_conversation", "update_conversation", "lock_conversation",
        "renew_conversation_lock",
    )

    def __init__(self, inner: Store, blobs: Blobs, threshold: int = DEFAULT_THRESHOLD) -> None:
        super().__init__(inner)
        self.blobs = blobs
        self.threshold = threshold
        # keys this process has put lately (a response is written several times): bounded
        self._written: OrderedDict[str, None] = OrderedDict()

    # -- the two directions ------------------------------------------------------------------

    async def _out(self, value: Any, owner: str, response: Any = None) -> tuple[Any, Any]:
        """``value`` and a Response object (or None) with their large strings as references
        to blobs of ``owner``; the Response within GATEWAY_MAX_STORED_RESPONSE_BYTES counting
        its blobs (else ResponseTooLarge, nothing written: the inner store sees references
        only, a few bytes for a megabyte image)."""
        moved, moved_response, found = (
            await asyncio.to_thread(self._moved, value, owner, response)
            if heavy_json(value, response) else self._moved(value, owner, response))
        await self._put(found)
        return moved, moved_response

    def _moved(self, value: Any, owner: str, response: Any,
               ) -> tuple[Any, Any, dict[str, bytes]]:
        """:meth:`_out`'s walk: the values moved, and the blobs found."""
        out = _Out(self.threshold, owner)
        moved_response = None
        if response is not None:
            moved_response = out(response)
            self.limits.check_response(_expanded_size(moved_response, out.found))
        return out(value), moved_response, out.found

    async def _items_out(self, conversation_id: str, items: list[dict[str, Any]]
                         ) -> list[dict[str, Any]]:
        """A conversation's items, each item's blobs its own (deleted with it)."""
        moved, found = (await asyncio.to_thread(self._items_moved, conversation_id, items)
                        if heavy_json(items) else self._items_moved(conversation_id, items))
        await self._put(found)
        return moved

    def _items_moved(self, conversation_id: str, items: list[dict[str, Any]],
                     ) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
        found: dict[str, bytes] = {}
        moved = []
        for item in items:
            item_id = item.get("id") if isinstance(item, dict) else None
            out = _Out(self.threshold, owner_key(conversation_id, str(item_id or "_")))
            moved.append(out(item))
            found.update(out.found)
        return moved, found

    async def _put(self, found: dict[str, bytes]) -> None:
        fresh = {k: v for k, v in found.items() if k not in self._written}
        if fresh:
            try:
                await asyncio.gather(*(self.blobs.put(k, v) for k, v in fresh.items()))
            except Exception as exc:
                raise StoreUnavailable(f"blob write failed: {type(exc).__name__}: {exc}") from exc
            for key in fresh:
                self._written[key] = None
            while len(self._written) > WRITTEN_KEPT:
                self._written.popitem(last=False)

    async def _delete_owner(self, owner: str) -> None:
        """Delete ``owner``'s blobs before its record: a failure leaves the record (the
        client's retry deletes both), never a record whose blobs are gone unnoticed."""
        try:
            await self.blobs.delete_owner(owner)
        except Exception as exc:
            raise StoreUnavailable(f"blob delete failed: {type(exc).__name__}: {exc}") from exc
        for key in [k for k in self._written if k.startswith(owner + "/")]:
            del self._written[key]  # written again if the owner ever is

    async def _back(self, value: Any) -> Any:
        heavy = heavy_json(value)
        keys: set[str] = set()
        if heavy:
            await asyncio.to_thread(_references, value, keys)
        else:
            _references(value, keys)
        found: dict[str, str] = {}
        if keys:
            ordered = sorted(keys)
            try:
                datas = await asyncio.gather(*(self.blobs.get(k) for k in ordered))
            except Exception as exc:
                raise StoreUnavailable(f"blob read failed: {type(exc).__name__}: {exc}") from exc
            for key, data in zip(ordered, datas, strict=True):
                if data is None:
                    raise StoreUnavailable(f"blob {key} of a stored record is missing")
                found[key] = data.decode()
        if heavy:
            return await asyncio.to_thread(_restored, value, found)
        return _restored(value, found)

    async def _record_out(self, record: StoredResponse | None) -> StoredResponse | None:
        if record is None:
            return None
        moved, response = await self._out([record.request, record.input_items],
                                          owner_key(record.id), record.response)
        return StoredResponse(
            id=record.id, tenant=record.tenant, response=response, request=moved[0],
            input_items=moved[1], previous_response_id=record.previous_response_id,
            background=record.background, lease_until=record.lease_until,
            expires_at=record.expires_at)

    async def _record_back(self, record: StoredResponse | None) -> StoredResponse | None:
        if record is None:
            return None
        record.response, record.request, record.input_items = await self._back(
            [record.response, record.request, record.input_items])
        return record

    # -- responses -----------------------------------------------------------------------------

    async def put(self, record: StoredResponse) -> None:
        await self._inner.put(await self._record_out(record))  # type: ignore[arg-type]

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        return await self._record_back(await self._inner.get(response_id, tenant))

    async def delete(self, response_id: str, tenant: str) -> bool:
        if await self._inner.get(response_id, tenant) is not None:  # this tenant's, alive
            await self._delete_owner(owner_key(response_id))
        return await self._inner.delete(response_id, tenant)

    async def get_items(self, item_ids: list[str], tenant: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = await self._back(
            await self._inner.get_items(item_ids, tenant))
        return found

    async def update_response(
        self, response_id: str, response: dict[str, Any], *,
        expect_status: frozenset[str] | set[str] | None = None, lease_until: float | None = None,
    ) -> bool:
        _, moved = await self._out(None, owner_key(response_id), response)
        return await self._inner.update_response(
            response_id, moved,
            expect_status=expect_status, lease_until=lease_until)

    async def append_events(
        self, response_id: str, events: list[dict[str, Any]], *,
        response: dict[str, Any] | None = None, lease_until: float | None = None,
        turn: TurnSettle | None = None,
    ) -> None:
        events, response = await self._out(events, owner_key(response_id), response)
        settles = {}
        if turn is not None:
            items = None if turn.items is None else await self._items_out(
                turn.conversation_id, turn.items)
            settles["turn"] = TurnSettle(turn.conversation_id, turn.tenant, turn.token,
                                         turn.length, items)
        await self._inner.append_events(response_id, events, response=response,
                                        lease_until=lease_until, **settles)

    async def read_events(self, response_id: str, after: int = -1) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = await self._back(
            await self._inner.read_events(response_id, after))
        return events

    async def aclose(self) -> None:
        await self._inner.aclose()
        await self.blobs.aclose()

    # -- conversations -------------------------------------------------------------------------

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        await self._inner.create_conversation(
            conversation, await self._items_out(conversation.id, items))

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        if await self._inner.get_conversation(conversation_id, tenant) is not None:
            await self._delete_owner(owner_key(conversation_id))
        return await self._inner.delete_conversation(conversation_id, tenant)

    async def conversation_items(
        self, conversation_id: str, tenant: str
    ) -> tuple[StoredConversation, list[dict[str, Any]]] | None:
        found = await self._inner.conversation_items(conversation_id, tenant)
        if found is None:
            return None
        return found[0], await self._back(found[1])

    async def append_conversation_items(
        self, conversation_id: str, tenant: str, items: list[dict[str, Any]], *,
        token: str | None = None, length: int | None = None, param: str = "items",
        record: StoredResponse | None = None,
    ) -> StoredConversation | None:
        return await self._inner.append_conversation_items(
            conversation_id, tenant, await self._items_out(conversation_id, items),
            token=token, length=length,
            param=param, record=await self._record_out(record))

    async def release_conversation(self, conversation_id: str, token: str, *,
                                   record: StoredResponse | None = None) -> None:
        await self._inner.release_conversation(
            conversation_id, token, record=await self._record_out(record))

    async def list_conversation_items(
        self, conversation_id: str, tenant: str, *, limit: int, order: str,
        after: str | None = None,
    ) -> tuple[list[dict[str, Any]], bool] | None:
        found = await self._inner.list_conversation_items(
            conversation_id, tenant, limit=limit, order=order, after=after)
        if found is None:
            return None
        return await self._back(found[0]), found[1]

    async def get_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, dict[str, Any] | None] | None:
        found = await self._inner.get_conversation_item(conversation_id, tenant, item_id)
        if found is None:
            return None
        return found[0], await self._back(found[1])

    async def delete_conversation_item(
        self, conversation_id: str, tenant: str, item_id: str
    ) -> tuple[StoredConversation, bool] | None:
        found = await self._inner.get_conversation_item(conversation_id, tenant, item_id)
        if found is not None and found[1] is not None:
            await self._delete_owner(owner_key(conversation_id, item_id))
        return await self._inner.delete_conversation_item(
            conversation_id, tenant, item_id)

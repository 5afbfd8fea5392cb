"""The Vector Stores API's operations: validation, OpenAI's objects and errors, and the
background ingestion of files (an in-process task per file, holding a lease it renews; files
whose lease ran out, their process stopped, are claimed and ingested again: by the gateway's
periodic task (:meth:`VectorStores.reclaim_forever`, every half lease), by a vector store
request at most that often, and by any read of such a file's status, so none stays
``in_progress`` after the process that began it stopped).

file_search (issue 31) calls :meth:`VectorStores.search` with the same arguments as
``POST /v1/vector_stores/{id}/search``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from responses_gateway import ids
from responses_gateway.errors import (
    GatewayError,
    array_too_long,
    invalid_request,
    missing_parameter,
    out_of_range,
)
from responses_gateway.files.service import Files
from responses_gateway.vectors import objects
from responses_gateway.vectors.chunking import parse_strategy
from responses_gateway.vectors.embeddings import Embedder, EmbeddingError
from responses_gateway.vectors.engine import VectorEngine
from responses_gateway.vectors.extract import ExtractLimits, Invalid, Unsupported
from responses_gateway.vectors.filters import Filter, FilterLimits, compile_filter
from responses_gateway.vectors.ingest import prepare
from responses_gateway.vectors.knowledge_bases import KnowledgeBase, KnowledgeBases, read_only
from responses_gateway.vectors.local import now
from responses_gateway.vectors.ranking import Ranking

logger = logging.getLogger("responses_gateway.vectors")
MAX_RESULTS = 50
MAX_ATTRIBUTES = 16
MAX_INGESTING = 4  # files ingested at once in this process
MAX_BATCH_FILES = 2000  # OpenAI's bound on a file batch's ``file_ids`` / ``files``
INLINE_TESTS = 4096  # filter tests (rows x filter size) a search runs on the event loop


@dataclass(frozen=True, slots=True)
class SearchLimits:
    """What one search may ask: queries (GATEWAY_MAX_SEARCH_QUERIES, file_search's cap, as
    OpenAI documents none for the endpoint), query embeddings in flight in this process
    (GATEWAY_MAX_SEARCH_EMBEDDINGS), the size of its ``filters``."""

    queries: int = 5
    embeddings: int = 16
    filters: FilterLimits = field(default_factory=FilterLimits)

    @classmethod
    def of(cls, settings: Any) -> SearchLimits:
        return cls(settings.max_search_queries, settings.max_search_embeddings,
                   FilterLimits.of(settings))


class VectorStores:
    def __init__(self, engine: VectorEngine, files: Files, embedder: Embedder, *,
                 max_files: int, lease_seconds: float,
                 hand_off: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
                 knowledge_bases: KnowledgeBases | None = None,
                 search_limits: SearchLimits | None = None,
                 extract_limits: ExtractLimits | None = None) -> None:
        self.engine = engine
        self.knowledge_bases = knowledge_bases  # GATEWAY_KNOWLEDGE_BASES: read-only stores
        #: AWS: queues an ingestion for the worker Lambda (platform/worker.py ``Worker.queue``);
        #: ``None``: ingestion runs in this process
        self.hand_off = hand_off
        self.files = files
        self.embedder = embedder
        self.max_files = max_files
        self.lease_seconds = max(1.0, lease_seconds)
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_INGESTING)
        self.search_limits = search_limits or SearchLimits()
        self.extract_limits = extract_limits or ExtractLimits()
        self._embedding = asyncio.Semaphore(self.search_limits.embeddings)
        self._running: Counter[tuple[str, str, str]] = Counter()  # files ingested here
        self._reclaimed_at = float("-inf")  # time.monotonic() of the last look
        self._reclaiming = False

    # -- stores -----------------------------------------------------------------------------

    async def create(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        await self.recover()
        created = now()
        row = {"id": ids.new_id(ids.VECTOR_STORE), "created_at": created,
               "name": _optional_str(body.get("name"), "name") or "",
               "description": _optional_str(body.get("description"), "description"),
               "metadata": _metadata(body.get("metadata")),
               "expires_after": _expires_after(body.get("expires_after")),
               "last_active_at": created}
        strategy = parse_strategy(body.get("chunking_strategy"))
        file_ids = _file_ids(body.get("file_ids"), "file_ids")
        records = [await self.files.get(f, tenant) for f in file_ids]
        await self.engine.add_store(tenant, row)
        if records:
            await self._attach(tenant, row["id"], [(r, {}, strategy) for r in records], None)
        return await self.get(tenant, row["id"])

    async def get(self, tenant: str, store_id: str) -> dict[str, Any]:
        kb = self._knowledge_base(tenant, store_id)
        if kb is not None:
            return kb.to_object()
        row = await self._store(tenant, store_id)
        statuses, usage = await self.engine.store_totals(tenant, store_id)
        return objects.vector_store(row, objects.file_counts(statuses), usage)

    async def page(self, tenant: str, order: str, after: str | None, before: str | None,
                   limit: int) -> tuple[list[dict[str, Any]], bool]:
        rows, more = await self.engine.stores_page(tenant, order, after, before, limit)
        return [await self.get(tenant, r["id"]) for r in rows], more

    async def modify(self, tenant: str, store_id: str, body: dict[str, Any]) -> dict[str, Any]:
        await self._store(tenant, store_id)
        changes: dict[str, Any] = {}
        if "name" in body:
            changes["name"] = _optional_str(body["name"], "name") or ""
        if "metadata" in body:
            changes["metadata"] = _metadata(body["metadata"])
        if "expires_after" in body:
            changes["expires_after"] = _expires_after(body["expires_after"])
        if changes:
            await self.engine.update_store(tenant, store_id, changes)
        return await self.get(tenant, store_id)

    async def delete(self, tenant: str, store_id: str) -> dict[str, Any]:
        if self._knowledge_base(tenant, store_id) is not None:
            raise read_only(store_id)
        if ids.unknowable(store_id) or not await self.engine.delete_store(tenant, store_id):
            raise objects.store_not_found(store_id)
        return {"id": store_id, "object": "vector_store.deleted", "deleted": True}

    # -- files ------------------------------------------------------------------------------

    async def add_file(self, tenant: str, store_id: str, body: dict[str, Any]
                       ) -> dict[str, Any]:
        await self._store(tenant, store_id)
        file_id = body.get("file_id")
        if not isinstance(file_id, str) or not file_id:
            raise missing_parameter("file_id")
        record = await self.files.get(file_id, tenant)
        strategy = parse_strategy(body.get("chunking_strategy"))
        await self._attach(tenant, store_id,
                           [(record, _attributes(body.get("attributes")), strategy)], None)
        return await self.get_file(tenant, store_id, file_id)

    async def _attach(self, tenant: str, store_id: str, entries: list[tuple[Any, Any, Any]],
                      batch_id: str | None) -> None:
        created, lease = now(), time.time() + self.lease_seconds
        rows = [{"store_id": store_id, "file_id": r.id, "filename": r.filename,
                 "created_at": created, "attributes": attrs, "chunking": strategy,
                 "batch_id": batch_id, "lease_until": lease} for r, attrs, strategy in entries]
        if not await self.engine.add_files(tenant, rows, self.max_files):
            raise invalid_request(
                f"This vector store may hold at most {self.max_files} files "
                "(GATEWAY_MAX_VECTOR_STORE_FILES).", param="file_id",
                code="vector_store_full")
        await self.engine.update_store(tenant, store_id, {"last_active_at": created})
        await asyncio.gather(*(self._start(tenant, store_id, row["file_id"]) for row in rows))

    async def get_file(self, tenant: str, store_id: str, file_id: str) -> dict[str, Any]:
        await self._store(tenant, store_id)
        row = None if ids.unknowable(file_id) else await self.engine.file(tenant, store_id,
                                                                          file_id)
        if row is None:
            raise objects.file_not_in_store(file_id, store_id)
        await self._reclaim_rows(tenant, [row])
        return objects.vector_store_file(row)

    async def files_page(self, tenant: str, store_id: str, *, status: str | None,
                         batch_id: str | None, order: str, after: str | None,
                         before: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        if self._knowledge_base(tenant, store_id) is not None:
            return [], False  # its documents are listed in Bedrock
        await self._store(tenant, store_id)
        if status is not None and status not in objects.STATUSES:
            raise invalid_request(
                f"Invalid value: '{status}'. Supported values are: "
                f"{', '.join(repr(s) for s in objects.STATUSES)}.", param="filter",
                code="invalid_value")
        rows, more = await self.engine.files_page(
            tenant, store_id, status=status, batch_id=batch_id, order=order, after=after,
            before=before, limit=limit)
        await self._reclaim_rows(tenant, rows)
        return [objects.vector_store_file(r) for r in rows], more

    async def update_file(self, tenant: str, store_id: str, file_id: str,
                          body: dict[str, Any]) -> dict[str, Any]:
        await self.get_file(tenant, store_id, file_id)
        if "attributes" not in body:
            raise missing_parameter("attributes")
        await self.engine.update_file(tenant, store_id, file_id,
                                      {"attributes": _attributes(body["attributes"])})
        return await self.get_file(tenant, store_id, file_id)

    async def remove_file(self, tenant: str, store_id: str, file_id: str) -> dict[str, Any]:
        await self._store(tenant, store_id)
        if ids.unknowable(file_id) or not await self.engine.remove_file(tenant, store_id,
                                                                         file_id):
            raise objects.file_not_in_store(file_id, store_id)
        return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}

    async def file_content(self, tenant: str, store_id: str, file_id: str) -> list[str]:
        await self.get_file(tenant, store_id, file_id)
        return await self.engine.file_text(tenant, store_id, file_id)

    # -- batches ----------------------------------------------------------------------------

    async def create_batch(self, tenant: str, store_id: str, body: dict[str, Any]
                           ) -> dict[str, Any]:
        await self._store(tenant, store_id)
        strategy = parse_strategy(body.get("chunking_strategy"))
        attributes = _attributes(body.get("attributes"))
        entries: list[tuple[Any, Any, Any]] = []
        if body.get("files") is not None and body.get("file_ids") is not None:
            raise invalid_request(
                "Mutually exclusive parameters. Ensure you are only providing one of: "
                "'file_ids' or 'files'.", code="mutually_exclusive_parameters")
        for name in ("file_ids", "files"):  # each looked up before the store's own bound
            listed = body.get(name)
            if isinstance(listed, list) and len(listed) > MAX_BATCH_FILES:
                raise array_too_long(name, MAX_BATCH_FILES, len(listed))
        if body.get("files") is not None:
            if not isinstance(body["files"], list) or not body["files"]:
                raise invalid_request("Invalid 'files': expected a non-empty array.",
                                      param="files", code="invalid_value")
            for i, spec in enumerate(body["files"]):
                if not isinstance(spec, dict) or not isinstance(spec.get("file_id"), str):
                    raise missing_parameter(f"files[{i}].file_id")
                entries.append((await self.files.get(spec["file_id"], tenant),
                                _attributes(spec.get("attributes")) or attributes,
                                parse_strategy(spec.get("chunking_strategy"),
                                               f"files[{i}].chunking_strategy")
                                if spec.get("chunking_strategy") else strategy))
        else:
            for file_id in _file_ids(body.get("file_ids"), "file_ids", required=True):
                entries.append((await self.files.get(file_id, tenant), attributes, strategy))
        batch_id = ids.new_id(ids.VECTOR_STORE_FILE_BATCH)
        await self.engine.add_batch(tenant, store_id, batch_id, now())
        await self._attach(tenant, store_id, entries, batch_id)
        return await self.get_batch(tenant, store_id, batch_id)

    async def get_batch(self, tenant: str, store_id: str, batch_id: str) -> dict[str, Any]:
        await self._store(tenant, store_id)
        found = None if ids.unknowable(batch_id) else await self.engine.batch(
            tenant, store_id, batch_id)
        if found is None:
            raise objects.batch_not_found(batch_id, store_id)
        return objects.file_batch(found[0], objects.file_counts(found[1]))

    async def cancel_batch(self, tenant: str, store_id: str, batch_id: str) -> dict[str, Any]:
        await self.get_batch(tenant, store_id, batch_id)
        await self.engine.cancel_batch(tenant, store_id, batch_id)
        return await self.get_batch(tenant, store_id, batch_id)

    # -- search -----------------------------------------------------------------------------

    async def search(self, tenant: str, store_id: str, body: dict[str, Any]
                     ) -> dict[str, Any]:
        kb = self._knowledge_base(tenant, store_id)
        if kb is None:
            await self._store(tenant, store_id)
        queries = self._queries(body.get("query"))
        limit = body.get("max_num_results", 10)
        if not isinstance(limit, int) or isinstance(limit, bool) or \
                not 1 <= limit <= MAX_RESULTS:
            raise out_of_range("max_num_results", 1, MAX_RESULTS, limit)
        keep = compile_filter(body["filters"], "filters", self.search_limits.filters) \
            if body.get("filters") is not None else None
        ranking = Ranking.parse(body.get("ranking_options"))
        if not isinstance(body.get("rewrite_query", False), bool):
            raise invalid_request("Invalid 'rewrite_query': expected a boolean.",
                                  param="rewrite_query", code="invalid_type")
        if kb is not None:
            assert self.knowledge_bases is not None
            found = await self.knowledge_bases.search(
                kb, queries, limit, body.get("filters"), ranking.text_weight > 0)
            return {"object": "vector_store.search_results.page", "search_query": queries,
                    "data": [r for r in found if r["score"] >= ranking.score_threshold],
                    "has_more": False, "next_page": None}
        files = await self.engine.completed_files(tenant, store_id)
        allowed = await _allowed(files, keep)
        results: list[dict[str, Any]] = []
        if allowed:
            try:
                async with self._embedding:  # a bound on this process's calls in flight
                    vectors = await self.embedder.embed(queries, query=True)
            except EmbeddingError as exc:
                raise GatewayError(502, f"The embedding model failed: {exc}",
                                   type="server_error", code="embedding_failed") from None
            candidates = await self.engine.search(
                tenant, store_id, vectors, " ".join(queries), allowed,
                ranking.text_weight > 0, limit)
            scored = sorted(((ranking.fuse(sim, kw), fid, text)
                             for _, fid, text, sim, kw in candidates), key=lambda s: -s[0])
            for score, fid, text in scored[:limit]:
                if score < ranking.score_threshold:
                    continue
                row = files[fid]
                results.append({"file_id": fid, "filename": row["filename"],
                                "score": round(score, 6), "attributes": row["attributes"] or {},
                                "content": [{"type": "text", "text": text}]})
        await self.engine.update_store(tenant, store_id, {"last_active_at": now()})
        return {"object": "vector_store.search_results.page", "search_query": queries,
                "data": results, "has_more": False, "next_page": None}

    def _queries(self, query: Any) -> list[str]:
        """``query``: a string or a non-empty array of at most ``search_limits.queries``."""
        queries = [query] if isinstance(query, str) else query
        if isinstance(queries, list) and len(queries) > self.search_limits.queries:
            raise array_too_long("query", self.search_limits.queries, len(queries),
                                 "GATEWAY_MAX_SEARCH_QUERIES")
        if not isinstance(queries, list) or not queries or not all(
                isinstance(q, str) and q.strip() for q in queries):
            raise (missing_parameter("query") if query is None else invalid_request(
                "Invalid 'query': expected a non-empty string or array of strings.",
                param="query", code="invalid_value"))
        return queries

    def _knowledge_base(self, tenant: str, store_id: str) -> KnowledgeBase | None:
        return self.knowledge_bases.get(tenant, store_id) if self.knowledge_bases else None

    async def _store(self, tenant: str, store_id: str) -> dict[str, Any]:
        """The tenant's store; a Knowledge Base's id is the 400 of a read-only store (what
        reads one answers before coming here)."""
        if self._knowledge_base(tenant, store_id) is not None:
            raise read_only(store_id)
        await self.recover()
        row = None if ids.unknowable(store_id) else await self.engine.store(tenant, store_id)
        if row is None:
            raise objects.store_not_found(store_id)
        return row

    # -- ingestion --------------------------------------------------------------------------

    @property
    def reclaim_seconds(self) -> float:
        """How often files whose lease ran out are looked for: half a lease, so a file waits
        at most a lease and a half after its process stopped."""
        return self.lease_seconds / 2

    async def recover(self) -> None:
        """On a request, at most every :attr:`reclaim_seconds`: :meth:`reclaim` (a gateway
        without its periodic task, a Lambda function, still finds what a stopped one left)."""
        if time.monotonic() - self._reclaimed_at >= self.reclaim_seconds:
            await self.reclaim()

    async def reclaim_forever(self) -> None:
        """The gateway's periodic task (api/startup.py): :meth:`reclaim` now and every
        :attr:`reclaim_seconds` after, for as long as the process runs; a failed look is
        logged and tried again next time."""
        while True:
            try:
                await self.reclaim()
            except Exception:
                logger.exception("looking for vector store files to ingest again failed")
            await asyncio.sleep(self.reclaim_seconds)

    async def reclaim(self) -> int:
        """Claim and ingest again every file whose lease ran out (its process stopped before
        the file was done); how many. One look at a time in this process."""
        if self._reclaiming:
            return 0
        self._reclaiming = True
        try:
            self._reclaimed_at = time.monotonic()
            stale = await self.engine.stale_files(time.time())
            return sum([await self._reclaim_row(row["tenant"], row) for row in stale])
        finally:
            self._reclaiming = False

    async def _reclaim_rows(self, tenant: str, rows: list[dict[str, Any]]) -> None:
        """Read rows of files whose lease ran out are claimed and ingested again (a read of
        the status is where a client waits for it)."""
        for row in rows:
            await self._reclaim_row(tenant, row)

    async def _reclaim_row(self, tenant: str, row: dict[str, Any]) -> bool:
        """Ingest ``row``'s file again if it is in progress, its lease ran out and this
        process is not ingesting it; the claim moves the lease only while it is still run
        out, so of processes that saw it at once one ingests it."""
        key = (tenant, row["store_id"], row["file_id"])
        now_at = time.time()
        expired = float(row.get("lease_until") or 0) < now_at
        if row.get("status") != "in_progress" or not expired or key in self._running:
            return False
        if not await self.engine.claim_file(*key, now_at, now_at + self.lease_seconds):
            return False
        logger.info("resuming ingestion of %s into %s", row["file_id"], row["store_id"])
        await self._start(*key)
        return True

    async def _start(self, tenant: str, store_id: str, file_id: str) -> None:
        """Hand the file to the worker Lambda when there is one (it outlives this request;
        the request waits until Lambda took the event, since a Lambda process may be frozen
        once it answered), else to an in-process task; either way the file's lease brings it
        back if its ingestion is cut short."""
        if self.hand_off is not None:
            try:
                await self.hand_off({
                    "kind": "vector_store_file", "tenant": tenant, "store_id": store_id,
                    "file_id": file_id})
                return
            except Exception:
                logger.exception("the worker did not take %s; ingesting it here", file_id)
        task = asyncio.get_running_loop().create_task(self._ingest(tenant, store_id, file_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def ingest(self, tenant: str, store_id: str, file_id: str) -> str | None:
        """Ingest one file now (the worker Lambda's entry); its status after, None if gone."""
        await self._ingest(tenant, store_id, file_id)
        row = await self.engine.file(tenant, store_id, file_id)
        return row["status"] if row else None

    async def _ingest(self, tenant: str, store_id: str, file_id: str) -> None:
        key = (tenant, store_id, file_id)
        self._running[key] += 1
        renew = asyncio.create_task(self._renew(tenant, store_id, file_id))
        try:
            async with self._slots:
                await self._ingest_once(tenant, store_id, file_id)
        except Exception:
            logger.exception("ingestion of %s into %s failed", file_id, store_id)
            await self._fail(tenant, store_id, file_id, "server_error",
                             "The file could not be processed.")
        finally:
            renew.cancel()
            self._running[key] -= 1
            if not self._running[key]:
                del self._running[key]

    async def _ingest_once(self, tenant: str, store_id: str, file_id: str) -> None:
        row = await self.engine.file(tenant, store_id, file_id)
        if row is None or row["status"] != "in_progress":
            return
        try:
            record, data = await self.files.content(file_id, tenant)
        except GatewayError:
            return await self._fail(tenant, store_id, file_id, "invalid_file",
                                     "The file was deleted before it could be processed.")
        try:
            chunks = await prepare(record.filename, data, row["chunking"], self.embedder,
                                   partial(self.engine.cached_vectors, tenant),
                                   self.extract_limits)
        except Unsupported as exc:
            return await self._fail(tenant, store_id, file_id, "unsupported_file", str(exc))
        except Invalid as exc:
            return await self._fail(tenant, store_id, file_id, "invalid_file", str(exc))
        except EmbeddingError as exc:
            return await self._fail(tenant, store_id, file_id, "server_error", str(exc))
        usage = sum(len(c.text.encode()) + 4 * len(c.vector) for c in chunks)
        await self.engine.write_chunks(tenant, store_id, file_id, chunks, usage)

    async def _fail(self, tenant: str, store_id: str, file_id: str, code: str,
                    message: str) -> None:
        await self.engine.update_file(
            tenant, store_id, file_id,
            {"status": "failed", "last_error": {"code": code, "message": message}},
            only_status="in_progress")

    async def _renew(self, tenant: str, store_id: str, file_id: str) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            await self.engine.update_file(tenant, store_id, file_id,
                                          {"lease_until": time.time() + self.lease_seconds},
                                          only_status="in_progress")

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self.embedder.aclose()
        await self.engine.aclose()


async def _allowed(files: dict[str, dict[str, Any]], keep: Filter | None) -> set[str]:
    """The files ``keep`` lets through: on the event loop when they cost a few thousand
    tests, else in a thread (a store holds up to GATEWAY_MAX_VECTOR_STORE_FILES files)."""
    if keep is None:
        return set(files)

    def test() -> set[str]:
        return {fid for fid, row in files.items() if keep(row["attributes"] or {})}

    if len(files) * keep.size <= INLINE_TESTS:
        return test()
    return await asyncio.to_thread(test)


def _optional_str(value: Any, param: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise invalid_request(f"Invalid '{param}': expected a string.", param=param,
                              code="invalid_type")
    return value


def _file_ids(value: Any, param: str, required: bool = False) -> list[str]:
    if value is None and not required:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or (
            required and not value):
        if value is None:
            raise missing_parameter(param)
        raise invalid_request(f"Invalid '{param}': expected an array of file ids.",
                              param=param, code="invalid_type")
    return list(dict.fromkeys(value))


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 16 or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in value.items()):
        raise invalid_request(
            "Invalid 'metadata': at most 16 pairs of strings, keys up to 64 and values up to "
            "512 characters.", param="metadata", code="invalid_value")
    return value


def _attributes(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_ATTRIBUTES or not all(
            isinstance(k, str) and len(k) <= 64 and (
                isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 512))
            for k, v in value.items()):
        raise invalid_request(
            f"Invalid 'attributes': at most {MAX_ATTRIBUTES} keys of up to 64 characters, each "
            "value a string (up to 512 characters), a number or a boolean.",
            param="attributes", code="invalid_value")
    return value


def _expires_after(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("anchor") != "last_active_at" or not (
            isinstance(value.get("days"), int) and 1 <= value["days"] <= 365):
        raise invalid_request(
            "Invalid 'expires_after': expected {\"anchor\": \"last_active_at\", \"days\": 1 to "
            "365}.", param="expires_after", code="invalid_value")
    return {"anchor": "last_active_at", "days": value["days"]}

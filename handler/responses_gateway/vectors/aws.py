"""Vector stores in AWS: records in the gateway's DynamoDB table, vectors in Amazon S3 Vectors
(``GATEWAY_VECTOR_BUCKET``), one index per vector store.

DynamoDB rows (``pk`` / ``sk``):
- ``vs#<tenant>`` / ``S#<store id>``: the store (``files``: how many files it holds, moved in
  the same conditional write that keeps it within ``GATEWAY_MAX_VECTOR_STORE_FILES``);
- ``vsf#<tenant>#<store id>`` / ``F#<file id>``: a file (status, lease, attributes, ``chunks``:
  how many it has), and ``B#<batch id>``: a batch;
- ``vsc#<tenant>#<store id>#<file id>`` / ``C#<index>``: a chunk's text and ``k``, its
  embedding cache key;
- ``emb#<tenant>#<model+text sha256>`` / ``E``: the tenant's embedding of that text (``v``,
  float32) and ``refs``, the ``<store id> <file id>`` of each of the tenant's files with a
  chunk of it. A file's chunks add their refs when written and take them away before they are
  deleted; the row goes with its last ref (a conditional delete, so a file adding it again
  meanwhile keeps it). The cache is thus never another tenant's (a hit is faster than a miss:
  a shared cache told one tenant what another's files hold), and gone with the data;
- ``vsrun`` / ``<tenant> <store id> <file id>``: a file being ingested, so a process can find
  the files a stopped one left ``in_progress``.

S3 Vectors: index ``vs-<store id's hex>`` (cosine, created with the first chunks' dimension),
one vector per chunk, key ``<file id>#<index>``, metadata ``{"file_id"}`` (filterable): a
search that the attribute filters narrow asks for ``file_id $in`` the allowed files. There is
no full-text index here: the keyword half of hybrid search re-ranks the vector candidates by
the query's words in their text.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import threading
from typing import Any

import orjson

from responses_gateway.vectors.engine import Candidate

JSON_FIELDS = ("metadata", "expires_after", "last_error", "attributes", "chunking")
MAX_TOP_K = 100  # QueryVectors' topK
PUT_BATCH = 500  # PutVectors / DeleteVectors: vectors per call
#: UpdateItem calls on the cached embeddings' refs in flight at once: one a distinct chunk
#: text (a file at OpenAI's 5,000,000-token bound has ~12,000), which no batch call can do
REF_WRITES = 16
RUNNING = "vsrun"
_WORD = re.compile(r"\w+", re.UNICODE)


def index_name(store_id: str) -> str:
    """S3 Vectors index names are 3-63 lowercase letters, digits, hyphens and dots."""
    return "vs-" + store_id.removeprefix("vs_")


def _encode(name: str, value: Any) -> dict[str, Any]:
    if name in JSON_FIELDS:
        return {"S": orjson.dumps(value).decode()}
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": repr(value) if isinstance(value, float) else str(value)}
    return {"S": str(value)}


def _decode(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in item.items():
        if name in ("pk", "sk"):
            continue
        if "S" in value:
            out[name] = orjson.loads(value["S"]) if name in JSON_FIELDS else value["S"]
        elif "N" in value:
            number = value["N"]
            out[name] = float(number) if any(c in number for c in ".eE") else int(number)
        elif "BOOL" in value:
            out[name] = value["BOOL"]
        elif "B" in value:
            out[name] = value["B"]
        else:
            out[name] = None
    return out


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _stores_pk(tenant: str) -> str:
    return "vs#" + tenant


def _files_pk(tenant: str, store_id: str) -> str:
    return f"vsf#{tenant}#{store_id}"


def _chunks_pk(tenant: str, store_id: str, file_id: str) -> str:
    return f"vsc#{tenant}#{store_id}#{file_id}"


def _emb_pk(tenant: str, key: str) -> str:
    return f"emb#{tenant}#{key}"


def _pack(vector: list[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def _unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


class AWSVectorEngine:
    def __init__(self, table: str, vector_bucket: str, *, dynamodb: Any = None,
                 s3vectors: Any = None) -> None:
        from responses_gateway.store.dynamodb.table import make_client

        self.table = table
        self.bucket = vector_bucket
        self.db = dynamodb or make_client()
        self._vectors = s3vectors
        self._lock = threading.Lock()

    @property
    def vectors(self) -> Any:
        with self._lock:
            if self._vectors is None:
                import boto3
                from botocore.config import Config

                # botocore reads AWS_ENDPOINT_URL_S3VECTORS itself (local and test endpoints)
                self._vectors = boto3.session.Session().client("s3vectors", config=Config(
                    retries={"mode": "standard", "max_attempts": 5}, max_pool_connections=32))
            return self._vectors

    async def _call(self, fn: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, TableName=self.table, **kwargs)

    def _query_all(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)" if prefix
            else "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}, **(
                {":p": {"S": prefix}} if prefix else {})}}
        items: list[dict[str, Any]] = []
        while True:
            result = self.db.query(**kwargs)
            items += result.get("Items", [])
            if "LastEvaluatedKey" not in result:
                return items
            kwargs["ExclusiveStartKey"] = result["LastEvaluatedKey"]

    async def _rows(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        """Decoded in the thread too: a store's files are up to GATEWAY_MAX_VECTOR_STORE_FILES
        rows, each with its attributes' JSON, read for every search."""
        return await asyncio.to_thread(
            lambda: [_decode(i) for i in self._query_all(pk, prefix)])

    async def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        result = await self._call(self.db.get_item, Key=_key(pk, sk), ConsistentRead=True)
        return _decode(result["Item"]) if "Item" in result else None

    def _write_all(self, requests: list[dict[str, Any]]) -> None:
        for i in range(0, len(requests), 25):
            pending = {self.table: requests[i:i + 25]}
            while pending:
                result = self.db.batch_write_item(RequestItems=pending)
                pending = result.get("UnprocessedItems") or {}

    # -- stores ---------------------------------------------------------------------------

    async def add_store(self, tenant: str, row: dict[str, Any]) -> None:
        item = {k: _encode(k, v) for k, v in row.items()}
        item.update(_key(_stores_pk(tenant), "S#" + row["id"]))
        item["files"] = {"N": "0"}
        await self._call(self.db.put_item, Item=item)

    async def store(self, tenant: str, store_id: str) -> dict[str, Any] | None:
        return await self._get(_stores_pk(tenant), "S#" + store_id)

    async def store_totals(self, tenant: str, store_id: str) -> tuple[dict[str, int], int]:
        statuses: dict[str, int] = {}
        usage = 0
        for row in await self._rows(_files_pk(tenant, store_id), "F#"):
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
            usage += int(row.get("usage_bytes") or 0)
        return statuses, usage

    async def stores_page(self, tenant: str, order: str, after: str | None,
                          before: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        rows = await self._rows(_stores_pk(tenant), "S#")
        return _page(rows, "id", order, after, before, limit)

    async def update_store(self, tenant: str, store_id: str, changes: dict[str, Any]) -> None:
        await self._update(_stores_pk(tenant), "S#" + store_id, changes, None)

    async def _update(self, pk: str, sk: str, changes: dict[str, Any],
                      only_status: str | None) -> bool:
        names = {f"#a{i}": k for i, k in enumerate(changes)}
        values = {f":v{i}": _encode(k, v) for i, (k, v) in enumerate(changes.items())}
        condition = "attribute_exists(pk)"
        if only_status is not None:
            names["#status"] = "status"
            values[":only"] = {"S": only_status}
            condition += " AND #status = :only"
        try:
            await self._call(
                self.db.update_item, Key=_key(pk, sk),
                UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(changes))),
                ConditionExpression=condition, ExpressionAttributeNames=names,
                ExpressionAttributeValues=values)
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    async def delete_store(self, tenant: str, store_id: str) -> bool:
        try:
            await self._call(self.db.delete_item, Key=_key(_stores_pk(tenant), "S#" + store_id),
                             ConditionExpression="attribute_exists(pk)")
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        pk = _files_pk(tenant, store_id)
        rows = await asyncio.to_thread(self._query_all, pk, "")
        deletes = [{"DeleteRequest": {"Key": {"pk": r["pk"], "sk": r["sk"]}}} for r in rows]
        for row in rows:
            if row["sk"]["S"].startswith("F#"):
                file_id = row["sk"]["S"][2:]
                chunks = await asyncio.to_thread(
                    self._query_all, _chunks_pk(tenant, store_id, file_id), "C#")
                await asyncio.to_thread(self._release, tenant, f"{store_id} {file_id}", chunks)
                deletes += [{"DeleteRequest": {"Key": {"pk": c["pk"], "sk": c["sk"]}}}
                            for c in chunks]
                deletes.append({"DeleteRequest": {"Key": _key(
                    RUNNING, f"{tenant} {store_id} {file_id}")}})
        await asyncio.to_thread(self._write_all, deletes)
        with contextlib.suppress(self.vectors.exceptions.NotFoundException):
            await asyncio.to_thread(self.vectors.delete_index, vectorBucketName=self.bucket,
                                    indexName=index_name(store_id))
        return True

    # -- files and batches ------------------------------------------------------------------

    async def add_files(self, tenant: str, rows: list[dict[str, Any]], limit: int) -> bool:
        store_id = rows[0]["store_id"]
        pk = _files_pk(tenant, store_id)
        old = {r["file_id"]: r for r in await self._rows(pk, "F#")
               if r["file_id"] in {row["file_id"] for row in rows}}
        new = sum(1 for r in rows if r["file_id"] not in old)
        if new:
            update: dict[str, Any] = {
                "Key": _key(_stores_pk(tenant), "S#" + store_id),
                "UpdateExpression": "ADD files :n",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": {":n": {"N": str(new)}}}
            if limit:
                update["ConditionExpression"] += " AND files <= :room"
                update["ExpressionAttributeValues"][":room"] = {"N": str(limit - new)}
            try:
                await self._call(self.db.update_item, **update)
            except self.db.exceptions.ConditionalCheckFailedException:
                return False
        for file_id, row in old.items():
            await self._drop_chunks(tenant, store_id, file_id, int(row.get("chunks") or 0))
        puts = []
        for r in rows:
            item = {k: _encode(k, r.get(k)) for k in (
                "store_id", "file_id", "filename", "created_at", "attributes", "chunking",
                "batch_id", "lease_until")}
            item.update(_key(pk, "F#" + r["file_id"]))
            item.update(status={"S": "in_progress"}, last_error={"S": "null"},
                        usage_bytes={"N": "0"}, chunks={"N": "0"})
            puts.append({"PutRequest": {"Item": item}})
            puts.append({"PutRequest": {"Item": {
                **_key(RUNNING, f"{tenant} {store_id} {r['file_id']}"), "tenant": {"S": tenant},
                "store_id": {"S": store_id}, "file_id": {"S": r["file_id"]}}}})
        await asyncio.to_thread(self._write_all, puts)
        return True

    async def file(self, tenant: str, store_id: str, file_id: str) -> dict[str, Any] | None:
        return await self._get(_files_pk(tenant, store_id), "F#" + file_id)

    async def files_page(
        self, tenant: str, store_id: str, *, status: str | None, batch_id: str | None,
        order: str, after: str | None, before: str | None, limit: int,
    ) -> tuple[list[dict[str, Any]], bool]:
        rows = [r for r in await self._rows(_files_pk(tenant, store_id), "F#")
                if (status is None or r["status"] == status)
                and (batch_id is None or r.get("batch_id") == batch_id)]
        return _page(rows, "file_id", order, after, before, limit)

    async def completed_files(self, tenant: str, store_id: str) -> dict[str, dict[str, Any]]:
        return {r["file_id"]: {"filename": r["filename"], "attributes": r.get("attributes")}
                for r in await self._rows(_files_pk(tenant, store_id), "F#")
                if r["status"] == "completed"}

    async def update_file(self, tenant: str, store_id: str, file_id: str,
                          changes: dict[str, Any], *, only_status: str | None = None) -> bool:
        return await self._update(_files_pk(tenant, store_id), "F#" + file_id, changes,
                                  only_status)

    async def remove_file(self, tenant: str, store_id: str, file_id: str) -> bool:
        try:
            result = await self._call(
                self.db.delete_item, Key=_key(_files_pk(tenant, store_id), "F#" + file_id),
                ConditionExpression="attribute_exists(pk)", ReturnValues="ALL_OLD")
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        await self._call(self.db.update_item, Key=_key(_stores_pk(tenant), "S#" + store_id),
                         UpdateExpression="ADD files :n",
                         ExpressionAttributeValues={":n": {"N": "-1"}})
        row = _decode(result.get("Attributes", {}))
        await self._drop_chunks(tenant, store_id, file_id, int(row.get("chunks") or 0))
        await self._call(self.db.delete_item, Key=_key(RUNNING, f"{tenant} {store_id} {file_id}"))
        return True

    async def _drop_chunks(self, tenant: str, store_id: str, file_id: str, count: int) -> None:
        """The file's chunk rows (those found: an ingestion cut short may have left some
        beyond ``count``), its refs on the tenant's cached embeddings (before the rows that
        name them go: a stop between the two leaves a chunk row, never an embedding no delete
        would reach) and its vectors (keys ``<file id>#<i>``)."""
        pk = _chunks_pk(tenant, store_id, file_id)
        rows = await asyncio.to_thread(self._query_all, pk, "C#")
        if rows:
            await asyncio.to_thread(self._release, tenant, f"{store_id} {file_id}", rows)
            await asyncio.to_thread(self._write_all, [
                {"DeleteRequest": {"Key": {"pk": r["pk"], "sk": r["sk"]}}} for r in rows])
        count = max(count, len(rows))
        if not count:
            return
        keys = [f"{file_id}#{i}" for i in range(count)]
        for i in range(0, len(keys), PUT_BATCH):
            try:
                await asyncio.to_thread(self.vectors.delete_vectors, vectorBucketName=self.bucket,
                                        indexName=index_name(store_id), keys=keys[i:i + PUT_BATCH])
            except self.vectors.exceptions.NotFoundException:
                return

    async def add_batch(self, tenant: str, store_id: str, batch_id: str, created: int) -> None:
        item = {**_key(_files_pk(tenant, store_id), "B#" + batch_id), "id": {"S": batch_id},
                "store_id": {"S": store_id}, "created_at": {"N": str(created)},
                "status": {"S": "in_progress"}}
        await self._call(self.db.put_item, Item=item)

    async def batch(self, tenant: str, store_id: str, batch_id: str
                    ) -> tuple[dict[str, Any], dict[str, int]] | None:
        row = await self._get(_files_pk(tenant, store_id), "B#" + batch_id)
        if row is None:
            return None
        counts: dict[str, int] = {}
        for f in await self._rows(_files_pk(tenant, store_id), "F#"):
            if f.get("batch_id") == batch_id:
                counts[f["status"]] = counts.get(f["status"], 0) + 1
        return row, counts

    async def cancel_batch(self, tenant: str, store_id: str, batch_id: str) -> None:
        await self._update(_files_pk(tenant, store_id), "B#" + batch_id,
                           {"status": "cancelled"}, None)
        for f in await self._rows(_files_pk(tenant, store_id), "F#"):
            if f.get("batch_id") == batch_id and f["status"] == "in_progress":
                await self.update_file(tenant, store_id, f["file_id"], {"status": "cancelled"},
                                       only_status="in_progress")

    async def stale_files(self, now: float) -> list[dict[str, Any]]:
        """Files in progress whose lease ran out, found from the running markers; markers of
        files no longer in progress go. The file rows are read 100 a call (BatchGetItem):
        every process looks every half lease, and a batch may hold thousands of files."""
        running = [(m["tenant"], m["store_id"], m["file_id"])
                   for m in await self._rows(RUNNING, "")]
        items = await asyncio.to_thread(self._get_many, [
            _key(_files_pk(t, s), "F#" + f) for t, s, f in running], consistent=True)
        rows = {(i["pk"]["S"], i["sk"]["S"]): _decode(i) for i in items}
        stale, ended = [], []
        for tenant, store_id, file_id in running:
            row = rows.get((_files_pk(tenant, store_id), "F#" + file_id))
            if row is None or row["status"] != "in_progress":
                ended.append({"DeleteRequest": {"Key": _key(
                    RUNNING, f"{tenant} {store_id} {file_id}")}})
            elif float(row.get("lease_until") or 0) < now:
                stale.append({**row, "tenant": tenant})
        if ended:
            await asyncio.to_thread(self._write_all, ended)
        return stale

    async def claim_file(self, tenant: str, store_id: str, file_id: str, now: float,
                         lease_until: float) -> bool:
        """The lease of an ``in_progress`` file whose lease ran out, moved to ``lease_until``
        (a conditional write)."""
        try:
            await self._call(
                self.db.update_item, Key=_key(_files_pk(tenant, store_id), "F#" + file_id),
                UpdateExpression="SET lease_until = :lease",
                ConditionExpression="#status = :running AND lease_until < :now",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":lease": _encode("lease_until", lease_until),
                                           ":running": {"S": "in_progress"},
                                           ":now": _encode("lease_until", now)})
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    # -- chunks -----------------------------------------------------------------------------

    async def cached_vectors(self, tenant: str, keys: list[str]) -> dict[str, list[float]]:
        items = await asyncio.to_thread(self._get_many,
                                        [_key(_emb_pk(tenant, k), "E") for k in keys])
        return {i["pk"]["S"].rpartition("#")[2]: _unpack(i["v"]["B"]) for i in items
                if "v" in i}

    def _hold(self, tenant: str, ref: str, chunks: list[Any]) -> None:
        """The file's ref on the tenant's cached embedding of each of its chunks' texts. A
        text so common that its row cannot take one more ref (DynamoDB's 400 KB item) is
        not cached for this file: the row may then go before the file does (a later miss),
        never after the last file that holds it."""
        from botocore.exceptions import ClientError

        def hold(c: Any) -> None:
            try:
                self.db.update_item(
                    TableName=self.table, Key=_key(_emb_pk(tenant, c.key), "E"),
                    UpdateExpression="SET v = :v ADD refs :r",
                    ExpressionAttributeValues={":v": {"B": _pack(c.vector)},
                                               ":r": {"SS": [ref]}})
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ValidationException":
                    raise

        _each(hold, list({c.key: c for c in chunks}.values()))

    def _release(self, tenant: str, ref: str, chunk_rows: list[dict[str, Any]]) -> None:
        """The file's refs taken away from the cached embeddings its chunk rows name; an
        embedding no file refers to any more is deleted."""
        failed = self.db.exceptions.ConditionalCheckFailedException

        def release(key: str) -> None:
            where = _key(_emb_pk(tenant, key), "E")
            try:
                left = self.db.update_item(
                    TableName=self.table, Key=where, UpdateExpression="DELETE refs :r",
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeValues={":r": {"SS": [ref]}}, ReturnValues="ALL_NEW")
            except failed:
                return
            if not left.get("Attributes", {}).get("refs", {}).get("SS"):
                with contextlib.suppress(failed):
                    self.db.delete_item(TableName=self.table, Key=where,
                                        ConditionExpression="attribute_not_exists(refs)")

        _each(release, list({r["k"]["S"] for r in chunk_rows if "k" in r}))

    def _get_many(self, keys: list[dict[str, Any]], *, consistent: bool = False
                  ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for i in range(0, len(keys), 100):
            pending: dict[str, Any] = {self.table: {"Keys": keys[i:i + 100],
                                                    "ConsistentRead": consistent}}
            while pending:
                result = self.db.batch_get_item(RequestItems=pending)
                found += result.get("Responses", {}).get(self.table, [])
                pending = result.get("UnprocessedKeys") or {}
        return found

    async def write_chunks(self, tenant: str, store_id: str, file_id: str,
                           chunks: list[Any], usage: int) -> bool:
        row = await self.file(tenant, store_id, file_id)
        if row is None or row["status"] != "in_progress":
            return False
        old = int(row.get("chunks") or 0)
        if old > len(chunks):
            await self._drop_chunks(tenant, store_id, file_id, old)
        pk = _chunks_pk(tenant, store_id, file_id)
        await asyncio.to_thread(self._write_all, [  # rows first: they name what is held
            {"PutRequest": {"Item": {**_key(pk, f"C#{c.index:06d}"), "text": {"S": c.text},
                                     "k": {"S": c.key}}}} for c in chunks])
        await asyncio.to_thread(self._hold, tenant, f"{store_id} {file_id}", chunks)
        if chunks:
            await self._ensure_index(store_id, len(chunks[0].vector))
            vectors = [{"key": f"{file_id}#{c.index}", "data": {"float32": c.vector},
                        "metadata": {"file_id": file_id}} for c in chunks]
            for i in range(0, len(vectors), PUT_BATCH):
                await asyncio.to_thread(self.vectors.put_vectors, vectorBucketName=self.bucket,
                                        indexName=index_name(store_id),
                                        vectors=vectors[i:i + PUT_BATCH])
        done = await self.update_file(
            tenant, store_id, file_id, {"status": "completed", "usage_bytes": usage,
                                        "last_error": None, "chunks": len(chunks)},
            only_status="in_progress")
        if not done:  # cancelled or removed meanwhile: nothing of it stays searchable
            await self._drop_chunks(tenant, store_id, file_id, len(chunks))
            return False
        await self._call(self.db.delete_item, Key=_key(RUNNING, f"{tenant} {store_id} {file_id}"))
        return True

    async def _ensure_index(self, store_id: str, dimension: int) -> None:
        with contextlib.suppress(self.vectors.exceptions.ConflictException):  # made before
            await asyncio.to_thread(
                self.vectors.create_index, vectorBucketName=self.bucket,
                indexName=index_name(store_id), dataType="float32", dimension=dimension,
                distanceMetric="cosine")

    async def file_text(self, tenant: str, store_id: str, file_id: str) -> list[str]:
        return [r["text"] for r in await self._rows(_chunks_pk(tenant, store_id, file_id), "C#")]

    async def search(self, tenant: str, store_id: str, queries: list[list[float]],
                     text: str, files: set[str], want_text: bool, limit: int
                     ) -> list[Candidate]:
        every = {r["file_id"] for r in await self._rows(_files_pk(tenant, store_id), "F#")
                 if r["status"] == "completed"}
        request: dict[str, Any] = {
            "vectorBucketName": self.bucket, "indexName": index_name(store_id),
            "topK": min(MAX_TOP_K, limit * 4 if want_text else limit),
            "returnMetadata": True, "returnDistance": True}
        if not every <= files:
            request["filter"] = {"file_id": {"$in": sorted(files)}}
        best: dict[str, float] = {}
        for vector in queries:
            try:
                answer = await asyncio.to_thread(self.vectors.query_vectors,
                                                 queryVector={"float32": vector}, **request)
            except self.vectors.exceptions.NotFoundException:
                return []  # no chunk was written yet: no index
            for hit in answer.get("vectors", []):
                similarity = 1.0 - float(hit.get("distance", 1.0))
                best[hit["key"]] = max(best.get(hit["key"], -1.0), similarity)
        if not best:
            return []
        keys = []
        for key in best:
            file_id, _, index = key.rpartition("#")
            keys.append(_key(_chunks_pk(tenant, store_id, file_id), f"C#{int(index):06d}"))
        texts = {}
        for item in await asyncio.to_thread(self._get_many, keys):
            file_id = item["pk"]["S"].rsplit("#", 1)[1]
            texts[f"{file_id}#{int(item['sk']['S'][2:])}"] = item["text"]["S"]
        words = {w.lower() for w in _WORD.findall(text)} if want_text else set()
        keyword = {key: _overlap(words, body) for key, body in texts.items()} if words else {}
        top = max(keyword.values(), default=0.0) or 1.0
        return [(key, key.rpartition("#")[0], body, best[key], keyword.get(key, 0.0) / top)
                for key, body in texts.items() if key.rpartition("#")[0] in files]

    async def aclose(self) -> None:
        return None


def _overlap(words: set[str], text: str) -> float:
    """How many of the query's words the chunk holds, each counted once (a keyword score)."""
    present = {w.lower() for w in _WORD.findall(text)}
    return float(len(words & present))


def _page(rows: list[dict[str, Any]], id_field: str, order: str, after: str | None,
          before: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """A page by (created_at, id) in ``order``, after / before the row an id names."""
    rows.sort(key=lambda r: (r["created_at"], r[id_field]), reverse=order == "desc")
    ids = [r[id_field] for r in rows]
    if after and after in ids:
        rows = rows[ids.index(after) + 1:]
    if before and before in [r[id_field] for r in rows]:
        rows = rows[:[r[id_field] for r in rows].index(before)]
    return rows[:limit], len(rows) > limit


def _each(call: Any, items: list[Any]) -> None:
    """``call`` on every item, :data:`REF_WRITES` at once (boto3's clients are thread-safe;
    this runs in a thread of its own already, off the loop); the first error is raised once
    all have ended."""
    if len(items) <= 1:
        for item in items:
            call(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(REF_WRITES, len(items)), "vector-refs") as pool:
        for _ in pool.map(call, items):
            pass

"""The Files API through openai-python, unmodified, on both storage engines (one suite):
objects validated against the SDK's FileObject, paging, content, deletes, expiry, the bounds,
and tenant isolation on every route."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types import FileDeleted, FileObject

from tests.helpers.file_storage import ENGINES, gateway_on, move_clock
from tests.helpers.gateway_server import GatewayServer

KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"
MAX_FILE = 4096
MAX_TENANT = 3 * MAX_FILE


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    with gateway_on(request.param, tmp_path_factory.mktemp(request.param),
                    api_keys=(KEY_A, KEY_B), max_file_bytes=MAX_FILE,
                    max_tenant_file_bytes=MAX_TENANT) as server:
        yield server


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as client:
        yield client


def _clear(client: OpenAI) -> None:
    for f in client.files.list():
        client.files.delete(f.id)


def test_upload_retrieve_content_delete(alice: OpenAI) -> None:
    created = alice.files.create(file=("notes.md", b"# Notes\nhello"), purpose="assistants")
    raw = created.model_dump()
    assert FileObject.model_validate(raw) == created
    assert set(raw) == set(FileObject.model_fields)
    assert created.id.startswith("file-") and len(created.id) > 40
    assert (created.bytes, created.filename, created.purpose) == (13, "notes.md", "assistants")
    assert created.expires_at is None and abs(created.created_at - time.time()) < 60
    assert alice.files.retrieve(created.id) == created
    assert alice.files.content(created.id).read() == b"# Notes\nhello"
    deleted = alice.files.delete(created.id)
    assert deleted == FileDeleted(id=created.id, object="file", deleted=True)
    with pytest.raises(openai.NotFoundError) as caught:
        alice.files.retrieve(created.id)
    assert caught.value.body == {"message": f"No such File object: {created.id}",
                                 "type": "invalid_request_error", "param": "id", "code": None}
    with pytest.raises(openai.NotFoundError):
        alice.files.delete(created.id)


def test_list_paging_order_and_purpose(alice: OpenAI) -> None:
    _clear(alice)
    made = []
    for i in range(5):
        made.append(alice.files.create(file=(f"f{i}.txt", b"x" * (i + 1)),
                                       purpose="user_data" if i % 2 else "assistants"))
        time.sleep(0.01)
    newest_first = [f.id for f in alice.files.list()]
    assert set(newest_first) == {f.id for f in made}
    by_time = sorted(made, key=lambda f: (f.created_at, f.id))
    assert [f.id for f in alice.files.list(order="asc")] == [f.id for f in by_time]
    first = alice.files.list(limit=2, order="asc")
    assert [f.id for f in first.data] == [f.id for f in by_time[:2]] and first.has_more
    # auto-paging follows ``after`` through every page
    assert [f.id for f in alice.files.list(limit=2, order="asc")] == [f.id for f in by_time]
    assert {f.id for f in alice.files.list(purpose="user_data")} == {made[1].id, made[3].id}
    # a cursor the filter leaves out still names its place, on either layout
    cursor = next(f for f in by_time if f.purpose == "assistants")
    after = by_time[by_time.index(cursor) + 1:]
    page = alice.files.list(purpose="user_data", order="asc", after=cursor.id, limit=10)
    assert [f.id for f in page.data] == [f.id for f in after if f.purpose == "user_data"]
    with pytest.raises(openai.BadRequestError):
        alice.files.list(limit=0)
    _clear(alice)


def test_expires_after(alice: OpenAI) -> None:
    created = alice.files.create(file=("e.txt", b"e"), purpose="batch",
                                 expires_after={"anchor": "created_at", "seconds": 3600})
    assert created.expires_at == created.created_at + 3600
    with pytest.raises(openai.BadRequestError) as caught:
        alice.files.create(file=("e.txt", b"e"), purpose="batch",
                           expires_after={"anchor": "created_at", "seconds": 10})
    assert caught.value.body["param"] == "expires_after.seconds"
    alice.files.delete(created.id)


@pytest.mark.parametrize(("expires_after", "param", "code"), [
    ({"anchor": "created_at"}, "expires_after.seconds", "missing_required_parameter"),
    ({"seconds": 3600}, "expires_after.anchor", "missing_required_parameter"),
    ({"anchor": "created_at", "seconds": "soon"}, "expires_after.seconds", "invalid_type"),
])
def test_half_an_expires_after_is_openais_400(alice: OpenAI, expires_after: dict[str, Any],
                                              param: str, code: str) -> None:
    """One half of ``expires_after`` names the other as missing; a Python ``None`` never
    reaches the message ("got None instead", "Invalid value: 'None'")."""
    with pytest.raises(openai.BadRequestError) as caught:
        alice.files.create(file=("e.txt", b"e"), purpose="batch",
                           expires_after=expires_after)  # type: ignore[arg-type]
    error = caught.value.body
    assert isinstance(error, dict) and (error["param"], error["code"]) == (param, code)
    assert "None" not in error["message"]


def test_bad_uploads_are_openai_errors(alice: OpenAI, gateway: GatewayServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        alice.files.create(file=("a.txt", b"a"), purpose="nonsense")  # type: ignore[arg-type]
    assert caught.value.body["param"] == "purpose"
    headers = {"authorization": f"Bearer {KEY_A}"}
    answer = httpx.post(gateway.base_url + "/files", headers=headers,
                        files={"purpose": (None, "assistants")})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "Missing required parameter: 'file'."
    answer = httpx.post(gateway.base_url + "/files", headers=headers, json={"purpose": "x"})
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"


def test_file_size_and_tenant_bounds(alice: OpenAI, bob: OpenAI) -> None:
    _clear(alice)
    with pytest.raises(openai.APIStatusError) as caught:
        alice.files.create(file=("big.bin", b"b" * (MAX_FILE + 1)), purpose="assistants")
    assert caught.value.status_code == 413
    assert caught.value.body["code"] == "file_too_large"
    kept = [alice.files.create(file=(f"{i}.bin", b"b" * MAX_FILE), purpose="assistants")
            for i in range(3)]
    with pytest.raises(openai.BadRequestError) as caught:
        alice.files.create(file=("one-more.bin", b"b"), purpose="assistants")
    assert caught.value.body["code"] == "storage_limit_exceeded"
    assert "GATEWAY_MAX_TENANT_FILE_BYTES" in caught.value.body["message"]
    # another tenant has its own total; a delete gives bytes back
    bob_file = bob.files.create(file=("b.bin", b"b"), purpose="assistants")
    alice.files.delete(kept[0].id)
    alice.files.create(file=("fits.bin", b"b" * MAX_FILE), purpose="assistants")
    bob.files.delete(bob_file.id)
    _clear(alice)


def test_tenants_are_isolated_on_every_route(alice: OpenAI, bob: OpenAI) -> None:
    secret = alice.files.create(file=("secret.txt", b"alice only"), purpose="assistants")
    for call in (lambda: bob.files.retrieve(secret.id),
                 lambda: bob.files.content(secret.id),
                 lambda: bob.files.delete(secret.id)):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.body["message"] == f"No such File object: {secret.id}"
    assert secret.id not in {f.id for f in bob.files.list()}
    assert alice.files.content(secret.id).read() == b"alice only"
    alice.files.delete(secret.id)


def test_unauthenticated_is_401(gateway: GatewayServer) -> None:
    assert httpx.get(gateway.base_url + "/files").status_code == 401


def test_local_bytes_live_beside_the_database(gateway: GatewayServer, alice: OpenAI) -> None:
    if not gateway.settings.store.startswith("sqlite:"):
        pytest.skip("the local layout")
    db = Path(gateway.settings.store.removeprefix("sqlite:"))
    created = alice.files.create(file=("d.txt", b"on disk"), purpose="assistants")
    stored = list(Path(str(db) + ".files").rglob(created.id))
    assert len(stored) == 1 and stored[0].read_bytes() == b"on disk"
    alice.files.delete(created.id)
    assert not list(Path(str(db) + ".files").rglob(created.id))


def _blob_keys(gateway: GatewayServer) -> list[str]:
    """Every blob the engine holds (file bytes and Upload parts), read from the engine."""
    import asyncio

    blobs = gateway.app.state.gateway.files.blobs
    if gateway.settings.store.startswith("sqlite:"):
        root = Path(gateway.settings.store.removeprefix("sqlite:") + ".files")
        return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    listed = asyncio.run(asyncio.to_thread(blobs.client.list_objects_v2, Bucket=blobs.bucket))
    return [o["Key"] for o in listed.get("Contents", [])]


def test_an_expired_file_is_removed_with_its_bytes(
        alice: OpenAI, gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its expires_at a File is gone with its bytes and gives its bytes back to the
    tenant's total: a full tenant whose files expired may upload again, without touching
    them first (the expired ones are reclaimed before a refusal), and a touched one is
    removed there."""
    _clear(alice)
    expiring = [alice.files.create(file=(f"x{i}.bin", b"x" * MAX_FILE), purpose="batch",
                                   expires_after={"anchor": "created_at", "seconds": 3600})
                for i in range(3)]
    with pytest.raises(openai.BadRequestError) as caught:
        alice.files.create(file=("full.bin", b"b"), purpose="assistants")
    assert caught.value.body["code"] == "storage_limit_exceeded"
    move_clock(monkeypatch, gateway, 3601)  # past the files' hour
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(expiring[0].id)  # touched: removed here
    assert not any(expiring[0].id in key for key in _blob_keys(gateway))
    fits = [alice.files.create(file=(f"n{i}.bin", b"n" * MAX_FILE), purpose="assistants")
            for i in range(3)]  # the other two were reclaimed before a refusal
    assert not any(f.id in key for f in expiring for key in _blob_keys(gateway))
    assert {f.id for f in alice.files.list()} == {f.id for f in fits}
    _clear(alice)


def test_filenames_are_bounded(alice: OpenAI) -> None:
    """A file name past GATEWAY_MAX_NAME_CHARS (256) is OpenAI's 400 naming the param."""
    made = alice.files.create(file=("n" * 256, b"ok"), purpose="assistants")
    with pytest.raises(openai.BadRequestError) as caught:
        alice.files.create(file=("n" * 257, b"no"), purpose="assistants")
    assert caught.value.body["param"] == "filename"
    assert caught.value.body["code"] == "string_above_max_length"
    assert "GATEWAY_MAX_NAME_CHARS" in caught.value.body["message"]
    alice.files.delete(made.id)


@pytest.mark.slow
def test_aws_rows_holding_bytes_carry_no_ttl(alice: OpenAI, gateway: GatewayServer) -> None:
    """DynamoDB's TTL (attribute expires_at) would delete a row and leave its bytes counted in
    the tenant total and in S3: an expiring File's row keeps its expiry elsewhere."""
    if gateway.settings.store.startswith("sqlite:"):
        pytest.skip("the AWS layout")
    records = gateway.app.state.gateway.files.records
    made = alice.files.create(file=("t.txt", b"t"), purpose="batch",
                              expires_after={"anchor": "created_at", "seconds": 3600})
    listed = records.client.scan(TableName=records.table)["Items"]
    item = next(i for i in listed if i.get("id", {}).get("S") == made.id)
    assert "expires_at" not in item and int(item["file_expires_at"]["N"]) == made.expires_at
    assert alice.files.retrieve(made.id).expires_at == made.expires_at
    alice.files.delete(made.id)

"""The Uploads API through openai-python, unmodified, on both storage engines (one suite):
``upload_file_chunked`` and create / parts / complete / cancel, objects validated against the
SDK's Upload and UploadPart, the size, md5 and part bounds, expiry, tenant isolation."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types import FileObject, Upload
from openai.types.uploads import UploadPart

from tests.helpers.file_storage import ENGINES, gateway_on, move_clock
from tests.helpers.gateway_server import GatewayServer

KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"
MAX_FILE = 64 * 1024
MAX_PART = 16 * 1024


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    with gateway_on(request.param, tmp_path_factory.mktemp(request.param),
                    api_keys=(KEY_A, KEY_B), max_file_bytes=MAX_FILE,
                    max_upload_part_bytes=MAX_PART) as server:
        yield server


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as client:
        yield client


def _exact(model: type, obj: object) -> dict[str, object]:
    raw = obj.model_dump()  # type: ignore[attr-defined]
    assert model.model_validate(raw) == obj  # type: ignore[attr-defined]
    assert set(raw) == set(model.model_fields)  # type: ignore[attr-defined]
    return raw


@pytest.mark.slow
def test_upload_file_chunked_makes_a_file(alice: OpenAI, tmp_path: Path) -> None:
    data = bytes(range(256)) * 150  # 38,400 bytes: parts of 10,000
    path = tmp_path / "data.jsonl"
    path.write_bytes(data)
    done = alice.uploads.upload_file_chunked(
        file=path, mime_type="application/jsonl", purpose="batch", part_size=10_000,
        md5=hashlib.md5(data).hexdigest())
    raw = _exact(Upload, done)
    assert done.id.startswith("upload_") and done.status == "completed"
    assert (done.bytes, done.filename, done.purpose) == (len(data), "data.jsonl", "batch")
    assert done.expires_at == done.created_at + 3600
    assert done.file is not None and raw["file"] is not None
    _exact(FileObject, done.file)
    assert done.file.bytes == len(data) and done.file.filename == "data.jsonl"
    assert alice.files.retrieve(done.file.id) == done.file
    assert alice.files.content(done.file.id).read() == data
    alice.files.delete(done.file.id)


def test_create_parts_complete_in_the_order_named(alice: OpenAI) -> None:
    upload = alice.uploads.create(bytes=9, filename="abc.txt", mime_type="text/plain",
                                  purpose="assistants")
    _exact(Upload, upload)
    assert upload.status == "pending" and upload.file is None
    parts = [alice.uploads.parts.create(upload.id, data=piece) for piece in (b"aaa", b"bbb",
                                                                              b"ccc")]
    for part in parts:
        _exact(UploadPart, part)
        assert part.id.startswith("part_") and part.upload_id == upload.id
    done = alice.uploads.complete(upload.id, part_ids=[parts[2].id, parts[0].id, parts[1].id])
    assert done.file is not None
    assert alice.files.content(done.file.id).read() == b"cccaaabbb"
    # a completed Upload takes no more parts, and is not completed or cancelled again
    for call in (lambda: alice.uploads.parts.create(upload.id, data=b"x"),
                 lambda: alice.uploads.complete(upload.id, part_ids=[parts[0].id]),
                 lambda: alice.uploads.cancel(upload.id)):
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert caught.value.body["code"] == "upload_completed"
    alice.files.delete(done.file.id)


def test_complete_checks_bytes_md5_and_part_ids(alice: OpenAI) -> None:
    upload = alice.uploads.create(bytes=6, filename="x.txt", mime_type="text/plain",
                                  purpose="assistants")
    one = alice.uploads.parts.create(upload.id, data=b"123")
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.complete(upload.id, part_ids=[one.id])
    assert caught.value.body["code"] == "bytes_mismatch"
    two = alice.uploads.parts.create(upload.id, data=b"456")
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.parts.create(upload.id, data=b"7")  # past the declared 6 bytes
    assert caught.value.body["code"] == "upload_too_large"
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.complete(upload.id, part_ids=[one.id, two.id], md5="0" * 32)
    assert caught.value.body["param"] == "md5"
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.complete(upload.id, part_ids=[one.id, "part_" + "0" * 48])
    assert caught.value.body["param"] == "part_ids"
    # the failed completes left it pending: it still completes
    done = alice.uploads.complete(upload.id, part_ids=[one.id, two.id],
                                  md5=hashlib.md5(b"123456").hexdigest())
    assert done.status == "completed" and done.file is not None
    alice.files.delete(done.file.id)


def test_cancel(alice: OpenAI) -> None:
    upload = alice.uploads.create(bytes=3, filename="c.txt", mime_type="text/plain",
                                  purpose="assistants")
    part = alice.uploads.parts.create(upload.id, data=b"abc")
    cancelled = alice.uploads.cancel(upload.id)
    _exact(Upload, cancelled)
    assert cancelled.status == "cancelled" and cancelled.file is None
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.complete(upload.id, part_ids=[part.id])
    assert caught.value.body["code"] == "upload_cancelled"


def test_bounds_and_bad_requests(alice: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.create(bytes=MAX_FILE + 1, filename="big.bin", mime_type="text/plain",
                             purpose="assistants")
    assert caught.value.body["param"] == "bytes"
    assert "GATEWAY_MAX_FILE_BYTES" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.create(bytes=1, filename="a", mime_type="text/plain",
                             purpose="nonsense")  # type: ignore[arg-type]
    assert caught.value.body["param"] == "purpose"
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.create(bytes=1, filename="a", mime_type="text/plain",
                             purpose="assistants",
                             expires_after={"anchor": "created_at", "seconds": 5})
    assert caught.value.body["param"] == "expires_after.seconds"
    upload = alice.uploads.create(bytes=MAX_FILE, filename="p.bin", mime_type="text/plain",
                                  purpose="assistants")
    with pytest.raises(openai.APIStatusError) as caught:
        alice.uploads.parts.create(upload.id, data=b"p" * (MAX_PART + 1))
    assert caught.value.status_code == 413 and caught.value.body["code"] == "part_too_large"
    assert "GATEWAY_MAX_UPLOAD_PART_BYTES" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        alice.post(f"/uploads/{upload.id}/parts", cast_to=UploadPart, body={"x": 1})
    with pytest.raises(openai.NotFoundError) as caught:
        alice.uploads.cancel("upload_" + "0" * 48)
    assert caught.value.body["message"] == f"No such Upload object: upload_{'0' * 48}"
    alice.uploads.cancel(upload.id)


@pytest.mark.parametrize(("expires_after", "param", "code"), [
    ({"anchor": "created_at"}, "expires_after.seconds", "missing_required_parameter"),
    ({"seconds": 3600}, "expires_after.anchor", "missing_required_parameter"),
    ({"anchor": "created_at", "seconds": "3600"}, "expires_after.seconds", "invalid_type"),
    ({"anchor": "created_at", "seconds": 3600.5}, "expires_after.seconds", "invalid_type"),
    ({"anchor": 5, "seconds": 3600}, "expires_after.anchor", "invalid_value"),
])
def test_a_bad_expires_after_is_openais_400(alice: OpenAI, expires_after: dict[str, Any],
                                            param: str, code: str) -> None:
    """JSON, so ``seconds`` is an integer (not text, as a File's form field is); a half
    names the other as missing; a Python ``None`` never reaches the message."""
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.create(bytes=1, filename="a", mime_type="text/plain", purpose="batch",
                             expires_after=expires_after)  # type: ignore[arg-type]
    error = caught.value.body
    assert isinstance(error, dict) and (error["param"], error["code"]) == (param, code)
    assert "None" not in error["message"] and "'5'" not in error["message"]


def test_expires_after_on_the_file(alice: OpenAI) -> None:
    upload = alice.uploads.create(bytes=2, filename="e.txt", mime_type="text/plain",
                                  purpose="batch",
                                  expires_after={"anchor": "created_at", "seconds": 7200})
    part = alice.uploads.parts.create(upload.id, data=b"ee")
    done = alice.uploads.complete(upload.id, part_ids=[part.id])
    assert done.file is not None
    assert done.file.expires_at == done.file.created_at + 7200
    alice.files.delete(done.file.id)


def test_an_expired_upload_takes_nothing(alice: OpenAI, gateway: GatewayServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    upload = alice.uploads.create(bytes=1, filename="late.txt", mime_type="text/plain",
                                  purpose="assistants")
    part = alice.uploads.parts.create(upload.id, data=b"l")
    move_clock(monkeypatch, gateway, 3601)  # past its hour
    for call in (lambda: alice.uploads.parts.create(upload.id, data=b"l"),
                 lambda: alice.uploads.complete(upload.id, part_ids=[part.id]),
                 lambda: alice.uploads.cancel(upload.id)):
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert caught.value.body["code"] == "upload_expired"


def test_tenants_are_isolated(alice: OpenAI, bob: OpenAI, gateway: GatewayServer) -> None:
    upload = alice.uploads.create(bytes=2, filename="s.txt", mime_type="text/plain",
                                  purpose="assistants")
    part = alice.uploads.parts.create(upload.id, data=b"s")
    for call in (lambda: bob.uploads.parts.create(upload.id, data=b"t"),
                 lambda: bob.uploads.complete(upload.id, part_ids=[part.id]),
                 lambda: bob.uploads.cancel(upload.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    # bob's own upload cannot take alice's part
    own = bob.uploads.create(bytes=1, filename="b.txt", mime_type="text/plain",
                             purpose="assistants")
    with pytest.raises(openai.BadRequestError) as caught:
        bob.uploads.complete(own.id, part_ids=[part.id])
    assert caught.value.body["param"] == "part_ids"
    alice.uploads.parts.create(upload.id, data=b"s")
    done = alice.uploads.complete(upload.id, part_ids=[part.id, *[
        p for p in _part_ids(gateway, upload.id) if p != part.id]])
    assert done.file is not None and alice.files.content(done.file.id).read() == b"ss"
    assert httpx.post(gateway.base_url + "/uploads", json={}).status_code == 401
    alice.files.delete(done.file.id)


def _part_ids(gateway: GatewayServer, upload_id: str) -> list[str]:
    """The parts stored for an Upload (read from the engine: the API lists none)."""
    import asyncio

    blobs = gateway.app.state.gateway.uploads.blobs
    if gateway.settings.store.startswith("sqlite:"):
        folder = Path(gateway.settings.store.removeprefix("sqlite:") + ".files")
        return [p.name for p in folder.glob(f"uploads/*/{upload_id}/*")]
    listed = asyncio.run(asyncio.to_thread(blobs.client.list_objects_v2, Bucket=blobs.bucket,
                                           Prefix="uploads/"))
    return [o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", [])
            if f"/{upload_id}/" in o["Key"]]


def test_parts_are_removed_after_complete(alice: OpenAI, gateway: GatewayServer) -> None:
    upload = alice.uploads.create(bytes=4, filename="r.txt", mime_type="text/plain",
                                  purpose="assistants")
    parts = [alice.uploads.parts.create(upload.id, data=b"rr") for _ in range(2)]
    assert set(_part_ids(gateway, upload.id)) == {p.id for p in parts}
    done = alice.uploads.complete(upload.id, part_ids=[p.id for p in parts])
    assert _part_ids(gateway, upload.id) == []
    assert done.file is not None
    alice.files.delete(done.file.id)


@pytest.fixture(scope="module")
def large_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with gateway_on("aws", tmp_path_factory.mktemp("large"), max_file_bytes=32 << 20,
                    max_upload_part_bytes=8 << 20) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("sizes, s3_parts", [
    ((6 << 20, 6 << 20, 1 << 20), 3),  # each large part copied inside S3, the tail sent
    ((1 << 20, 6 << 20, 2 << 20), 2),  # a small part first: read and sent with the next
])
def test_s3_assembles_a_large_upload_with_a_multipart_upload(
        large_s3: GatewayServer, sizes: tuple[int, ...], s3_parts: int) -> None:
    """On S3 the parts become the File through one multipart upload (UploadPartCopy for
    parts of 5 MiB or more), not by reading every part into memory: the object's ETag is a
    multipart one with the number of parts S3 was given."""
    data = b"".join(bytes([i + 65]) * size for i, size in enumerate(sizes))
    with OpenAI(base_url=large_s3.base_url, api_key="sk-x", max_retries=0) as client:
        upload = client.uploads.create(bytes=len(data), filename="big.bin",
                                       mime_type="application/octet-stream",
                                       purpose="assistants")
        parts, offset = [], 0
        for size in sizes:
            parts.append(client.uploads.parts.create(upload.id,
                                                     data=data[offset:offset + size]).id)
            offset += size
        done = client.uploads.complete(upload.id, part_ids=parts,
                                       md5=hashlib.md5(data).hexdigest())
        assert done.status == "completed" and done.file is not None
        assert done.file.bytes == len(data)
        assert client.files.content(done.file.id).read() == data
        blobs = large_s3.app.state.gateway.uploads.blobs
        listed = blobs.client.list_objects_v2(Bucket=blobs.bucket)
        key = next(o["Key"] for o in listed.get("Contents", [])
                   if o["Key"].endswith("/" + done.file.id))
        etag = blobs.client.head_object(Bucket=blobs.bucket, Key=key)["ETag"].strip('"')
        assert etag.endswith(f"-{s3_parts}"), etag
        assert not any(o["Key"].startswith("uploads/") for o in blobs.client.list_objects_v2(
            Bucket=blobs.bucket).get("Contents", []))
        client.files.delete(done.file.id)


QUOTA = 4096


@pytest.fixture(scope="module")
def quota(request: pytest.FixtureRequest, gateway: GatewayServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    """A gateway on the same engine as ``gateway`` whose tenants may keep QUOTA bytes."""
    engine = "local" if gateway.settings.store.startswith("sqlite:") else "aws"
    with gateway_on(engine, tmp_path_factory.mktemp("quota"), api_keys=(KEY_A,),
                    max_file_bytes=MAX_FILE, max_upload_part_bytes=MAX_PART,
                    max_tenant_file_bytes=QUOTA) as server:
        yield server


@pytest.mark.slow
def test_parts_count_toward_the_tenant_total(quota: GatewayServer) -> None:
    """Parts are bytes the tenant keeps: one past GATEWAY_MAX_TENANT_FILE_BYTES is refused
    (nothing kept); cancelling gives them back; completing hands them to the File (which
    needs no room of its own), and deleting the File gives them back."""
    half = QUOTA // 2
    with OpenAI(base_url=quota.base_url, api_key=KEY_A, max_retries=0) as client:
        uploads = [client.uploads.create(bytes=half, filename=f"q{i}.bin",
                                         mime_type="text/plain", purpose="assistants")
                   for i in range(3)]
        parts = [client.uploads.parts.create(u.id, data=b"q" * half) for u in uploads[:2]]
        with pytest.raises(openai.BadRequestError) as caught:
            client.uploads.parts.create(uploads[2].id, data=b"q" * half)
        assert caught.value.body["code"] == "storage_limit_exceeded"
        assert caught.value.body["param"] == "data"
        assert caught.value.body["type"] == "invalid_request_error"
        assert _part_ids(quota, uploads[2].id) == []
        with pytest.raises(openai.BadRequestError):
            client.files.create(file=("f.bin", b"f"), purpose="assistants")
        client.uploads.cancel(uploads[0].id)
        assert _part_ids(quota, uploads[0].id) == []
        third = client.uploads.parts.create(uploads[2].id, data=b"q" * half)
        done = client.uploads.complete(uploads[1].id, part_ids=[parts[1].id])
        assert done.file is not None and done.file.bytes == half
        with pytest.raises(openai.BadRequestError) as caught:
            client.files.create(file=("f.bin", b"f"), purpose="assistants")
        assert caught.value.body["code"] == "storage_limit_exceeded"
        client.files.delete(done.file.id)
        client.uploads.cancel(uploads[2].id)
        assert third.id not in _part_ids(quota, uploads[2].id)
        kept = client.files.create(file=("all.bin", b"a" * QUOTA), purpose="assistants")
        client.files.delete(kept.id)


def test_an_expired_upload_gives_its_bytes_back(quota: GatewayServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An Upload past its hour is ended (status expired: OpenAI's terminal status, so cancel
    still answers upload_expired) with its parts removed and their bytes given back: when
    touched, and before the tenant is refused for its total."""
    with OpenAI(base_url=quota.base_url, api_key=KEY_A, max_retries=0) as client:
        touched, left = (client.uploads.create(bytes=QUOTA // 2, filename=f"{n}.bin",
                                               mime_type="text/plain", purpose="assistants")
                         for n in ("touched", "left"))
        for upload in (touched, left):
            client.uploads.parts.create(upload.id, data=b"e" * (QUOTA // 2))
        move_clock(monkeypatch, quota, 3601)  # past its hour
        with pytest.raises(openai.BadRequestError) as caught:
            client.uploads.cancel(touched.id)
        assert caught.value.body["code"] == "upload_expired"
        assert _part_ids(quota, touched.id) == []
        assert _part_ids(quota, left.id) != []
        kept = client.files.create(file=("all.bin", b"a" * QUOTA), purpose="assistants")
        assert _part_ids(quota, left.id) == []
        client.files.delete(kept.id)


@pytest.mark.slow
def test_the_running_gateway_sweeps_expired_uploads_and_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GATEWAY_FILE_SWEEP_SECONDS: expired Uploads' parts and expired Files' bytes leave the
    local store with nobody touching them."""
    with gateway_on("local", tmp_path, file_sweep_seconds=0.1) as server, \
            OpenAI(base_url=server.base_url, api_key="sk-x", max_retries=0) as client:
        upload = client.uploads.create(bytes=4, filename="s.bin", mime_type="text/plain",
                                       purpose="assistants")
        client.uploads.parts.create(upload.id, data=b"ss")
        file = client.files.create(file=("e.txt", b"e"), purpose="batch",
                                   expires_after={"anchor": "created_at", "seconds": 3600})
        root = Path(server.settings.store.removeprefix("sqlite:") + ".files")
        assert list(root.rglob(file.id)) and _part_ids(server, upload.id)
        move_clock(monkeypatch, server, 3601)  # past its hour
        deadline = time.monotonic() + 30
        while (list(root.rglob(file.id)) or _part_ids(server, upload.id)) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert not list(root.rglob(file.id)) and _part_ids(server, upload.id) == []


@pytest.mark.parametrize("bad", ["../x", "/abs", "a//b", ".", "..", "x/../../y", "part_\x00"])
def test_part_ids_that_name_no_part_are_400(alice: OpenAI, gateway: GatewayServer,
                                            bad: str) -> None:
    """part_ids that are no part id (paths, empty segments) are OpenAI's 400 naming
    part_ids, never a 500; the Upload stays pending and completes."""
    upload = alice.uploads.create(bytes=2, filename="p.txt", mime_type="text/plain",
                                  purpose="assistants")
    part = alice.uploads.parts.create(upload.id, data=b"pp")
    with pytest.raises(openai.BadRequestError) as caught:
        alice.uploads.complete(upload.id, part_ids=[bad])
    assert caught.value.body["param"] == "part_ids"
    assert caught.value.body["type"] == "invalid_request_error"
    headers = {"authorization": f"Bearer {KEY_A}"}
    for path in (f"/uploads/{bad}/cancel", f"/uploads/{bad}/parts"):
        answer = httpx.post(gateway.base_url + path.replace("\x00", "%00"), headers=headers,
                            files={"data": ("d", b"d")})
        assert answer.status_code in (400, 404), answer.text
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
    done = alice.uploads.complete(upload.id, part_ids=[part.id])
    assert done.file is not None
    alice.files.delete(done.file.id)


def test_upload_strings_are_bounded(alice: OpenAI) -> None:
    """filename and mime_type past GATEWAY_MAX_NAME_CHARS (256): 400 naming the param."""
    for param in ("filename", "mime_type"):
        fields = {"filename": "f.txt", "mime_type": "text/plain", param: "x" * 257}
        with pytest.raises(openai.BadRequestError) as caught:
            alice.uploads.create(bytes=1, purpose="assistants", **fields)  # type: ignore[arg-type]
        assert caught.value.body["param"] == param
        assert caught.value.body["code"] == "string_above_max_length"
    ok = alice.uploads.create(bytes=1, filename="f" * 256, mime_type="text/plain",
                              purpose="assistants")
    alice.uploads.cancel(ok.id)


def _stop_before_settling(monkeypatch: pytest.MonkeyPatch, server: GatewayServer) -> None:
    """The next complete makes its File, then its process 'stops' before the Upload is
    settled (its records' settle to completed raises, once)."""
    records = server.gateway.uploads.records
    settle = records.settle
    stopped: list[str] = []

    async def settle_once(upload_id: str, tenant: str, status: str,
                          file_id: str | None) -> None:
        if status == "completed" and not stopped:
            stopped.append(upload_id)
            raise RuntimeError("the process stopped here")
        await settle(upload_id, tenant, status, file_id)

    monkeypatch.setattr(records, "settle", settle_once)


def test_a_complete_that_stopped_after_its_file_is_found_out(
        quota: GatewayServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A complete whose process stopped after it made the File, before it settled the
    Upload: trying the complete again answers that File (not a second one of the same
    parts), and the Upload's expiry settles it as completed instead of giving the parts'
    bytes back again (the File holds them: the tenant's total must still count them)."""
    half = QUOTA // 2
    with OpenAI(base_url=quota.base_url, api_key=KEY_A, max_retries=0) as client:
        made = []
        for name in ("again", "expired"):
            upload = client.uploads.create(bytes=half, filename=f"{name}.bin",
                                           mime_type="text/plain", purpose="assistants")
            part = client.uploads.parts.create(upload.id, data=b"s" * half)
            _stop_before_settling(monkeypatch, quota)
            # a client of its own: the server drops the connection the error went out on
            with OpenAI(base_url=quota.base_url, api_key=KEY_A, max_retries=0) as once, \
                    pytest.raises((openai.InternalServerError, openai.APIConnectionError)):
                once.uploads.complete(upload.id, part_ids=[part.id])
            monkeypatch.undo()
            made.append((upload, part))
        (again, part), (expired, _) = made
        done = client.uploads.complete(again.id, part_ids=[part.id])
        assert done.status == "completed" and done.file is not None
        assert [f.id for f in client.files.list() if f.filename == "again.bin"] == \
            [done.file.id]
        move_clock(monkeypatch, quota, 3601)  # past the Upload's hour and its claim
        with pytest.raises(openai.BadRequestError) as caught:
            client.uploads.cancel(expired.id)
        assert caught.value.body["code"] == "upload_completed"
        assert _part_ids(quota, expired.id) == []
        # both Files hold their bytes: the tenant is full
        with pytest.raises(openai.BadRequestError) as caught:
            client.files.create(file=("over.bin", b"o"), purpose="assistants")
        assert caught.value.body["code"] == "storage_limit_exceeded"
        for f in client.files.list():
            client.files.delete(f.id)


def test_unbounded_file_bytes_still_bounds_bytes_by_what_a_store_keeps(tmp_path: Path) -> None:
    """GATEWAY_MAX_FILE_BYTES=0 turns the bound off, not the store's 64-bit column: an
    Upload's ``bytes`` past 2**62 is OpenAI's 400 naming it, never SQLite's OverflowError."""
    with gateway_on("local", tmp_path, max_file_bytes=0) as server, \
            OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        for size in (2**63, 2**64 - 1):
            with pytest.raises(openai.BadRequestError) as caught:
                client.uploads.create(bytes=size, filename="a.bin", mime_type="text/plain",
                                      purpose="batch")
            error = caught.value.body
            assert isinstance(error, dict)
            assert (error["param"], error["code"]) == ("bytes", "integer_out_of_range")
        assert client.uploads.create(bytes=2**40, filename="a.bin", mime_type="text/plain",
                                     purpose="batch").bytes == 2**40

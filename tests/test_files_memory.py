"""A file's bytes stream through the gateway both ways: uploading a 64 MiB file, reading it
back, and four reads of it at once each raise the gateway process's peak resident memory
(VmHWM in /proc/<pid>/status) by well under the file's size, on the local store (Starlette
spools the multipart body to disk, the blob store copies it in chunks, content is sent a
chunk at a time).

Before streaming, each of these raised the peak by at least the file's size (one read of a
64 MiB file: +64 MiB, four at once: +256 MiB)."""

from __future__ import annotations

import hashlib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.helpers.gateway_process import GatewayProcess

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc"),
              pytest.mark.slow]

SIZE = 64 << 20
BOUND = 32 << 20  # generous: chunks, buffers and the allocator's slack, never the file


def _peak(gateway: GatewayProcess) -> int:
    assert gateway.process is not None
    status = Path(f"/proc/{gateway.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _upload(base: str, path: Path) -> str:
    with path.open("rb") as handle:
        answer = httpx.post(base + "/v1/files", files={"file": (path.name, handle)},
                            data={"purpose": "assistants"}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def _download(base: str, file_id: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with httpx.stream("GET", f"{base}/v1/files/{file_id}/content", timeout=120) as answer:
        assert answer.status_code == 200
        for chunk in answer.iter_bytes():
            digest.update(chunk)
    return digest.hexdigest()


def test_upload_and_reads_stream(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    block = hashlib.sha256(b"seed").digest() * (1 << 15)  # 1 MiB, not all one byte
    with big.open("wb") as out:
        for _ in range(SIZE // len(block)):
            out.write(block)
    want = hashlib.md5(big.read_bytes(), usedforsecurity=False).hexdigest()
    small = tmp_path / "small.bin"
    small.write_bytes(block * 2)
    env = {"GATEWAY_STORE": f"sqlite:{tmp_path / 'gateway.db'}",
           "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1"}
    with GatewayProcess(env, tmp_path) as gateway:
        warm = _upload(gateway.url, small)  # every module imported, every buffer made once
        _download(gateway.url, warm)
        before = _peak(gateway)
        file_id = _upload(gateway.url, big)
        assert _peak(gateway) - before < BOUND, "the upload was held in memory"
        assert _download(gateway.url, file_id) == want
        assert _peak(gateway) - before < BOUND, "the read was held in memory"
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(lambda _: _download(gateway.url, file_id), range(4))) \
                == [want] * 4
        assert _peak(gateway) - before < BOUND, "four reads were held in memory"

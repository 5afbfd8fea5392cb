"""The Containers API over the real sandbox engine (GATEWAY_CODE_INTERPRETER=sandbox):

- a ``responses-gateway serve`` process driven by openai-python's ``client.containers`` and
  ``client.containers.files``, unmodified: the whole flow, tenants' 404s, and a container
  that expires (its ``expired`` shape, its folder gone);
- the app in this test's event loop (its lifespan entered here), so code can run in a
  container through the service the tools use: the expiry sweep ends its sandbox process,
  and the gateway's shutdown leaves none.

Skipped where the jail cannot run (the engine's check says why)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types import ContainerRetrieveResponse
from openai.types.containers import FileListResponse

from tests.helpers.gateway_process import GatewayProcess

pytestmark = pytest.mark.slow
KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"


@pytest.fixture(scope="module", autouse=True)
def _jail_works(tmp_path_factory: pytest.TempPathFactory) -> None:
    from responses_gateway.containers.sandbox import SandboxEngine

    engine = SandboxEngine(tmp_path_factory.mktemp("check"))
    why = asyncio.run(engine.check())
    asyncio.run(engine.aclose())
    if why:
        pytest.skip(why)


def processes_with(mark: str) -> list[int]:
    """Pids of this machine's processes whose command line holds ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def within(seconds: float, done: Callable[[], bool]) -> bool:
    """Whether ``done()`` holds within ``seconds`` (asked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone_within(mark: str, seconds: float) -> bool:
    return within(seconds, lambda: not processes_with(mark))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tmp = tmp_path_factory.mktemp("gw")
    env = {"GATEWAY_STORE": f"sqlite:{tmp / 'g.db'}", "GATEWAY_CODE_INTERPRETER": "sandbox",
           "GATEWAY_API_KEYS": f"{KEY_A},{KEY_B}", "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1",
           "GATEWAY_FILE_SWEEP_SECONDS": "0.5"}
    with GatewayProcess(env, tmp) as process:
        yield process


def client(gateway: GatewayProcess, key: str) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def test_the_api_on_the_sandbox(gateway: GatewayProcess, tmp_path: Path) -> None:
    with client(gateway, KEY_A) as alice, client(gateway, KEY_B) as bob:
        upload = alice.files.create(file=("data.csv", b"x,y\n1,2\n"), purpose="user_data")
        made = alice.containers.create(name="sandboxed", file_ids=[upload.id])
        assert made.status == "running" and alice.containers.retrieve(made.id).id == made.id
        assert [c.id for c in alice.containers.list()] == [made.id]
        folder = Path(str(gateway.env["GATEWAY_STORE"])[len("sqlite:"):] + ".containers")
        assert (folder / made.id).is_dir()  # its /mnt/data on this machine
        sent = alice.containers.files.create(made.id, file=("notes.txt", b"hello"))
        listed = alice.containers.files.with_raw_response.list(made.id).http_response.json()
        assert sorted(FileListResponse.model_validate(f).path for f in listed["data"]) == [
            "/mnt/data/data.csv", "/mnt/data/notes.txt"]
        content = alice.containers.files.content.retrieve(sent.id, container_id=made.id)
        assert content.read() == b"hello"
        with pytest.raises(openai.NotFoundError):
            bob.containers.files.content.retrieve(sent.id, container_id=made.id)
        with pytest.raises(openai.NotFoundError):
            bob.containers.retrieve(made.id)
        alice.containers.files.delete(sent.id, container_id=made.id)
        assert [f.path for f in alice.containers.files.list(made.id)] == ["/mnt/data/data.csv"]
        alice.containers.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            alice.containers.retrieve(made.id)
        assert not (folder / made.id).exists()
        bad = httpx.post(gateway.url + "/v1/containers", json={"name": "x",
                         "network_policy": {"type": "allowlist", "allowed_domains": ["a.b"]}},
                         headers={"authorization": f"Bearer {KEY_A}"})
        assert bad.status_code == 400 and "without network" in bad.json()["error"]["message"]


def test_expiry_in_the_app_ends_the_sandbox_process(tmp_path: Path) -> None:
    """Code runs (a sandbox process), the container goes idle past its time, the sweep ends
    it: ``GET`` shows ``expired``, its process and folder are gone; then the app's shutdown
    leaves no process of the others either."""
    from responses_gateway.api.app import create_app
    from responses_gateway.config import Settings

    settings = Settings(store=f"sqlite:{tmp_path / 'g.db'}", code_interpreter="sandbox",
                        api_keys=(KEY_A,), upstream_url="http://127.0.0.1:9/v1",
                        container_idle_seconds=1.0, file_sweep_seconds=0.2)
    app = create_app(settings)

    async def scenario() -> None:
        async with app.router.lifespan_context(app):
            http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://gateway")
            alice = AsyncOpenAI(base_url="http://gateway/v1", api_key=KEY_A,
                                http_client=http, max_retries=0)
            containers = app.state.gateway.containers
            tenant = app.state.auth.tenant(f"Bearer {KEY_A}")
            # kept first: short's 1 s of idle starts with its create, and its code runs next
            kept = await alice.containers.create(
                name="kept", expires_after={"anchor": "last_active_at", "minutes": 5})
            short = await alice.containers.create(name="short")
            for made in (short, kept):
                ran = await containers.run_code(tenant, made.id,
                                                "open('/mnt/data/out.txt', 'w').write('x')")
                assert ran.result.error is None, ran.result
                assert [f.path for f in ran.files] == ["/mnt/data/out.txt"]
                assert processes_with(made.id), "a sandbox process runs the container's code"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:  # the sweep (0.2 s) ends it after its 1 s
                await asyncio.sleep(0.1)
                if (await containers.records.get(tenant, short.id)).status == "expired":
                    break
            raw = await alice.containers.with_raw_response.retrieve(short.id)
            assert ContainerRetrieveResponse.model_validate(raw.http_response.json()
                                                            ).status == "expired"
            assert await asyncio.to_thread(gone_within, short.id, 10)
            # the record says expired first, then the sweep ends the process and removes
            # the folder (in a thread): both are waited for, not raced
            folder = tmp_path / "g.db.containers" / short.id
            assert await asyncio.to_thread(within, 10, lambda: not folder.exists()), sorted(
                p.name for p in folder.rglob("*"))
            with pytest.raises(openai.BadRequestError):
                await alice.containers.files.list(short.id)
            assert processes_with(kept.id)  # the other one still runs
            await http.aclose()
        assert await asyncio.to_thread(gone_within, kept.id, 10)  # shutdown ended it

    asyncio.run(scenario())


def test_paths_the_folder_cannot_take_are_client_errors(gateway: GatewayProcess) -> None:
    """An upload's name past the file system's 255 bytes is shortened (its extension kept);
    a name the code took for a folder is a 400; a file the code swapped for a link is gone
    (404): none is a 500."""
    alice = client(gateway, KEY_A)
    made = alice.containers.create(name="paths")
    folder = Path(str(gateway.env["GATEWAY_STORE"])[len("sqlite:"):] + ".containers") / made.id
    try:
        long = alice.containers.files.create(made.id, file=("é" * 200 + ".csv", b"a,b\n"))
        name = long.path.rsplit("/", 1)[-1]
        assert name.endswith(".csv") and len(name.encode()) <= 255
        assert (folder / name).read_bytes() == b"a,b\n"
        (folder / "sub").mkdir()  # as the code would
        with pytest.raises(openai.BadRequestError) as bad:
            alice.containers.files.create(made.id, file=("sub", b"x"))
        assert bad.value.status_code == 400
        sent = alice.containers.files.create(made.id, file=("x.txt", b"x"))
        (folder / "x.txt").unlink()
        (folder / "x.txt").symlink_to("/etc/passwd")  # as the code would
        with pytest.raises(openai.NotFoundError):
            alice.containers.files.content.retrieve(sent.id, container_id=made.id)
    finally:
        alice.containers.delete(made.id)


def test_content_is_the_file_as_it_is_now(gateway: GatewayProcess) -> None:
    """A file that grew since its record was made (a thread the code left running appends
    to it) is sent whole, not cut at (or broken by) the size its record says."""
    alice = client(gateway, KEY_A)
    made = alice.containers.create(name="growing")
    folder = Path(str(gateway.env["GATEWAY_STORE"])[len("sqlite:"):] + ".containers") / made.id
    try:
        sent = alice.containers.files.create(made.id, file=("log.txt", b"x"))
        with (folder / "log.txt").open("ab") as log:  # as the code's thread would
            log.write(b"y" * 3_000_000)
        content = alice.containers.files.content.retrieve(sent.id, container_id=made.id)
        assert content.content == b"x" + b"y" * 3_000_000
    finally:
        alice.containers.delete(made.id)


def test_a_file_name_that_is_not_utf8_is_listed_not_a_500(gateway: GatewayProcess) -> None:
    """The code may name a file with any bytes (``open(b"/mnt/data/\\xff", "w")``): such a
    name cannot be a container file's path (a JSON string), so it is not listed, and the
    listing still answers."""
    alice = client(gateway, KEY_A)
    made = alice.containers.create(name="bytes")
    folder = Path(str(gateway.env["GATEWAY_STORE"])[len("sqlite:"):] + ".containers") / made.id
    try:
        alice.containers.files.create(made.id, file=("ok.txt", b"x"))
        with open(bytes(folder) + b"/caf\xe9.txt", "wb") as odd:  # as the code would
            odd.write(b"latin-1 name")
        paths = sorted(f.path for f in alice.containers.files.list(made.id))
        assert paths == ["/mnt/data/ok.txt"]
    finally:
        alice.containers.delete(made.id)

"""The Containers API through openai-python's ``client.containers`` and
``client.containers.files``, unmodified, on both record engines (SQLite; DynamoDB on moto)
over the fake engine (tests/helpers/fake_container_engine.py): every object validated against
the SDK's types, paging, content, deletes, expiry, the bounds, OpenAI's 400s and tenants'
404s. The real engines run the flow in tests/test_containers_sandbox_api.py and
tests/test_containers_agentcore_api.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types import (
    ContainerCreateResponse,
    ContainerListResponse,
    ContainerRetrieveResponse,
)
from openai.types.containers import (
    FileCreateResponse,
    FileListResponse,
    FileRetrieveResponse,
)

from responses_gateway.config import Settings
from responses_gateway.platform.base import Platform
from tests.helpers.fake_container_engine import FakeContainerEngine
from tests.helpers.file_storage import ENGINES, gateway_on
from tests.helpers.gateway_server import GatewayServer

KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"
MAX_FILE = 4096


@pytest.fixture(scope="module", params=ENGINES)
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp(request.param)
    engine = FakeContainerEngine(tmp / "boxes")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Platform, "container_engine", lambda self: engine)
        with gateway_on(request.param, tmp, api_keys=(KEY_A, KEY_B),
                        max_file_bytes=MAX_FILE, code_interpreter="sandbox",
                        max_containers=4) as server:
            yield server


@pytest.fixture(scope="module")
def alice(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway: GatewayServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as client:
        yield client


@pytest.fixture(autouse=True)
def _clear(alice: OpenAI, bob: OpenAI) -> Iterator[None]:
    yield
    for client in (alice, bob):
        for container in client.containers.list(limit=100):
            client.containers.delete(container.id)


def engine_of(gateway: GatewayServer) -> Any:
    return gateway.gateway.containers.engine


def test_container_and_files_end_to_end(alice: OpenAI, gateway: GatewayServer) -> None:
    upload = alice.files.create(file=("data.csv", b"a,b\n1,2\n"), purpose="user_data")
    raw = alice.containers.with_raw_response.create(
        name="analysis", file_ids=[upload.id], memory_limit="4g",
        expires_after={"anchor": "last_active_at", "minutes": 30},
        network_policy={"type": "disabled"})
    created = ContainerCreateResponse.model_validate(raw.http_response.json())
    assert created.id.startswith("cntr_") and created.status == "running"
    assert created.name == "analysis" and created.memory_limit == "4g"
    assert created.expires_after is not None and created.expires_after.minutes == 30
    assert created.object == "container"

    got = alice.containers.with_raw_response.retrieve(created.id).http_response.json()
    assert ContainerRetrieveResponse.model_validate(got).id == created.id
    listed = alice.containers.with_raw_response.list().http_response.json()
    assert listed["object"] == "list" and listed["first_id"] == created.id
    assert [ContainerListResponse.model_validate(c).id for c in listed["data"]] == [created.id]

    files = alice.containers.files.with_raw_response.list(created.id).http_response.json()
    [copied] = [FileListResponse.model_validate(f) for f in files["data"]]
    assert (copied.path, copied.bytes, copied.source) == ("/mnt/data/data.csv", 8, "user")
    assert copied.id.startswith("cfile_") and copied.container_id == created.id

    raw_file = alice.containers.files.with_raw_response.create(
        created.id, file=("notes.txt", b"hello"))
    sent = FileCreateResponse.model_validate(raw_file.http_response.json())
    assert (sent.path, sent.bytes, sent.object) == ("/mnt/data/notes.txt", 5, "container.file")
    by_id = alice.containers.files.create(created.id, file_id=upload.id)  # JSON body
    assert by_id.path == "/mnt/data/data.csv" and by_id.id == copied.id  # same path: same file

    got_file = alice.containers.files.with_raw_response.retrieve(
        sent.id, container_id=created.id).http_response.json()
    assert FileRetrieveResponse.model_validate(got_file).bytes == 5
    content = alice.containers.files.content.retrieve(sent.id, container_id=created.id)
    assert content.read() == b"hello"

    every = [f.id for f in alice.containers.files.list(created.id, order="asc")]
    assert set(every) == {copied.id, sent.id}  # (by created_at, then id: one second here)
    page = alice.containers.files.list(created.id, limit=1, order="asc")
    assert [f.id for f in page.data] == every[:1] and page.has_more
    assert [f.id for f in page] == every  # the SDK follows ``after``
    assert [f.id for f in alice.containers.files.list(created.id)] == every[::-1]

    assert alice.containers.files.delete(sent.id, container_id=created.id) is None
    with pytest.raises(openai.NotFoundError):
        alice.containers.files.retrieve(sent.id, container_id=created.id)
    assert alice.containers.delete(created.id) is None
    assert created.id not in engine_of(gateway).running  # its process and files are gone
    with pytest.raises(openai.NotFoundError):
        alice.containers.retrieve(created.id)


def test_list_paging_order_and_name(alice: OpenAI) -> None:
    made = [alice.containers.create(name="even" if i % 2 == 0 else "odd") for i in range(4)]
    ids = [c.id for c in made]
    assert {c.id for c in alice.containers.list()} == set(ids)
    first = alice.containers.list(limit=2, order="asc")
    assert first.has_more and len(first.data) == 2
    rest = alice.containers.list(limit=10, order="asc", after=first.data[-1].id)
    assert [c.id for c in first.data + rest.data] == sorted(
        ids, key=lambda i: ([c.created_at for c in made][ids.index(i)], i))
    assert {c.id for c in alice.containers.list(name="odd")} == {ids[1], ids[3]}


def test_tenants_see_only_their_own(alice: OpenAI, bob: OpenAI) -> None:
    upload = alice.files.create(file=("a.txt", b"abc"), purpose="user_data")
    mine = alice.containers.create(name="mine", file_ids=[upload.id])
    [cfile] = alice.containers.files.list(mine.id).data
    for call in (lambda: bob.containers.retrieve(mine.id),
                 lambda: bob.containers.delete(mine.id),
                 lambda: bob.containers.files.list(mine.id),
                 lambda: bob.containers.files.create(mine.id, file=("x", b"x")),
                 lambda: bob.containers.files.retrieve(cfile.id, container_id=mine.id),
                 lambda: bob.containers.files.content.retrieve(cfile.id, container_id=mine.id),
                 lambda: bob.containers.files.delete(cfile.id, container_id=mine.id),
                 lambda: bob.containers.create(name="theirs", file_ids=[upload.id])):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert missing.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert bob.containers.list().data == []
    assert alice.containers.retrieve(mine.id).status == "running"
    theirs = bob.containers.create(name="theirs")
    with pytest.raises(openai.NotFoundError):
        alice.containers.files.create(theirs.id, file_id=upload.id)


@pytest.mark.parametrize(("body", "param"), [
    ({}, "name"),
    ({"name": 3}, "name"),
    ({"name": "x", "memory_limit": "2g"}, "memory_limit"),
    ({"name": "x", "expires_after": {"anchor": "created_at", "minutes": 5}},
     "expires_after.anchor"),
    ({"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 0}},
     "expires_after.minutes"),
    ({"name": "x", "expires_after": {"anchor": "last_active_at"}}, "expires_after.minutes"),
    ({"name": "x", "file_ids": "file-1"}, "file_ids"),
    ({"name": "x", "file_ids": [f"file-{i}" for i in range(101)]}, "file_ids"),  # too many
    ({"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": ["a.com"]}},
     "network_policy.type"),
    ({"name": "x", "skills": [{"type": "skill_reference", "skill_id": "s"}]}, "skills"),
    ({"name": "x", "colour": "red"}, "colour"),
])
def test_bad_creates_are_openai_400s(gateway: GatewayServer, body: dict[str, Any],
                                     param: str) -> None:
    answer = httpx.post(gateway.base_url + "/containers", json=body,
                        headers={"authorization": f"Bearer {KEY_A}"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    if param == "network_policy.type":
        assert "without network" in error["message"]


@pytest.mark.parametrize(("body", "param", "got"), [
    ({"name": 3}, "name", "an integer"),
    ({"name": "x", "file_ids": {"a": 1}}, "file_ids", "an object"),
    ({"name": "x", "memory_limit": 1.5}, "memory_limit", "a decimal number"),
    ({"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": "5"}},
     "expires_after.minutes", "a string"),
])
def test_a_wrong_type_is_named_as_openai_names_it(gateway: GatewayServer, alice: OpenAI,
                                                  body: dict[str, Any], param: str,
                                                  got: str) -> None:
    """OpenAI's words for a JSON value's kind, never a Python type's name ("got int")."""
    with pytest.raises(openai.BadRequestError) as caught:
        alice.containers.create(name="x", extra_body=body)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param
    assert error["code"] == "invalid_type"
    assert error["message"].endswith(f"but got {got} instead."), error["message"]


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"expires_after": {"anchor": True, "minutes": 5}}, "expires_after.anchor",
     "Invalid type for 'expires_after.anchor': expected one of 'last_active_at', but got a "
     "boolean instead."),
    ({"expires_after": {"anchor": None, "minutes": 5}}, "expires_after.anchor",
     "Invalid type for 'expires_after.anchor': expected one of 'last_active_at', but got null "
     "instead."),
    ({"network_policy": {"type": ["disabled"]}}, "network_policy.type",
     "Invalid type for 'network_policy.type': expected one of 'disabled' or 'allowlist', but "
     "got an array instead."),
    ({"network_policy": {}}, "network_policy.type",
     "Missing required parameter: 'network_policy.type'."),
    ({"memory_limit": ""}, "memory_limit",
     "Invalid value: ''. Supported values are: '1g', '4g', '16g', and '64g'."),
    ({"memory_limit": 4}, "memory_limit",
     "Invalid type for 'memory_limit': expected one of '1g', '4g', '16g', or '64g', but got an "
     "integer instead."),
])
def test_an_enum_given_a_wrong_value_is_named_as_openai_names_it(
        alice: OpenAI, body: dict[str, Any], param: str, message: str) -> None:
    """A value none of an enum's: a string quoted, any other JSON value a wrong type in
    OpenAI's words, never Python's repr ('True', 'None', "['disabled']"); an empty
    ``memory_limit`` is refused, not taken for the default."""
    with pytest.raises(openai.BadRequestError) as caught:
        alice.containers.create(name="x", extra_body=body)
    error = caught.value.body
    assert isinstance(error, dict) and (error["param"], error["message"]) == (param, message)
    assert alice.containers.list().data == []


CI = "tools[0].container"


@pytest.mark.parametrize(("container", "param", "message"), [
    ({"type": "auto", "file_ids": [None]}, f"{CI}.file_ids[0]",
     f"Invalid type for '{CI}.file_ids[0]': expected a string, but got null instead."),
    (1.5, CI, f"Invalid type for '{CI}': expected a string or an object, but got a decimal "
     "number instead."),
    ({"type": True}, f"{CI}.type",
     f"Invalid type for '{CI}.type': expected one of 'auto', but got a boolean instead."),
    ({"type": "auto", "memory_limit": []}, f"{CI}.memory_limit",
     f"Invalid type for '{CI}.memory_limit': expected one of '1g', '4g', '16g', or '64g', but "
     "got an array instead."),
    ({"type": "auto", "network_policy": {}}, f"{CI}.network_policy.type",
     f"Missing required parameter: '{CI}.network_policy.type'."),
    ({"type": "auto", "network_policy": {"type": None}}, f"{CI}.network_policy.type",
     f"Invalid type for '{CI}.network_policy.type': expected one of 'disabled' or "
     "'allowlist', but got null instead."),
])
def test_the_code_interpreter_tools_container_mistakes_in_openais_words(
        alice: OpenAI, container: Any, param: str, message: str) -> None:
    """The ``code_interpreter`` tool's ``container`` in /v1/responses: a wrong value named by
    its JSON kind ('null', 'a boolean'), never by Python ('NoneType', 'True', 'None')."""
    with pytest.raises(openai.BadRequestError) as caught:
        alice.responses.create(model="m", input="hi", tools=[
            {"type": "code_interpreter", "container": container}])
    error = caught.value.body
    assert isinstance(error, dict) and (error["param"], error["message"]) == (param, message)


@pytest.mark.parametrize(("tool", "param", "message"), [
    ({"type": "code_interpreter", "container": {"type": "auto"}, "allowed_callers": ["x"]},
     "tools[0].allowed_callers[0]",
     "Invalid value: 'x'. Supported values are: 'direct' and 'programmatic'."),
    ({"type": "code_interpreter", "container": {"type": "auto"}, "allowed_callers": [None]},
     "tools[0].allowed_callers[0]",
     "Invalid type for 'tools[0].allowed_callers[0]': expected one of 'direct' or "
     "'programmatic', but got null instead."),
    ({"type": "code_interpreter", "container": {"type": "auto"}, "allowed_callers": "direct"},
     "tools[0].allowed_callers",
     "Invalid type for 'tools[0].allowed_callers': expected an array, but got a string "
     "instead."),
    ({"type": "shell", "environment": {"type": "container_auto"}, "allowed_callers": [1]},
     "tools[0].allowed_callers[0]",
     "Invalid type for 'tools[0].allowed_callers[0]': expected one of 'direct' or "
     "'programmatic', but got an integer instead."),
    ({"type": "function", "name": "f", "allowed_callers": [None]},
     "tools[0].allowed_callers[0]",
     "Invalid type for 'tools[0].allowed_callers[0]': expected one of 'direct' or "
     "'programmatic', but got null instead."),
])
def test_allowed_callers_are_checked_on_the_container_tools_too(
        alice: OpenAI, tool: dict[str, Any], param: str, message: str) -> None:
    """``allowed_callers`` of code_interpreter and hosted shell is checked as a function
    tool's is (it was read silently as no caller at all: a tool never offered), and a
    non-string is named by its JSON kind, not Python's repr ('Invalid value: None')."""
    with pytest.raises(openai.BadRequestError) as caught:
        alice.responses.create(model="m", input="hi", tools=[tool])  # type: ignore[list-item]
    error = caught.value.body
    assert isinstance(error, dict) and (error["param"], error["message"]) == (param, message)


def test_other_bad_requests(gateway: GatewayServer, alice: OpenAI) -> None:
    auth = {"authorization": f"Bearer {KEY_A}"}
    url = gateway.base_url + "/containers"
    assert httpx.post(url, content=b"{", headers=auth).status_code == 400
    assert httpx.get(url + "?limit=0", headers=auth).json()["error"]["param"] == "limit"
    made = alice.containers.create(name="x")
    files = f"{url}/{made.id}/files"
    assert httpx.post(files, json={}, headers=auth).json()["error"]["param"] == "file_id"
    missing = httpx.post(files, files={"other": ("a", b"a")}, headers=auth)
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "file"
    big = httpx.post(files, files={"file": ("big", b"x" * (MAX_FILE + 1))}, headers=auth)
    assert big.status_code == 413 and big.json()["error"]["code"] == "file_too_large"
    assert httpx.get(url, headers={}).status_code == 401


def test_a_file_and_a_file_id_at_once_is_a_400(alice: OpenAI) -> None:
    """A multipart upload with both ``file`` and ``file_id`` names the clash rather than
    silently dropping the ``file_id``."""
    upload = alice.files.create(file=("u.txt", b"from files"), purpose="user_data")
    made = alice.containers.create(name="x")
    with pytest.raises(openai.BadRequestError) as caught:
        alice.containers.files.create(made.id, file=("a.txt", b"sent"), file_id=upload.id)
    assert caught.value.body["param"] == "file_id"  # type: ignore[index]
    assert "not both" in caught.value.body["message"]  # type: ignore[index]
    assert alice.containers.files.list(made.id).data == []
    # an empty file_id (a form sending every field) is no file_id
    sent = httpx.post(f"{alice.base_url}containers/{made.id}/files", data={"file_id": ""},
                      files={"file": ("b.txt", b"kept")},
                      headers={"authorization": f"Bearer {KEY_A}"})
    assert sent.status_code == 200 and sent.json()["path"] == "/mnt/data/b.txt"


def test_a_long_unknown_file_id_is_quoted_cut(alice: OpenAI) -> None:
    """A 5000-character file id is a 404 whose message quotes it cut, as the Files API's."""
    long_id = "file-" + "a" * 5000
    made = alice.containers.create(name="x")
    for call in (lambda: alice.containers.files.create(made.id, file_id=long_id),
                 lambda: alice.containers.create(name="y", file_ids=[long_id])):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        message = caught.value.body["message"]  # type: ignore[index]
        assert message.startswith("No such File object: file-aaa") and len(message) < 120


def test_bound_on_running_containers(alice: OpenAI, bob: OpenAI) -> None:
    for _ in range(4):
        alice.containers.create(name="x")
    with pytest.raises(openai.BadRequestError) as full:
        alice.containers.create(name="x")
    assert full.value.code == "container_limit_exceeded"
    bob.containers.create(name="mine")  # per key


def test_an_expired_container(alice: OpenAI, gateway: GatewayServer,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    made = alice.containers.create(name="short",
                                   expires_after={"anchor": "last_active_at", "minutes": 1})
    alice.containers.files.create(made.id, file=("a.txt", b"abc"))
    containers = gateway.gateway.containers
    real = containers.clock
    monkeypatch.setattr(containers, "clock", lambda: real() + 61)
    shown = alice.containers.with_raw_response.retrieve(made.id).http_response.json()
    assert ContainerRetrieveResponse.model_validate(shown).status == "expired"
    assert made.id not in engine_of(gateway).running
    for call in (lambda: alice.containers.files.list(made.id),
                 lambda: alice.containers.files.create(made.id, file=("b", b"b"))):
        with pytest.raises(openai.BadRequestError) as expired:
            call()
        assert expired.value.body["message"] == "Container is expired."  # type: ignore[index]
    assert [c.status for c in alice.containers.list()] == ["expired"]
    alice.containers.delete(made.id)  # an expired one can still be deleted
    with pytest.raises(openai.NotFoundError):
        alice.containers.retrieve(made.id)


def test_not_configured_is_501(tmp_path: Path) -> None:
    settings = Settings(store=f"sqlite:{tmp_path / 'g.db'}", upstream_url="http://127.0.0.1:9/v1")
    with GatewayServer(settings) as server:
        answer = httpx.get(server.base_url + "/containers")
    assert answer.status_code == 501
    assert answer.json()["error"]["code"] == "code_interpreter_not_configured"


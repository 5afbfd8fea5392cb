"""Stored images (issue 32): large values of stored records live in a blob store
(store/blobs.py), the records reference them, and every read returns them whole.

- the blob seam on its own: references written for large strings only, client strings that
  look like references never resolved, a missing blob a store failure (not a wrong answer);
- background responses on SQLite: retrieve and the resumed event stream carry the image;
- DynamoDB on moto with the images in S3 on moto: the table holds references, retrieve,
  chaining (an edit through previous_response_id) and conversations return the images whole.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from openai import OpenAI

from responses_gateway.store.base import StoredConversation, StoredResponse, StoreUnavailable
from responses_gateway.store.blobs import MARK, BlobbedStore, DirectoryBlobs, MemoryBlobs
from responses_gateway.store.sqlite import SQLiteStore
from responses_gateway.tools.image_generation.backends import forget_backends
from tests.helpers.e2e import (
    check_response,
    check_stream,
    client_for,
    e2e_settings,
    split_frames,
)
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.image_servers import NOVA, FakeBedrockImages, colour_for, colour_of, png_info
from tests.helpers.moto_server import (
    create_dynamodb_table,
    unique_table_name,
    use_moto,
)
from tests.helpers.responses_validation import events_from_sse
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_image_generation import draw, image_call

pytestmark = pytest.mark.slow

# -- the seam ---------------------------------------------------------------------------------


def record(output: list[dict[str, Any]], rid: str = "resp_1") -> StoredResponse:
    return StoredResponse(id=rid, tenant="t", response={"id": rid, "status": "completed",
                                                        "output": output},
                          request={"chat": {}}, input_items=[])


def test_large_values_move_out_and_come_back_whole(tmp_path: Any) -> None:
    async def run() -> None:
        blobs = MemoryBlobs()
        store = BlobbedStore(SQLiteStore(str(tmp_path / "s.db")), blobs, threshold=1000)
        big = base64.b64encode(b"\x89PNG" + bytes(range(256)) * 20).decode()
        forged = MARK + "0" * 64  # a client's string shaped like a reference
        item = {"id": "ig_1", "type": "image_generation_call", "status": "completed",
                "result": big, "revised_prompt": forged}
        await store.put(record([item]))
        raw = await store._inner.get("resp_1", "t")
        assert raw is not None and big not in json.dumps(raw.response)  # a reference is stored
        assert list(blobs.data.values()) == [big.encode()]
        back = await store.get("resp_1", "t")
        assert back is not None and back.response["output"] == [item]  # exactly as sent
        # Events and item lookups come back whole too.
        await store.append_events("resp_1", [{"type": "response.output_item.done",
                                              "sequence_number": 0, "item": item}])
        [event] = await store.read_events("resp_1")
        assert event["item"] == item
        assert (await store.get_items(["ig_1"], "t"))["ig_1"]["result"] == big
        # A blob that went missing is a store failure, never a wrong answer.
        blobs.data.clear()
        with pytest.raises(StoreUnavailable):
            await store.get("resp_1", "t")
        await store.aclose()

    asyncio.run(run())


def test_blobs_count_toward_the_stored_response_bound(tmp_path: Any) -> None:
    """GATEWAY_MAX_STORED_RESPONSE_BYTES bounds the Response as the API returns it, its blobs
    included (issue 40: the inner store saw only references, and a 51 MB response with 50 MB
    of image was stored): over it, ResponseTooLarge and nothing written, blob or record."""
    from responses_gateway.store.base import ResponseTooLarge, StoreLimits

    async def run() -> None:
        blobs = MemoryBlobs()
        inner = SQLiteStore(str(tmp_path / "s.db"), limits=StoreLimits(response_bytes=10_000))
        store = BlobbedStore(inner, blobs, threshold=1000)
        small = {"id": "ig_1", "type": "image_generation_call", "result": "A" * 4000}
        await store.put(record([small]))  # fits, blob and all
        big = {"id": "ig_2", "type": "image_generation_call", "result": "B" * 20_000}
        with pytest.raises(ResponseTooLarge) as caught:
            await store.put(record([big], "resp_2"))
        assert caught.value.status == 400 and caught.value.code == "response_too_large"
        # the same image twice counts twice, as the Response carries it twice
        twice = [{**small, "id": "ig_3"}, {**small, "id": "ig_4"}, {**small, "id": "ig_5"}]
        with pytest.raises(ResponseTooLarge):
            await store.put(record(twice, "resp_3"))
        assert await store.get("resp_2", "t") is None and await store.get("resp_3", "t") is None
        assert list(blobs.data) == [k for k in blobs.data if k.startswith("resp_1/")]
        # a Response that grows past it later: not written either
        with pytest.raises(ResponseTooLarge):
            await store.update_response("resp_1", {"id": "resp_1", "status": "completed",
                                                   "output": [big]})
        with pytest.raises(ResponseTooLarge):
            await store.append_events("resp_1", [], response={"id": "resp_1", "output": [big]})
        back = await store.get("resp_1", "t")
        assert back is not None and back.response["output"] == [small]
        await store.aclose()

    asyncio.run(run())


def test_blobs_go_with_what_holds_them(tmp_path: Any) -> None:
    """A response's blobs go with it (not with another tenant's delete); a conversation
    item's with the item, the rest with the conversation; expired responses' by age."""
    import os

    async def run() -> None:
        root = tmp_path / "s.db.blobs"
        store = BlobbedStore(SQLiteStore(str(tmp_path / "s.db")), DirectoryBlobs(root),
                             threshold=1000)
        big = "A" * 5000
        other = "B" * 5000
        item = {"id": "ig_1", "type": "image_generation_call", "status": "completed",
                "result": big}
        for rid in ("resp_1", "resp_2"):
            await store.put(record([item], rid))
        await store.append_events("resp_1", [{"type": "response.output_item.done",
                                              "sequence_number": 0, "item": item}])
        files = {p.relative_to(root).parts[0] for p in root.rglob("*") if p.is_file()}
        assert files == {"resp_1", "resp_2"}
        assert not await store.delete("resp_1", "another-tenant")
        assert (root / "resp_1").is_dir()
        assert await store.delete("resp_1", "t")
        assert not (root / "resp_1").exists()
        assert (await store.get("resp_2", "t")) is not None  # the same image, its own copy

        conv = StoredConversation(id="conv_1", tenant="t", created_at=1, metadata={})
        await store.create_conversation(conv, [
            {"id": "ig_1", "type": "image_generation_call", "result": big},
            {"id": "ig_2", "type": "image_generation_call", "result": other}])
        assert {p.name for p in (root / "conv_1").iterdir()} == {"ig_1", "ig_2"}
        assert (await store.delete_conversation_item("conv_1", "t", "ig_1")) is not None
        assert {p.name for p in (root / "conv_1").iterdir()} == {"ig_2"}
        found = await store.conversation_items("conv_1", "t")
        assert found is not None and [i["result"] for i in found[1]] == [other]
        assert await store.delete_conversation("conv_1", "t")
        assert not (root / "conv_1").exists()
        await store.aclose()

        # An expired response's blobs go by age (its record expired before them).
        blobs = DirectoryBlobs(root)
        old = 1_000_000.0
        for path in (root / "resp_2").iterdir():
            os.utime(path, (old, old))
        assert blobs.sweep(30, now=old + 29 * 86400) == 0
        assert blobs.sweep(None) == 0
        assert blobs.sweep(30, now=old + 31 * 86400) == 1
        assert not (root / "resp_2").exists()

    asyncio.run(run())


# -- background on SQLite ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bedrock_images() -> Iterator[FakeBedrockImages]:
    from tests.test_image_generation import DUMMY_AWS

    with pytest.MonkeyPatch.context() as mp:
        for name, value in DUMMY_AWS.items():
            mp.setenv(name, value)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        with FakeBedrockImages(noise_rows=200) as fake:  # ~820 KB of base64: over an item
            yield fake


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, bedrock_images: FakeBedrockImages,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    forget_backends()
    db = tmp_path_factory.mktemp("images-bg") / "gateway.db"
    settings = e2e_settings(upstream, db, image_backend="bedrock", image_model=NOVA,
                            bedrock_endpoint_url=bedrock_images.url, bedrock_region="us-east-1")
    with GatewayServer(settings) as server:
        yield server


def wait_done(client: OpenAI, response_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = client.responses.retrieve(response_id).to_dict(mode="json")
        if found["status"] not in ("queued", "in_progress"):
            return found
        time.sleep(0.1)
    raise AssertionError("the background response did not finish")


def test_background_retrieve_and_resume_carry_the_image(client: OpenAI,
                                                        gateway: GatewayServer) -> None:
    created = client.responses.create(model="m", input=draw("a lighthouse", "bg-1"),
                                      tools=[{"type": "image_generation"}], background=True)
    done = check_response(wait_done(client, created.id))
    call = image_call(done)
    assert call["status"] == "completed" and colour_of(call["result"]) == colour_for("a lighthouse")
    # The resumed stream (every event from the start) carries the same image.
    import httpx

    with httpx.Client(timeout=30) as http:
        answer = http.get(f"{gateway.base_url}/responses/{created.id}",
                          params={"stream": "true", "starting_after": "-1"},
                          headers={"Authorization": "Bearer sk-test"})
    frames, rest = split_frames(answer.content)
    assert not rest
    events = events_from_sse(frames)
    check_stream(events)
    [done_event] = [e for e in events if e["type"] == "response.output_item.done"
                    and e["item"]["type"] == "image_generation_call"]
    assert done_event["item"]["result"] == call["result"]


# -- DynamoDB and S3 on moto -------------------------------------------------------------------


@pytest.fixture
def aws_gateway(moto_endpoint: str, upstream: ScriptedUpstream,
                bedrock_images: FakeBedrockImages, monkeypatch: pytest.MonkeyPatch
                ) -> Iterator[tuple[GatewayServer, str, str]]:
    use_moto(monkeypatch, moto_endpoint)
    forget_backends()
    table = create_dynamodb_table(unique_table_name("images"))
    bucket = unique_table_name("images-bucket")
    boto3.client("s3").create_bucket(Bucket=bucket)
    settings = e2e_settings(upstream, "unused.db", store=f"dynamodb:{table}",
                            image_backend="bedrock", image_model=NOVA, image_bucket=bucket,
                            bedrock_endpoint_url=bedrock_images.url, bedrock_region="us-east-1")
    with GatewayServer(settings) as server:
        yield server, table, bucket
    forget_backends()


def test_dynamodb_keeps_references_and_s3_the_images(
        aws_gateway: tuple[GatewayServer, str, str]) -> None:
    server, table, bucket = aws_gateway
    with client_for(server) as client:
        first = check_response(client.responses.create(
            model="m", input=draw("a lighthouse", "aws-1"),
            tools=[{"type": "image_generation"}]))
        image = image_call(first)["result"]
        assert len(image) > 400_000  # more than one DynamoDB item holds
        night = check_response(client.responses.create(
            model="m", input=draw("make it night", "aws-2", edit=True),
            tools=[{"type": "image_generation"}], previous_response_id=first["id"]))
        edited = image_call(night)["result"]
        assert colour_of(edited) == colour_for("night", png_info(base64.b64decode(image))[2])
        for response, result in ((first, image), (night, edited)):
            again = client.responses.retrieve(response["id"]).to_dict(mode="json")
            assert image_call(again)["result"] == result

        conversation = client.conversations.create()
        check_response(client.responses.create(
            model="m", input=draw("a lighthouse", "aws-3"), conversation=conversation.id,
            tools=[{"type": "image_generation"}]))
        items = client.conversations.items.list(conversation.id).to_dict(mode="json")["data"]
        [kept] = [i for i in items if i["type"] == "image_generation_call"]
        assert png_info(base64.b64decode(kept["result"]))[:2] == (1024, 1024)

    s3 = boto3.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    bodies = {s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}
    assert image.encode() in bodies and edited.encode() in bodies
    # The table holds references only (read past the blob wrapper).
    from responses_gateway.api.auth import OPEN_TENANT
    from responses_gateway.store.dynamodb import DynamoDBStore

    raw = asyncio.run(DynamoDBStore(table).get(first["id"], OPEN_TENANT))
    assert raw is not None and raw.response["output"][0]["result"].startswith(MARK)


def s3_keys(bucket: str, prefix: str = "blobs/") -> list[str]:
    answer = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in answer.get("Contents", [])]


def test_deletes_take_the_images_out_of_s3(aws_gateway: tuple[GatewayServer, str, str]) -> None:
    """DELETE /v1/responses/{id}, a conversation item's delete and a conversation's delete
    remove their S3 objects; what another response holds stays."""
    server, _, bucket = aws_gateway
    with client_for(server) as client:
        tools: Any = [{"type": "image_generation"}]
        first = check_response(client.responses.create(
            model="m", input=draw("a lighthouse", "del-1"), tools=tools))
        kept = check_response(client.responses.create(
            model="m", input=draw("a lighthouse", "del-2"), tools=tools))
        conversation = client.conversations.create()
        check_response(client.responses.create(
            model="m", input=draw("a lighthouse", "del-3"), tools=tools,
            conversation=conversation.id))
        check_response(client.responses.create(
            model="m", input=draw("make it night", "del-4", edit=True), tools=tools,
            conversation=conversation.id))
        assert s3_keys(bucket, f"blobs/{first['id']}/")
        assert s3_keys(bucket, f"blobs/{kept['id']}/")

        client.responses.delete(first["id"])
        assert s3_keys(bucket, f"blobs/{first['id']}/") == []
        assert image_call(client.responses.retrieve(kept["id"]).to_dict())["result"]

        items = client.conversations.items.list(conversation.id).to_dict(mode="json")["data"]
        drawn = [i["id"] for i in items if i["type"] == "image_generation_call"]
        assert len(drawn) == 2
        for item_id in drawn:
            assert s3_keys(bucket, f"blobs/{conversation.id}/{item_id}/")
        client.conversations.items.delete(drawn[0], conversation_id=conversation.id)
        assert s3_keys(bucket, f"blobs/{conversation.id}/{drawn[0]}/") == []
        assert s3_keys(bucket, f"blobs/{conversation.id}/{drawn[1]}/")
        client.conversations.delete(conversation.id)
        assert s3_keys(bucket, f"blobs/{conversation.id}/") == []
        assert s3_keys(bucket, f"blobs/{kept['id']}/")

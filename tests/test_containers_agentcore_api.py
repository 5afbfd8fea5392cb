"""The Containers API on the AWS platform with GATEWAY_CODE_INTERPRETER=agentcore, through
openai-python: records in DynamoDB and files in S3 on moto, containers in sessions of the fake
AgentCore (tests/helpers/agentcore_server.py, AgentCore's wire format)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.helpers.file_storage import gateway_on

KEY_A = "key-tenant-a"


@pytest.mark.slow  # the AWS platform on moto, a Python process per AgentCore session
def test_the_api_on_agentcore(tmp_path: Path) -> None:
    from tests.helpers.agentcore_server import FakeAgentCore

    with FakeAgentCore() as fake, gateway_on(
            "aws", tmp_path, api_keys=(KEY_A,), code_interpreter="agentcore",
            agentcore_endpoint_url=fake.url, bedrock_region="us-east-1") as server, \
            OpenAI(base_url=server.base_url, api_key=KEY_A, max_retries=0) as alice:
        upload = alice.files.create(file=("data.csv", b"a,b\n"), purpose="user_data")
        made = alice.containers.create(name="on-agentcore", file_ids=[upload.id])
        sent = alice.containers.files.create(made.id, file=("notes.txt", b"hello"))
        assert sorted(f.path for f in alice.containers.files.list(made.id)) == [
            "/mnt/data/data.csv", "/mnt/data/notes.txt"]
        assert alice.containers.files.content.retrieve(
            sent.id, container_id=made.id).read() == b"hello"
        alice.containers.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            alice.containers.retrieve(made.id)
        assert not fake.refused

"""code_interpreter on the AWS platform (issue 42's "on Lambda"): records in DynamoDB and files
in S3 on moto, code in sessions of the fake AgentCore (tests/helpers/agentcore_server.py, its
real wire format), the scripted upstream playing the model. The issue's scenario: a CSV from
the Files API analysed with pandas, plotted, the plot cited, the state kept into a second
turn."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from openai import OpenAI

from tests.helpers.e2e import check_response
from tests.helpers.file_storage import gateway_on
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_code_interpreter import CSV, OUTPUTS, calls_of, steps, tool_messages

pytestmark = pytest.mark.slow  # the AWS platform on moto, a Python process per session
KEY = "key-agentcore"


def test_done_when_on_agentcore(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    from tests.helpers.agentcore_server import FakeAgentCore

    with FakeAgentCore() as fake, gateway_on(
            "aws", tmp_path, api_keys=(KEY,), code_interpreter="agentcore",
            agentcore_endpoint_url=fake.url, bedrock_region="us-east-1",
            upstream_url=upstream.base_url) as server, \
            OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60) as client:
        uploaded = client.files.create(file=("sales.csv", CSV), purpose="user_data")
        tools: list = [{"type": "code_interpreter",
                        "container": {"type": "auto", "file_ids": [uploaded.id]}}]
        analyse = ("import pandas as pd\ndf = pd.read_csv('/mnt/data/sales.csv')\n"
                   "total = int(df['amount'].sum())\nprint('total', total)")
        plot = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                "df.plot(x='month', y='amount', kind='bar')\n"
                "plt.savefig('/mnt/data/sales.png')")
        answer = "Total 440: [chart](sandbox:/mnt/data/sales.png)"
        first = check_response(client.responses.create(
            model="m", tools=tools, include=[OUTPUTS],
            input=steps("agentcore-csv", analyse, plot, text=answer, quote=False)))
        read, drawn = calls_of(first)
        assert read["outputs"][-1]["logs"].strip() == "total 440"
        assert drawn["status"] == "completed"
        [image] = [o for o in drawn["outputs"] if o["type"] == "image"]
        png = base64.b64decode(image["url"].removeprefix("data:image/png;base64,"))
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        shown, cited = first["output"][-1]["content"][0]["annotations"]
        assert (shown["start_index"], shown["end_index"]) == (0, 0)
        assert (cited["filename"], answer[cited["start_index"]:cited["end_index"]]) == (
            "sales.png", "sandbox:/mnt/data/sales.png")
        files = {f.path: f.id for f in client.containers.files.list(read["container_id"])}
        assert files["/mnt/data/sales.png"] == cited["file_id"]

        second = check_response(client.responses.create(
            model="m", tools=tools, previous_response_id=first["id"],
            input=steps("agentcore-csv-2", "print(total // len(df))")))
        assert calls_of(second)[0]["container_id"] == read["container_id"]
        assert tool_messages(upstream, "agentcore-csv-2")[-1].strip() == "110"
        assert [r for r in fake.refused if r[1] == "ValidationException"] == []

"""How a response ends when the upstream's stream does not end cleanly (issues 16 and 17).

- a call whose arguments were cut off is never announced done (the Codex CLI runs what
  ``output_item.done`` carries): the failed response keeps it, ``incomplete``;
- ``[DONE]`` with neither a ``finish_reason`` nor ``usage`` is a cut-off stream
  (llama-cpp-python when another request arrives): failed, the partial output kept;
- ``error.code`` of a failed response is always one the openai SDK documents;
- logprob ``bytes`` sent as null (llama.cpp) are filled from the token's UTF-8.
"""

from __future__ import annotations

from typing import Any

from responses_gateway.translate.response_object import RESPONSE_ERROR_CODES, new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.responses_validation import (
    _SDK_ERROR_CODES,
    check_grammar,
    validate_event,
    validate_response,
)


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}


def translator(**options: Any) -> ResponseTranslator:
    response = new_response({"model": "m"}, response_id="resp_end", created_at=1)
    return ResponseTranslator(response, TranslateOptions(**options))


def judged(events: list[dict[str, Any]]) -> dict[str, Any]:
    check_grammar(events)
    for event in events:
        validate_event(event)
    validate_response(events[-1]["response"])
    return events[-1]["response"]


CALL_START = chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "shell", "arguments": ""}}]})
CALL_PIECE = chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd": '}}]})


def test_a_call_cut_off_by_a_failure_is_never_announced_done() -> None:
    t = translator()
    events = t.start() + t.feed(CALL_START) + t.feed(CALL_PIECE)
    events += t.fail("upstream_connection_closed", "Upstream error: connection closed")
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.done" not in kinds
    assert "response.output_item.done" not in kinds
    assert kinds[-1] == "response.failed"
    response = judged(events)
    call = response["output"][-1]
    assert (call["type"], call["status"], call["arguments"]) == (
        "function_call", "incomplete", '{"cmd": '
    )


def test_an_error_frame_mid_call_leaves_the_call_unfinished() -> None:
    t = translator()
    events = t.start() + t.feed(CALL_START) + t.feed(CALL_PIECE)
    events += t.feed({"error": {"message": "overloaded", "code": "overloaded"}})
    assert "response.output_item.done" not in [e["type"] for e in events]
    response = judged(events)
    assert response["output"][-1]["status"] == "incomplete"
    assert response["error"]["code"] == "server_error"
    assert "overloaded" in response["error"]["message"]


def test_a_finished_call_before_a_failure_stays_done() -> None:
    t = translator()
    events = t.start() + t.feed(CALL_START) + t.feed(CALL_PIECE)
    events += t.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"ls"}'}}]}))
    events += t.feed(chunk({"content": "and"}))  # the call closed: a message opened
    events += t.fail("upstream_timeout", "Upstream error: timed out")
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert done[0]["item"]["arguments"] == '{"cmd": "ls"}'
    assert done[0]["item"]["status"] == "completed"
    judged(events)


def test_done_without_finish_reason_or_usage_is_a_cut_off_stream() -> None:
    t = translator()
    events = t.start() + t.feed(chunk({"content": "Half an ans"})) + t.finish()
    response = judged(events)
    assert response["status"] == "failed"
    assert response["output"][0]["content"][0]["text"] == "Half an ans"
    assert response["error"]["code"] == "server_error"
    assert "finish_reason" in response["error"]["message"]


def test_usage_without_finish_reason_is_a_finished_answer() -> None:
    t = translator()
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    events = t.start() + t.feed(chunk({"content": "Whole."})) + t.feed(
        {"choices": [], "usage": usage}
    ) + t.finish()
    assert judged(events)["status"] == "completed"


def test_every_gateway_error_code_becomes_a_documented_one() -> None:
    assert RESPONSE_ERROR_CODES == _SDK_ERROR_CODES  # the list is the SDK's, kept in step
    for code in ("upstream_connection_closed", "store_unavailable", "worker_lost", "400", "x"):
        t = translator()
        events = t.start() + t.fail(code, "Upstream error: went wrong")
        response = judged(events)
        assert response["error"]["code"] == "server_error"
        assert code in response["error"]["message"]
    t = translator()
    events = t.start() + t.fail("rate_limit_exceeded", "slow down")
    assert judged(events)["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}


def test_null_logprob_bytes_are_filled_from_the_token() -> None:
    t = translator(logprobs=True)
    logprobs = {"content": [{"token": "é!", "logprob": -0.1, "bytes": None,
                             "top_logprobs": [{"token": "a", "logprob": -2.0, "bytes": None}]}]}
    events = t.start() + t.feed(chunk({"content": "é!"}, logprobs=logprobs))
    events += t.feed(chunk({}, "stop")) + t.finish()
    response = judged(events)
    entry = response["output"][0]["content"][0]["logprobs"][0]
    assert entry["bytes"] == list("é!".encode())
    assert entry["top_logprobs"][0]["bytes"] == [97]

"""What a response's log row keeps of its time and failure (issue 44): the steps the turn loop
records, closed as the response ends, bounded; the error of each way a response ends. The
same through real gateways, both stores and the dashboard: tests/test_dashboard.py."""

from __future__ import annotations

from typing import Any

from responses_gateway.observability import MAX_STEPS, ResponseMetrics, _ending
from responses_gateway.observability import failure_of as _failure_of
from responses_gateway.store.usage import UsageEntry


def test_steps_close_in_order_and_open_ones_end_with_the_response() -> None:
    metrics = ResponseMetrics("resp_1", "m", stream=False)
    turn = metrics.step_opened("model", "m")
    metrics.step_closed(turn)
    call = metrics.step_opened("mcp", "lab.search")
    metrics.step_closed(call, "mcp_tool_execution_error")
    metrics.step_closed(call, None)  # closed once: the first word stays
    metrics.step_opened("model", "m")  # cut by the deadline: still open
    metrics.first_content()
    timing = metrics.timing(1000.0, "response_timeout")
    steps = timing["steps"]
    assert [(s["type"], s["error"]) for s in steps] == [
        ("model", None), ("mcp", "mcp_tool_execution_error"), ("model", "response_timeout")]
    assert steps[-1]["start_ms"] + steps[-1]["duration_ms"] == 1000.0
    assert timing["duration_ms"] == 1000.0 and timing["first_output_ms"] is not None
    assert metrics.ttft_ms is None  # the log line's and metric's: streams only, as before


def test_the_steps_kept_are_bounded() -> None:
    metrics = ResponseMetrics("resp_2", "m", stream=True)
    indexes = [metrics.step_opened("model", "m") for _ in range(MAX_STEPS + 5)]
    assert indexes[-1] == -1 and len(metrics.steps) == MAX_STEPS
    metrics.step_closed(-1)  # a step not kept: nothing happens
    assert len(metrics.timing(5.0, None)["steps"]) == MAX_STEPS


def test_each_ending_has_a_code_and_a_message() -> None:
    failed = {"status": "failed", "error": {"code": "server_error", "message": "x" * 5000}}
    error = _ending(failed, "failed", "server_error", None)
    assert error is not None and error["code"] == "server_error"
    assert len(error["message"]) == 2000  # bounded in the row; the Response keeps it all
    assert _ending({}, "rejected", "context_length_exceeded", "too long") == {
        "code": "context_length_exceeded", "message": "too long"}
    incomplete = {"status": "incomplete",
                  "incomplete_details": {"reason": "max_output_tokens"}}
    assert _ending(incomplete, "incomplete", None, None) == {
        "code": "max_output_tokens", "message": "The response reached max_output_tokens."}
    background = _ending({"background": True}, "cancelled", None, None)
    assert background is not None and "/cancel" in background["message"]
    assert _ending({"status": "completed"}, "completed", None, None) is None


def test_a_calls_failure_read_from_its_items() -> None:
    mcp: dict[str, Any] = {"type": "mcp_call", "error": {"type": "mcp_tool_execution_error"}}
    assert _failure_of([mcp]) == "mcp_tool_execution_error"
    assert _failure_of([{"type": "mcp_call", "error": "boom " * 100}]) == ("boom " * 100)[:200]
    assert _failure_of([{"type": "web_search_call", "status": "failed"}]) == "failed"
    assert _failure_of([{"type": "image_generation_call", "status": "completed"}]) is None


def test_the_log_row_carries_timing_and_error() -> None:
    response = {"id": "resp_3", "created_at": 1, "status": "failed", "output": []}
    timing = {"started_at": 1.0, "first_output_ms": None, "duration_ms": 3.0, "steps": []}
    error = {"code": "server_error", "message": "it broke"}
    row = UsageEntry.of(response, tenant="t_x", model="m", status="failed", timing=timing,
                        error=error).log_row()
    assert row["timing"] == timing and row["error"] == error
    plain = UsageEntry.of(response, tenant="t_x", model="m", status="completed").log_row()
    assert "timing" not in plain and plain["error"] is None

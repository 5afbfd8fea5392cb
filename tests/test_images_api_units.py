"""Units beside tests/test_images_api.py and tests/test_prewarm.py: the Images API's request
checks and answers (tools/image_generation/images_api.py) and the prewarm's chunk reduction
(responses/prewarm.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from openai.types import ImagesResponse

from responses_gateway.backends.base import BackendRequest
from responses_gateway.errors import GatewayError
from responses_gateway.responses.prewarm import prewarm_request, prewarmed
from responses_gateway.tools.image_generation import images_api as api
from responses_gateway.tools.image_generation.backends.base import Drawn, ImageFailure


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({}, "prompt", "missing_required_parameter"),
    ({"prompt": 5}, "prompt", "invalid_type"),
    ({"prompt": "x" * 32_001}, "prompt", "string_above_max_length"),
    ({"prompt": "x", "n": 0}, "n", "integer_out_of_range"),
    ({"prompt": "x", "n": True}, "n", "invalid_type"),
    ({"prompt": "x", "stream": "yes"}, "stream", "invalid_type"),
    ({"prompt": "x", "size": "big"}, "size", "invalid_value"),
    ({"prompt": "x", "output_compression": 101}, "output_compression",
     "integer_out_of_range"),  # as n, and as OpenAI codes an integer out of its bounds
    ({"prompt": "x", "frame_count": 3}, "frame_count", "unsupported_value"),
    ({"prompt": "x", "svg": {"model": "m"}}, "svg", "unsupported_value"),
    ({"prompt": "x", "image": "a"}, "image", "unknown_parameter"),
])
def test_parse_names_the_field(fields: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(GatewayError) as caught:
        api.parse(fields, edit=False)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_parse_and_form_fields() -> None:
    request = api.parse(api.form_fields({"prompt": "p", "n": "3", "stream": "true",
                                         "quality": "high", "user": "u"}), edit=True)
    assert (request.n, request.stream, request.params.quality, request.safety_identifier,
            request.event_prefix) == (3, True, "high", "u", "image_edit")
    assert api.parse({"prompt": "p", "user": "u", "safety_identifier": "s"},
                     edit=False).safety_identifier == "s"
    with pytest.raises(GatewayError) as caught:
        api.form_fields({"n": "two"})
    assert caught.value.param == "n"


def drawn(usage: dict[str, Any] | None, **fields: Any) -> Drawn:
    values = {"size": "1024x1024", "quality": "auto", "output_format": "png",
              "background": "auto", "revised_prompt": "p", **fields}
    return Drawn("aGk=", usage=usage, **values)


def test_answer_leaves_out_what_was_only_asked_and_sums_usage() -> None:
    request = api.parse({"prompt": "p"}, edit=False)
    answer = api.images_response(request, [
        drawn({"input_tokens": 2, "output_tokens": 3, "total_tokens": 5}),
        drawn({"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
               "output_tokens_details": {"image_tokens": 1, "text_tokens": 0}})], 7)
    ImagesResponse.model_validate(answer)
    assert answer == {"created": 7, "data": [{"b64_json": "aGk="}] * 2, "output_format": "png",
                      "size": "1024x1024",
                      "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7,
                                "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
                                "output_tokens_details": {"image_tokens": 1,
                                                          "text_tokens": 0}}}
    revised = api.images_response(request, [drawn(None, revised_prompt="better p")], 7)
    assert revised["data"] == [{"b64_json": "aGk=", "revised_prompt": "better p"}]
    assert "usage" not in revised


@pytest.mark.parametrize(("failure", "status"), [
    (ImageFailure("no", code="moderation_blocked", type="image_generation_user_error"), 400),
    (ImageFailure("no", code="invalid_mask", type="invalid_request_error"), 400),
    (ImageFailure("slow", code="rate_limit_exceeded"), 429),
    (ImageFailure("late", code="timeout"), 504),
    (ImageFailure("bad", code="image_too_large"), 502),
])
def test_failures_are_openai_statuses(failure: ImageFailure, status: int) -> None:
    error = api.failure_error(failure)
    assert (error.status, error.code) == (status, failure.code)


# -- prewarm ---------------------------------------------------------------------------------


def test_prewarm_request_asks_for_one_token() -> None:
    request = BackendRequest(body={"model": "m", "messages": [], "max_tokens": 9,
                                   "max_completion_tokens": 9, "reasoning_effort": "high",
                                   "tools": [1]}, tenant="t", stream=False)
    warm = prewarm_request(request)
    assert warm.body == {"model": "m", "messages": [], "max_completion_tokens": 1,
                         "tools": [1]}
    assert (warm.tenant, warm.stream) == ("t", False)
    assert request.body["max_tokens"] == 9  # the job's own request is left as it was


async def _batches(*batches: list[Any]) -> AsyncIterator[list[Any]]:
    for batch in batches:
        yield batch


def _reduced(*batches: list[Any]) -> list[list[Any]]:
    async def run() -> list[list[Any]]:
        return [b async for b in prewarmed(_batches(*batches))]

    return asyncio.run(run())


def test_prewarmed_keeps_the_usage_only() -> None:
    text = orjson.dumps({"id": "c1", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]})
    end = {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
           "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51,
                     "prompt_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 40},
                     "completion_tokens_details": {"reasoning_tokens": 0}}}
    assert _reduced([text], [end, b"[DONE]"]) == [[{
        "id": "c1", "model": "m", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 0, "total_tokens": 50,
                  "prompt_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 40}}}]]


def test_prewarmed_passes_an_upstream_error_on() -> None:
    error = {"error": {"message": "boom", "code": "server_error"}}
    assert _reduced([orjson.dumps(error)], [{"usage": {}}]) == [[error]]


def test_an_unsupported_value_is_never_quoted_by_python() -> None:
    """It read "Invalid value for 'svg': {'model': 'm'} is not supported..." (Python's repr)."""
    with pytest.raises(GatewayError) as caught:
        api.parse({"prompt": "x", "svg": {"model": "m"}}, edit=False)
    assert caught.value.message == (
        "Invalid value for 'svg': an object is not supported by this gateway's image backend.")

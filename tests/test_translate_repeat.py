"""Chunks fed as their wire bytes: the repeat fast path must change nothing but the cost.

``ResponseTranslator.feed(bytes)`` skips most of the parse for a chunk that repeats the previous
one's bytes around a new fragment string. Its reference is feeding ``parse_chunk(bytes)``: for
every stream, in every serialisation style a provider might use (compact, spaced, ASCII-escaped,
keys in another order, a per-chunk nonce), both must give the same events, event for event.
Adversarial chunks that share a learned prefix and suffix but are not one string in between
must take the full parse.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from responses_gateway import ids
from responses_gateway.backends.chunks import ChunkDecoder, parse_chunk
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions
from tests.helpers.chat_reference import chat_fixtures, fixture_lines
from tests.test_translate_properties import render, scenarios

Serialise = Callable[[dict[str, Any], int], bytes]


def _compact(chunk: dict[str, Any], _: int) -> bytes:
    return orjson.dumps(chunk)


def _spaced(chunk: dict[str, Any], _: int) -> bytes:
    return json.dumps(chunk, ensure_ascii=False).encode()  # ", " and ": " (Python servers)


def _ascii(chunk: dict[str, Any], _: int) -> bytes:
    return json.dumps(chunk, separators=(",", ":")).encode()  # \u00e9, surrogate pairs


def _sorted(chunk: dict[str, Any], _: int) -> bytes:
    return orjson.dumps(chunk, option=orjson.OPT_SORT_KEYS)


def _nonce(chunk: dict[str, Any], n: int) -> bytes:
    return orjson.dumps({**chunk, "obfuscation": "x" * (n % 5)})  # OpenAI / Azure padding


STYLES: dict[str, Serialise] = {
    "compact": _compact, "spaced": _spaced, "ascii": _ascii, "sorted": _sorted, "nonce": _nonce,
}


def translate(
    chunks: list[Any], options: TranslateOptions | None = None, *, finish: bool = True
) -> tuple[list[dict[str, Any]], ResponseTranslator]:
    """Events (as JSON would carry them) and the translator; ids by count, so two runs of the
    same stream can be compared exactly."""
    counter = itertools.count()
    original = ids.new_id
    ids.new_id = lambda prefix: f"{prefix}{next(counter)}"  # type: ignore[assignment]
    try:
        response = new_response({"model": "m"}, response_id="resp_x", created_at=1)
        translator = ResponseTranslator(response, options)
        events = translator.start()
        for chunk in chunks:
            events += translator.feed(chunk)
        if finish:
            events += translator.finish()
    finally:
        ids.new_id = original  # type: ignore[assignment]
    return orjson.loads(orjson.dumps(events)), translator


def both_ways(
    wire: list[bytes], options: TranslateOptions | None = None, *, finish: bool = True
) -> tuple[list[dict[str, Any]], ResponseTranslator]:
    """Events from the bytes path, after checking they equal the parsed path's.

    The clock is frozen: ``completed_at`` must not differ because a second ticked between runs.
    """
    with mock.patch("time.time", return_value=1_800_000_000.0):
        reference, _ = translate([parse_chunk(None, d) for d in wire], options, finish=finish)
        events, translator = translate(list(wire), options, finish=finish)
    assert events == reference
    return events, translator


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(sorted(STYLES)))
def test_any_stream_in_any_style_translates_the_same_as_bytes(scenario: Any, style: str) -> None:
    chunks, _ = render(scenario)
    wire = [STYLES[style](c, n) for n, c in enumerate(chunks)]
    both_ways(wire, scenario.options)


@pytest.mark.parametrize("path", chat_fixtures(), ids=lambda p: p.name)
@pytest.mark.parametrize("options", [
    TranslateOptions(),
    TranslateOptions(summary=True, logprobs=True, encrypted_reasoning=True,
                     seal=lambda blob: json.dumps(blob, sort_keys=True)),
], ids=["plain", "summary-logprobs-sealed"])
def test_every_recorded_stream_translates_the_same_as_bytes(
    path: Any, options: TranslateOptions
) -> None:
    decoder = ChunkDecoder()
    wire = [*decoder.lines(fixture_lines(path)), *decoder.end()]
    both_ways([c if isinstance(c, bytes) else orjson.dumps(c) for c in wire], options)


# -- the fast path is taken, and only when it may be ------------------------------------------


def text_chunk(content: str, **choice: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "logprobs": None,
                         "finish_reason": None, **choice}]}


def test_repeats_skip_the_parse_and_keep_every_fragment() -> None:
    pieces = ["Hel", "lo", ' "quoted"', " \\ back", " \u00e9t\u00e9", " \U0001f600", "", " end"]
    wire = [orjson.dumps(text_chunk(p)) for p in pieces]
    wire[5] = json.dumps(text_chunk(pieces[5]), separators=(",", ":")).encode()  # \\ud83d\\ude00
    events, translator = both_ways(wire, finish=False)
    repeat = translator._repeat
    assert repeat is not None and repeat.hits == 6  # all but the first two (open, learn)
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "".join(pieces)


@pytest.mark.parametrize("middle", [
    b'"x"},"logprobs":null,"finish_reason":"length"}],"id":"c1","x":{"a":{"content":"y"',
    b'"x","refusal":"no"',
    b'"unterminated',
    b'"a" "b"',
    b'1',
    b'null',
    b'"x"}}]}',
])
def test_bytes_that_share_the_shape_but_not_one_string_take_the_full_parse(
    middle: bytes,
) -> None:
    first, second = (orjson.dumps(text_chunk(t)) for t in ("alpha", "beta"))
    at = second.index(b'"beta"')
    head, tail = second[:at], second[at + len(b'"beta"'):]
    both_ways([first, second, head + middle + tail, orjson.dumps(text_chunk("z"))])


def test_a_nonce_on_every_chunk_stops_the_learning_but_not_the_stream() -> None:
    rng = random.Random(7)
    wire = [orjson.dumps({**text_chunk(f"w{i} "), "obfuscation": "n" * rng.randint(1, 9)})
            for i in range(40)]
    events, translator = both_ways(wire, finish=False)
    assert translator._repeat is None and translator._repeat_misses >= 4
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "".join(f"w{i} " for i in range(40))


def test_a_repeat_after_the_item_changed_is_not_taken_for_the_old_item() -> None:
    """Call 0's fragment shape comes back after call 1 opened: it must not extend call 1."""
    def call(index: int, **fields: Any) -> bytes:
        return orjson.dumps({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, **fields}]}, "finish_reason": None}]})

    wire = [
        call(0, id="call_a", type="function", function={"name": "f", "arguments": ""}),
        call(0, function={"arguments": '{"a":'}),
        call(0, function={"arguments": "1}"}),
        call(1, id="call_b", type="function", function={"name": "g", "arguments": ""}),
        call(0, function={"arguments": "late"}),  # call 0 was closed: a protocol error
    ]
    events, _ = both_ways(wire)
    assert events[-1]["type"] == "response.failed"
    assert "after it was closed" in events[-1]["response"]["error"]["message"]

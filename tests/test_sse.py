"""SSE writer and reader edge cases: the framing every stream in and out depends on."""

from __future__ import annotations

import json

import pytest

from responses_gateway.backends.chunks import chunks_from_lines, parse_chunk
from responses_gateway.sse import SSEDecoder, encode_comment, encode_event, iter_sse_lines


def frames(lines: list[bytes | str]) -> list[tuple[str | None, bytes]]:
    decoder = SSEDecoder()
    out = [frame for line in lines if (frame := decoder.line(line)) is not None]
    last = decoder.flush()
    return [*out, last] if last is not None else out


# -- SSEDecoder ----------------------------------------------------------------------------


def test_plain_data_event() -> None:
    assert frames([b'data: {"a":1}', b""]) == [(None, b'{"a":1}')]


def test_only_one_leading_space_is_removed() -> None:
    assert frames([b"data:x", b"", b"data:  x", b"", b"data:", b""]) == [
        (None, b"x"), (None, b" x"), (None, b""),
    ]


def test_crlf_lines() -> None:
    assert frames([b"event: error\r", b"data: x\r", b"\r"]) == [("error", b"x")]


def test_multi_line_data_joined_with_newline() -> None:
    assert frames([b'data: {"a":', b"data: 1}", b""]) == [(None, b'{"a":\n1}')]
    assert json.loads(frames([b'data: {"a":', b"data: 1}", b""])[0][1]) == {"a": 1}


def test_comments_ids_and_retry_are_ignored() -> None:
    lines = [b": keep-alive", b"", b"id: 7", b"retry: 1000", b": c", b"data: x", b"", b":"]
    assert frames(lines) == [(None, b"x")]


def test_event_name_applies_to_one_event_only() -> None:
    assert frames([b"event: error", b"data: e", b"", b"data: d", b""]) == [
        ("error", b"e"), (None, b"d"),
    ]
    assert frames([b"event:error", b"data: e", b""]) == [("error", b"e")]


def test_event_without_data_is_not_dispatched_and_resets() -> None:
    assert frames([b"event: ping", b"", b"data: x", b""]) == [(None, b"x")]


def test_blank_lines_alone_produce_nothing() -> None:
    assert frames([b"", b"", b""]) == []


def test_str_lines_as_aiter_lines_gives_them() -> None:
    assert frames(["event: error", "data: é", ""]) == [("error", "é".encode())]


def test_flush_returns_an_unterminated_event_once() -> None:
    decoder = SSEDecoder()
    assert decoder.line(b"data: tail") is None
    assert decoder.flush() == (None, b"tail")
    assert decoder.flush() is None


def test_iter_sse_lines_normalises_every_line_end() -> None:
    body = b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"
    assert frames(iter_sse_lines(body)) == [(None, b"a"), (None, b"b"), (None, b"c")]


# -- encode_event / encode_comment ---------------------------------------------------------


def test_encode_event_shape() -> None:
    event = {"type": "response.output_text.delta", "delta": "hi", "sequence_number": 3}
    raw = encode_event(event)
    assert raw == (b'event: response.output_text.delta\ndata: '
                   b'{"type":"response.output_text.delta","delta":"hi","sequence_number":3}\n\n')


def test_encode_event_escapes_newlines_and_keeps_unicode() -> None:
    event = {"type": "response.output_text.delta", "delta": "line 1\nline 2\r\n\u2028 é 😀"}
    raw = encode_event(event)
    assert raw.count(b"\n") == 3  # event line, data line, blank line: nothing from the payload
    assert b"\r" not in raw
    assert "é 😀".encode() in raw  # compact UTF-8, not \\u escapes
    [(name, data)] = frames(iter_sse_lines(raw))
    assert name == "response.output_text.delta"
    assert json.loads(data) == event


def test_encode_event_prefix_per_type() -> None:
    a = encode_event({"type": "response.created"})
    b = encode_event({"type": "response.completed"})
    a2 = encode_event({"type": "response.created", "x": 1})
    assert a.startswith(b"event: response.created\n")
    assert b.startswith(b"event: response.completed\n")
    assert a2 == b'event: response.created\ndata: {"type":"response.created","x":1}\n\n'


def test_encoded_stream_decodes_back() -> None:
    events = [{"type": f"t{i}", "n": i, "s": "a\nb" * i} for i in range(20)]
    body = b"".join(encode_event(e) for e in events) + encode_comment()
    decoded = [(name, json.loads(data)) for name, data in frames(iter_sse_lines(body))]
    assert decoded == [(e["type"], e) for e in events]


def test_encode_comment() -> None:
    assert encode_comment() == b": keep-alive\n\n"
    assert encode_comment("x") == b": x\n\n"
    assert frames(iter_sse_lines(encode_comment())) == []


# -- parse_chunk / chunks_from_lines -------------------------------------------------------


def test_parse_chunk_cases() -> None:
    assert parse_chunk(None, b"[DONE]") is None
    assert parse_chunk(None, b'{"id":"x"}') == {"id": "x"}
    assert parse_chunk(None, b'{"id": ')["error"]["code"] == "upstream_protocol_error"  # type: ignore[index]
    assert parse_chunk(None, b"[1, 2]")["error"]["code"] == "upstream_protocol_error"  # type: ignore[index]
    assert parse_chunk("error", b'{"message":"m"}') == {"error": {"message": "m"}}
    assert parse_chunk("error", b'{"error":{"message":"m"}}') == {"error": {"message": "m"}}


C1 = b'{"choices":[{"delta":{"content":"a"}}]}'
C2 = b'{"choices":[{"delta":{"content":"b"}}]}'


@pytest.mark.parametrize("lines", [
    [b"data: " + C1, b"", b"data: " + C2, b"", b"data: [DONE]", b""],
    [b"data: " + C1 + b"\r", b"\r", b"data:" + C2 + b"\r", b"\r", b"data: [DONE]\r", b"\r"],
    [b": c", b"data: " + C1, b": c", b"", b"id: 1", b"data: " + C2, b"", b"data: [DONE]"],
    [b'data: {"choices":', b'data: [{"delta":{"content":"a"}}]}', b"",
     b"data: " + C2, b"", b"data: [DONE]", b""],
    ["data: " + C1.decode(), "", "data: " + C2.decode(), ""],  # str lines, no [DONE]
    [b"data: " + C1, b"", b"data: " + C2],  # last event without its blank line
])
def test_chunks_from_lines_framings(lines: list[bytes | str]) -> None:
    assert list(chunks_from_lines(lines)) == [json.loads(C1), json.loads(C2)]


def test_chunks_from_lines_stops_at_done() -> None:
    lines = [b"data: " + C1, b"", b"data: [DONE]", b"", b"data: " + C2, b""]
    assert list(chunks_from_lines(lines)) == [json.loads(C1)]


def test_chunks_from_lines_error_frames_and_bad_json() -> None:
    lines = [b"data: " + C1, b"", b"data: {oops", b"", b"event: error",
             b'data: {"message":"boom"}', b"", b"data: " + C2, b""]
    chunks = list(chunks_from_lines(lines))
    assert chunks[0] == json.loads(C1)
    assert chunks[1]["error"]["code"] == "upstream_protocol_error"
    assert chunks[2] == {"error": {"message": "boom"}}
    assert chunks[3] == json.loads(C2)

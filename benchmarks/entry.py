"""The translation hot path as one function, for benchmarks and fixture tests.

``translate_sse`` runs upstream SSE lines through the same decoder, state machine and SSE
writer the server uses, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from itertools import islice

from responses_gateway import ids
from responses_gateway.backends.chunks import ChunkDecoder
from responses_gateway.sse import encode_event
from responses_gateway.translate.response_object import new_response
from responses_gateway.translate.stream import ResponseTranslator, TranslateOptions


def translate_sse(
    lines: Iterable[bytes], options: TranslateOptions | None = None
) -> Iterator[bytes]:
    """Upstream SSE byte lines (no newline, ``b""`` separators) in, Responses SSE bytes out."""
    response = new_response(
        {"model": "benchmark"}, response_id=ids.new_id(ids.RESPONSE), created_at=int(time.time())
    )
    translator = ResponseTranslator(response, options)
    for event in translator.start():
        yield encode_event(event)
    feed, encode = translator.feed, encode_event
    decoder = ChunkDecoder()
    source = iter(lines)
    while not decoder.done and (block := list(islice(source, 256))):
        for chunk in decoder.lines(block):
            for event in feed(chunk):
                yield encode(event)
    for chunk in decoder.end():
        for event in feed(chunk):
            yield encode(event)
    for event in translator.finish():
        yield encode_event(event)

"""Translation hot-path benchmark: µs per upstream chunk, beside an orjson baseline.

The baseline is the least any translator must do: parse each chunk with orjson and write one
JSON document back. The target is at most 1.5x that baseline on the four workloads of the
translation issue. A fifth, text whose chunks each carry a nonce, shows the cost when no chunk
repeats its predecessor's bytes (docs/translation.md).

    python benchmarks/translate.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "handler"),
                str(Path(__file__).resolve().parent.parent)]

from benchmarks.entry import translate_sse  # noqa: E402

_BASE = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
         "model": "bench-model", "system_fingerprint": "fp_bench"}


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    body = dict(_BASE, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                 "finish_reason": finish}])
    return b"data: " + orjson.dumps(body)


def _stream(deltas: Iterable[dict], finish: str) -> list[bytes]:
    lines: list[bytes] = []
    for delta in deltas:
        lines += [_chunk(delta), b""]
    lines += [_chunk({}, finish), b""]
    usage = dict(_BASE, choices=[], usage={"prompt_tokens": 10, "completion_tokens": 4000,
                                           "total_tokens": 4010})
    lines += [b"data: " + orjson.dumps(usage), b"", b"data: [DONE]", b""]
    return lines


def text(n: int = 4000) -> list[bytes]:
    return _stream(({"content": f" word{i}"} for i in range(n)), "stop")


def reasoning(n: int = 1500) -> list[bytes]:
    deltas = [{"reasoning_content": f" thought{i}", "content": None} for i in range(n)]
    deltas += [{"content": f" answer{i}"} for i in range(n)]
    return _stream(deltas, "stop")


def tool_calls(calls: int = 6, fragments: int = 300) -> list[bytes]:
    deltas: list[dict] = []
    for c in range(calls):
        deltas.append({"tool_calls": [{"index": c, "id": f"call_{c}", "type": "function",
                                       "function": {"name": "lookup", "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": c, "function": {"arguments": f'"k{i}":1,'}}]}
                   for i in range(fragments)]
    return _stream(deltas, "tool_calls")


def mixed() -> list[bytes]:
    deltas: list[dict] = [{"reasoning_content": f" r{i}"} for i in range(500)]
    deltas += [{"content": f" t{i}"} for i in range(1000)]
    for c in range(2):
        deltas.append({"tool_calls": [{"index": c, "id": f"call_{c}", "type": "function",
                                       "function": {"name": "f", "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": c, "function": {"arguments": "ab"}}]}
                   for _ in range(250)]
    return _stream(deltas, "tool_calls")


def text_with_nonce(n: int = 4000) -> list[bytes]:
    """Text whose chunks each carry a different ``obfuscation`` string (OpenAI, Azure): no
    chunk repeats the previous one's bytes, so every chunk is parsed whole."""
    lines: list[bytes] = []
    for i in range(n):
        body = dict(_BASE, obfuscation="abcdefgh"[: i % 7 + 1],
                    choices=[{"index": 0, "delta": {"content": f" word{i}"}, "logprobs": None,
                              "finish_reason": None}])
        lines += [b"data: " + orjson.dumps(body), b""]
    return lines + _stream([], "stop")


def baseline(lines: Iterable[bytes]) -> Iterator[bytes]:
    """Parse every data line and write it back: the floor for any JSON-to-JSON translator."""
    loads, dumps = orjson.loads, orjson.dumps
    for line in lines:
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            yield b"data: " + dumps(loads(line[6:])) + b"\n\n"


def _time(fn: Callable[[list[bytes]], Iterator[bytes]], lines: list[bytes], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in fn(lines):
            pass
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    workloads = {"text (4000 deltas)": text(), "reasoning (1500+1500)": reasoning(),
                 "tool calls (6 x 300)": tool_calls(), "mixed": mixed(),
                 "text, nonce per chunk": text_with_nonce()}
    targeted = list(workloads)[:4]  # the four; the nonce stream shows the no-repeat cost
    print(f"{'workload':24} {'chunks':>7} {'baseline us':>12} {'gateway us':>11} {'ratio':>6}")
    worst = 0.0
    for name, lines in workloads.items():
        chunks = sum(1 for line in lines if line.startswith(b"data: "))
        _time(translate_sse, lines, 2)  # warm up
        base = _time(baseline, lines, args.repeat) / chunks * 1e6
        ours = _time(translate_sse, lines, args.repeat) / chunks * 1e6
        if name in targeted:
            worst = max(worst, ours / base)
        print(f"{name:24} {chunks:7d} {base:12.2f} {ours:11.2f} {ours / base:6.2f}")
    print(f"worst ratio of the first four {worst:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()

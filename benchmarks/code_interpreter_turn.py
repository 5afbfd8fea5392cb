"""What a code_interpreter call costs the gateway beyond the engine's own execution (issue 42).

    python3 benchmarks/code_interpreter_turn.py [--calls 200]

The real sandbox engine (a bubblewrap jail, a long-lived Python) and the Containers service
on SQLite in a temporary folder. Each round runs the same small code twice in one warm
container: straight on the engine (``ContainerEngine.run_code``, the baseline), and as one
whole ``code_interpreter_call`` run by the tool through a real translator (the service's
lock, activity and file records, the item and its events, the code deltas, the output the
model reads). The difference is the gateway's own time per call. Target: under 5 ms (median).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "handler"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import tool_overhead
from responses_gateway.config import Settings
from responses_gateway.platform import platform_for
from responses_gateway.tools.catalog import ToolSpec
from responses_gateway.tools.code_interpreter.params import ContainerParams
from responses_gateway.tools.code_interpreter.tool import CodeInterpreterTool
from responses_gateway.tools.server import ServerCall
from responses_gateway.translate.stream import ResponseTranslator

TARGET_MS = 5.0
CODE = "total = sum(range(1000))\nprint(total)"
WARM = 20


async def rounds(folder: str, calls: int) -> tuple[list[float], list[float]]:
    settings = Settings(store=f"sqlite:{folder}/gateway.db", code_interpreter="sandbox",
                        container_dir=f"{folder}/containers")
    containers = platform_for(settings).containers(None)
    try:
        record = await containers.create("bench", name="bench")
        tool = CodeInterpreterTool(ContainerParams(container_id=record.id), tenant="bench",
                                   containers=containers, settings=settings,
                                   include_outputs=True)
        engine = containers.engine
        box = containers.box(record)
        await containers.run_code("bench", record.id, "pass")  # the jail started
        arguments = json.dumps({"code": CODE})
        fragments = [arguments[i:i + 8] for i in range(0, len(arguments), 8)]
        bare: list[float] = []
        whole: list[float] = []
        for i in range(calls + WARM):
            start = time.perf_counter()
            await engine.run_code(box, CODE, timeout=settings.code_timeout,
                                  max_output=settings.code_max_output_bytes)
            middle = time.perf_counter()
            translator = ResponseTranslator({"id": "resp_b", "object": "response",
                                             "output": [], "status": "in_progress"})
            call = ServerCall(f"call_{i}", ToolSpec("code_interpreter", "python"), arguments,
                              fragments=fragments)
            async for _ in tool.run(call, translator):
                pass
            end = time.perf_counter()
            if i >= WARM:
                bare.append(middle - start)
                whole.append(end - middle)
        await containers.delete("bench", record.id)
        return bare, whole
    finally:
        await containers.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as folder:
        bare, whole = asyncio.run(rounds(folder, calls))
    sys.exit(tool_overhead.report(bare, whole, "engine alone", "code_interpreter_call",
                                  target_ms=TARGET_MS))


if __name__ == "__main__":
    main()

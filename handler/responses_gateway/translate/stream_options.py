"""What a create asked of its output, fixed for the whole response: the translator's options.

A record (records.py) of its own module beside stream.py, which re-exports it: callers
import ``TranslateOptions`` from stream.py with the translator it configures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from responses_gateway.records import Compared
from responses_gateway.tools.catalog import ToolSpec


class TranslateOptions(Compared):
    """What the request asked of the output (fixed for the whole response; a record:
    records.py)."""

    __slots__ = ("annotate", "encrypted_reasoning", "logprobs", "seal", "summary", "tools")

    summary: bool  # reasoning.summary set: reasoning as summary parts (Codex, AI SDK)
    logprobs: bool  # include "message.output_text.logprobs"
    encrypted_reasoning: bool  # include "reasoning.encrypted_content"
    seal: Callable[[dict[str, Any]], str] | None  # tenant-bound sealer for reasoning
    tools: dict[str, ToolSpec] | None  # chat function name -> what it stands for
    #: annotations for a text part as it closes (server tools' citations: tools/server.py)
    annotate: Callable[[str], list[dict[str, Any]]] | None

    def __init__(self, summary: bool = False, logprobs: bool = False,
                 encrypted_reasoning: bool = False,
                 seal: Callable[[dict[str, Any]], str] | None = None,
                 tools: dict[str, ToolSpec] | None = None,
                 annotate: Callable[[str], list[dict[str, Any]]] | None = None) -> None:
        self.summary = summary
        self.logprobs = logprobs
        self.encrypted_reasoning = encrypted_reasoning
        self.seal = seal
        self.tools = tools
        self.annotate = annotate

"""The one cut rule for a run of conversation items: never separate a call from its output,
nor reasoning from what it preceded (a model sent one without the other refuses it or loses
its thread). Compaction splits a window into parts by it, truncation leaves the oldest items
out up to a point it allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from responses_gateway.tools import client_tools

# Tools the client runs pair the same way (shell_call with shell_call_output...).
CALLS = ("function_call", "custom_tool_call", *client_tools.PAIRS)
OUTPUTS = ("function_call_output", "custom_tool_call_output", *client_tools.PAIRS.values())


class Cuts:
    """Fed items in order, says whether a cut after those fed so far keeps the rule."""

    __slots__ = ("_after_reasoning", "open_calls")

    def __init__(self) -> None:
        self.open_calls: set[str] = set()  # calls fed whose output has not come yet
        self._after_reasoning = False

    def add(self, item: dict[str, Any]) -> None:
        kind, call_id = item.get("type"), item.get("call_id")
        if kind in CALLS and isinstance(call_id, str):
            self.open_calls.add(call_id)
        elif kind in OUTPUTS:
            # a local_shell_call_output names its call by ``id`` (client_tools.output_call_id)
            self.open_calls.discard(client_tools.output_call_id(item))
        self._after_reasoning = kind == "reasoning"

    @property
    def allowed(self) -> bool:
        return not self.open_calls and not self._after_reasoning


def cut_points(items: Sequence[dict[str, Any]]) -> list[int]:
    """Every index ``i`` (0 < i < len) where ``items[:i]`` and ``items[i:]`` keep the rule."""
    cuts = Cuts()
    points: list[int] = []
    for index, item in enumerate(items):
        if index and cuts.allowed:
            points.append(index)
        cuts.add(item)
    return points

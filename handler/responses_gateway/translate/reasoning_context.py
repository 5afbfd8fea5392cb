"""``reasoning.context``: which earlier reasoning items go back to the model, and what the
Response says was done.

OpenAI's values (openai-python 3.57 ``Reasoning.context``): ``current_turn`` renders back only
the reasoning of the current turn, the items after the conversation's last user message (a
tool-calling loop stays one turn: its function outputs are not user messages);
``all_turns`` renders back every reasoning item; ``auto`` (or omitted) lets the model decide.
Here ``auto`` resolves to ``all_turns`` where the backend takes reasoning back (what the
gateway always did, and what the reasoning models that accept it expect in a tool loop) and
to ``current_turn`` where it takes none (nothing from earlier turns reaches it). The Response
echoes the resolved value, and lists the reasoning items ``current_turn`` withheld as
``input_transformations`` (``reason: "turn_boundary"``), as OpenAI does.

A backend that takes no reasoning back (``reasoning_input`` unset) receives none whatever the
context: the gateway cannot send more than the backend accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CURRENT_TURN = "current_turn"
ALL_TURNS = "all_turns"


def effective(requested: str | None, reasoning_input: str | None) -> str:
    """The context used for a request: ``requested`` unless it is ``auto`` or omitted."""
    if requested in (CURRENT_TURN, ALL_TURNS):
        return requested
    return ALL_TURNS if reasoning_input else CURRENT_TURN


def replay_from(items: Sequence[Any], context: str) -> int:
    """Index of the first item whose reasoning goes back: 0 for ``all_turns``, the last user
    message's for ``current_turn`` (0 when there is none: all of it is the current turn)."""
    if context != CURRENT_TURN:
        return 0
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if (isinstance(item, dict) and item.get("role") == "user"
                and item.get("type", "message") == "message"):
            return index
    return 0


def withheld(items: Sequence[Any], context: str) -> list[dict[str, Any]]:
    """The Response's ``input_transformations``: reasoning items ``current_turn`` kept from
    the model, in input order (empty for ``all_turns``)."""
    start = replay_from(items, context)
    return [
        {"id": item.get("id"), "type": "reasoning", "action": "removed",
         "reason": "turn_boundary"}
        for item in items[:start]
        if isinstance(item, dict) and item.get("type") == "reasoning"
        and isinstance(item.get("id"), str)
    ]

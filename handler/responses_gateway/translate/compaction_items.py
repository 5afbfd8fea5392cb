"""Compaction items: their one shape, made and sealed here, opened here for every reader.

A ``compaction`` item is made here (:func:`new_window`, from the summary
responses/fitting/compaction.py had the backend model write) and read here (:func:`view` for
translate/to_chat.py, :func:`visible` for the summary). Its ``encrypted_content`` is sealed
for the tenant (translate/sealing.py, the same key as reasoning) and holds the summary and the
keys of the user messages the window kept verbatim. When the item comes back as input, the
newest one stands for everything before it: the items before it are left out, except
``system``/``developer`` messages (instructions given as input) and the user messages it
kept; the item itself becomes a user message giving the summary. So a client that appends
output to input forever, or chains with ``previous_response_id``, sends the model a window
that stays small, as OpenAI's guide promises ("drop items that came before the most recent
compaction item": they are dropped here anyway).

A ``compaction_trigger`` item (OpenAI: "Compacts the current context. Must be the final input
item.") asks a create to compact everything before it now: the response's one output item is
the compaction item, the model does not answer (fit.py). Later, as history, it is before its
compaction item, so the model never reads it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.errors import GatewayError, invalid_request, missing_parameter
from responses_gateway.records import Value
from responses_gateway.token_estimate import estimate

#: The sealed payload's key for the summary (a reasoning blob has none: it is refused here).
SUMMARY_KEY = "compaction"
KEEP_KEY = "keep"
TRIGGER = "compaction_trigger"
#: How the model is told what the message is (Codex words its own compaction handoff alike).
SUMMARY_INTRO = (
    "Earlier turns of this conversation were compacted. This is a summary of them, written "
    "for you to continue the work from; the user messages kept from them come before it.\n\n"
)

Opener = Callable[..., dict[str, Any]]
#: Seals a payload for the request's tenant (``partial(Sealer.seal, tenant=...)``).
Seal = Callable[[dict[str, Any]], str]


class Opened(Value):
    """A compaction item's sealed content, opened: the summary and the kept messages' keys."""

    __slots__ = ("keep", "summary")

    summary: str
    keep: tuple[str, ...]

    def __init__(self, summary: str, keep: tuple[str, ...]) -> None:
        object.__setattr__(self, "summary", summary)
        object.__setattr__(self, "keep", keep)


class View(Value):
    """What the model sees of a window by its newest compaction item."""

    __slots__ = ("at", "hidden", "message")

    hidden: frozenset[int]  # indexes the item stands for (the model does not read them)
    at: int  # the item's index, -1 when there is none
    message: dict[str, Any] | None  # what the item becomes: a user message giving its summary

    def __init__(self, hidden: frozenset[int], at: int, message: dict[str, Any] | None) -> None:
        object.__setattr__(self, "hidden", hidden)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "message", message)


NO_VIEW = View(frozenset(), -1, None)


def new_id() -> str:
    """A compaction item's id (``cmp_…``), made before its summary when a stream names it."""
    return ids.new_id(ids.COMPACTION)


def new_window(summary: str, visible: list[dict[str, Any]], keep_budget: int | None,
               seal: Seal, item_id: str | None = None) -> list[dict[str, Any]]:
    """The window a compaction leaves: the user messages of ``visible`` it keeps
    (:func:`kept_users`), then the ``compaction`` item standing for the rest, ``summary`` and
    the kept messages' keys sealed into its ``encrypted_content``. ``item_id``: the id a
    stream already named it by (``response.compaction.compacting``), else a new one."""
    kept = kept_users(visible, keep_budget)
    payload = {SUMMARY_KEY: summary, KEEP_KEY: [user_key(item) for item in kept]}
    item = {"id": item_id or new_id(), "type": "compaction",
            "encrypted_content": seal(payload)}
    return [*kept, item]


def user_key(item: dict[str, Any]) -> str:
    """A user message's identity across requests: its content, not its id (a client that
    sends easy messages gets a new id for the same message each time)."""
    content = item.get("content")
    raw = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(b"user\0" + raw).hexdigest()[:32]


def is_role(item: Any, *roles: str) -> bool:
    return (
        isinstance(item, dict)
        and (item.get("type") or ("message" if "role" in item else None)) == "message"
        and item.get("role") in roles
    )


def open_item(unseal: Opener, item: dict[str, Any], name: Callable[[], str]) -> Opened:
    """The summary and kept keys of a compaction item; a 400 for a blob this gateway did not
    seal for this tenant (or one that is not a compaction's), naming the item by ``name()``
    (asked only then)."""
    blob = item.get("encrypted_content")
    if not isinstance(blob, str):
        raise missing_parameter(f"{name()}.encrypted_content")
    try:
        opened = unseal(blob)
    except GatewayError as exc:
        raise invalid_request(
            "The encrypted content of a compaction item could not be verified; it was not "
            "produced by this gateway for this API key, or it was modified.",
            param=f"{name()}.encrypted_content", code="invalid_encrypted_content",
        ) from exc
    summary = opened.get(SUMMARY_KEY)
    keep = opened.get(KEEP_KEY)
    if not isinstance(summary, str) or not isinstance(keep, list):
        raise invalid_request(
            "The encrypted content is not a compaction item's (it was sealed for another "
            "kind of item).",
            param=f"{name()}.encrypted_content", code="invalid_encrypted_content",
        )
    return Opened(summary, tuple(k for k in keep if isinstance(k, str)))


def is_trigger(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == TRIGGER


def trigger_requested(turn_input: Any, items: list[dict[str, Any]]) -> bool:
    """Whether this turn's input (a create's parsed ``input``) ends with a
    ``compaction_trigger``; OpenAI's 400 for one that is not the final input item, and a 400
    when there is nothing before it in ``items`` (the whole conversation) to compact."""
    if not isinstance(turn_input, list):
        return False
    kinds = [getattr(item, "type", None) for item in turn_input]
    for index, kind in enumerate(kinds[:-1]):
        if kind == TRIGGER:
            raise invalid_request(
                "The 'compaction_trigger' item must be the final input item.",
                param=f"input[{index}]")
    if not kinds or kinds[-1] != TRIGGER:
        return False
    if all(is_trigger(item) for item in items):
        raise invalid_request(
            "Nothing to compact: the 'compaction_trigger' item needs earlier input or a "
            "'previous_response_id' or 'conversation' with items.", param="input")
    return True


def kept_users(items: list[dict[str, Any]], budget: int | None) -> list[dict[str, Any]]:
    """The user messages a compaction item keeps verbatim, oldest first: the newest whose
    estimated tokens fit ``budget`` (the latest always), all of them when it is None."""
    users = [item for item in items if is_role(item, "user")]
    if budget is None or not users:
        return users
    kept: list[dict[str, Any]] = []
    size = 0
    for item in reversed(users):
        cost = estimate(item.get("content"))
        if kept and size + cost > budget:
            break
        kept.append(item)
        size += cost
    kept.reverse()
    return kept


def compactable(items: list[dict[str, Any]]) -> bool:
    """Anything a summary could replace: items other than user and system messages."""
    return any(not is_role(item, "user", "system", "developer") for item in items)


def view(items: list[dict[str, Any]], unseal: Opener | None,
         name: Callable[[int], str]) -> View:
    """What the newest compaction item among ``items`` hides, and the message it becomes;
    ``name(i)`` says what the client called ``items[i]`` (for its 400 when it cannot be
    opened)."""
    at = latest(items)
    if at < 0:
        return NO_VIEW
    if unseal is None:
        raise invalid_request("Compaction items cannot be opened here.", param=name(at))
    opened = open_item(unseal, items[at], partial(name, at))
    return View(frozenset(superseded(items, at, opened)), at, summary_message(opened.summary))


def visible(items: list[dict[str, Any]], unseal: Opener) -> list[dict[str, Any]]:
    """The items the model would see, as a summary reads them: those the newest compaction
    item stands for are out (the item itself stays), and so are ``compaction_trigger`` items
    (which ask for this compaction)."""
    items = [item for item in items if not is_trigger(item)]
    hidden = view(items, unseal, "input[{}]".format).hidden
    return [item for index, item in enumerate(items) if index not in hidden]


def latest(items: list[dict[str, Any]]) -> int:
    """Index of the newest compaction item, -1 when there is none."""
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, dict) and item.get("type") == "compaction":
            return index
    return -1


def superseded(items: list[dict[str, Any]], at: int, opened: Opened) -> set[int]:
    """Indexes before the compaction item at ``at`` that the model no longer sees."""
    keep = Counter(opened.keep)
    gone: set[int] = set()
    for index in range(at):
        item = items[index]
        if is_role(item, "system", "developer"):
            continue
        if is_role(item, "user"):
            key = user_key(item)
            if keep[key] > 0:
                keep[key] -= 1
                continue
        gone.add(index)
    return gone


def summary_message(summary: str) -> dict[str, Any]:
    """The chat message a compaction item becomes."""
    return {"role": "user", "content": SUMMARY_INTRO + summary}

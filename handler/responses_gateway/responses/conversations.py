"""Conversations: what ``conversation`` on a create adds to a response, and the shared checks
of the Conversations API (``api/conversations.py``).

A turn on a conversation (``Turn``) is read, locked, then settled:

- ``begin``  reads the conversation's items (one store call): they come before this turn's
  input, whose item ids must be new to the conversation (OpenAI's "Duplicate item" 400);
- ``lock``   once the request is ready, takes the conversation's turn lock, conditional on
  nothing having been appended since the read: a second response on the same conversation
  meanwhile gets OpenAI's 400 ``conversation_locked`` instead of interleaving with this one;
- ``finish`` when the response ends: a ``completed`` or ``incomplete`` one appends its input
  and output items and releases the lock in one write; a ``failed`` or ``cancelled`` one
  appends nothing (the client may send the same input again) and only releases it. A
  foreground response's record goes in that same write, so a turn is one read and two
  writes; the lock's write cannot go, it is what answers a concurrent create with OpenAI's
  ``conversation_locked`` at create time.

The lock lapses ``LOCK_SECONDS`` after it was taken or last renewed, so a process that dies
mid-turn cannot hold a conversation forever; a running turn renews it every
``RENEW_SECONDS`` (``Turn.keep``), however long it runs. A background response settles its
turn in its worker's terminal write (``settle_of``: the record, the terminal events and the
append in one write). A response ended by someone else (cancelled, its worker lost) frees its
lock just after its record is written, so the next turn, finding the conversation still held
by a response that has ended, waits up to ``SETTLE_SECONDS`` for the release instead of
answering ``conversation_locked`` to a client that polled and continued at once.
Conversations, like OpenAI's, do not expire, but they are bounded (``StoreLimits``:
GATEWAY_MAX_CONVERSATION_ITEMS, GATEWAY_MAX_CONVERSATION_BYTES), since every turn reads all of
one: an item write that would pass a bound is refused, and so is a turn whose input would.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from responses_gateway import ids
from responses_gateway.errors import GatewayError, array_too_long, invalid_request, invalid_type
from responses_gateway.status import FINISHED_STATUSES, TERMINAL_STATUSES
from responses_gateway.store.base import (
    ConversationLocked,
    ConversationStore,
    DuplicateItem,
    StoredConversation,
    StoredResponse,
    TurnSettle,
)
from responses_gateway.translate.request import heavy, normalize_input, parse_create_request
from responses_gateway.translate.request_names import ENCRYPTED_REASONING, INCLUDABLE
from responses_gateway.translate.sealing import with_sealed_reasoning

if TYPE_CHECKING:
    from responses_gateway.translate.request_models import CreateResponseRequest

logger = logging.getLogger("responses_gateway")
CONVERSATION = "conv_"
MAX_ITEMS_PER_WRITE = 20  # OpenAI: "You may add up to 20 items at a time."
# The lock covers a background response's wait for its worker (up to 360 s in AWS) and then
# lapses this long after the last renewal if its process dies.
LOCK_SECONDS = 900.0
RENEW_SECONDS = 60.0  # a running turn moves the lapse this often
SETTLE_SECONDS = 3.0  # the next turn's wait for an ended background response's append
SETTLE_POLL_SECONDS = 0.05
APPENDED = FINISHED_STATUSES


def new_id() -> str:
    return ids.new_id(CONVERSATION)


def store_of(store: Any) -> ConversationStore:
    """The gateway's store as a ConversationStore (every store the gateway builds is one)."""
    return cast(ConversationStore, store)


def not_found(conversation_id: str) -> GatewayError:
    # OpenAI: 404, no param, no code.
    return GatewayError(404, f"Conversation with id '{conversation_id}' not found.")


def item_not_found(item_id: str, param: str = "item_id") -> GatewayError:
    """The path's item (``item_id``), or the ``after`` cursor naming no item of the list."""
    return GatewayError(404, f"Item with id '{item_id}' not found.", param=param)


# -- request pieces the Conversations API shares with POST /v1/responses -----------------------


async def read_items(raw: Any, param: str = "items") -> list[dict[str, Any]]:
    """:func:`parse_items`, in a worker thread when the items are heavy (20 of them may hold
    ~600,000 content parts, seconds of validation the event loop must not wait for)."""
    if heavy({"input": raw}):
        return await asyncio.to_thread(parse_items, raw, param)
    return parse_items(raw, param)


def parse_items(raw: Any, param: str = "items") -> list[dict[str, Any]]:
    """Items as OpenAI takes them in ``input``, validated and normalized by the same code
    (ids minted, content as parts); errors name ``items[…]`` instead of ``input[…]``."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid_type(param, "an array of input items", raw)
    if len(raw) > MAX_ITEMS_PER_WRITE:
        raise array_too_long(param, MAX_ITEMS_PER_WRITE, len(raw))
    try:
        req = parse_create_request({"model": "-", "input": raw})
    except GatewayError as exc:
        raise _renamed(exc, "input", param) from None
    items = normalize_input(req)
    seen: set[str] = set()
    for item in items:
        if item["id"] in seen:
            raise DuplicateItem(item["id"], param)
        seen.add(item["id"])
    return items


def parse_metadata(raw: Any) -> dict[str, str]:
    """``metadata`` with the create body's limits (16 pairs, keys 64, values 512)."""
    if raw is None:
        return {}
    return dict(parse_create_request({"model": "-", "metadata": raw}).metadata or {})


def parse_include(values: list[str]) -> frozenset[str]:
    for i, value in enumerate(values):
        if value not in INCLUDABLE:
            supported = ", ".join(f"'{v}'" for v in sorted(INCLUDABLE))
            raise invalid_request(
                f"Invalid value: '{value}'. Supported values are: {supported}.",
                param=f"include[{i}]",
                code="invalid_value",
            )
    return frozenset(values)


def for_client(item: dict[str, Any], include: frozenset[str]) -> dict[str, Any]:
    """A stored item as listed: sealed reasoning only when ``include`` asks for it."""
    if ENCRYPTED_REASONING not in include and "encrypted_content" in item:
        item = {k: v for k, v in item.items() if k != "encrypted_content"}
    return item


def _renamed(exc: GatewayError, old: str, new: str) -> GatewayError:
    if exc.param and exc.param.startswith(old):
        exc.param = new + exc.param[len(old) :]
        exc.message = exc.message.replace(f"'{old}", f"'{new}")
    return exc


# -- a response's turn ------------------------------------------------------------------------


@dataclass(slots=True)
class Turn:
    """One response's hold on a conversation, from its history read to its append."""

    store: ConversationStore
    conversation_id: str
    tenant: str
    length: int  # committed items when the history was read
    token: str = field(default_factory=lambda: secrets.token_hex(12))
    history: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    _keeper: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def held(self) -> dict[str, Any]:
        """What the response's record says of its turn (``turn_of`` reads it back)."""
        return {"id": self.conversation_id, "token": self.token, "length": self.length}

    async def lock(self) -> None:
        """Take the turn lock, conditional on nothing appended since the read. The token
        starts with the response's id (``begin``): a turn that finds the conversation held can
        tell whether the holder has already ended (its append is under way)."""
        taken = await self.store.lock_conversation(
            self.conversation_id,
            self.tenant,
            self.token,
            length=self.length,
            until=time.time() + LOCK_SECONDS,
        )
        if taken is None:
            raise not_found(self.conversation_id)
        if not taken:
            raise ConversationLocked()

    def keep(self) -> None:
        """Renew the lock every RENEW_SECONDS until the turn settles (``finish``/``release``):
        the response runs as long as it runs, its conversation stays its own."""
        if self._keeper is None and not self.done:
            self._keeper = asyncio.ensure_future(self._keep())

    def _stop_keeping(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()

    async def _keep(self) -> None:
        while not self.done:
            await asyncio.sleep(RENEW_SECONDS)
            if self.done:
                return
            try:
                held = await self.store.renew_conversation_lock(
                    self.conversation_id, self.token, time.time() + LOCK_SECONDS
                )
            except Exception:  # the next renewal tries again; the append reports a loss
                logger.warning("could not renew the lock of conversation %s",
                               self.conversation_id, exc_info=True)
                continue
            if not held:
                logger.warning("conversation %s: the turn lock was lost", self.conversation_id)
                return

    async def finish(self, job: Any, record: StoredResponse | None = None) -> None:
        """The response ended: append its items (completed, incomplete) or just let go.

        ``record`` (a foreground ``store=true`` response) is stored in the same atomic write:
        if the append fails, no record says ``completed`` and the response ends failed. The
        lock is then let go (best effort) so the conversation, unchanged, takes new turns."""
        if self.done:
            return
        self.done = True
        self._stop_keeping()
        try:
            await self._settle(job, record)
        except Exception:
            await self._let_go()  # a no-op if the write landed after all, or the lock is lost
            raise

    async def _settle(self, job: Any, record: StoredResponse | None) -> None:
        items = self._items_of(job)
        if items is None:
            await self.store.release_conversation(
                self.conversation_id, self.token, record=record
            )
            return
        await self.store.append_conversation_items(
            self.conversation_id,
            self.tenant,
            items,
            token=self.token,
            length=self.length,
            param="input",
            record=record,
        )

    @staticmethod
    def _items_of(job: Any) -> list[dict[str, Any]] | None:
        """What the ended response appends (input, then output with its sealed reasoning);
        None for a failed or cancelled one, which appends nothing."""
        response = job.translator.response
        if response.get("status") not in APPENDED:
            return None
        output = with_sealed_reasoning(response.get("output") or (),
                                       job.translator.sealed_reasoning)
        return [*job.record.input_items, *output]

    def settle_of(self, job: Any) -> TurnSettle:
        """The settle a background worker's terminal write carries (``append_events(turn=)``):
        the terminal record and the append land in one write, so a failed append leaves no
        record ``completed`` and the response ends failed. Call ``settled`` once it landed;
        if it did not, ``release`` lets the conversation go."""
        return TurnSettle(
            self.conversation_id, self.tenant, self.token, self.length, self._items_of(job)
        )

    def settled(self) -> None:
        """The terminal write carrying ``settle_of`` landed: the turn is over."""
        self.done = True
        self._stop_keeping()

    async def release(self) -> None:
        """The turn ends without a response (refused early, stopped): free the conversation."""
        if not self.done:
            self.done = True
            self._stop_keeping()
            await self._let_go()

    async def _let_go(self) -> None:
        """Best effort: if the store fails here too, the lock lapses after LOCK_SECONDS."""
        try:
            await self.store.release_conversation(self.conversation_id, self.token)
        except Exception:
            logger.warning("could not release conversation %s", self.conversation_id,
                           exc_info=True)


async def begin(
    store: Any, req: CreateResponseRequest, tenant: str, items: list[dict[str, Any]],
    response_id: str,
) -> Turn | None:
    """The turn of the response ``response_id`` on the conversation of a create with
    ``conversation`` (None without one), with the conversation's items; not locked yet."""
    if req.conversation is None:
        return None
    conversation_id = req.conversation
    conversation, history = await _unheld(store, conversation_id, tenant)
    held = {item.get("id") for item in history}
    for item in items:
        if item.get("id") in held:
            raise DuplicateItem(item["id"], "input")
    # The bounds, before any work: this turn's input must fit beside what the conversation
    # holds. Its output is admitted whole when it ends (a completed answer is never dropped),
    # so a conversation passes its bound by at most one response, then takes no more turns.
    store_of(store).limits.check_room(conversation, items, "input")
    return Turn(
        store_of(store), conversation_id, tenant, conversation.length,
        token=f"{response_id}.{secrets.token_hex(8)}", history=history,
    )


async def _unheld(
    store: Any, conversation_id: str, tenant: str
) -> tuple[StoredConversation, list[dict[str, Any]]]:
    """The conversation and its items, held by no other turn. One held by a turn whose
    response has already ended (a cancelled or lost background response frees it just after
    its record is written) is read again until that turn has let go; else, or if that takes
    longer than SETTLE_SECONDS, ``conversation_locked``."""
    found = await store_of(store).conversation_items(conversation_id, tenant)
    if found is None:
        raise not_found(conversation_id)
    conversation = found[0]
    if not conversation.locked:
        return found
    holder = conversation.holder or ""
    response_id = holder.partition(".")[0]
    if not response_id.startswith(ids.RESPONSE):
        raise ConversationLocked()
    record = await store.get(response_id, tenant)
    if record is None or record.status not in TERMINAL_STATUSES:
        raise ConversationLocked()  # still running: a real second response at the same time
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(SETTLE_POLL_SECONDS)
        found = await store_of(store).conversation_items(conversation.id, tenant)
        if found is None:
            raise not_found(conversation.id)
        if not found[0].locked or found[0].holder != holder:
            if found[0].locked:
                raise ConversationLocked()  # settled, then taken by another turn
            return found
    raise ConversationLocked()


def turn_of(store: Any, record: StoredResponse) -> Turn | None:
    """The turn a stored record holds (a background worker settles it in its own process)."""
    held = record.request.get("conversation")
    if not held:
        return None
    return Turn(
        store_of(store), held["id"], record.tenant, held["length"], token=held["token"]
    )


async def release_record(store: Any, record: StoredResponse) -> None:
    """A background response ended elsewhere (cancelled, its worker lost): free its turn."""
    turn = turn_of(store, record)
    if turn is not None:
        await turn.release()


__all__ = [
    "Turn",
    "begin",
    "for_client",
    "not_found",
    "parse_include",
    "parse_items",
    "parse_metadata",
    "read_items",
    "release_record",
    "turn_of",
]

"""Reasoning items of the translator (translate/stream.py): reasoning text and summaries, and
the signed or encrypted blocks some providers send beside them (``reasoning_details``, Bedrock
signatures), sealed for the tenant so a later turn can send them back upstream.

A mixin of :class:`~responses_gateway.translate.stream.ResponseTranslator`, kept apart so the
state machine's core reads in one screen; it uses the translator's state and helpers.
"""

from __future__ import annotations

from typing import Any

from responses_gateway import ids
from responses_gateway.translate.item_kinds import REASONING as _REASONING
from responses_gateway.translate.item_kinds import TranslationError

Event = dict[str, Any]


class ReasoningItems:
    __slots__ = ()

    def _reasoning(self, text: str, out: list[Event]) -> None:
        if text.__class__ is not str:
            raise TranslationError("reasoning text that is not a string")
        if self._kind != _REASONING:
            self._open_reasoning(out)
        if not self._pieces and self._content_index < 0:
            self._open_reasoning_part(out)
        self._fragment(text, out)

    def _reasoning_details(
        self, details: list[dict[str, Any]], take_text: bool, out: list[Event]
    ) -> None:
        """OpenRouter-style ``reasoning_details``: keep signatures and encrypted blobs.

        Their text duplicates ``reasoning``/``reasoning_content`` when those are present, so it
        is used only when the delta carries no plain reasoning string.
        """
        for detail in details:
            kind = detail.get("type")
            if kind == "reasoning.text" or kind == "reasoning.summary":
                text = detail.get("text") or detail.get("summary")
                if take_text and text:
                    self._reasoning(text, out)
                if text and self._kind == _REASONING:
                    self._detail_text.append(text)
                signature = detail.get("signature")
                if signature:
                    if self._kind != _REASONING:
                        self._open_reasoning(out)
                    self._signed_block(signature, _format_of(detail))
            elif kind == "reasoning.encrypted" and detail.get("data"):
                if self._kind != _REASONING:
                    self._open_reasoning(out)
                self._details.append(
                    {"type": "reasoning.encrypted", "data": detail["data"], **_format_of(detail)}
                )

    def _signed_block(self, signature: str, fmt: dict[str, Any]) -> None:
        """A signature ends one reasoning block; an item may hold several (Claude), and each
        must go back upstream with exactly its own text. The block's text is what its details
        carried (a whole ``chat.completion``), else the reasoning streamed since the last one."""
        self._details.append({
            "type": "reasoning.text", "signature": signature, **fmt,
            "text": "".join(self._detail_text), "end": len(self._pieces),
        })
        self._detail_text = []

    def _open_reasoning(self, out: list[Event]) -> None:
        if self._kind == _REASONING:
            return
        self._close(out, "completed")
        item: dict[str, Any] = {"id": ids.new_id(ids.REASONING), "type": "reasoning", "summary": []}
        if not self.options.summary:
            item["content"] = []
        self._kind = _REASONING
        self._details = []
        self._detail_text = []
        self._add_item(item, out)

    def _open_reasoning_part(self, out: list[Event]) -> None:
        self._content_index = 0
        if self.options.summary:
            out.append(
                self._event(
                    {
                        "type": "response.reasoning_summary_part.added",
                        "item_id": self._item_id,
                        "output_index": self._output_index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    }
                )
            )
        else:
            out.append(
                self._event(
                    {
                        "type": "response.content_part.added",
                        "item_id": self._item_id,
                        "output_index": self._output_index,
                        "content_index": 0,
                        "part": {"type": "reasoning_text", "text": ""},
                    }
                )
            )

    def _close_reasoning(self, item: dict[str, Any], out: list[Event]) -> None:
        base = {"item_id": self._item_id, "output_index": self._output_index}
        if self._content_index >= 0:
            text = "".join(self._pieces)
            if self.options.summary:
                part = {"type": "summary_text", "text": text}
                out.append(
                    self._event(
                        {
                            "type": "response.reasoning_summary_text.done",
                            **base,
                            "summary_index": 0,
                            "text": text,
                        }
                    )
                )
                out.append(
                    self._event(
                        {
                            "type": "response.reasoning_summary_part.done",
                            **base,
                            "summary_index": 0,
                            "part": part,
                        }
                    )
                )
                item["summary"].append(part)
            else:
                part = {"type": "reasoning_text", "text": text}
                out.append(
                    self._event(
                        {
                            "type": "response.reasoning_text.done",
                            **base,
                            "content_index": 0,
                            "text": text,
                        }
                    )
                )
                out.append(
                    self._event(
                        {
                            "type": "response.content_part.done",
                            **base,
                            "content_index": 0,
                            "part": part,
                        }
                    )
                )
                item["content"].append(part)
        if self._details and self.options.seal is not None:
            sealed = self.options.seal(
                {"reasoning_details": _merge_details(self._details, self._pieces)}
            )
            self.sealed_reasoning[item["id"]] = sealed
            if self.options.encrypted_reasoning:
                item["encrypted_content"] = sealed
        self._details = []
        self._detail_text = []


def _format_of(detail: dict[str, Any]) -> dict[str, Any]:
    fmt = detail.get("format")
    return {"format": fmt} if fmt else {}


def _merge_details(details: list[dict[str, Any]], pieces: list[str]) -> list[dict[str, Any]]:
    """Each signed block (text + signature) and encrypted blob, in the order they came.

    A block's text is the text its details carried or, when they carried none (streamed
    ``reasoning_content``), the pieces between the previous signature and this one; text after
    the last signature is unsigned and stays out (the upstream would reject it anyway).
    """
    merged: list[dict[str, Any]] = []
    start = 0
    for detail in details:
        if detail["type"] != "reasoning.text":
            merged.append(detail)
            continue
        end = detail["end"]
        entry: dict[str, Any] = {
            "type": "reasoning.text",
            "text": detail["text"] or "".join(pieces[start:end]),
            "signature": detail["signature"],
        }
        if detail.get("format"):
            entry["format"] = detail["format"]
        merged.append(entry)
        start = end
    return merged

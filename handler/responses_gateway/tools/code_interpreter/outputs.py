"""What one execution gives each reader: the model, the client, the final text.

- the model reads :func:`model_text`: stdout, stderr, the exception's traceback, what was cut,
  the files the code wrote (``/mnt/data/plot.png``, so it can link them as
  ``sandbox:/mnt/data/plot.png``), and, when the run timed out or crashed, that the container was
  reset (variables gone, files kept);
- the client reads the item's ``outputs`` (only with ``include: ["code_interpreter_call.outputs"]``,
  as OpenAI): an ``image`` output per figure the code showed (a data URL, as OpenAI's), then one
  ``logs`` output of what it printed. A figure is what a notebook would show: one the code left
  open, which the engines save as ``/mnt/data/figure_….png`` (containers/sandbox_runner.py,
  containers/agentcore.py); a file the code saved itself is a file, not an output, as with
  OpenAI (its recordings: ``savefig`` then ``show`` gives one image output);
- the final text's links to ``sandbox:/mnt/data/NAME`` become ``container_file_citation``
  annotations (:func:`citations`) spanning the link's target, and each figure shown gets one
  spanning nothing (indexes 0, 0), as OpenAI's do.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

DATA = "/mnt/data"
#: what an image output may be made from (by the file's name)
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif", ".webp": "image/webp"}
#: images one call returns as outputs at most (the rest stay container files)
MAX_IMAGES = 8
_SANDBOX_LINK = re.compile(r"sandbox:(/mnt/data/[^\s()\[\]<>\"']+)")
#: what the engines name a figure the code left open (the sandbox ``figure_1.png``, AgentCore
#: ``figure_<8 hex>.png``)
FIGURE = re.compile(r"/mnt/data/figure_[0-9a-f]+\.png")


def figure(path: str) -> bool:
    return FIGURE.fullmatch(path) is not None


def media_type(path: str) -> str | None:
    return IMAGE_TYPES.get(posixpath.splitext(path)[1].lower())


def logs(result: Any) -> str:
    """What the code printed, as OpenAI's ``logs`` output holds it: stdout, stderr, then the
    exception's traceback."""
    parts = [text for text in (result.stdout, result.stderr, result.error or "") if text]
    return "\n".join(part.rstrip("\n") for part in parts)


def model_text(result: Any, files: Sequence[str], *, timeout: float) -> str:
    """The call's output as the model reads it."""
    lines: list[str] = []
    printed = logs(result)
    if printed:
        lines.append(printed)
    if result.dropped:
        lines.append(f"[… {result.dropped} more bytes of output were cut]")
    if result.timed_out:
        lines.append(f"[The code ran past the {timeout:g}-second limit and was stopped. The "
                     f"container was reset: its variables and imports are gone, its files in "
                     f"{DATA} are kept.]")
    elif result.reset:
        lines.append(f"[The container's Python stopped (it crashed or ran out of memory) and "
                     f"was started again: its variables and imports are gone, its files in "
                     f"{DATA} are kept.]")
    if files:
        lines.append("[Files written: " + ", ".join(files)
                     + ". Link one for the user as sandbox:" + files[0] + "]")
    if not lines:
        lines.append("[The code ran and printed nothing.]")
    return "\n".join(lines)


def failed(result: Any) -> bool:
    """The call ends ``failed`` (OpenAI's status for a run that did not finish): it timed out
    or its process died. An exception of the code is a completed run whose logs show it."""
    return bool(result.timed_out or result.reset)


def shown(path: str, known: Mapping[str, str]) -> dict[str, Any]:
    """The citation of a figure the code showed: OpenAI's spans nothing (0, 0)."""
    return {"type": "container_file_citation", "container_id": known["container_id"],
            "file_id": known["id"], "filename": posixpath.basename(path), "start_index": 0,
            "end_index": 0}


def citations(text: str, files: Mapping[str, Mapping[str, str]], container_id: str | None
              ) -> list[dict[str, Any]]:
    """A ``container_file_citation`` for each ``sandbox:/mnt/data/NAME`` in ``text`` naming a
    container file this response knows (``files``: path -> ``{"id", "container_id"}``),
    spanning ``sandbox:…`` as OpenAI's does; never for a file it does not know."""
    if not files or "sandbox:" not in text:
        return []
    found = []
    for link in _SANDBOX_LINK.finditer(text):
        path = unquote(link.group(1)).rstrip(".,;:!?")
        known = files.get(path)
        if known is None:
            continue
        found.append({"type": "container_file_citation",
                      "container_id": known.get("container_id") or container_id or "",
                      "file_id": known["id"], "filename": posixpath.basename(path),
                      "start_index": link.start(),
                      "end_index": link.start() + len("sandbox:") + len(
                          link.group(1).rstrip(".,;:!?"))})
    return found

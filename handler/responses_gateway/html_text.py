"""An HTML page as its title and readable text, under a time and a size bound.

``html2text`` (on the stdlib's ``html.parser``) makes the text, and both are worse than linear
on some inputs a page may hold: 100 kB of unclosed ``<!--`` or of ``<a`` took 18-24 s here, and
nested lists grow as the square of their depth. So the parsing never runs on the event loop:
web_search's pages.py runs this module as a child process (child.py: ``python -m
responses_gateway.html_text SECONDS MOST < page.html``, answering JSON ``{"title", "text",
"cut"}``) and kills it at the page's deadline; where no child process can be started it runs
:func:`read_html` in a thread instead. Text extraction for vector stores (vectors/extract.py)
reads HTML files with the same :func:`read_html`, inside its own child.

Either way :func:`read_html` stops itself: past ``deadline`` (checked at every tag, text run
and piece of output) or past ``most`` characters of text it ends with what it has, marked
``cut``. The child also sets its own CPU-time limit, so it ends even if its parent is gone.

This module imports only the standard library, ``html2text`` and child.py: the child starts
without the rest of the gateway.
"""

from __future__ import annotations

import html
import json
import re
import sys
import time
from typing import Any

#: the longest page title kept (a title is a line; longer ones are cut)
TITLE_CHARS = 300
# literal patterns (no repetition that can backtrack): linear searches
_TITLE_OPEN = re.compile(r"<title(?=[\s/>])", re.IGNORECASE)
_TITLE_CLOSE = re.compile(r"</title", re.IGNORECASE)
_BLANK_LINES = re.compile(r"\n{3,}")


class _Stop(Exception):
    """The deadline or the size bound was reached: keep what was read so far."""


def title_of(page: str) -> str:
    """The text of the first ``<title>`` element, unescaped, its whitespace single spaces, at
    most :data:`TITLE_CHARS` long. Two literal searches and a ``find``, each linear in the page
    whatever it holds (the regex this replaces was quadratic in a run of unclosed ``<title>``
    tags: 280 kB took 92 s)."""
    found = _TITLE_OPEN.search(page)
    if found is None:
        return ""
    opened = page.find(">", found.end())
    closed = _TITLE_CLOSE.search(page, opened) if opened >= 0 else None
    if closed is None:
        return ""
    raw = page[opened + 1:min(closed.start(), opened + 1 + TITLE_CHARS * 8)]
    text = " ".join(html.unescape(raw).split())
    return text if len(text) <= TITLE_CHARS else text[:TITLE_CHARS].rstrip() + "…"


def read_html(page: str, most: int, deadline: float) -> dict[str, Any]:
    """``{"title", "text", "cut"}`` of ``page``: its text as Markdown-like lines (headings,
    lists, links kept; scripts, styles, images dropped), at most ``most`` characters; ``cut``
    when the text stops early because of ``most`` or ``deadline`` (``time.monotonic()``)."""
    import html2text

    class Converter(html2text.HTML2Text):
        """html2text with the deadline checked at every tag, text run and piece of output,
        and the size of its output counted."""

        size = 0

        def outtextf(self, s: str) -> None:
            super().outtextf(s)
            self.size += len(s)
            if self.size > most:
                raise _Stop
            _check(deadline)

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            _check(deadline)
            super().handle_starttag(tag, attrs)

        def handle_endtag(self, tag: str) -> None:
            _check(deadline)
            super().handle_endtag(tag)

        def handle_data(self, data: str, entity_char: bool = False) -> None:
            _check(deadline)
            super().handle_data(data, entity_char)

    converter = Converter()
    converter.body_width = 0  # no hard wrapping: it breaks find_in_page
    converter.ignore_images = True
    converter.ignore_emphasis = True
    converter.unicode_snob = True
    try:
        text, cut = converter.handle(page), False
    except _Stop:  # what was written so far (finish() was not reached)
        text, cut = "".join(converter.outtextlist).replace("&nbsp_place_holder;", "\u00a0"), True
    return {"title": title_of(page), "text": _squeeze(text[:most]), "cut": cut}


def _check(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise _Stop


def _squeeze(text: str) -> str:
    return _BLANK_LINES.sub("\n\n", text).strip()


def main(argv: list[str]) -> int:
    """The child: ``python -m responses_gateway.html_text SECONDS MOST``, the page (UTF-8) on
    stdin, JSON on stdout."""
    from responses_gateway.child import limit_cpu

    seconds, most = float(argv[1]), int(argv[2])
    limit_cpu(seconds)  # a backstop: the parent kills this process at its deadline
    deadline = time.monotonic() + seconds
    page = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    answer = json.dumps(read_html(page, most, deadline), ensure_ascii=False)
    sys.stdout.buffer.write(answer.encode("utf-8", errors="replace"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

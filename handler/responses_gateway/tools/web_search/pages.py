"""Opening a live page for the model: the SSRF rules, a size and a time limit, readable text.

The model names the URL, so it is a client's URL: every hop (redirects are followed by hand,
at most five) is parsed strictly and connected through net/pinned.py, which refuses a host
with any non-public address unless ``GATEWAY_WEB_ALLOW_HOSTS`` lists it, and pins the
connection to the address it checked. The body is read up to ``max_bytes`` and the whole
open, fetch and reading, bounded by ``timeout``. HTML becomes Markdown-like text by
``html2text`` (scripts, styles and images dropped, links kept so the model can follow them)
in a child process (html_text.py, started by child.py) that is killed at the deadline:
html.parser and html2text are worse than linear on some pages, and a page is anyone's. The
event loop only waits for it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from responses_gateway import html_text
from responses_gateway.child import run_module
from responses_gateway.html_text import title_of
from responses_gateway.net.bodies import read_capped
from responses_gateway.net.pinned import BadUrl, http_url, pinned_transport
from responses_gateway.net.policy import Refused, Resolver, allow_list, shown_url

__all__ = ["Page", "PageError", "PageLimits", "find", "open_page", "title_of"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: the share of the time left that the reader may use before it stops and gives what it read
#: (the rest is for its start and its answer; at the deadline itself it is killed)
_READER_SHARE = 0.8
CUT = ("\n\n[… the rest of this page was not read: it is too long, or took too long, to "
       "turn into text]")
_TEXT_TYPES = ("text/plain", "text/markdown", "application/json", "text/csv")
_HTML_TYPES = ("text/html", "application/xhtml+xml")


class PageError(Exception):
    """A page that could not be opened; the message is safe to show."""


@dataclass(frozen=True, slots=True)
class Page:
    url: str  # where the content came from (after redirects)
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class PageLimits:
    max_bytes: int = 2 * 1024 * 1024
    timeout: float = 15.0
    max_redirects: int = 5
    allow_hosts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, settings: Any) -> PageLimits:
        return cls(max_bytes=settings.web_page_max_bytes, timeout=settings.web_page_timeout,
                   allow_hosts=allow_list(settings.web_allow_hosts))


async def open_page(url: str, limits: PageLimits, *, resolver: Resolver | None = None,
                    transport: Any = None) -> Page:
    """The page at ``url`` as readable text, or :class:`PageError` saying why not."""
    try:
        async with asyncio.timeout(limits.timeout) as scope:
            return await _fetch(url, limits, resolver, transport, scope.when() or 0.0)
    except TimeoutError:
        raise PageError(f"{shown_url(url)} did not answer within {limits.timeout:g}s.") from None
    except BadUrl as exc:
        raise PageError(f"{shown_url(url)} cannot be opened: {exc}.") from None
    except Refused as exc:
        raise PageError(f"{shown_url(url)} cannot be opened: {exc}.") from None


async def _fetch(url: str, limits: PageLimits, resolver: Resolver | None,
                 inner: Any, deadline: float) -> Page:
    import httpx

    transport = pinned_transport(httpx, resolver=resolver, allow_hosts=limits.allow_hosts,
                                 inner=inner)
    async with httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False,
                                 timeout=limits.timeout) as client:
        current = http_url(url)
        for _ in range(limits.max_redirects + 1):
            request = client.build_request("GET", current, headers={
                "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
                "User-Agent": "responses-gateway web_search"})
            try:
                response = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise PageError(f"{shown_url(str(current))} could not be fetched "
                                f"({type(exc).__name__}).") from None
            try:
                if response.status_code in _REDIRECTS:
                    location = response.headers.get("location")
                    if not location:
                        raise PageError("A redirect without a Location header.")
                    current = http_url(location, base=current)
                    continue
                if response.status_code != 200:
                    raise PageError(f"{shown_url(str(current))} answered HTTP "
                                    f"{response.status_code}.")
                ctype = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
                if ctype not in _HTML_TYPES and ctype not in _TEXT_TYPES:
                    raise PageError(f"{shown_url(str(current))} is {ctype or 'untyped'}, "
                                    f"not a text page.")
                too_large = partial(PageError, f"{shown_url(str(current))} is larger than "
                                               f"{limits.max_bytes} bytes.")
                data = await read_capped(response, limits.max_bytes, too_large)
                encoding = response.charset_encoding or "utf-8"
            finally:
                await response.aclose()
            try:
                text = data.decode(encoding, errors="replace")
            except LookupError:
                text = data.decode("utf-8", errors="replace")
            if ctype in _HTML_TYPES:
                read = await _read_html(text, limits.max_bytes, deadline)
                if read is None:
                    raise PageError(f"{shown_url(str(current))} could not be read as text.")
                body = read["text"] + (CUT if read["cut"] else "")
                return Page(str(current), read["title"] or str(current), body)
            return Page(str(current), str(current), text)
        raise PageError(f"More than {limits.max_redirects} redirects from {shown_url(url)}.")


async def _read_html(page: str, most: int, deadline: float) -> dict[str, Any] | None:
    """html_text.read_html's answer for ``page`` (None: the reader failed), made in a child
    process that stops itself before ``deadline`` (the loop's clock) and is killed at it
    (asyncio's timeout cancels this wait); in a thread where no process can be started."""
    loop = asyncio.get_running_loop()
    seconds = max(0.0, (deadline - loop.time()) * _READER_SHARE)
    data = page.encode("utf-8", errors="replace")
    try:
        ended = await run_module(html_text.__name__, [f"{seconds:.3f}", str(most)], data)
    except (OSError, ValueError, NotImplementedError, RuntimeError):
        # no executable, or no child process on this platform or loop: a thread, still bounded
        return await asyncio.to_thread(html_text.read_html, page, most,
                                       time.monotonic() + seconds)
    if ended.returncode != 0:  # it failed, or passed its own CPU-time limit
        return None
    try:
        answer: dict[str, Any] = orjson.loads(ended.stdout)
    except orjson.JSONDecodeError:
        return None
    return answer


def find(text: str, pattern: str, *, context: int = 300, most: int = 8) -> list[str]:
    """Each place ``pattern`` occurs in ``text`` (any case), with ``context`` characters
    around it, at most ``most``; overlapping places are one."""
    if not pattern:
        return []
    lowered, needle = text.lower(), pattern.lower()
    found: list[str] = []
    start, last_end = 0, -1
    while len(found) < most:
        at = lowered.find(needle, start)
        if at < 0:
            break
        begin, end = max(0, at - context), min(len(text), at + len(needle) + context)
        if begin <= last_end and found:
            begin = last_end
            found[-1] += text[begin:end]
        else:
            found.append(text[begin:end])
        last_end = end
        start = at + len(needle)
    return found

"""Text from an uploaded file, by its name: plain text, Markdown, HTML, JSON, source code, and
PDF (pypdf, imported only for a PDF). Anything else is ``unsupported_file``.

A file is a tenant's, and reading it is CPU work whose cost its size does not tell: a 7 kB PDF
whose 25 pages share one 1 MB compressed content stream took pypdf 2-3 s a page here (84 s in
all, on the event loop, in issue 40); a 20 MB HTML file took 9.6 s (28 s in a thread beside a
busy loop). So :func:`extract_chunks` reads and chunks a file in a child process, under a time
bound (``GATEWAY_EXTRACT_TIMEOUT``) that is real: when it runs out, the child is killed. A
thread would keep the loop answering, but it cannot be stopped (the PDF would burn a core for
minutes after the file was given up) and it still takes the GIL from the loop; bounding pypdf's
work instead (pages, bytes of content stream) does not bound its time, which depends on what a
stream holds. The size bound is OpenAI's: a file holds at most 5,000,000 tokens
(``GATEWAY_MAX_FILE_TOKENS``), counted as chunking counts them, and counting stops there.
Either bound ends the file ``failed`` with ``last_error.code = invalid_file`` (what the file
holds is why); a child that dies, with ``server_error``.

The child is ``python -m responses_gateway.vectors.extract``, started by child.py (its own
environment, no secret of the gateway's; asyncio's subprocess, so no thread waits for it), fed
the file on stdin, answering JSON on stdout: ~0.1 s to start here, 0.4 s on a loaded machine.
A file of plain text, code or JSON up to :data:`INLINE_BYTES` skips the child: its reading is
linear in its size (~10 ms), done in a thread. HTML becomes text as web_search's pages do
(html_text.py, html2text), links and headings kept as Markdown.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import orjson

from responses_gateway.child import ChildTimeout, limit_cpu, run_module
from responses_gateway.vectors.chunking import TooManyTokens, chunk

logger = logging.getLogger("responses_gateway.vectors")
TEXT = {".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".log", ".tex", ".xml", ".yaml",
        ".yml", ".toml", ".ini", ".cfg"}
CODE = {".py", ".js", ".ts", ".tsx", ".jsx", ".java", ".c", ".h", ".cc", ".cpp", ".hpp",
        ".cs", ".go", ".rs", ".rb", ".php", ".sh", ".swift", ".kt", ".scala", ".sql", ".css",
        ".lua", ".pl", ".r", ".m"}
HTML = {".html", ".htm"}
READABLE = TEXT | CODE | HTML | {".json", ".jsonl", ".pdf"}
INLINE = TEXT | CODE | {".json", ".jsonl"}  # readers linear in the file's size
INLINE_BYTES = 256 * 1024  # such a file up to this size is read in a thread, not a child


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """What reading one file may cost (GATEWAY_EXTRACT_TIMEOUT, GATEWAY_MAX_FILE_TOKENS)."""

    timeout: float = 120.0  # seconds of its child process; 0: no bound
    max_tokens: int = 5_000_000  # OpenAI's bound on a file attached to a vector store

    @classmethod
    def of(cls, settings: Any) -> ExtractLimits:
        return cls(settings.extract_timeout, settings.max_file_tokens)


class Unsupported(Exception):
    """The file's type is not one we read (``last_error.code = unsupported_file``)."""


class Invalid(Exception):
    """The file claims a type it does not hold (``last_error.code = invalid_file``)."""


class Failed(Exception):
    """The child process reading the file ended without an answer (``server_error``)."""


async def extract_chunks(filename: str, data: bytes, strategy: dict[str, Any],
                         limits: ExtractLimits) -> list[str]:
    """The file's chunks per ``strategy``, read under ``limits``; :class:`Unsupported`,
    :class:`Invalid` (a bound passed too) or :class:`Failed`."""
    suffix = _suffix(filename)
    if suffix not in READABLE or (suffix in INLINE and len(data) <= INLINE_BYTES):
        kind, value = await asyncio.to_thread(_answer, filename, data, strategy,
                                              limits.max_tokens)
    else:
        kind, value = await _in_child(filename, data, strategy, limits)
    if kind == "ok":
        return value
    raise {"unsupported": Unsupported, "invalid": Invalid}.get(kind, Failed)(value)


def read_chunks(filename: str, data: bytes, strategy: dict[str, Any],
                max_tokens: int) -> list[str]:
    """The file's text, chunked, within ``max_tokens``."""
    try:
        return chunk(extract(filename, data), strategy, max_tokens)
    except TooManyTokens:
        raise Invalid(f"The file holds more than {max_tokens} tokens "
                      "(GATEWAY_MAX_FILE_TOKENS).") from None


async def _in_child(filename: str, data: bytes, strategy: dict[str, Any],
                    limits: ExtractLimits) -> tuple[str, Any]:
    """``read_chunks`` in a child process, killed when ``limits.timeout`` passes."""
    header = orjson.dumps({"filename": filename, "strategy": strategy,
                           "max_tokens": limits.max_tokens, "timeout": limits.timeout})
    try:
        ended = await run_module(__name__, [], header + b"\n" + data, limits.timeout)
    except ChildTimeout:
        return ("invalid", f"The file's text could not be extracted within "
                           f"{limits.timeout:g} s (GATEWAY_EXTRACT_TIMEOUT).")
    except OSError as exc:  # no child process here: a thread, without the time bound
        logger.warning("text extraction runs in a thread, no child process could run: %s",
                       exc)
        return await asyncio.to_thread(_answer, filename, data, strategy, limits.max_tokens)
    try:  # the chunks' JSON may be tens of MB: read off the loop
        kind, value = await asyncio.to_thread(orjson.loads, ended.stdout)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        logger.warning("text extraction ended with status %s: %s", ended.returncode,
                       ended.stderr[-500:].decode(errors="replace"))
        return ("failed", "The file's text could not be extracted (its reader ended with "
                          f"status {ended.returncode}).")
    return kind, value


def _answer(filename: str, data: bytes, strategy: dict[str, Any], max_tokens: int
            ) -> tuple[str, Any]:
    try:
        return ("ok", read_chunks(filename, data, strategy, max_tokens))
    except Unsupported as exc:
        return ("unsupported", str(exc))
    except Invalid as exc:
        return ("invalid", str(exc))
    except Exception as exc:  # a reader's bug, or a file it chokes on: server_error
        return ("failed", f"The file's text could not be extracted ({type(exc).__name__}).")


def _child() -> None:
    """The child process: a JSON header line and the file's bytes on stdin, the answer as
    JSON on stdout. Its CPU time is bounded too, should its parent be gone before it could
    kill it."""
    raw = sys.stdin.buffer.read()
    line, _, data = raw.partition(b"\n")
    header = orjson.loads(line)
    limit_cpu(header["timeout"] and header["timeout"] + 3)
    answer = _answer(header["filename"], data, header["strategy"], header["max_tokens"])
    try:
        out = orjson.dumps(answer)
    except orjson.JSONEncodeError:  # text JSON cannot carry (a lone surrogate from a PDF)
        out = orjson.dumps(("invalid", "The file's text is not valid Unicode."))
    sys.stdout.buffer.write(out)


def _suffix(filename: str) -> str:
    return PurePosixPath(filename.lower()).suffix


def extract(filename: str, data: bytes) -> str:
    suffix = _suffix(filename)
    if suffix == ".pdf":
        return _pdf(data)
    if suffix not in READABLE:
        raise Unsupported(f"Files of type '{suffix or filename}' are not supported for "
                          "vector stores.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Invalid(f"The file {filename!r} is not valid UTF-8 text.") from None
    if suffix in HTML:
        return _html(text)
    if suffix == ".json":
        try:
            return orjson.dumps(orjson.loads(text), option=orjson.OPT_INDENT_2).decode()
        except orjson.JSONDecodeError:
            raise Invalid(f"The file {filename!r} is not valid JSON.") from None
    return text


def _pdf(data: bytes) -> str:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:  # pragma: no cover - pypdf is a dependency
        raise Unsupported("PDF files need the pypdf package on this gateway.") from None
    try:
        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except (PdfReadError, ValueError, KeyError) as exc:
        raise Invalid(f"The PDF could not be read: {exc}") from None


def _html(text: str) -> str:
    """An HTML file's text as Markdown-like lines (html2text, as web_search reads pages); no
    deadline of its own: the child that runs it is killed at the file's."""
    from responses_gateway.html_text import read_html

    return read_html(text, sys.maxsize, float("inf"))["text"]


if __name__ == "__main__":
    _child()

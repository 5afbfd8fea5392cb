"""Text from an uploaded file, by its name: plain text, Markdown, HTML, JSON, source code, and
PDF (pypdf, imported only for a PDF). Anything else is ``unsupported_file``."""

from __future__ import annotations

import html.parser
import io
from pathlib import PurePosixPath
from typing import ClassVar

import orjson

TEXT = {".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".log", ".tex", ".xml", ".yaml",
        ".yml", ".toml", ".ini", ".cfg"}
CODE = {".py", ".js", ".ts", ".tsx", ".jsx", ".java", ".c", ".h", ".cc", ".cpp", ".hpp",
        ".cs", ".go", ".rs", ".rb", ".php", ".sh", ".swift", ".kt", ".scala", ".sql", ".css",
        ".lua", ".pl", ".r", ".m"}
HTML = {".html", ".htm"}


class Unsupported(Exception):
    """The file's type is not one we read (``last_error.code = unsupported_file``)."""


class Invalid(Exception):
    """The file claims a type it does not hold (``last_error.code = invalid_file``)."""


def extract(filename: str, data: bytes) -> str:
    suffix = PurePosixPath(filename.lower()).suffix
    if suffix == ".pdf":
        return _pdf(data)
    if suffix not in TEXT | CODE | HTML | {".json", ".jsonl"}:
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


class _Text(html.parser.HTMLParser):
    SKIP: ClassVar[frozenset[str]] = frozenset({"script", "style", "head", "template"})
    BLOCK: ClassVar[frozenset[str]] = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
         "pre", "table", "ul", "ol"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def _html(text: str) -> str:
    parser = _Text()
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)

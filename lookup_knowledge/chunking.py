"""Chunking: markdown along its headings (with breadcrumbs), then every section by size.

>>> [c.breadcrumb for c in chunk_document(doc, max_chars=1500)]  # doctest: +SKIP
['Runbook', 'Runbook > Failover', 'Runbook > Failover > Manual steps']
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from lookup_knowledge.adapters.corpus import SourceDocument

BREADCRUMB_SEPARATOR = " > "
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
CHUNKING = "sections+even-size"  # in each document's hash: a change re-chunks on the next ingest


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a document: its position, heading path and text."""

    chunk_index: int
    breadcrumb: str
    content: str

    @property
    def embedding_text(self) -> str:
        """What is embedded: the breadcrumb gives the chunk its document context."""
        return f"{self.breadcrumb}\n{self.content}" if self.breadcrumb else self.content


def chunk_document(doc: SourceDocument, max_chars: int) -> list[Chunk]:
    """All chunks of a document, numbered 0..n-1."""
    sections = _markdown_sections(doc) if doc.format == "markdown" else [(doc.title, doc.body)]
    pieces = [
        (breadcrumb, piece) for breadcrumb, text in sections for piece in split_by_size(text, max_chars)
    ]
    if not pieces:  # a document without body text is still known by its title and description
        pieces = [(doc.title, doc.description or doc.title or doc.doc_id)]
    return [Chunk(i, breadcrumb, content) for i, (breadcrumb, content) in enumerate(pieces)]


def _markdown_sections(doc: SourceDocument) -> list[tuple[str, str]]:
    """(breadcrumb, text) per heading section; code fences are not headings."""
    sections: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []
    lines: list[str] = []
    in_fence = False

    def flush() -> None:
        text = "\n".join(lines).strip()
        if text and not _is_only_heading(text):
            names = [doc.title] + [name for _, name in path if name != doc.title]
            sections.append((BREADCRUMB_SEPARATOR.join(n for n in names if n), text))
        lines.clear()

    for line in doc.body.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            path = [(lvl, name) for lvl, name in path if lvl < level]
            path.append((level, heading.group(2).strip()))
        lines.append(line)
    flush()
    return sections


def _is_only_heading(text: str) -> bool:
    return "\n" not in text and bool(_HEADING.match(text))


def split_by_size(text: str, max_chars: int) -> list[str]:
    """Pack paragraphs (then sentences, then hard cuts) into pieces of at most ``max_chars``,
    as even in size as the units allow.

    As many pieces as packing up to ``max_chars`` needs, each packed only up to the smallest size
    that still needs no more of them: a 1,300-character abstract becomes two pieces of about 650,
    not 1,000 and a 300-character tail whose vector is mostly its breadcrumb (docs/quality.md).
    """
    units = list(_units(text, max_chars))
    if not units:
        return []
    count = len(_packed(units, max_chars))
    low, high = max(map(len, units)), max_chars
    while low < high:  # the fewest pieces never grow with the size: bisect the smallest size
        middle = (low + high) // 2
        if len(_packed(units, middle)) <= count:
            high = middle
        else:
            low = middle + 1
    return _packed(units, low)


def _packed(units: list[str], size: int) -> list[str]:
    """Units in order, joined by blank lines into as few pieces of at most ``size`` as fit."""
    pieces: list[str] = []
    buffer = ""
    for unit in units:
        if buffer and len(buffer) + 2 + len(unit) > size:
            pieces.append(buffer)
            buffer = ""
        buffer = f"{buffer}\n\n{unit}" if buffer else unit
    if buffer.strip():
        pieces.append(buffer)
    return pieces


def _units(text: str, max_chars: int) -> Iterator[str]:
    for paragraph in re.split(r"\n[ \t]*\n", text.strip()):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= max_chars:
            yield paragraph
            continue
        for sentence in _SENTENCE_END.split(paragraph):
            for start in range(0, len(sentence), max_chars):
                yield sentence[start : start + max_chars]

"""Chunking: markdown along its headings (with breadcrumbs), then every section by size; each
chunk a verbatim excerpt of its source that says where it lies.

>>> [c.breadcrumb for c in chunk_document(doc, max_chars=1500)]  # doctest: +SKIP
['Runbook', 'Runbook > Failover', 'Runbook > Failover > Manual steps']

Every chunk's ``content`` is ``text[start_char:end_char]`` of its document's source text (the
file for markdown, after newline normalization; a JSONL record's ``text``): nothing is
stripped inside it or re-joined. The rules, in order:

- markdown blocks (found by markdown-it-py: paragraphs, fenced and indented code, tables,
  lists, block quotes, HTML) are never cut inside: a block longer than ``max_chars`` stays
  whole (a list is cut between its items) up to :data:`HARD_CAP_FACTOR` x ``max_chars``;
  only a block beyond that is cut at line ends (its fence, if any, then opens in one chunk
  and closes in another). A long paragraph is cut between sentences, a sentence longer than
  ``max_chars`` at ``max_chars``. A heading never ends a chunk: it goes with the block after it
  (headings with no text under them go with the next text, of whatever section; after the last
  text, with it);
- a document with no text but headings (a redirect page: frontmatter and a title) has no chunks:
  a title alone is never evidence (ingest skips the document and says why);
- a section's pieces are as even in size as its blocks allow (docs/quality.md);
- a chunk under :data:`MIN_CHUNK_CHARS` (or half of ``max_chars``, if less) joins its neighbour
  in the same document (the next one when it opens its section, as an introduction to what
  follows, else the one before), so the
  joined chunk is still one contiguous excerpt; it may then exceed ``max_chars`` by that much.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import accumulate

from markdown_it import MarkdownIt
from markdown_it.token import Token

from lookup_knowledge.adapters.corpus import SourceDocument

BREADCRUMB_SEPARATOR = " > "
MIN_CHUNK_CHARS = 150  # below this a chunk is mostly its breadcrumb: a link list, a table's intro
HARD_CAP_FACTOR = 8  # a block up to 8 x max_chars (8,000 characters by default) stays one chunk
# in each document's hash, so in its point ids: a change re-chunks every document and moves the
# store's own-question sample, and with it the bar (kept when a page without text was dropped)
CHUNKING = "verbatim-blocks+even-size+min150"
EMBEDDED_TEXT = "breadcrumb-newline-content"  # the form of Chunk.embedding_text: change it with it
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_HEADING_ATTRIBUTES = re.compile(r"\s*\{[#.:][^{}]*\}\s*$")  # {#setting-up-certificates}, {.class}
_SHORTCODE = re.compile(r"\{\{[<%].*?[%>]\}\}")  # Hugo's {{< new-in 0.1 >}} in a heading
_MARKDOWN = MarkdownIt("commonmark").enable("table")
_TEXT_TOKENS = ("text", "code_inline", "image")
_BLOCK_KINDS = {
    "heading_open": "heading", "paragraph_open": "paragraph",
    "bullet_list_open": "list", "ordered_list_open": "list",
}  # fmt: skip

Span = tuple[int, int]
_Headings = tuple[tuple[int, str], ...]  # (level, name) of the headings open at a point, outermost first


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """Where a chunk lies: characters ``[start_char, end_char)`` of the newline-normalized
    source text, and its first and last line (1-based; ``None`` for a JSONL record)."""

    start_char: int
    end_char: int
    start_line: int | None = None
    end_line: int | None = None
    page: int | None = None  # a converted document's page (PDF), slide (PPTX) or sheet (XLSX)
    slide: int | None = None
    sheet: str | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a document: its position, heading path, verbatim text and location."""

    chunk_index: int
    breadcrumb: str
    content: str
    location: SourceSpan
    heading_path: tuple[str, ...] = ()

    @property
    def embedding_text(self) -> str:
        """What is embedded (:data:`EMBEDDED_TEXT`): the breadcrumb gives the chunk its document
        context."""
        return f"{self.breadcrumb}\n{self.content}" if self.breadcrumb else self.content


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str  # heading | paragraph | list | other
    span: Span
    items: tuple[Span, ...] = ()  # a list's items
    level: int = 0  # a heading's level
    name: str = ""  # a heading's clean text


@dataclass(frozen=True, slots=True)
class _Section:
    heading_path: tuple[str, ...]
    units: list[Span]
    heading_end: int | None  # where its heading line(s) end; None: no heading


@dataclass(frozen=True, slots=True)
class _Piece:
    span: Span
    heading_path: tuple[str, ...]
    opens_section: bool
    weight: int  # characters besides the heading: which side of a join names the result


def chunk_document(doc: SourceDocument, max_chars: int, open_headings: _Headings = ()) -> list[Chunk]:
    """All chunks of a document, numbered 0..n-1 (none when it has no text but headings);
    ``open_headings``: the (level, name) headings its text continues under (a page of a converted
    document under the previous pages' headings)."""
    if doc.parts:
        return _part_chunks(doc, max_chars)
    if doc.format == "markdown":
        sections = _markdown_sections(doc.body, max_chars, open_headings)
    else:
        sections = [_Section((), _text_units(doc.body, 0, len(doc.body), max_chars), None)]
    pieces = [piece for section in sections for piece in _section_pieces(section, max_chars)]
    pieces = _joined_small(pieces, min(MIN_CHUNK_CHARS, max_chars // 2))
    return [
        Chunk(
            i, _breadcrumb(doc.title, p.heading_path), doc.body[p.span[0] : p.span[1]],
            _location(doc, p.span), tuple(name for name in p.heading_path if name),
        )
        for i, p in enumerate(pieces)
    ]  # fmt: skip


def _part_chunks(doc: SourceDocument, max_chars: int) -> list[Chunk]:
    """A converted document's chunks, page by page (slide, sheet): no chunk spans two, each says
    which it lies on, and a page's text before its first heading is under the last page's."""
    chunks: list[Chunk] = []
    headings: _Headings = ()
    for part in doc.parts:
        piece = replace(
            doc, body=doc.body[part.start : part.end], parts=(), body_offset=doc.body_offset + part.start,
            body_line=doc.body_line + doc.body.count("\n", 0, part.start),
        )  # fmt: skip
        where = {"sheet": part.name} if part.kind == "sheet" else {part.kind: part.number}
        for chunk in chunk_document(piece, max_chars, headings):
            located = replace(chunk.location, **where)
            chunks.append(replace(chunk, chunk_index=len(chunks), location=located))
        if piece.format == "markdown":
            headings = _open_after(piece.body, headings)
    return chunks


def split_by_size(text: str, max_chars: int) -> list[str]:
    """Plain text cut into pieces of at most ``max_chars`` between paragraphs (then sentences,
    then hard cuts), as even in size as the units allow; each piece a verbatim slice of ``text``.

    As many pieces as packing up to ``max_chars`` needs, each packed only up to the smallest size
    that still needs no more of them: a 1,300-character abstract becomes two pieces of about 650,
    not 1,000 and a 300-character tail whose vector is mostly its breadcrumb (docs/quality.md).
    """
    units = _text_units(text, 0, len(text), max_chars)
    return [text[units[a][0] : units[b - 1][1]] for a, b in _even_groups(units, max_chars)]


def clean_heading(text: str) -> str:
    """A heading as plain text: no ``{#anchor}`` attributes, shortcodes or inline markup."""
    raw = _SHORTCODE.sub("", _HEADING_ATTRIBUTES.sub("", text))
    tokens = _MARKDOWN.parseInline(raw)
    children = tokens[0].children or [] if tokens else []
    words = "".join(c.content if c.type in _TEXT_TOKENS else " " * (c.type == "softbreak") for c in children)
    return " ".join(words.split())


def _breadcrumb(title: str, heading_path: tuple[str, ...]) -> str:
    names = [title, *(name for name in heading_path if name != title)]
    return BREADCRUMB_SEPARATOR.join(name for name in names if name)


def _location(doc: SourceDocument, span: Span) -> SourceSpan:
    start, end = span
    if doc.format != "markdown":  # a record's text: no file lines to point at
        return SourceSpan(doc.body_offset + start, doc.body_offset + end)
    first = doc.body_line + doc.body.count("\n", 0, start)
    last = doc.body_line + doc.body.count("\n", 0, max(start, end - 1))
    return SourceSpan(doc.body_offset + start, doc.body_offset + end, first, last)


def _open_after(body: str, path: _Headings) -> _Headings:
    """The headings open at the end of ``body``, which began under ``path``."""
    for block in _blocks(body):
        if block.kind == "heading":
            outer = tuple((level, name) for level, name in path if level < block.level)
            path = (*outer, (block.level, block.name))
    return path


def _markdown_sections(body: str, max_chars: int, open_headings: _Headings = ()) -> list[_Section]:
    """The body's sections with text, each from its heading to the next heading, as size units;
    headings with no text under them are glued to the next text (after the last, to the last)."""
    sections: list[_Section] = []
    path: list[tuple[int, str]] = list(open_headings)
    heading: _Block | None = None
    blocks: list[_Block] = []
    bare: Span | None = None  # headings with no text under them yet: from the first to the last

    def close() -> None:
        nonlocal bare
        units = [u for b in blocks for u in _block_units(body, b, max_chars)]
        if not units:
            if heading is not None:
                bare = (bare or heading.span)[0], heading.span[1]
            return
        start = bare[0] if bare else heading.span[0] if heading else units[0][0]
        units[0] = (start, units[0][1])
        names = tuple(name for _, name in path)
        sections.append(_Section(names, units, heading.span[1] if heading else None))
        bare = None

    for block in _blocks(body):
        if block.kind != "heading":
            blocks.append(block)
            continue
        close()
        path = [(level, name) for level, name in path if level < block.level] + [(block.level, block.name)]
        heading, blocks = block, []
    close()
    if bare and sections:  # trailing headings with nothing under them: the last text keeps them
        last = sections[-1]
        last.units[-1] = (last.units[-1][0], bare[1])
    return sections


def _blocks(body: str) -> list[_Block]:
    """The top-level markdown blocks; each runs to the next one's first line (so text that
    makes no token, such as a link reference definition, stays with the block before it)."""
    tokens = _MARKDOWN.parse(body)
    starts = list(accumulate((len(line) + 1 for line in body.split("\n")), initial=0))
    last = len(starts) - 1  # the line count: starts[last] is one past the body's end
    found: list[tuple[int, str, int, str, list[int]]] = []  # first line, kind, level, name, item lines
    for index, token in enumerate(tokens):
        if token.level != 0 or token.nesting < 0 or token.map is None:
            continue
        kind = _BLOCK_KINDS.get(token.type, "other")
        heading = kind == "heading"
        level = int(token.tag[1:]) if heading else 0
        name = clean_heading(tokens[index + 1].content) if heading else ""
        found.append((token.map[0], kind, level, name, _item_lines(tokens, index) if kind == "list" else []))
    if body[: starts[found[0][0]] if found else len(body)].strip():  # text that makes no token first
        found.insert(0, (0, "other", 0, "", []))
    if not found:
        return []

    def span(first: int, end: int) -> Span:
        return _trimmed_end(body, starts[first], starts[end] - 1 if end < last else len(body))

    ends = [line for line, *_ in found[1:]] + [last]
    blocks = [
        _Block(kind, span(line, end), tuple(map(span, items, [*items[1:], end])), level, name)
        for (line, kind, level, name, items), end in zip(found, ends, strict=True)
    ]
    return [b for b in blocks if b.span[1] > b.span[0]]


def _item_lines(tokens: list[Token], list_index: int) -> list[int]:
    """First lines of the items of the top-level list opened at ``list_index``."""
    lines = []
    for token in tokens[list_index + 1 :]:
        if token.level == 0:  # the list's own closing token
            break
        if token.type == "list_item_open" and token.level == 1 and token.map is not None:
            lines.append(token.map[0])
    return lines


def _trimmed_end(text: str, start: int, end: int) -> Span:
    return start, start + len(text[start:end].rstrip())


def _block_units(body: str, block: _Block, max_chars: int) -> list[Span]:
    """The size units of one block: the whole block when it fits, else its safe parts."""
    start, end = block.span
    if end - start <= max_chars:
        return [block.span]
    if block.kind == "paragraph":
        return _sentence_units(body, start, end, max_chars)
    if block.kind == "list":
        return [unit for item in block.items for unit in _whole_or_lines(body, item, max_chars)]
    return _whole_or_lines(body, block.span, max_chars)


def _whole_or_lines(text: str, span: Span, max_chars: int) -> list[Span]:
    """The span whole up to the hard cap; beyond it, its nonblank lines (cut at ``max_chars``)."""
    start, end = span
    if end - start <= HARD_CAP_FACTOR * max_chars:
        return [span]
    units: list[Span] = []
    for match in re.finditer(r"[^\n]+", text[start:end]):
        if match.group().strip():
            units.extend(_hard_cuts(start + match.start(), start + match.end(), max_chars))
    return units


def _text_units(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """Paragraphs of plain text (blank-line separated), a long one as its sentences."""
    units: list[Span] = []
    position = start
    for gap in [*_PARAGRAPH_BREAK.finditer(text, start, end), None]:
        paragraph = _stripped(text, position, gap.start() if gap else end)
        if paragraph:
            a, b = paragraph
            units.extend([paragraph] if b - a <= max_chars else _sentence_units(text, a, b, max_chars))
        position = gap.end() if gap else end
    return units


def _sentence_units(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    units: list[Span] = []
    position = start
    for gap in [*_SENTENCE_END.finditer(text, start, end), None]:
        stop = gap.start() if gap else end
        units.extend(_hard_cuts(position, stop, max_chars))
        position = gap.end() if gap else end
    return units


def _hard_cuts(start: int, end: int, max_chars: int) -> list[Span]:
    return [(at, min(at + max_chars, end)) for at in range(start, end, max_chars)]


def _stripped(text: str, start: int, end: int) -> Span | None:
    piece = text[start:end]
    if not piece.strip():
        return None
    lead = len(piece) - len(piece.lstrip())
    return start + lead, start + len(piece.rstrip())


def _section_pieces(section: _Section, max_chars: int) -> list[_Piece]:
    units = section.units
    pieces = []
    for a, b in _even_groups(units, max_chars):
        span = (units[a][0], units[b - 1][1])
        opens = a == 0 and section.heading_end is not None
        heading = section.heading_end - span[0] if opens and section.heading_end else 0
        pieces.append(_Piece(span, section.heading_path, opens, span[1] - span[0] - heading))
    return pieces


def _even_groups(units: list[Span], max_chars: int) -> list[Span]:
    """Units grouped (index ranges) into as few pieces as packing up to ``max_chars`` needs,
    each only up to the smallest size that still needs no more of them."""
    if not units:
        return []
    count = len(_packed(units, max_chars))
    low = max((b - a for a, b in units if b - a <= max_chars), default=max_chars)
    high = max_chars
    while low < high:  # the fewest pieces never grow with the size: bisect the smallest size
        middle = (low + high) // 2
        if len(_packed(units, middle)) <= count:
            high = middle
        else:
            low = middle + 1
    return _packed(units, low)


def _packed(units: list[Span], size: int) -> list[Span]:
    """Greedy: each group of consecutive units spans at most ``size`` characters (a unit
    longer than that alone)."""
    groups: list[Span] = []
    first = 0
    for index in range(1, len(units)):
        if units[index][1] - units[first][0] > size:
            groups.append((first, index))
            first = index
    groups.append((first, len(units)))
    return groups


def _joined_small(pieces: list[_Piece], min_chars: int) -> list[_Piece]:
    """Pieces under ``min_chars`` joined to a neighbour until none is left (or one piece)."""
    pieces = list(pieces)
    while len(pieces) > 1:
        small = next((i for i, p in enumerate(pieces) if p.span[1] - p.span[0] < min_chars), None)
        if small is None:
            break
        forward = small == 0 or (pieces[small].opens_section and small + 1 < len(pieces))
        first = small if forward else small - 1
        pieces[first : first + 2] = [_joined(pieces[first], pieces[first + 1])]
    return pieces


def _joined(before: _Piece, after: _Piece) -> _Piece:
    """Two adjacent pieces as one; the one with more text besides its heading names it."""
    named = before if before.weight > after.weight else after
    return replace(
        named,
        span=(before.span[0], after.span[1]),
        opens_section=before.opens_section,
        weight=before.weight + after.weight,
    )

"""Corpus readers: a folder of markdown files with YAML frontmatter (and documents: PDF, DOCX,
HTML, PPTX, XLSX, converted to markdown by :mod:`~lookup_knowledge.adapters.documents`), one
document file, or a BEIR-style JSONL corpus.

A bad file never aborts a read: it is skipped and reported with its reason.

>>> corpus = read_corpus("docs/")  # doctest: +SKIP
>>> corpus.documents[0].doc_id, corpus.skipped  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import frontmatter
import yaml

from lookup_knowledge.adapters.documents import (
    DOCUMENT_SUFFIXES,
    ConversionWorker,
    DocumentLimits,
    DocumentSkip,
    Part,
    TextFormat,
    load_converted,
    missing_extra,
    save_converted,
)
from lookup_knowledge.adapters.source_files import SourceFile
from lookup_knowledge.adapters.text import (
    MAX_ID_CHARS,
    escape_surrogates,
    first_line,
    printable_id,
    printable_path,
)

MARKDOWN_SUFFIXES = (".md", ".markdown")
JSONL_CORPUS_NAME = "corpus.jsonl"
_SUFFIXES = (*MARKDOWN_SUFFIXES, *DOCUMENT_SUFFIXES)
MAX_ALIAS_EXPANSION = 65_536  # characters YAML aliases may add to a frontmatter header ("billion laughs")


class CorpusError(ValueError):
    """The source as a whole cannot be read (missing, empty, unsupported)."""


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """One knowledge document as read from its source, before chunking."""

    doc_id: str
    source: str
    title: str
    body: str
    format: TextFormat
    categories: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    description: str | None = None
    doc_type: str | None = None
    body_offset: int = 0  # where ``body`` starts in the source text (after its frontmatter)
    body_line: int = 1  # the source line ``body`` starts on (1-based)
    file: SourceFile | None = None  # the file it was read from (markdown folders); None: a JSONL record
    parts: tuple[Part, ...] = ()  # a converted document's pages, slides or sheets (ranges of ``body``)
    access: tuple[str, ...] | None = None  # who may see it (frontmatter/JSONL ``access``); None: unsaid


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file (or JSONL record) not read, and why; ``doc_source`` is the ``source`` its document
    carries in the store, ``None`` when that is unknown (a JSONL record that does not parse)."""

    path: str
    reason: str
    doc_source: str | None = None


@dataclass
class Corpus:
    documents: list[SourceDocument] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)


def read_corpus(
    source: str | Path,
    max_file_bytes: int = 2_000_000,
    *,
    allow_outside_root: bool = False,
    max_record_bytes: int = 2_000_000,
    document_limits: DocumentLimits | None = None,
    converted_dir: Path | None = None,
    on_file: Callable[[int, int], None] | None = None,
) -> Corpus:
    """Read a markdown folder (with any documents in it), a document file, a ``.jsonl`` file, or a
    BEIR folder holding ``corpus.jsonl``; ``on_file`` is told (files read, files in all) after
    each file of a folder or a document (not after each JSONL record).

    Documents are converted within ``document_limits``; their converted text is kept in
    ``converted_dir`` (by file version) and read from there while the file is unchanged.

    Files that resolve outside the folder (through a symbolic link) are skipped unless
    ``allow_outside_root``: a link must not turn e.g. ``/etc/passwd`` into evidence. Markdown
    files over ``max_file_bytes`` and JSONL records (lines) over ``max_record_bytes`` are
    skipped unread, as are frontmatter headers whose YAML aliases expand beyond
    :data:`MAX_ALIAS_EXPANSION` characters.
    """
    path = Path(source)
    if not path.exists():
        raise CorpusError(f"source not found: {path}")
    if path.is_file():
        if path.suffix == ".jsonl":
            return _dedupe(_read_jsonl(path, max_record_bytes))
        if path.suffix.lower() in DOCUMENT_SUFFIXES:
            tick = _counter(1, on_file)
            return _read_documents(Corpus(), path.parent, [path], True, document_limits, converted_dir, tick)
        raise CorpusError(f"unsupported source file {path}: give a folder, a document or a .jsonl corpus")
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in _SUFFIXES and not p.is_dir())
    markdown = [p for p in files if p.suffix.lower() in MARKDOWN_SUFFIXES]
    documents = [p for p in files if p.suffix.lower() in DOCUMENT_SUFFIXES]
    if markdown or documents:
        tick = _counter(len(files), on_file)
        corpus = _read_markdown_folder(path, markdown, max_file_bytes, allow_outside_root, tick)
        corpus = _read_documents(
            corpus, path, documents, allow_outside_root, document_limits, converted_dir, tick
        )
        return _dedupe(corpus)
    if (path / JSONL_CORPUS_NAME).is_file():
        return _dedupe(_read_jsonl(path / JSONL_CORPUS_NAME, max_record_bytes))
    raise CorpusError(f"no markdown files (*.md), documents or {JSONL_CORPUS_NAME} found in {path}")


def _counter(total: int, on_file: Callable[[int, int], None] | None) -> Callable[[], None]:
    """What each read file calls: ``on_file`` with the count so far (nothing without one)."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_file is not None:
            on_file(done, total)

    return tick


def _dedupe(corpus: Corpus) -> Corpus:
    seen: set[str] = set()
    unique: list[SourceDocument] = []
    for doc in corpus.documents:
        if doc.doc_id in seen:
            reason = f"duplicate document id {doc.doc_id!r}"
            corpus.skipped.append(SkippedFile(doc.source, reason, doc.source))
            continue
        seen.add(doc.doc_id)
        unique.append(doc)
    corpus.documents = unique
    return corpus


def _read_markdown_folder(
    root: Path, files: list[Path], max_file_bytes: int, allow_outside: bool, tick: Callable[[], None]
) -> Corpus:
    corpus = Corpus()
    real_root = root.resolve()
    for file in files:
        relative = printable_path(file.relative_to(root).as_posix())
        try:
            if not (allow_outside or file.resolve().is_relative_to(real_root)):
                raise _Skip("links outside the knowledge-base folder (ingest.allow_outside_root)")
            corpus.documents.append(_read_markdown(file, relative, max_file_bytes))
        except _Skip as skip:
            corpus.skipped.append(SkippedFile(relative, str(skip), relative))
        except RuntimeError:  # Path.resolve() before Python 3.13 ("Symlink loop from ...")
            corpus.skipped.append(SkippedFile(relative, "unreadable: symbolic link loop", relative))
        except OSError as exc:  # dangling symlink, link loop (3.13), permission denied, vanished file
            corpus.skipped.append(SkippedFile(relative, f"unreadable: {exc.strerror or exc}", relative))
        tick()
    return corpus


def _read_documents(
    corpus: Corpus,
    root: Path,
    files: list[Path],
    allow_outside: bool,
    limits: DocumentLimits | None,
    converted_dir: Path | None,
    tick: Callable[[], None],
) -> Corpus:
    """Documents converted one by one in a worker process (started only when a file is not
    already converted); a file that cannot be is skipped and named with the reason."""
    limits = limits or DocumentLimits()
    missing = missing_extra() if files else None
    real_root = root.resolve()
    with ConversionWorker(limits) as worker:
        for file in files:
            relative = printable_path(file.relative_to(root).as_posix())
            try:
                if missing:
                    raise _Skip(missing)
                if not (allow_outside or file.resolve().is_relative_to(real_root)):
                    raise _Skip("links outside the knowledge-base folder (ingest.allow_outside_root)")
                corpus.documents.append(_read_document(file, relative, worker, converted_dir))
            except (_Skip, DocumentSkip) as skip:
                corpus.skipped.append(SkippedFile(relative, str(skip), relative))
            except RuntimeError:  # Path.resolve() before Python 3.13 ("Symlink loop from ...")
                corpus.skipped.append(SkippedFile(relative, "unreadable: symbolic link loop", relative))
            except OSError as exc:
                corpus.skipped.append(SkippedFile(relative, f"unreadable: {exc.strerror or exc}", relative))
            tick()
    return corpus


def _read_document(
    file: Path, relative: str, worker: ConversionWorker, converted_dir: Path | None
) -> SourceDocument:
    size, limit = file.stat().st_size, worker.limits.max_bytes
    if size > limit:
        raise _Skip(f"file too large ({size:,} bytes > ingest.documents.max_bytes {limit:,})")
    stamp, raw = SourceFile.read(file)
    converted = load_converted(converted_dir, stamp.version)
    if converted is None:
        converted = worker.convert(raw, file.suffix)
        save_converted(converted_dir, stamp.version, converted)
    return SourceDocument(
        doc_id=_document_id(relative),
        source=relative,
        title=converted.title or Path(relative).stem,
        body=converted.text,
        format=converted.format,
        file=stamp,
        parts=converted.parts,
    )


class _Skip(Exception):
    """Internal: why one file is skipped."""


def _read_markdown(file: Path, relative: str, max_file_bytes: int) -> SourceDocument:
    size = file.stat().st_size
    if size > max_file_bytes:
        raise _Skip(f"file too large ({size:,} bytes > ingest.max_file_bytes {max_file_bytes:,})")
    stamp, raw = SourceFile.read(file)
    if b"\x00" in raw:
        raise _Skip("binary content (NUL bytes)")
    try:
        text = normalized_newlines(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise _Skip(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    meta, body, offset = _frontmatter(text)
    access = _access(meta.get("access"))
    return SourceDocument(
        doc_id=_document_id(_text(meta.get("id")) or relative),
        source=relative,
        title=_text(meta.get("title")) or _first_heading(body) or Path(relative).stem,
        body=body,
        format="markdown",
        categories=_strings(meta.get("domain", meta.get("category"))),
        keywords=_strings(meta.get("keywords")) + _strings(meta.get("tags")),
        entities=_strings(meta.get("entities")),
        description=_text(meta.get("description")),
        doc_type=_text(meta.get("doc_type") or meta.get("type")),
        body_offset=offset,
        body_line=text.count("\n", 0, offset) + 1,
        file=stamp,
        access=access,
    )


def normalized_newlines(text: str) -> str:
    """Text with ``\r\n`` and lone ``\r`` line ends as ``\n``: the text chunk offsets count in."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _frontmatter(text: str) -> tuple[dict[str, Any], str, int]:
    """The YAML frontmatter mapping, the body (stripped) and where the body starts in ``text``
    (python-frontmatter alone drops a list or scalar header silently: such a file is skipped
    and named instead)."""
    handler = frontmatter.YAMLHandler()
    if not handler.detect(text.strip()):
        return {}, *_stripped_tail(text, 0)
    try:
        header, body = handler.split(text.strip())  # the body is the tail of the text
        meta = _load_yaml(header)
    except ValueError:  # no closing delimiter: python-frontmatter reads it all as body
        return {}, *_stripped_tail(text, 0)
    except yaml.YAMLError as exc:
        raise _Skip(f"broken YAML frontmatter: {first_line(exc)}") from None
    if meta is not None and not isinstance(meta, dict):
        raise _Skip(f"frontmatter is a {type(meta).__name__}, not a mapping of fields")
    return meta or {}, *_stripped_tail(text, len(text.rstrip()) - len(body))


def _stripped_tail(text: str, start: int) -> tuple[str, int]:
    """``text[start:]`` stripped, and the offset in ``text`` where what is left begins."""
    tail = text[start:]
    return tail.strip(), start + len(tail) - len(tail.lstrip())


_Node = yaml.MappingNode | yaml.SequenceNode | yaml.ScalarNode


def _load_yaml(header: str) -> Any:
    """Safe YAML with its aliases bounded before they are expanded: the composed node graph
    (shared where aliases point) is sized as if expanded, and refused when aliases would add
    more than :data:`MAX_ALIAS_EXPANSION` characters or refer to themselves."""
    loader = yaml.CSafeLoader(header) if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader(header)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded = _expanded_size(node)
        if expanded > len(header) + MAX_ALIAS_EXPANSION:
            raise _Skip(
                f"YAML frontmatter aliases expand it to {expanded:,} characters "
                f"(at most {MAX_ALIAS_EXPANSION:,} more than its {len(header):,}): refused unexpanded"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(root: _Node) -> int:
    """Characters of scalar text plus one per node, counting every alias as a full copy; each
    node is visited once (iteratively, so deep nesting is fine). A cycle raises :class:`_Skip`."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[_Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            open_nodes.discard(key)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _Skip("YAML frontmatter has a recursive alias (a node that contains itself)")
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1 + len(node.value)
            continue
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: _Node) -> list[_Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def _read_jsonl(file: Path, max_record_bytes: int) -> Corpus:
    corpus = Corpus()
    for number, record in _jsonl_records(file, corpus, max_record_bytes):
        doc_id = _text(record.get("_id"))
        text = record.get("text")
        if not doc_id or not isinstance(text, str):
            source = _text(record.get("source")) or doc_id
            printable = printable_id(source)[:MAX_ID_CHARS] if source else None
            corpus.skipped.append(SkippedFile(f"{file.name}:{number}", "missing _id or text", printable))
            continue
        title = _text(record.get("title")) or ""
        source = printable_id(_text(record.get("source")) or doc_id)
        try:
            access = _access(record.get("access"))
            doc_id = _document_id(doc_id)
        except _Skip as skip:
            corpus.skipped.append(SkippedFile(f"{file.name}:{number}", str(skip), source[:MAX_ID_CHARS]))
            continue
        corpus.documents.append(
            SourceDocument(
                doc_id=doc_id,
                source=source,
                title=title,
                body=normalized_newlines(text),
                format="text",
                categories=_strings(record.get("category")),
                keywords=_strings(record.get("keywords")),
                entities=_strings(record.get("entities")),
                access=access,
            )
        )
    return corpus


def _jsonl_records(file: Path, corpus: Corpus, max_record_bytes: int) -> Iterator[tuple[int, dict[str, Any]]]:
    with file.open("rb") as handle:
        for number, line, size in _bounded_lines(handle, max_record_bytes):
            where = f"{printable_path(file.name)}:{number}"
            if size > max_record_bytes:
                reason = f"record too large ({size:,} bytes > ingest.max_record_bytes {max_record_bytes:,})"
                corpus.skipped.append(SkippedFile(where, reason))
                continue
            if not line.strip():
                continue
            try:  # utf-8-sig: a byte-order mark before the first record is not part of it
                record = json.loads(line.decode("utf-8-sig" if number == 1 else "utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                corpus.skipped.append(SkippedFile(where, f"invalid JSON: {first_line(exc)}"))
                continue
            if isinstance(record, dict):
                yield number, _printable_record(record)
            else:
                corpus.skipped.append(SkippedFile(where, "not a JSON object"))


def _printable_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record with lone surrogates in its fields (strings, lists of strings) escaped."""
    return {key: _printable_value(value) for key, value in record.items()}


def _printable_value(value: Any) -> Any:
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, list):
        return [escape_surrogates(item) if isinstance(item, str) else item for item in value]
    return value


def _bounded_lines(handle: IO[bytes], limit: int) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line, its size in bytes without the line break); a line over ``limit``
    is read past in pieces and comes back empty, so no record larger than that is held."""
    number = 0
    while first := handle.readline(limit + 2):
        number += 1
        size, tail = len(first), first[-2:]  # tail: the line's last two bytes
        while not tail.endswith(b"\n") and (piece := handle.readline(limit + 2)):
            size, tail = size + len(piece), (tail + piece)[-2:]
        size -= 2 if tail == b"\r\n" else 1 if tail.endswith(b"\n") else 0
        yield number, (first if size <= limit else b""), size


def _document_id(text: str) -> str:
    """A document id as stored and returned: control characters escaped (:func:`printable_id`),
    at most :data:`MAX_ID_CHARS` characters (a longer one skips its document)."""
    doc_id = printable_id(text)
    if len(doc_id) > MAX_ID_CHARS:
        raise _Skip(f"document id too long ({len(doc_id):,} characters > {MAX_ID_CHARS:,})")
    return doc_id


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _strings(value: Any) -> tuple[str, ...]:
    """A frontmatter field that may be a string or a list, as a tuple of nonblank strings."""
    if value is None:
        return ()
    items = value if isinstance(value, list | tuple) else [value]
    return tuple(text for item in items if (text := _text(item)))


def _access(value: Any) -> tuple[str, ...] | None:
    """A document's ``access`` field: the principals (a string or a list of them) that may see it;
    ``None`` when the field is absent or null (the configured default applies). Anything else (a
    mapping, a number, a list holding one) is refused, so a mistyped field never widens access."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise _Skip("access must be a principal name or a list of them (strings)")
    return tuple(dict.fromkeys(text for item in items if (text := item.strip())))


def _first_heading(body: str) -> str | None:
    for line in body.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None

"""Corpus readers: a folder of markdown files with YAML frontmatter, or a BEIR-style JSONL corpus.

A bad file never aborts a read: it is skipped and reported with its reason.

>>> corpus = read_corpus("docs/")  # doctest: +SKIP
>>> corpus.documents[0].doc_id, corpus.skipped  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import frontmatter
import yaml

MARKDOWN_SUFFIXES = (".md", ".markdown")
JSONL_CORPUS_NAME = "corpus.jsonl"


class CorpusError(ValueError):
    """The source as a whole cannot be read (missing, empty, unsupported)."""


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """One knowledge document as read from its source, before chunking."""

    doc_id: str
    source: str
    title: str
    body: str
    format: Literal["markdown", "text"]
    categories: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    description: str | None = None
    doc_type: str | None = None


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
    source: str | Path, max_file_bytes: int = 2_000_000, *, allow_outside_root: bool = False
) -> Corpus:
    """Read a markdown folder, a ``.jsonl`` file, or a BEIR folder holding ``corpus.jsonl``.

    Files that resolve outside the folder (through a symbolic link) are skipped unless
    ``allow_outside_root``: a link must not turn e.g. ``/etc/passwd`` into evidence.
    """
    path = Path(source)
    if not path.exists():
        raise CorpusError(f"source not found: {path}")
    if path.is_file():
        if path.suffix == ".jsonl":
            return _dedupe(_read_jsonl(path))
        raise CorpusError(f"unsupported source file {path}: give a folder or a .jsonl corpus")
    markdown = sorted(p for p in path.rglob("*") if p.suffix.lower() in MARKDOWN_SUFFIXES and not p.is_dir())
    if markdown:
        return _dedupe(_read_markdown_folder(path, markdown, max_file_bytes, allow_outside_root))
    if (path / JSONL_CORPUS_NAME).is_file():
        return _dedupe(_read_jsonl(path / JSONL_CORPUS_NAME))
    raise CorpusError(f"no markdown files (*.md) or {JSONL_CORPUS_NAME} found in {path}")


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


def _read_markdown_folder(root: Path, files: list[Path], max_file_bytes: int, allow_outside: bool) -> Corpus:
    corpus = Corpus()
    real_root = root.resolve()
    for file in files:
        relative = file.relative_to(root).as_posix()
        try:
            if not (allow_outside or file.resolve().is_relative_to(real_root)):
                raise _Skip("links outside the knowledge-base folder (ingest.allow_outside_root)")
            corpus.documents.append(_read_markdown(file, relative, max_file_bytes))
        except _Skip as skip:
            corpus.skipped.append(SkippedFile(relative, str(skip), relative))
        except OSError as exc:  # dangling symlink, permission denied, vanished file
            corpus.skipped.append(SkippedFile(relative, f"unreadable: {exc.strerror or exc}", relative))
    return corpus


class _Skip(Exception):
    """Internal: why one file is skipped."""


def _read_markdown(file: Path, relative: str, max_file_bytes: int) -> SourceDocument:
    size = file.stat().st_size
    if size > max_file_bytes:
        raise _Skip(f"file too large ({size:,} bytes > ingest.max_file_bytes {max_file_bytes:,})")
    raw = file.read_bytes()
    if b"\x00" in raw:
        raise _Skip("binary content (NUL bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _Skip(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    meta, body = _frontmatter(text)
    return SourceDocument(
        doc_id=_text(meta.get("id")) or relative,
        source=relative,
        title=_text(meta.get("title")) or _first_heading(body) or file.stem,
        body=body,
        format="markdown",
        categories=_strings(meta.get("domain", meta.get("category"))),
        keywords=_strings(meta.get("keywords")) + _strings(meta.get("tags")),
        entities=_strings(meta.get("entities")),
        description=_text(meta.get("description")),
        doc_type=_text(meta.get("doc_type") or meta.get("type")),
    )


def _frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """The YAML frontmatter mapping and the body (python-frontmatter alone drops a list or
    scalar header silently: such a file is skipped and named instead)."""
    handler = frontmatter.YAMLHandler()
    text = text.strip()
    if not handler.detect(text):
        return {}, text
    try:
        header, body = handler.split(text)
        meta = handler.load(header)
    except ValueError:  # no closing delimiter: python-frontmatter reads it all as body
        return {}, text
    except yaml.YAMLError as exc:
        raise _Skip(f"broken YAML frontmatter: {_first_line(exc)}") from None
    if meta is None:
        return {}, body.strip()
    if not isinstance(meta, dict):
        raise _Skip(f"frontmatter is a {type(meta).__name__}, not a mapping of fields")
    return meta, body.strip()


def _read_jsonl(file: Path) -> Corpus:
    corpus = Corpus()
    for number, record in _jsonl_records(file, corpus):
        doc_id = _text(record.get("_id"))
        text = record.get("text")
        if not doc_id or not isinstance(text, str):
            source = _text(record.get("source")) or doc_id
            corpus.skipped.append(SkippedFile(f"{file.name}:{number}", "missing _id or text", source))
            continue
        title = _text(record.get("title")) or ""
        corpus.documents.append(
            SourceDocument(
                doc_id=doc_id,
                source=_text(record.get("source")) or doc_id,
                title=title,
                body=text,
                format="text",
                categories=_strings(record.get("category")),
                keywords=_strings(record.get("keywords")),
                entities=_strings(record.get("entities")),
            )
        )
    return corpus


def _jsonl_records(file: Path, corpus: Corpus) -> Iterator[tuple[int, dict[str, Any]]]:
    with file.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:  # utf-8-sig: a byte-order mark before the first record is not part of it
                record = json.loads(line.decode("utf-8-sig" if number == 1 else "utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                corpus.skipped.append(SkippedFile(f"{file.name}:{number}", f"invalid JSON: {exc}"))
                continue
            if isinstance(record, dict):
                yield number, record
            else:
                corpus.skipped.append(SkippedFile(f"{file.name}:{number}", "not a JSON object"))


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


def _first_heading(body: str) -> str | None:
    for line in body.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

"""The L0 index: frontmatter hints (titles, keywords, domains, entities) per document.

L0 output is hint data, never evidence. Matching is case-insensitive and NFKC-normalized:
whole words (English words by their stem) for space-separated scripts, substrings for scripts
written without spaces. A title made only of stop words ("In", "Where") is not matched: it
would match every query that uses the word.

The index is an SQLite database next to the store (``<collection>.l0.sqlite``): each document's
fields, and its terms by match key, so that an ingest writes only the documents that changed (to
a copy it moves over the file), a process opens the index without reading it, and a match reads
only the keys its query holds (docs/benchmarks.md, "Scale": the JSON file it replaced was read,
rewritten and prepared whole).

>>> index = L0Index([L0Document("refunds", "Refund Policy", ("chargeback",), ("payments",), ())])
>>> index.match("Who approves Chargebacks?").domains
['payments']
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import snowballstemmer

from lookup_knowledge.contract import L0Hints

from .errors import StoreBackendError
from .search import AccessFilter, AccessScope
from .sparse import only_stop_words
from .text import first_line

FORMAT_VERSION = 2  # 1: the JSON file (``<collection>.l0.json``), read once and replaced

# Scripts written without spaces between words: CJK ideographs, kana, Hangul-free East Asian
# scripts and Southeast Asian scripts. Terms containing them match as substrings.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
)
_WORD = re.compile(r"\w+")
_LATIN_WORD = re.compile(r"[a-z]+")
_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=16384)  # payload titles and categories repeat across lookups
def normalize(text: str) -> str:
    """NFKC + casefold: the form in which queries and terms are compared."""
    return unicodedata.normalize("NFKC", text).casefold()


def _words(normalized: str) -> list[str]:
    """Words of spaced scripts, English words reduced to their Snowball stem ("refunds" ->
    "refund"), as BM25 analyzers do, so simple inflections of a term still match it."""
    return [_stem(word) for word in _WORD.findall(_UNSPACED.sub(" ", normalized))]


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _STEMMER.stemWord(word) if _LATIN_WORD.fullmatch(word) else word


_REPAIR = "delete it and ingest the knowledge base again to rebuild it"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents(
    doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, keywords TEXT NOT NULL, domains TEXT NOT NULL,
    entities TEXT NOT NULL, access TEXT
);
CREATE TABLE IF NOT EXISTS terms(
    key TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, doc_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS terms_by_key ON terms(key);
CREATE INDEX IF NOT EXISTS terms_by_document ON terms(doc_id);
CREATE TABLE IF NOT EXISTS unspaced(
    norm TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, doc_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS unspaced_by_document ON unspaced(doc_id);
CREATE TABLE IF NOT EXISTS lengths(
    first TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY(first, n)
) WITHOUT ROWID;
"""
_BATCH = 500  # ids per ``IN (...)``: under SQLite's limit on bound parameters
_JSON = json.JSONEncoder(ensure_ascii=False).encode  # one encoder: json.dumps(..., kw) builds one a call
_MAX_WORDS = 100_000  # first words whose term lengths a process keeps (then forgets them all)
# An index of at most this many terms is matched from memory, read at its first match (about
# 0.6 s at the limit): a lookup then spends ~20 us on L0 instead of ~100-270 us asking SQLite
_MEMORY_TERMS = 100_000


class L0IndexError(StoreBackendError, ValueError):
    """The L0 index file is corrupt or of another format version."""


@dataclass(frozen=True, slots=True)
class L0Document:
    """The frontmatter hints of one knowledge document."""

    doc_id: str
    title: str
    keywords: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    access: tuple[str, ...] | None = None  # who may see it (None: indexed before access control)


@dataclass(frozen=True, slots=True)
class _Term:
    kind: str  # "title" | "keyword" | "domain" | "entity"
    text: str
    doc_id: str


class L0Index:
    """A hint index over document frontmatter, in an SQLite database: in memory when built from
    ``documents``, or the file :meth:`load` opened. The file is never written in place: the first
    write that changes something (:meth:`upsert`, :meth:`remove`) goes to a copy beside it, which
    :meth:`save` moves over it, so readers in other processes never wait on a writer and see a
    new version only when they load the file again (a new inode: what a serving tool watches), and
    a crash before the save leaves the file as it was. One connection per index, shared by threads
    under a lock."""

    def __init__(self, documents: Iterable[L0Document] = ()) -> None:
        self._open(_connect(":memory:"), None)
        self.upsert(documents)

    @classmethod
    def _on_file(cls, connection: sqlite3.Connection, path: Path) -> L0Index:
        index = cls.__new__(cls)
        index._open(connection, path)
        return index

    def _open(self, connection: sqlite3.Connection, path: Path | None) -> None:
        self._db, self._path = connection, path
        self._copy: Path | None = None  # the copy of the file that holds this index's writes
        self._lock = threading.RLock()
        # first word -> the word counts of the terms it starts (none: it starts no term), read as
        # queries use the words (the database changes only through this index's own writes)
        self._lengths: dict[str, tuple[int, ...]] = {}
        # terms by key, for an index small enough to match from memory (:meth:`_small_table`)
        self._table: dict[str, list[tuple[str, str, str]]] | None = None
        self._table_documents: dict[str, L0Document] = {}  # with the table: every document
        self._table_read = False

    @property
    def documents(self) -> Mapping[str, L0Document]:
        """The indexed documents by id, read from the database as they are asked for."""
        return _Documents(self)

    def __len__(self) -> int:
        return self._one("SELECT count(*) FROM documents")[0]

    def upsert(self, documents: Iterable[L0Document]) -> None:
        """Index ``documents``, replacing those of the same ids; an unchanged document is not
        written again (an ingest passes every document of its corpus)."""
        latest = list({d.doc_id: d for d in documents}.values())  # an id given twice: its last
        with self._lock, _readable(self._path):
            for batch in _batches(latest):
                stored = self._rows(batch)
                rows = {d.doc_id: (d, row) for d in batch if stored.get(d.doc_id) != (row := _row(d))}
                if not rows:
                    continue
                self._delete(list(rows))
                self._db.executemany(
                    "INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?)", (r for _, r in rows.values())
                )
                spaced, unspaced = _term_rows(d for d, _ in rows.values())
                self._db.executemany("INSERT INTO terms VALUES (?, ?, ?, ?)", spaced)
                self._db.executemany("INSERT INTO unspaced VALUES (?, ?, ?, ?)", unspaced)
                # a word count no term has any more is left: it costs a key lookup, never a match
                lengths = {(key.split(" ", 1)[0], key.count(" ") + 1) for key, *_ in spaced}
                self._db.executemany("INSERT OR IGNORE INTO lengths VALUES (?, ?)", lengths)

    def remove(self, doc_ids: Iterable[str]) -> None:
        with self._lock, _readable(self._path):
            for batch in _batches(list(doc_ids)):
                self._delete(list(self._held(batch)))

    def match(self, query: str, access: AccessFilter | None = None) -> L0Hints:
        """The hints a query triggers among the documents a caller of ``access`` (an
        :attr:`AccessScope.filter`; ``None``: every document) may see; empty hints when nothing matches."""
        norm = normalize(query)
        words = _words(norm)
        with self._lock, _readable(self._path):
            found = [_Term(*row) for row in self._spaced_matches(words)]
            if _UNSPACED.search(norm):  # an unspaced term holds such a character
                rows = self._db.execute("SELECT * FROM unspaced")
                found += [_Term(kind, text, doc_id) for term, kind, text, doc_id in rows if term in norm]
            if self._table is not None:
                documents = self._table_documents
            else:
                documents = self._fields_of({term.doc_id for term in found}) if found else {}
        if access is not None:
            scope = AccessScope(access)
            found = [term for term in found if scope.may_see(documents[term.doc_id].access)]
        return _hints(found, documents)

    def _spaced_matches(self, words: list[str]) -> list[tuple[str, str, str]]:
        """(kind, text, doc id) of the terms whose key is a run of the query's words: looked up
        only at the word counts of the terms that start with each word."""
        table = self._small_table()
        lengths = self._word_counts(list(dict.fromkeys(words)), complete=table is not None)
        keys = list({
            " ".join(words[start : start + n])
            for start, word in enumerate(words)
            for n in lengths[word]
            if start + n <= len(words)
        })[:_BATCH]  # fmt: skip
        if table is not None:
            return [term for key in keys for term in table.get(key, ())]
        if not keys:
            return []
        sql = f"SELECT kind, text, doc_id FROM terms WHERE key IN ({_marks(keys)})"
        return self._db.execute(sql, keys).fetchall()

    def _small_table(self) -> dict[str, list[tuple[str, str, str]]] | None:
        """The terms by key, read into memory (with every first word's counts) at the first match
        after a write when the index holds at most :data:`_MEMORY_TERMS`; ``None`` for a larger
        index, whose matches ask the database."""
        if not self._table_read:
            self._table, self._table_read = None, True
            if self._db.execute("SELECT count(*) FROM terms").fetchone()[0] <= _MEMORY_TERMS:
                table: dict[str, list[tuple[str, str, str]]] = {}
                for key, kind, text, doc_id in self._db.execute("SELECT * FROM terms"):
                    table.setdefault(key, []).append((kind, text, doc_id))
                lengths: dict[str, set[int]] = {}
                for key in table:
                    lengths.setdefault(key.split(" ", 1)[0], set()).add(key.count(" ") + 1)
                self._table = table
                self._lengths = {word: tuple(sorted(ns)) for word, ns in lengths.items()}
                self._table_documents = {
                    row[0]: _document(row) for row in self._db.execute("SELECT * FROM documents")
                }
        return self._table

    def _word_counts(self, firsts: list[str], complete: bool) -> dict[str, tuple[int, ...]]:
        """The word counts of the terms each word starts: from memory when it holds them all
        (``complete``), else read from the database for words not read since this index last
        wrote."""
        if not complete:
            if len(self._lengths) > _MAX_WORDS:
                self._lengths = {}
            missing = [word for word in firsts if word not in self._lengths]
            for batch in _batches(missing):
                counts: dict[str, list[int]] = {word: [] for word in batch}
                sql = f"SELECT first, n FROM lengths WHERE first IN ({_marks(batch)})"
                for first, n in self._db.execute(sql, batch):
                    counts[first].append(n)
                self._lengths.update((word, tuple(sorted(ns))) for word, ns in counts.items())
        return {word: self._lengths.get(word, ()) for word in firsts}

    def save(self, path: str | Path) -> None:
        """Write the index to ``path`` atomically: the copy holding this index's writes moved over
        the file it was loaded from (nothing written: nothing to do), or the whole index copied
        there (a new file, an in-memory index). A legacy JSON index beside it is removed then.
        Raises :class:`OSError` when the file cannot be written (a full disk)."""
        path = Path(path)
        try:
            with self._lock:
                self._db.commit()
                if (
                    self._copy is not None
                    and self._path is not None
                    and self._path.resolve() == path.resolve()
                ):
                    os.replace(self._copy, path)  # the connection stays on it, now at ``path``
                    self._copy = None
                elif self._path is None or self._path.resolve() != path.resolve():
                    _copied(self._db, path.with_name(path.name + ".tmp")).close()
                    os.replace(path.with_name(path.name + ".tmp"), path)
        except sqlite3.Error as exc:
            raise OSError(f"cannot write the L0 index {path}: {first_line(exc)}") from exc
        if (legacy := _legacy_path(path)) is not None:
            legacy.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | Path) -> L0Index:
        """Open a saved index (reading nothing yet); a missing file is an empty index (or the
        documents of a legacy JSON index beside it), an unreadable one an :class:`L0IndexError`
        that says how to repair it."""
        path = Path(path)
        if not path.exists():
            legacy = _legacy_path(path)
            return cls(_legacy_documents(legacy)) if legacy is not None and legacy.exists() else cls()
        with _readable(path):
            connection = _open_file(path)
            version = _format_version(connection)
            if version != str(FORMAT_VERSION):
                connection.close()
                raise L0IndexError(
                    f"L0 index {path} has format {version!r}, this release reads {FORMAT_VERSION}: {_REPAIR}"
                )
        return cls._on_file(connection, path)

    def close(self) -> None:
        """Close the database; writes not saved are dropped (with the copy that held them)."""
        with self._lock:
            self._db.close()
            if self._copy is not None:
                self._copy.unlink(missing_ok=True)
                self._copy = None

    def _one(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        with self._lock, _readable(self._path):
            return self._db.execute(sql, parameters).fetchone()

    def _rows(self, documents: Sequence[L0Document]) -> dict[str, tuple]:
        ids = [d.doc_id for d in documents]
        if not ids:
            return {}
        rows = self._db.execute(f"SELECT * FROM documents WHERE doc_id IN ({_marks(ids)})", ids)
        return {row[0]: row for row in rows}

    def _fields_of(self, doc_ids: set[str]) -> dict[str, L0Document]:
        documents: dict[str, L0Document] = {}
        for batch in _batches(sorted(doc_ids)):
            rows = self._db.execute(f"SELECT * FROM documents WHERE doc_id IN ({_marks(batch)})", batch)
            documents.update((row[0], _document(row)) for row in rows)
        return documents

    def _held(self, doc_ids: Sequence[str]) -> set[str]:
        """Which of ``doc_ids`` the index holds."""
        if not doc_ids:
            return set()
        rows = self._db.execute(f"SELECT doc_id FROM documents WHERE doc_id IN ({_marks(doc_ids)})", doc_ids)
        return {row[0] for row in rows}

    def _writable(self) -> None:
        """Before the first write of a loaded index: continue on a copy of its file."""
        if self._path is not None and self._copy is None:
            source, self._copy = self._db, self._path.with_name(self._path.name + ".tmp")
            self._db = _copied(source, self._copy)
            source.close()

    def _delete(self, doc_ids: Sequence[str]) -> None:
        if doc_ids:
            self._writable()
            self._lengths, self._table, self._table_documents, self._table_read = {}, None, {}, False
            marks = _marks(doc_ids)
            for table in ("documents", "terms", "unspaced"):
                self._db.execute(f"DELETE FROM {table} WHERE doc_id IN ({marks})", doc_ids)


class _Documents(Mapping[str, L0Document]):
    """An index's documents by id, each read when asked for."""

    def __init__(self, index: L0Index) -> None:
        self._index = index

    def __getitem__(self, doc_id: str) -> L0Document:
        row = (
            self._index._one("SELECT * FROM documents WHERE doc_id = ?", (doc_id,))
            if isinstance(doc_id, str)
            else None
        )
        if row is None:
            raise KeyError(doc_id)
        return _document(row)

    def __iter__(self) -> Iterator[str]:
        with self._index._lock, _readable(self._index._path):
            ids = [row[0] for row in self._index._db.execute("SELECT doc_id FROM documents ORDER BY doc_id")]
        return iter(ids)

    def __len__(self) -> int:
        return len(self._index)


def _connect(target: str) -> sqlite3.Connection:
    connection = sqlite3.connect(target, check_same_thread=False)
    connection.executescript(_SCHEMA)
    connection.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (str(FORMAT_VERSION),))
    connection.commit()
    return connection


def _open_file(path: Path) -> sqlite3.Connection:
    """A connection to an existing index file (never creating one)."""
    return sqlite3.connect(f"file:{path}?mode=rw", uri=True, check_same_thread=False)


def _copied(source: sqlite3.Connection, target: Path) -> sqlite3.Connection:
    """``source``'s database copied into a new file ``target`` (replacing one a crash left):
    the copy's connection."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    copy = sqlite3.connect(target, check_same_thread=False)
    source.backup(copy)
    return copy


def _format_version(connection: sqlite3.Connection) -> str | None:
    """The format a database says it has; ``None`` for one that is not an L0 index."""
    try:
        row = connection.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise  # busy, or a failing disk: not a verdict on the file
        return None
    return row[0] if row else None


@contextmanager
def _readable(path: Path | None) -> Iterator[None]:
    """The database's errors as the store's: a file that is not an L0 index (or is damaged) an
    :class:`L0IndexError` naming the repair; a busy, full or failing disk a
    :class:`StoreBackendError` that says what happened."""
    name = path or "(in memory)"
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "no such" in str(exc):  # a table or column this format has: not an L0 index
            raise L0IndexError(f"L0 index {name} is unreadable ({first_line(exc)}): {_REPAIR}") from None
        raise StoreBackendError(f"L0 index {name}: {first_line(exc)}") from None
    except sqlite3.DatabaseError as exc:
        raise L0IndexError(f"L0 index {name} is unreadable ({first_line(exc)}): {_REPAIR}") from None


def _row(doc: L0Document) -> tuple:
    """A document as its ``documents`` row (lists as JSON text)."""
    access = None if doc.access is None else _JSON(doc.access)
    return (doc.doc_id, doc.title, _JSON(doc.keywords), _JSON(doc.domains), _JSON(doc.entities), access)


def _document(row: Sequence[Any]) -> L0Document:
    doc_id, title, keywords, domains, entities, access = row
    load = lambda text: tuple(json.loads(text))  # noqa: E731
    return L0Document(
        doc_id, title, load(keywords), load(domains), load(entities), None if access is None else load(access)
    )


def _term_rows(documents: Iterable[L0Document]) -> tuple[list[tuple], list[tuple]]:
    """Rows of ``terms`` (match key: the term's words, stemmed, space-separated) and of
    ``unspaced`` (the normalized term, matched as a substring) for the documents' terms. A title
    of stop words alone is not indexed: it would match every query that uses the word."""
    spaced, unspaced = [], []
    for doc in documents:
        for term in _terms(doc):
            norm = normalize(term.text).strip()
            if not norm:
                continue
            if _UNSPACED.search(norm):
                unspaced.append((norm, term.kind, term.text, term.doc_id))
                continue
            words = _words(norm)
            if words and not (term.kind == "title" and only_stop_words(norm)):
                spaced.append((" ".join(words), term.kind, term.text, term.doc_id))
    return spaced, unspaced


def _hints(found: list[_Term], documents: Mapping[str, L0Document]) -> L0Hints:
    by_kind: dict[str, set[str]] = {"title": set(), "keyword": set(), "entity": set()}
    domains: set[str] = set()
    doc_ids: set[str] = set()
    for term in found:
        if term.kind == "domain":
            domains.add(term.text)
            continue
        by_kind[term.kind].add(term.text)
        doc_ids.add(term.doc_id)
    for doc_id in doc_ids:
        domains.update(d for d in documents[doc_id].domains if d.strip())
    return L0Hints(
        matched_titles=sorted(by_kind["title"]),
        matched_keywords=sorted(by_kind["keyword"]),
        domains=sorted(domains),
        entities=sorted(by_kind["entity"]),
        matched_doc_ids=sorted(doc_ids),
    )


def index_saved(path: str | Path) -> bool:
    """Whether an index was saved at ``path`` (or, before format 2, as JSON beside it)."""
    path = Path(path)
    return path.is_file() or ((legacy := _legacy_path(path)) is not None and legacy.is_file())


def _legacy_path(path: Path) -> Path | None:
    """Where format 1 kept the index: ``<collection>.l0.json`` beside ``<collection>.l0.sqlite``."""
    legacy = path.with_suffix(".json")
    return None if legacy == path else legacy


def _legacy_documents(path: Path) -> list[L0Document]:
    """The documents of a format-1 JSON index (read until the next ingest writes the database)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
        version = data.get("version") if isinstance(data, dict) else None
        if version != 1:
            raise L0IndexError(f"L0 index {path} has format {version!r}, this release reads {FORMAT_VERSION}")
        return [
            L0Document(
                d["doc_id"], d["title"], tuple(d["keywords"]), tuple(d["domains"]), tuple(d["entities"]),
                None if d.get("access") is None else tuple(d["access"]),
            )
            for d in data["documents"]
        ]  # fmt: skip
    except L0IndexError as exc:
        raise L0IndexError(f"{exc}: {_REPAIR}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise L0IndexError(f"L0 index {path} is unreadable ({first_line(exc)}): {_REPAIR}") from None


def _batches(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


def _marks(items: Sequence[Any]) -> str:
    return ", ".join("?" * len(items))


def _terms(doc: L0Document) -> Iterable[_Term]:
    if doc.title:
        yield _Term("title", doc.title, doc.doc_id)
    for keyword in doc.keywords:
        yield _Term("keyword", keyword, doc.doc_id)
    for entity in doc.entities:
        yield _Term("entity", entity, doc.doc_id)
    for domain in doc.domains:
        yield _Term("domain", domain, doc.doc_id)

"""The L0 index: frontmatter hints (titles, keywords, domains, entities) per document.

L0 output is hint data, never evidence. Matching is case-insensitive and NFKC-normalized:
whole words (English words by their stem) for space-separated scripts, substrings for scripts
written without spaces. A title made only of stop words ("In", "Where") is not matched: it
would match every query that uses the word.

>>> index = L0Index([L0Document("refunds", "Refund Policy", ("chargeback",), ("payments",), ())])
>>> index.match("Who approves Chargebacks?").domains
['payments']
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import snowballstemmer

from lookup_knowledge.contract import L0Hints

from .errors import StoreBackendError
from .search import AccessScope, may_see
from .sparse import only_stop_words
from .text import first_line

FORMAT_VERSION = 1

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
    """An in-memory hint index over document frontmatter, persisted as JSON next to the store."""

    def __init__(self, documents: Iterable[L0Document] = ()) -> None:
        self.documents: dict[str, L0Document] = {d.doc_id: d for d in documents}

    def __len__(self) -> int:
        return len(self.documents)

    def upsert(self, documents: Iterable[L0Document]) -> None:
        self.documents.update((d.doc_id, d) for d in documents)
        self.__dict__.pop("_tables", None)

    def remove(self, doc_ids: Iterable[str]) -> None:
        for doc_id in doc_ids:
            self.documents.pop(doc_id, None)
        self.__dict__.pop("_tables", None)

    @cached_property
    def _tables(self) -> tuple[dict[str, list[_Term]], dict[str, tuple[int, ...]], list[tuple[str, _Term]]]:
        """Spaced terms keyed by their word sequence, the word counts of the terms each first
        word starts (a query is looked up only at those lengths: a store of long titles would
        otherwise cost every n-gram of every query), unspaced terms for substring scans."""
        spaced: dict[str, list[_Term]] = {}
        lengths: dict[str, set[int]] = {}
        unspaced: list[tuple[str, _Term]] = []
        for doc in self.documents.values():
            for term in _terms(doc):
                norm = normalize(term.text).strip()
                if not norm:
                    continue
                if _UNSPACED.search(norm):
                    unspaced.append((norm, term))
                    continue
                words = _words(norm)
                if words and not (term.kind == "title" and only_stop_words(norm)):
                    spaced.setdefault(" ".join(words), []).append(term)
                    lengths.setdefault(words[0], set()).add(len(words))
        return spaced, {word: tuple(sorted(ns)) for word, ns in lengths.items()}, unspaced

    def match(self, query: str, access: AccessScope | None = None) -> L0Hints:
        """The hints a query triggers among the documents a caller of ``access`` may see (``None``:
        every document); empty hints when nothing matches."""
        spaced, lengths, unspaced = self._tables
        norm = normalize(query)
        words = _words(norm)
        found: list[_Term] = []
        for start, word in enumerate(words):
            for n in lengths.get(word, ()):
                if start + n > len(words):
                    break
                found.extend(spaced.get(" ".join(words[start : start + n]), ()))
        found.extend(term for text, term in unspaced if text in norm)
        if access is not None:
            found = [term for term in found if may_see(self.documents[term.doc_id].access, access)]
        return self._hints(found)

    def _hints(self, found: list[_Term]) -> L0Hints:
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
            domains.update(d for d in self.documents[doc_id].domains if d.strip())
        return L0Hints(
            matched_titles=sorted(by_kind["title"]),
            matched_keywords=sorted(by_kind["keyword"]),
            domains=sorted(domains),
            entities=sorted(by_kind["entity"]),
            matched_doc_ids=sorted(doc_ids),
        )

    def save(self, path: str | Path) -> None:
        """Write the index atomically as JSON."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": FORMAT_VERSION,
            "documents": [_fields(d) for d in self.documents.values()],
        }
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> L0Index:
        """Read a saved index; a missing file is an empty index, an unreadable one an
        :class:`L0IndexError` that says how to repair it."""
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
            version = data.get("version") if isinstance(data, dict) else None
            if version != FORMAT_VERSION:
                raise L0IndexError(
                    f"L0 index {path} has format {version!r}, this release reads {FORMAT_VERSION}"
                )
            return cls(
                L0Document(
                    doc_id=d["doc_id"],
                    title=d["title"],
                    keywords=tuple(d["keywords"]),
                    domains=tuple(d["domains"]),
                    entities=tuple(d["entities"]),
                    access=None if d.get("access") is None else tuple(d["access"]),
                )
                for d in data["documents"]
            )
        except L0IndexError as exc:
            raise L0IndexError(f"{exc}: {_REPAIR}") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise L0IndexError(f"L0 index {path} is unreadable ({first_line(exc)}): {_REPAIR}") from None


def _fields(doc: L0Document) -> dict[str, object]:
    """A document as its JSON object (``dataclasses.asdict`` deep-copies every field: 30x slower,
    1.0 of the 1.7 s a save of 100,000 documents took)."""
    return {field: getattr(doc, field) for field in L0Document.__slots__}


def _terms(doc: L0Document) -> Iterable[_Term]:
    if doc.title:
        yield _Term("title", doc.title, doc.doc_id)
    for keyword in doc.keywords:
        yield _Term("keyword", keyword, doc.doc_id)
    for entity in doc.entities:
        yield _Term("entity", entity, doc.doc_id)
    for domain in doc.domains:
        yield _Term("domain", domain, doc.doc_id)

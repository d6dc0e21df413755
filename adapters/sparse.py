"""BM25 sparse vectors: Qdrant Edge's own BM25 tokenizer and stemmer, made CJK-aware.

Documents and queries go through the same :class:`Bm25Encoder`, so both store adapters (the
embedded engine and a Qdrant server) hold and search the same sparse vectors. The store applies
the IDF part (``Modifier.IDF``), so IDF stays right as documents come and go.

Chinese, Japanese and Korean text has no spaces between words: each run of those characters is
indexed as its characters and their overlapping pairs (unigrams + bigrams, as Lucene's CJK
analyzer does), so a Chinese query matches a Chinese chunk by its words. Everything else is
split into words by the engine's word tokenizer (codes such as ``ERR-4012`` keep their parts,
which its multilingual tokenizer drops), lowercased, English-stemmed, with English and Chinese
stopwords removed.

>>> encoder = Bm25Encoder()
>>> len(encoder.embed_query("增值税发票").indices)  # 5 characters + 4 pairs
9
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import qdrant_edge as qe

SPARSE_INDEX = "bm25:word+cjk-bigrams:english-stem:en+zh-stopwords"  # in each document's hash
MAX_MATCHED_TERMS = 8  # terms listed in a ``vector:sparse`` hit reason
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]+"
)
_TERM = re.compile(r"\w+")
_WORD = re.compile(r"\w+(?:[-./:#]\w+)*")  # a word with its inner separators: INV-48213, orders.v2
_JOINED = re.compile(r"[^\W_]{2,}(?:[_.][^\W_]{2,})+")  # snake_case and dotted names: max_lag.ms


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Token ids and their weights (engine-neutral: each adapter converts it)."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.indices)


def cjk_spaced(text: str) -> str:
    """``text`` with each CJK run written as its characters and overlapping pairs, space-separated."""

    def spaced(match: re.Match[str]) -> str:
        run = match.group(0)
        pairs = [run[i : i + 2] for i in range(len(run) - 1)]
        return " " + " ".join([*run, *pairs]) + " "

    return _CJK_RUN.sub(spaced, text)


class Bm25Encoder:
    """Text -> BM25 :class:`SparseVector` (documents: term-frequency weights; queries: 1 per term)."""

    def __init__(self) -> None:
        english_and_chinese = qe.StopwordsSet(languages={qe.Language.English, qe.Language.Chinese})
        self._model = qe.Bm25(
            qe.Bm25Config(language="english", tokenizer=qe.TokenizerType.Word, stopwords=english_and_chinese)
        )

    def embed_document(self, text: str) -> SparseVector:
        return _plain(self._model.embed_document(cjk_spaced(text)))

    def embed_query(self, text: str) -> SparseVector:
        return _plain(self._model.embed_query(cjk_spaced(text)))

    def query_terms(self, query: str) -> dict[str, int]:
        """The query's terms that are one token each -> its token id, longest first (CJK pairs
        before single characters), for naming the terms a document matched."""
        terms = dict.fromkeys(_TERM.findall(cjk_spaced(query).lower()))
        ids = {term: self._model.embed_query(term).indices for term in sorted(terms, key=len, reverse=True)}
        return {term: found[0] for term, found in ids.items() if len(found) == 1}

    def query_codes(self, query: str) -> dict[str, frozenset[int]]:
        """The query's codes -> the token ids of their parts.

        A code is an identifier a small embedding model blurs: a word of at least three
        characters holding letters and digits (``E4471``, ``INV-48213``, ``orders.v2.dlq``) or
        letters joined by ``_`` or ``.`` (``max_poll_records``, ``retrieval.mode``). Plain
        words, hyphenated words and bare numbers are not codes.
        """
        codes = {
            word: frozenset(self._model.embed_query(word).indices)
            for word in _WORD.findall(query)
            if _is_code(word)
        }
        return {word: parts for word, parts in codes.items() if parts}

    @staticmethod
    def matched_terms(query_terms: dict[str, int], document_indices: Iterable[int]) -> list[str]:
        """Of :meth:`query_terms`, those in a document's sparse vector, capped at
        :data:`MAX_MATCHED_TERMS`."""
        held = set(document_indices)
        matched: list[str] = []
        for term, index in query_terms.items():  # longest first: a pair hides its characters
            if index in held and not any(term in longer for longer in matched):
                matched.append(term)
        return matched[:MAX_MATCHED_TERMS]


def _is_code(word: str) -> bool:
    letters, digits = any(c.isalpha() for c in word), any(c.isdigit() for c in word)
    return len(word) >= 3 and (letters and digits or _JOINED.fullmatch(word) is not None)


def _plain(vector: qe.SparseVector) -> SparseVector:
    return SparseVector(tuple(vector.indices), tuple(vector.values))


@cache
def bm25_encoder() -> Bm25Encoder:
    """The process's encoder (stateless and cheap to share)."""
    return Bm25Encoder()


def sparse_text(title: str | None, breadcrumb: str | None, content: str) -> str:
    """What a chunk's BM25 vector is made of: its title, breadcrumb and text (a breadcrumb that
    starts with the title stands for both)."""
    title, breadcrumb = title or "", breadcrumb or ""
    head = [breadcrumb] if breadcrumb.startswith(title) else [title, breadcrumb]
    return "\n".join([*(part for part in head if part), content])

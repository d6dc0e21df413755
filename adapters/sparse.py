"""BM25 sparse vectors: Qdrant Edge's own BM25 tokenizer and stemmer, made CJK-aware.

Documents and queries go through the same :class:`Bm25Encoder`, so both store adapters (the
embedded engine and a Qdrant server) hold and search the same sparse vectors. The store applies
the IDF part (``Modifier.IDF``), so IDF stays right as documents come and go.

Chinese, Japanese and Korean text has no spaces between words: each run of those characters is
indexed as its characters and their overlapping pairs (unigrams + bigrams, as Lucene's CJK
analyzer does), so a Chinese query matches a Chinese chunk by its words. Everything else is
split into words by the engine's word tokenizer (codes such as ``ERR-4012`` keep their parts,
which its multilingual tokenizer drops), lowercased, English-stemmed, with English and Chinese
stopwords removed. An identifier of several parts (``SOME_ENV_VAR``, ``server.http.port``,
``--dry-run``, ``INV-48213``: see :func:`identifiers`) also counts as one whole token, so a query
naming it lifts the chunks that hold it whole above those that hold its parts
(``SOME_ENV_VAR_PROTOCOL``, whose whole token differs). A stop word in code (a fenced block, an
inline span, a title of stop words alone: Hugo's ``in`` function, Python's ``with``) is indexed
by its whole token too, and a query that puts it in code asks for it; in prose it stays dropped.

>>> encoder = Bm25Encoder()
>>> len(encoder.embed_query("增值税发票").indices)  # 5 characters + 4 pairs
9
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache

import qdrant_edge as qe

SPARSE_INDEX = (  # in each document's hash
    "bm25:word+cjk-bigrams+whole-identifiers+code-stopwords:english-stem:en+zh-stopwords"
)
THAI_WORDS = "thai:newmm-words"  # in the hash of a document whose Thai is cut into words
MAX_MATCHED_TERMS = 8  # terms listed in a ``vector:sparse`` hit reason
WORDS_KEPT = 65536  # words whose stop-word answer is kept (a large store's titles and code)
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]+"
)
_THAI_RUN = re.compile("[\u0e00-\u0e7f]+")  # Thai: no spaces between words, vowel marks inside them
_TERM = re.compile(r"\w+")
# A whole word with its inner separators, a leading ``--`` kept (flags): the unit identifiers are
# matched in, so ``limit_x`` is not found inside ``memory_limit_x`` nor ``E44`` inside ``E4471``.
_WHOLE_WORD = re.compile(r"(?:(?<![\w-])--)?\w+(?:[-./:#]\w+)*")
_SNAKE = re.compile(r"\w*[^\W\d_]\w*_\w+|\w+_\w*[^\W\d_]\w*")  # a "_" and a letter: limit_x, SOME_ENV_VAR
_DOTTED = re.compile(r"[^\W_]{2,}(?:[_.][^\W_]{2,})+")  # server.http.port, Params.shortcode_color; not e.g
_CAMEL = re.compile(r"[a-z][A-Z]")  # a lower-to-upper step inside: baseURL, disableKinds
_PARTED = re.compile(r"^--|[-_./:#]")  # identifiers the word tokenizer splits into parts
_IDENTIFIER_SEPARATORS = re.compile(r"[-_./:#]+")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_FENCED_BLOCK = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1", re.MULTILINE | re.DOTALL)


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


def thai_words(text: str) -> list[str] | None:
    """The words of ``text``'s Thai runs, as pythainlp's dictionary segmenter (``newmm``) cuts
    them, its stop words left out; ``None`` for Thai without the segmenter (the ``thai`` extra):
    the engine's tokenizer then cuts it at its vowel marks, as before. Text without Thai loads
    no segmenter."""
    if not _THAI_RUN.search(text):
        return []
    segment = _thai_segmenter()
    if segment is None:
        return None
    return [
        w
        for run in _THAI_RUN.findall(text)
        for w in segment(run)
        if w.strip() and w not in _thai_stop_words()
    ]


def thai_spaced(text: str) -> str:
    """``text`` with each Thai run written as its words' whole tokens (:func:`thai_words`), so
    the engine keeps each word whole; unchanged without the segmenter or Thai."""
    if not _THAI_RUN.search(text) or _thai_segmenter() is None:
        return text
    return _THAI_RUN.sub(
        lambda run: " " + " ".join(map(_whole_token, thai_words(run.group(0)) or ())) + " ", text
    )


@cache
def _thai_segmenter():  # type: ignore[no-untyped-def]
    try:
        from pythainlp.tokenize import word_tokenize
    except ImportError:
        return None
    return lambda run: word_tokenize(run, engine="newmm", keep_whitespace=False)


@cache
def _thai_stop_words() -> frozenset[str]:
    from pythainlp.corpus import thai_stopwords

    return frozenset(thai_stopwords())


def segments_thai(text: str) -> bool:
    """Whether ``text`` holds Thai that :func:`thai_spaced` cuts into words (a document's hash
    records it, so installing the segmenter re-indexes the documents with Thai, and only them)."""
    return _THAI_RUN.search(text) is not None and _thai_segmenter() is not None


class Bm25Encoder:
    """Text -> BM25 :class:`SparseVector` (documents: term-frequency weights; queries: 1 per term)."""

    def __init__(self) -> None:
        english_and_chinese = qe.StopwordsSet(languages={qe.Language.English, qe.Language.Chinese})
        self._model = qe.Bm25(
            qe.Bm25Config(language="english", tokenizer=qe.TokenizerType.Word, stopwords=english_and_chinese)
        )
        self.is_stop_word = lru_cache(maxsize=WORDS_KEPT)(self._is_stop_word)

    def embed_document(self, text: str) -> SparseVector:
        return _plain(self._model.embed_document(self._indexed(text)))

    def embed_query(self, text: str) -> SparseVector:
        return _plain(self._model.embed_query(self._indexed(text)))

    def _is_stop_word(self, word: str) -> bool:
        """Whether the analyzer drops ``word`` (lowercase): a stop word."""
        return not self._model.embed_query(word).indices

    def _indexed(self, text: str) -> str:
        """``text`` as the engine tokenizes it: CJK runs spaced, Thai runs as their words' whole
        tokens (:func:`thai_words`), each occurrence of a multi-part identifier and of a stop word
        in code (:meth:`code_words`) followed by its whole token."""
        words = _parted(text) + self._code_stop_words(text)
        indexed = thai_spaced(cjk_spaced(text))
        return indexed + ("\n" + " ".join(map(_whole_token, words)) if words else "")

    def _code_stop_words(self, text: str) -> list[str]:
        """Each occurrence of a stop word in the code of ``text`` (fenced blocks, inline spans)."""
        if "`" not in text and "~~~" not in text:
            return []
        return [
            word for code in code_of(text) for word in _TERM.findall(code.lower()) if self.is_stop_word(word)
        ]

    def query_terms(self, query: str) -> dict[str, int]:
        """The query's terms that are one token each -> its token id, longest first (CJK pairs
        before single characters), for naming the terms a document matched; an identifier of
        several parts is one term (lowercased), by its whole token (a lookup computes them once:
        the ``query_terms`` node)."""
        thai = thai_words(query)
        plain = _THAI_RUN.sub(" ", query) if thai is not None else query
        terms = dict.fromkeys(_TERM.findall(cjk_spaced(plain).lower()))
        ids = {term: self._model.embed_query(term).indices for term in terms}
        whole = {
            i.lower(): self._model.embed_query(_whole_token(i)).indices
            for i in [*_parted(query), *(thai or ())]
        }
        code = {word: self._model.embed_query(_whole_token(word)).indices for word in self.code_words(query)}
        found = {term: indices[0] for term, indices in {**ids, **whole, **code}.items() if len(indices) == 1}
        return dict(sorted(found.items(), key=lambda item: len(item[0]), reverse=True))

    def code_words(self, query: str) -> list[str]:
        """The stop words the query marks as code (`` `in` ``, `` `with` ``: a template function,
        a keyword), lowercased, each once. The analyzer drops stop words, so a stop word in code
        is indexed by its whole token (:meth:`embed_document`), in a chunk's code only, and the
        query names it by that token (:meth:`query_terms`)."""
        return list(dict.fromkeys(self._code_stop_words(query)))

    @staticmethod
    def query_codes(query: str) -> list[str]:
        """The query's codes: its :func:`identifiers`, which a small embedding model blurs."""
        return identifiers(query)

    @staticmethod
    def matched_terms(query_terms: Mapping[str, int], document_indices: Iterable[int]) -> list[str]:
        """Of :meth:`query_terms`, those in a document's sparse vector (all of them: the verdict
        reads their share; a hit reason lists the first :data:`MAX_MATCHED_TERMS`). A matched
        whole hides its parts: a character of a CJK pair, a word of an identifier (``inv`` of
        ``inv-48213``; ``word1`` is no part of ``word10``)."""
        held = set(query_terms.values()).intersection(document_indices)  # not a set of every index
        matched: list[str] = []
        parts: set[str] = set()  # the words of the matched terms
        for term, index in query_terms.items():  # longest first: a whole comes before its parts
            if index not in held:
                continue
            cjk, words = _term_shape(term)
            if cjk:
                if any(term in whole for whole in matched):
                    continue
            elif term in parts:
                continue
            matched.append(term)
            parts.update(words)
        return matched


def word_tokens(word: str) -> tuple[int, ...]:
    """The BM25 tokens that index a word (lowercase): a CJK word's character pairs (one
    character: itself), another word's terms (its stem); empty for a stop word. A chunk holds
    the word where it holds all of them, and the word is as rare as the rarest."""
    terms = bm25_encoder().query_terms(word)
    if _CJK_RUN.fullmatch(word) and len(word) > 1:
        terms = {term: token for term, token in terms.items() if len(term) == 2}
    return tuple(terms.values())


@lru_cache(maxsize=WORDS_KEPT)
def _term_shape(term: str) -> tuple[bool, tuple[str, ...]]:
    """Whether a query term is a CJK run, and its words (an identifier's parts): read for every
    term each hit holds, so kept per term."""
    return _CJK_RUN.fullmatch(term) is not None, identifier_parts(term)


def identifier_parts(identifier: str) -> tuple[str, ...]:
    """An identifier's words as written between its separators (``os.PathError``: ``os``,
    ``PathError``; ``--dry-run``: ``dry``, ``run``)."""
    return tuple(part for part in _IDENTIFIER_SEPARATORS.split(identifier.lstrip("-")) if part)


def made_of_codes(terms: Collection[str], codes: Iterable[str]) -> bool:
    """Whether every one of a query's informative ``terms`` belongs to one of ``codes`` (the
    code itself or a part of it, case-insensitive): the question is those codes, as "what does
    baseURL do" is ``baseURL``, and a block holding them holds what it asks about."""
    held = {code.lower() for code in codes}
    words = held | {part.lower() for code in held for part in identifier_parts(code)}
    return bool(held and terms) and all(term in words for term in terms)


def held_as_written(text: str, term: str) -> bool:
    """Whether a query ``term`` occurs in ``text`` (both lowercase) as written, not only in
    another form of its stem: a CJK term anywhere, any other as a whole word (``lag`` is not in
    ``flag``, ``policy`` not in ``policies``). A scan of ``str.find`` hits, no regex: it runs for
    every listed term of every candidate."""
    if _CJK_RUN.fullmatch(term):
        return term in text
    start = text.find(term)
    while start >= 0:
        end = start + len(term)
        if (start == 0 or not _word_char(text[start - 1])) and (
            end == len(text) or not _word_char(text[end])
        ):
            return True
        start = text.find(term, start + 1)
    return False


def code_of(markdown: str) -> list[str]:
    """The code of ``markdown``: its fenced blocks, then its inline code spans."""
    return [block.group(0) for block in _FENCED_BLOCK.finditer(markdown)] + _CODE_SPAN.findall(markdown)


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def identifiers(text: str) -> list[str]:
    """The identifiers in ``text``, as written, in order, each once (case-insensitively).

    An identifier is a whole word (its inner ``-./:#`` kept; a leading ``--`` too) that is a
    flag (``--dry-run``), or of at least three characters with letters and digits (``E4471``,
    ``INV-48213``), snake_case or UPPER_CASE with ``_`` (``limit_x``, ``SOME_ENV_VAR``), dotted
    (``server.http.port``) or camelCase (``baseURL``). Plain and hyphenated words, abbreviations
    (``e.g``) and bare numbers are not.
    """
    found: dict[str, str] = {}
    for word in _WHOLE_WORD.findall(text):
        if _is_identifier(word):
            found.setdefault(word.lower(), word)
    return list(found.values())


def distinctive(code: str) -> bool:
    """Whether an identifier names one thing wherever it occurs: it holds a digit or an inner
    separator, or is a flag (``E4471``, ``INV-48213``, ``SOME_ENV_VAR``, ``server.http.port``,
    ``--dry-run``). A camelCase word without them is as often a product's name (``GitHub``,
    ``JavaScript``, ``PostgreSQL``) as a key (``baseURL``): a chunk holding it says little about
    whether it answers a question naming it."""
    return any(c.isdigit() for c in code) or _PARTED.search(code) is not None


def _whole_token(identifier: str) -> str:
    """One word-tokenizer token standing for the whole identifier (case-insensitive): letters and
    digits only, so the tokenizer keeps it whole and the stemmer leaves it alone."""
    digest = hashlib.blake2b(identifier.lower().encode(), digest_size=8).digest()
    return f"qid{int.from_bytes(digest, 'big')}"


def _parted(text: str) -> list[str]:
    """Each occurrence of an identifier the word tokenizer splits into parts, in order."""
    return [w for w in _WHOLE_WORD.findall(text) if _PARTED.search(w) and _is_identifier(w)]


def holds_identifier(text: str, identifier: str) -> bool:
    """Whether ``identifier`` occurs in ``text`` verbatim (case-insensitive) as a whole word, not
    inside a longer identifier (``limit_x`` is not in ``memory_limit_x``). Only the run of
    non-space characters around each occurrence is split into words (no word spans a space):
    it runs for every query code of every hit."""
    wanted, lowered = identifier.lower(), text.lower()
    if len(lowered) != len(text):  # a character whose lowercase is longer: positions differ
        return any(w.lower() == wanted for w in _WHOLE_WORD.findall(text))
    start = lowered.find(wanted)
    while start >= 0:
        begin, end = start, start + len(wanted)
        while begin > 0 and not lowered[begin - 1].isspace():
            begin -= 1
        while end < len(lowered) and not lowered[end].isspace():
            end += 1
        if wanted in _WHOLE_WORD.findall(lowered, begin, end):
            return True
        start = lowered.find(wanted, start + 1)
    return False


def _is_identifier(word: str) -> bool:
    if word.startswith("--"):
        return len(word) >= 4
    letters, digits = any(c.isalpha() for c in word), any(c.isdigit() for c in word)
    return len(word) >= 3 and (
        letters
        and digits
        or _SNAKE.fullmatch(word) is not None
        or _DOTTED.fullmatch(word) is not None
        or _CAMEL.search(word) is not None
    )


def _plain(vector: qe.SparseVector) -> SparseVector:
    return SparseVector(tuple(vector.indices), tuple(vector.values))


@cache
def bm25_encoder() -> Bm25Encoder:
    """The process's encoder (stateless and cheap to share)."""
    return Bm25Encoder()


def only_stop_words(text: str) -> bool:
    """Whether the analyzer drops every word of ``text`` (English stop words such as "in",
    "with", "where"): asked once per word (titles share their words), a text of stop words
    alone confirmed whole (a CJK pair of stop characters is a token)."""
    encoder = bm25_encoder()
    words = _TERM.findall(text.lower())
    return bool(words) and all(map(encoder.is_stop_word, words)) and not encoder.embed_query(text).indices


def sparse_text(title: str | None, breadcrumb: str | None, content: str) -> str:
    """What a chunk's BM25 vector is made of: its title, breadcrumb and text (a breadcrumb that
    starts with the title stands for both). A title of stop words alone names something (the
    ``in`` function, the ``with`` statement): it is written as code, so its words are indexed."""
    title, breadcrumb = title or "", breadcrumb or ""
    head = [breadcrumb] if breadcrumb.startswith(title) else [title, breadcrumb]
    named = [f"`{title}`"] if only_stop_words(title) else []
    return "\n".join([*named, *(part for part in head if part), content])

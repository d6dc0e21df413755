"""Query understanding: the query's dense and BM25 vectors, its informative terms and script, its
language and multilingual vector (docs/multilingual.md), and the L0 hints with the category filter
they imply."""

from __future__ import annotations

import numpy as np
from hamilton.function_modifiers import config

from lookup_knowledge.adapters.cjk_words import cjk_words
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.multilingual import mainland_chinese
from lookup_knowledge.adapters.sparse import SparseVector, bm25_encoder, word_tokens
from lookup_knowledge.calibration import Script, script_of
from lookup_knowledge.contract import L0Hints


@config.when(l1_enabled=True)
def query_vector(query: str, embedder: Embedder) -> np.ndarray:
    """The query's unit-length embedding."""
    return embedder.embed_query(query)


@config.when_in(l1_enabled=[True], retrieval_mode=["sparse", "hybrid"])
def query_sparse_vector(query: str) -> SparseVector:
    """The query's BM25 terms (CJK-aware, as the chunks were indexed), weight 1 each; the store
    applies IDF."""
    return bm25_encoder().embed_query(query)


def query_language(query: str) -> str:
    """The query's language (ISO 639-1, ``en`` when unsure), among the multilingual encoder's;
    without the ``multilingual`` extra, Chinese or Japanese by its script, else ``en``."""
    from lookup_knowledge.adapters.multilingual import language_of

    return language_of(query)


@config.when(l1_enabled=True, retrieval_mode="hybrid", multilingual_search="auto")
def multilingual_query_vector__auto(
    query: str, query_language: str, multilingual_embedder: Embedder
) -> np.ndarray | None:
    """The query by the multilingual encoder when it is not in English (``None``: an English
    query searches as without the encoder); Traditional Chinese read as Simplified
    (:func:`mainland_chinese`)."""
    return None if query_language == "en" else multilingual_embedder.embed_query(mainland_chinese(query))


@config.when(l1_enabled=True, retrieval_mode="hybrid", multilingual_search="always")
def multilingual_query_vector__always(query: str, multilingual_embedder: Embedder) -> np.ndarray | None:
    """The query by the multilingual encoder, whatever its language (Traditional Chinese read as
    Simplified: :func:`mainland_chinese`)."""
    return multilingual_embedder.embed_query(mainland_chinese(query))


@config.when_in(l1_enabled=[True], retrieval_mode=["hybrid"], multilingual_search=["auto", "always"])
def written_query_vector(
    query: str, multilingual_query_vector: np.ndarray | None, multilingual_embedder: Embedder
) -> np.ndarray | None:
    """The query by the multilingual encoder as written, for reading it against pages in its own
    script: ``multilingual_query_vector`` itself, unless that read a Traditional Chinese query
    as Simplified (better across scripts; on Traditional pages the sentences match as written)."""
    if multilingual_query_vector is None or mainland_chinese(query) == query:
        return multilingual_query_vector
    return multilingual_embedder.embed_query(query)


def query_terms(query: str) -> dict[str, int]:
    """The query's informative words (its BM25 terms, stop words removed; CJK as characters and
    pairs), each with its BM25 token id, longest first: computed once for every reader."""
    return bm25_encoder().query_terms(query)


def query_words(query: str, query_script: Script, query_terms: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """A CJK query's words as the verdict reads them (:func:`cjk_words`: a segmenter's content
    words; without one, its BM25 terms), each with the BM25 tokens that index it; empty for an
    alphabetic query (its ``query_terms`` are its words)."""
    if query_script != "cjk":
        return {}
    words = cjk_words(query)
    if words is None:
        return {term: (token,) for term, token in query_terms.items()}
    return {word: tokens for word in words if (tokens := word_tokens(word))}


def query_script(query: str) -> Script:
    """``cjk`` when most of the query's letters are CJK, else ``alphabetic``."""
    return script_of(query)


@config.when(l0_enabled=True)
def l0_hints(query: str, l0_index: L0Index, access_scope: tuple | None = None) -> L0Hints:
    """Matched titles, keywords, domains and entities from the L0 frontmatter index, of the
    documents the caller may see (``access_scope``; ``None``: unrestricted)."""
    return l0_index.match(query, access_scope)


@config.when(l0_enabled=False)
def l0_hints__disabled() -> L0Hints:
    """No hints: L0 is disabled by configuration."""
    return L0Hints()


def category_filter(l0_hints: L0Hints, pinned_category: str | None = None) -> str | None:
    """The pinned category if given, else the hints' domain when there is exactly one."""
    if pinned_category is not None:
        return pinned_category
    domains = [domain for domain in l0_hints.domains if domain.strip()]
    return domains[0] if len(domains) == 1 else None

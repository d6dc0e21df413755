"""The search port: what the dataflow asks of a vector store, and what a store must offer ingestion.

Both store adapters (Qdrant Edge, qdrant-client) implement :class:`KnowledgeStore`; the
dataflow only sees the narrower :class:`KnowledgeSearchPort`. A search answers with
:class:`Candidates`, the engine's lists as it ranked them; the ranking rules that make them the
lookup's hits (a few-matches search fused again, equal scores ordered, each hit's places) are the
DAG's (:mod:`lookup_knowledge.ranking`). The errors a store raises are in :mod:`~.errors`, the
payload's fields in :mod:`~.payload`, the translation of Qdrant's scored points into candidates in
:mod:`~.qdrant_store`.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lookup_knowledge.contract import FusionMethod, RetrievalMode

from .payload import (
    ACCESS_FIELD,
    BREADCRUMB_FIELD,
    DOC_CHUNKS_FIELD,
    DOC_HASH_FIELD,
    DOC_ID_FIELD,
    EVIDENCE_KEY_FIELD,
    LANGUAGE_FIELD,
    SOURCE_FIELD,
    SOURCE_FILE_FIELD,
    TITLE_FIELD,
)
from .sparse import SparseVector, held_as_written

PUBLIC_PRINCIPAL = "public"  # in a document's access: every caller; every restricted caller holds it
TIE_SLACK = 8  # extra sparse/hybrid hits fetched so equal scores are cut by point id, not by chance
SCORE_DECIMALS = 6  # scores equal to this many decimals are equal: the DAG orders them, a store gives all

_POINT_NAMESPACE = uuid.UUID("6f1d9a52-8a63-4b8e-9a43-3c1f2b7d0e15")


def evidence_key(doc_id: str, chunk_index: int) -> str:
    """The chunk-scoped identity of a piece of evidence: ``docId#chunk-<n>``."""
    return f"{doc_id}#chunk-{chunk_index}"


def identity_key(hit: SearchHit, original_rank: int) -> str:
    """``docId#chunk-<n>``, else ``vector:<pointId>``, else ``rank:<originalRank>``."""
    if hit.doc_id is not None and hit.chunk_index is not None:
        return evidence_key(hit.doc_id, hit.chunk_index)
    if hit.point_id:
        return f"vector:{hit.point_id}"
    return f"rank:{original_rank}"


AccessFilter = tuple[str, ...]  # what a restricted caller's searches match: its principals and "public"


@dataclass(frozen=True, slots=True)
class AccessScope:
    """Which documents a caller sees: every one (unrestricted, ``filter`` ``None``), those whose
    access names one of its principals or :data:`PUBLIC_PRINCIPAL` (restricted), or none (a
    caller whose principals are not valid, refused before any search: ``filter`` empty).

    >>> AccessScope.of(["hr"]).filter, AccessScope.of(None).restricted, NO_ACCESS.sees_nothing
    (('hr', 'public'), False, True)
    """

    filter: AccessFilter | None = None  # sorted; None: no filter, every document

    @classmethod
    def of(cls, principals: Iterable[str] | None) -> AccessScope:
        """The scope of a caller with ``principals`` (one string is one principal); ``None``: unrestricted."""
        if principals is None:
            return cls()
        if isinstance(principals, str):
            principals = [principals]
        return cls(tuple(sorted({*principals, PUBLIC_PRINCIPAL})))

    @property
    def restricted(self) -> bool:
        return self.filter is not None

    @property
    def sees_nothing(self) -> bool:
        return self.filter == ()

    def may_see(self, access: Sequence[str] | None) -> bool:
        """Whether this caller may see a document whose access is ``access`` (``None``: a document
        stored before access existed, seen by unrestricted callers only), as the store's filter
        decides it."""
        return self.filter is None or (access is not None and not set(access).isdisjoint(self.filter))


UNRESTRICTED = AccessScope()
NO_ACCESS = AccessScope(())


def point_id_for(key: str, doc_hash: str = "") -> str:
    """Deterministic point id: UUID5 of the evidence key and the document's content hash.

    Re-ingesting a version rewrites its own points (idempotent); a new version gets new points,
    so writing it never overwrites part of the old one.
    """
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{key}@{doc_hash}" if doc_hash else key))


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search: the text, its dense and (sparse, hybrid) BM25 vectors, width, optional category.

    ``hybrid`` fuses a dense and a sparse prefetch, each ``prefetch_k`` wide (at least ``top_k``),
    both under the category filter, by ``fusion`` inside the store. ``access`` restricts every
    query the store runs for the request (prefetches, companions, cosine and count lookups) to
    chunks whose access field holds one of its principals: a payload filter in the engine.
    ``scores_only`` asks for what a calibration search reads (each hit's scores, places and
    document id): the store sends no other payload and no BM25 vectors, so hits carry no
    content, chunk index, matched terms or codes (what a new access scope's first lookup
    spends on its probes: docs/trust.md).

    ``few_matches_fusion``: how the lookup fuses a hybrid search again when its BM25 leg matches
    too few chunks for ``fusion`` (``None``: by ``fusion`` whatever the count); the rule is the
    DAG's (:func:`lookup_knowledge.ranking.few_matches_search`), the store only runs the search
    it is given.

    ``query_terms``: the query's informative terms and their BM25 token ids (the DAG's
    ``query_terms`` node): a sparse or hybrid hit names those its BM25 vector holds
    (``matched_terms``; none given, none named).

    ``multilingual_vector``: the query by the multilingual encoder (the DAG's
    ``multilingual_query_vector``): a hybrid search fuses a third prefetch on the chunks'
    multilingual vectors, and its companion reports each hit's multilingual cosine and place. A
    store without those vectors (made before them, or with them off) searches without it.
    ``dense_fused`` ``False`` (a question not in English) leaves the dense prefetch out of the
    fusion: MiniLM's vector of such a question is noise (docs/multilingual.md); its dense
    companion still reports each hit's cosine and place.

    ``other_languages_than``: every query of the request leaves out the chunks written in that
    language (the payload's ``language``; a chunk without one is kept).
    """

    query_text: str
    query_vector: Sequence[float]
    top_k: int
    category: str | None = None
    mode: RetrievalMode = "dense"
    sparse_vector: SparseVector | None = None
    fusion: FusionMethod = "dbsf"
    prefetch_k: int | None = None
    access: AccessFilter | None = None  # the caller's :attr:`AccessScope.filter`; None: unrestricted
    scores_only: bool = False
    few_matches_fusion: FusionMethod | None = None
    query_terms: Mapping[str, int] = field(default_factory=dict)
    multilingual_vector: Sequence[float] | None = None  # hybrid: a prefetch on the multilingual vectors
    dense_fused: bool = True  # hybrid with multilingual_vector: whether the dense prefetch is fused too
    other_languages_than: str | None = None  # only chunks not written in this language (ISO 639-1)

    def __post_init__(self) -> None:
        if self.mode != "dense" and self.sparse_vector is None:
            raise ValueError(f"a {self.mode} search needs the query's sparse vector")

    @property
    def prefetch_width(self) -> int:
        return max(self.prefetch_k or self.top_k, self.top_k)

    @property
    def ranked_width(self) -> int:
        """Points a sparse or hybrid search fetches (``top_k`` + :data:`TIE_SLACK`), and the
        depth of a hybrid search's dense, sparse and multilingual companions."""
        return self.top_k + TIE_SLACK


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One scored point of a search.

    ``score`` is what the store ranked by: the cosine (dense), the BM25 score (sparse) or the
    fused score (hybrid). ``normalized_score`` is always the dense cosine clipped to [0, 1], in
    every mode, so the fallback decision, ``min_evidence_score`` and the relevance level read
    one calibrated scale. ``dense_rank`` and ``sparse_rank`` are the hit's places (from 1) in
    the dense and the sparse search; they and ``sparse_score`` are ``None`` when that search did
    not rank it in its top ``ranked_width`` (``top_k`` + :data:`TIE_SLACK`, not the wider
    prefetch). The store leaves the places and the companions' scores (``sparse_score`` of a
    hybrid hit, ``multilingual_score``) unset in its :class:`Candidates`: the DAG sets them as it
    orders equal scores (:func:`lookup_knowledge.ranking.ranked_hits`). ``matched_terms``: the
    query terms the hit's BM25 vector holds (sparse, hybrid); ``multilingual_score`` and
    ``multilingual_rank``: its cosine and place in the multilingual search (hybrid with
    ``multilingual_vector``; ``None`` beyond ``ranked_width``). ``exact_codes``: the query's
    codes (identifiers such as
    ``INV-48213``, see :func:`~lookup_knowledge.adapters.sparse.identifiers`) that the hit's
    content holds verbatim as whole words (sparse, hybrid; ``limit_x`` is not in ``memory_limit_x``).
    """

    point_id: str
    content: str
    score: float
    normalized_score: float
    payload: Mapping[str, Any]
    doc_id: str | None = None
    chunk_index: int | None = None
    dense_score: float | None = None
    sparse_score: float | None = None
    fused_score: float | None = None
    dense_rank: int | None = None
    sparse_rank: int | None = None
    matched_terms: tuple[str, ...] = ()
    exact_codes: tuple[str, ...] = ()
    fusion: FusionMethod | None = None  # hybrid: how the store fused the search that ranked it
    multilingual_score: float | None = None  # its multilingual cosine, when that leg ranked it
    multilingual_rank: int | None = None

    def placed(
        self,
        dense_rank: int | None = None,
        sparse: tuple[int, float] | None = None,
        multilingual: tuple[int, float] | None = None,
    ) -> SearchHit:
        """This hit at its places: its dense place, its (place, score) in the sparse and the
        multilingual search (``None``: not ranked there). Built field by field: a ``replace``
        costs twice a constructor, and a lookup places 20-40 hits."""
        return SearchHit(
            self.point_id, self.content, self.score, self.normalized_score, self.payload, self.doc_id,
            self.chunk_index, self.dense_score, sparse[1] if sparse else None, self.fused_score,
            dense_rank, sparse[0] if sparse else None, self.matched_terms, self.exact_codes, self.fusion,
            multilingual[1] if multilingual else None, multilingual[0] if multilingual else None,
        )  # fmt: skip

    def written_terms(self, terms: Sequence[str] | None = None) -> tuple[str, ...]:
        """Of ``terms`` (default: ``matched_terms``), those the hit holds as written (whole words,
        case-insensitive), not only in another form of their stem (``parent`` for "parental",
        ``leavers`` for "leave"): in the words BM25 read, its title, breadcrumb and content."""
        terms = self.matched_terms if terms is None else terms
        if not terms:
            return ()
        payload = self.payload
        text = "\n".join((payload.get(TITLE_FIELD) or "", payload.get(BREADCRUMB_FIELD) or "", self.content))
        text = text.lower()
        return tuple(term for term in terms if held_as_written(text, term))


Scored = tuple[str, float]  # a point id and its score in one search


@dataclass(frozen=True, slots=True)
class Candidates:
    """What the store answered to one search, as its engine ranked it.

    ``hits``: the points the search's ranked query returned, best first as the engine returned
    them, each with its dense cosine, its payload, matched terms and codes, but no places: a dense
    search's ``top_k``; of a sparse or hybrid search's ``ranked_width``, every point that any
    order of equal scores (to :data:`SCORE_DECIMALS`) could keep in its ``top_k`` (the ``top_k``
    best, and those after them scoring as the ``top_k``-th does), equal scores in whatever order
    the engine left them. ``dense``, ``sparse`` and ``multilingual``: a hybrid search's legs run alone
    (its companions, ``ranked_width`` deep), each point's (id, score) in the engine's order; the
    multilingual one only with a ``multilingual_vector``. The DAG makes them the lookup's hits
    (:mod:`lookup_knowledge.ranking`).
    """

    hits: list[SearchHit]
    dense: list[Scored] = field(default_factory=list)
    sparse: list[Scored] = field(default_factory=list)
    multilingual: list[Scored] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk ready to be written: its dense and BM25 vectors and payload (which carries doc_id
    and chunk_index)."""

    vector: Sequence[float]
    payload: Mapping[str, Any] = field(default_factory=dict)
    sparse_vector: SparseVector = SparseVector((), ())
    multilingual_vector: Sequence[float] | None = None  # written when the store holds such vectors

    @property
    def point_id(self) -> str:
        return point_id_for(self.payload[EVIDENCE_KEY_FIELD], self.payload.get(DOC_HASH_FIELD, ""))


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A document as the store holds it: its source and, per version (content hash), whether
    every chunk of that version is present."""

    source: str
    versions: Mapping[str, bool]
    source_version: str | None = None  # the version of the file its chunks were ingested from
    accesses: frozenset[tuple[str, ...] | None] = field(default=frozenset(), compare=False)  # its
    # chunks' access fields (None: a chunk written before access control)
    languages: Mapping[str | None, int] = field(default_factory=dict, compare=False)  # its chunks
    # per language (None: a chunk without one: written before languages, or not detected)

    @property
    def lacks_languages(self) -> bool:
        """Some stored chunk has no language (written before languages, or without the identifier)."""
        return None in self.languages

    def holds_access(self, access: Sequence[str]) -> bool:
        """Every stored chunk carries exactly ``access``."""
        return self.accesses == {tuple(access)}

    def holds_only(self, doc_hash: str) -> bool:
        """Exactly one version is stored, ``doc_hash``, and it is complete."""
        return dict(self.versions) == {doc_hash: True}


def stored_documents(payloads: Iterable[Mapping[str, Any]]) -> dict[str, StoredDocument]:
    """doc_id -> :class:`StoredDocument`, from the payloads of every stored chunk.

    A version is complete when the number of its chunks equals the ``doc_chunks`` each of them
    carries; chunks written without that mark (older releases) count as incomplete.
    """
    counts: dict[str, dict[tuple[str, int], int]] = {}
    sources: dict[str, str] = {}
    file_versions: dict[str, str | None] = {}
    accesses: dict[str, set[tuple[str, ...] | None]] = {}
    languages: dict[str, Counter[str | None]] = {}
    for payload in payloads:
        doc_id = payload[DOC_ID_FIELD]
        version = (payload.get(DOC_HASH_FIELD, ""), int(payload.get(DOC_CHUNKS_FIELD, 0)))
        versions = counts.setdefault(doc_id, {})
        versions[version] = versions.get(version, 0) + 1
        sources.setdefault(doc_id, str(payload.get(SOURCE_FIELD, doc_id)))
        stamp = payload.get(SOURCE_FILE_FIELD)
        file_versions.setdefault(doc_id, stamp.get("version") if isinstance(stamp, Mapping) else None)
        access = payload.get(ACCESS_FIELD)
        accesses.setdefault(doc_id, set()).add(tuple(access) if isinstance(access, list) else None)
        languages.setdefault(doc_id, Counter())[payload.get(LANGUAGE_FIELD)] += 1
    documents = {}
    for doc_id, versions in counts.items():
        complete: dict[str, bool] = {}
        for (doc_hash, expected), found in versions.items():
            complete[doc_hash] = complete.get(doc_hash, True) and found == expected
        documents[doc_id] = StoredDocument(
            sources[doc_id], complete, file_versions[doc_id], frozenset(accesses[doc_id]), languages[doc_id]
        )
    return documents


class KnowledgeSearchPort(ABC):
    """What the dataflow needs from a store (an ABC, so Hamilton can type-check the input)."""

    @abstractmethod
    def search(self, request: SearchRequest) -> Candidates:
        """One search (dense, sparse or hybrid): its candidates, as the engine ranked them."""

    @abstractmethod
    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        """Several searches at once, answers in request order."""

    def term_idf(self, token_ids: Sequence[int], access: AccessFilter | None = None) -> dict[int, float]:
        """The store's BM25 IDF of each BM25 token id; a token no chunk the caller may see holds
        gets the IDF of a term no chunk holds. A port that cannot tell returns ``{}``."""
        return {}

    def unheld_term_idf(self) -> float | None:
        """The IDF :meth:`term_idf` gives a term no chunk holds (``None``: the port cannot tell)."""
        return None

    def sample_chunks(self, n: int, access: AccessFilter | None = None) -> list[tuple[str, str]]:
        """Up to ``n`` chunks the caller may see, as (doc id, content), in an order unrelated to
        their text (the engine's point ids: hashes), to learn how the store answers questions
        made from its own text. A port that cannot tell returns ``[]``."""
        return []


class KnowledgeStore(KnowledgeSearchPort):
    """A search port that ingestion can also write to."""

    @property
    def multilingual_vectors(self) -> bool:
        """Whether its chunks carry multilingual vectors (a search's ``multilingual_vector`` is
        otherwise left out)."""
        return False

    @abstractmethod
    def upsert(self, chunks: Sequence[StoredChunk]) -> None:
        """Insert or replace chunks by their deterministic point ids."""

    @abstractmethod
    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        """Delete every chunk of these documents."""

    @abstractmethod
    def delete_other_chunks(self, keep: Mapping[str, Sequence[str]]) -> None:
        """For each doc_id, delete its chunks except the points whose ids are given."""

    @abstractmethod
    def documents(self) -> dict[str, StoredDocument]:
        """Every stored document, with its source and the completeness of each stored version."""

    def stored_vectors(self, doc_ids: Sequence[str], source: str) -> dict[tuple[str, str], list[float]]:
        """The dense vectors of the stored chunks of ``doc_ids`` made by ``source`` (their
        ``embedding_model``: the model and the form of the embedded text), by
        (breadcrumb, content), the text that was embedded: a new version of a document reuses
        them for its unchanged chunks. A store that cannot tell returns ``{}`` (all are embedded)."""
        return {}

    @abstractmethod
    def set_access(self, doc_id: str, access: Sequence[str]) -> None:
        """Set the access field of every chunk of ``doc_id`` (one payload update by filter)."""

    @abstractmethod
    def chunk_texts(self, doc_ids: Sequence[str]) -> dict[str, list[tuple[Any, str]]]:
        """The stored chunks of ``doc_ids`` as (point id, content), each document's in chunk
        order: what a chunk's language is read from."""

    @abstractmethod
    def set_languages(self, languages: Mapping[Any, str]) -> None:
        """Set the language field of each point given by id: one payload update per language,
        no vector written."""

    def write_documents(self, chunks: Sequence[StoredChunk]) -> None:
        """Write whole documents: every chunk of their new versions, then delete their old ones.

        New versions get new point ids, so until the delete the old version stays intact: a
        kill leaves each document's old version complete, its new one beside it complete or
        partial, and :meth:`documents` shows both, so the next ingest finishes the swap.
        """
        self.upsert(chunks)
        keep: dict[str, list[str]] = {}
        for chunk in chunks:
            keep.setdefault(chunk.payload[DOC_ID_FIELD], []).append(chunk.point_id)
        self.delete_other_chunks(keep)

    @abstractmethod
    def count(self) -> int:
        """Number of stored chunks."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release the store."""

    def optimize(self) -> None:  # noqa: B027 - optional: only embedded engines need it
        """Build indexes after bulk writes (stores that index on their own do nothing)."""

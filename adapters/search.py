"""The search port: what the dataflow asks of a vector store, and what a store must offer ingestion.

Both store adapters (Qdrant Edge, qdrant-client) implement :class:`KnowledgeStore`; the
dataflow only sees the narrower :class:`KnowledgeSearchPort`.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lookup_knowledge.contract import FusionMethod, RetrievalMode

from .errors import StoreBackendError
from .payload import (
    ACCESS_FIELD,
    CHUNK_INDEX_FIELD,
    CONTENT_FIELD,
    DOC_CHUNKS_FIELD,
    DOC_HASH_FIELD,
    DOC_ID_FIELD,
    EVIDENCE_KEY_FIELD,
    SOURCE_FIELD,
    SOURCE_FILE_FIELD,
)
from .sparse import Bm25Encoder, SparseVector, bm25_encoder, holds_identifier
from .text import escape_surrogates

PUBLIC_PRINCIPAL = "public"  # in a document's access: every caller; every restricted caller holds it

DENSE_VECTOR = "dense"  # the named vectors every point carries
SPARSE_VECTOR = "bm25"
RRF_K = 60  # reciprocal-rank fusion constant (Cormack et al.; Qdrant's and Elasticsearch's default)
TIE_SLACK = 8  # extra sparse/hybrid hits fetched so equal scores are cut by point id, not by chance

_COSINE_BOUND = 1.0 + 1e-3  # float32 rounding lets a cosine similarity exceed 1 slightly
_POINT_NAMESPACE = uuid.UUID("6f1d9a52-8a63-4b8e-9a43-3c1f2b7d0e15")


def process_note() -> str:
    """This process as a note for lock files: its pid and program name (``lookup-knowledge mcp``:
    the command's name, never its arguments, which may hold secrets), always encodable."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    command = ""
    if program.startswith("lookup-knowledge") and len(sys.argv) > 1 and _COMMAND.fullmatch(sys.argv[1]):
        command = sys.argv[1]  # our own CLI's first argument, when a plain word, is its command
    return escape_surrogates(f"{os.getpid()} {program} {command}".strip())[:120]


_COMMAND = re.compile(r"[a-z][a-z-]{0,30}")  # a subcommand's name (``mcp``, ``ingest``), not a value


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600), whatever it holds
    (lone surrogates from undecodable argv bytes are escaped)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as file:
        os.fchmod(fd, 0o600)  # a file left by an older release keeps its mode otherwise
        file.write(text)


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


AccessScope = tuple[str, ...]  # a restricted caller's principals and "public", sorted


def access_scope(principals: Iterable[str] | None) -> AccessScope | None:
    """What a caller's searches match in the access field: its principals and
    :data:`PUBLIC_PRINCIPAL`, sorted; ``None`` (no principals given) is unrestricted, no filter."""
    if principals is None:
        return None
    if isinstance(principals, str):  # one principal, not its characters
        principals = [principals]
    return tuple(sorted({*principals, PUBLIC_PRINCIPAL}))


def may_see(access: Sequence[str] | None, scope: AccessScope | None) -> bool:
    """Whether a caller of ``scope`` may see a document whose access is ``access`` (``None``: a
    document stored before access existed, seen by unrestricted callers only), as the store's
    filter decides it."""
    return scope is None or (access is not None and not set(access).isdisjoint(scope))


def point_id_for(key: str, doc_hash: str = "") -> str:
    """Deterministic point id: UUID5 of the evidence key and the document's content hash.

    Re-ingesting a version rewrites its own points (idempotent); a new version gets new points,
    so writing it never overwrites part of the old one.
    """
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{key}@{doc_hash}" if doc_hash else key))


def cosine_normalized(score: float) -> float:
    """Normalized similarity for cosine distance: the similarity clipped to [0, 1]."""
    return min(1.0, max(0.0, score))


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search: the text, its dense and (sparse, hybrid) BM25 vectors, width, optional category.

    ``hybrid`` fuses a dense and a sparse prefetch, each ``prefetch_k`` wide (at least ``top_k``),
    both under the category filter, by ``fusion`` inside the store. ``access`` restricts every
    query the store runs for the request (prefetches, companions, cosine and count lookups) to
    chunks whose access field holds one of its principals: a payload filter in the engine.
    """

    query_text: str
    query_vector: Sequence[float]
    top_k: int
    category: str | None = None
    mode: RetrievalMode = "dense"
    sparse_vector: SparseVector | None = None
    fusion: FusionMethod = "dbsf"
    prefetch_k: int | None = None
    access: AccessScope | None = None  # the caller's scope (:func:`access_scope`); None: unrestricted

    def __post_init__(self) -> None:
        if self.mode != "dense" and self.sparse_vector is None:
            raise ValueError(f"a {self.mode} search needs the query's sparse vector")

    @property
    def prefetch_width(self) -> int:
        return max(self.prefetch_k or self.top_k, self.top_k)

    @property
    def ranked_width(self) -> int:
        """Hits a sparse or hybrid search fetches (``top_k`` + :data:`TIE_SLACK`), and the
        places a hybrid search's dense and sparse companions report."""
        return self.top_k + TIE_SLACK


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One scored point as the port returns it.

    ``score`` is what the store ranked by: the cosine (dense), the BM25 score (sparse) or the
    fused score (hybrid). ``normalized_score`` is always the dense cosine clipped to [0, 1], in
    every mode, so the fallback decision, ``min_evidence_score`` and the relevance level read
    one calibrated scale. ``dense_rank`` and ``sparse_rank`` are the hit's places (from 1) in
    the dense and the sparse search; they and ``sparse_score`` are ``None`` when that search did
    not rank it in its top ``ranked_width`` (``top_k`` + :data:`TIE_SLACK`, not the wider
    prefetch). ``matched_terms``: the query terms the hit's BM25 vector holds (sparse, hybrid);
    ``exact_codes``: the query's codes (identifiers such as
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


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk ready to be written: its dense and BM25 vectors and payload (which carries doc_id
    and chunk_index)."""

    vector: Sequence[float]
    payload: Mapping[str, Any] = field(default_factory=dict)
    sparse_vector: SparseVector = SparseVector((), ())

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
    documents = {}
    for doc_id, versions in counts.items():
        complete: dict[str, bool] = {}
        for (doc_hash, expected), found in versions.items():
            complete[doc_hash] = complete.get(doc_hash, True) and found == expected
        documents[doc_id] = StoredDocument(
            sources[doc_id], complete, file_versions[doc_id], frozenset(accesses[doc_id])
        )
    return documents


class KnowledgeSearchPort(ABC):
    """What the dataflow needs from a store (an ABC, so Hamilton can type-check the input)."""

    @abstractmethod
    def search(self, request: SearchRequest) -> list[SearchHit]:
        """Dense search; hits best first."""

    @abstractmethod
    def search_batch(self, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        """Several searches at once, results in request order."""


class KnowledgeStore(KnowledgeSearchPort):
    """A search port that ingestion can also write to."""

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

    @abstractmethod
    def set_access(self, doc_id: str, access: Sequence[str]) -> None:
        """Set the access field of every chunk of ``doc_id`` (one payload update by filter)."""

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


def complete_hits(
    request: SearchRequest, hits: list[SearchHit], stored: Callable[[SearchRequest], int]
) -> list[SearchHit]:
    """``hits``, checked to hold every point the search could return.

    An engine drops a point whose similarity is not a number (a vector file corrupted to NaN),
    so corruption can look like an empty store. A dense search that returns fewer hits than
    asked while the store holds more matching points (``stored(request)``: under its category
    and access filters, asked only then)
    raises; so does a hybrid one, whose dense prefetch alone fills ``top_k``. (A lexical search
    returns only what matches its terms: it is not checked.)
    """
    if request.mode != "sparse" and len(hits) < request.top_k:
        held = stored(request)
        if len(hits) < min(held, request.top_k):
            raise StoreBackendError(
                f"the search returned {len(hits)} of the {held} stored points it should have: their "
                "vectors are unreadable (corrupt data, e.g. NaN); delete the store and ingest again"
            )
    return hits


def _checked_cosine(point_id: Any, score: float) -> float:
    if not -_COSINE_BOUND <= score <= _COSINE_BOUND:  # NaN fails both comparisons too
        raise StoreBackendError(
            f"the store returned a score of {score} for point {point_id}, outside the cosine range "
            "[-1, 1]: its data is corrupt; delete the store and ingest again"
        )
    return score


def hit_from_payload(
    point_id: Any,
    score: float,
    payload: Mapping[str, Any] | None,
    *,
    dense_score: float | None = None,
    sparse_score: float | None = None,
    fused_score: float | None = None,
    dense_rank: int | None = None,
    sparse_rank: int | None = None,
    matched_terms: Sequence[str] = (),
    exact_codes: Sequence[str] = (),
) -> SearchHit:
    """Build a :class:`SearchHit` from a store's raw point (shared by both adapters); a dense
    search's ``score`` is its cosine."""
    dense = _checked_cosine(point_id, score if dense_score is None else dense_score)
    payload = payload or {}
    chunk_index = payload.get(CHUNK_INDEX_FIELD)
    return SearchHit(
        point_id=str(point_id),
        content=payload.get(CONTENT_FIELD, ""),
        score=score,
        normalized_score=cosine_normalized(dense),
        payload=payload,
        doc_id=payload.get(DOC_ID_FIELD),
        chunk_index=int(chunk_index) if chunk_index is not None else None,
        dense_score=dense,
        sparse_score=sparse_score,
        fused_score=fused_score,
        dense_rank=dense_rank,
        sparse_rank=sparse_rank,
        matched_terms=tuple(matched_terms),
        exact_codes=tuple(exact_codes),
    )


Point = tuple[Any, float, "Mapping[str, Any] | None", "Mapping[str, Any] | None"]


class ScoredPoints:
    """One request's raw points on their way to hits: the dense cosine of each, its sparse score,
    its places in the dense and sparse searches, the query terms it matched and the query's codes
    it holds.

    ``points`` are (point id, score, payload, named vectors): in sparse and hybrid mode the
    vectors hold the BM25 vector (its terms name the matches), never the dense one (384 floats
    per hit to read would cost more than asking the store). A hybrid search also passes the
    (id, score) its dense and sparse companions found: a companion's dense score is the hit's
    cosine. The cosines no search returned (:attr:`missing_cosines`) the adapter asks the store
    for, scoring only those points, and hands them to :meth:`hits`.

    BM25 and rank-fusion scores tie often (two hits first in one search and second in the
    other); the engine breaks ties by chance, so equal scores are ordered by point id here,
    among ``top_k`` + :data:`TIE_SLACK` fetched, before the cut to ``top_k``.
    """

    def __init__(
        self,
        request: SearchRequest,
        points: Sequence[Point],
        dense_points: Sequence[tuple[Any, float]] = (),
        sparse_points: Sequence[tuple[Any, float]] = (),
    ) -> None:
        self.request = request
        if request.mode == "dense":
            self.points = list(points)
            self.missing_cosines: list[str] = []
            return
        ranked = _untied([(str(pid), score, payload, vectors) for pid, score, payload, vectors in points])
        self.points = ranked[: request.top_k]
        if request.mode == "sparse":
            sparse_points = [(pid, score) for pid, score, *_ in self.points]
        dense = _untied(_str_ids(dense_points))
        self._dense_places = {pid: rank for rank, (pid, _) in enumerate(dense, start=1)}
        self._cosines = dict(dense)
        self._sparse_places = {
            pid: (rank, score) for rank, (pid, score) in enumerate(_untied(_str_ids(sparse_points)), start=1)
        }
        self.missing_cosines = [pid for pid, *_ in self.points if pid not in self._cosines]

    def hits(self, cosines: Mapping[str, float] | None = None) -> list[SearchHit]:
        """The hits, best first; ``cosines``: the store's answer for :attr:`missing_cosines`.

        A hit whose cosine the store cannot give has an unreadable vector (corrupt data, e.g.
        NaN: the engine drops such a point from a dense search): :class:`StoreBackendError`.
        """
        mode = self.request.mode
        if mode == "dense":
            return [
                hit_from_payload(pid, score, payload, dense_rank=rank)
                for rank, (pid, score, payload, _) in enumerate(self.points, start=1)
            ]
        known = {**self._cosines, **(cosines or {})}
        terms = bm25_encoder().query_terms(self.request.query_text)
        codes = bm25_encoder().query_codes(self.request.query_text)
        hits = []
        for pid, score, payload, vectors in self.points:
            if pid not in known:
                raise StoreBackendError(
                    f"the store cannot score point {pid} against the query: its dense vector is "
                    "unreadable (corrupt data, e.g. NaN); delete the store and ingest again"
                )
            sparse_rank, sparse_score = self._sparse_places.get(pid, (None, None))
            held = set(vectors[SPARSE_VECTOR].indices)
            content = (payload or {}).get(CONTENT_FIELD, "")
            hits.append(
                hit_from_payload(
                    pid,
                    score,
                    payload,
                    dense_score=known[pid],
                    sparse_score=sparse_score,
                    fused_score=score if mode == "hybrid" else None,
                    dense_rank=self._dense_places.get(pid),
                    sparse_rank=sparse_rank,
                    matched_terms=Bm25Encoder.matched_terms(terms, held),
                    exact_codes=[code for code in codes if holds_identifier(content, code)],
                )
            )
        return hits


def found_hits(
    requests: Sequence[SearchRequest],
    results: Iterator[Iterable[Any]],
    ask_cosines: Callable[[list[ScoredPoints]], Iterable[dict[str, float]]],
    stored: Callable[[SearchRequest], int],
) -> list[list[SearchHit]]:
    """Each request's hits from the engine's result lists, in the order the adapter sent the
    queries: the ranked one, then for hybrid its dense and sparse companions (points with
    ``id``, ``score``, ``payload``, ``vector``). The cosines no search returned are asked of the
    store in one more round trip for all requests (``ask_cosines``: the adapter's dense searches
    restricted to those points), only when some request lacks any; every list is then checked
    by :func:`complete_hits` (``stored``: the store's point count under a request's filters)."""
    scored = []
    for request in requests:
        rows = [(p.id, p.score, p.payload, p.vector) for p in next(results)]
        companions = 2 if request.mode == "hybrid" else 0  # its dense and sparse searches alone
        places = [[(p.id, p.score) for p in next(results)] for _ in range(companions)]
        scored.append(ScoredPoints(request, rows, *places))
    asking = [s for s in scored if s.missing_cosines]
    answers = iter(ask_cosines(asking) if asking else [])
    return [
        complete_hits(s.request, s.hits(next(answers) if s.missing_cosines else None), stored) for s in scored
    ]


def _untied(points: Sequence[Any]) -> list[Any]:
    """Points (id as text, score, ...) best first, equal scores (to 6 decimals) by point id."""
    return sorted(points, key=lambda p: (-round(p[1], 6), p[0]))


def _str_ids(points: Sequence[tuple[Any, float]]) -> list[tuple[str, float]]:
    return [(str(pid), score) for pid, score in points]

"""What both Qdrant adapters (the embedded Edge shard and the client of a server) share: a search
is a batch of one, the documents are read from the stored payloads, the count is one of all, and
the engine's scored points become the port's candidates the same way (:func:`found_candidates`):
as the engine ranked them, for the DAG to rank (:mod:`lookup_knowledge.ranking`)."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from lookup_knowledge.contract import FusionMethod

from .errors import PointGoneError, StoreBackendError
from .payload import BREADCRUMB_FIELD, CHUNK_INDEX_FIELD, CONTENT_FIELD, DOC_ID_FIELD, EMBEDDING_MODEL_FIELD
from .search import (
    SCORE_DECIMALS,
    AccessFilter,
    Candidates,
    KnowledgeStore,
    SearchHit,
    SearchRequest,
    StoredDocument,
    stored_documents,
)
from .sparse import Bm25Encoder, holds_identifier

DENSE_VECTOR = "dense"  # the named vectors every point carries
SPARSE_VECTOR = "bm25"
MULTILINGUAL_VECTOR = "multilingual"  # optional: the chunks' multilingual encoder vectors
RRF_K = 60  # reciprocal-rank fusion constant (Cormack et al.; Qdrant's and Elasticsearch's default)
_COSINE_BOUND = 1.0 + 1e-3  # float32 rounding lets a cosine similarity exceed 1 slightly


class QdrantStore(KnowledgeStore):
    """A :class:`KnowledgeStore` over a Qdrant engine: each adapter sends the batch, scrolls the
    payloads and counts points in its engine's API."""

    def search(self, request: SearchRequest) -> Candidates:
        """One search (dense, sparse or fused hybrid), filtered by category when the request
        carries one."""
        return self.search_batch([request])[0]

    def documents(self) -> dict[str, StoredDocument]:
        """Every stored document, with its source and the completeness of each stored version."""
        return stored_documents(self._payloads())

    def count(self) -> int:
        return self._matching(None)

    def term_idf(self, token_ids: Sequence[int], access: AccessFilter | None = None) -> dict[int, float]:
        """Each token's IDF, read back from one batch of one-token BM25 queries (:func:`idf_of`);
        a token no chunk the caller may see holds: :func:`unheld_idf`."""
        tops = self._token_tops(token_ids, access) if token_ids else []
        found = {
            token: idf
            for token, top in zip(token_ids, tops, strict=True)
            if top is not None and (idf := idf_of(token, top)) is not None
        }
        unheld = self.unheld_term_idf() if len(found) < len(token_ids) else 0.0
        return {token: found.get(token, unheld) for token in token_ids}

    def unheld_term_idf(self) -> float:
        return unheld_idf(self._points_estimate())

    def sample_chunks(self, n: int, access: AccessFilter | None = None) -> list[tuple[str, str]]:
        """The first ``n`` points the caller may see in point id order (ids are hashes of the
        evidence keys: an order unrelated to the text), as (doc id, content)."""
        if n <= 0:
            return []
        payloads = self._first_payloads(n, access, [DOC_ID_FIELD, CONTENT_FIELD])
        return [chunk for payload in payloads if (chunk := _doc_and_content(payload))]

    def stored_vectors(self, doc_ids: Sequence[str], source: str) -> dict[tuple[str, str], list[float]]:
        if not doc_ids:
            return {}
        fields = [BREADCRUMB_FIELD, CONTENT_FIELD, EMBEDDING_MODEL_FIELD]
        return {
            (payload.get(BREADCRUMB_FIELD) or "", payload.get(CONTENT_FIELD) or ""): list(vector)
            for _, payload, vector in self._document_points(list(doc_ids), fields, dense=True)
            if payload.get(EMBEDDING_MODEL_FIELD) == source and vector is not None
        }

    def chunk_texts(self, doc_ids: Sequence[str]) -> dict[str, list[tuple[Any, str]]]:
        if not doc_ids:
            return {}
        chunks: dict[str, list[tuple[int, Any, str]]] = {}
        fields = [DOC_ID_FIELD, CHUNK_INDEX_FIELD, CONTENT_FIELD]
        for point_id, payload, _ in self._document_points(list(doc_ids), fields, dense=False):
            chunk = (int(payload.get(CHUNK_INDEX_FIELD) or 0), point_id, payload.get(CONTENT_FIELD) or "")
            chunks.setdefault(payload[DOC_ID_FIELD], []).append(chunk)
        return {doc_id: [(pid, text) for _, pid, text in sorted(found)] for doc_id, found in chunks.items()}

    @abstractmethod
    def _points_estimate(self) -> int:
        """The engine's point count from its segments' statistics, without a scan (an exact
        count takes 70-80 ms at a million points; a term's IDF reads it on a log scale)."""

    @abstractmethod
    def _document_points(
        self, doc_ids: list[str], fields: list[str], *, dense: bool
    ) -> Iterator[tuple[Any, Mapping[str, Any], Sequence[float] | None]]:
        """The id, payload ``fields`` and (``dense``) dense vector of every point of ``doc_ids``,
        page by page."""

    @abstractmethod
    def _first_payloads(
        self, n: int, access: AccessFilter | None, fields: list[str]
    ) -> list[Mapping[str, Any]]:
        """The payload ``fields`` of the first ``n`` points the caller may see: one scroll."""

    @abstractmethod
    def _token_tops(self, token_ids: Sequence[int], access: AccessFilter | None) -> list[Any]:
        """Per token, the best point (with its BM25 vector) the caller may see of the one-token
        query ``{token: 1}``, or ``None``: one batch."""

    @abstractmethod
    def _payloads(self) -> Iterator[Mapping[str, Any]]:
        """Every point's version fields (:data:`~.payload.VERSION_FIELDS`), page by page."""

    @abstractmethod
    def _matching(self, request: SearchRequest | None) -> int:
        """The exact number of points a request may return (under its category and access
        filters); of all points without a request."""


def idf_of(token: int, point: Any) -> float | None:
    """A token's IDF, read from the engine's answer to the one-token query ``{token: 1}``: its
    best point's score is the IDF times that point's weight for the token (``Modifier.IDF``).
    The engine applies the IDF without exposing it; this reads it back exactly."""
    vectors = point.vector if isinstance(point.vector, Mapping) else {}
    sparse = vectors.get(SPARSE_VECTOR)
    for index, value in zip(sparse.indices if sparse else (), sparse.values if sparse else (), strict=True):
        if index == token and value > 0:
            return point.score / value
    return None


def unheld_idf(points: int) -> float:
    """The BM25 IDF of a term no chunk holds, in a store of ``points`` chunks."""
    return math.log(1 + (points + 0.5) / 0.5)


def cosine_normalized(score: float) -> float:
    """Normalized similarity for cosine distance: the similarity clipped to [0, 1]."""
    return min(1.0, max(0.0, score))


def complete_hits(request: SearchRequest, returned: int, stored: Callable[[SearchRequest], int]) -> None:
    """Check that a search's ``returned`` points hold every point it could return.

    An engine drops a point whose similarity is not a number (a vector file corrupted to NaN),
    so corruption can look like an empty store. A dense search that returns fewer than ``top_k``
    points while the store holds more matching points (``stored(request)``: under its category
    and access filters, asked only then) raises; so does a hybrid one, whose dense prefetch alone
    fills ``top_k``. (A lexical search returns only what matches its terms: it is not checked.)
    """
    if request.mode != "sparse" and returned < request.top_k:
        held = stored(request)
        if returned < min(held, request.top_k):
            raise StoreBackendError(
                f"the search returned {returned} of the {held} stored points it should have: their "
                "vectors are unreadable (corrupt data, e.g. NaN); delete the store and ingest again"
            )


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
    fused_score: float | None = None,
    matched_terms: Sequence[str] = (),
    exact_codes: Sequence[str] = (),
    fusion: FusionMethod | None = None,
) -> SearchHit:
    """Build an unplaced :class:`SearchHit` from a store's raw point (shared by both adapters); a
    dense search's ``score`` is its cosine."""
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
        fused_score=fused_score,
        matched_terms=tuple(matched_terms),
        exact_codes=tuple(exact_codes),
        fusion=fusion,
    )


Point = tuple[Any, float, "Mapping[str, Any] | None", "Mapping[str, Any] | None"]
PointData = tuple["Mapping[str, Any] | None", "Mapping[str, Any] | None"]  # payload, named vectors
Leg = list[tuple[Any, float]]  # one leg's points: engine id, score


class ScoredPoints:
    """One request's raw points on their way to :class:`~.search.Candidates`: the ranked query's
    points and a hybrid search's legs, the dense cosine of each point, the query terms it matched
    and the query's codes it holds.

    ``points`` are (point id, score, payload, named vectors): in sparse and hybrid mode the
    vectors hold the BM25 vector (its terms name the matches), never the dense one (384 floats
    for every point would cost more than the few the companions miss). ``legs``: a hybrid
    search's companions, each point's (id, score): dense, sparse, multilingual; a point's dense
    score there is its cosine. The cosines no leg gave (:attr:`missing_cosines`) the adapter
    computes from those points' stored vectors (:func:`stored_cosines`) and hands them to
    :meth:`candidates`. Ids stay as the engine gave them (Edge: ``uuid.UUID``) until a
    candidate is built. Nothing here orders or cuts: the engine's order is kept for the DAG.
    """

    def __init__(
        self,
        request: SearchRequest,
        points: Sequence[Point],
        legs: Sequence[Leg] = (),
    ) -> None:
        self.request = request
        self.points = points
        self.legs = legs
        self._cosines = dict(legs[0]) if legs else {}
        dense = request.mode == "dense"
        self.missing_cosines = [] if dense else [pid for pid, *_ in points if pid not in self._cosines]

    def candidates(self, cosines: Mapping[Any, float] | None = None) -> Candidates:
        """The candidates; ``cosines``: the store's answer for :attr:`missing_cosines`.

        A point whose cosine the store cannot give has an unreadable vector (corrupt data, e.g.
        NaN: the engine drops such a point from a dense search): :class:`StoreBackendError`.
        """
        request = self.request
        if request.mode == "dense":
            return Candidates(
                [hit_from_payload(pid, score, payload) for pid, score, payload, _ in self.points]
            )
        known = {**self._cosines, **(cosines or {})} if cosines else self._cosines
        terms = {} if request.scores_only else request.query_terms
        codes = [] if request.scores_only else Bm25Encoder.query_codes(request.query_text)
        hybrid = request.mode == "hybrid"
        hits = []
        for pid, score, payload, vectors in self.points:
            if (cosine := known.get(pid)) is None:
                raise StoreBackendError(
                    f"the store cannot score point {pid} against the query: its dense vector is "
                    "unreadable (corrupt data, e.g. NaN); delete the store and ingest again"
                )
            content = (payload or {}).get(CONTENT_FIELD, "")
            matched = Bm25Encoder.matched_terms(terms, vectors[SPARSE_VECTOR].indices) if terms else ()
            hits.append(
                hit_from_payload(
                    pid,
                    score,
                    payload,
                    dense_score=cosine,
                    fused_score=score if hybrid else None,
                    matched_terms=matched,
                    exact_codes=[code for code in codes if holds_identifier(content, code)] if codes else (),
                    fusion=request.fusion if hybrid else None,
                )
            )
        legs = [[(str(pid), score) for pid, score in leg] for leg in self.legs]
        return Candidates(hits, *legs)


def found_candidates(
    requests: Sequence[SearchRequest],
    results: Iterator[Iterable[Any]],
    ask_cosines: Callable[[list[ScoredPoints]], Iterable[dict[Any, float]]],
    stored: Callable[[SearchRequest], int],
    ask_points: Callable[[list[Any]], Mapping[Any, PointData]] | None = None,
) -> list[Candidates]:
    """Each request's candidates from the engine's result lists, in the order the adapter sent
    the queries: the ranked one, then for hybrid its companions (points with ``id``, ``score``,
    ``payload``, ``vector``). ``ask_points``: an adapter whose ranked sparse or hybrid queries
    return ids and scores alone (:func:`reads_back`) reads the payload and BM25 vector of every
    point they returned in one more round trip for all. The cosines no leg gave are asked of the
    store in one more round trip for all requests (``ask_cosines``: the adapter reads those
    points' dense vectors, :func:`stored_cosines`), only when some request lacks any; every list
    is checked by :func:`complete_hits` (``stored``: the store's point count under a request's
    filters)."""
    searches = [_lists(request, results) for request in requests]
    returned = [len(points) for _, points, _ in searches]
    searches = [(request, _keepable(request, points), legs) for request, points, legs in searches]
    if ask_points is not None:
        searches = _read_back(searches, ask_points)
    scored = [ScoredPoints(request, points, legs) for request, points, legs in searches]
    asking = [s for s in scored if s.missing_cosines]
    answers = iter(ask_cosines(asking) if asking else [])
    found = []
    for s, count in zip(scored, returned, strict=True):
        found.append(s.candidates(next(answers) if s.missing_cosines else None))
        complete_hits(s.request, count, stored)
    return found


def _keepable(request: SearchRequest, points: list[Point]) -> list[Point]:
    """Of a sparse or hybrid search's ranked points, those the DAG may keep, in the engine's
    order: the ``top_k`` best scores and every point scoring as the ``top_k``-th does (to
    :data:`~.search.SCORE_DECIMALS`), whatever order the DAG gives equal scores. Only these are
    read and built: reading the ``TIE_SLACK`` points after them too, which rarely tie, cost
    0.5 ms of a SciFact lookup."""
    if request.mode == "dense" or len(points) <= request.top_k:
        return points
    bar = sorted((round(score, SCORE_DECIMALS) for _, score, *_ in points), reverse=True)[request.top_k - 1]
    return [point for point in points if round(point[1], SCORE_DECIMALS) >= bar]


Search = tuple[SearchRequest, list[Point], list[Leg]]  # a request's ranked points, its legs


def reads_back(request: SearchRequest) -> bool:
    """Whether an adapter with ``ask_points`` sends this request's ranked query for ids and
    scores alone (a sparse or hybrid search, not ``scores_only``) and reads the payload and BM25
    vector of the points it returned by id: that costs less in an embedded engine than the
    ranked query's own payload read (docs/benchmarks.md)."""
    return request.mode != "dense" and not request.scores_only


def _read_back(
    searches: list[Search], ask_points: Callable[[list[Any]], Mapping[Any, PointData]]
) -> list[Search]:
    """The ranked points of every request that :func:`reads_back` with their payload and BM25
    vector, read in one round trip for all. A point the store no longer gives back (deleted
    since the search, or unreadable) is a :class:`PointGoneError`."""
    ids = list(dict.fromkeys(pid for r, points, _ in searches if reads_back(r) for pid, *_ in points))
    if not ids:
        return searches
    read = ask_points(ids)
    if missing := [pid for pid in ids if pid not in read]:
        raise PointGoneError(
            f"the store did not give back point {missing[0]} that its search returned (deleted "
            "meanwhile, or its data is corrupt); search again, or delete the store and ingest again"
        )
    return [
        (request, [(pid, score, *read[pid]) for pid, score, *_ in points], legs)
        if reads_back(request)
        else (request, points, legs)
        for request, points, legs in searches
    ]


def _lists(request: SearchRequest, results: Iterator[Iterable[Any]]) -> Search:
    """A request's ranked points from the engine's results, and for hybrid its dense, sparse and
    (with ``multilingual_vector``) multilingual companions' (id, score)."""
    points = [(p.id, p.score, p.payload, p.vector) for p in next(results)]
    companions = companion_count(request)
    return request, points, [[(p.id, p.score) for p in next(results)] for _ in range(companions)]


def multilingual_searchable(request: SearchRequest, held: bool) -> SearchRequest:
    """The request as a store searches it: without its ``multilingual_vector`` (and with its dense
    prefetch) when the store holds no multilingual vectors (``held``), or the search is not hybrid."""
    if request.multilingual_vector is None or (held and request.mode == "hybrid"):
        return request
    return replace(request, multilingual_vector=None, dense_fused=True)


def fused_legs(request: SearchRequest, legs: list[Any]) -> list[Any]:
    """Of a hybrid request's legs (dense, sparse, multilingual: its companions' queries), those its
    fused query prefetches: all but the dense one when ``dense_fused`` is off."""
    return legs if request.dense_fused else legs[1:]


def companion_count(request: SearchRequest) -> int:
    """The companions a request brings: a hybrid search's dense and sparse ones, and its
    multilingual one when it has a ``multilingual_vector``."""
    if request.mode != "hybrid":
        return 0
    return 3 if request.multilingual_vector is not None else 2


def points_by_value(values: Mapping[Any, str]) -> dict[str, list[Any]]:
    """Point ids grouped by the value each is to get: one payload update per value."""
    grouped: dict[str, list[Any]] = {}
    for point_id, value in values.items():
        grouped.setdefault(value, []).append(point_id)
    return grouped


def float_list(vector: Sequence[float]) -> list[float]:
    """A vector as the engine takes it: plain floats (a numpy row's ``tolist``, 3x faster than
    ``list`` of its numpy scalars: 512 chunks' vectors in 7 ms against 20)."""
    return vector.tolist() if isinstance(vector, np.ndarray) else list(vector)


def dense_vector(point: Any) -> Sequence[float] | None:
    """A retrieved point's dense vector (``None`` when the store gave none back)."""
    vectors = point.vector if isinstance(point.vector, Mapping) else {}
    return vectors.get(DENSE_VECTOR)


def missing_points(scored: Sequence[ScoredPoints]) -> list[Any]:
    """The points whose cosines the requests still lack, each once."""
    return list(dict.fromkeys(pid for s in scored for pid in s.missing_cosines))


def stored_cosines(
    scored: Sequence[ScoredPoints], vectors: Mapping[Any, Sequence[float] | None]
) -> list[dict[Any, float]]:
    """Each request's cosines of its :attr:`~ScoredPoints.missing_cosines` from their stored
    dense ``vectors`` (the engine stores them unit-length under cosine distance), for
    :func:`found_candidates`. Reading the few vectors a lookup lacks costs less than a dense
    search restricted to them (0.27 ms against 0.43 embedded). A point the store did not give
    back, or whose vector is not a number (a search would not rank it), is left out: its hit is
    then unreadable."""
    rows = {pid: np.asarray(v, dtype=np.float32) for pid, v in vectors.items() if v is not None}
    answers = []
    for s in scored:
        query = np.asarray(s.request.query_vector, dtype=np.float32)
        query = query / max(float(np.linalg.norm(query)), 1e-12)
        with np.errstate(invalid="ignore"):  # a NaN vector (corrupt data) is left out below
            cosines = {pid: float(rows[pid] @ query) for pid in s.missing_cosines if pid in rows}
        answers.append({pid: cosine for pid, cosine in cosines.items() if math.isfinite(cosine)})
    return answers


def _doc_and_content(payload: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """A scrolled point's (doc id, content), ``None`` when it lacks either."""
    doc_id, content = (payload or {}).get(DOC_ID_FIELD), (payload or {}).get(CONTENT_FIELD)
    return (doc_id, content) if doc_id and content else None

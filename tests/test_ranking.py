"""The ranking rules the DAG applies to a store's candidates (``lookup_knowledge/ranking.py``), as
its nodes ``fused_answers`` and ``ranked_hits`` (dataflows/retrieval.py) called as plain
functions: equal scores ordered by BM25 place, then point id; a hybrid search fused again only
when its BM25 leg matched fewer chunks than the few-matches bar. The stores are real embedded
Qdrant stores of hand-made vectors (no model)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from dataflow_fixtures import FaultySearchPort

from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore, engine_queries
from lookup_knowledge.adapters.search import Candidates, SearchHit, SearchRequest, StoredChunk
from lookup_knowledge.adapters.sparse import SparseVector, bm25_encoder
from lookup_knowledge.dataflows.retrieval import SearchAnswer, fused_answers, l1_answers, ranked_hits
from lookup_knowledge.ranking import DBSF_FULL_SCALE, few_matches_search

BM25 = SparseVector((7,), (1.0,))


def hit(point_id: str, score: float) -> SearchHit:
    """An unplaced candidate as a store gives it."""
    return SearchHit(point_id, f"text of {point_id}", score, 0.5, {}, dense_score=0.5)


def hybrid(top_k: int = 3, **fields) -> SearchRequest:
    return SearchRequest("q", [1.0, 0.0], top_k, mode="hybrid", sparse_vector=BM25, **fields)


def ranked(request: SearchRequest, candidates: Candidates) -> list[SearchHit]:
    (hits,) = ranked_hits([request], [SearchAnswer(candidates)])
    assert hits is not None
    return hits


# --- equal scores ---------------------------------------------------------------------------


def test_equal_fused_scores_go_by_bm25_place_then_point_id() -> None:
    """The engine returned d, c, b, a, all scoring alike: b and d the BM25 search ranked (d
    first), a and c it did not; cut to three."""
    candidates = Candidates(
        [hit("d", 0.5), hit("c", 0.5), hit("b", 0.5), hit("a", 0.5), hit("e", 0.9)],
        dense=[("a", 0.8), ("b", 0.7)],
        sparse=[("d", 3.0), ("b", 2.0)],
    )
    hits = ranked(hybrid(), candidates)
    assert [h.point_id for h in hits] == ["e", "d", "b"]  # the better score, then BM25 places
    assert [(h.sparse_rank, h.sparse_score) for h in hits] == [(None, None), (1, 3.0), (2, 2.0)]
    assert [h.dense_rank for h in hits] == [None, None, 2]
    unplaced = ranked(hybrid(top_k=5), candidates)
    assert [h.point_id for h in unplaced][3:] == ["a", "c"]  # neither in the BM25 list: by id


def test_scores_equal_to_six_decimals_tie_and_a_leg_cuts_its_ties_by_point_id() -> None:
    candidates = Candidates(
        [hit("z", 0.3000001), hit("y", 0.3000004), hit("x", 0.31)],
        dense=[("z", 0.4), ("y", 0.4), ("x", 0.2)],
        sparse=[("z", 1.0), ("y", 1.0)],
        multilingual=[("y", 0.6), ("z", 0.6)],
    )
    hits = ranked(hybrid(), candidates)
    assert [h.point_id for h in hits] == ["x", "y", "z"]  # y and z tie: y holds BM25 place 1
    assert [(h.dense_rank, h.sparse_rank, h.multilingual_rank) for h in hits] == [
        (3, None, None),
        (1, 1, 1),
        (2, 2, 2),
    ]
    assert hits[1].multilingual_score == 0.6 and hits[0].multilingual_score is None


def test_a_sparse_search_cuts_ties_by_point_id_and_is_its_own_bm25_list() -> None:
    request = SearchRequest("q", [1.0, 0.0], 2, mode="sparse", sparse_vector=BM25)
    hits = ranked(request, Candidates([hit("b", 2.0), hit("c", 2.0), hit("a", 2.0)]))
    assert [(h.point_id, h.sparse_rank, h.sparse_score) for h in hits] == [("a", 1, 2.0), ("b", 2, 2.0)]


def test_a_dense_search_keeps_the_engines_order() -> None:
    request = SearchRequest("q", [1.0, 0.0], 3)
    hits = ranked(request, Candidates([hit("b", 0.5), hit("a", 0.5)]))
    assert [(h.point_id, h.dense_rank) for h in hits] == [("b", 1), ("a", 2)]


def test_a_failed_search_has_no_hits() -> None:
    assert ranked_hits([hybrid()], [SearchAnswer(error="down")]) == [None]


# --- few matches, fused again ---------------------------------------------------------------


def leg(matches: int) -> Candidates:
    return Candidates([], sparse=[(f"p{n}", 1.0) for n in range(matches)])


@pytest.mark.parametrize(
    ("matches", "again"),
    [(0, False), (1, True), (DBSF_FULL_SCALE - 1, True), (DBSF_FULL_SCALE, False), (28, False)],
)
def test_a_hybrid_search_is_fused_again_only_below_the_few_matches_bar(matches: int, again: bool) -> None:
    request = hybrid(top_k=20, few_matches_fusion="rrf")
    expected = replace(request, fusion="rrf") if again else None
    assert few_matches_search(request, leg(matches)) == expected


def test_only_a_hybrid_search_with_another_few_matches_fusion_is_fused_again() -> None:
    for request in (
        hybrid(few_matches_fusion=None),  # off
        hybrid(fusion="rrf", few_matches_fusion="rrf"),  # already so fused
        SearchRequest("q", [1.0, 0.0], 3, mode="sparse", sparse_vector=BM25, few_matches_fusion="rrf"),
    ):
        assert few_matches_search(request, leg(1)) is None
    assert few_matches_search(hybrid(few_matches_fusion="rrf"), leg(1)) is not None


# --- on a real store --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QdrantEdgeStore]:
    """Twelve chunks about refunds, one that names a parcel: BM25 matches "parcel" once and
    "refund" twelve times."""
    texts = [f"Refund rule {n}: a refund is paid back within {n + 2} days." for n in range(12)]
    texts.append("A parcel that arrives late is compensated.")
    opened = QdrantEdgeStore(Path(tmp_path_factory.mktemp("ranking")) / "store", 2)
    opened.upsert(
        [
            StoredChunk(
                [1.0, n / 10],
                {"doc_id": f"doc-{n}", "chunk_index": 0, "evidence_key": f"doc-{n}#chunk-0", "content": text},
                bm25_encoder().embed_document(text),
            )
            for n, text in enumerate(texts)
        ]
    )
    yield opened
    opened.close()


def search(text: str) -> SearchRequest:
    query = bm25_encoder().embed_query(text)
    return SearchRequest(text, [1.0, 0.3], 5, mode="hybrid", sparse_vector=query, few_matches_fusion="rrf")


def test_the_few_matches_search_is_asked_in_one_more_batch_only_when_one_is(store: QdrantEdgeStore) -> None:
    requests = [search("parcel"), search("refund")]
    answers = l1_answers(requests, store)
    assert [len(answer.candidates.sparse) for answer in answers] == [1, 12]
    port = FaultySearchPort(store)
    fused = fused_answers(requests, answers, port)
    # "parcel": one BM25 match, fused again by RRF; "refund": twelve, its DBSF stands
    assert [[(r.query_text, r.fusion) for r in trip] for trip in port.round_trips] == [[("parcel", "rrf")]]
    assert fused[1] is answers[1]
    hits = ranked_hits(requests, fused)
    assert {h.fusion for h in hits[0]} == {"rrf"} and {h.fusion for h in hits[1]} == {"dbsf"}
    assert hits[0][0].doc_id == "doc-12"  # the only chunk that names a parcel leads, fused by rank
    refund_only = FaultySearchPort(store, fail_all=True)  # no search is asked: none fails
    assert fused_answers(requests[1:], answers[1:], refund_only) == answers[1:] and refund_only.calls == []


def test_a_failed_few_matches_search_is_its_requests_error(store: QdrantEdgeStore) -> None:
    requests = [search("parcel")]
    answers = l1_answers(requests, store)
    (fused,) = fused_answers(requests, answers, FaultySearchPort(store, fail_all=True))
    assert fused.candidates is None and "simulated backend outage" in fused.error
    assert ranked_hits(requests, [fused]) == [None]


@pytest.mark.parametrize(
    ("text", "mode", "top_k"),
    [
        ("refund", "sparse", 2),
        ("parcel refund", "sparse", 1),
        ("parcel refund", "hybrid", 3),
        ("parcel", "sparse", 4),
    ],
)
def test_a_store_gives_every_fetched_point_a_tie_could_keep_and_no_other(
    store: QdrantEdgeStore, text: str, mode: str, top_k: int
) -> None:
    """Of the ``top_k`` + 8 points its engine fetched, a store gives, in the engine's order, the
    ``top_k`` best and those scoring as the ``top_k``-th (all twelve refund chunks score alike):
    which of equal scores to keep is the DAG's choice, and only those are read."""
    request = SearchRequest(
        text, [1.0, 0.3], top_k, mode=mode, sparse_vector=bm25_encoder().embed_query(text)
    )
    fetched = store._shard.query(engine_queries(request)[0])  # the ranked query alone
    scores = sorted((round(point.score, 6) for point in fetched), reverse=True)
    bar = scores[min(top_k, len(scores)) - 1]
    (candidates,) = store.search_batch([request])
    assert [hit.point_id for hit in candidates.hits] == [
        str(p.id) for p in fetched if round(p.score, 6) >= bar
    ]
    assert len(candidates.hits) >= min(top_k, len(fetched))

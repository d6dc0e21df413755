"""The ranking rules that make a search's candidates the lookup's hits.

A store answers a search with its :class:`~lookup_knowledge.adapters.search.Candidates`: what its
engine returned, as the engine ranked it. Two decisions stand between that and the hits the
lookup reads, both made here, none in an adapter:

- **Few matches, fused again** (:func:`few_matches_search`). DBSF rescales each list to [0, 1]
  by its mean +- 3 standard deviations; the best of n scores then reaches at most
  0.5 + (1 - 1/n) * sqrt(n) / 6 (Qdrant scores a single match 0.5), under 1 for n <= 10, while
  the dense list's best takes 0.8-1: the one chunk that holds a rare identifier would rank under
  the dense search's best, whatever its BM25 score. A hybrid search whose BM25 leg matched fewer
  than :data:`DBSF_FULL_SCALE` chunks (its sparse companion then lists them all) is searched
  again, fused by ``retrieval.few_matches_fusion``.
- **Equal scores ordered** (:func:`rank`). BM25 and rank-fusion scores tie often (two hits first
  in one search and second in the other; RRF scores the dense search's first and the sparse
  search's first alike when neither is in the other list), and an engine breaks ties by chance:
  equal fused scores (to :data:`SCORE_DECIMALS` decimals) are ordered by the better place in the
  BM25 search (the words the query names), then by point id, and equal scores of one search by
  point id, among the ``ranked_width`` fetched (``TIE_SLACK`` more), before the cut to ``top_k``;
  each hit is then placed in the dense, sparse and multilingual searches, their ties cut alike.

The lookup DAG runs them as its nodes ``fused_answers`` and ``ranked_hits``
(``dataflows/retrieval.py``), so its trace shows them (batched eval asks a chunk's few-matches
searches in one batch, as it asks its searches); :func:`searched_hits` runs them for a search
made outside those nodes (the probe null, the threshold rule's retry).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from lookup_knowledge.adapters.search import (
    SCORE_DECIMALS,
    Candidates,
    KnowledgeSearchPort,
    Scored,
    SearchHit,
    SearchRequest,
)

DBSF_FULL_SCALE = 11  # the fewest scores whose best DBSF can rescale to 1: (1 - 1/n) * sqrt(n) >= 3
Places = dict[str, tuple[int, float]]  # a search's points: (place from 1, score)


def few_matches_search(request: SearchRequest, candidates: Candidates) -> SearchRequest | None:
    """This hybrid search fused by its ``few_matches_fusion`` when its sparse companion listed
    at least one chunk and fewer than :data:`DBSF_FULL_SCALE` and than it could list (the whole
    BM25 leg); ``None``: its fusion stands."""
    few = request.few_matches_fusion
    if request.mode != "hybrid" or few in (None, request.fusion):
        return None
    matches = len(candidates.sparse)
    listed_whole = matches < min(DBSF_FULL_SCALE, request.ranked_width)
    return replace(request, fusion=few) if matches > 0 and listed_whole else None


def few_matches_searches(
    requests: Sequence[SearchRequest], answers: Sequence[Candidates | None]
) -> dict[int, SearchRequest]:
    """Of searches and their candidates (``None``: that search failed), those to fuse again, by
    their place (:func:`few_matches_search`)."""
    return {
        n: search
        for n, (request, candidates) in enumerate(zip(requests, answers, strict=True))
        if candidates is not None and (search := few_matches_search(request, candidates)) is not None
    }


def untied(hits: Sequence[SearchHit], bm25: Places | None = None) -> list[SearchHit]:
    """Hits best first, equal scores by their ``bm25`` place when given (a hit the BM25 search
    did not rank after those it did), then by point id."""
    if bm25 is None:
        return sorted(hits, key=lambda hit: (-round(hit.score, SCORE_DECIMALS), hit.point_id))
    unplaced = (math.inf, 0.0)

    def order(hit: SearchHit) -> tuple[float, float, str]:
        return -round(hit.score, SCORE_DECIMALS), bm25.get(hit.point_id, unplaced)[0], hit.point_id

    return sorted(hits, key=order)


def places(points: Sequence[Scored]) -> Places:
    """Each point's (place from 1, score) in one search's list, equal scores by point id."""
    ordered = sorted(points, key=lambda point: (-round(point[1], SCORE_DECIMALS), point[0]))
    return {pid: (place, score) for place, (pid, score) in enumerate(ordered, start=1)}


def rank(request: SearchRequest, candidates: Candidates) -> list[SearchHit]:
    """A search's hits: its candidates in the engine's order (dense), or ties ordered and cut to
    ``top_k`` (sparse, hybrid), each placed in the searches that ranked it."""
    hits = candidates.hits
    if request.mode == "dense":
        return [hit.placed(place) for place, hit in enumerate(hits, start=1)]
    if request.mode == "sparse":
        kept = untied(hits)[: request.top_k]
        return [hit.placed(sparse=(place, hit.score)) for place, hit in enumerate(kept, start=1)]
    bm25, multilingual = places(candidates.sparse), places(candidates.multilingual)
    dense = {pid: place for pid, (place, _) in places(candidates.dense).items()}
    return [
        hit.placed(dense.get(hit.point_id), bm25.get(hit.point_id), multilingual.get(hit.point_id))
        for hit in untied(hits, bm25)[: request.top_k]
    ]


def searched_hits(
    search_port: KnowledgeSearchPort, requests: Sequence[SearchRequest]
) -> list[list[SearchHit]]:
    """Each request's hits as a lookup ranks them: the store's candidates (one batch), those of
    a few-matches search fused again (one more batch, only when one is), ranked (:func:`rank`).
    Raises what the store raises."""
    answers = search_port.search_batch(requests)
    if again := few_matches_searches(requests, answers):
        for n, candidates in zip(again, search_port.search_batch(list(again.values())), strict=True):
            answers[n] = candidates
    return [rank(request, candidates) for request, candidates in zip(requests, answers, strict=True)]

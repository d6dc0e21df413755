"""L1 retrieval through the search port: the search request of the retrieval mode (dense,
sparse or hybrid), the filtered search, its unfiltered companion, and the fallback decision.

The fallback decision and ``min_evidence_score`` read each hit's ``normalized_score``, its dense
cosine clipped to [0, 1], in every mode: a fused score ranks by position, so both the filtered
and the unfiltered search's best hit would score alike (see ``docs/quality.md``). In sparse and
hybrid mode the decision also reads the BM25 scores, which the store scores alike with and
without a filter: a filter that loses the query's best term matches does not hold up. A sparse or
hybrid hit that holds one of the query's codes (``INV-48213``, ``E4471``) is evidence whatever
its dense score.

With a category filter (and the fallback on) the filtered and the unfiltered search go to the
store as one batched request. The decision then compares the two result lists of the same query
instead of holding the filtered top score against a constant (see ``docs/quality.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from hamilton.function_modifiers import config

from lookup_knowledge.adapters.payload import LANGUAGE_FIELD
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.search import (
    Candidates,
    FusionMethod,
    KnowledgeSearchPort,
    SearchHit,
    SearchRequest,
    identity_key,
)
from lookup_knowledge.adapters.sparse import SparseVector, distinctive
from lookup_knowledge.calibration import script_of
from lookup_knowledge.contract import (
    AttemptKind,
    DecisionRule,
    FallbackDecisionTrace,
    FallbackRule,
)
from lookup_knowledge.ranking import few_matches_searches, rank, searched_hits


@dataclass(frozen=True, slots=True)
class SearchAttempt:
    """One search through the port: its request shape, hits (usable or not), error, and whether
    its hits became the candidates. The trace reads it as an ``AttemptTrace`` (by name)."""

    kind: AttemptKind
    filter: str | None
    width: int
    hits: list[SearchHit] = field(default_factory=list)
    usable: list[SearchHit] = field(default_factory=list)
    error: str | None = None
    used: bool = True

    @property
    def hit_count(self) -> int:
        return len(self.hits)

    @property
    def usable_count(self) -> int:
        return len(self.usable)

    @property
    def hit_keys(self) -> list[str]:
        """The usable hits' evidence keys, best first."""
        return [identity_key(hit, rank) for rank, hit in enumerate(self.usable, start=1)]

    @property
    def top_normalized_score(self) -> float | None:
        return max((hit.normalized_score for hit in self.hits), default=None)

    @property
    def top_sparse_score(self) -> float | None:
        """The best BM25 score among the hits; ``None`` when no hit has one (dense mode)."""
        return max((hit.sparse_score for hit in self.hits if hit.sparse_score is not None), default=None)


@dataclass(frozen=True, slots=True)
class FallbackPolicy:
    """How the fallback decides (``retrieval.fallback_rule`` and its parameters)."""

    rule: FallbackRule = "relative"
    score_ratio: float = 0.75
    sparse_score_ratio: float = 0.6
    reference_threshold: float = 0.45

    def settings(self) -> dict[str, float]:
        """The parameters the rule in force reads."""
        if self.rule == "threshold":
            return {"referenceThreshold": self.reference_threshold}
        return {"scoreRatio": self.score_ratio, "sparseScoreRatio": self.sparse_score_ratio}


@dataclass(frozen=True, slots=True)
class HybridFusion:
    """How a hybrid search fuses its dense and sparse prefetches (``retrieval.fusion``,
    ``retrieval.prefetch_k``, ``retrieval.few_matches_fusion``: the method for a search whose
    BM25 leg matches too few chunks for DBSF's statistics, :class:`SearchRequest`)."""

    method: FusionMethod = "dbsf"
    prefetch_k: int | None = None
    few_matches: FusionMethod | None = "rrf"


@config.when(l1_enabled=True, retrieval_mode="dense")
def search_request__dense(
    query: str, query_vector: np.ndarray, retrieve_k: int, access_scope: tuple | None = None
) -> SearchRequest:
    """Dense search: the chunks nearest the query's embedding, ``retrieve_k`` wide, among those
    the caller may see (``access_scope``, a payload filter in the store; ``None``: all)."""
    return SearchRequest(query, query_vector, retrieve_k, access=access_scope)


@config.when(l1_enabled=True, retrieval_mode="sparse")
def search_request__sparse(
    query: str,
    query_vector: np.ndarray,
    query_sparse_vector: SparseVector,
    query_terms: dict[str, int],
    retrieve_k: int,
    access_scope: tuple | None = None,
) -> SearchRequest:
    """Sparse search: chunks ranked by BM25, ``retrieve_k`` wide, among those the caller may see
    (the query vector only scores them: their normalized score stays the dense cosine), each hit
    naming the query's terms it holds."""
    return SearchRequest(
        query,
        query_vector,
        retrieve_k,
        mode="sparse",
        sparse_vector=query_sparse_vector,
        access=access_scope,
        query_terms=query_terms,
    )


@config.when(l1_enabled=True, retrieval_mode="hybrid")
def search_request__hybrid(
    query: str,
    query_vector: np.ndarray,
    query_sparse_vector: SparseVector,
    query_terms: dict[str, int],
    retrieve_k: int,
    hybrid_fusion: HybridFusion,
    query_language: str,
    access_scope: tuple | None = None,
    multilingual_query_vector: np.ndarray | None = None,
) -> SearchRequest:
    """Hybrid search: a dense and a sparse prefetch fused inside the store, ``retrieve_k`` wide,
    every prefetch under the caller's access filter, each hit naming the query's terms it holds;
    with the query's multilingual vector, a prefetch on the chunks' multilingual vectors, which for
    a question not in English replaces the dense one in the fusion (docs/multilingual.md)."""
    return SearchRequest(
        query,
        query_vector,
        retrieve_k,
        mode="hybrid",
        sparse_vector=query_sparse_vector,
        fusion=hybrid_fusion.method,
        prefetch_k=hybrid_fusion.prefetch_k,
        access=access_scope,
        few_matches_fusion=hybrid_fusion.few_matches,
        query_terms=query_terms,
        multilingual_vector=multilingual_query_vector,
        dense_fused=multilingual_query_vector is None or query_language == "en",
    )


def _is_usable(hit: SearchHit, min_evidence_score: float, cjk: bool = False) -> bool:
    """Evidence: a hit with text whose dense score (or multilingual cosine, a question in another
    language than the chunk's) reaches ``min_evidence_score``, or that holds one of the query's
    codes exactly (sparse, hybrid: an error code the model blurs), or (a CJK query, ``cjk``) that
    the BM25 search ranked: MiniLM embeds CJK text as a few rare tokens, so its cosine says
    nothing of a Chinese or Japanese page (``docs/cjk.md``)."""
    score = max(hit.normalized_score, hit.multilingual_score or 0.0)
    lexical = bool(hit.exact_codes) or (cjk and hit.sparse_rank is not None)
    return (score >= min_evidence_score or lexical) and bool(hit.content.strip())


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """What the store answered to one request: its candidates (as its engine ranked them), or
    the error it raised."""

    candidates: Candidates | None = None
    error: str | None = None


def _attempt(
    request: SearchRequest, hits: list[SearchHit] | None, error: str | None, min_evidence_score: float
) -> SearchAttempt:
    kind: AttemptKind = "filtered" if request.category is not None else "unfiltered"
    if request.other_languages_than is not None:
        kind = "other_languages"
    if hits is None:
        return SearchAttempt(kind, request.category, request.top_k, error=error)
    cjk = script_of(request.query_text) == "cjk"
    usable = [hit for hit in hits if _is_usable(hit, min_evidence_score, cjk)]
    return SearchAttempt(kind, request.category, request.top_k, hits, usable)


def _error(exc: Exception) -> str:
    return mask_secrets(f"{type(exc).__name__}: {exc}")


def _ask_one(request: SearchRequest, search_port: KnowledgeSearchPort) -> SearchAnswer:
    try:
        return SearchAnswer(search_port.search(request))
    except Exception as exc:  # any backend failure is traced and answered by the fallback
        return SearchAnswer(error=_error(exc))


@config.when(l1_enabled=True)
def l1_requests(
    search_request: SearchRequest,
    category_filter: str | None,
    fallback_policy: FallbackPolicy,
    fallback_enabled: bool,
) -> list[SearchRequest]:
    """What to ask the store first: the search under the category filter (none without one) and,
    under the ``relative`` rule, its unfiltered companion, to go as one batch. Under the
    ``threshold`` rule the unfiltered search is only a retry (``unfiltered_hits``)."""
    filtered = replace(search_request, category=category_filter)
    if category_filter is None or not fallback_enabled or fallback_policy.rule == "threshold":
        return [filtered]
    return [filtered, replace(search_request, category=None)]


@config.when(l1_enabled=True)
def l1_answers(l1_requests: list[SearchRequest], search_port: KnowledgeSearchPort) -> list[SearchAnswer]:
    """The store's answer to each request: several as one batch.

    When the batch raises, the searches are retried alone to find the one that fails: first the
    unfiltered one (when it works, the filtered search carries the batch's error), then, only if
    that fails too, the filtered one.
    """
    if len(l1_requests) == 1:
        return [_ask_one(l1_requests[0], search_port)]
    filtered, unfiltered = l1_requests
    try:
        return [SearchAnswer(hits) for hits in search_port.search_batch(l1_requests)]
    except Exception as exc:
        alone = _ask_one(unfiltered, search_port)
        if alone.error is None:
            return [SearchAnswer(error=_error(exc)), alone]
        return [_ask_one(filtered, search_port), alone]


@config.when(l1_enabled=True)
def fused_answers(
    l1_requests: list[SearchRequest], l1_answers: list[SearchAnswer], search_port: KnowledgeSearchPort
) -> list[SearchAnswer]:
    """Each request's answer as the lookup fuses it: the store's, or, for a hybrid search whose
    BM25 leg matched too few chunks for its fusion, the same search fused again by
    ``retrieval.few_matches_fusion`` (:func:`~lookup_knowledge.ranking.few_matches_searches`),
    asked in one more batch only then (a failure is that request's error)."""
    again = few_matches_searches(l1_requests, [answer.candidates for answer in l1_answers])
    if not again:
        return l1_answers
    try:
        fused_again = [
            SearchAnswer(candidates) for candidates in search_port.search_batch(list(again.values()))
        ]
    except Exception as exc:  # traced as the search's error, answered by the fallback
        fused_again = [SearchAnswer(error=_error(exc))] * len(again)
    answers = list(l1_answers)
    for n, answer in zip(again, fused_again, strict=True):
        answers[n] = answer
    return answers


@config.when(l1_enabled=True)
def ranked_hits(
    l1_requests: list[SearchRequest], fused_answers: list[SearchAnswer]
) -> list[list[SearchHit] | None]:
    """Each search's hits (``None``: it failed): equal scores ordered by BM25 place, then point
    id, cut to ``retrieve_k``, each hit placed in the dense, sparse and multilingual searches
    (:func:`~lookup_knowledge.ranking.rank`)."""
    return [
        None if answer.candidates is None else rank(request, answer.candidates)
        for request, answer in zip(l1_requests, fused_answers, strict=True)
    ]


@config.when(l1_enabled=True)
def l1_searches(
    l1_requests: list[SearchRequest],
    fused_answers: list[SearchAnswer],
    ranked_hits: list[list[SearchHit] | None],
    min_evidence_score: float,
) -> list[SearchAttempt]:
    """Each request with its hits (or error), and the hits usable as evidence."""
    return [
        _attempt(request, hits, answer.error, min_evidence_score)
        for request, answer, hits in zip(l1_requests, fused_answers, ranked_hits, strict=True)
    ]


@config.when(l1_enabled=True)
def filtered_hits(l1_searches: list[SearchAttempt]) -> SearchAttempt:
    """The search with the category filter when there is one (else the plain search)."""
    return l1_searches[0]


def _threshold_verdict(filtered: SearchAttempt, policy: FallbackPolicy) -> DecisionRule:
    """The ``threshold`` rule on the filtered search alone: keep it (``filtered_top_at_threshold``),
    or why to retry unfiltered."""
    if filtered.error is not None:
        return "filtered_search_failed"
    if not filtered.usable:
        return "filtered_search_empty"
    if (filtered.top_normalized_score or 0.0) < policy.reference_threshold:
        return "filtered_top_below_threshold"
    return "filtered_top_at_threshold"


@config.when(l1_enabled=True)
def unfiltered_hits(
    l1_searches: list[SearchAttempt],
    l1_requests: list[SearchRequest],
    fallback_policy: FallbackPolicy,
    fallback_enabled: bool,
    search_port: KnowledgeSearchPort,
    min_evidence_score: float,
) -> SearchAttempt | None:
    """The unfiltered search of a filtered lookup: the companion from the same batch
    (``relative``), or, under ``threshold``, the retry, run only when the filtered search fails
    that rule; ``None`` when none ran."""
    if len(l1_searches) > 1:
        return l1_searches[1]
    filtered = l1_searches[0]
    if filtered.kind == "unfiltered" or not fallback_enabled or fallback_policy.rule != "threshold":
        return None
    if _threshold_verdict(filtered, fallback_policy) == "filtered_top_at_threshold":
        return None
    retry = replace(l1_requests[0], category=None)
    try:
        (hits,) = searched_hits(search_port, [retry])
    except Exception as exc:  # any backend failure is traced and answered by the fallback
        return _attempt(retry, None, _error(exc), min_evidence_score)
    return _attempt(retry, hits, None, min_evidence_score)


def _overlap(filtered: list[SearchHit], unfiltered: list[SearchHit]) -> float | None:
    """Share of the unfiltered hits that the filtered search also returned."""
    if not unfiltered:
        return None
    held = {hit.point_id for hit in filtered}
    return sum(hit.point_id in held for hit in unfiltered) / len(unfiltered)


def _ratio(filtered_top: float | None, unfiltered_top: float | None) -> float | None:
    """Filtered top / unfiltered top; ``None`` when the unfiltered search has no such score."""
    return (filtered_top or 0.0) / unfiltered_top if unfiltered_top else None


def _decision_values(filtered: SearchAttempt, unfiltered: SearchAttempt | None) -> dict[str, float | None]:
    """Both top scores and their ratio (dense and, in sparse and hybrid mode, BM25), and the
    overlap of the two lists (the decision's fields of :class:`FallbackDecisionTrace`)."""
    filtered_top, filtered_sparse = filtered.top_normalized_score, filtered.top_sparse_score
    if unfiltered is None:
        alone = dict.fromkeys(("unfiltered_top", "score_ratio", "overlap"))
        return {"filtered_top": filtered_top, "filtered_sparse_top": filtered_sparse, **alone}
    unfiltered_top, unfiltered_sparse = unfiltered.top_normalized_score, unfiltered.top_sparse_score
    return {
        "filtered_top": filtered_top,
        "unfiltered_top": unfiltered_top,
        "score_ratio": _ratio(filtered_top, unfiltered_top) if filtered_top is not None else None,
        "overlap": _overlap(filtered.hits, unfiltered.hits),
        "filtered_sparse_top": filtered_sparse,
        "unfiltered_sparse_top": unfiltered_sparse,
        "sparse_score_ratio": _ratio(filtered_sparse, unfiltered_sparse),
    }


@config.when(l1_enabled=True)
def fallback_decision(
    filtered_hits: SearchAttempt,
    unfiltered_hits: SearchAttempt | None,
    fallback_policy: FallbackPolicy,
    fallback_enabled: bool,
) -> FallbackDecisionTrace:
    """Keep the filtered hits, or use the unfiltered ones, and say why (its ``reason``)."""
    policy = fallback_policy
    values = _decision_values(filtered_hits, unfiltered_hits)

    def decide(use: AttemptKind, fired: DecisionRule) -> FallbackDecisionTrace:
        return FallbackDecisionTrace(
            rule=policy.rule, fired=fired, used=use, settings=policy.settings(), **values
        )

    if filtered_hits.kind == "unfiltered":
        return decide("unfiltered", "no_filter")
    if not fallback_enabled:
        return decide("filtered", "fallback_disabled")
    if unfiltered_hits is None:  # threshold: the filtered search met the rule, no retry ran
        return decide("filtered", _threshold_verdict(filtered_hits, policy))
    if filtered_hits.error is not None:
        return decide("unfiltered", "filtered_search_failed")
    if not filtered_hits.usable:
        return decide("unfiltered", "filtered_search_empty")
    if unfiltered_hits.error is not None or not unfiltered_hits.usable:
        return decide("filtered", "unfiltered_search_unusable")
    if policy.rule == "threshold":
        return decide("unfiltered", _threshold_verdict(filtered_hits, policy))
    if (values["score_ratio"] or 0.0) < policy.score_ratio:
        return decide("unfiltered", "filter_lost")
    sparse_ratio = values["sparse_score_ratio"]
    if sparse_ratio is not None and sparse_ratio < policy.sparse_score_ratio:
        return decide("unfiltered", "filter_lost_terms")
    if _codes_left_out(filtered_hits, unfiltered_hits):
        return decide("unfiltered", "filter_lost_code")
    return decide("filtered", "filter_holds_up")


def _codes_left_out(filtered: SearchAttempt, unfiltered: SearchAttempt) -> bool:
    """Whether an unfiltered hit holds a distinctive code of the query (``--editor``,
    ``collections.Complement``) that no filtered hit holds: the filter an L0 hint derived
    ("editor" names the editors page's category) left out the chunk the query names."""
    inside = {code.lower() for hit in filtered.usable for code in hit.exact_codes}
    outside = {code for hit in unfiltered.usable for code in hit.exact_codes}
    return any(distinctive(code) and code.lower() not in inside for code in outside)


@config.when(l1_enabled=True)
def other_language_hits(
    l1_requests: list[SearchRequest],
    filtered_hits: SearchAttempt,
    unfiltered_hits: SearchAttempt | None,
    fallback_decision: FallbackDecisionTrace,
    query_language: str,
    search_port: KnowledgeSearchPort,
    min_evidence_score: float,
    search_other_languages: bool = True,
) -> SearchAttempt | None:
    """For a question not in English whose multilingual leg ran and whose used search returned
    chunks written in its language, the same search over the chunks written in other languages;
    ``None`` when none ran (``multilingual.other_languages`` off: never). Both legs prefer the
    question's language (BM25 matches its words on pages written in it, the encoder puts it
    nearer an unrelated sentence in its language than the answer in another): in a store of two
    languages the answer in the other one fell out of the candidates (docs/multilingual.md). Its
    hits join the used search's, weighed in ``candidates_df``."""
    request = l1_requests[0]
    used = filtered_hits if fallback_decision.used == filtered_hits.kind else unfiltered_hits
    if not search_other_languages or request.multilingual_vector is None or query_language == "en":
        return None
    if used is None or not any(hit.payload.get(LANGUAGE_FIELD) == query_language for hit in used.usable):
        return None
    others = replace(request, category=used.filter, other_languages_than=query_language)
    try:
        (hits,) = searched_hits(search_port, [others])
    except Exception as exc:  # traced as that search's error; the used search's hits stand
        return _attempt(others, None, _error(exc), min_evidence_score)
    return _attempt(others, hits, None, min_evidence_score)


@config.when(l1_enabled=True)
def retrieval_attempts(
    filtered_hits: SearchAttempt,
    unfiltered_hits: SearchAttempt | None,
    fallback_decision: FallbackDecisionTrace,
    other_language_hits: SearchAttempt | None = None,
) -> list[SearchAttempt]:
    """The searches that ran, in order, each marked with whether its hits were used: the one the
    fallback decision chose, and the search over other languages whenever it ran and answered."""
    ran = [filtered_hits] if unfiltered_hits is None else [filtered_hits, unfiltered_hits]
    attempts = [replace(attempt, used=attempt.kind == fallback_decision.used) for attempt in ran]
    if other_language_hits is None:
        return attempts
    return [*attempts, replace(other_language_hits, used=other_language_hits.error is None)]


@config.when(l1_enabled=False)
def retrieval_attempts__l1_disabled() -> list[SearchAttempt]:
    """No searches: L1 is disabled by configuration, so nothing can become evidence."""
    return []


@config.when(l1_enabled=False)
def fallback_decision__l1_disabled() -> FallbackDecisionTrace:
    """No fallback without L1 (the trace shows none)."""
    policy = FallbackPolicy()
    values = dict.fromkeys(("filtered_top", "unfiltered_top", "score_ratio", "overlap"))
    return FallbackDecisionTrace(
        rule=policy.rule, fired="l1_disabled", used=None, settings=policy.settings(), **values
    )

"""L0 hints -> category filter -> filtered L1 search and its unfiltered companion -> fallback decision
(docs/quality.md), on the real Qdrant Edge store; the decision's branches also on qdrant-client."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pytest
from dataflow_fixtures import (
    FAPIAO_QUERY,
    PARCEL_QUERY,
    PCI_QUERY,
    REFUND_DOC,
    REFUND_QUERY,
    FaultySearchPort,
    SampleKB,
    as_json,
    config_for,
    make_tool,
)

from lookup_knowledge import ingest, sample_knowledge_base
from lookup_knowledge.adapters.l0_index import L0Document, L0Hints, L0Index
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.search import SearchHit
from lookup_knowledge.calibration import ProbeCalibration
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.dataflows.query_understanding import category_filter
from lookup_knowledge.dataflows.retrieval import FallbackPolicy, SearchAttempt, fallback_decision

GHOST_QUERY = "what does the ghost protocol say about archived tickets?"
WRONG_CATEGORY = "infrastructure"  # has documents, none about refunds


def ghost_index(kb: SampleKB) -> L0Index:
    """The sample L0 index plus a document whose domain no stored chunk carries."""
    ghost = L0Document("ghost-doc", "Ghost Protocol", ("ghost protocol",), ("archive",), ())
    return L0Index([*kb.l0_index.documents.values(), ghost])


@dataclass(frozen=True)
class Scenario:
    query: str
    overrides: dict[str, Any]
    port: dict[str, bool]
    pinned_category: str | None = None
    ghost_l0: bool = False


SCENARIOS = {
    "filter_wins": Scenario(REFUND_QUERY, {}, {}),
    "filter_wins_chinese": Scenario(FAPIAO_QUERY, {}, {}),
    "filter_loses": Scenario(REFUND_QUERY, {}, {}, WRONG_CATEGORY),
    # the dense ratio waved through (0): only the BM25 comparison can catch the wrong filter
    "filter_loses_terms": Scenario(
        REFUND_QUERY, {"retrieval__fallback_score_ratio": 0.0}, {}, WRONG_CATEGORY
    ),
    "dense_mode_reads_no_terms": Scenario(
        REFUND_QUERY, {"retrieval__fallback_score_ratio": 0.0, "retrieval__mode": "dense"}, {}, WRONG_CATEGORY
    ),
    "several_domains_no_filter": Scenario(PCI_QUERY, {}, {}),
    "no_hints_no_filter": Scenario(PARCEL_QUERY, {}, {}),
    "pinned_category_without_documents": Scenario(REFUND_QUERY, {}, {}, "no-such-category"),
    "l0_domain_without_documents": Scenario(GHOST_QUERY, {}, {}, ghost_l0=True),
    "filtered_error": Scenario(REFUND_QUERY, {}, {"fail_filtered": True}),
    "unfiltered_companion_error": Scenario(REFUND_QUERY, {}, {"fail_unfiltered": True}, WRONG_CATEGORY),
    "fallback_off_wrong_filter": Scenario(REFUND_QUERY, {"retrieval__fallback": False}, {}, WRONG_CATEGORY),
    "threshold_rule_low_quality": Scenario(
        REFUND_QUERY, {"retrieval__fallback_rule": "threshold", "retrieval__reference_threshold": 0.99}, {}
    ),
    "threshold_rule_filter_holds": Scenario(
        REFUND_QUERY, {"retrieval__fallback_rule": "threshold", "retrieval__reference_threshold": 0.3}, {}
    ),
    "threshold_rule_filtered_error": Scenario(
        REFUND_QUERY, {"retrieval__fallback_rule": "threshold"}, {"fail_filtered": True}
    ),
    "nothing_usable": Scenario(REFUND_QUERY, {"retrieval__min_evidence_score": 0.99}, {}),
    "filtered_error_then_nothing_usable": Scenario(
        REFUND_QUERY, {"retrieval__min_evidence_score": 0.99}, {"fail_filtered": True}
    ),
    "every_search_raises": Scenario(REFUND_QUERY, {}, {"fail_all": True}),
    "every_search_raises_unfiltered": Scenario(PARCEL_QUERY, {}, {"fail_all": True}),
    "l1_disabled": Scenario(REFUND_QUERY, {"l1__enabled": False}, {}),
}


@dataclass
class Run:
    port: FaultySearchPort
    result: LookupResult
    json: dict[str, Any]

    @property
    def trace(self) -> dict[str, Any]:
        return self.json["retrievalTrace"]

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return self.trace["attempts"]


@pytest.fixture(scope="module")
def run(sample_kb: SampleKB, embedder):
    """Run a named scenario once per module (cached) through a spying/faulty search port."""
    cache: dict[str, Run] = {}

    def _run(name: str) -> Run:
        if name not in cache:
            scenario = SCENARIOS[name]
            port = FaultySearchPort(sample_kb.store, **scenario.port)
            tool = make_tool(
                sample_kb,
                embedder,
                search_port=port,
                store_calibration=ProbeCalibration(),  # measured through the port, faults included
                l0_index=ghost_index(sample_kb) if scenario.ghost_l0 else None,
                **scenario.overrides,
            )
            result = tool.lookup(scenario.query, pinned_category=scenario.pinned_category)
            cache[name] = Run(port, result, as_json(result))
        return cache[name]

    return _run


# -- the category filter ------------------------------------------------------------------------


def test_one_l0_domain_sends_a_filtered_request(run):
    r = run("filter_wins")
    assert r.trace["l0Hints"]["domains"] == ["payments"]
    assert r.trace["categoryFilter"] == "payments"
    assert r.attempts[0]["kind"] == "filtered"
    assert r.attempts[0]["filter"] == "payments"
    assert r.port.calls[0].request.category == "payments"
    assert all(b["category"] == "payments" for b in r.json["evidenceBlocks"])


def test_one_l0_domain_from_a_chinese_query_sends_a_filtered_request(run):
    r = run("filter_wins_chinese")
    assert r.trace["categoryFilter"] == "customer-support"
    assert r.port.calls[0].request.category == "customer-support"
    assert r.json["evidenceBlocks"][0]["docId"] == "support-fapiao-requests-zh"


def test_several_l0_domains_send_no_filter(run):
    r = run("several_domains_no_filter")
    assert len(r.trace["l0Hints"]["domains"]) > 1
    assert r.trace["categoryFilter"] is None
    assert [(a["kind"], a["filter"]) for a in r.attempts] == [("unfiltered", None)]
    assert [call.request.category for call in r.port.calls] == [None]


def test_zero_l0_domains_send_no_filter(run):
    r = run("no_hints_no_filter")
    assert r.trace["l0Hints"]["domains"] == []
    assert r.trace["categoryFilter"] is None
    assert [(a["kind"], a["filter"]) for a in r.attempts] == [("unfiltered", None)]
    assert [call.request.category for call in r.port.calls] == [None]


@pytest.mark.parametrize(
    ("domains", "expected"),
    [
        (["payments"], "payments"),
        (["payments", "   "], "payments"),
        (["", " \t"], None),
        ([], None),
        (["payments", "security"], None),
    ],
)
def test_category_filter_needs_exactly_one_nonblank_domain(domains, expected):
    assert category_filter(L0Hints(domains=domains)) == expected


def test_unfiltered_search_needs_no_fallback(run):
    r = run("no_hints_no_filter")
    assert r.trace["fallbackReason"] is None
    assert len(r.port.calls) == 1
    assert r.json["found"] is True


# -- L0 never bypasses L1 -----------------------------------------------------------------------


def test_l0_matching_exactly_one_document_still_runs_l1(run):
    r = run("filter_wins")
    assert r.trace["l0Hints"]["matchedDocIds"] == [REFUND_DOC]
    assert r.port.calls[0].request.category == "payments" and r.port.calls[0].hits  # a real search ran
    returned = r.port.returned_hits()
    blocks = r.json["evidenceBlocks"]
    assert blocks
    for block in blocks:
        assert block["evidenceKey"] in returned
        assert block["content"] == returned[block["evidenceKey"]].content
        assert "vector:filtered" in block["hitReasons"]
    # the evidence is what the vector search ranked, not just the one L0 document
    assert {b["docId"] for b in blocks} - {REFUND_DOC}


def test_l1_disabled_returns_not_found_with_hints_only_in_trace(run):
    r = run("l1_disabled")
    assert r.port.calls == []
    assert r.json["found"] is False
    assert r.json["evidenceStatus"] == "no_evidence"
    assert r.json["evidenceBlocks"] == []
    assert r.json["contextPack"] is None
    assert r.attempts == []
    assert r.trace["l0Hints"]["domains"] == ["payments"]
    assert "refund" in r.trace["l0Hints"]["matchedKeywords"]
    assert "disabled" in r.json["message"]


# -- the fallback decision ----------------------------------------------------------------------


def decision(r: Run) -> dict[str, Any]:
    return r.trace["fallbackDecision"]


def test_filter_and_unfiltered_companion_go_out_as_one_batch(run):
    r = run("filter_wins")
    assert [[q.category for q in trip] for trip in r.port.round_trips] == [["payments", None]]
    assert [(a["kind"], a["filter"]) for a in r.attempts] == [("filtered", "payments"), ("unfiltered", None)]
    first, second = r.port.calls
    assert first.request.query_vector is second.request.query_vector  # one embedding, two searches


def test_filter_wins_keeps_the_filtered_hits(run):
    r = run("filter_wins")
    d = decision(r)
    assert (d["rule"], d["fired"], d["used"]) == ("relative", "filter_holds_up", "filtered")
    assert r.trace["fallbackReason"] is None
    assert d["scoreRatio"] >= d["settings"]["scoreRatio"]
    assert d["filteredTop"] == r.attempts[0]["topNormalizedScore"]
    assert d["unfilteredTop"] == r.attempts[1]["topNormalizedScore"]
    assert d["scoreRatio"] == pytest.approx(d["filteredTop"] / d["unfilteredTop"])
    assert d["sparseScoreRatio"] >= d["settings"]["sparseScoreRatio"]  # hybrid: the BM25 top held too
    assert [a["used"] for a in r.attempts] == [True, False]
    blocks = r.json["evidenceBlocks"]
    assert blocks and all(b["hitReasons"][0] == "vector:filtered" for b in blocks)
    assert {b["evidenceKey"] for b in blocks} <= set(r.attempts[0]["hitKeys"])
    assert all(b["category"] == "payments" for b in blocks)


def test_filter_loses_uses_the_unfiltered_hits_without_a_third_search(run):
    r = run("filter_loses")
    d = decision(r)
    assert (d["fired"], d["used"]) == ("filter_lost", "unfiltered")
    assert r.trace["fallbackReason"] == "filtered_vector_low_quality"
    assert d["scoreRatio"] < d["settings"]["scoreRatio"]
    assert d["filteredTop"] < d["unfilteredTop"]
    assert [a["used"] for a in r.attempts] == [False, True]
    assert len(r.port.round_trips) == 1 and len(r.port.calls) == 2  # the retry reused the batch
    blocks = r.json["evidenceBlocks"]
    assert blocks and all(b["hitReasons"][0] == "vector:unfiltered" for b in blocks)
    assert {b["evidenceKey"] for b in blocks} <= set(r.attempts[1]["hitKeys"])
    assert blocks[0]["docId"] == REFUND_DOC  # the wrong filter cost nothing


def test_score_ratio_exactly_at_the_setting_counts_as_a_win(run, sample_kb, embedder):
    ratio = run("filter_loses").result.retrieval_trace.fallback_decision.score_ratio
    dense_only = {"retrieval__fallback_sparse_ratio": 0.0}  # the BM25 comparison off
    at = make_tool(sample_kb, embedder, retrieval__fallback_score_ratio=ratio, **dense_only)
    kept = at.lookup(REFUND_QUERY, pinned_category=WRONG_CATEGORY).retrieval_trace
    assert (kept.fallback_decision.fired, kept.fallback_reason) == ("filter_holds_up", None)
    above = make_tool(
        sample_kb, embedder, retrieval__fallback_score_ratio=math.nextafter(ratio, 1.0), **dense_only
    )
    lost = above.lookup(REFUND_QUERY, pinned_category=WRONG_CATEGORY).retrieval_trace
    assert (lost.fallback_decision.fired, lost.fallback_reason) == (
        "filter_lost",
        "filtered_vector_low_quality",
    )


def test_filter_that_loses_the_query_terms_uses_the_unfiltered_hits(run):
    r = run("filter_loses_terms")
    d = decision(r)
    assert (d["fired"], d["used"]) == ("filter_lost_terms", "unfiltered")
    assert r.trace["fallbackReason"] == "filtered_vector_low_quality"
    assert d["scoreRatio"] >= d["settings"]["scoreRatio"]  # the dense comparison alone keeps the filter
    assert d["sparseScoreRatio"] < d["settings"]["sparseScoreRatio"] == 0.6
    assert d["sparseScoreRatio"] == pytest.approx((d["filteredSparseTop"] or 0.0) / d["unfilteredSparseTop"])
    assert [a["used"] for a in r.attempts] == [False, True]
    assert r.json["evidenceBlocks"][0]["docId"] == REFUND_DOC  # the wrong filter cost nothing


def test_sparse_score_ratio_exactly_at_the_setting_counts_as_a_win(run, sample_kb, embedder):
    ratio = run("filter_loses_terms").result.retrieval_trace.fallback_decision.sparse_score_ratio
    assert ratio is not None and ratio > 0.0  # the wrong domain matches some query terms

    def decided(sparse_ratio: float) -> str:
        ratios = {"retrieval__fallback_score_ratio": 0.0, "retrieval__fallback_sparse_ratio": sparse_ratio}
        trace = make_tool(sample_kb, embedder, **ratios).lookup(REFUND_QUERY, pinned_category=WRONG_CATEGORY)
        return trace.retrieval_trace.fallback_decision.fired

    assert decided(ratio) == "filter_holds_up"
    assert decided(math.nextafter(ratio, 1.0)) == "filter_lost_terms"


def test_dense_mode_decides_on_the_dense_scores_alone(run):
    d = decision(run("dense_mode_reads_no_terms"))
    assert (d["fired"], d["used"]) == ("filter_holds_up", "filtered")  # the wrong filter, kept: ratio 0
    assert d["filteredSparseTop"] is d["unfilteredSparseTop"] is d["sparseScoreRatio"] is None


def _searched(category: str | None, cosine: float, bm25: float | None) -> SearchAttempt:
    """A search whose one usable hit has this cosine and BM25 score (a small fake)."""
    hit = SearchHit("p", "text", cosine, cosine, {}, sparse_score=bm25)
    return SearchAttempt("filtered" if category else "unfiltered", category, 20, [hit], [hit])


@pytest.mark.parametrize(
    ("filtered", "unfiltered", "fired", "sparse_ratio"),
    [
        ((0.8, 6.0), (1.0, 10.0), "filter_holds_up", 0.6),  # both ratios at their settings
        ((0.8, None), (1.0, 10.0), "filter_lost_terms", 0.0),  # no filtered hit matches a query term
        ((0.8, 5.9), (1.0, 10.0), "filter_lost_terms", 0.59),
        ((0.7, 1.0), (1.0, 10.0), "filter_lost", 0.1),  # the dense comparison decides first
        ((0.8, None), (1.0, None), "filter_holds_up", None),  # dense mode: no BM25 score to compare
        ((0.8, 3.0), (1.0, None), "filter_holds_up", None),  # the unfiltered hits match no term
    ],
)
def test_decision_reads_the_bm25_tops_next_to_the_cosines(filtered, unfiltered, fired, sparse_ratio):
    made = fallback_decision(
        _searched("payments", *filtered), _searched(None, *unfiltered), FallbackPolicy(score_ratio=0.75), True
    )
    assert made.fired == fired
    assert made.used == ("filtered" if fired == "filter_holds_up" else "unfiltered")
    assert made.sparse_score_ratio == (None if sparse_ratio is None else pytest.approx(sparse_ratio))


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("pinned_category_without_documents", "plausible"),
        # only the L0 index knows the ghost protocol: no chunk says "ghost" or "protocol", so the
        # unfiltered hits (on archived tickets) are no evidence for it (L0 hints route, not state facts)
        ("l0_domain_without_documents", "unheld_terms"),
    ],
)
def test_filtered_search_empty_uses_the_unfiltered_hits(run, name, verdict):
    r = run(name)
    assert r.trace["fallbackReason"] == "filtered_vector_no_evidence"
    assert decision(r)["fired"] == "filtered_search_empty"
    first, second = r.attempts
    assert first["kind"] == "filtered" and first["filter"] is not None
    assert first["hitCount"] == 0 and first["usableCount"] == 0 and not first["used"]
    assert (second["kind"], second["filter"], second["used"]) == ("unfiltered", None, True)
    assert second["hitCount"] > 0
    assert [[q.category for q in trip] for trip in r.port.round_trips] == [[first["filter"], None]]
    assert (r.json["found"], r.trace["evidenceVerdict"]["reason"]) == (verdict == "plausible", verdict)
    assert all("vector:unfiltered" in b["hitReasons"] for b in r.json["evidenceBlocks"])


def test_l0_domain_without_documents_filters_on_that_domain(run):
    r = run("l0_domain_without_documents")
    assert r.trace["l0Hints"]["domains"] == ["archive"]
    assert r.trace["categoryFilter"] == "archive"


def test_filtered_search_error_uses_the_unfiltered_hits_with_error_in_trace(run):
    r = run("filtered_error")
    assert r.trace["fallbackReason"] == "filtered_vector_error"
    assert decision(r)["fired"] == "filtered_search_failed"
    first, second = r.attempts
    assert first["kind"] == "filtered" and not first["used"]
    assert "simulated backend outage" in first["error"]
    assert first["hitCount"] == 0
    assert second["kind"] == "unfiltered" and second["error"] is None and second["used"]
    # the failed batch, then the unfiltered search alone: the only case with a second round trip
    assert [[q.category for q in trip] for trip in r.port.round_trips] == [["payments", None], [None]]
    assert r.json["found"] is True
    assert r.json["evidenceStatus"] == "evidence"
    assert all(b["hitReasons"][0] == "vector:unfiltered" for b in r.json["evidenceBlocks"])


def test_failed_unfiltered_companion_leaves_the_filter_standing(run):
    r = run("unfiltered_companion_error")
    assert decision(r)["fired"] == "unfiltered_search_unusable"
    assert r.trace["fallbackReason"] is None
    first, second = r.attempts
    assert first["used"] and first["error"] is None
    assert not second["used"] and "simulated backend outage" in second["error"]
    # the failed batch, the unfiltered search alone (fails), the filtered one alone (works)
    trips = [[q.category for q in trip] for trip in r.port.round_trips]
    assert trips == [[WRONG_CATEGORY, None], [None], [WRONG_CATEGORY]]
    # the filtered hits are the candidates; whether they answer is the abstention verdict's call
    # (the store's probes failed with the unfiltered searches, so it reads the query's words)
    verdict = r.trace["evidenceVerdict"]
    assert verdict["reason"] != "no_candidates" and verdict["probes"] == 0
    assert (r.json["evidenceStatus"] == "evidence") == verdict["plausible"]
    assert all(b["category"] == WRONG_CATEGORY for b in r.json["evidenceBlocks"])


def test_no_filter_runs_one_search_and_decides_nothing(run):
    r = run("no_hints_no_filter")
    d = decision(r)
    assert (d["fired"], d["used"]) == ("no_filter", "unfiltered")
    assert d["unfilteredTop"] is None and d["scoreRatio"] is None
    assert [[q.category for q in trip] for trip in r.port.round_trips] == [[None]]
    assert [a["used"] for a in r.attempts] == [True]


def test_fallback_off_sends_only_the_filtered_search(run):
    r = run("fallback_off_wrong_filter")
    assert decision(r)["fired"] == "fallback_disabled"
    assert [[q.category for q in trip] for trip in r.port.round_trips] == [[WRONG_CATEGORY]]
    assert r.trace["fallbackReason"] is None
    assert all(b["category"] == WRONG_CATEGORY for b in r.json["evidenceBlocks"])


def test_threshold_rule_reads_the_reference_threshold(run):
    r = run("threshold_rule_low_quality")
    d = decision(r)
    assert (d["rule"], d["fired"], d["used"]) == ("threshold", "filtered_top_below_threshold", "unfiltered")
    assert d["settings"] == {"referenceThreshold": 0.99}
    assert r.trace["fallbackReason"] == "filtered_vector_low_quality"
    assert d["filteredTop"] < 0.99


def test_threshold_rule_runs_the_unfiltered_search_only_as_a_retry(run):
    """Under ``threshold`` a filtered search that meets the rule is the only search."""
    held = run("threshold_rule_filter_holds")
    d = decision(held)
    assert (d["fired"], d["used"]) == ("filtered_top_at_threshold", "filtered")
    assert [[q.category for q in trip] for trip in held.port.round_trips] == [["payments"]]
    assert [(a["kind"], a["used"]) for a in held.attempts] == [("filtered", True)]
    assert d["unfilteredTop"] is None and d["filteredTop"] >= 0.3
    retried = run("threshold_rule_low_quality")  # below the threshold: then, and only then, the retry
    assert [[q.category for q in trip] for trip in retried.port.round_trips] == [["payments"], [None]]
    assert [(a["kind"], a["used"]) for a in retried.attempts] == [("filtered", False), ("unfiltered", True)]


def test_threshold_rule_retries_a_failed_filtered_search(run):
    r = run("threshold_rule_filtered_error")
    assert decision(r)["fired"] == "filtered_search_failed"
    assert r.trace["fallbackReason"] == "filtered_vector_error"
    assert [[q.category for q in trip] for trip in r.port.round_trips] == [["payments"], [None]]
    assert r.json["found"] is True


def test_both_attempts_without_usable_evidence_is_no_evidence(run):
    r = run("nothing_usable")
    assert r.json["found"] is False
    assert r.json["evidenceStatus"] == "no_evidence"
    assert r.json["evidenceBlocks"] == []
    assert "No knowledge evidence was found" in r.json["message"]
    assert r.trace["fallbackReason"] == "filtered_vector_no_evidence"
    assert [(a["kind"], a["filter"]) for a in r.attempts] == [
        ("filtered", "payments"),
        ("unfiltered", None),
    ]
    assert all(a["hitCount"] > 0 and a["usableCount"] == 0 for a in r.attempts)


def test_one_failed_and_one_empty_attempt_is_no_evidence_not_outage(run):
    r = run("filtered_error_then_nothing_usable")
    assert [a["error"] is not None for a in r.attempts] == [True, False]
    assert r.json["evidenceStatus"] == "no_evidence"


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("every_search_raises", ["filtered", "unfiltered"]),
        ("every_search_raises_unfiltered", ["unfiltered"]),
    ],
)
def test_every_search_raising_is_retrieval_failed(run, name, kinds):
    r = run(name)
    assert [a["kind"] for a in r.attempts] == kinds
    assert all("simulated backend outage" in a["error"] for a in r.attempts)
    assert r.json["found"] is False
    assert r.json["evidenceStatus"] == "retrieval_failed"
    assert r.json["evidenceBlocks"] == []
    assert "failed" in r.json["message"].lower()


# -- the same decision on the qdrant-client adapter ---------------------------------------------


@pytest.fixture(scope="module")
def client_store(embedder, tmp_path_factory):
    """The sample knowledge base in a qdrant-client store (local in-memory mode)."""
    store = QdrantClientStore("knowledge", embedder.dimension, location=":memory:")
    path = tmp_path_factory.mktemp("client-kb")
    ingest(sample_knowledge_base(), config_for(path), embedder=embedder, store=store)
    yield store
    store.close()


@pytest.mark.parametrize(
    ("pinned", "port", "fired", "reason"),
    [
        (None, {}, "filter_holds_up", None),
        (WRONG_CATEGORY, {}, "filter_lost", "filtered_vector_low_quality"),
        ("no-such-category", {}, "filtered_search_empty", "filtered_vector_no_evidence"),
        (None, {"fail_filtered": True}, "filtered_search_failed", "filtered_vector_error"),
    ],
)
def test_decision_branches_on_the_qdrant_client_store(
    sample_kb,
    embedder,
    client_store,
    pinned,
    port,
    fired,
    reason,
):
    faulty = FaultySearchPort(client_store, **port)
    result = make_tool(sample_kb, embedder, search_port=faulty).lookup(REFUND_QUERY, pinned_category=pinned)
    trace = result.retrieval_trace
    assert (trace.fallback_decision.fired, trace.fallback_reason) == (fired, reason)
    assert len(faulty.round_trips[0]) == 2  # filtered + unfiltered in one batch
    assert result.found and result.evidence_blocks[0].doc_id == REFUND_DOC


def test_no_filter_on_the_qdrant_client_store(sample_kb, embedder, client_store):
    faulty = FaultySearchPort(client_store)
    trace = make_tool(sample_kb, embedder, search_port=faulty).lookup(PARCEL_QUERY).retrieval_trace
    assert trace.fallback_decision.fired == "no_filter"
    assert [[q.category for q in trip] for trip in faulty.round_trips] == [[None]]


# -- invariants over every branch ---------------------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_l0_documents_are_never_evidence_blocks(run, name):
    r = run(name)
    returned = r.port.returned_hits()
    for block in r.json["evidenceBlocks"]:
        assert any(reason.startswith("vector:") for reason in block["hitReasons"])
        assert block["evidenceKey"] in returned  # every block came from a search hit
        assert block["content"] == returned[block["evidenceKey"]].content
        assert block["docId"] != "ghost-doc"
    if not any(call.hits for call in r.port.calls):
        assert r.json["evidenceBlocks"] == []


@pytest.mark.parametrize("name", SCENARIOS)
def test_never_more_than_two_searches_and_one_set_of_hits_used(run, name):
    """The fallback's searches: at most two, one used. A question not in English whose hits are
    in its own language (``filter_wins_chinese``) is searched once more over the chunks in other
    languages, under the used search's filter, its hits used beside it."""
    r = run(name)
    fallback = [a for a in r.attempts if a["kind"] != "other_languages"]
    others = [a for a in r.attempts if a["kind"] == "other_languages"]
    assert len(fallback) <= 2 and len(others) == (1 if name == "filter_wins_chinese" else 0)
    if not any(a["error"] for a in r.attempts):  # only a failed batch is searched again, alone
        trips = len(fallback) if "threshold" in name else min(1, len(fallback))  # a retry: a trip
        assert len(r.port.round_trips) - trips in ((0,) if not others else (1, 2))  # (2: fused again)
        assert len(r.port.calls) == len(r.attempts)
    assert sum(a["used"] for a in fallback) == (1 if fallback else 0)
    chosen = next((a["filter"] for a in fallback if a["used"]), None)
    assert all(a["used"] and a["filter"] == chosen for a in others)
    reason = r.trace["fallbackReason"]
    if reason is not None:
        assert [(a["kind"], a["used"]) for a in r.attempts] == [("filtered", False), ("unfiltered", True)]
        assert r.port.calls[1].request.category is None
        assert r.port.calls[1].request.query_text == r.port.calls[0].request.query_text
    used = {a["kind"] for a in r.attempts if a["used"]}
    for block in r.json["evidenceBlocks"]:
        assert block["hitReasons"][0].removeprefix("vector:") in used


def _holding(attempt: SearchAttempt, *codes: str) -> SearchAttempt:
    """The search with its hit holding ``codes`` verbatim."""
    hit = replace(attempt.usable[0], exact_codes=codes)
    return replace(attempt, hits=[hit], usable=[hit])


@pytest.mark.parametrize(
    ("inside", "outside", "fired"),
    [
        ((), ("--editor",), "filter_lost_code"),  # only a chunk outside the filter holds the flag
        (("--EDITOR",), ("--editor",), "filter_holds_up"),  # the filter kept a holder (any case)
        ((), ("GitHub",), "filter_holds_up"),  # a product's name is no distinctive code
        ((), (), "filter_holds_up"),
    ],
)
def test_a_filter_that_leaves_out_the_querys_code_falls_back(inside, outside, fired):
    """ "editor" routes "what does --editor do" to the editors page's category; the `hugo new`
    options listing `--editor` lies in another: the scores hold up, the code does not."""
    filtered = _holding(_searched("tools", 0.8, 6.0), *inside)
    unfiltered = _holding(_searched(None, 1.0, 10.0), *outside)
    made = fallback_decision(filtered, unfiltered, FallbackPolicy(score_ratio=0.75), True)
    assert made.fired == fired
    assert made.used == ("unfiltered" if fired == "filter_lost_code" else "filtered")

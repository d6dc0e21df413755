"""L0 hints -> category filter -> filtered L1 search -> unfiltered fallback (SPEC sections 3-4)."""

from __future__ import annotations

import math
from dataclasses import dataclass
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
    make_tool,
    sample_kb,  # noqa: F401 - fixture
)
from lookup_knowledge.adapters.l0_index import L0Document, L0Hints, L0Index
from lookup_knowledge.dataflows.query_understanding import category_filter

from lookup_knowledge.contract import LookupResult

GHOST_QUERY = "what does the ghost protocol say about archived tickets?"


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
    "filtered_success": Scenario(REFUND_QUERY, {}, {}),
    "filtered_success_chinese": Scenario(FAPIAO_QUERY, {}, {}),
    "several_domains_no_filter": Scenario(PCI_QUERY, {}, {}),
    "no_hints_no_filter": Scenario(PARCEL_QUERY, {}, {}),
    "pinned_category_without_documents": Scenario(REFUND_QUERY, {}, {}, "no-such-category"),
    "l0_domain_without_documents": Scenario(GHOST_QUERY, {}, {}, ghost_l0=True),
    "low_quality": Scenario(REFUND_QUERY, {"retrieval__reference_threshold": 0.99}, {}),
    "filtered_error": Scenario(REFUND_QUERY, {}, {"fail_filtered": True}),
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
def run(sample_kb: SampleKB, embedder):  # noqa: F811 - fixture
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
                l0_index=ghost_index(sample_kb) if scenario.ghost_l0 else None,
                **scenario.overrides,
            )
            result = tool.lookup(scenario.query, pinned_category=scenario.pinned_category)
            cache[name] = Run(port, result, as_json(result))
        return cache[name]

    return _run


# -- the category filter ------------------------------------------------------------------------


def test_one_l0_domain_sends_a_filtered_request(run):
    r = run("filtered_success")
    assert r.trace["l0Hints"]["domains"] == ["payments"]
    assert r.trace["categoryFilter"] == "payments"
    assert r.attempts[0]["kind"] == "filtered"
    assert r.attempts[0]["filter"] == "payments"
    assert r.port.calls[0].request.category == "payments"
    assert all(b["category"] == "payments" for b in r.json["evidenceBlocks"])


def test_one_l0_domain_from_a_chinese_query_sends_a_filtered_request(run):
    r = run("filtered_success_chinese")
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
    r = run("filtered_success")
    assert r.trace["l0Hints"]["matchedDocIds"] == [REFUND_DOC]
    assert len(r.port.calls) == 1 and r.port.calls[0].hits  # a real vector search ran
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


def test_filtered_success_runs_exactly_one_attempt(run):
    r = run("filtered_success")
    assert len(r.attempts) == 1
    assert len(r.port.calls) == 1
    assert r.trace["fallbackReason"] is None
    assert r.attempts[0]["topNormalizedScore"] >= r.trace["referenceThreshold"]
    assert r.json["found"] is True
    reasons = [reason for b in r.json["evidenceBlocks"] for reason in b["hitReasons"]]
    assert "vector:unfiltered" not in reasons


def test_top_score_exactly_at_threshold_counts_as_success(run, sample_kb, embedder):  # noqa: F811
    top = run("filtered_success").result.retrieval_trace.attempts[0].top_normalized_score
    at = make_tool(sample_kb, embedder, retrieval__reference_threshold=top).lookup(REFUND_QUERY)
    assert [a.kind for a in at.retrieval_trace.attempts] == ["filtered"]
    assert at.retrieval_trace.fallback_reason is None
    above = make_tool(sample_kb, embedder, retrieval__reference_threshold=math.nextafter(top, 1.0)).lookup(
        REFUND_QUERY
    )
    assert [a.kind for a in above.retrieval_trace.attempts] == ["filtered", "unfiltered"]
    assert above.retrieval_trace.fallback_reason == "filtered_vector_low_quality"


@pytest.mark.parametrize("name", ["pinned_category_without_documents", "l0_domain_without_documents"])
def test_filtered_search_without_candidates_retries_unfiltered(run, name):
    r = run(name)
    assert r.trace["fallbackReason"] == "filtered_vector_no_evidence"
    first, second = r.attempts
    assert first["kind"] == "filtered" and first["filter"] is not None
    assert first["hitCount"] == 0 and first["usableCount"] == 0
    assert (second["kind"], second["filter"]) == ("unfiltered", None)
    assert second["hitCount"] > 0
    assert [call.request.category for call in r.port.calls] == [first["filter"], None]
    assert r.json["found"] is True
    assert all("vector:unfiltered" in b["hitReasons"] for b in r.json["evidenceBlocks"])


def test_l0_domain_without_documents_filters_on_that_domain(run):
    r = run("l0_domain_without_documents")
    assert r.trace["l0Hints"]["domains"] == ["archive"]
    assert r.trace["categoryFilter"] == "archive"


def test_filtered_low_quality_retries_unfiltered(run):
    r = run("low_quality")
    assert r.trace["fallbackReason"] == "filtered_vector_low_quality"
    assert r.trace["referenceThreshold"] == 0.99
    first, second = r.attempts
    assert first["kind"] == "filtered" and first["usableCount"] > 0
    assert first["topNormalizedScore"] < 0.99
    assert (second["kind"], second["filter"]) == ("unfiltered", None)
    assert [call.request.category for call in r.port.calls] == ["payments", None]
    assert r.json["found"] is True


def test_filtered_search_error_retries_unfiltered_with_error_in_trace(run):
    r = run("filtered_error")
    assert r.trace["fallbackReason"] == "filtered_vector_error"
    first, second = r.attempts
    assert first["kind"] == "filtered"
    assert "simulated backend outage" in first["error"]
    assert first["hitCount"] == 0
    assert second["kind"] == "unfiltered" and second["error"] is None
    assert r.json["found"] is True
    assert r.json["evidenceStatus"] == "evidence"
    assert all(b["hitReasons"][0] == "vector:unfiltered" for b in r.json["evidenceBlocks"])


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
def test_retry_happens_at_most_once(run, name):
    r = run(name)
    assert len(r.port.calls) <= 2
    assert len(r.attempts) == len(r.port.calls)
    if len(r.port.calls) == 2:
        assert r.trace["fallbackReason"] is not None
        assert [a["kind"] for a in r.attempts] == ["filtered", "unfiltered"]
        assert r.port.calls[1].request.category is None
        assert r.port.calls[1].request.query_text == r.port.calls[0].request.query_text
    else:
        assert r.trace["fallbackReason"] is None

"""Abstention, calibrated relevance levels and the completeness hint (issue 22, points 1-3).

The verdict reads the store's own probe null and the query's vocabulary; these tests run it on
the real sample knowledge base (real engine, real model) and inject only a backend fault.
"""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dataflow_fixtures import FaultySearchPort, SampleKB, as_json, make_hit, make_tool
from hamilton import driver
from hashing_embedder import HashingEmbedder

from lookup_knowledge import sample_knowledge_base
from lookup_knowledge.adapters.search import AccessScope, SearchRequest
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.calibration import KeptNulls, ProbeCalibration, ProbeNull, own_question, script_of
from lookup_knowledge.contract import ContextPack, ContextPackSummary, EvidenceBlock, EvidenceVerdict
from lookup_knowledge.dataflows import abstention, query_understanding
from lookup_knowledge.dataflows.abstention import (
    AbstentionPolicy,
    InformativeShare,
    TermIdf,
    informative_share,
    informative_share_needed,
    query_term_idf,
    verdict_reason,
)
from lookup_knowledge.dataflows.postprocessing import RERANK_COLUMNS, SCREENED_COLUMNS
from lookup_knowledge.dataflows.query_understanding import query_terms
from lookup_knowledge.dataflows.result import completeness_hint, relevance_level
from lookup_knowledge.dataflows.retrieval import SearchAttempt
from lookup_knowledge.frames import object_frame
from lookup_knowledge.stores import calibration_path, l0_index_path

POLICY = AbstentionPolicy()  # the verdict's thresholds
INFORMATIVE_FLOOR, NEAR_BAR, UNHELD_SHARE = POLICY.informative_floor, POLICY.near_bar, POLICY.unheld_share
INFORMATIVE_RELIEFS = POLICY.informative_reliefs
MAX_RELIEF = POLICY.max_relief
INFORMATIVE_SHARE, INFORMATIVE_RELIEF = INFORMATIVE_RELIEFS[0]  # the first relief: 40%, half a unit

ANSWERABLE = "Who must approve a refund above 500 EUR?"
OFF_TOPIC = ["Which airline has the most legroom in economy?", "How do I unclog a kitchen sink?"]


@pytest.fixture(scope="module")
def tool(sample_kb: SampleKB, embedder):
    return make_tool(sample_kb, embedder)


@pytest.mark.parametrize("query", OFF_TOPIC)
def test_an_off_topic_question_is_no_evidence_and_the_trace_says_why(tool, query: str) -> None:
    result = as_json(tool.lookup(query))
    verdict_fields = (result["found"], result["evidenceStatus"], result["relevanceLevel"])
    assert verdict_fields == (False, "no_evidence", "none")
    assert result["evidenceBlocks"] == [] and result["contextPack"] is None
    verdict = result["retrievalTrace"]["evidenceVerdict"]
    assert verdict["plausible"] is False
    assert verdict["reason"] in {"below_probe_null", "no_shared_terms", "no_candidates"}
    if verdict["reason"] == "below_probe_null":
        assert verdict["margin"] < verdict["strictness"] and verdict["probes"] > 0
    if verdict["reason"] == "no_shared_terms":
        assert verdict["lexicalCoverage"] == 0.0 and verdict["matchedTerms"] == [] and verdict["queryTerms"]
    if verdict["reason"] != "no_candidates":  # hits passed the floors, but not the verdict
        assert "do not plausibly answer" in result["message"]
    nodes = [node["name"] for node in result["retrievalTrace"]["executedNodes"]]
    assert {"probe_null", "query_terms", "evidence_verdict"} <= set(nodes)


def test_an_answerable_question_keeps_its_evidence(tool) -> None:
    result = as_json(tool.lookup(ANSWERABLE))
    verdict = result["retrievalTrace"]["evidenceVerdict"]
    assert result["found"] is True and result["evidenceBlocks"]
    assert verdict["plausible"] is True and verdict["margin"] >= verdict["strictness"]
    assert verdict["densePercentile"] == pytest.approx(1.0, abs=0.05)  # above the store's probes
    assert verdict["nullMedian"] < verdict["nullP90"] < verdict["denseTop"]
    assert verdict["lexicalCoverage"] >= 0.5 and "refund" in verdict["matchedTerms"]
    assert 0.5 <= verdict["topHitCoverage"] <= verdict["lexicalCoverage"]  # the top hit is one of the best


def _sample_questions() -> list[tuple[str, str]]:
    folder = Path(sample_knowledge_base()).with_name("sample-eval")
    lines = (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [(json.loads(line)["_id"], json.loads(line)["text"]) for line in lines]


def test_the_sample_questions_stay_found_and_clear_off_topic_ones(tool) -> None:
    results = [tool.lookup(text) for _, text in _sample_questions()]
    assert sum(r.found for r in results) / len(results) >= 0.97
    alphabetic = [r for r in results if script_of(r.query) == "alphabetic"]  # CJK: read by its words
    weakest_answerable = min(r.retrieval_trace.evidence_verdict.margin for r in alphabetic)
    off = [tool.lookup(q).retrieval_trace.evidence_verdict.margin or 0.0 for q in OFF_TOPIC]
    assert max(off) < weakest_answerable


def test_levels_mean_what_they_promise_on_the_sample_knowledge_base(tool) -> None:
    folder = Path(sample_knowledge_base()).with_name("sample-eval")
    rows = [line.split("\t") for line in (folder / "qrels.tsv").read_text().splitlines()[1:]]
    relevant = {(query, doc) for query, doc, grade in rows if int(grade) > 0}
    right: dict[str, list[bool]] = {"high": [], "medium": [], "low": []}
    for query_id, text in _sample_questions():
        result = tool.lookup(text)
        if result.found:
            right[result.relevance_level].append((query_id, result.evidence_blocks[0].doc_id) in relevant)
    assert len(right["high"]) >= 10 and sum(right["high"]) / len(right["high"]) >= 0.8
    assert all(sum(v) / len(v) >= 0.5 for v in right.values() if v)  # medium's promise holds for all


def test_strictness_is_configurable_and_abstention_can_be_turned_off(sample_kb, embedder) -> None:
    query = "What is our parental leave policy?"  # policy words, no leave policy: a near miss
    margin = make_tool(sample_kb, embedder).lookup(query).retrieval_trace.evidence_verdict.margin
    beyond_relief = margin + MAX_RELIEF + 0.25  # its informative words cannot pass it either
    strict = make_tool(sample_kb, embedder, abstention__strictness=beyond_relief).lookup(query)
    lenient = make_tool(sample_kb, embedder, abstention__strictness=max(margin - 0.5, 0.0)).lookup(query)
    assert (strict.found, lenient.found) == (False, True)
    off = make_tool(sample_kb, embedder, abstention__enabled=False).lookup(OFF_TOPIC[0])
    assert off.found is True and off.retrieval_trace.evidence_verdict.plausible is True


def _just_short(sample_kb, embedder, query: str, **port: Any):
    """The lookup of ``query`` with a strictness a quarter above its margin: inside the band
    where the query's informative words decide; and the port it searched."""
    margin = make_tool(sample_kb, embedder).lookup(query).retrieval_trace.evidence_verdict.margin
    searched = FaultySearchPort(sample_kb.store, **port)
    tool = make_tool(sample_kb, embedder, search_port=searched, abstention__strictness=margin + 0.25)
    return tool.lookup(query), searched


def test_a_margin_just_short_passes_when_the_hits_hold_the_informative_words(sample_kb, embedder) -> None:
    result, searched = _just_short(sample_kb, embedder, "kafka consumer lag")
    verdict = result.retrieval_trace.evidence_verdict
    assert (result.found, verdict.reason, verdict.plausible) == (True, "informative_terms", True)
    assert verdict.informative_coverage == pytest.approx(1.0)  # the best hits hold every term
    assert searched.term_idf_calls == 1


def test_a_margin_just_short_is_no_evidence_when_the_hits_hold_only_common_words(sample_kb, embedder) -> None:
    result, _ = _just_short(sample_kb, embedder, "How many vacation days do I get?")
    verdict = result.retrieval_trace.evidence_verdict
    assert verdict.matched_terms == ["days"]  # "vacation", the rarer word, is in no chunk
    assert verdict.informative_coverage < INFORMATIVE_SHARE
    assert (result.found, verdict.reason) == (False, "below_probe_null")
    assert result.evidence_status == "no_evidence"


@pytest.mark.parametrize(
    ("query", "holds_nearly_all"),
    [("kafka consumer lag", True), ("What happens when a card payment is disputed?", False)],
)
def test_hits_holding_nearly_all_the_information_lower_the_bar_further(
    sample_kb, embedder, query: str, holds_nearly_all: bool
) -> None:
    """Three quarters of a unit short of the bar: beyond the first relief (half a unit, 40%),
    within the second (one unit) only for hits holding 90% of the question's information."""
    margin = make_tool(sample_kb, embedder).lookup(query).retrieval_trace.evidence_verdict.margin
    short = make_tool(sample_kb, embedder, abstention__strictness=margin + INFORMATIVE_RELIEF + 0.25)
    verdict = short.lookup(query).retrieval_trace.evidence_verdict
    assert (verdict.informative_coverage >= 0.9) is holds_nearly_all
    assert verdict.informative_coverage >= INFORMATIVE_SHARE  # the first relief's share, not its margin
    assert (verdict.plausible, verdict.reason) == (
        (True, "informative_terms") if holds_nearly_all else (False, "below_probe_null")
    )


def test_the_bar_rises_to_the_margin_the_stores_own_questions_reach(tool, sample_kb, embedder) -> None:
    """Questions made from the sample KB's own runbooks reach a higher margin than strictness:
    that is the bar, shown in the trace; a lower strictness does not lower it, a higher one
    wins, and abstention.own_questions false leaves strictness alone."""
    verdict = tool.lookup(ANSWERABLE).retrieval_trace.evidence_verdict
    own = verdict.own_questions_p5
    assert own is not None and own > 1.5 and verdict.strictness == pytest.approx(own)
    lower = make_tool(sample_kb, embedder, abstention__strictness=1.0).lookup(ANSWERABLE)
    assert lower.retrieval_trace.evidence_verdict.strictness == pytest.approx(own)
    higher = make_tool(sample_kb, embedder, abstention__strictness=own + 1).lookup(ANSWERABLE)
    assert higher.retrieval_trace.evidence_verdict.strictness == pytest.approx(own + 1)
    off = make_tool(sample_kb, embedder, abstention__own_questions=False).lookup(ANSWERABLE)
    assert off.retrieval_trace.evidence_verdict.strictness == pytest.approx(1.5)


def test_a_question_between_strictness_and_the_stores_bar_is_no_evidence(tool, sample_kb, embedder) -> None:
    query = "Who is on call this weekend?"  # the runbooks say how on-call works, not who is on call
    alone = make_tool(sample_kb, embedder, abstention__own_questions=False).lookup(query)
    verdict = tool.lookup(query).retrieval_trace.evidence_verdict
    assert 1.5 <= verdict.margin < verdict.strictness  # clears strictness, not the store's bar
    assert alone.retrieval_trace.evidence_verdict.reason != "below_probe_null"  # its margin alone passes
    assert (tool.lookup(query).found, verdict.reason) == (False, "below_probe_null")


TRAVEL = "Who approves travel expenses?"  # the runbooks say who approves refunds, nothing on travel


def test_a_margin_just_above_the_bar_needs_hits_holding_the_questions_information(
    tool, sample_kb, embedder
) -> None:
    """Within NEAR_BAR's band above the bar, best hits that hold only the question's general words
    (here "approves": 19% of its information, over the 10% floor) make it no evidence; the same
    margin further above a lower bar passes."""
    share, band = NEAR_BAR
    result = tool.lookup(TRAVEL)
    verdict = result.retrieval_trace.evidence_verdict
    assert verdict.strictness <= verdict.margin < verdict.strictness + band
    assert verdict.matched_terms == ["approves"]
    assert INFORMATIVE_FLOOR <= verdict.informative_coverage < share  # the floor alone would pass it
    assert (result.found, result.evidence_status, verdict.reason) == (
        False,
        "no_evidence",
        "uninformative_terms",
    )
    lower = make_tool(
        sample_kb,
        embedder,
        abstention__own_questions=False,
        abstention__strictness=verdict.margin - band - 0.1,
    ).lookup(TRAVEL)
    assert (lower.found, lower.retrieval_trace.evidence_verdict.reason) == (True, "plausible")


def test_uninformative_reads_floats_and_series_alike() -> None:
    share, band = NEAR_BAR
    bar = 2.0
    cases = [  # (margin, informative share, refused)
        (bar + band / 2, share - 0.05, True),  # near the bar, too little information
        (bar + band / 2, share + 0.05, False),
        (bar + band + 0.1, share - 0.05, False),  # beyond the band: only the floor applies
        (bar + band + 0.1, INFORMATIVE_FLOOR - 0.05, True),  # under twice the bar, under the floor
        (2 * bar + 0.1, 0.0, False),  # far above the bar: the margin alone decides
    ]
    for margin, informative, refused in cases:
        assert bool(POLICY.uninformative(margin, informative, bar)) is refused, (margin, informative)
    margins, shares = pd.Series([c[0] for c in cases]), pd.Series([c[1] for c in cases])
    assert POLICY.uninformative(margins, shares, bar).tolist() == [c[2] for c in cases]
    assert not POLICY.uninformative(bar + 0.1, float("nan"), bar)  # a share not read refuses nothing


def test_own_questions_come_one_per_document_from_the_first_sentence_of_six_words() -> None:
    assert own_question(
        "## Refunds\n\nShort one. Refunds above 500 EUR need the finance lead's approval."
    ) == ("Refunds above 500 EUR need the finance lead's approval.")
    assert own_question("# Title only\n\nToo short.") is None
    null = ProbeNull((0.1, 0.2, 0.3, 0.4), own_tops=tuple(0.3 + i / 100 for i in range(30)))
    assert null.own_questions_p5() == pytest.approx(null.margin(0.3 + 0.05 * 29 / 100), abs=0.05)
    assert ProbeNull((0.1, 0.2), own_tops=(0.5,) * 5).own_questions_p5() is None  # too few to tell


VACATION = "How many vacation days do I get?"  # the example: "days" is all the KB shares


def test_a_margin_just_above_the_bar_is_no_evidence_when_the_hits_hold_only_common_words(
    sample_kb, embedder
) -> None:
    """The bar at strictness (the sample KB's own questions raise it above this margin)."""
    result = make_tool(sample_kb, embedder, abstention__own_questions=False).lookup(VACATION)
    verdict = result.retrieval_trace.evidence_verdict
    assert verdict.strictness <= verdict.margin < 2 * verdict.strictness  # the margin alone would pass
    assert verdict.matched_terms == ["days"]
    assert verdict.informative_coverage < INFORMATIVE_FLOOR
    assert (result.found, result.evidence_status, verdict.reason) == (
        False,
        "no_evidence",
        "uninformative_terms",
    )
    assert result.evidence_blocks == [] and verdict.plausible is False


def test_a_margin_above_the_bar_with_informative_words_stays_evidence(sample_kb, embedder) -> None:
    """Above the bar by less than strictness the share is read, and words carrying the question's
    information keep it evidence; beyond twice the bar it is not read."""
    query = "kafka consumer lag"
    margin = make_tool(sample_kb, embedder).lookup(query).retrieval_trace.evidence_verdict.margin
    searched = FaultySearchPort(sample_kb.store)
    read = make_tool(sample_kb, embedder, search_port=searched, abstention__strictness=margin * 0.75).lookup(
        query
    )
    verdict = read.retrieval_trace.evidence_verdict
    assert (read.found, verdict.reason, searched.term_idf_calls) == (True, "plausible", 1)
    assert verdict.informative_coverage == pytest.approx(1.0)
    unread = make_tool(
        sample_kb, embedder, search_port=searched, abstention__strictness=margin * 0.45
    ).lookup(query)
    assert unread.found and searched.term_idf_calls == 1


def test_the_common_words_veto_scales_with_strictness(sample_kb, embedder, tool) -> None:
    margin = tool.lookup(VACATION).retrieval_trace.evidence_verdict.margin
    lenient = make_tool(
        sample_kb, embedder, abstention__strictness=margin / 2 - 0.1, abstention__own_questions=False
    ).lookup(VACATION)
    assert (lenient.found, lenient.retrieval_trace.evidence_verdict.reason) == (True, "plausible")


def test_the_store_is_asked_once_for_each_token_idf_until_it_may_have_changed(sample_kb, embedder) -> None:
    searched = FaultySearchPort(sample_kb.store)
    # the bar at strictness, so both questions' margins lie in the band where the share is read
    tool = make_tool(sample_kb, embedder, search_port=searched, abstention__own_questions=False)
    first = tool.lookup(VACATION).retrieval_trace.evidence_verdict
    again = tool.lookup(VACATION).retrieval_trace.evidence_verdict
    assert searched.term_idf_calls == 1 and again == first  # kept: the same verdict, no round trip
    tool.lookup("How many vacation days do I get in summer?")  # only its new word is asked for
    assert searched.term_idf_tokens[1:] == [list(bm25_encoder().query_terms("summer").values())]
    tool.store_calibration.reset()  # the store was reopened: it may hold new data
    assert tool.lookup(VACATION).retrieval_trace.evidence_verdict == first
    assert searched.term_idf_calls == 3


def test_the_store_is_asked_for_term_idf_only_inside_the_band(tool, sample_kb, embedder) -> None:
    searched = FaultySearchPort(sample_kb.store)
    make_tool(sample_kb, embedder, search_port=searched).lookup(ANSWERABLE)  # well above the bar
    make_tool(sample_kb, embedder, search_port=searched).lookup(OFF_TOPIC[0])  # far below it
    assert searched.term_idf_calls == 0
    assert tool.lookup(ANSWERABLE).retrieval_trace.evidence_verdict.informative_coverage is None


def test_a_store_failing_its_term_idf_leaves_the_margin_to_decide(sample_kb, embedder) -> None:
    result, searched = _just_short(sample_kb, embedder, "kafka consumer lag", fail_term_idf=True)
    verdict = result.retrieval_trace.evidence_verdict
    assert searched.term_idf_calls == 1
    assert (result.found, verdict.reason, verdict.informative_coverage) == (False, "below_probe_null", None)


def test_an_outage_stays_retrieval_failed(sample_kb, embedder) -> None:
    failing = make_tool(sample_kb, embedder, search_port=FaultySearchPort(sample_kb.store, fail_all=True))
    result = failing.lookup(ANSWERABLE)
    assert (result.found, result.evidence_status) == (False, "retrieval_failed")
    assert result.retrieval_trace.evidence_verdict.reason == "no_candidates"


def test_the_probe_null_is_read_per_script() -> None:
    null = ProbeNull((0.1, 0.2, 0.3, 0.4))
    assert null.dense_percentile(0.25) == pytest.approx(0.5)
    assert null.dense_percentile(0.5) == pytest.approx(1.0)
    assert ProbeNull().dense_percentile(0.5) is None
    assert (script_of("如何申请增值税专用发票"), script_of("refund over 500 EUR")) == ("cjk", "alphabetic")


def test_the_nulls_kept_are_the_most_recently_used_shapes(sample_kb: SampleKB, embedder) -> None:
    """One null per search shape, and each caller's access scope is a shape: a server with many
    callers keeps the ``max_shapes`` last used; one not used since is measured again."""
    spy = FaultySearchPort(sample_kb.store)  # no fault: it records probes not of the shipped set
    calibration = ProbeCalibration(probes=("lasagna recipe", "airline legroom"), max_shapes=2)

    def null(principal: str) -> ProbeNull:
        scope = AccessScope.of([principal]).filter
        request = SearchRequest(ANSWERABLE, embedder.embed_query(ANSWERABLE), 5, access=scope)
        return calibration.null_for(request, spy, embedder)

    first = null("team-a")
    null("team-b")
    assert null("team-a") is first and len(spy.round_trips) == 2  # kept: not measured again
    null("team-c")  # team-b, least recently used, makes room
    assert null("team-a") is first and len(spy.round_trips) == 3
    null("team-b")
    assert len(spy.round_trips) == 4  # measured again
    assert len(calibration._nulls) == 2


def test_a_null_is_kept_next_to_the_store_for_the_version_it_was_measured_on(
    sample_kb: SampleKB, embedder, tmp_path: Path
) -> None:
    """A new process on an unchanged store reads the null instead of measuring it; a store
    written since (a new version), or a file it cannot read, is measured again, never an error."""
    spy = FaultySearchPort(sample_kb.store)
    version = ["v1"]
    kept = KeptNulls(tmp_path / "knowledge.calibration.json", lambda: version[0])
    request = SearchRequest(ANSWERABLE, embedder.embed_query(ANSWERABLE), 5)

    def null() -> ProbeNull:  # a new calibration each time: what a new process has
        return ProbeCalibration(probes=("lasagna recipe", "airline legroom"), kept=kept).null_for(
            request, spy, embedder
        )

    first = null()
    measuring = len(spy.round_trips)  # the probes' search (and the own questions')
    assert measuring >= 1 and first.dense_tops
    assert null() == first and len(spy.round_trips) == measuring  # read back: not measured
    version[0] = "v2"  # an ingest since
    assert null() == first and len(spy.round_trips) == 2 * measuring  # measured (the same data here)
    kept.path.write_text("{not json", encoding="utf-8")
    assert null() == first and len(spy.round_trips) == 3 * measuring
    assert json.loads(kept.path.read_text(encoding="utf-8"))["version"] == "v2"  # written anew
    version[0] = None  # a store without an L0 index file: nothing to key a null by
    assert null() == first and null() == first and len(spy.round_trips) == 5 * measuring


class _CountingEmbedder:
    """The real model, counting the texts each batch embeds (a spy: no fault)."""

    def __init__(self, model) -> None:  # noqa: ANN001 - any Embedder
        self.model, self.model_name, self.embedded = model, model.model_name, []

    def embed_queries(self, texts):  # noqa: ANN001, ANN201 - the Embedder protocol
        self.embedded.append(list(texts))
        return self.model.embed_queries(texts)


def test_a_new_access_scope_embeds_only_own_questions_not_embedded_before(sample_kb, embedder) -> None:
    """Each scope measures its own null (its probes and own questions search what it may see),
    but a question another scope's sample asked is not embedded again."""
    spy = _CountingEmbedder(embedder)
    calibration = ProbeCalibration(probes=("lasagna recipe", "airline legroom"))
    vector = embedder.embed_query(ANSWERABLE)
    for principals in (None, ["team-a"]):  # the sample KB is public: both see every document
        request = SearchRequest(ANSWERABLE, vector, 5, access=AccessScope.of(principals).filter)
        null = calibration.null_for(request, sample_kb.store, spy)
        assert len(null.own_tops) >= 20
    probes, own = spy.embedded  # the probes once per model, the own questions once per text
    assert probes == ["lasagna recipe", "airline legroom"] and len(own) == len(null.own_tops)


def test_a_tool_keeps_its_null_beside_the_store_keyed_by_the_l0_index_file(sample_kb, embedder) -> None:
    """Every ingest rewrites the L0 index file: its stamp is the store's version."""
    config_tool = make_tool(sample_kb, embedder)
    config_tool.lookup(ANSWERABLE)
    path = calibration_path(config_tool.config)
    kept = json.loads(path.read_text(encoding="utf-8"))
    stat = l0_index_path(config_tool.config).stat()
    assert kept["version"] == [stat.st_ino, stat.st_size, stat.st_mtime_ns]
    assert any(json.loads(key)[:2] == [embedder.model_name, "hybrid"] for key in kept["nulls"])


def test_a_measured_null_keeps_its_port_and_model_so_their_ids_are_not_reused(sample_kb: SampleKB) -> None:
    """Nulls and probe vectors are keyed by the port's and the model's ids; each entry holds the
    object, so no other port or model can take that id (and its null) while the entry lives."""
    calibration = ProbeCalibration(probes=("lasagna recipe", "airline legroom"))
    model, port = HashingEmbedder(), FaultySearchPort(sample_kb.store)
    request = SearchRequest(ANSWERABLE, model.embed_query(ANSWERABLE), 5)
    calibration.null_for(request, port, model)
    model_ref, port_ref = weakref.ref(model), weakref.ref(port)
    del model, port, request
    gc.collect()
    assert model_ref() is not None and port_ref() is not None  # held by the calibration's entries


def _verdict(
    dense_rank: int | None, sparse_rank: int | None, margin: float = 5.0, top_hit_coverage: float | None = 1.0
) -> EvidenceVerdict:
    return EvidenceVerdict(
        plausible=True,
        reason="plausible",
        margin=margin,
        top_dense_rank=dense_rank,
        top_sparse_rank=sparse_rank,
        top_hit_coverage=top_hit_coverage,
    )


def test_levels_fall_as_the_searches_disagree_on_the_top_hit() -> None:
    levels = [
        relevance_level("evidence", _verdict(dense, sparse), "hybrid")
        for dense, sparse in [(1, 1), (1, 2), (3, 2), (1, 4), (2, None), (None, 1)]
    ]
    assert levels == ["high", "medium", "medium", "low", "low", "low"]
    assert relevance_level("no_evidence", _verdict(1, 1), "hybrid") == "none"
    by_margin = [relevance_level("evidence", _verdict(None, None, m), "dense") for m in (2.0, 3.5, 4.5)]
    assert by_margin == ["low", "medium", "high"]


def test_a_question_asked_across_languages_is_also_levelled_by_its_lines() -> None:
    def level(places: tuple[int | None, int | None], multilingual: int | None, lead: float | None) -> str:
        verdict = _verdict(*places).model_copy(
            update={"top_multilingual_rank": multilingual, "top_line_lead": lead}
        )
        return relevance_level("evidence", verdict, "hybrid")

    assert level((None, None), 1, None) == "low"  # lines not read: the places alone
    assert level((None, None), 1, 0.08) == "high"  # first in the multilingual search and by its line
    assert level((None, None), 1, 0.01) == "medium"  # first, by a thin lead
    assert level((None, None), 4, 0.08) == "medium"  # a clear line lead alone
    assert level((None, None), 4, 0.01) == "low"
    assert level((None, None), 1, -0.02) == "low"  # another block's line is better
    assert level((2, 3), 4, -0.02) == "medium"  # never lower than by the places
    assert level((1, 1), 4, -0.02) == "high"


def test_the_top_blocks_line_lead_is_over_the_other_returned_blocks() -> None:
    blocks = [
        BLOCK,
        BLOCK.model_copy(update={"evidence_key": "b#chunk-0"}),
        BLOCK.model_copy(update={"evidence_key": "c#chunk-0"}),
    ]
    lines = {
        "a#chunk-0": 0.71,
        "b#chunk-0": 0.64,
        "c#chunk-0": 0.5,
        "d#chunk-0": 0.9,
    }  # d: kept, not returned
    assert abstention.top_line_lead(lines, blocks) == pytest.approx(0.07)
    assert abstention.top_line_lead({"a#chunk-0": 0.6}, blocks) is None  # no other block's line
    assert abstention.top_line_lead(None, blocks) is None
    assert abstention.top_line_lead(lines, []) is None


def test_high_needs_a_top_hit_holding_half_the_querys_terms() -> None:
    """Both searches rank a neighbouring field's page first on the question's general words: the
    top hit holding under half of the query's terms is medium at best."""
    levels = [
        relevance_level("evidence", _verdict(1, 1, top_hit_coverage=share), "hybrid")
        for share in (1.0, 0.5, 1 / 3, 0.0, None)
    ]
    assert levels == ["high", "high", "medium", "medium", "high"]  # None: a query of stop words
    assert relevance_level("evidence", _verdict(1, 4, top_hit_coverage=0.0), "hybrid") == "low"


def test_a_lookup_below_the_stores_bar_is_not_high() -> None:
    """Evidence only by the informative words its hits hold ("Which wine goes with grilled
    salmon?" on SciFact's abstracts: margin under the bar, both searches agreeing on a salmon
    abstract): the level does not vouch for it."""
    below_bar = _verdict(1, 1, margin=1.2).model_copy(update={"reason": "informative_terms"})
    assert relevance_level("evidence", below_bar, "hybrid") == "medium"
    fourth, by_code = ({"top_dense_rank": 4}, {"reason": "exact_code"})
    assert relevance_level("evidence", below_bar.model_copy(update=fourth), "hybrid") == "low"
    assert relevance_level("evidence", below_bar.model_copy(update=by_code), "hybrid") == "high"


def test_a_hit_holds_a_term_as_written_not_in_another_form_of_its_stem() -> None:
    """BM25 matches "parental" in "parent" and "leave" in "leavers" (one stem); as written, the
    block holds neither: the relevance level counts what it holds as written."""
    hit = replace(
        make_hit("access", 3, 0.6, content="Joiners, movers, leavers: the parent team revokes access."),
        payload={"title": "Production Access Policy", "breadcrumb": "Production Access Policy"},
        matched_terms=("parental", "leave", "policy", "access"),
    )
    assert hit.written_terms() == ("policy", "access")  # the title's "Policy" too, case-insensitive
    assert hit.written_terms(("leave", "revokes")) == ("revokes",)


def test_a_policy_question_the_sample_kb_holds_in_another_sense_is_not_high(tool) -> None:
    """The sample knowledge base has no HR policies; its access policy's "Joiners, movers,
    leavers" holds "leave" in another sense and "parental" not at all, and both searches rank it
    first: whatever the verdict, the level does not vouch for it."""
    result = tool.lookup("What is our parental leave policy?")
    verdict = result.retrieval_trace.evidence_verdict
    assert result.relevance_level != "high"
    if result.evidence_blocks:  # found (the margin is the model's): the top block's words
        sparse = [r for r in result.evidence_blocks[0].hit_reasons if r.startswith("vector:sparse rank")]
        assert sparse and "leave~" in sparse[0] and "(policy" in sparse[0]
        assert verdict.top_hit_coverage == pytest.approx(1 / 3)  # "policy" of three terms


def test_the_informative_share_is_the_idf_weight_of_the_terms_held() -> None:
    terms = {"maternity": 1, "leave": 2, "policy": 3}
    idf = TermIdf({1: 5.0, 2: 2.0, 3: 3.0}, unheld=5.0)  # no chunk holds "maternity"
    share = informative_share(idf, terms, ("leave", "policy"))
    assert (share.held, share.unheld) == (pytest.approx(0.5), pytest.approx(0.5))
    assert informative_share(None, terms, ()) is None  # not read
    assert informative_share(TermIdf({}, None), terms, ()) is None  # the store cannot tell


def test_the_informative_share_is_read_and_decides_only_near_the_bar() -> None:
    bar = POLICY.strictness
    assert informative_share_needed("below_probe_null", bar - MAX_RELIEF, 0.5, "alphabetic", bar, POLICY)
    assert not informative_share_needed(
        "below_probe_null", bar - MAX_RELIEF - 0.01, 0.5, "alphabetic", bar, POLICY
    )
    assert not informative_share_needed("plausible", bar + 0.2, 0.5, "cjk", bar, POLICY)  # its words decided
    assert not informative_share_needed("plausible", 2 * bar, 0.5, "alphabetic", bar, POLICY)
    assert not informative_share_needed("exact_code", bar - 0.2, 0.5, "alphabetic", bar, POLICY)
    held = InformativeShare(INFORMATIVE_SHARE, None)
    assert (
        verdict_reason("below_probe_null", held, bar - INFORMATIVE_RELIEF, bar, POLICY) == "informative_terms"
    )
    assert verdict_reason("below_probe_null", held, bar - MAX_RELIEF, bar, POLICY) == "below_probe_null"
    little = InformativeShare(INFORMATIVE_FLOOR / 2, None)
    assert verdict_reason("plausible", little, bar + 0.2, bar, POLICY) == "uninformative_terms"
    unheld = InformativeShare(0.5, UNHELD_SHARE)
    assert verdict_reason("plausible", unheld, bar + 0.2, bar, POLICY) == "unheld_terms"
    assert verdict_reason("plausible", None, bar + 0.2, bar, POLICY) == "plausible"  # not read


# -- codes of the blocks returned ----------------------------------------------------------------

CODE_QUERY = "what does RETRY_MAX_2 set"


def _code_verdict(sample_kb: SampleKB, returned: list[str]) -> EvidenceVerdict:
    """The verdict on three pages sharing a word of the query, scored over a fourth chunk that
    holds its code, with the ``returned`` points as the reranked blocks (strictness 20: the margin
    passes nothing): the verdict's nodes alone, wired by Hamilton."""
    terms = tuple(query_terms(CODE_QUERY))
    best = [
        replace(make_hit(f"page-{n}", 0, 0.5 - n / 100, point_id=f"p{n}"), matched_terms=terms[:1])
        for n in range(3)
    ]
    holder = replace(make_hit("settings", 2, 0.4, point_id="p3"), exact_codes=("RETRY_MAX_2",))
    hits = [*best, holder]
    rows = [{**dict.fromkeys(RERANK_COLUMNS), "point_id": point} for point in returned]
    verdict_nodes = driver.Builder().with_modules(abstention, query_understanding)
    verdict_nodes = verdict_nodes.with_config({"l1_enabled": True}).build()
    inputs = {
        "query": CODE_QUERY,
        "retrieval_attempts": [SearchAttempt("unfiltered", None, 20, hits=hits, usable=hits)],
        "reranked_df": object_frame(rows, RERANK_COLUMNS),
        "line_scores": None,  # an English question: no block read by its lines
        "answer_scores": None,  # the answerability reader off (its default)
        "evidence_blocks": [],
        "abstention_policy": AbstentionPolicy(strictness=20.0),
        "retrieval_mode": "hybrid",
        "search_port": sample_kb.store,
    }
    null = ProbeNull(dense_tops=tuple(0.3 + n / 100 for n in range(21)))
    outputs = verdict_nodes.execute(["evidence_verdict"], inputs=inputs, overrides={"probe_null": null})
    return outputs["evidence_verdict"]


def test_a_returned_block_holding_the_querys_code_answers_though_the_store_ranked_it_fourth(
    sample_kb: SampleKB,
) -> None:
    """The rerank lifts a block holding the query's code verbatim (``rerank.exact_code``) and the
    per-document cap keeps it: the verdict vouches for the blocks an agent reads, so it reads
    their codes, not only those of the store's best three hits."""
    assert _code_verdict(sample_kb, ["p0", "p3", "p1"]).reason == "exact_code"
    not_returned = _code_verdict(sample_kb, ["p0", "p1", "p2"])
    assert (not_returned.plausible, not_returned.reason) == (False, "below_probe_null")


# -- completeness hint wordings -------------------------------------------------------------------

PACK = ContextPack(
    text="x", items=[], summary=ContextPackSummary(
        included_sources=["a.md"], omitted_sources=[], duplicate_keys={}, chars_used=1, budget_chars=10
    ),
)  # fmt: skip
TRUNCATED_PACK = PACK.model_copy(
    update={"summary": PACK.summary.model_copy(update={"partially_included_sources": ["a.md"]})}
)
BLOCK = EvidenceBlock(
    evidence_key="a#chunk-0", doc_id="a", chunk_index=0, source="a.md", title=None, breadcrumb=None,
    category=None, content="x", score=0.8, normalized_score=0.8, rerank_score=0.8, rank=1, hit_reasons=[],
)  # fmt: skip


def _screened(*rows: tuple[str, float, str | None]) -> Any:
    """A screened frame of (evidence key, rank score, why left out) rows."""
    filled = [
        {**dict.fromkeys(SCREENED_COLUMNS), "evidence_key": key, "doc_id": key.split("#")[0],
         "rank_score": score, "left_out": left_out}
        for key, score, left_out in rows
    ]  # fmt: skip
    return object_frame(filled, SCREENED_COLUMNS)


@pytest.mark.parametrize(
    ("status", "screened", "pack", "expected"),
    [
        ("no_evidence", _screened(("a#chunk-0", 1.0, None)), PACK, "none: no evidence was returned"),
        ("evidence", _screened(("a#chunk-0", 1.0, None), ("b#chunk-0", 0.1, "below_evidence_floor")), PACK,
         "complete: the returned block is all the evidence found, packed in full"),
        ("evidence", _screened(("a#chunk-0", 1.0, None), ("b#chunk-0", 0.5, "return_n"),
                               ("c#chunk-1", 0.4, "return_n")), PACK,
         "complete: the returned block holds the strongest evidence; 2 more found, each under 80% of "
         "the top block's score"),
        ("evidence", _screened(("a#chunk-0", 1.0, None), ("b#chunk-0", 0.95, "return_n"),
                               ("a#chunk-2", 0.92, "document_cap"), ("c#chunk-1", 0.3, "return_n")), PACK,
         "partial: 2 more chunks of similar strength in b, a (raise return_n or look them up)"),
        ("evidence", _screened(("a#chunk-0", 1.0, None)), TRUNCATED_PACK,
         "partial: the context pack truncated or omitted evidence to fit its budget"),
    ],
)  # fmt: skip
def test_completeness_hint_wordings(status, screened, pack, expected) -> None:
    assert completeness_hint(status, [BLOCK], screened, pack) == expected


def test_junk_never_gets_a_partial_hint(tool) -> None:
    for query in OFF_TOPIC:
        assert tool.lookup(query).completeness_hint == "none: no evidence was returned"


SICK_LEAVE = "What is the sick leave policy?"  # the runbooks never write "sick"; "Joiners, movers,
# leavers" holds "leaves" and "Policy": the model reads it as near (a margin over the bar)


def test_a_question_turning_on_words_the_store_never_writes_is_no_evidence(tool, sample_kb) -> None:
    """Words no chunk holds carrying half of the question's information refuse a margin under
    twice the bar, however near the model reads the rest; the share is in the trace."""
    result = tool.lookup(SICK_LEAVE)
    verdict = result.retrieval_trace.evidence_verdict
    assert not any("sick" in f"{d.title} {d.body}".lower() for d in sample_kb.documents.values())
    assert verdict.strictness + NEAR_BAR[1] <= verdict.margin < 2 * verdict.strictness  # the margin passes
    assert verdict.informative_coverage >= NEAR_BAR[0]  # and the near-bar share does not refuse it
    assert verdict.unheld_share >= UNHELD_SHARE
    assert verdict.informative_coverage + verdict.unheld_share == pytest.approx(1.0)  # sick, or held
    assert (result.found, result.evidence_status, verdict.reason) == (False, "no_evidence", "unheld_terms")


def test_a_typo_alone_does_not_make_an_answerable_question_unheld(tool) -> None:
    """A misspelt word is a word no chunk holds; it carries under half of a question's information."""
    result = tool.lookup("Who must aprove a refund above 500 EUR?")
    verdict = result.retrieval_trace.evidence_verdict
    terms = query_terms("Who must aprove a refund above 500 EUR?")
    unheld = informative_share(query_term_idf(True, terms, tool.search_port), terms, ()).unheld
    assert 0 < unheld < UNHELD_SHARE
    assert (result.found, verdict.reason) == (True, "plausible")
    assert result.evidence_blocks[0].doc_id == tool.lookup(ANSWERABLE).evidence_blocks[0].doc_id

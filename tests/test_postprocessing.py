"""Post-processing: evidence keys, dedup, per-document cap, widths and the rule-based rerank."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from dataflow_fixtures import (
    PARCEL_QUERY,
    REFUND_QUERY,
    FaultySearchPort,
    SampleKB,
    as_json,
    make_hit,
    make_tool,
)

from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import L0Hints
from lookup_knowledge.dataflows.postprocessing import (
    candidates_df,
    deduped_df,
    evidence_cuts,
    identity_key,
    ranked_evidence_blocks,
    reranked_df,
    screened_df,
)
from lookup_knowledge.dataflows.retrieval import HybridFusion, SearchAttempt
from lookup_knowledge.frames import frame_columns, object_frame, records

NO_HINTS = L0Hints()


def attempts(hits) -> list[SearchAttempt]:
    """``(attempt kind, hit)`` pairs as the searches that found them (every hit usable)."""
    by_kind: dict[str, list] = {}
    for kind, hit in hits:
        by_kind.setdefault(kind, []).append(hit)
    return [SearchAttempt(kind, None, 20, found, found) for kind, found in by_kind.items()]


def dedup(hits, *, cap=2, return_n=20, hints=NO_HINTS, floor=0.0):
    """``(attempt, hit)`` pairs through candidates_df, screened_df and deduped_df."""
    return deduped_df(screened(hits, cap=cap, return_n=return_n, hints=hints, floor=floor))


def screened(hits, *, cap=2, return_n=20, hints=NO_HINTS, floor=0.0):
    return screened_df(candidates_df(attempts(hits), hints, "dense", HybridFusion()), cap, return_n, floor)


def keys(df: pd.DataFrame) -> list[str]:
    return list(df["evidence_key"])


# -- evidence identity --------------------------------------------------------------------------


def test_identity_key_is_doc_id_and_chunk_index():
    assert identity_key(make_hit("refunds", 3, 0.5, point_id="p-1"), 1) == "refunds#chunk-3"


def test_identity_key_accepts_chunk_zero():
    assert identity_key(make_hit("refunds", 0, 0.5, point_id="p-1"), 4) == "refunds#chunk-0"


@pytest.mark.parametrize(("doc_id", "chunk_index"), [(None, 2), ("refunds", None), (None, None)])
def test_identity_key_falls_back_to_point_id(doc_id, chunk_index):
    hit = make_hit(doc_id, chunk_index, 0.5, point_id="1f0c-point")
    assert identity_key(hit, 7) == "vector:1f0c-point"


def test_identity_key_falls_back_to_original_rank():
    assert identity_key(make_hit(None, None, 0.5, point_id=""), 7) == "rank:7"


def test_candidates_carry_identity_and_attempt_reason():
    df = candidates_df(
        attempts([("filtered", make_hit("a", 1, 0.9)), ("unfiltered", make_hit(None, None, 0.8))]),
        NO_HINTS,
        "dense",
        HybridFusion(),
    )
    assert keys(df) == ["a#chunk-1", "rank:2"]
    assert list(df["original_rank"]) == [1, 2]
    assert list(df["hit_reasons"]) == [["vector:filtered"], ["vector:unfiltered"]]


# -- dedup --------------------------------------------------------------------------------------


@pytest.mark.parametrize("better_first", [True, False])
def test_dedup_merges_hit_reasons_and_keeps_higher_ranked_content(better_first):
    better = ("filtered", make_hit("a", 1, 0.9, content="filtered copy"))
    worse = ("unfiltered", make_hit("a", 1, 0.7, content="unfiltered copy"))
    df = dedup([better, worse] if better_first else [worse, better])
    assert keys(df) == ["a#chunk-1"]
    row = df.iloc[0]
    assert row["content"] == "filtered copy"
    assert row["normalized_score"] == 0.9
    assert sorted(row["hit_reasons"]) == ["vector:filtered", "vector:unfiltered"]


def test_dedup_merges_l0_reasons_without_repeating_them():
    hints = L0Hints(domains=["payments"])
    payload = {"category": ["payments"]}
    df = dedup(
        [
            ("filtered", make_hit("a", 1, 0.9, payload=payload)),
            ("unfiltered", make_hit("a", 1, 0.9, payload=payload)),
        ],
        hints=hints,
    )
    assert len(df) == 1
    reasons = df.iloc[0]["hit_reasons"]
    assert sorted(reasons) == ["l0_domain:payments", "vector:filtered", "vector:unfiltered"]


def test_different_chunks_of_one_document_stay_separate():
    df = dedup([("unfiltered", make_hit("a", 0, 0.9)), ("unfiltered", make_hit("a", 1, 0.9))])
    assert keys(df) == ["a#chunk-0", "a#chunk-1"]


def test_same_point_without_doc_id_is_deduplicated_by_point_id():
    hits = [
        ("filtered", make_hit(None, None, 0.8, point_id="p-1")),
        ("unfiltered", make_hit(None, None, 0.8, point_id="p-1")),
        ("unfiltered", make_hit(None, None, 0.7, point_id="p-2")),
    ]
    assert keys(dedup(hits)) == ["vector:p-1", "vector:p-2"]


# -- per-document cap and return_n --------------------------------------------------------------

CAP_HITS = [
    ("unfiltered", make_hit("b", 0, 0.6)),
    ("unfiltered", make_hit("a", 2, 0.7)),
    ("unfiltered", make_hit("a", 0, 0.9)),
    ("unfiltered", make_hit("a", 1, 0.8)),
]


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        (1, ["a#chunk-0", "b#chunk-0"]),
        (2, ["a#chunk-0", "a#chunk-1", "b#chunk-0"]),
        (None, ["a#chunk-0", "a#chunk-1", "a#chunk-2", "b#chunk-0"]),
    ],
)
def test_per_document_cap_keeps_best_scored_chunks(cap, expected):
    assert keys(dedup(CAP_HITS, cap=cap)) == expected


def test_per_document_cap_keeps_the_chunk_that_holds_the_querys_code_first():
    """Two sibling sections (``SOME_ENV_VAR_PROTOCOL``) outscore the one the query names."""
    named = replace(make_hit("otel", 0, 0.6), exact_codes=("SOME_ENV_VAR",))
    hits = [("unfiltered", hit) for hit in (make_hit("otel", 1, 0.9), make_hit("otel", 2, 0.8), named)]
    frame = screened_df(candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion()), 2, 20, 0.0)
    assert dict(zip(frame["evidence_key"], frame["left_out"], strict=True)) == {
        "otel#chunk-1": None, "otel#chunk-2": "document_cap", "otel#chunk-0": None,
    }  # fmt: skip
    assert "exact_code:SOME_ENV_VAR" in frame["hit_reasons"].iloc[2]


def _holding(doc_id: str, score: float, *codes: str):
    return ("unfiltered", replace(make_hit(doc_id, 0, score), exact_codes=codes))


def test_a_distinctive_code_no_kept_block_holds_takes_the_last_uncoded_place():
    """The store ranks the one chunk holding ``--editor`` sixth, under five that share the
    question's other words: its best holder takes the fifth place, which is cut instead."""
    hits = [*(_holding(f"d{i}", 0.9 - i / 100) for i in range(5)), _holding("flags", 0.6, "--editor")]
    hits.append(_holding("flags-too", 0.5, "--editor"))  # a second holder: one place is enough
    frame = screened_df(candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion()), 2, 5, 0.0)
    assert dict(zip(frame["evidence_key"], frame["left_out"], strict=True)) == {
        "d0#chunk-0": None, "d1#chunk-0": None, "d2#chunk-0": None, "d3#chunk-0": None,
        "d4#chunk-0": "return_n", "flags#chunk-0": None, "flags-too#chunk-0": "return_n",
    }  # fmt: skip
    assert keys(deduped_df(frame))[-1] == "flags#chunk-0"  # in score order; the rerank lifts it


@pytest.mark.parametrize(
    ("kept_codes", "cut_codes"),
    [
        ((), ("GitHub",)),  # a camelCase word is as often a product's name: no place of its own
        (("E4471",), ("E4471",)),  # a kept block holds it already
    ],
)
def test_no_place_is_given_when_the_code_is_not_distinctive_or_is_kept(kept_codes, cut_codes):
    hits = [_holding("a", 0.9, *kept_codes), _holding("b", 0.8), _holding("c", 0.7, *cut_codes)]
    frame = screened_df(candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion()), 2, 2, 0.0)
    assert list(frame["left_out"]) == [None, None, "return_n"]


def test_kept_blocks_that_hold_codes_keep_their_places():
    hits = [_holding("a", 0.9, "E4471"), _holding("b", 0.8, "E4471"), _holding("c", 0.7, "INV-48213")]
    frame = screened_df(candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion()), 2, 2, 0.0)
    assert list(frame["left_out"]) == [None, None, "return_n"]  # no uncoded place to give


def test_block_without_doc_id_is_its_own_document():
    hits = [
        ("unfiltered", make_hit(None, None, 0.9, point_id="p-1")),
        ("unfiltered", make_hit(None, None, 0.8, point_id="p-2")),
        ("unfiltered", make_hit("a", 0, 0.7)),
        ("unfiltered", make_hit("a", 1, 0.6)),
    ]
    assert keys(dedup(hits, cap=1)) == ["vector:p-1", "vector:p-2", "a#chunk-0"]


def test_return_n_cuts_after_cap():
    hits = [("unfiltered", make_hit(f"d{i}", 0, 0.9 - i / 100)) for i in range(6)]
    assert keys(dedup(hits, return_n=3)) == ["d0#chunk-0", "d1#chunk-0", "d2#chunk-0"]
    assert keys(dedup(CAP_HITS, cap=1, return_n=1)) == ["a#chunk-0"]


def test_each_left_out_candidate_says_why():
    hits = [*CAP_HITS, ("unfiltered", make_hit("c", 0, 0.55)), ("unfiltered", make_hit("d", 0, 0.3))]
    frame = screened(hits, cap=2, return_n=3, floor=0.5)
    reasons = dict(zip(frame["evidence_key"], frame["left_out"], strict=True))
    assert reasons == {
        "a#chunk-0": None, "a#chunk-1": None, "a#chunk-2": "document_cap", "b#chunk-0": None,
        "c#chunk-0": "return_n", "d#chunk-0": "below_evidence_floor",  # 0.3 < 0.5 * 0.9
    }  # fmt: skip


def test_relative_evidence_floor_drops_hits_far_below_the_best():
    hits = [("unfiltered", make_hit(f"d{i}", 0, score)) for i, score in enumerate([0.8, 0.5, 0.39])]
    assert keys(dedup(hits, floor=0.5)) == ["d0#chunk-0", "d1#chunk-0"]
    assert keys(dedup(hits, floor=0.0)) == ["d0#chunk-0", "d1#chunk-0", "d2#chunk-0"]


def test_evidence_cuts_name_capped_chunks_that_outscored_a_returned_block():
    hits = [*CAP_HITS, ("unfiltered", make_hit("c", 0, 0.75))]
    frame = screened(hits, cap=1, return_n=5)
    cuts = evidence_cuts(frame, deduped_df(frame))
    assert (cuts.document_cap, cuts.return_n, cuts.below_evidence_floor) == (2, 0, 0)
    assert [(c.evidence_key, c.normalized_score) for c in cuts.capped_above_returned] == [
        ("a#chunk-1", 0.8),  # b#chunk-0 (0.6) was returned in its place; a#chunk-2 (0.7) too
        ("a#chunk-2", 0.7),
    ]


@pytest.mark.parametrize(
    ("overrides", "width", "return_n"),
    [
        ({}, 20, 5),
        ({"retrieval__top_k": 3}, 3, 3),
        ({"retrieval__top_k": 3, "retrieval__retrieve_k": 8}, 8, 3),
        ({"retrieval__top_k": 9, "retrieval__return_n": 2}, 9, 2),
        ({"retrieval__top_k": 3, "retrieval__retrieve_k": 12, "retrieval__return_n": 4}, 12, 4),
    ],
)
def test_retrieve_k_return_n_and_legacy_top_k_precedence(
    sample_kb: SampleKB,
    embedder,
    overrides,
    width,
    return_n,
):
    port = FaultySearchPort(sample_kb.store)
    no_floor = {"retrieval__relative_evidence_floor": 0, "retrieval__min_evidence_score": 0, **overrides}
    result = as_json(make_tool(sample_kb, embedder, search_port=port, **no_floor).lookup(PARCEL_QUERY))
    trace = result["retrievalTrace"]
    assert (trace["retrieveK"], trace["returnN"]) == (width, return_n)
    assert [call.request.top_k for call in port.calls] == [width]
    assert [(a["width"], a["hitCount"]) for a in trace["attempts"]] == [(width, width)]
    # expected block count from the hits the store returned: per-document cap, then return_n
    per_doc: dict[str, int] = {}
    for hit in port.calls[0].hits:
        per_doc[hit.doc_id] = min(per_doc.get(hit.doc_id, 0) + 1, 2)
    assert len(result["evidenceBlocks"]) == min(return_n, sum(per_doc.values()))


# -- the search over other languages ------------------------------------------------------------


def _leg_hit(doc_id: str, score: float, multilingual: float | None):
    """A hybrid hit: its fused ``score`` and its multilingual cosine (``None``: BM25 alone found it)."""
    return replace(make_hit(doc_id, 0, 0.1), score=score, multilingual_score=multilingual)


def _two_searches(first_cosine: float | None, other_cosine: float) -> pd.DataFrame:
    """The first search ranks ``own`` (``first_cosine``) over ``own-2`` (0.45); the search over
    other languages finds ``other`` (``other_cosine``) and ``other-2``."""
    hits = [
        ("unfiltered", _leg_hit("own", 1.0, first_cosine)),
        ("unfiltered", _leg_hit("own-2", 0.8, 0.45)),
        ("other_languages", _leg_hit("other", 0.9, other_cosine)),
        ("other_languages", _leg_hit("other-2", 0.5, 0.3)),
    ]
    return candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion())


def test_the_other_languages_best_leads_when_it_means_the_question_better_than_the_first():
    df = _two_searches(0.40, 0.50)
    assert list(df["doc_id"])[:2] == ["other", "own"]
    reasons = df.iloc[0]["hit_reasons"]
    assert "other_languages:first (multilingual 0.50 > the first search's first 0.40)" in reasons
    assert not any(r.startswith("other_languages:first") for row in df.iloc[1:]["hit_reasons"] for r in row)


def test_the_first_keeps_the_lead_when_nearer_or_found_by_its_words_alone():
    nearer = _two_searches(0.55, 0.50)
    words_alone = _two_searches(None, 0.50)  # no cosine to compare: a code block taken for English
    for df in (nearer, words_alone):
        assert list(df["doc_id"])[0] == "own"
        assert not any(r.startswith("other_languages:first") for row in df["hit_reasons"] for r in row)


# -- rerank -------------------------------------------------------------------------------------

RICH_HINTS = L0Hints(
    matched_titles=["Refund Policy"],
    matched_keywords=["Refund"],
    domains=["payments"],
    entities=["Stripe"],
)
RICH_PAYLOAD = {
    "title": "refund policy",
    "keywords": ["refund", "store credit"],
    "category": ["payments"],
    "entities": ["stripe", "Adyen"],
    "doc_type": "policy",
}
WEIGHTS = RerankConfig(
    vector=0.5,
    domain_match=0.11,
    entity_match=0.07,
    keyword_match=0.05,
    title_match=0.13,
    source_type={"policy": 0.02, "runbook": 0.3},
)


def rerank(hits, weights=WEIGHTS, hints=RICH_HINTS, terms=("refund", "approval")):
    return reranked_df(dedup(hits, hints=hints), weights, terms)


def test_l0_hint_matching_a_candidate_is_its_hit_reason():
    df = candidates_df(
        attempts(
            [
                ("filtered", make_hit("a", 0, 0.9, payload=RICH_PAYLOAD)),
                ("filtered", make_hit("b", 0, 0.8, payload={"category": ["security"]})),
            ]
        ),
        RICH_HINTS,
        "dense",
        HybridFusion(),
    )
    assert sorted(df.iloc[0]["hit_reasons"]) == [
        "l0_domain:payments",
        "l0_entity:Stripe",
        "l0_keyword:Refund",
        "l0_title:Refund Policy",
        "vector:filtered",
    ]
    assert df.iloc[1]["hit_reasons"] == ["vector:filtered"]


def test_configured_weights_give_exact_rerank_scores():
    df = rerank(
        [
            ("filtered", make_hit("a", 0, 0.6, payload=RICH_PAYLOAD)),
            ("filtered", make_hit("b", 0, 0.8, payload={"doc_type": "guide"})),
        ]
    )
    by_key = df.set_index("evidence_key")
    assert by_key.loc["a#chunk-0", "rerank_score"] == pytest.approx(
        0.5 * 0.6 + 0.11 + 0.07 + 0.05 + 0.13 + 0.02
    )
    assert by_key.loc["b#chunk-0", "rerank_score"] == pytest.approx(0.5 * 0.8)
    assert sorted(by_key.loc["a#chunk-0", "boosts"]) == [
        ("domain_match:payments", 0.11),
        ("entity_match:Stripe", 0.07),
        ("keyword_match:Refund", 0.05),
        ("source_type:policy", 0.02),
        ("title_match:Refund Policy", 0.13),
    ]
    assert by_key.loc["b#chunk-0", "boosts"] == []
    assert keys(df) == ["a#chunk-0", "b#chunk-0"]  # boosts lift a above the better vector hit
    assert list(df["rank"]) == [1, 2]


def test_zero_weights_leave_the_vector_order():
    flat = RerankConfig(vector=1.0, domain_match=0, entity_match=0, keyword_match=0, title_match=0)
    df = rerank(
        [
            ("filtered", make_hit("a", 0, 0.6, payload=RICH_PAYLOAD)),
            ("filtered", make_hit("b", 0, 0.8)),
        ],
        weights=flat,
    )
    assert keys(df) == ["b#chunk-0", "a#chunk-0"]
    assert list(df["rerank_score"]) == [0.8, 0.6]


def test_source_type_weight_uses_doc_type():
    hits = [
        ("unfiltered", make_hit("guide", 0, 0.8, payload={"doc_type": "guide"})),
        ("unfiltered", make_hit("runbook", 0, 0.7, payload={"doc_type": "runbook"})),
    ]
    boosted = rerank(hits, hints=NO_HINTS)
    assert keys(boosted) == ["runbook#chunk-0", "guide#chunk-0"]
    assert boosted.iloc[0]["boosts"] == [("source_type:runbook", 0.3)]
    assert boosted.iloc[0]["rerank_score"] == pytest.approx(0.5 * 0.7 + 0.3)
    plain = rerank(hits, weights=RerankConfig(), hints=NO_HINTS)
    assert keys(plain) == ["guide#chunk-0", "runbook#chunk-0"]


def test_rerank_is_deterministic_and_ties_keep_the_stores_order():
    """Equal scores stay in the order the store ranked them (rank fusion ties often; the store
    cuts its ties by BM25 place, then point id), not in the order of their keys."""
    hits = [
        ("unfiltered", make_hit("c", 0, 0.5)),
        ("unfiltered", make_hit("b", 0, 0.7)),
        ("unfiltered", make_hit("a", 0, 0.5)),
        ("unfiltered", make_hit("d", 0, 0.5)),
    ]
    first = rerank(hits, hints=NO_HINTS)
    again = rerank(hits, hints=NO_HINTS)
    reversed_input = rerank(list(reversed(hits)), hints=NO_HINTS)
    pd.testing.assert_frame_equal(first, again)
    assert keys(first) == ["b#chunk-0", "c#chunk-0", "a#chunk-0", "d#chunk-0"]
    assert keys(reversed_input) == ["b#chunk-0", "d#chunk-0", "a#chunk-0", "c#chunk-0"]


def test_evidence_blocks_follow_reranked_order():
    df = rerank(
        [
            ("filtered", make_hit("a", 0, 0.6, payload=RICH_PAYLOAD)),
            ("filtered", make_hit("b", 3, 0.8, payload={"source": "b.md", "breadcrumb": "B > x"})),
        ]
    )
    blocks = ranked_evidence_blocks(df)
    assert [(b.evidence_key, b.rank) for b in blocks] == [("a#chunk-0", 1), ("b#chunk-3", 2)]
    assert blocks[1].chunk_index == 3 and blocks[1].source == "b.md"
    assert blocks[0].category == "payments"
    assert blocks[0].rerank_score == pytest.approx(df.iloc[0]["rerank_score"])


# -- rerank end to end --------------------------------------------------------------------------


def test_rerank_end_to_end_is_deterministic(sample_kb, embedder):
    tool = make_tool(sample_kb, embedder)
    first, again = (as_json(tool.lookup(REFUND_QUERY)) for _ in range(2))
    assert first["evidenceBlocks"] == again["evidenceBlocks"]
    assert first["rerankTrace"] == again["rerankTrace"]


def test_configured_weights_change_scores_exactly_end_to_end(sample_kb, embedder):
    tool = make_tool(
        sample_kb,
        embedder,
        rerank__vector=0.5,
        rerank__domain_match=0.2,
        rerank__keyword_match=0.1,
        rerank__source_type={"policy": 0.3},
    )
    result = as_json(tool.lookup(REFUND_QUERY))
    blocks, entries = result["evidenceBlocks"], result["rerankTrace"]["entries"]
    assert [e["evidenceKey"] for e in entries] == [b["evidenceKey"] for b in blocks]
    for block, entry in zip(blocks, entries, strict=True):
        boosts = {b["reason"]: b["contribution"] for b in entry["boosts"]}
        doc = sample_kb.documents[block["docId"]]
        expected = {"domain_match:payments": 0.2}  # filtered to payments: every block matches
        if "l0_keyword:refund" in block["hitReasons"]:
            expected["keyword_match:refund"] = 0.1
        if doc.doc_type == "policy":
            expected["source_type:policy"] = 0.3
        assert boosts == expected
        assert block["rerankScore"] == pytest.approx(0.5 * entry["rankScore"] + sum(expected.values()))
        assert entry["finalScore"] == block["rerankScore"]
    scores = [b["rerankScore"] for b in blocks]
    assert scores == sorted(scores, reverse=True)
    assert [b["rank"] for b in blocks] == list(range(1, len(blocks) + 1))


def test_source_type_weight_reorders_end_to_end(sample_kb, embedder):
    plain = as_json(make_tool(sample_kb, embedder).lookup(PARCEL_QUERY))
    boosted = as_json(
        make_tool(sample_kb, embedder, rerank__source_type={"policy": 1.0}).lookup(PARCEL_QUERY)
    )

    def doc_type(block):
        return sample_kb.documents[block["docId"]].doc_type

    assert doc_type(plain["evidenceBlocks"][0]) != "policy"
    assert doc_type(boosted["evidenceBlocks"][0]) == "policy"
    for block, entry in zip(boosted["evidenceBlocks"], boosted["rerankTrace"]["entries"], strict=True):
        reasons = [b["reason"] for b in entry["boosts"]]
        assert ("source_type:policy" in reasons) == (doc_type(block) == "policy")


def test_l0_hints_are_hit_reasons_of_matching_blocks_end_to_end(sample_kb, embedder):
    result = as_json(make_tool(sample_kb, embedder).lookup(REFUND_QUERY))
    assert "refund" in result["retrievalTrace"]["l0Hints"]["matchedKeywords"]
    with_keyword = 0
    for block in result["evidenceBlocks"]:
        doc = sample_kb.documents[block["docId"]]
        has_keyword = "refund" in {k.casefold() for k in doc.keywords}
        assert ("l0_keyword:refund" in block["hitReasons"]) == has_keyword
        assert ("l0_domain:payments" in block["hitReasons"]) == ("payments" in doc.categories)
        with_keyword += has_keyword
    assert 0 < with_keyword < len(result["evidenceBlocks"])


def test_hits_without_doc_id_or_source_among_others_become_evidence_blocks():
    df = rerank(
        [
            ("unfiltered", make_hit(None, None, 0.9, point_id="p-1", payload={})),
            ("unfiltered", make_hit("b", 3, 0.8, payload={"source": "b.md", "title": "B"})),
        ],
        hints=NO_HINTS,
    )
    blocks = ranked_evidence_blocks(df)
    assert [(b.evidence_key, b.doc_id, b.source, b.title) for b in blocks] == [
        ("vector:p-1", None, None, None),
        ("b#chunk-3", "b", "b.md", "B"),
    ]
    assert blocks[0].chunk_index is None


def test_records_of_a_built_frame_are_its_cells_and_fresh_dicts_each_time():
    rows = [{"a": 1, "b": ["x"]}, {"a": 2, "b": []}]
    frame = object_frame(rows, frame_columns(["a", "b"]))
    rows[0]["a"] = 99  # the frame is a value: changing the rows it came from changes nothing
    first = records(frame)
    assert first == [{"a": 1, "b": ["x"]}, {"a": 2, "b": []}]
    first[1]["a"] = -1  # nor does changing what a reader got
    assert records(frame) == [{"a": 1, "b": ["x"]}, {"a": 2, "b": []}]
    assert records(frame) == frame.to_dict("records")
    wider = object_frame([{"a": 3, "b": [], "extra": 0}], frame_columns(["a", "b"]))
    assert records(wider) == [{"a": 3, "b": []}]  # only the frame's columns


def test_a_block_holding_the_querys_code_gets_the_exact_code_boost():
    """In sparse and hybrid mode a hit that holds a query code verbatim carries `exact_code:X`;
    the rerank adds `rerank.exact_code` (a share of the best score) to it, and says so."""
    holder = replace(make_hit("runbook", 0, 0.66), exact_codes=("E4471",), sparse_rank=1)
    hits = [("unfiltered", make_hit("guide", 0, 0.7)), ("unfiltered", holder)]

    def ranked(weights):
        candidates = candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion())
        return reranked_df(deduped_df(screened_df(candidates, 2, 20, 0.0)), weights, ("e4471", "fix"))

    boosted = ranked(RerankConfig())
    assert keys(boosted) == ["runbook#chunk-0", "guide#chunk-0"]
    assert boosted.iloc[0]["boosts"] == [("exact_code:E4471", 0.1)]  # "fix": not a question of codes alone
    assert keys(ranked(RerankConfig(exact_code=0))) == ["guide#chunk-0", "runbook#chunk-0"]


def test_a_block_holding_every_code_of_a_question_made_of_codes_comes_first():
    """ "what does --editor do" is the code and nothing else: the one block holding it comes
    first however far the store ranked it under blocks sharing only the code's word."""
    holder = replace(make_hit("hugo-new", 3, 0.4), exact_codes=("--editor",), sparse_rank=1)
    editors = [make_hit("editors", i, 0.8 - i / 100) for i in range(2)]
    hits = [("unfiltered", hit) for hit in (*editors, holder)]

    def ranked(weights, terms=("--editor", "editor")):
        candidates = candidates_df(attempts(hits), NO_HINTS, "hybrid", HybridFusion())
        return reranked_df(deduped_df(screened_df(candidates, 3, 20, 0.0)), weights, terms)

    first = ranked(RerankConfig()).iloc[0]
    assert first["evidence_key"] == "hugo-new#chunk-3"
    assert first["boosts"] == [("exact_code:--editor", 0.1), ("code_question:--editor", 1.0)]
    assert keys(ranked(RerankConfig(code_question=0)))[0] == "editors#chunk-0"
    asked_more = ranked(RerankConfig(), terms=("--editor", "editor", "vim"))  # a word the code lacks
    assert asked_more.iloc[0]["evidence_key"] == "editors#chunk-0"


def test_line_scores_take_the_place_of_the_rank_score_in_the_rerank():
    deduped = dedup([("filtered", make_hit("a", 0, 0.9)), ("filtered", make_hit("b", 0, 0.5))])
    weights = RerankConfig(vector=1.0, cross_language_rank=0.0)
    assert keys(reranked_df(deduped, weights, ())) == ["a#chunk-0", "b#chunk-0"]
    lines = reranked_df(deduped, weights, (), {"a#chunk-0": 0.4, "b#chunk-0": 0.8})
    assert keys(lines) == ["b#chunk-0", "a#chunk-0"]
    assert list(lines["line_score"]) == [0.8, 0.4]
    assert list(lines["rerank_score"]) == pytest.approx([0.8, 0.4])


def test_a_blocks_rank_score_still_weighs_beside_its_best_line():
    deduped = dedup([("filtered", make_hit("a", 0, 0.9)), ("filtered", make_hit("b", 0, 0.45))])
    ranks = dict(zip(keys(deduped), deduped["rank_score"], strict=True))
    weights = RerankConfig(vector=1.0, cross_language_rank=0.2)
    lines = reranked_df(deduped, weights, (), {"a#chunk-0": 0.5, "b#chunk-0": 0.55})
    assert ranks["b#chunk-0"] == pytest.approx(0.5 * ranks["a#chunk-0"], abs=0.01)  # the store's share
    assert keys(lines) == ["a#chunk-0", "b#chunk-0"]  # 0.5 + 0.2 x 1.0 above 0.55 + 0.2 x 0.5
    expected = [0.5 + 0.2 * ranks["a#chunk-0"], 0.55 + 0.2 * ranks["b#chunk-0"]]
    assert list(lines["rerank_score"]) == pytest.approx(expected)

"""The agent-facing result contract (lookup_knowledge/contract.py) through the Python API."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from dataflow_fixtures import (
    FAPIAO_QUERY,
    PARCEL_QUERY,
    REFUND_QUERY,
    FailingEmbedder,
    FaultySearchPort,
    SampleKB,
    as_json,
    config_for,
    make_tool,
)
from hamilton import driver as hamilton_driver

from lookup_knowledge import ingest, load_config
from lookup_knowledge.adapters.qdrant_edge_store import StoreUnavailableError
from lookup_knowledge.adapters.search import UNRESTRICTED
from lookup_knowledge.agent.knowledge_tool import KnowledgeTool

TOP_LEVEL = {
    "found",
    "evidenceStatus",
    "evidenceBlocks",
    "contextPack",
    "retrievalTrace",
    "rerankTrace",
    "relevanceLevel",
    "completenessHint",
    "retrievedDomainsThisSession",
    "message",
}
BLOCK_FIELDS = {
    "denseScore",
    "sparseScore",
    "fusedScore",
    "evidenceKey",
    "docId",
    "chunkIndex",
    "source",
    "title",
    "breadcrumb",
    "category",
    "retrievalLayer",
    "content",
    "score",
    "normalizedScore",
    "rerankScore",
    "rank",
    "hitReasons",
    "instructionLike",
    "language",
    "location",
    "ingestedAt",
    "sourcePath",
    "sourceVersion",
    "stale",
}
TRACE_FIELDS = {
    "l0Hints",
    "categoryFilter",
    "attempts",
    "fallbackReason",
    "fallbackDecision",
    "referenceThreshold",
    "minEvidenceScore",
    "retrieveK",
    "returnN",
    "maxChunksPerDocument",
    "retrievalLayer",
    "executedNodes",
}
HINT_FIELDS = {"matchedTitles", "matchedKeywords", "domains", "entities"}
ATTEMPT_FIELDS = {
    "kind", "filter", "width", "hitCount", "topNormalizedScore", "usableCount", "error", "used", "hitKeys",
}  # fmt: skip
DECISION_FIELDS = {
    "rule", "fired", "used", "filteredTop", "unfilteredTop", "scoreRatio", "overlap",
    "filteredSparseTop", "unfilteredSparseTop", "sparseScoreRatio", "settings",
}  # fmt: skip
RERANK_ENTRY_FIELDS = {"rank", "evidenceKey", "source", "baseScore", "finalScore", "boosts"}
DAG_NODES = [
    "l0_hints",
    "category_filter",
    "filtered_hits",
    "fallback_decision",
    "candidates_df",
    "deduped_df",
    "reranked_df",
    "context_pack",
    "lookup_result",
]
DECISION_NODES = {"evidence_status", "relevance_level", "completeness_hint", "retrieved_domains_this_session"}
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
DATA_MAPS = {"weights", "duplicateKeys"}  # keyed by data (weight names, evidence keys)


@pytest.fixture(scope="module")
def results(sample_kb: SampleKB, embedder) -> dict[str, dict[str, Any]]:
    tool = make_tool(sample_kb, embedder)
    empty = make_tool(sample_kb, embedder, retrieval__min_evidence_score=0.99)
    return {
        "found": as_json(tool.lookup(REFUND_QUERY)),
        "no_hints": as_json(tool.lookup(PARCEL_QUERY)),
        "no_evidence": as_json(empty.lookup(REFUND_QUERY)),
        "invalid": as_json(tool.lookup("   ")),
    }


def walk_keys(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, key) for every mapping key in a JSON value, not descending into data maps."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield path, key
            if key not in DATA_MAPS:
                yield from walk_keys(child, f"{path}.{key}")
    elif isinstance(value, list):
        for child in value:
            yield from walk_keys(child, f"{path}[]")


# -- shape --------------------------------------------------------------------------------------


def test_found_result_has_every_top_level_field(results):
    result = results["found"]
    assert set(result) >= TOP_LEVEL
    assert result["found"] is True
    assert result["evidenceStatus"] == "evidence"
    assert result["relevanceLevel"] in {"high", "medium", "low"}
    assert result["completenessHint"]
    assert result["message"]
    assert result["contextPack"]["text"]


def test_evidence_block_has_every_field(results):
    blocks = results["found"]["evidenceBlocks"]
    assert blocks
    for rank, block in enumerate(blocks, start=1):
        assert set(block) == BLOCK_FIELDS
        assert block["retrievalLayer"] == "L1"
        assert block["rank"] == rank
        assert isinstance(block["chunkIndex"], int)
        assert 0.0 <= block["normalizedScore"] <= 1.0
        assert block["source"].endswith(".md")
        assert block["title"] and block["breadcrumb"] and block["content"]
        location = block["location"]  # lines of the sample knowledge base's markdown file
        assert 1 <= location["startLine"] <= location["endLine"]
        assert location["endChar"] - location["startChar"] == len(block["content"])


def test_retrieval_trace_has_every_field(results):
    trace = results["found"]["retrievalTrace"]
    assert set(trace) >= TRACE_FIELDS
    assert set(trace["l0Hints"]) >= HINT_FIELDS
    assert trace["attempts"] and all(set(a) == ATTEMPT_FIELDS for a in trace["attempts"])
    assert set(trace["fallbackDecision"]) == DECISION_FIELDS
    assert (trace["retrieveK"], trace["returnN"], trace["maxChunksPerDocument"]) == (20, 5, 2)
    defaults = load_config().retrieval
    assert (trace["referenceThreshold"], trace["minEvidenceScore"]) == (
        defaults.reference_threshold,
        defaults.min_evidence_score,
    )


def test_executed_nodes_name_the_dag_nodes_in_order_with_timings(results):
    nodes = results["found"]["retrievalTrace"]["executedNodes"]
    names = [node["name"] for node in nodes]
    assert set(DAG_NODES) <= set(names)
    assert [names.index(name) for name in DAG_NODES] == sorted(names.index(n) for n in DAG_NODES)
    assert names[-1] == "lookup_result"
    assert set(names) >= DECISION_NODES  # the decisions an agent reads are DAG nodes of their own
    assert len(names) == len(set(names))
    for node in nodes:
        assert set(node) == {"name", "ms"}
        assert isinstance(node["ms"], float) and node["ms"] >= 0.0


def test_rerank_trace_has_an_entry_per_block(results):
    result = results["found"]
    entries = result["rerankTrace"]["entries"]
    blocks = result["evidenceBlocks"]
    assert [e["evidenceKey"] for e in entries] == [b["evidenceKey"] for b in blocks]
    for entry, block in zip(entries, blocks, strict=True):
        assert set(entry) >= RERANK_ENTRY_FIELDS
        assert entry["rank"] == block["rank"]
        assert entry["source"] == block["source"]
        assert entry["baseScore"] == block["score"]
        assert entry["finalScore"] == block["rerankScore"]
        assert entry["boosts"] and all(set(b) == {"reason", "contribution"} for b in entry["boosts"])


@pytest.mark.parametrize("name", ["found", "no_hints", "no_evidence", "invalid"])
def test_every_json_key_is_camel_case(results, name):
    bad = [f"{path}.{key}" for path, key in walk_keys(results[name]) if not CAMEL.match(key)]
    assert bad == []


@pytest.mark.parametrize("name", ["found", "no_hints", "no_evidence", "invalid"])
def test_no_primary_or_supplement_fields_anywhere(results, name):
    keys = {key.casefold() for _, key in walk_keys(results[name])}
    assert not {k for k in keys if "primary" in k or "supplement" in k}
    # also inside the data maps the walk skips
    text = json.dumps(results[name]).casefold()
    assert '"primary' not in text and '"supplement' not in text


def test_agent_facing_document_id_is_the_chunk_scoped_evidence_key(results):
    result = results["found"]
    blocks = result["evidenceBlocks"]
    keys = [b["evidenceKey"] for b in blocks]
    assert len(set(keys)) == len(keys)
    for block in blocks:
        assert block["evidenceKey"] == f"{block['docId']}#chunk-{block['chunkIndex']}"
    by_key = {b["evidenceKey"]: b for b in blocks}
    for item in result["contextPack"]["items"]:
        content = item["content"].removesuffix("…") if item["truncated"] else item["content"]
        assert by_key[item["evidenceKey"]]["content"].startswith(content)


def test_retrieval_layer_is_l0_plus_l1_when_hints_and_candidates_took_part(results):
    trace = results["found"]["retrievalTrace"]
    assert trace["l0Hints"]["domains"] and trace["attempts"][0]["usableCount"]
    assert trace["retrievalLayer"] == "L0+L1"


def test_retrieval_layer_is_l1_without_hints(results):
    trace = results["no_hints"]["retrievalTrace"]
    assert trace["l0Hints"]["domains"] == [] and trace["l0Hints"]["matchedKeywords"] == []
    assert trace["retrievalLayer"] == "L1"


def test_retrieval_layer_is_l1_when_no_l1_candidate_was_usable(results):
    trace = results["no_evidence"]["retrievalTrace"]
    assert trace["l0Hints"]["domains"] == ["payments"]
    assert trace["retrievalLayer"] == "L1"


def test_not_found_shape(results):
    result = results["no_evidence"]
    assert set(result) >= TOP_LEVEL
    assert result["found"] is False
    assert result["evidenceStatus"] == "no_evidence"
    assert result["evidenceBlocks"] == []
    assert result["contextPack"] is None
    assert result["rerankTrace"] is None
    assert result["relevanceLevel"] == "none"
    assert "No knowledge evidence was found" in result["message"]
    assert [a["kind"] for a in result["retrievalTrace"]["attempts"]] == ["filtered", "unfiltered"]


# -- bad input and failures never raise ---------------------------------------------------------

MAX_CHARS = 60


@pytest.fixture(scope="module")
def strict_tool(sample_kb, embedder):
    return make_tool(sample_kb, embedder, retrieval__max_query_chars=MAX_CHARS)


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("", "empty"),
        (" \t\n  ", "empty"),
        ("r" * (MAX_CHARS + 1), f"limit is {MAX_CHARS}"),
        ("refund\x00policy", "control characters"),
        ("\x1b[31mrefund", "control characters"),
        ("\udcff", "UTF-8"),
        ("refund \udcff policy", "UTF-8"),
        (None, "must be a string"),
        (42, "must be a string"),
    ],
    ids=["empty", "whitespace", "too-long", "nul", "escape", "surrogate", "inner-surrogate", "none", "int"],
)
def test_bad_input_is_a_not_found_result_saying_why(strict_tool, query, why):
    result = strict_tool.lookup(query)
    assert result.found is False
    assert result.evidence_status not in {"evidence", "no_evidence"}
    assert result.evidence_blocks == []
    assert why in result.message
    # the result is still valid contract JSON, encodable as UTF-8 text
    text = result.model_dump_json(by_alias=True)
    assert json.loads(text)["found"] is False
    json.dumps(as_json(result), ensure_ascii=False).encode("utf-8")


def test_query_exactly_at_the_length_limit_is_accepted(strict_tool):
    query = ("refund approval " * 10)[:MAX_CHARS]
    result = strict_tool.lookup(query)
    assert result.evidence_status == "evidence"


def test_a_query_in_full_width_letters_is_read_and_echoed_in_ascii(strict_tool):
    # an input method's full-width mode: the same lookup as the ASCII query, which it echoes
    folded = strict_tool.lookup("ｒｅｆｕｎｄ ａｐｐｒｏｖａｌ ｐｏｌｉｃｙ")
    plain = strict_tool.lookup("refund approval policy")
    assert folded.query == "refund approval policy"
    assert folded.found and [b.evidence_key for b in folded.evidence_blocks] == [
        b.evidence_key for b in plain.evidence_blocks
    ]
    assert strict_tool.lookup("退款多久到账？").query == "退款多久到账？"  # full-width punctuation kept


def test_a_query_with_combining_accents_is_read_as_composed(strict_tool):
    # "é" typed as "e" + U+0301 (a decomposed, NFD, input) reads as the composed letter pages hold
    composed = "Qui approuve un remboursement supérieur à 500 EUR ?"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    result = strict_tool.lookup(decomposed)
    assert result.query == composed
    assert [b.evidence_key for b in result.evidence_blocks] == [
        b.evidence_key for b in strict_tool.lookup(composed).evidence_blocks
    ]


def test_failing_embedder_is_retrieval_failed_not_an_exception(sample_kb):
    port = FaultySearchPort(sample_kb.store)
    tool = KnowledgeTool(
        config_for(sample_kb.store_path),
        search_port=port,
        embedder=FailingEmbedder(),
        l0_index=sample_kb.l0_index,
    )
    result = tool.lookup(REFUND_QUERY)
    assert result.found is False
    assert result.evidence_status == "retrieval_failed"
    assert result.evidence_blocks == []
    assert "embedder down" in result.message
    assert port.calls == []


# -- sessions -----------------------------------------------------------------------------------


def test_retrieved_domains_accumulate_per_session(sample_kb, embedder):
    tool = make_tool(sample_kb, embedder)
    first = tool.lookup(REFUND_QUERY, session_id="s1")
    assert first.retrieved_domains_this_session == ["payments"]
    second = tool.lookup(FAPIAO_QUERY, session_id="s1")
    assert {b.category for b in second.evidence_blocks} == {"customer-support"}
    assert second.retrieved_domains_this_session == ["payments", "customer-support"]
    again = tool.lookup(REFUND_QUERY, session_id="s1")
    assert again.retrieved_domains_this_session == ["payments", "customer-support"]
    rejected = tool.lookup("", session_id="s1")
    assert rejected.retrieved_domains_this_session == ["payments", "customer-support"]
    assert tool.sessions.domains("s1", UNRESTRICTED) == ["payments", "customer-support"]


def test_new_session_starts_empty(sample_kb, embedder):
    tool = make_tool(sample_kb, embedder)
    tool.lookup(REFUND_QUERY, session_id="s1")
    assert tool.sessions.domains("s2", UNRESTRICTED) == []
    assert tool.lookup("", session_id="s2").retrieved_domains_this_session == []
    other = tool.lookup(FAPIAO_QUERY, session_id="s2")
    assert other.retrieved_domains_this_session == ["customer-support"]
    anonymous = tool.lookup(FAPIAO_QUERY)
    assert anonymous.retrieved_domains_this_session == ["customer-support"]
    assert tool.sessions.domains(None, UNRESTRICTED) == []


# -- the tool object ----------------------------------------------------------------------------


def test_tool_is_a_context_manager_over_a_hamilton_driver(small_corpus, tmp_path, embedder):
    config = config_for(tmp_path / "store")
    ingest(small_corpus, config, embedder=embedder)
    with KnowledgeTool(config, embedder=embedder) as tool:
        assert isinstance(tool.driver, hamilton_driver.Driver)
        assert tool.lookup("How long do customers have to request a refund?").found is True
        with pytest.raises(StoreUnavailableError):  # the open store is held by this tool
            KnowledgeTool(config, embedder=embedder)
    with KnowledgeTool(config, embedder=embedder) as reopened:  # released on exit
        result = reopened.lookup("How long do customers have to request a refund?")
        assert result.evidence_blocks[0].doc_id == "refunds"


def test_injected_port_of_the_wrong_type_fails_when_the_tool_is_built(small_corpus, tmp_path, embedder):
    config = config_for(tmp_path / "store")
    ingest(small_corpus, config, embedder=embedder)
    with pytest.raises(ValueError, match="l0_index"):
        KnowledgeTool(config, embedder=embedder, l0_index="not an index")  # type: ignore[arg-type]
    with KnowledgeTool(config, embedder=embedder) as tool:  # the failed build released the store
        assert tool.lookup("How long do customers have to request a refund?").found is True


# -- message wording (the completeness hint's wordings: tests/test_abstention.py) -----------------


def test_message_counts_blocks_and_documents_in_plain_english(results):
    assert re.fullmatch(r"Found \d+ evidence blocks? from \d+ documents?\.", results["found"]["message"])
    assert "from 1 documents" not in results["found"]["message"]


def test_trace_reports_the_evidence_floor_and_the_cuts(results):
    trace = results["found"]["retrievalTrace"]
    assert trace["relativeEvidenceFloor"] == 0.5
    cuts = trace["evidenceCuts"]
    (attempt,) = [a for a in trace["attempts"] if a["used"]]  # candidates come from the used search
    returned = len(results["found"]["evidenceBlocks"])
    cut = cuts["returnN"] + cuts["documentCap"] + cuts["belowEvidenceFloor"]
    assert returned + cut == attempt["usableCount"]  # every usable hit is returned or cut for a reason
    assert cuts["documentCap"] > 0  # the refund policy has more matching sections than the cap

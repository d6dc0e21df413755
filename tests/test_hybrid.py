"""Dense, sparse (BM25) and hybrid retrieval: the stores, the tokenizer, the dataflow, migration.

Real MiniLM vectors and Qdrant's own BM25 in every store kind; the adapters must agree.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe
from conftest import write_corpus
from dataflow_fixtures import (
    FAPIAO_DOC,
    FAPIAO_QUERY,
    REFUND_DOC,
    REFUND_QUERY,
    FaultySearchPort,
    SampleKB,
    ingest_kb,
    make_tool,
    searched,
)
from qdrant_client import QdrantClient, models

from lookup_knowledge import KnowledgeTool
from lookup_knowledge.adapters.errors import StoreOutdatedError
from lookup_knowledge.adapters.l0_index import normalize
from lookup_knowledge.adapters.multilingual import language_of
from lookup_knowledge.adapters.payload import (
    DOC_CHUNKS_FIELD,
    DOC_HASH_FIELD,
    EVIDENCE_KEY_FIELD,
    TITLE_FIELD,
)
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.qdrant_store import SPARSE_VECTOR, ScoredPoints
from lookup_knowledge.adapters.search import (
    Candidates,
    KnowledgeStore,
    SearchHit,
    SearchRequest,
    StoredChunk,
    evidence_key,
)
from lookup_knowledge.adapters.sparse import (
    MAX_MATCHED_TERMS,
    SparseVector,
    bm25_encoder,
    cjk_spaced,
    distinctive,
    held_as_written,
    holds_identifier,
    identifiers,
    sparse_text,
)
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.dataflows.abstention import named_evidence
from lookup_knowledge.ranking import DBSF_FULL_SCALE, few_matches_search, rank, searched_hits

# (doc_id, category, text): "INV-48213" is named by one chunk only; MiniLM ranks the invoice
# chunk first for it, BM25 the settlement chunk that holds the exact code.
CHUNKS = [
    (
        "settlement",
        "payments",
        "The nightly settlement job logs INV-48213 when the bank rejects the payout file.",
    ),
    ("declines", "payments", "Card declines: the issuer refused the card payment. Ask for another card."),
    ("invoices", "finance", "Invoice numbers look like INV-2024-0042. Finance reissues a wrong invoice."),
    ("refunds", "payments", "Refunds for declined card payments go back to the original card in 10 days."),
    ("fapiao", "support", "增值税专用发票申请：客户在账户后台提交开票信息，财务在三个工作日内开具发票。"),
    ("refund-zh", "support", "退款政策：客户在购买后三十天内可以申请退款，退款原路返回。"),
    ("closure-zh", "support", "账户注销：客户需要先结清所有未付账单，然后提交注销申请。"),
]
CODE_QUERY = "INV-48213"
STORE_KINDS = ["edge", "client-memory", "client-local"]
MODES = ["dense", "sparse", "hybrid"]
DIM = 384


def knowledge_base_fixture(name: str, docs: dict) -> Callable[..., Iterator[SampleKB]]:
    """A module fixture: ``docs`` ingested into a store of their own, held open."""

    @pytest.fixture(scope="module")
    def knowledge_base(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[SampleKB]:
        root = tmp_path_factory.mktemp(name)
        kb = ingest_kb(write_corpus(root / "docs", docs), root / "store", embedder)
        yield kb
        kb.store.close()

    return knowledge_base


@pytest.fixture(scope="module")
def vectors(embedder) -> dict[str, np.ndarray]:
    texts = [text for *_, text in CHUNKS]
    return dict(zip(texts, embedder.embed_documents(texts), strict=True))


def chunk(vectors: dict[str, np.ndarray], doc_id: str, category: str, text: str) -> StoredChunk:
    return StoredChunk(
        vector=vectors[text].tolist(),
        payload={
            EVIDENCE_KEY_FIELD: evidence_key(doc_id, 0),
            "doc_id": doc_id,
            "chunk_index": 0,
            "content": text,
            "category": [category],
            DOC_HASH_FIELD: "v1",
            DOC_CHUNKS_FIELD: 1,
        },
        sparse_vector=bm25_encoder().embed_document(text),
    )


def open_kind(kind: str, root: Path) -> KnowledgeStore:
    if kind == "edge":
        return QdrantEdgeStore(root / "edge", DIM)
    if kind == "client-memory":
        return QdrantClientStore("c", DIM, location=":memory:")
    return QdrantClientStore("c", DIM, location=root / "local")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, vectors) -> Iterator[dict[str, KnowledgeStore]]:
    """One store of each kind holding CHUNKS."""
    opened = {kind: open_kind(kind, tmp_path_factory.mktemp(kind)) for kind in STORE_KINDS}
    for store in opened.values():
        store.upsert([chunk(vectors, *row) for row in CHUNKS])
    yield opened
    for store in opened.values():
        store.close()


def request(embedder, query: str, mode: str, top_k: int = 7, **options) -> SearchRequest:
    sparse = bm25_encoder().embed_query(query) if mode != "dense" else None
    terms = bm25_encoder().query_terms(query) if mode != "dense" else {}
    return SearchRequest(
        query,
        embedder.embed_query(query).tolist(),
        top_k,
        mode=mode,
        sparse_vector=sparse,
        query_terms=terms,
        **options,
    )


# --- the tokenizer ------------------------------------------------------------------------------


def test_cjk_runs_are_indexed_as_characters_and_pairs() -> None:
    assert cjk_spaced("申请发票") == " 申 请 发 票 申请 请发 发票 "
    assert cjk_spaced("ERR-4012 in 发票") == "ERR-4012 in  发 票 发票 "


def test_exact_codes_keep_their_parts() -> None:
    encoder = bm25_encoder()
    assert len(encoder.embed_query("INV-48213")) == 3  # "inv", "48213" and the whole code
    assert encoder.embed_query("48213").indices[0] in encoder.embed_query("INV-48213").indices


@pytest.mark.parametrize(
    ("query", "codes"),
    [
        ("why does INV-48213 fail", ["INV-48213"]),
        ("E4471 in orders.v2.dlq", ["E4471", "orders.v2.dlq"]),
        ("raise max_poll_records or retrieval.mode", ["max_poll_records", "retrieval.mode"]),
        ("what does SOME_ENV_VAR do, and limit_x?", ["SOME_ENV_VAR", "limit_x"]),
        ("set server.http.port, then run --dry-run", ["server.http.port", "--dry-run"]),
        ("baseURL and disableKinds in GitHub", ["baseURL", "disableKinds", "GitHub"]),
        ("a long-term e.g. T-cell study of 37778 mice", []),  # words, abbreviations, bare numbers
        ("HTTP and NASA, a dry-run", []),  # acronyms and hyphenated words
        ("x1 ab", []),  # too short
    ],
)
def test_query_codes_are_identifiers_not_words_or_numbers(query: str, codes: list[str]) -> None:
    assert bm25_encoder().query_codes(query) == codes


@pytest.mark.parametrize(
    ("text", "identifier", "held"),
    [
        ("memory_limit_x caps a worker", "limit_x", False),  # inside a longer identifier
        ("set `limit_x`.", "LIMIT_X", True),  # case-insensitive, punctuation around it
        ("## SOME_ENV_VAR_PROTOCOL", "SOME_ENV_VAR", False),
        ("## SOME_ENV_VAR\n\nThe endpoint.", "SOME_ENV_VAR", True),
        ("config.limit_x = 3", "limit_x", False),  # a dotted key's last part
        ("run --dry-run-all", "--dry-run", False),
        ("run it with --dry-run.", "--dry-run", True),
        ("E4471 and E44712", "E4471", True),
        ("only E44712 here", "E4471", False),
        ("memory_limit_x first, then limit_x alone", "limit_x", True),  # a later occurrence is whole
        ("(IL-6)-mediated, then (IL-6).", "il-6", True),
        ("\u0130 then limit_x", "LIMIT_X", True),  # "İ" lowercases to two characters
    ],
)
def test_an_identifier_is_held_only_as_a_whole_word(text: str, identifier: str, held: bool) -> None:
    assert holds_identifier(text, identifier) is held


def test_a_multi_part_identifier_is_also_one_whole_token() -> None:
    encoder = bm25_encoder()
    query = encoder.embed_query("SOME_ENV_VAR")
    whole = encoder.embed_document("## SOME_ENV_VAR\nThe endpoint.")
    sibling = encoder.embed_document("## SOME_ENV_VAR_PROTOCOL\nThe transport.")
    shared = set(query.indices)
    assert len(shared) == 3  # "env", "var" ("some" is a stopword) and the whole identifier
    assert shared <= set(whole.indices)
    assert len(shared & set(sibling.indices)) == 2  # its parts only
    assert encoder.embed_query("some_env_var").indices == query.indices  # case-insensitive
    terms = encoder.query_terms("what does SOME_ENV_VAR do")
    assert encoder.matched_terms(terms, whole.indices) == ["some_env_var"]
    assert encoder.matched_terms(terms, sibling.indices) == []


def test_a_stop_word_in_code_is_indexed_by_its_whole_token() -> None:
    """`in` of "the `in` function" is a stop word the analyzer drops: in code (a fenced block, an
    inline span, a title of stop words alone) it is indexed by its whole token, which the query
    that marks it as code asks for; in prose it stays unindexed."""
    encoder = bm25_encoder()
    query = "How do I use the `in` function?"
    assert encoder.code_words(query) == ["in"]
    assert encoder.code_words("How do I use the in function?") == []  # not marked: an ordinary stop word
    assert encoder.code_words("What does `isset` do?") == []  # indexed as it is
    token = encoder.query_terms(query)["in"]
    assert token in encoder.embed_query(query).indices

    def holds(text: str) -> bool:
        return token in encoder.embed_document(text).indices

    assert holds(
        '# in\n\nReports whether a set holds it.\n\n```go-html-template\n{{ if in .Params.tags "G" }}\n```'
    )
    assert holds("Use `in` to test membership.")
    assert not holds("Put the value in a slice.")  # prose, not code
    assert not holds("```\nwithin reach\n```")  # a whole word only
    assert holds(
        sparse_text("in", "in > Syntax", "Reports whether a set holds an element.")
    )  # the title names it
    assert sparse_text("Refund Policy", "Refund Policy", "Text.") == "Refund Policy\nText."


def test_a_code_marked_stop_word_the_best_hits_lack_in_their_code_is_not_held(code_kb, embedder) -> None:
    verdict = make_tool(code_kb, embedder).lookup("How do I use the `in` function?").retrieval_trace
    assert "in" in verdict.evidence_verdict.query_terms
    assert "in" not in verdict.evidence_verdict.matched_terms


FUNCTION_PAGES = {
    "in.md": ({"id": "in", "title": "in"}, '# in\n\nReports whether a set holds an element.\n\n'
              '```go-html-template\n{{ if in .Params.tags "Git" }}Git{{ end }}\n```\n'),
    "apply.md": ({"id": "apply", "title": "apply"}, "# apply\n\nApplies a function to each element."),
    "refunds.md": ({"id": "refunds", "title": "Refund Policy"}, "# Refund Policy\n\nRefunds take 30 days."),
}  # fmt: skip


function_pages = knowledge_base_fixture("function-pages", FUNCTION_PAGES)


def test_a_code_marked_stop_word_in_a_hits_code_is_held(function_pages, embedder) -> None:
    result = make_tool(function_pages, embedder).lookup("How do I use the `in` function?")
    verdict = result.retrieval_trace.evidence_verdict
    assert "in" in verdict.query_terms and "in" in verdict.matched_terms
    assert result.evidence_blocks[0].doc_id == "in"


def test_a_page_the_query_names_in_code_is_evidence_whatever_its_margin(function_pages, embedder) -> None:
    """`in` names the page titled "in": evidence (named_title) even where the model scores the short
    question low; unmarked, or naming no page, the margin decides as usual."""
    strict = make_tool(function_pages, embedder, abstention__strictness=20.0)  # no margin clears it
    named = strict.lookup("How do I use the `in` function?")
    assert (named.found, named.retrieval_trace.evidence_verdict.reason) == (True, "named_title")
    assert named.evidence_blocks[0].doc_id == "in"
    assert (
        strict.lookup("How do I use the in function?").retrieval_trace.evidence_verdict.reason
        != "named_title"
    )
    nameless = strict.lookup("How do I use the `sort` function?")
    assert (nameless.found, nameless.retrieval_trace.evidence_verdict.reason) == (False, "below_probe_null")


def test_an_empty_code_span_names_no_page() -> None:
    untitled, titled = (
        SearchHit("p", "text", 0.1, 0.1, {}),
        SearchHit("q", "text", 0.1, 0.1, {TITLE_FIELD: "in"}),
    )
    blank = "What is ` ` here?"
    assert named_evidence(blank, {}, [untitled]) is None  # a blank span is no name, no title none
    assert named_evidence("What does `in` do?", {}, [untitled, titled]) == "named_title"


def test_matched_terms_name_the_shared_words_longest_first_all_of_them() -> None:
    encoder = bm25_encoder()
    document = encoder.embed_document("增值税专用发票申请流程")
    terms = encoder.matched_terms(encoder.query_terms("如何申请增值税发票"), document.indices)
    assert terms[:2] == ["申请", "增值"]
    assert "申" not in terms  # a matched pair hides its characters
    many = encoder.query_terms(" ".join(f"word{i}" for i in range(20)))  # "word1" is not in "word10"
    assert len(encoder.matched_terms(many, encoder.embed_document(" ".join(many)).indices)) == 20


def test_a_hit_reason_lists_the_first_matched_terms_while_the_verdict_reads_them_all(
    sample_kb, embedder
) -> None:
    query = (
        "Chargebacks card disputes arrive as webhooks from Stripe or Adyen and are opened "
        "automatically as cases in the Payments Risk queue"
    )
    result = make_tool(sample_kb, embedder).lookup(query)
    verdict = result.retrieval_trace.evidence_verdict
    assert len(verdict.matched_terms) > MAX_MATCHED_TERMS  # the coverage counts every held term
    assert verdict.lexical_coverage == pytest.approx(len(verdict.matched_terms) / len(verdict.query_terms))
    listed = [r for b in result.evidence_blocks for r in b.hit_reasons if r.startswith("vector:sparse")]
    assert listed and all(reason.count(",") == MAX_MATCHED_TERMS - 1 for reason in listed[:1])


def test_equal_scores_are_cut_by_point_id_whether_the_engine_gives_uuids_or_text() -> None:
    """The adapters keep the engine's ids and order as they come (Edge: ``uuid.UUID``) and give
    candidates with text ids; the ranking cuts ties in the order of the ids' text, as for a store
    that gives text."""
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"chunk-{n}") for n in range(12)]
    request = SearchRequest(
        "refund", [1.0, 0.0], top_k=3, mode="hybrid", sparse_vector=SparseVector((7,), (1.0,))
    )
    vectors = {SPARSE_VECTOR: SparseVector((7,), (1.0,))}

    def candidates(as_id):  # every score ties; the dense companion lists the ids in reverse
        points = [(as_id(pid), 0.5, {"content": "refund"}, vectors) for pid in ids]
        dense = [(as_id(pid), 0.9) for pid in reversed(ids)]
        scored = ScoredPoints(request, points, [dense, [(as_id(pid), 2.0) for pid in ids]])
        assert scored.missing_cosines == []
        return scored.candidates()

    from_uuids, from_text = candidates(lambda pid: pid), candidates(str)
    assert from_uuids == from_text  # the engine's order, ids as text
    assert [hit.point_id for hit in from_uuids.hits] == [str(pid) for pid in ids]
    assert all(hit.dense_rank is None for hit in from_uuids.hits)  # placed by the DAG, not the store
    hits = rank(request, from_uuids)
    assert [hit.point_id for hit in hits] == sorted(map(str, ids))[:3]
    assert [hit.dense_rank for hit in hits] == [1, 2, 3]  # companion ties cut by id too


def test_sparse_text_holds_title_breadcrumb_and_content_once() -> None:
    assert sparse_text("Refunds", "Refunds > Exceptions", "text") == "Refunds > Exceptions\ntext"
    assert sparse_text("Refunds", "Refunds", "text") == "Refunds\ntext"
    assert sparse_text("Claim 1", "Other", "text") == "Claim 1\nOther\ntext"


# --- the stores ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_sparse_finds_an_exact_code_that_dense_misses(stores, embedder, kind: str) -> None:
    store = stores[kind]
    dense = searched(store, request(embedder, CODE_QUERY, "dense"))
    sparse = searched(store, request(embedder, CODE_QUERY, "sparse"))
    assert dense[0].doc_id == "invoices"  # MiniLM: "an invoice number"
    assert sparse[0].doc_id == "settlement"
    assert sparse[0].matched_terms == ("inv-48213",)  # the whole code, which hides its parts
    assert sparse[0].sparse_score == sparse[0].score > sparse[1].score
    assert sparse[0].dense_score == pytest.approx(
        next(h.score for h in dense if h.doc_id == "settlement"), abs=1e-4
    )
    hybrid = searched(store, request(embedder, CODE_QUERY, "hybrid"))
    assert {h.doc_id for h in hybrid[:2]} == {"settlement", "invoices"}  # each first in one search
    for hits in (sparse, hybrid):  # the chunk holding the code says so; "INV-2024-0042" does not
        assert {h.doc_id: h.exact_codes for h in hits}["settlement"] == (CODE_QUERY,)
        assert all(not h.exact_codes for h in hits if h.doc_id != "settlement")
    assert all(not h.exact_codes for h in dense)  # a dense search reads no BM25 vector


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize(
    ("query", "doc_id"),
    [("如何申请增值税专用发票", "fapiao"), ("退款需要多长时间", "refund-zh"), ("怎么注销账户", "closure-zh")],
)
def test_a_chinese_query_finds_its_chinese_chunk_by_its_words(stores, embedder, kind, query, doc_id) -> None:
    hits = searched(stores[kind], request(embedder, query, "sparse"))
    assert hits[0].doc_id == doc_id
    assert hits[0].matched_terms
    assert all(term in query for term in hits[0].matched_terms)


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_every_hit_keeps_its_dense_cosine_as_normalized_score(stores, embedder, kind, mode) -> None:
    query = "card payment declined"
    cosines = {h.doc_id: h.score for h in searched(stores[kind], request(embedder, query, "dense"))}
    for hit in searched(stores[kind], request(embedder, query, mode)):
        assert hit.dense_score == pytest.approx(cosines[hit.doc_id], abs=1e-4)
        assert hit.normalized_score == pytest.approx(min(1.0, max(0.0, cosines[hit.doc_id])), abs=1e-4)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_hybrid_hits_report_their_fused_score_and_places(stores, embedder, kind) -> None:
    query = "declined card payments refund"
    hybrid = searched(stores[kind], request(embedder, query, "hybrid", fusion="rrf"))
    dense = [h.doc_id for h in searched(stores[kind], request(embedder, query, "dense"))]
    sparse = [h.doc_id for h in searched(stores[kind], request(embedder, query, "sparse"))]
    assert [h.score for h in hybrid] == sorted((h.score for h in hybrid), reverse=True)
    for hit in hybrid:
        assert hit.fused_score == hit.score
        assert hit.dense_rank == dense.index(hit.doc_id) + 1
        assert hit.sparse_rank == (sparse.index(hit.doc_id) + 1 if hit.doc_id in sparse else None)
    top = hybrid[0]  # reciprocal-rank fusion, k = 60: 1 / (60 + place - 1) per search
    expected = sum(1 / (59 + place) for place in (top.dense_rank, top.sparse_rank) if place)
    assert top.score == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_the_category_filter_holds_in_every_mode(stores, embedder, kind, mode) -> None:
    hits = searched(stores[kind], request(embedder, "INV-48213 invoice", mode, category="finance"))
    assert [h.doc_id for h in hits] == ["invoices"]
    hits = searched(stores[kind], request(embedder, "card payment", mode, category="payments"))
    assert {h.doc_id for h in hits} <= {"settlement", "declines", "refunds"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fusion", "few"), [("rrf", None), ("dbsf", None), ("dbsf", "rrf")])
@pytest.mark.parametrize("category", [None, "payments", "support"])
def test_all_adapters_rank_alike(stores, embedder, mode, fusion, few, category) -> None:
    """Every adapter ranks alike, also when a search's BM25 leg of few matches (all of them in
    this seven-chunk store) is fused again by RRF."""
    queries = [CODE_QUERY, "card payment declined", "如何申请增值税专用发票", "refund within thirty days"]
    for query in queries:
        options = {"category": category, "fusion": fusion, "prefetch_k": 6, "few_matches_fusion": few}
        req = request(embedder, query, mode, top_k=5, **options)
        results = {kind: searched(store, req) for kind, store in stores.items()}
        if mode == "hybrid" and few:  # every BM25 leg here is short: fused again when it matched any
            matched = any(h.sparse_rank for h in results["edge"])
            assert {h.fusion for h in results["edge"]} == {"rrf" if matched else "dbsf"}, query
        reference = untied(results["edge"])
        for kind, hits in results.items():
            assert [h.point_id for h in untied(hits)] == [h.point_id for h in reference], (kind, query)
            assert [h.score for h in untied(hits)] == pytest.approx(
                [h.score for h in reference], rel=1e-4, abs=1e-5
            )
            assert [h.sparse_score or -1.0 for h in untied(hits)] == pytest.approx(
                [h.sparse_score or -1.0 for h in reference], rel=1e-4
            )


def untied(hits: list[SearchHit]) -> list[SearchHit]:
    """Hits in score order, equal scores (rank fusion ties) by point id: engines break ties apart."""
    return sorted(hits, key=lambda h: (-round(h.score, 5), h.point_id))


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_search_batch_of_mixed_modes_equals_single_searches(stores, embedder, kind) -> None:
    requests = [request(embedder, CODE_QUERY, mode, category=c) for mode in MODES for c in (None, "payments")]
    batched = searched_hits(stores[kind], requests)
    for req, hits in zip(requests, batched, strict=True):
        assert [(h.point_id, h.score) for h in hits] == [
            (h.point_id, h.score) for h in searched(stores[kind], req)
        ]


# --- migration: stores ingested before hybrid retrieval -----------------------------------------


def test_an_edge_store_without_bm25_vectors_is_refused_in_one_line(tmp_path: Path) -> None:
    old = qe.EdgeShard.create(
        str(tmp_path / "kb"), qe.EdgeConfig(vectors=qe.EdgeVectorParams(DIM, qe.Distance.Cosine))
    )
    old.close()
    for dimension in (DIM, None):  # ingest opens with the dimension, lookups without
        with pytest.raises(StoreOutdatedError) as excinfo:
            QdrantEdgeStore(tmp_path / "kb", dimension, create=False)
        message = str(excinfo.value)
        assert "\n" not in message
        assert str(tmp_path / "kb") in message and "ingest" in message and "BM25" in message
    qe.EdgeShard.load(str(tmp_path / "kb")).close()  # the refused opens released the shard


def test_a_server_collection_without_bm25_vectors_is_refused_in_one_line(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    client.create_collection(
        "kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    )
    client.close()
    with pytest.raises(StoreOutdatedError, match="collection 'kb'.*ingest"):
        QdrantClientStore("kb", DIM, location=tmp_path / "qdrant")


def test_a_lookup_on_an_old_store_says_to_ingest_again(tmp_path: Path, embedder) -> None:
    from lookup_knowledge.config import load_config

    qe.EdgeShard.create(
        str(tmp_path / "knowledge"), qe.EdgeConfig(vectors=qe.EdgeVectorParams(DIM, qe.Distance.Cosine))
    ).close()
    config = load_config(overrides={"store.path": str(tmp_path), "store.lock_wait_s": 0})
    with pytest.raises(StoreOutdatedError, match="ingest"):
        KnowledgeTool(config, embedder=embedder)


# --- the dataflow -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_runs_its_own_search(sample_kb, embedder, mode) -> None:
    tool = make_tool(sample_kb, embedder, retrieval__mode=mode)
    result = tool.lookup(REFUND_QUERY)
    trace = result.retrieval_trace
    assert trace.retrieval_mode == mode
    assert trace.fusion == ("dbsf" if mode == "hybrid" else None)
    assert result.evidence_blocks[0].doc_id == REFUND_DOC
    executed = [node.name for node in trace.executed_nodes]
    assert ("query_sparse_vector" in executed) == (mode != "dense")


def test_hybrid_hit_reasons_and_rerank_trace_show_each_signal(sample_kb, embedder) -> None:
    tool = make_tool(sample_kb, embedder, retrieval__mode="hybrid")
    result = tool.lookup(REFUND_QUERY)
    block = result.evidence_blocks[0]
    reasons = block.hit_reasons
    assert reasons[0] == "vector:filtered"
    assert any(r.startswith("vector:dense rank ") for r in reasons)
    sparse = next(r for r in reasons if r.startswith("vector:sparse rank "))
    assert "refund" in sparse and "500" in sparse  # the query terms it matched
    assert any(r.startswith("fused rank ") and r.endswith(("(dbsf)", "(rrf)")) for r in reasons)
    assert block.fused_score == block.score and block.dense_score is not None
    assert block.normalized_score == pytest.approx(block.dense_score, abs=1e-6)
    entry = result.rerank_trace.entries[0]
    assert entry.base_score == block.fused_score  # the rerank starts from the fused score
    best = max(e.base_score for e in result.rerank_trace.entries)
    assert entry.rank_score == pytest.approx(entry.base_score / best)


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_hybrid_honours_the_filter_and_the_fallback(sample_kb, embedder, mode) -> None:
    tool = make_tool(sample_kb, embedder, retrieval__mode=mode)
    right = tool.lookup(REFUND_QUERY, pinned_category="payments")
    assert right.retrieval_trace.fallback_reason is None
    assert all("payments" in (b.category or "") for b in right.evidence_blocks)
    wrong = tool.lookup(REFUND_QUERY, pinned_category="security")
    assert wrong.retrieval_trace.fallback_reason == "filtered_vector_low_quality"
    assert wrong.evidence_blocks[0].doc_id == REFUND_DOC
    decision = wrong.retrieval_trace.fallback_decision
    assert decision.filtered_top < decision.unfiltered_top <= 1.0  # cosines, not rank scores


def test_a_chinese_query_reaches_its_chunk_by_its_words_in_the_pipeline(sample_kb, embedder) -> None:
    tool = make_tool(sample_kb, embedder, retrieval__mode="sparse", l0__enabled=False)
    block = tool.lookup(FAPIAO_QUERY).evidence_blocks[0]
    assert block.doc_id == FAPIAO_DOC
    assert any("发票" in r for r in block.hit_reasons if r.startswith("vector:sparse"))


CODE_KB = {  # the code chunk scores a dense cosine under 0.2 for the bare code: MiniLM blurs it
    "kafka.md": (
        {"id": "kafka", "title": "Kafka consumer lag", "domain": "platform"},
        "# Kafka consumer lag\n\nWhen the topic orders.v2.dlq grows, error E4471 appears in the "
        "consumer logs. Restart the consumer group billing-sync-7.",
    ),
    "invoices.md": (
        {"id": "invoices", "title": "Invoices", "domain": "finance"},
        "# Invoices\n\nInvoice numbers look like INV-2024-0042. Finance reissues a wrong invoice.",
    ),
    "deploy.md": (
        {"id": "deploy", "title": "Deploying the site", "domain": "platform"},
        "# Deploying the site\n\nThe site builds on every push to GitHub; the workflow publishes it.",
    ),
}


code_kb = knowledge_base_fixture("code-kb", CODE_KB)


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_an_exact_code_is_evidence_below_the_dense_floor(code_kb, embedder, mode) -> None:
    tool = make_tool(code_kb, embedder, retrieval__mode=mode)
    result = tool.lookup("E4471")
    assert result.evidence_status == "evidence"
    block = result.evidence_blocks[0]
    assert block.doc_id == "kafka"
    assert block.normalized_score < tool.config.retrieval.min_evidence_score  # kept by the code
    assert "exact_code:E4471" in block.hit_reasons


@pytest.mark.parametrize(
    ("code", "names_one_thing"),
    [("E4471", True), ("INV-48213", True), ("SOME_ENV_VAR", True), ("server.http.port", True),
     ("--dry-run", True), ("t3.micro", True), ("GitHub", False), ("PostgreSQL", False), ("baseURL", False)],
)  # fmt: skip
def test_a_code_is_distinctive_by_its_digits_or_separators(code: str, names_one_thing: bool) -> None:
    assert identifiers(code) == [code]
    assert distinctive(code) is names_one_thing


def test_only_a_distinctive_code_answers_whatever_the_margin(code_kb, embedder) -> None:
    """A camelCase product name a chunk holds (``GitHub``) is an honest hit reason but not a
    code that answers for itself: "delete my GitHub account" is not answered by a deploy page."""
    searched = FaultySearchPort(code_kb.store)
    no_margin_passes = make_tool(code_kb, embedder, search_port=searched, abstention__strictness=20.0)
    named = no_margin_passes.lookup("How do I delete my GitHub account?")
    assert any("GitHub" in hit.exact_codes for hit in searched.returned_hits().values())
    assert named.evidence_status == "no_evidence"
    assert named.retrieval_trace.evidence_verdict.reason == "below_probe_null"
    code = no_margin_passes.lookup("What does error E4471 mean?")
    assert code.evidence_status == "evidence"
    assert code.retrieval_trace.evidence_verdict.reason == "exact_code"


def test_dense_mode_has_no_code_rule(code_kb, embedder) -> None:
    result = make_tool(code_kb, embedder, retrieval__mode="dense").lookup("E4471")
    assert "kafka" not in {block.doc_id for block in result.evidence_blocks}


def test_garbage_with_letters_and_digits_stays_no_evidence(code_kb, embedder) -> None:
    tool = make_tool(code_kb, embedder, retrieval__mode="hybrid")
    for query in ("zq7 xkv9", "1 37778 1"):  # code-like or numbers, but no chunk holds them
        assert tool.lookup(query).evidence_status == "no_evidence", query
    near_miss = tool.lookup("E4472")  # one digit off: the code rule does not fire
    assert not any("exact_code" in r for b in near_miss.evidence_blocks for r in b.hit_reasons)


# --- identifiers that win, reasons that hold ----------------------------------------------------

_FILLER = (
    "Every exporter setting is an environment variable read once at start; a changed env var "
    "takes effect after a restart of the exporter process."
)
IDENTIFIER_KB = {  # one document whose SOME_ENV_VAR section has two longer-named siblings
    "exporter.md": (
        {"id": "exporter", "title": "Exporter configuration", "domain": "observability"},
        "# Exporter configuration\n\n" + _FILLER + "\n\n"
        "## SOME_ENV_VAR_PROTOCOL\n\nThe transport of the env var endpoint: grpc or http/protobuf. "
        "Set this env var protocol before the endpoint env var is read; the environment variable "
        "protocol applies to traces, metrics and logs. " + _FILLER + "\n\n"
        "## SOME_ENV_VAR_TRACES_PROTOCOL\n\nThe env var protocol for traces only: it overrides the "
        "environment variable protocol for the trace endpoint env var. " + _FILLER + "\n\n"
        "## SOME_ENV_VAR\n\nThe address the exporter sends spans to, such as "
        "https://collector.internal:4317, with its scheme and port. " + _FILLER,
    ),
    "limits.md": (
        {"id": "limits", "title": "Worker memory", "domain": "platform"},
        "# Worker memory\n\nmemory_limit_x caps the memory of a worker; a worker over its memory "
        "limit is restarted. Raise the limit for workers that load large models.",
    ),
    "quota.md": (
        {"id": "quota", "title": "Request quota", "domain": "platform"},
        "# Request quota\n\nlimit_x is the number of requests a client may send per minute before "
        "the gateway answers 429.",
    ),
}
IDENTIFIER_QUERIES = ["what does SOME_ENV_VAR do", "SOME_ENV_VAR", "limit_x", "what is the limit_x setting"]


identifier_kb = knowledge_base_fixture("identifier-kb", IDENTIFIER_KB)


@pytest.mark.parametrize("query", ["limit_x", "what is the limit_x setting"])
def test_exact_code_only_on_blocks_that_hold_it_verbatim(identifier_kb, embedder, query) -> None:
    blocks = make_tool(identifier_kb, embedder, l0__enabled=False).lookup(query).evidence_blocks
    by_doc = {block.doc_id: block for block in blocks}
    assert "exact_code:limit_x" in by_doc["quota"].hit_reasons
    assert "limits" in by_doc  # found by the parts "limit" and "x"...
    assert not any(r.startswith("exact_code") for r in by_doc["limits"].hit_reasons)  # ...not by the code


@pytest.mark.parametrize("query", ["what does SOME_ENV_VAR do", "SOME_ENV_VAR"])
def test_the_section_an_identifier_names_wins_over_its_longer_named_siblings(
    identifier_kb, embedder, query
) -> None:
    tool = make_tool(identifier_kb, embedder, l0__enabled=False)
    blocks = tool.lookup(query).evidence_blocks
    assert holds_identifier(blocks[0].content, "SOME_ENV_VAR")
    assert blocks[0].breadcrumb.endswith("SOME_ENV_VAR")
    assert "exact_code:SOME_ENV_VAR" in blocks[0].hit_reasons
    siblings = [b for b in blocks if "_PROTOCOL" in (b.breadcrumb or "")]
    assert all(not any(r.startswith("exact_code") for r in b.hit_reasons) for b in siblings)
    one_place = make_tool(identifier_kb, embedder, l0__enabled=False, retrieval__max_chunks_per_document=1)
    assert one_place.lookup(query).evidence_blocks[0].evidence_key == blocks[0].evidence_key


_PLACE = re.compile(r"(?:vector:(dense|sparse|multilingual)|(fused)) rank (\d+)(?: \((.*)\))?")
_SEARCH_OF = {"dense": "dense", "sparse": "sparse", "multilingual": "multilingual", "fused": "hybrid"}


def _ranked_keys(
    tool: KnowledgeTool, query: str, mode: str, category: str | None, fusion: str | None = None
) -> list[str]:
    """The evidence keys a search of ``mode`` ranks for ``query``, as deep as hit reasons count
    places (the fused list ``retrieve_k``, by ``fusion`` alone; the dense, sparse and multilingual
    ones ``retrieve_k`` + 8). A question not in English brings its multilingual vector, as the
    lookup's search does (docs/multilingual.md): the multilingual places are its companion's."""
    retrieval = tool.config.retrieval
    width = retrieval.effective_retrieve_k + (0 if mode == "hybrid" else 8)
    english = language_of(query) == "en"
    multilingual = None if english else tool.multilingual_embedder.embed_query(query).tolist()
    found = searched(
        tool.search_port,
        SearchRequest(
            query, tool.embedder.embed_query(query).tolist(), width, category=category,
            mode="hybrid" if mode == "multilingual" else mode,
            sparse_vector=bm25_encoder().embed_query(query), fusion=fusion or retrieval.fusion,
            prefetch_k=retrieval.prefetch_k, dense_fused=english,
            multilingual_vector=multilingual if mode in ("hybrid", "multilingual") else None,
        )
    )  # fmt: skip
    if mode == "multilingual":
        found = sorted((hit for hit in found if hit.multilingual_rank), key=lambda hit: hit.multilingual_rank)
    return [evidence_key(hit.doc_id, hit.chunk_index) for hit in found]


def _fused_by(tool: KnowledgeTool, query: str, category: str | None, fusion: str) -> bool:
    """Whether a hybrid search of ``query`` is fused by ``fusion``: the configured one, or the
    few-matches one when its BM25 leg matches fewer than :data:`DBSF_FULL_SCALE` chunks."""
    retrieval = tool.config.retrieval
    if fusion == retrieval.fusion:
        return True
    matches = len(_ranked_keys(tool, query, "sparse", category))
    return fusion == retrieval.few_matches_fusion and matches < DBSF_FULL_SCALE


def _reason_is_true(tool: KnowledgeTool, kb: SampleKB, result: LookupResult, block, reason: str) -> bool:
    """Whether one hit reason holds of its block, checked against the store and the source."""
    attempts = {a.kind: a for a in result.retrieval_trace.attempts}
    kind, _, value = reason.partition(":")
    document = kb.documents[block.doc_id]
    if kind == "vector" and value in attempts:
        return attempts[value].used and block.evidence_key in attempts[value].hit_keys
    if place := _PLACE.fullmatch(reason):
        search, fused, rank, terms = place.groups()
        filters = [
            attempts[r[len("vector:") :]].filter for r in block.hit_reasons if r[len("vector:") :] in attempts
        ]
        if fused and not all(_fused_by(tool, result.query, f, terms) for f in filters):
            return False
        fusion = terms if fused else None
        ranked = [_ranked_keys(tool, result.query, _SEARCH_OF[search or fused], f, fusion) for f in filters]
        held = set(
            bm25_encoder().embed_document(sparse_text(block.title, block.breadcrumb, block.content)).indices
        )
        text = sparse_text(block.title, block.breadcrumb, block.content).lower()
        in_text = (
            search != "sparse"
            or not terms
            or all(
                set(bm25_encoder().embed_query(term.rstrip("~")).indices) <= held
                and term.endswith("~") != held_as_written(text, term.rstrip("~"))  # ~: held in another form
                for term in terms.split(", ")
            )
        )
        return in_text and any(keys[int(rank) - 1 : int(rank)] == [block.evidence_key] for keys in ranked)
    checks = {
        "exact_code": lambda: holds_identifier(block.content, value),
        "l0_domain": lambda: value in document.categories,
        "l0_keyword": lambda: normalize(value) in {normalize(k) for k in document.keywords},
        "l0_entity": lambda: normalize(value) in {normalize(e) for e in document.entities},
        "l0_title": lambda: normalize(value) == normalize(document.title or ""),
    }
    return kind in checks and checks[kind]()  # a reason this audit does not know is not true


def test_a_term_held_only_in_another_form_is_marked_in_its_hit_reason(sample_kb, embedder) -> None:
    """The runbooks say "parent" and "policies", never "parental" or "policy": BM25's stemmer
    matches them, and the reason says so instead of claiming the words."""
    result = make_tool(sample_kb, embedder).lookup("What is our parental leave policy?")
    sparse = [r for b in result.evidence_blocks for r in b.hit_reasons if r.startswith("vector:sparse")]
    assert any("parental~" in reason for reason in sparse)
    assert not any(re.search(r"\bparental\b(?!~)", reason) for reason in sparse)
    assert held_as_written("max_poll_records: 500", "max_poll_records")
    assert not held_as_written("the flag is set", "lag") and not held_as_written("policies", "policy")
    assert held_as_written("如何申请增值税专用发票", "发票")


SAMPLE_QUERIES = [
    REFUND_QUERY, FAPIAO_QUERY, "PCI DSS rules for card data in the payments.events Kafka topic",
    "compensation for parcels arriving late", "max_poll_records", "payments.events consumer lag",
    "How many vacation days do I get?", "E4471", "rotate the TLS certificate",
]  # fmt: skip


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_every_hit_reason_is_true_of_its_block(sample_kb, identifier_kb, embedder, mode) -> None:
    checked = 0
    for kb, queries in ((sample_kb, SAMPLE_QUERIES), (identifier_kb, IDENTIFIER_QUERIES)):
        tool = make_tool(kb, embedder, retrieval__mode=mode)
        for query in queries:
            result = tool.lookup(query)
            false = [
                f"{block.evidence_key}: {reason}"
                for block in result.evidence_blocks
                for reason in block.hit_reasons
                if not _reason_is_true(tool, kb, result, block, reason)
            ]
            assert false == [], query
            checked += sum(len(b.hit_reasons) for b in result.evidence_blocks)
    assert checked > 100  # the audit read real reasons, not an empty list


# --- a BM25 leg of few matches: fused by rank, not by its absent statistics -------------------

COLOUR_KB = {  # pages about background colours; one Sass template names `backgroundColor` once
    f"colours-{n}.md": (
        {"id": f"colours-{n}", "title": title},
        f"# {title}\n\n{text} The background colour of a page sets the mood of the whole site.",
    )
    for n, (title, text) in enumerate([
        ("Background colour", "Choose the background colour of your theme in its settings."),
        ("Theme colours", "A theme defines a palette: the text colour and the background colour."),
        ("Dark mode", "Dark mode swaps the background colour for a dark one at night."),
        ("Page backgrounds", "A page may set its own background image or background colour."),
        ("Colour settings", "What the background colour setting does: it paints behind the text."),
        ("Contrast", "Pick a background colour that keeps the text readable."),
        ("Brand colours", "The brand colours include the background colour of the header."),
        ("Colour variables", "Colour variables hold the background colour and the accent colour."),
    ])
} | {
    "asset-pipeline.md": (
        {"id": "asset-pipeline", "title": "Asset pipeline"},
        "# Asset pipeline\n\nAssets are minified, fingerprinted and bundled at build time; a "
        "template turns a stylesheet into a resource before the bundler runs:\n\n"
        '```scss\n$backgroundColor: {{ .Param "backgroundColor" }};\n```\n\nFingerprints change '
        "whenever the bundled bytes change, so caches can keep them for a year.",
    ),
}  # fmt: skip

colour_kb = knowledge_base_fixture("colour-kb", COLOUR_KB)
COLOUR_QUERY = "what does backgroundColor do"


def test_a_rare_identifier_held_by_one_chunk_ranks_it_first(colour_kb, embedder) -> None:
    """BM25 matches one chunk (the only one holding `backgroundColor`): DBSF cannot rescale a list
    of one (Qdrant scores it 0.5 whatever its BM25 score), so the search is fused by rank, and
    the hit reason says so."""
    tool = make_tool(colour_kb, embedder, l0__enabled=False)
    first = tool.lookup(COLOUR_QUERY).evidence_blocks[0]
    assert first.doc_id == "asset-pipeline"
    assert "fused rank 1 (rrf)" in first.hit_reasons
    assert "vector:sparse rank 1 (backgroundcolor)" in first.hit_reasons


def test_without_the_few_matches_fusion_dbsf_ranks_the_only_match_under_the_dense_best(
    colour_kb, embedder
) -> None:
    tool = make_tool(  # without the rerank's code boosts too: the fusion alone
        colour_kb,
        embedder,
        l0__enabled=False,
        retrieval__few_matches_fusion=None,
        rerank__exact_code=0,
        rerank__code_question=0,
    )
    blocks = tool.lookup(COLOUR_QUERY).evidence_blocks
    holder = next(b for b in blocks if b.doc_id == "asset-pipeline")
    assert blocks[0].doc_id != "asset-pipeline"
    assert any(r.startswith("fused rank ") and r.endswith("(dbsf)") for r in holder.hit_reasons)


def test_the_verdict_places_the_block_returned_first_not_the_stores_best_hit(colour_kb, embedder) -> None:
    """Under DBSF the store ranks a colour page over the only `backgroundColor` holder; the
    rerank's code boosts return the holder first, and the places the relevance level reads are its."""
    tool = make_tool(colour_kb, embedder, l0__enabled=False, retrieval__few_matches_fusion=None)
    result = tool.lookup(COLOUR_QUERY)
    first = result.evidence_blocks[0]
    assert first.doc_id == "asset-pipeline" and "fused rank 1 (dbsf)" not in first.hit_reasons
    assert "vector:sparse rank 1 (backgroundcolor)" in first.hit_reasons
    verdict = result.retrieval_trace.evidence_verdict
    assert verdict.top_sparse_rank == 1  # the store's best hit, a colour page, is in no BM25 list
    assert verdict.top_hit_coverage == 1.0


def test_a_search_whose_bm25_leg_is_full_keeps_its_fusion() -> None:
    """DBSF rescales n scores by their mean +- 3 standard deviations: the best of 10 or fewer
    stays under 1 (its ceiling 0.5 + (1 - 1/n) * sqrt(n) / 6), from 11 it can reach it."""
    ceiling = [0.5 + (1 - 1 / n) * n**0.5 / 6 for n in range(2, DBSF_FULL_SCALE + 1)]
    assert max(ceiling[:-1]) < 1 <= ceiling[-1]
    request = SearchRequest(
        "q", [1.0, 0.0], 20, mode="hybrid", sparse_vector=SparseVector((7,), (1.0,)), few_matches_fusion="rrf"
    )

    def again(req: SearchRequest, matches: int) -> SearchRequest | None:  # a BM25 leg of n matches
        return few_matches_search(req, Candidates([], sparse=[(f"p{n}", 1.0) for n in range(matches)]))

    assert again(request, request.ranked_width) is None  # a full companion: DBSF stands
    assert again(request, DBSF_FULL_SCALE) is None  # enough scores to rescale the best to 1
    assert again(request, DBSF_FULL_SCALE - 1).fusion == "rrf"
    assert again(request, 0) is None  # BM25 matched nothing: nothing to weigh
    assert again(request, 1).fusion == "rrf"
    assert again(replace(request, few_matches_fusion=None), 1) is None
    assert again(replace(request, fusion="rrf"), 1) is None
    assert again(replace(request, mode="sparse"), 1) is None


def test_a_query_made_of_codes_a_best_hit_holds_is_evidence_whatever_its_margin(colour_kb, embedder) -> None:
    """`backgroundColor` is no distinctive code (camelCase, as product names are), but a question
    that is nothing but it names what the hit holds; among other words, the margin decides."""
    strict = make_tool(colour_kb, embedder, l0__enabled=False, abstention__strictness=20.0)
    named = strict.lookup(COLOUR_QUERY)
    assert (named.found, named.retrieval_trace.evidence_verdict.reason) == (True, "exact_code")
    assert named.evidence_blocks[0].doc_id == "asset-pipeline"
    for query in ("what does backgroundColor do in dark mode", "backgroundColor subscription pricing"):
        verdict = strict.lookup(query).retrieval_trace.evidence_verdict
        assert verdict.reason == "below_probe_null", query

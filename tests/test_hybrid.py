"""Dense, sparse (BM25) and hybrid retrieval: the stores, the tokenizer, the dataflow, migration.

Real MiniLM vectors and Qdrant's own BM25 in every store kind; the adapters must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
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
    SampleKB,
    ingest_kb,
    make_tool,
)
from qdrant_client import QdrantClient, models

from lookup_knowledge import KnowledgeTool
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.search import (
    DOC_CHUNKS_FIELD,
    DOC_HASH_FIELD,
    EVIDENCE_KEY_FIELD,
    KnowledgeStore,
    SearchHit,
    SearchRequest,
    StoredChunk,
    StoreOutdatedError,
    evidence_key,
)
from lookup_knowledge.adapters.sparse import MAX_MATCHED_TERMS, bm25_encoder, cjk_spaced, sparse_text

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
    return SearchRequest(
        query, embedder.embed_query(query).tolist(), top_k, mode=mode, sparse_vector=sparse, **options
    )


# --- the tokenizer ------------------------------------------------------------------------------


def test_cjk_runs_are_indexed_as_characters_and_pairs() -> None:
    assert cjk_spaced("申请发票") == " 申 请 发 票 申请 请发 发票 "
    assert cjk_spaced("ERR-4012 in 发票") == "ERR-4012 in  发 票 发票 "


def test_exact_codes_keep_their_parts() -> None:
    encoder = bm25_encoder()
    assert len(encoder.embed_query("INV-48213")) == 2  # "inv" and "48213"
    assert encoder.embed_query("48213").indices[0] in encoder.embed_query("INV-48213").indices


@pytest.mark.parametrize(
    ("query", "codes"),
    [
        ("why does INV-48213 fail", ["INV-48213"]),
        ("E4471 in orders.v2.dlq", ["E4471", "orders.v2.dlq"]),
        ("raise max_poll_records or retrieval.mode", ["max_poll_records", "retrieval.mode"]),
        ("a long-term e.g. T-cell study of 37778 mice", []),  # words, abbreviations, bare numbers
        ("x1 ab", []),  # too short
    ],
)
def test_query_codes_are_identifiers_not_words_or_numbers(query: str, codes: list[str]) -> None:
    found = bm25_encoder().query_codes(query)
    assert list(found) == codes
    assert all(parts for parts in found.values())


def test_matched_terms_name_the_shared_words_longest_first_and_capped() -> None:
    encoder = bm25_encoder()
    document = encoder.embed_document("增值税专用发票申请流程")
    terms = encoder.matched_terms(encoder.query_terms("如何申请增值税发票"), document.indices)
    assert terms[:2] == ["申请", "增值"]
    assert "申" not in terms  # a matched pair hides its characters
    many = encoder.query_terms(" ".join(f"word{i}" for i in range(20)))
    assert (
        len(encoder.matched_terms(many, encoder.embed_document(" ".join(many)).indices)) == MAX_MATCHED_TERMS
    )


def test_sparse_text_holds_title_breadcrumb_and_content_once() -> None:
    assert sparse_text("Refunds", "Refunds > Exceptions", "text") == "Refunds > Exceptions\ntext"
    assert sparse_text("Refunds", "Refunds", "text") == "Refunds\ntext"
    assert sparse_text("Claim 1", "Other", "text") == "Claim 1\nOther\ntext"


# --- the stores ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_sparse_finds_an_exact_code_that_dense_misses(stores, embedder, kind: str) -> None:
    store = stores[kind]
    dense = store.search(request(embedder, CODE_QUERY, "dense"))
    sparse = store.search(request(embedder, CODE_QUERY, "sparse"))
    assert dense[0].doc_id == "invoices"  # MiniLM: "an invoice number"
    assert sparse[0].doc_id == "settlement"
    assert sparse[0].matched_terms == ("48213", "inv")
    assert sparse[0].sparse_score == sparse[0].score > sparse[1].score
    assert sparse[0].dense_score == pytest.approx(
        next(h.score for h in dense if h.doc_id == "settlement"), abs=1e-4
    )
    hybrid = store.search(request(embedder, CODE_QUERY, "hybrid"))
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
    hits = stores[kind].search(request(embedder, query, "sparse"))
    assert hits[0].doc_id == doc_id
    assert hits[0].matched_terms
    assert all(term in query for term in hits[0].matched_terms)


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_every_hit_keeps_its_dense_cosine_as_normalized_score(stores, embedder, kind, mode) -> None:
    query = "card payment declined"
    cosines = {h.doc_id: h.score for h in stores[kind].search(request(embedder, query, "dense"))}
    for hit in stores[kind].search(request(embedder, query, mode)):
        assert hit.dense_score == pytest.approx(cosines[hit.doc_id], abs=1e-4)
        assert hit.normalized_score == pytest.approx(min(1.0, max(0.0, cosines[hit.doc_id])), abs=1e-4)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_hybrid_hits_report_their_fused_score_and_places(stores, embedder, kind) -> None:
    query = "declined card payments refund"
    hybrid = stores[kind].search(request(embedder, query, "hybrid", fusion="rrf"))
    dense = [h.doc_id for h in stores[kind].search(request(embedder, query, "dense"))]
    sparse = [h.doc_id for h in stores[kind].search(request(embedder, query, "sparse"))]
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
    hits = stores[kind].search(request(embedder, "INV-48213 invoice", mode, category="finance"))
    assert [h.doc_id for h in hits] == ["invoices"]
    hits = stores[kind].search(request(embedder, "card payment", mode, category="payments"))
    assert {h.doc_id for h in hits} <= {"settlement", "declines", "refunds"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
@pytest.mark.parametrize("category", [None, "payments", "support"])
def test_all_adapters_rank_alike(stores, embedder, mode, fusion, category) -> None:
    queries = [CODE_QUERY, "card payment declined", "如何申请增值税专用发票", "refund within thirty days"]
    for query in queries:
        req = request(embedder, query, mode, top_k=5, category=category, fusion=fusion, prefetch_k=6)
        results = {kind: store.search(req) for kind, store in stores.items()}
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
    batched = stores[kind].search_batch(requests)
    for req, hits in zip(requests, batched, strict=True):
        assert [(h.point_id, h.score) for h in hits] == [
            (h.point_id, h.score) for h in stores[kind].search(req)
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
    assert any(r.startswith("fused rank ") and r.endswith("(dbsf)") for r in reasons)
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
}


@pytest.fixture(scope="module")
def code_kb(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[SampleKB]:
    root = tmp_path_factory.mktemp("code-kb")
    kb = ingest_kb(write_corpus(root / "docs", CODE_KB), root / "store", embedder)
    yield kb
    kb.store.close()


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_an_exact_code_is_evidence_below_the_dense_floor(code_kb, embedder, mode) -> None:
    tool = make_tool(code_kb, embedder, retrieval__mode=mode)
    result = tool.lookup("E4471")
    assert result.evidence_status == "evidence"
    block = result.evidence_blocks[0]
    assert block.doc_id == "kafka"
    assert block.normalized_score < tool.config.retrieval.min_evidence_score  # kept by the code
    assert "exact_code:E4471" in block.hit_reasons


def test_dense_mode_has_no_code_rule(code_kb, embedder) -> None:
    result = make_tool(code_kb, embedder, retrieval__mode="dense").lookup("E4471")
    assert "kafka" not in {block.doc_id for block in result.evidence_blocks}


def test_garbage_with_letters_and_digits_stays_no_evidence(code_kb, embedder) -> None:
    tool = make_tool(code_kb, embedder, retrieval__mode="hybrid")
    for query in ("zq7 xkv9", "1 37778 1"):  # code-like or numbers, but no chunk holds them
        assert tool.lookup(query).evidence_status == "no_evidence", query
    near_miss = tool.lookup("E4472")  # one digit off: the code rule does not fire
    assert not any("exact_code" in r for b in near_miss.evidence_blocks for r in b.hit_reasons)

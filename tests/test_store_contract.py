"""One contract for every KnowledgeStore adapter: Qdrant Edge and qdrant-client (memory, local).

The same data (real MiniLM vectors of short texts) must give the same results in every adapter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from dataflow_fixtures import searched

from lookup_knowledge.adapters import qdrant_client_store, qdrant_edge_store
from lookup_knowledge.adapters.errors import PointGoneError
from lookup_knowledge.adapters.payload import DOC_CHUNKS_FIELD, DOC_HASH_FIELD, EVIDENCE_KEY_FIELD
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore, StoreUnavailableError
from lookup_knowledge.adapters.search import (
    AccessScope,
    KnowledgeSearchPort,
    KnowledgeStore,
    SearchRequest,
    StoredChunk,
    StoredDocument,
    evidence_key,
    point_id_for,
)
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.ranking import searched_hits

# (doc_id, chunk_index, categories, text)
CHUNKS: list[tuple[str, int, list[str], str]] = [
    ("refunds", 0, ["payments"], "Customers can request a refund within 30 days of purchase."),
    ("refunds", 1, ["payments"], "Refunds go back to the original card in 5 to 10 business days."),
    ("chargebacks", 0, ["payments", "risk"], "A chargeback is a card payment disputed at the bank."),
    ("kafka", 0, ["infrastructure"], "Kafka consumer lag grows when brokers run out of disk."),
    ("postgres", 0, ["infrastructure"], "Promote the PostgreSQL replica during a failover."),
    ("api-keys", 0, ["security"], "Rotate every production API key at least every 90 days."),
]
DOC_IDS = sorted({doc_id for doc_id, *_ in CHUNKS})
CHUNK_COUNTS = {doc_id: sum(row[0] == doc_id for row in CHUNKS) for doc_id in DOC_IDS}
QUERIES = [
    "how long do refunds take",
    "kafka consumers are lagging",
    "how often must we rotate api keys",
    "database failover steps",
]
STORE_KINDS = ["edge", "client-memory", "client-local"]
DIM = 384

StoreFactory = Callable[[str], KnowledgeStore]


def doc_hash(doc_id: str, version: int = 1) -> str:
    return f"{doc_id}-v{version}"


@pytest.fixture(scope="module")
def vectors(embedder) -> dict[str, np.ndarray]:
    """MiniLM vectors of every chunk text and every query, keyed by text."""
    texts = [text for *_, text in CHUNKS] + QUERIES
    return dict(zip(texts, embedder.embed_documents(texts), strict=True))


def stored(
    vectors: dict[str, np.ndarray],
    doc_id: str,
    chunk_index: int,
    categories: list[str],
    text: str,
    version: int = 1,
    vector: np.ndarray | None = None,
    doc_chunks: int | None = None,
) -> StoredChunk:
    return StoredChunk(
        vector=(vector if vector is not None else vectors[text]).tolist(),
        payload={
            EVIDENCE_KEY_FIELD: evidence_key(doc_id, chunk_index),
            "doc_id": doc_id,
            "chunk_index": chunk_index,
            "content": text,
            "category": categories,
            DOC_HASH_FIELD: doc_hash(doc_id, version),
            DOC_CHUNKS_FIELD: doc_chunks or CHUNK_COUNTS[doc_id],
            "source": f"{doc_id}.md",
        },
    )


def all_chunks(vectors: dict[str, np.ndarray]) -> list[StoredChunk]:
    return [stored(vectors, *row) for row in CHUNKS]


def with_bm25(chunks: list[StoredChunk]) -> list[StoredChunk]:
    """The chunks with their BM25 vectors (for sparse and hybrid searches)."""
    encoder = bm25_encoder()
    return [replace(c, sparse_vector=encoder.embed_document(c.payload["content"])) for c in chunks]


def request(vectors: dict[str, np.ndarray], query: str, top_k: int = 10, category=None):
    return SearchRequest(query, vectors[query].tolist(), top_k=top_k, category=category)


def with_terms(dense: SearchRequest, mode: str) -> SearchRequest:
    """A dense request as one of ``mode`` (with its query's BM25 vector and terms)."""
    encoder, text = bm25_encoder(), dense.query_text
    terms = encoder.query_terms(text)
    return replace(dense, mode=mode, sparse_vector=encoder.embed_query(text), query_terms=terms)


def open_kind(kind: str, root: Path, name: str = "c") -> KnowledgeStore:
    if kind == "edge":
        return QdrantEdgeStore(root / f"edge-{name}", DIM)
    if kind == "client-memory":
        return QdrantClientStore(name, DIM, location=":memory:")
    return QdrantClientStore(name, DIM, location=root / f"local-{name}")


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens stores of a given kind under tmp_path and closes them all afterwards."""
    opened: list[KnowledgeStore] = []

    def factory(kind: str) -> KnowledgeStore:
        store = open_kind(kind, tmp_path, name=f"c{len(opened)}")
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture(params=STORE_KINDS)
def store(request, make_store: StoreFactory) -> KnowledgeStore:
    """A fresh, empty store of each kind (for tests that write)."""
    return make_store(request.param)


@pytest.fixture
def filled(store: KnowledgeStore, vectors) -> KnowledgeStore:
    """A fresh store of each kind holding CHUNKS (for tests that write)."""
    store.upsert(all_chunks(vectors))
    return store


@pytest.fixture(scope="module", params=STORE_KINDS)
def loaded(request, tmp_path_factory: pytest.TempPathFactory, vectors) -> Iterator[KnowledgeStore]:
    """A store of each kind holding CHUNKS, shared by read-only tests (opening Edge is slow)."""
    store = open_kind(request.param, tmp_path_factory.mktemp(request.param))
    store.upsert(all_chunks(vectors))
    yield store
    store.close()


def ranked(hits) -> list[str]:
    return [evidence_key(h.doc_id, h.chunk_index) for h in hits]


# --- the contract, per adapter ------------------------------------------------------------------


def test_store_implements_the_ports(loaded: KnowledgeStore) -> None:
    assert isinstance(loaded, KnowledgeStore)
    assert isinstance(loaded, KnowledgeSearchPort)


def test_new_store_is_empty(store: KnowledgeStore, vectors) -> None:
    assert store.count() == 0
    assert store.documents() == {}
    assert searched(store, request(vectors, QUERIES[0])) == []


def test_upsert_writes_one_point_per_chunk(loaded: KnowledgeStore) -> None:
    assert loaded.count() == len(CHUNKS)


def test_upsert_is_idempotent(filled: KnowledgeStore, vectors) -> None:
    filled.upsert(all_chunks(vectors))
    assert filled.count() == len(CHUNKS)


def test_upsert_of_same_key_and_version_replaces_the_point(filled: KnowledgeStore, vectors) -> None:
    kafka_vector = vectors["Kafka consumer lag grows when brokers run out of disk."]
    replacement = stored(vectors, "refunds", 0, ["payments"], "replaced", 1, vector=kafka_vector)
    filled.upsert([replacement])
    assert filled.count() == len(CHUNKS)
    top = searched(filled, request(vectors, "kafka consumers are lagging", top_k=2))
    assert "refunds#chunk-0" in ranked(top)
    assert next(h for h in top if h.doc_id == "refunds").content == "replaced"


def test_upsert_in_several_batches_writes_everything(
    store: KnowledgeStore, vectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(qdrant_edge_store, "_UPSERT_BATCH", 2)
    monkeypatch.setattr(qdrant_client_store, "_UPSERT_BATCH", 2)
    store.upsert(all_chunks(vectors))
    assert store.count() == len(CHUNKS)


def test_search_ranks_the_relevant_chunk_first(loaded: KnowledgeStore, vectors) -> None:
    expectations = {
        "how long do refunds take": "refunds",
        "kafka consumers are lagging": "kafka",
        "how often must we rotate api keys": "api-keys",
        "database failover steps": "postgres",
    }
    for query, doc_id in expectations.items():
        assert searched(loaded, request(vectors, query))[0].doc_id == doc_id, query


def test_search_scores_are_descending(loaded: KnowledgeStore, vectors) -> None:
    scores = [h.score for h in searched(loaded, request(vectors, QUERIES[0]))]
    assert len(scores) == len(CHUNKS)
    assert scores == sorted(scores, reverse=True)


def test_search_honours_top_k(loaded: KnowledgeStore, vectors) -> None:
    assert len(searched(loaded, request(vectors, QUERIES[0], top_k=2))) == 2


def test_hits_carry_identity_content_and_payload(loaded: KnowledgeStore, vectors) -> None:
    hit = searched(loaded, request(vectors, "kafka consumers are lagging", top_k=1))[0]
    assert hit.doc_id == "kafka"
    assert hit.chunk_index == 0
    assert hit.content == "Kafka consumer lag grows when brokers run out of disk."
    assert hit.point_id == point_id_for("kafka#chunk-0", doc_hash("kafka"))
    assert hit.payload["category"] == ["infrastructure"]
    assert hit.payload[DOC_HASH_FIELD] == doc_hash("kafka")


def test_normalized_scores_are_in_unit_interval(loaded: KnowledgeStore, vectors) -> None:
    for query in QUERIES:
        for hit in searched(loaded, request(vectors, query)):
            assert 0.0 <= hit.normalized_score <= 1.0
            assert hit.normalized_score == pytest.approx(min(1.0, max(0.0, hit.score)))


def test_identical_vector_scores_one(loaded: KnowledgeStore, vectors) -> None:
    text = "Promote the PostgreSQL replica during a failover."
    hit = searched(loaded, SearchRequest(text, vectors[text].tolist(), top_k=1))[0]
    assert hit.doc_id == "postgres"
    assert hit.normalized_score == pytest.approx(1.0, abs=1e-4)


def test_category_filter_keeps_only_that_category(loaded: KnowledgeStore, vectors) -> None:
    hits = searched(loaded, request(vectors, QUERIES[0], category="infrastructure"))
    assert sorted(h.doc_id for h in hits) == ["kafka", "postgres"]


def test_category_filter_matches_any_element_of_a_list(loaded: KnowledgeStore, vectors) -> None:
    hits = searched(loaded, request(vectors, QUERIES[0], category="risk"))
    assert [h.doc_id for h in hits] == ["chargebacks"]


def test_category_filter_with_unknown_category_finds_nothing(loaded: KnowledgeStore, vectors) -> None:
    assert searched(loaded, request(vectors, QUERIES[0], category="no-such-domain")) == []


def test_filtered_order_is_the_unfiltered_order_restricted(loaded: KnowledgeStore, vectors) -> None:
    unfiltered = searched(loaded, request(vectors, QUERIES[0]))
    filtered = searched(loaded, request(vectors, QUERIES[0], category="payments"))
    expected = [
        evidence
        for evidence, h in zip(ranked(unfiltered), unfiltered, strict=True)
        if "payments" in h.payload["category"]
    ]
    assert ranked(filtered) == expected


def test_search_batch_equals_individual_searches(loaded: KnowledgeStore, vectors) -> None:
    requests = [
        request(vectors, QUERIES[0], top_k=3),
        request(vectors, QUERIES[1], top_k=5, category="infrastructure"),
        request(vectors, QUERIES[2], top_k=1, category="no-such-domain"),
        request(vectors, QUERIES[3]),
    ]
    batched = searched_hits(loaded, requests)
    assert len(batched) == len(requests)
    for req, batch_hits in zip(requests, batched, strict=True):
        single = searched(loaded, req)
        assert ranked(batch_hits) == ranked(single)
        assert [h.score for h in batch_hits] == pytest.approx([h.score for h in single], abs=1e-5)


def test_a_hybrid_hit_the_dense_search_missed_gets_the_cosine_of_its_vector(
    store: KnowledgeStore, vectors
) -> None:
    """Twelve chunks with no query word lie closer to the query than any other, so the dense
    companion (``ranked_width`` = 12 deep) misses the refund chunks the BM25 search ranks first:
    their cosines come from their stored vectors, equal to what a dense search scores them."""
    query = QUERIES[0]
    near = np.asarray(vectors[query])
    rng = np.random.default_rng(0)
    fillers = []
    for i in range(12):
        vector = near + rng.normal(0, 0.01, DIM)
        text = f"Unrelated filler note number {i}."
        fillers.append(
            stored(
                vectors,
                f"filler-{i}",
                0,
                ["misc"],
                text,
                vector=vector / np.linalg.norm(vector),
                doc_chunks=1,
            )
        )
    chunks = [
        replace(c, sparse_vector=bm25_encoder().embed_document(c.payload["content"]))
        for c in all_chunks(vectors) + fillers
    ]
    store.upsert(chunks)
    stored_vectors = {(c.payload["doc_id"], c.payload["chunk_index"]): np.asarray(c.vector) for c in chunks}
    hits = searched(
        store,
        replace(
            request(vectors, query, top_k=4),
            mode="hybrid",
            fusion="rrf",  # the BM25 search's first two rank with the dense search's first two
            sparse_vector=bm25_encoder().embed_query(query),
        ),
    )
    unit = near / np.linalg.norm(near)
    missed = [h for h in hits if h.dense_rank is None]
    assert missed and all(h.doc_id == "refunds" for h in missed)
    for hit in hits:
        vector = stored_vectors[(hit.doc_id, hit.chunk_index)]
        assert hit.dense_score == pytest.approx(float(vector @ unit / np.linalg.norm(vector)), abs=1e-4)


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_a_scores_only_search_gives_the_same_hits_without_their_text(
    store: KnowledgeStore, vectors, mode: str
) -> None:
    """What the calibration reads (``scores_only``): each hit's id, scores, places and document,
    as a full search gives them, and no content, matched terms or codes."""
    encoder = bm25_encoder()
    chunks = all_chunks(vectors)
    store.upsert([replace(c, sparse_vector=encoder.embed_document(c.payload["content"])) for c in chunks])
    query = "refund card kafka lag"
    vectors = {**vectors, query: np.asarray(vectors[QUERIES[0]])}
    full = with_terms(request(vectors, query, top_k=4), mode)
    lean = replace(full, scores_only=True)
    [full_hits, lean_hits] = searched_hits(store, [full, lean])

    def places(hits):
        return [(h.point_id, h.doc_id, h.dense_rank, h.sparse_rank) for h in hits]

    def scores(hits):
        return [x for h in hits for x in (h.score, h.normalized_score, h.sparse_score or 0.0)]

    assert full_hits and places(lean_hits) == places(full_hits)
    assert scores(lean_hits) == pytest.approx(scores(full_hits), abs=1e-5)
    assert any(h.content for h in full_hits) and not any(h.content for h in lean_hits)
    assert all(not h.matched_terms and not h.exact_codes for h in lean_hits)
    if mode != "dense":
        assert any(h.matched_terms for h in full_hits)


def test_stored_vectors_are_those_of_the_asked_documents_from_that_model(
    store: KnowledgeStore, vectors
) -> None:
    chunks = [
        replace(c, payload={**c.payload, "breadcrumb": "Refunds", "embedding_model": "minilm"})
        for c in all_chunks(vectors)
    ]
    other_model = {"kafka"}
    store.upsert(
        [
            replace(c, payload={**c.payload, "embedding_model": "other"})
            if c.payload["doc_id"] in other_model
            else c
            for c in chunks
        ]
    )
    found = store.stored_vectors(["refunds", "kafka", "no-such-doc"], "minilm")
    assert set(found) == {("Refunds", text) for doc_id, _, _, text in CHUNKS if doc_id == "refunds"}
    for (_, text), vector in found.items():
        assert vector == pytest.approx(np.asarray(vectors[text]).tolist(), abs=1e-5)
    assert store.stored_vectors([], "minilm") == {}


def test_term_idf_is_the_bm25_idf_of_the_chunks_holding_each_term(store: KnowledgeStore, vectors) -> None:
    """The engine applies BM25's IDF without exposing it; ``term_idf`` reads it back. A term no
    chunk the caller may see holds gets the IDF of a term no chunk holds."""
    encoder = bm25_encoder()
    sparse = {text: encoder.embed_document(text) for *_, text in CHUNKS}
    store.upsert([replace(stored(vectors, *row), sparse_vector=sparse[row[3]]) for row in CHUNKS])
    terms = encoder.query_terms("refund card kafka zebra")
    held = {token: sum(token in vector.indices for vector in sparse.values()) for token in terms.values()}
    assert sorted(held.values()) == [0, 1, 2, 2]  # zebra, kafka, refund(s), card
    idf = {t: math.log(1 + (len(CHUNKS) - df + 0.5) / (df + 0.5)) for t, df in held.items()}
    assert store.term_idf(list(terms.values())) == pytest.approx(idf, rel=1e-4)
    assert store.term_idf([]) == {}
    store.set_access("kafka", ["team-a"])
    unheld = idf[terms["zebra"]]
    only_kafka = {t: idf[t] if t == terms["kafka"] else unheld for t in terms.values()}
    assert store.term_idf(list(terms.values()), access=("team-a",)) == pytest.approx(only_kafka, rel=1e-4)
    assert store.unheld_term_idf() == pytest.approx(unheld, rel=1e-4)  # what tells an unheld term


def test_sample_chunks_reads_the_first_chunks_the_caller_may_see(filled: KnowledgeStore) -> None:
    """The chunks the abstention makes the store's own questions from: (doc id, content), at most
    ``n``, in the engine's point-id order (the same on every call), under the caller's access."""
    texts = {(doc_id, text) for doc_id, _, _, text in CHUNKS}
    every = filled.sample_chunks(100)
    assert sorted(every) == sorted(texts)
    assert filled.sample_chunks(2) == every[:2] and filled.sample_chunks(0) == []
    for doc_id in DOC_IDS:
        filled.set_access(doc_id, ["team-a"] if doc_id == "kafka" else ["public"])
    assert filled.sample_chunks(100, access=AccessScope.of(["team-b"]).filter) == [
        c for c in every if c[0] != "kafka"
    ]
    assert ("kafka", CHUNKS[3][3]) in filled.sample_chunks(100, access=AccessScope.of(["team-a"]).filter)


def test_delete_documents_removes_all_their_chunks(filled: KnowledgeStore, vectors) -> None:
    filled.delete_documents(["refunds", "api-keys"])
    assert filled.count() == len(CHUNKS) - 3
    assert sorted(filled.documents()) == ["chargebacks", "kafka", "postgres"]
    hits = searched(filled, request(vectors, "how long do refunds take"))
    assert "refunds" not in {h.doc_id for h in hits}


def test_delete_documents_ignores_unknown_ids_and_empty_input(filled: KnowledgeStore) -> None:
    filled.delete_documents([])
    filled.delete_documents(["never-ingested"])
    assert filled.count() == len(CHUNKS)


def test_write_documents_replaces_the_old_version_whole(filled: KnowledgeStore, vectors) -> None:
    # refunds v2 has only one chunk: both chunks of v1 go, chunk 0 of v2 stays
    v2 = stored(vectors, "refunds", 0, ["payments"], "v2 text", 2, vectors[CHUNKS[0][3]], doc_chunks=1)
    filled.write_documents([v2])
    assert filled.count() == len(CHUNKS) - 1
    refunds = [h for h in searched(filled, request(vectors, QUERIES[0])) if h.doc_id == "refunds"]
    assert [(h.chunk_index, h.content) for h in refunds] == [(0, "v2 text")]
    assert filled.documents()["refunds"].versions == {doc_hash("refunds", 2): True}


def test_write_documents_keeps_other_documents(filled: KnowledgeStore, vectors) -> None:
    filled.write_documents([stored(vectors, *CHUNKS[3])])
    assert filled.count() == len(CHUNKS)
    assert all(filled.documents()[doc_id].holds_only(doc_hash(doc_id)) for doc_id in DOC_IDS)


def test_a_new_version_is_written_beside_the_old_one(filled: KnowledgeStore, vectors) -> None:
    # what a kill between the write and the delete leaves: the old version intact, the new partial
    filled.upsert([stored(vectors, "refunds", 0, ["payments"], "v2 text", 2, vectors[CHUNKS[0][3]])])
    assert filled.count() == len(CHUNKS) + 1
    refunds = filled.documents()["refunds"]
    assert refunds.versions == {doc_hash("refunds", 1): True, doc_hash("refunds", 2): False}
    assert not refunds.holds_only(doc_hash("refunds", 2))
    assert not refunds.holds_only(doc_hash("refunds", 1))


def test_documents_reports_source_and_complete_versions(loaded: KnowledgeStore) -> None:
    assert loaded.documents() == {
        doc_id: StoredDocument(f"{doc_id}.md", {doc_hash(doc_id): True}) for doc_id in DOC_IDS
    }


def test_documents_flags_a_version_with_missing_chunks(store: KnowledgeStore, vectors) -> None:
    store.upsert([stored(vectors, *CHUNKS[0])])  # chunk 0 of the two refunds chunks
    assert store.documents()["refunds"].versions == {doc_hash("refunds"): False}


def test_documents_pages_through_the_store(loaded: KnowledgeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qdrant_edge_store, "_SCROLL_PAGE", 2)
    monkeypatch.setattr(qdrant_client_store, "_SCROLL_PAGE", 2)
    assert sorted(loaded.documents()) == DOC_IDS
    assert all(doc.holds_only(doc_hash(doc_id)) for doc_id, doc in loaded.documents().items())


def test_chunk_texts_and_set_languages_give_chunks_a_language_without_rewriting_them(
    filled: KnowledgeStore, vectors
) -> None:
    assert {doc_id: dict(doc.languages) for doc_id, doc in filled.documents().items()} == {
        doc_id: {None: CHUNK_COUNTS[doc_id]} for doc_id in DOC_IDS
    }  # chunks written without a language
    texts = filled.chunk_texts(["refunds", "kafka"])
    assert {doc_id: [text for _, text in chunks] for doc_id, chunks in texts.items()} == {
        "refunds": [CHUNKS[0][3], CHUNKS[1][3]],  # in chunk order
        "kafka": [CHUNKS[3][3]],
    }
    (refunds_0, _), (refunds_1, _) = texts["refunds"]
    filled.set_languages({refunds_0: "en", refunds_1: "de", texts["kafka"][0][0]: "en"})
    documents = filled.documents()
    assert dict(documents["refunds"].languages) == {"en": 1, "de": 1}
    assert dict(documents["kafka"].languages) == {"en": 1}
    assert documents["postgres"].lacks_languages and not documents["kafka"].lacks_languages
    assert filled.chunk_texts(["refunds"]) == {"refunds": texts["refunds"]}  # the same points, the same text
    hits = searched(filled, request(vectors, "kafka consumers are lagging", top_k=1))
    assert hits[0].payload["language"] == "en" and hits[0].payload["content"] == CHUNKS[3][3]
    assert filled.chunk_texts([]) == {}


# --- the adapters agree -------------------------------------------------------------------------


@pytest.mark.parametrize("category", [None, "payments", "infrastructure"])
def test_all_adapters_give_identical_results(make_store: StoreFactory, vectors, category: str | None) -> None:
    stores = {kind: make_store(kind) for kind in STORE_KINDS}
    for store in stores.values():
        store.upsert(all_chunks(vectors))
    for query in QUERIES:
        req = request(vectors, query, top_k=4, category=category)
        results = {kind: searched(store, req) for kind, store in stores.items()}
        reference = results["edge"]
        assert reference, query
        for kind, hits in results.items():
            assert ranked(hits) == ranked(reference), (kind, query)
            assert [h.score for h in hits] == pytest.approx([h.score for h in reference], abs=1e-4), (
                kind,
                query,
            )
            assert [h.point_id for h in hits] == [h.point_id for h in reference], (kind, query)


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_all_adapters_give_identical_sparse_and_hybrid_hits(
    make_store: StoreFactory, vectors, mode: str
) -> None:
    """Edge sends a sparse or hybrid search's ranked query for ids and scores and reads the kept
    points' payload and BM25 vector by id; a server's query returns them: the same hits, text,
    payload, matched terms and scores either way."""
    stores = {kind: make_store(kind) for kind in STORE_KINDS}
    for store in stores.values():
        store.upsert(with_bm25(all_chunks(vectors)))

    def seen(hit):
        return (hit.point_id, hit.content, dict(hit.payload), hit.matched_terms, hit.exact_codes,
                hit.dense_rank, hit.sparse_rank)  # fmt: skip

    def scores(hits):  # computed by each engine: equal within float tolerance, not to the bit
        return [x for hit in hits for x in (hit.dense_score, hit.sparse_score or 0.0)]

    for query in QUERIES:
        req = with_terms(request(vectors, query, top_k=3), mode)
        results = {kind: searched(store, req) for kind, store in stores.items()}
        edge = results["edge"]
        assert edge and any(hit.matched_terms for hit in edge), query  # text and matched terms
        for kind, hits in results.items():
            assert [seen(hit) for hit in hits] == [seen(hit) for hit in edge], (kind, query)
            assert scores(hits) == pytest.approx(scores(edge), abs=1e-4), (kind, query)


@pytest.mark.parametrize("gone_twice", [False, True])
def test_a_point_gone_before_its_text_is_read_is_searched_again_once(
    make_store: StoreFactory, vectors, monkeypatch: pytest.MonkeyPatch, gone_twice: bool
) -> None:
    """A kept point the store does not give back when its text is read (deleted since the
    search by a write of this process) sends the search again: the hits of a search with
    nothing gone; gone again, a clear error, never a hit without its text."""
    store = make_store("edge")
    store.upsert(with_bm25(all_chunks(vectors)))
    req = with_terms(request(vectors, QUERIES[0], top_k=3), "hybrid")
    expected = [(hit.point_id, hit.content) for hit in searched(store, req)]
    read, reads = store._points, []

    def first_one_deleted(ids: list) -> dict:
        reads.append(ids)
        gone = len(reads) == 1 or gone_twice
        return {pid: data for pid, data in read(ids).items() if not (gone and pid == ids[0])}

    monkeypatch.setattr(store, "_points", first_one_deleted)
    if gone_twice:
        with pytest.raises(PointGoneError, match="did not give back point"):
            searched(store, req)
    else:
        assert [(hit.point_id, hit.content) for hit in searched(store, req)] == expected
    assert len(reads) == 2


def test_all_adapters_agree_after_deletes(make_store: StoreFactory, vectors) -> None:
    stores = [make_store(kind) for kind in STORE_KINDS]
    for store in stores:
        store.upsert(all_chunks(vectors))
        store.delete_documents(["kafka"])
        store.write_documents([stored(vectors, "refunds", 0, ["payments"], CHUNKS[0][3], 2, doc_chunks=1)])
    counts = {store.count() for store in stores}
    hashes = [store.documents() for store in stores]
    assert counts == {len(CHUNKS) - 2}
    assert all(h == hashes[0] for h in hashes)


# --- persistence and opening --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["edge", "client-local"])
def test_path_stores_persist_across_reopen(kind: str, tmp_path: Path, vectors) -> None:
    store = open_kind(kind, tmp_path)
    store.upsert(all_chunks(vectors))
    store.close()
    reopened = open_kind(kind, tmp_path)
    try:
        assert reopened.count() == len(CHUNKS)
        assert searched(reopened, request(vectors, QUERIES[1], top_k=1))[0].doc_id == "kafka"
    finally:
        reopened.close()


def test_edge_store_opened_twice_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "edge"
    first = QdrantEdgeStore(path, DIM)
    try:
        with pytest.raises(StoreUnavailableError) as excinfo:
            QdrantEdgeStore(path, DIM)
        message = str(excinfo.value)
        assert "cannot open knowledge store" in message
        assert "locked" in message
        assert str(path) in message
    finally:
        first.close()


def test_edge_store_reopens_after_close(tmp_path: Path) -> None:
    QdrantEdgeStore(tmp_path / "edge", DIM).close()
    store = QdrantEdgeStore(tmp_path / "edge", DIM)
    assert store.count() == 0
    store.close()


def test_edge_store_without_create_refuses_missing_path(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="ingest first"):
        QdrantEdgeStore(tmp_path / "missing", DIM, create=False)
    assert not (tmp_path / "missing").exists()


def test_edge_store_close_is_idempotent(tmp_path: Path) -> None:
    store = QdrantEdgeStore(tmp_path / "edge", DIM)
    store.close()
    store.close()

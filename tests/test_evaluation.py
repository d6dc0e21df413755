"""Batch evaluation: eval file validation, relevance precedence, metrics, batch == single, compare."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SMALL_CORPUS, write_corpus
from dataflow_fixtures import FailingEmbedder, FaultySearchPort, SampleKB, make_tool
from typer.testing import CliRunner

from lookup_knowledge import KnowledgeTool, ingest, load_config, sample_knowledge_base
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.search import Candidates, KnowledgeSearchPort, SearchRequest
from lookup_knowledge.cli.app import app
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.eval.batch import CHUNK_SIZE, lookup_many
from lookup_knowledge.eval.compare import (
    BASELINE,
    Variant,
    comparison_table,
    ineffective_variants,
    inert_settings,
    is_flat,
    parse_compare,
    parse_sweep,
    run_variants,
)
from lookup_knowledge.eval.data import (
    EvalDataError,
    beir_to_parquet,
    load_eval_queries,
    load_qrels,
    relevance,
)
from lookup_knowledge.eval.evaluation import evaluate, filter_headline
from lookup_knowledge.eval.metrics import EVAL_DEPTH, document_ranking, per_query_metrics
from lookup_knowledge.eval.report import filter_headline_lines, write_eval_outputs

QUERIES = [
    ("q-refund", "can I get a refund for downloaded digital goods?", ["refunds"], None),
    ("q-kafka", "consumer lag is growing on the brokers", ["kafka-runbook"], None),
    ("q-keys", "how often must API keys be rotated", ["api-keys"], "payments"),  # wrong pin
    ("q-none", "", [], None),  # invalid: empty
]


def write_queries(path: Path, rows=QUERIES) -> Path:  # noqa: ANN001
    table = pa.table(
        {
            "query_id": [r[0] for r in rows],
            "query": [r[1] for r in rows],
            "relevant": pa.array([r[2] for r in rows], type=pa.list_(pa.string())),
            "category": pa.array([r[3] for r in rows], type=pa.string()),
        }
    )
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    root = tmp_path_factory.mktemp("eval-kb")
    corpus = write_corpus(root / "corpus", SMALL_CORPUS)
    config = load_config(overrides={"store.path": str(root / "store")})
    ingest(corpus, config, embedder=embedder)
    return root / "store"


@pytest.fixture
def tool(store_path: Path, embedder: Embedder) -> Iterator[KnowledgeTool]:
    config = load_config(overrides={"store.path": str(store_path), "retrieval.reference_threshold": 0.5})
    with KnowledgeTool(config, embedder=embedder) as knowledge_tool:
        yield knowledge_tool


# --- eval query files -------------------------------------------------------------------------


def test_valid_parquet_loads(tmp_path: Path) -> None:
    frame = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    assert frame["query_id"].tolist() == ["q-refund", "q-kafka", "q-keys", "q-none"]


def test_missing_column_is_named(tmp_path: Path) -> None:
    pq.write_table(pa.table({"query_id": ["a"]}), tmp_path / "q.parquet")
    with pytest.raises(EvalDataError, match=r"missing required column\(s\) \['query'\]"):
        load_eval_queries(tmp_path / "q.parquet")


def test_wrong_column_type_is_named(tmp_path: Path) -> None:
    pq.write_table(pa.table({"query_id": [1, 2], "query": ["a", "b"]}), tmp_path / "q.parquet")
    with pytest.raises(EvalDataError, match="column 'query_id' must be strings"):
        load_eval_queries(tmp_path / "q.parquet")


def test_wrong_relevant_type_is_refused(tmp_path: Path) -> None:
    table = pa.table({"query_id": ["a"], "query": ["x"], "relevant": [1.5]})
    pq.write_table(table, tmp_path / "q.parquet")
    with pytest.raises(EvalDataError, match="'relevant' must be list<string> or map<string, int>"):
        load_eval_queries(tmp_path / "q.parquet")


def test_empty_file_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("query_id", pa.string()), ("query", pa.string())])
    pq.write_table(schema.empty_table(), tmp_path / "q.parquet")
    with pytest.raises(EvalDataError, match="has no queries"):
        load_eval_queries(tmp_path / "q.parquet")


def test_duplicate_query_ids_are_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"query_id": ["a", "a"], "query": ["x", "y"]}), tmp_path / "q.parquet")
    with pytest.raises(EvalDataError, match=r"duplicate query_id values: \['a'\]"):
        load_eval_queries(tmp_path / "q.parquet")


def test_not_parquet_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.parquet").write_text("query_id,query\n")
    with pytest.raises(EvalDataError, match="not a readable parquet file"):
        load_eval_queries(tmp_path / "q.parquet")


def test_graded_map_relevance_is_read(tmp_path: Path) -> None:
    relevant = pa.array([[("d1", 2), ("d2", 1)]], type=pa.map_(pa.string(), pa.int64()))
    pq.write_table(
        pa.table({"query_id": ["a"], "query": ["x"], "relevant": relevant}), tmp_path / "q.parquet"
    )
    assert relevance(load_eval_queries(tmp_path / "q.parquet")) == {"a": {"d1": 2, "d2": 1}}


def test_qrels_file_wins_over_the_relevant_column(tmp_path: Path) -> None:
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq-kafka\tapi-keys\t1\nother\td\t1\n")
    assert relevance(queries)["q-kafka"] == {"kafka-runbook": 1}
    assert relevance(queries, load_qrels(tmp_path / "qrels.tsv")) == {"q-kafka": {"api-keys": 1}}


def test_beir_conversion_keeps_judged_queries_only(tmp_path: Path) -> None:
    (tmp_path / "queries.jsonl").write_text(
        '{"_id": "1", "text": "first", "category": "news"}\n{"_id": "2", "text": "unjudged"}\n'
    )
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n1\td9\t2\n")
    assert beir_to_parquet(tmp_path, tmp_path / "out.parquet", categories="true") == 1
    frame = load_eval_queries(tmp_path / "out.parquet")
    assert frame["query"].tolist() == ["first"] and frame["category"].tolist() == ["news"]
    assert relevance(frame) == {"1": {"d9": 2}}


def write_beir(folder: Path) -> Path:
    """Three judged queries in three domains; the corpus knows a fourth."""
    folder.mkdir()
    docs = [("d1", "news"), ("d2", "medicine"), ("d3", "aeronautics"), ("d4", "science")]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "text": d, "category": c}) + "\n" for d, c in docs)
    )
    queries = [("q1", "news"), ("q2", "medicine"), ("q3", "science")]
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": q, "category": c}) + "\n" for q, c in queries)
    )
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td4\t1\n")
    return folder


@pytest.mark.parametrize(
    ("categories", "pinned"),
    [
        ("true", ["news", "medicine", "science"]),
        ("wrong", ["science", "news", "aeronautics"]),  # the next corpus category, cyclic
        ("none", [None, None, None]),
    ],
)
def test_beir_conversion_pins_true_wrong_or_no_categories(tmp_path: Path, categories, pinned) -> None:
    out = tmp_path / "out.parquet"
    beir_to_parquet(write_beir(tmp_path / "beir"), out, categories=categories)
    frame = load_eval_queries(out)
    assert [c if isinstance(c, str) else None for c in frame["category"]] == pinned
    expected_true = [None] * 3 if categories == "none" else ["news", "medicine", "science"]
    assert [c if isinstance(c, str) else None for c in frame["true_category"]] == expected_true


def one_query_beir(folder: Path, query: str) -> Path:
    """A BEIR folder with one judged query, given as its queries.jsonl line."""
    folder.mkdir()
    (folder / "queries.jsonl").write_text(query + "\n")
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")
    return folder


def test_wrong_category_needs_another_category(tmp_path: Path) -> None:
    folder = one_query_beir(tmp_path / "one", '{"_id": "q", "text": "x", "category": "news"}')
    with pytest.raises(EvalDataError, match="no category other than 'news'"):
        beir_to_parquet(folder, tmp_path / "out.parquet", categories="wrong")


def test_pinning_a_query_without_category_is_refused(tmp_path: Path) -> None:
    folder = one_query_beir(tmp_path / "nocat", '{"_id": "q", "text": "x"}')
    with pytest.raises(EvalDataError, match="query 'q' has no category"):
        beir_to_parquet(folder, tmp_path / "out.parquet", categories="true")


def test_eval_queries_cli_takes_categories(tmp_path: Path) -> None:
    out = tmp_path / "wrong.parquet"
    result = CliRunner().invoke(
        app, ["eval-queries", str(write_beir(tmp_path / "beir")), "--out", str(out), "--categories", "wrong"]
    )
    assert result.exit_code == 0, result.output
    assert load_eval_queries(out)["category"].tolist() == ["science", "news", "aeronautics"]
    bad = CliRunner().invoke(
        app, ["eval-queries", str(tmp_path / "beir"), "--out", str(out), "--categories", "x"]
    )
    assert bad.exit_code == 2


# --- metrics ----------------------------------------------------------------------------------


def test_metrics_match_hand_computed_values() -> None:
    results = _ranked({"a": ["x", "r1", "y", "r2"], "b": ["z"]})
    qrels = {"a": {"r1": 1, "r2": 1}, "b": {"r3": 1}}
    metrics = per_query_metrics(results, qrels, return_n=5).set_index("query_id")
    # a: relevant at ranks 2 and 4. DCG = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3)
    dcg = 1 / 1.5849625007 + 1 / 2.3219280949
    assert metrics.loc["a", "ndcg@10"] == pytest.approx(dcg / (1 + 1 / 1.5849625007), abs=1e-6)
    assert metrics.loc["a", "mrr@10"] == pytest.approx(0.5)
    assert metrics.loc["a", "recall@5"] == pytest.approx(1.0)
    assert metrics.loc["a", "map"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert metrics.loc["b", "ndcg@10"] == 0.0 and metrics.loc["b", "recall@20"] == 0.0


def test_mrr_is_cut_at_ten() -> None:
    ranking = [f"d{i}" for i in range(11)]
    metrics = per_query_metrics(_ranked({"a": ranking}), {"a": {"d10": 1}}, return_n=5)
    assert metrics["mrr@10"].iloc[0] == 0.0
    assert metrics["recall@20"].iloc[0] == 1.0


def test_return_n_metrics_score_only_the_blocks_the_agent_saw() -> None:
    # blocks: x, r1, r1 (a second chunk), y | r2 -- the agent saw the first 3 blocks
    results = _ranked({"a": ["x", "r1", "r1", "y", "r2"]})
    metrics = per_query_metrics(results, {"a": {"r1": 1, "r2": 1}}, return_n=3).iloc[0]
    assert metrics["recall@return_n"] == pytest.approx(0.5)  # r2 ranked 5th: not seen
    assert metrics["recall@10"] == pytest.approx(1.0)  # the full ranking finds both
    # nDCG@3 over what was seen: r1 at rank 2 of docs [x, r1]; ideal: r1, r2 at ranks 1, 2
    assert metrics["ndcg@return_n"] == pytest.approx((1 / 1.5849625007) / (1 + 1 / 1.5849625007), abs=1e-6)


def _ranked(block_docs: dict[str, list[str]]) -> pd.DataFrame:
    """A results frame holding only what the metrics read: each query's blocks' documents."""
    return pd.DataFrame(
        {
            "query_id": list(block_docs),
            "block_doc_ids": list(block_docs.values()),
            "doc_ids": [list(dict.fromkeys(docs)) for docs in block_docs.values()],
            "category": [None] * len(block_docs),
        }
    )


def test_document_rank_is_its_best_chunk() -> None:
    result = LookupResult.model_validate_json(
        json.dumps(
            {
                "query": "q", "found": True, "evidenceStatus": "evidence", "contextPack": None,
                "retrievalTrace": None, "rerankTrace": None, "relevanceLevel": "high",
                "completenessHint": "", "retrievedDomainsThisSession": [], "message": "",
                "evidenceBlocks": [
                    _block("a#chunk-1", "a", 1), _block("b#chunk-0", "b", 2), _block("a#chunk-0", "a", 3),
                ],
            }
        )
    )  # fmt: skip
    assert document_ranking(result) == ["a", "b"]


def _block(key: str, doc: str, rank: int) -> dict:
    return {
        "evidenceKey": key, "docId": doc, "chunkIndex": 0, "source": doc, "title": None,
        "breadcrumb": None, "category": None, "content": "x", "score": 0.5,
        "normalizedScore": 0.5, "rerankScore": 0.5, "rank": rank, "hitReasons": [],
    }  # fmt: skip


# --- runs on a real store ---------------------------------------------------------------------


FLOAT_TOLERANCE = 1e-3  # batched and single query embeddings differ in the 5th decimal (padding)


def differences(batched: object, single: object, where: str = "$") -> list[str]:
    """Where two contract JSONs of one lookup differ: any key, string, flag, count or order, or a
    float beyond :data:`FLOAT_TOLERANCE`; node timings (``ms``) are not compared, their names are."""
    if isinstance(batched, dict) and isinstance(single, dict):
        if batched.keys() != single.keys():
            return [f"{where}: keys differ"]
        return [d for k in batched if k != "ms" for d in differences(batched[k], single[k], f"{where}.{k}")]
    if isinstance(batched, list) and isinstance(single, list):
        if len(batched) != len(single):
            return [f"{where}: {len(batched)} != {len(single)} items"]
        pairs = zip(batched, single, strict=True)
        return [d for i, (b, s) in enumerate(pairs) for d in differences(b, s, f"{where}[{i}]")]
    if isinstance(batched, float) or isinstance(single, float):
        close = isinstance(batched, int | float) and isinstance(single, int | float)
        return (
            [] if close and abs(batched - single) <= FLOAT_TOLERANCE else [f"{where}: {batched} != {single}"]
        )
    return [] if batched == single else [f"{where}: {batched!r} != {single!r}"]


def assert_batch_equals_single(tool: KnowledgeTool, queries: list[str], pinned: list[str | None]) -> None:
    batched = lookup_many(tool, queries, pinned)
    single = [tool.lookup(q, pinned_category=p) for q, p in zip(queries, pinned, strict=True)]
    for query, pin, b, s in zip(queries, pinned, batched, single, strict=True):
        as_json = [r.model_dump(by_alias=True, mode="json") for r in (b, s)]
        assert differences(*as_json) == [], (query, pin)


def test_batch_results_equal_single_lookups(tool: KnowledgeTool) -> None:
    """Each query encoded alone (:class:`OneAtATime`): with a batch's padding, the two chunks of
    the refund policy that tie on the fused score swapped places on some CPUs."""
    one_at_a_time = KnowledgeTool(
        tool.config, search_port=tool.search_port, embedder=OneAtATime(tool.embedder), l0_index=tool.l0_index
    )
    queries = [q[1] for q in QUERIES] + ["refund", "rotate the API keys", "disk usage of brokers"]
    pinned = [q[3] for q in QUERIES] + [None, "security", None]
    assert_batch_equals_single(one_at_a_time, queries, pinned)


class OneAtATime(Embedder):
    """The real model, each query encoded alone: a batch's padding moves a vector in its 5th
    decimal, enough to swap near-tied hits deep in a trace; with identical vectors every
    difference left between a batched and a single lookup is the DAG's."""

    def __init__(self, model: Embedder) -> None:
        self.model = model
        self.model_name = model.model_name

    @property
    def dimension(self) -> int:
        return self.model.dimension

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.model.embed_query(text) for text in texts])


@pytest.mark.parametrize("rule", ["relative", "threshold"])
def test_batched_and_single_lookups_agree_on_every_field(
    sample_kb: SampleKB, embedder: Embedder, rule: str
) -> None:
    """A few hundred lookups on the sample knowledge base: its judged questions and its documents'
    titles and keywords, unpinned, pinned to their own domain and to a wrong one, under both
    fallback rules: every field of every result agrees (timings aside)."""
    eval_dir = Path(sample_knowledge_base()).parent / "sample-eval"
    judged = [
        json.loads(line) for line in (eval_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    domains = sorted({row["category"] for row in judged})
    asked = [(row["text"], row["category"]) for row in judged]
    for document in sample_kb.documents.values():
        domain = document.categories[0] if document.categories else domains[0]
        asked += [(document.title, domain), (" ".join(document.keywords[:3]) or document.title, domain)]
    queries, pinned = [], []
    for text, domain in asked:
        wrong = domains[(domains.index(domain) + 1) % len(domains)] if domain in domains else domains[0]
        for pin in (None, domain, wrong):
            queries.append(text)
            pinned.append(pin)
    assert len(queries) >= 250
    tool = make_tool(sample_kb, OneAtATime(embedder), retrieval__fallback_rule=rule)
    assert_batch_equals_single(tool, queries, pinned)


def test_a_batch_sends_the_requests_of_every_dag_in_one_round_trip(tool: KnowledgeTool) -> None:
    spy = FaultySearchPort(tool.search_port)  # no fault: it records each round trip to the store
    batched = KnowledgeTool(tool.config, search_port=spy, embedder=tool.embedder, l0_index=tool.l0_index)
    queries = ["refund", "rotate the API keys", "disk usage of brokers"]
    results = lookup_many(batched, queries)
    derived = [r.retrieval_trace.category_filter for r in results]
    assert "payments" in derived  # from the L0 hints, not pinned
    asked = [trip for trip in spy.round_trips if any(r.query_text in queries for r in trip)]
    assert len(asked) == 1  # every search the DAGs asked for went in one batch
    assert [(r.query_text, r.category) for r in asked[0]] == [
        (query, category)
        for query, f in zip(queries, derived, strict=True)
        for category in ((f, None) if f else (None,))
    ]  # the DAG's own requests, in order: each filtered search and its unfiltered companion


def test_a_batch_fuses_its_few_matches_searches_again_in_one_more_round_trip(tool: KnowledgeTool) -> None:
    """Every BM25 leg of this small store is short, so each hybrid search that matched any chunk
    is fused again by RRF (the DAG's ``fused_answers``): a batch asks all of its chunk's in one
    more round trip, with the results each single lookup gets asking its own."""
    spy = FaultySearchPort(tool.search_port)
    batched = KnowledgeTool(tool.config, search_port=spy, embedder=tool.embedder, l0_index=tool.l0_index)
    queries = ["refund", "rotate the API keys", "disk usage of brokers", "zebra migration"]
    results = lookup_many(batched, queries)
    (trip,) = spy.refusion_trips
    assert {r.fusion for r in trip} == {"rrf"}
    assert {r.query_text for r in trip} == set(queries[:3])  # "zebra migration": no BM25 match
    for result in results[:3]:
        assert any(
            reason.endswith("(rrf)") for block in result.evidence_blocks for reason in block.hit_reasons
        )
    nodes = [n.name for n in results[0].retrieval_trace.executed_nodes]
    assert nodes[nodes.index("l1_answers") :][:3] == ["l1_answers", "fused_answers", "ranked_hits"]
    alone = KnowledgeTool(
        tool.config, search_port=tool.search_port, embedder=tool.embedder, l0_index=tool.l0_index
    )
    for query, result in zip(queries, results, strict=True):
        single = alone.lookup(query).evidence_blocks
        assert [(b.evidence_key, b.hit_reasons) for b in single] == [
            (b.evidence_key, b.hit_reasons) for b in result.evidence_blocks
        ]


class _ThreadRecorder(OneAtATime):
    """The real model; records the thread and the texts of each batch it encodes."""

    def __init__(self, model: Embedder) -> None:
        super().__init__(model)
        self.batches: list[tuple[str, list[str]]] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append((threading.current_thread().name, list(texts)))
        return super().embed_queries(texts)


def test_many_queries_go_in_even_chunks_each_encoded_off_the_calling_thread(
    tool: KnowledgeTool, embedder: Embedder
) -> None:
    """More queries than a chunk holds: even chunks of at most ``CHUNK_SIZE``, each encoded as one
    batch on the worker thread (so the next one encodes while this one's DAGs run) and searched
    in one round trip; the results come back in query order."""
    recorder, spy = _ThreadRecorder(embedder), FaultySearchPort(tool.search_port)
    batched = KnowledgeTool(tool.config, search_port=spy, embedder=recorder, l0_index=tool.l0_index)
    queries = [f"refund request number {n}" for n in range(CHUNK_SIZE + 2)]
    results = lookup_many(batched, queries)
    assert [r.query for r in results] == queries
    half = (CHUNK_SIZE + 2) // 2
    ours = [(name, texts) for name, texts in recorder.batches if set(texts) <= set(queries)]
    assert [texts for _, texts in ours] == [queries[:half], queries[half:]]  # the store's probe set aside
    assert all(name.startswith("lookup-embedding") for name, _ in ours)
    batches = [trip for trip in spy.round_trips if len(trip) > 1]
    assert [len({r.query_text for r in trip}) for trip in batches] == [half, half]


class _FreezeWatch(FaultySearchPort):
    """No fault: records how many objects the collector had frozen at each round trip."""

    def __init__(self, inner: KnowledgeSearchPort) -> None:
        super().__init__(inner)
        self.frozen: list[int] = []

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        self.frozen.append(gc.get_freeze_count())
        return super().search_batch(requests)


def test_a_batch_freezes_the_older_heap_only_while_its_lookups_run(tool: KnowledgeTool) -> None:
    watch = _FreezeWatch(tool.search_port)
    batched = KnowledgeTool(tool.config, search_port=watch, embedder=tool.embedder, l0_index=tool.l0_index)
    assert gc.get_freeze_count() == 0
    results = lookup_many(batched, ["refund", "rotate the API keys"])
    assert [r.evidence_status for r in results] == ["evidence", "evidence"]
    assert watch.frozen and min(watch.frozen) > 1000  # the model, the store client, ... were skipped
    assert gc.get_freeze_count() == 0  # and all unfrozen afterwards
    failing = KnowledgeTool(
        tool.config, search_port=tool.search_port, embedder=FailingEmbedder(), l0_index=tool.l0_index
    )
    with pytest.raises(RuntimeError, match="embedder down"):
        lookup_many(failing, ["refund"])
    assert gc.get_freeze_count() == 0  # also when a chunk raises


def test_evaluate_writes_results_metrics_and_report(tool: KnowledgeTool, tmp_path: Path) -> None:
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    run = evaluate(tool, queries, relevance(queries))
    row = run.results.set_index("query_id")
    assert row.loc["q-none", "evidence_status"] == "invalid_input"
    assert row.loc["q-refund", "doc_ids"][0] == "refunds"
    assert row.loc["q-keys", "category_filter"] == "payments"  # the pin overrides L0
    # the pinned category's one document scores below min_evidence_score: nothing usable, so retried
    assert row.loc["q-keys", "fallback_reason"] == "filtered_vector_no_evidence"
    assert json.loads(row.loc["q-kafka", "result_json"])["evidenceBlocks"][0]["docId"] == "kafka-runbook"
    overall = run.metrics["overall"]
    assert overall["queries"] == 4 and overall["judged_queries"] == 3
    assert overall["ndcg@10"] == pytest.approx(1.0)
    assert overall["fallback_rate_by_reason"] == {"filtered_vector_no_evidence": 0.25}
    assert set(run.metrics["per_category"]) == {"payments"}
    written = write_eval_outputs(run, tmp_path / "out")
    assert {p.name for p in written} >= {
        "results.parquet",
        "metrics.json",
        "report.md",
        "top_score_histogram.png",
    }
    assert pd.read_parquet(tmp_path / "out" / "results.parquet").shape[0] == 4
    assert "| ndcg@10 | 1.0000 |" in (tmp_path / "out" / "report.md").read_text()


def test_repeated_evaluations_measure_the_store_null_once(tool: KnowledgeTool, tmp_path: Path) -> None:
    """The evaluation's deeper variant of the tool keeps the tool's store calibration: the probe
    null of its search shape is measured at the first run and read by the next ones."""
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    evaluate(tool, queries)
    measured = dict(tool.store_calibration._nulls)
    evaluate(tool, queries)
    assert len(measured) == 1  # the variant's search shape (20 deep), kept on the tool
    assert all(tool.store_calibration._nulls[shape] is null for shape, null in measured.items())


def test_evaluation_ranks_deeper_than_return_n_and_scores_what_the_agent_saw(
    tool: KnowledgeTool, tmp_path: Path
) -> None:
    retrieval = tool.config.retrieval.model_copy(update={"return_n": 1})
    shallow = KnowledgeTool(
        tool.config.model_copy(update={"retrieval": retrieval}),
        search_port=tool.search_port, embedder=tool.embedder, l0_index=tool.l0_index,
    )  # fmt: skip
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    run = evaluate(shallow, queries, relevance(queries))
    assert run.metrics["return_n"] == 1 and run.metrics["depth"] >= EVAL_DEPTH
    row = run.results.set_index("query_id").loc["q-refund"]
    assert len(row["evidence_keys"]) > 1  # ranked past return_n for the metrics
    seen = shallow.lookup(row["query"]).evidence_blocks
    assert row["evidence_keys"][:1] == [b.evidence_key for b in seen]  # what the agent got
    assert {"ndcg@return_n", "recall@return_n"} <= set(run.per_query.columns)


def test_comparison_reports_deltas_and_paired_p_values(
    tool: KnowledgeTool, store_path: Path, tmp_path: Path
) -> None:
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    base = {"store.path": str(store_path), "retrieval.reference_threshold": 0.5}
    variants = [parse_compare("nofallback=--set retrieval.fallback=false")]
    runs = run_variants(tool.config, base, None, variants, queries, relevance(queries), tool)
    table = comparison_table(runs).set_index(["variant", "metric"])
    assert table.loc[("nofallback", "fallback_rate"), "value"] == 0.0
    assert table.loc[("nofallback", "ndcg@10"), "delta"] < 0  # the wrong pin now hurts
    assert 0.0 <= table.loc[("nofallback", "ndcg@10"), "p_value"] <= 1.0
    assert table.loc[(BASELINE, "ndcg@10"), "delta"] == 0.0


def test_variant_cannot_change_the_shared_store(tool: KnowledgeTool, tmp_path: Path) -> None:
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    with pytest.raises(ValueError, match="share store and embedder"):
        run_variants(tool.config, {}, None, [Variant("x", {"store.path": "/elsewhere"})], queries, None, tool)


def test_sweep_spec_expands_to_inclusive_values() -> None:
    variants = parse_sweep("retrieval.reference_threshold=0.2:0.3:0.05")
    assert [v.overrides["retrieval.reference_threshold"] for v in variants] == [0.2, 0.25, 0.3]


def test_eval_cli_with_compare_and_sweep(store_path: Path, tmp_path: Path) -> None:
    queries = write_queries(tmp_path / "q.parquet")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "eval", str(queries), "--out", str(out), "--set", f"store.path={store_path}",
            "--compare", "dense=--set rerank.domain_match=0",
            "--sweep", "retrieval.reference_threshold=0.3:0.6:0.3",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (out / "comparison.md").read_text().count("| dense |") >= 1
    assert (out / "sweep.png").stat().st_size > 0
    assert json.loads((out / "metrics.json").read_text())["overall"]["queries"] == 4


PINNED = [  # (id, query, relevant doc, true category)
    ("p-refund", "can I get a refund for downloaded digital goods?", "refunds", "payments"),
    ("p-kafka", "consumer lag is growing on the brokers", "kafka-runbook", "infrastructure"),
    ("p-keys", "how often must API keys be rotated", "api-keys", "security"),
]
WRONG = {"payments": "security", "infrastructure": "payments", "security": "infrastructure"}


def write_pinned(path: Path, wrong: bool) -> Path:
    pins = [WRONG[c] if wrong else c for *_, c in PINNED]
    table = pa.table(
        {
            "query_id": [r[0] for r in PINNED],
            "query": [r[1] for r in PINNED],
            "relevant": pa.array([[r[2]] for r in PINNED], type=pa.list_(pa.string())),
            "category": pa.array(pins, type=pa.string()),
            "true_category": pa.array([r[3] for r in PINNED], type=pa.string()),
        }
    )
    pq.write_table(table, path)
    return path


def test_filter_headline_of_wrong_and_right_pins(tool: KnowledgeTool, tmp_path: Path) -> None:
    for wrong in (True, False):
        queries = load_eval_queries(write_pinned(tmp_path / f"{wrong}.parquet", wrong))
        qrels = relevance(queries)
        run = evaluate(tool, queries, qrels)
        headline = filter_headline(tool, queries, qrels, run)
        assert set(headline) == {"wrong_filter" if wrong else "right_filter"}
        measured = headline["wrong_filter" if wrong else "right_filter"]
        assert measured["queries"] == 3
        assert measured["unfiltered_ndcg@10"] == pytest.approx(1.0)
        assert measured["ndcg@10"] == pytest.approx(1.0)  # the fallback undid every wrong pin
        if wrong:
            assert measured["share_of_unfiltered_kept"] == pytest.approx(1.0)
            # each wrong category's documents score below min_evidence_score: nothing usable
            assert run.metrics["overall"]["fallback_rate_by_reason"] == {"filtered_vector_no_evidence": 1.0}
        else:  # a right filter cannot beat a perfect unfiltered ranking: no gain to share
            assert measured["pure_filter_ndcg@10"] == pytest.approx(1.0)
            assert measured["share_of_filter_gain_kept"] is None


def test_filter_headline_needs_true_categories(tool: KnowledgeTool, tmp_path: Path) -> None:
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    assert filter_headline(tool, queries, relevance(queries), evaluate(tool, queries)) is None


def test_eval_cli_reports_the_filter_headline(store_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    queries = write_pinned(tmp_path / "wrong.parquet", wrong=True)
    result = CliRunner().invoke(
        app, ["eval", str(queries), "--out", str(out), "--set", f"store.path={store_path}"]
    )
    assert result.exit_code == 0, result.output
    assert "keeps 100.0% of the unfiltered nDCG@10" in " ".join(result.output.split())
    report = (out / "report.md").read_text()
    assert (
        "**Wrong category pinned (3 queries): the fallback keeps 100.0% of the unfiltered nDCG@10**" in report
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["filter_headline"]["wrong_filter"]["share_of_unfiltered_kept"] == pytest.approx(1.0)


def test_eval_cli_rejects_a_bad_file_cleanly(tmp_path: Path) -> None:
    pq.write_table(pa.table({"query_id": ["a", "a"], "query": ["x", "y"]}), tmp_path / "q.parquet")
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "q.parquet")])
    assert result.exit_code == 2
    assert "duplicate query_id" in result.output


def test_report_shows_configuration_worst_queries_and_comparison_link(
    tool: KnowledgeTool, tmp_path: Path
) -> None:
    queries = load_eval_queries(write_queries(tmp_path / "q.parquet"))
    run = evaluate(tool, queries, relevance(queries))
    write_eval_outputs(run, tmp_path / "out", "t", tool.config, comparison="comparison.md")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Configuration" in report and "reference_threshold: 0.5" in report
    assert "## Worst 3 queries by nDCG@10" in report
    assert "| q-keys | " in report and "how often must API keys be rotated" in report
    assert "[comparison.md](comparison.md)" in report
    assert "embeddings are computed in one batch" in report  # what the latency figures exclude


UNFILTERED_QUERIES = [
    ("q-brokers", "messages pile up and the brokers are slow", ["kafka-runbook"], None),
    ("q-rotate", "rotate production credentials", ["api-keys"], None),
]


def test_eval_cli_warns_when_a_variant_cannot_take_effect(store_path: Path, tmp_path: Path) -> None:
    queries = write_queries(tmp_path / "q.parquet", UNFILTERED_QUERIES)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "eval", str(queries), "--out", str(out), "--set", f"store.path={store_path}",
            "--compare", "nokeywords=--set rerank.keyword_match=0",
            "--compare", "ratio=--set retrieval.fallback_score_ratio=0.9",
            "--sweep", "retrieval.reference_threshold=0.3:0.6:0.3",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "variant 'nokeywords' gave the baseline's results on every query" in output
    assert "no returned block matched one" in output
    assert (
        "variant 'ratio' gave the baseline's results" in output and "no query had a category filter" in output
    )
    assert "2 variants of retrieval.reference_threshold gave the baseline's results" in output
    assert "decides the fallback only under retrieval.fallback_rule: threshold (in force: relative)" in output
    assert "> warning: 2 variants of retrieval.reference_threshold" in (out / "comparison.md").read_text()


def test_settings_the_rule_in_force_never_reads_are_named() -> None:
    relative = load_config()
    keys = ["retrieval.reference_threshold", "retrieval.fallback_score_ratio", "rerank.domain_match"]
    assert set(inert_settings(relative, keys)) == {"retrieval.reference_threshold"}
    threshold = load_config(overrides={"retrieval.fallback_rule": "threshold"})
    assert set(inert_settings(threshold, keys)) == {"retrieval.fallback_score_ratio"}
    off = load_config(overrides={"retrieval.fallback": False})
    assert "retrieval.fallback is off" in inert_settings(off, keys)["retrieval.fallback_score_ratio"]
    dense = load_config(overrides={"retrieval.mode": "dense"})
    assert (
        "dense"
        in inert_settings(dense, ["retrieval.fallback_sparse_ratio"])["retrieval.fallback_sparse_ratio"]
    )
    few = ["retrieval.few_matches_fusion"]
    assert inert_settings(relative, few) == {}
    assert set(inert_settings(dense, few)) == set(few)
    assert set(inert_settings(load_config(overrides={"retrieval.fusion": "rrf"}), few)) == set(few)


def test_sweeping_the_fallback_ratio_moves_the_sample_set_under_wrong_pins(
    sample_kb: SampleKB, embedder: Embedder, tmp_path: Path
) -> None:
    """The README's sweep: under the default (relative) rule, the score ratio decides how many
    wrong pins fall back, so the sample eval set's nDCG@10 and fallback rate move with it."""
    pinned = tmp_path / "wrong.parquet"
    beir_to_parquet(sample_knowledge_base().parent / "sample-eval", pinned, None, "wrong")
    queries = load_eval_queries(pinned)
    tool = make_tool(sample_kb, embedder)
    swept = parse_sweep("retrieval.fallback_score_ratio=0.4:1.0:0.2")
    runs = run_variants(
        tool.config, {"store.path": str(sample_kb.store_path)}, None, swept, queries, relevance(queries), tool
    )
    ndcg = [runs[v.name].metrics["overall"]["ndcg@10"] for v in swept]
    fallback = [runs[v.name].metrics["overall"]["fallback_rate"] for v in swept]
    assert not is_flat(runs, swept) and ineffective_variants(runs, swept) == []
    assert ndcg[0] < ndcg[-1] and fallback[0] < fallback[-1]  # a stricter ratio undoes more wrong pins


def test_a_headline_without_a_share_says_why() -> None:
    scores = {"queries": 3, "ndcg@10": 0.9, "unfiltered_ndcg@10": 0.9, "pure_filter_ndcg@10": 0.9}
    right = filter_headline_lines({"right_filter": {**scores, "share_of_filter_gain_kept": None}})[0]
    assert "the pure filter does not beat unfiltered retrieval" in right and "no gain" in right
    wrong = filter_headline_lines({"wrong_filter": {**scores, "share_of_unfiltered_kept": None}})[0]
    assert "the unfiltered nDCG@10 is 0" in wrong
    for line in (right, wrong):
        assert " - " not in line and "keeps -" not in line
    kept = filter_headline_lines({"right_filter": {**scores, "share_of_filter_gain_kept": 0.5}})[0]
    assert "keeps 50.0% of the pure filter's gain" in kept


def test_a_variant_that_takes_effect_is_not_warned_about(store_path: Path, tmp_path: Path) -> None:
    queries = write_queries(tmp_path / "q.parquet")
    result = CliRunner().invoke(
        app,
        [
            "eval", str(queries), "--out", str(tmp_path / "out"), "--set", f"store.path={store_path}",
            "--compare", "nodomain=--set rerank.domain_match=0",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output

"""Throughput of ``eval`` on the SciFact test queries next to the batched embed + search floor.

The floor is the same model encoding every query in one batched call plus one batched Qdrant
Edge query on the same shard, of the retrieval mode evaluated (hybrid: the fused query with its
dense and BM25 prefetches), next to the dense floor.
Floor and eval alternate for several rounds (medians reported).

The design floor adds what every eval query needs whatever its nodes cost: the hybrid search's
dense and sparse companions (each hit's places and BM25 score) and one run of the lookup DAG's
shape with nodes that do no work (Hamilton alone), one after the other: with post-processing, hit
building and result rows free, a serial eval could reach it; eval encodes the next chunk of
queries while this one's DAGs run, so it can pass it. Eval's own work per query
(``own_work_per_query_ms``) is its ms per query less the design floor's (target: eval at least
60% of the hybrid floor).

    python benchmarks/eval_throughput.py [--store DIR] [--data BEIR_DIR] [--set key=value ...]
                                         [--rounds 3] [--out FILE.json] [--doc docs/benchmarks.md]
    python benchmarks/eval_throughput.py --from-json   # rewrite the doc's table from --out only

A run on SciFact with the defaults (no ``--set``) rewrites its table of docs/benchmarks.md whole.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import qdrant_edge as qe
from doc_sections import replace_table
from hamilton_shape import shape_only_driver
from machine import machine
from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.qdrant_edge_store import engine_queries
from lookup_knowledge.adapters.qdrant_store import DENSE_VECTOR, RRF_K, SPARSE_VECTOR, reads_back
from lookup_knowledge.adapters.search import SearchRequest
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.eval import metrics
from lookup_knowledge.eval.batch import lookup_many
from lookup_knowledge.eval.data import beir_to_parquet, load_eval_queries, load_qrels, relevance
from lookup_knowledge.eval.evaluation import eval_config, evaluate
from lookup_knowledge.pipeline import FINAL_NODE

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--store", type=Path, default=Path("benchmarks/.cache/scifact-bm25"))
    parser.add_argument("--data", type=Path, default=DATA, help="a BEIR folder (default: SciFact)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/eval_throughput.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's table from --out")
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found (benchmark data lives in ../shared/data)")
        return 0
    console = Console()
    config = load_config(overrides=[f"store.path={args.store}", *args.overrides])
    ingest(args.data, config, progress=console.is_terminal)
    with tempfile.TemporaryDirectory() as tmp:
        beir_to_parquet(args.data, Path(tmp) / "q.parquet")
        queries = load_eval_queries(Path(tmp) / "q.parquet")
    qrels = relevance(queries, load_qrels(args.data / "qrels.tsv"))
    texts = queries["query"].tolist()
    k = config.retrieval.effective_retrieve_k

    with KnowledgeTool.from_config(config) as tool:
        store = getattr(tool.search_port, "_store", tool.search_port)  # under the shared-store port
        shard, encoder = store._shard, tool.embedder.encoder("query")

        fusion = qe.Fusion.Rrf(k=RRF_K) if config.retrieval.fusion == "rrf" else qe.Fusion.Dbsf()

        def store_query(text: str, vector: list[float], mode: str) -> qe.QueryRequest:
            dense = qe.Query.Nearest(vector, DENSE_VECTOR)
            if mode == "dense":
                return qe.QueryRequest(limit=k, query=dense, with_payload=True)
            sparse = bm25_encoder().embed_query(text)
            sparse_query = qe.Query.Nearest(
                qe.SparseVector(list(sparse.indices), list(sparse.values)), SPARSE_VECTOR
            )
            if mode == "sparse":
                return qe.QueryRequest(limit=k, query=sparse_query, with_payload=True)
            width = max(config.retrieval.prefetch_k or k, k)  # as the pipeline's hybrid search
            prefetches = [qe.Prefetch(width, query=dense), qe.Prefetch(width, query=sparse_query)]
            return qe.QueryRequest(limit=k, prefetches=prefetches, query=fusion, with_payload=True)

        def floor(mode: str) -> float:
            """Queries/s of one batched encode plus one batched store query of ``mode``."""
            start = time.perf_counter()
            vectors = encoder.encode(texts, 64)
            requests = [store_query(t, v.tolist(), mode) for t, v in zip(texts, vectors, strict=True)]
            shard.query_batch(qe.QueryBatchRequest(requests))
            return len(texts) / (time.perf_counter() - start)

        def design_floor() -> float:
            """Queries/s of the batched encode, every engine call the eval makes (fused query and
            companions, as the adapter builds them, and the read of the points each keeps) and
            one run per query of Hamilton alone."""
            start = time.perf_counter()
            vectors = encoder.encode(texts, 64)
            settings = deep.config.retrieval
            requests = [
                SearchRequest(
                    text,
                    vector,
                    settings.effective_retrieve_k,
                    mode=settings.mode,
                    sparse_vector=None if settings.mode == "dense" else bm25_encoder().embed_query(text),
                    fusion=settings.fusion,
                    prefetch_k=settings.prefetch_k,
                )
                for text, vector in zip(texts, vectors, strict=True)
            ]
            sent = [engine_queries(r) for r in requests]
            found = shard.query_batch(qe.QueryBatchRequest([q for queries in sent for q in queries]))
            firsts = itertools.accumulate([0, *(len(queries) for queries in sent[:-1])])  # ranked queries
            ranked = [(r, found[n]) for r, n in zip(requests, firsts, strict=True) if reads_back(r)]
            kept = [point.id for r, points in ranked for point in points[: r.top_k]]
            if kept:  # the payload and BM25 vector of the points each search keeps, read by id
                shard.retrieve(kept, with_payload=True, with_vector=[SPARSE_VECTOR])
            shaped = time.perf_counter()
            for text in texts:
                shape_only.execute([FINAL_NODE], inputs=deep.dataflow_inputs(text))
            done = time.perf_counter()
            hamiltons.append((done - shaped) * 1000 / len(texts))
            return len(texts) / (done - start)

        def full_eval() -> float:
            return evaluate(tool, queries, qrels).queries_per_second

        deep = tool.variant(eval_config(config))

        def direct() -> float:
            """The same lookups and metrics without the evaluation dataflow (its overhead)."""
            start = time.perf_counter()
            rows = metrics.result_rows(
                queries, lookup_many(deep, texts, metrics.pinned_categories(queries)), qrels
            )
            metrics.summarize(
                rows, metrics.per_query_metrics(rows, qrels, config.retrieval.effective_return_n)
            )
            return len(texts) / (time.perf_counter() - start)

        shape_only = shape_only_driver(deep.driver)
        hamiltons: list[float] = []  # ms per query of Hamilton alone, from each design floor
        mode = config.retrieval.mode
        floor("dense"), floor(mode), design_floor(), full_eval(), direct()  # warm every path
        dense_floors, floors, design_floors, evals, directs = [], [], [], [], []
        hamiltons.clear()
        for _ in range(args.rounds):
            dense_floors.append(floor("dense"))
            floors.append(floor(mode))
            design_floors.append(design_floor())
            evals.append(full_eval())
            directs.append(direct())

    floor_qps, eval_qps = statistics.median(floors), statistics.median(evals)
    dense_floor_qps, design_floor_qps = statistics.median(dense_floors), statistics.median(design_floors)
    table = Table(title=f"eval throughput, SciFact, {len(texts)} queries, median of {args.rounds} rounds")
    table.add_column("path")
    table.add_column("queries/s")
    table.add_row("floor: batched encode + dense query_batch", f"{dense_floor_qps:.0f}")
    table.add_row(f"floor: batched encode + {mode} query_batch", f"{floor_qps:.0f}")
    table.add_row("design floor, serial: + companions + Hamilton alone per query", f"{design_floor_qps:.0f}")
    table.add_row(f"eval ({mode}: full DAG per query, batched embed/search)", f"{eval_qps:.0f}")
    direct_qps = statistics.median(directs)
    table.add_row("same lookups + metrics, no evaluation dataflow", f"{direct_qps:.0f}")
    table.add_row(f"eval / {mode} floor", f"{eval_qps / floor_qps:.0%} (target >= 60%)")
    table.add_row("eval / dense floor", f"{eval_qps / dense_floor_qps:.0%}")
    table.add_row("serial design floor / floor", f"{design_floor_qps / floor_qps:.0%}")
    table.add_row("eval / no-dataflow path", f"{eval_qps / direct_qps:.0%}")
    own_ms = 1000 / eval_qps - 1000 / design_floor_qps
    hamilton_ms = statistics.median(hamiltons)
    table.add_row("own work per query: eval - design floor, ms", f"{own_ms:.2f}")
    table.add_row("Hamilton alone per query, ms", f"{hamilton_ms:.2f}")
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "queries": len(texts),
                "data": str(args.data),
                "overrides": args.overrides,
                "query_backend": f"{encoder.backend} ({encoder.quantize})",
                "mode": mode,
                "dense_floor_qps": dense_floors,
                "floor_qps": floors,
                "design_floor_qps": design_floors,
                "eval_qps": evals,
                "direct_qps": directs,
                "depth": deep.config.retrieval.effective_return_n,
                "ratio": eval_qps / floor_qps,
                "own_work_per_query_ms": own_ms,
                "hamilton_alone_per_query_ms": hamilton_ms,
                "own_work_over_hamilton_alone": own_ms / hamilton_ms,
                "machine": machine(),  # with the load average at the end of the run
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    console.print(f"wrote {args.out}")
    if args.data == DATA and not args.overrides:  # the defaults on SciFact: the doc's figures
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        console.print(f"wrote its table in {args.doc}")
    return 0


def markdown_table(results: dict[str, Any]) -> str:
    """The eval throughput table of docs/benchmarks.md: medians of every path, and eval's own work."""
    qps = {k: statistics.median(results[k]) for k in ("dense_floor_qps", "floor_qps", "design_floor_qps")}
    qps |= {k: statistics.median(results[k]) for k in ("eval_qps", "direct_qps")}
    mode, ran = results["mode"], results["machine"]
    floor = qps["floor_qps"]
    return "\n".join(
        [
            f"| path ({results['queries']} SciFact queries, {results['query_backend']} query encoder, "
            f"{ran['cpu']}, {ran['cpus']} CPUs) | queries/s |",
            "|---|---:|",
            f"| floor: batched encode + dense `query_batch` | {qps['dense_floor_qps']:.0f} |",
            f"| floor: batched encode + {mode} `query_batch` | {floor:.0f} |",
            "| design floor, serial: + companions, the read of the kept hits + Hamilton alone per query | "
            f"{qps['design_floor_qps']:.0f} ({qps['design_floor_qps'] / floor:.0%} of the {mode} floor) |",
            f"| eval (the evaluation dataflow) | **{qps['eval_qps']:.0f}** "
            f"(**{qps['eval_qps'] / floor:.0%}** of the {mode} floor; target 60%) |",
            f"| the same lookups and metrics, no dataflow | {qps['direct_qps']:.0f} |",
            f"| own work per query: eval - design floor | {results['own_work_per_query_ms']:.2f} ms "
            f"({results['own_work_over_hamilton_alone']:.1f}x Hamilton alone's "
            f"{results['hamilton_alone_per_query_ms']:.2f} ms) |",
        ]
    )


def write_doc(doc: Path, results: dict[str, Any]) -> None:
    """This benchmark's table of ``doc`` rewritten whole from ``results``; the prose kept."""
    replace_table(doc, "eval-throughput", markdown_table(results))


if __name__ == "__main__":
    raise SystemExit(main())

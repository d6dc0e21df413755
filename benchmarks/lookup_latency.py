"""Warm single-call lookup latency on SciFact: the product's own work next to the floor and
Hamilton alone, measured side by side.

Each query runs, back to back so all see the same machine load: the floor (the model's
``encode`` of the query plus one direct dense Qdrant Edge search on the same shard), the hybrid
floor (the encode, the query's BM25 vector and the engine calls a hybrid search makes: the
fused query and its dense and sparse companions, then the read of the payload and BM25 vector
of the ``top_k`` points it keeps), Hamilton alone (the lookup DAG's exact shape,
every node returning at once, with the executed-node hook), the lookup (configured mode, hybrid
by default), a dense-mode lookup, a hybrid lookup with prefetches only ``retrieve_k`` wide (the
wide prefetch's cost) and the lookup of a caller who sees half the documents (``access_lookup``:
every search under the access payload filter; target <= 1.10x the unrestricted lookup; the
store's access fields are set back by the next ingest).

The product's own work (``own_work`` in the JSON) is the lookup's p50 minus its floor's p50
minus Hamilton alone's p50: dense against the floor, hybrid against the hybrid floor (targets:
at most 1.0x and 1.3x Hamilton alone), with where it goes: the query vectors beyond the floor's
encode, the store round trips beyond the floor's queries (hit building, the cosines of hits the
dense companion did not rank, a filtered search's unfiltered companion), the post-processing
nodes, the other nodes, and the Hamilton run beyond Hamilton alone (the result builder).

    python benchmarks/lookup_latency.py [--store DIR] [--limit N] [--rounds R] [--set key=value ...]
                                        [--out FILE.json] [--doc docs/benchmarks.md]
    python benchmarks/lookup_latency.py --from-json   # rewrite the doc's tables from --out only

A full run (no ``--limit``, no ``--set``) rewrites its tables of docs/benchmarks.md whole.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import qdrant_edge as qe
from corpora import CachedEmbedder
from doc_sections import replace_table
from hamilton_shape import shape_only_driver
from machine import machine
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.qdrant_edge_store import engine_queries
from lookup_knowledge.adapters.qdrant_store import DENSE_VECTOR, SPARSE_VECTOR
from lookup_knowledge.adapters.search import SearchRequest
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.pipeline import FINAL_NODE
from lookup_knowledge.stores import build_embedder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
SEARCH_NODES = {
    "l1_answers",
    "fused_answers",
    "unfiltered_hits",
}  # the store round trips: the batch (or the one search), a few-matches search fused again, a threshold retry
STAGES = ["embedding", "search", "postprocessing", "other_nodes", "hamilton_run"]
POSTPROCESSING_NODES = {
    "candidates_df", "screened_df", "deduped_df", "evidence_cuts", "answer_scores", "reranked_df",
    "ranked_evidence_blocks", "evidence_blocks", "context_pack",
}  # fmt: skip


def stages_of(total: float, nodes: dict[str, float]) -> dict[str, float]:
    """One lookup's ms split: its query vectors, its store round trips, post-processing, the
    other nodes, and the Hamilton run around them (the total less every node's own time)."""
    embedding = nodes["query_vector"] + nodes.get("query_sparse_vector", 0.0)
    search = sum(ms for n, ms in nodes.items() if n in SEARCH_NODES)
    post = sum(ms for n, ms in nodes.items() if n in POSTPROCESSING_NODES)
    run = total - sum(nodes.values())
    return {
        "embedding": embedding, "search": search, "postprocessing": post,
        "other_nodes": total - embedding - search - post - run, "hamilton_run": run,
    }  # fmt: skip


def own_work(summary: dict[str, dict[str, float]], prefix: str, floor: str) -> dict[str, Any]:
    """The product's own work per lookup (lookup p50 - its floor's p50 - Hamilton alone's p50),
    its ratio to Hamilton alone, and where it goes (p50s of each part beyond what the floor and
    Hamilton alone pay for it; parts of p50s need not add up to the p50 of the sum, and in hybrid
    mode the BM25 query vector is in both the first part and the floor's queries)."""
    p50 = {name: figures["p50_ms"] for name, figures in summary.items()}
    lookup = p50["total" if not prefix else "dense_lookup"]
    hamilton = p50["hamilton_alone"]
    engine = p50[floor] - p50["floor_encode"]  # what the floor's engine queries (and BM25 vector) cost
    own = lookup - p50[floor] - hamilton
    return {
        "own_work_p50_ms": own,
        "own_work_over_hamilton_alone": own / hamilton,
        "own_work_parts_p50_ms": {
            "query vectors beyond the floor's encode": p50[f"{prefix}embedding"] - p50["floor_encode"],
            "store round trips beyond the floor's queries": p50[f"{prefix}search"] - engine,
            "post-processing nodes": p50[f"{prefix}postprocessing"],
            "other nodes": p50[f"{prefix}other_nodes"],
            "Hamilton run beyond Hamilton alone": p50[f"{prefix}hamilton_run"] - hamilton,
        },
    }


def test_queries(limit: int | None) -> list[str]:
    judged = {line.split("\t")[0] for line in (DATA / "qrels.tsv").read_text().splitlines()[1:]}
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]
    texts = [q["text"] for q in queries if q["_id"] in judged]
    return texts[:limit] if limit else texts


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--store", type=Path, default=Path("benchmarks/.cache/scifact-bm25"))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], help="config override, key=value"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/lookup_latency.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's tables from --out")
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    console = Console()
    config = load_config(overrides=[f"store.path={args.store}", *args.overrides])
    console.print(f"ingesting {DATA} into {args.store} (skips unchanged documents) ...")
    cached = CachedEmbedder(build_embedder(config), Path("benchmarks/.cache/embeddings"))
    report = ingest(DATA, config, progress=console.is_terminal, embedder=cached)
    console.print(f"{report.documents} documents, {report.points_in_store} chunks, {report.seconds:.0f} s")
    queries = test_queries(args.limit)

    with KnowledgeTool.from_config(config) as tool:
        store = getattr(tool.search_port, "_store", tool.search_port)  # under the shared-store port
        shard = store._shard  # the same engine, searched directly for the floor
        encoder = tool.embedder.encoder("query")
        k = config.retrieval.effective_retrieve_k

        def floor(text: str) -> tuple[float, float]:
            """(encode ms, encode + search ms) of the bare floor."""
            start = time.perf_counter()
            vector = encoder.encode([text], 64)[0]
            encoded = time.perf_counter()
            nearest = qe.Query.Nearest(vector.tolist(), DENSE_VECTOR)
            shard.query(qe.QueryRequest(limit=k, query=nearest, with_payload=True))
            return (encoded - start) * 1000, (time.perf_counter() - start) * 1000

        def hybrid_floor(text: str) -> float:
            """ms of the encode, the BM25 query vector and the engine calls of a hybrid search: its
            queries (ids and scores), then the payload and BM25 vector of the ``top_k`` it keeps."""
            start = time.perf_counter()
            request = SearchRequest(
                text,
                encoder.encode([text], 64)[0],
                k,
                mode="hybrid",
                sparse_vector=bm25_encoder().embed_query(text),
                fusion=config.retrieval.fusion,
                prefetch_k=config.retrieval.prefetch_k,
            )
            ranked = shard.query_batch(qe.QueryBatchRequest(engine_queries(request)))[0]
            kept = [point.id for point in ranked[: request.top_k]]  # read back as the adapter does
            shard.retrieve(kept, with_payload=True, with_vector=[SPARSE_VECTOR])
            return (time.perf_counter() - start) * 1000

        shape_only = shape_only_driver(tool.driver)

        def hamilton_alone(text: str) -> float:
            """ms of one run of the lookup DAG's shape, its nodes doing no work."""
            inputs = tool.dataflow_inputs(text)
            start = time.perf_counter()
            shape_only.execute([FINAL_NODE], inputs=inputs)
            return (time.perf_counter() - start) * 1000

        dense = tool.variant(
            load_config(overrides=[f"store.path={args.store}", *args.overrides, "retrieval.mode=dense"])
        )

        read = tool.variant(  # the lookup with the answerability reader (off by default): its cost
            load_config(overrides=[f"store.path={args.store}", *args.overrides, "answerability.reader=true"])
        )

        narrow = tool.variant(  # hybrid with each prefetch only retrieve_k wide: the prefetch's cost
            load_config(overrides=[f"store.path={args.store}", *args.overrides, "retrieval.prefetch_k=null"])
        )

        def timed_lookup(variant: KnowledgeTool, text: str, principals: list[str] | None = None) -> float:
            return traced_lookup(variant, text, principals)[0]

        def traced_lookup(
            variant: KnowledgeTool, text: str, principals: list[str] | None = None
        ) -> tuple[float, dict[str, float]]:
            """(ms, ms per executed node) of one lookup."""
            start = time.perf_counter()
            result = variant.lookup(text, principals=principals)
            total = (time.perf_counter() - start) * 1000
            return total, {n.name: n.ms for n in result.retrieval_trace.executed_nodes}

        groups = restrict_half(store, tool)  # each document to one of two groups

        def new_shape() -> None:
            """An untimed one-word encode, so the next timed call meets a new input shape, as an
            agent's next query (of another length) does. OpenVINO re-plans its kernels when the
            shape changes (measured: 2.8 ms for a new length, 1.9 ms for the same one again);
            without this the floor, first to see each text, would pay for the calls after it."""
            encoder.encode(["shape"], 1)

        encoder.encode(queries, 1)  # every length once, as a long-running lookup process has seen
        for text in queries[: args.warmup]:
            floor(text)
            hybrid_floor(text)
            hamilton_alone(text)
            tool.lookup(text)
            timed_lookup(dense, text)
            timed_lookup(narrow, text)
            timed_lookup(read, text)
            timed_lookup(tool, text, groups[:1])
        per_node: dict[str, list[float]] = {}
        stages = ["floor_encode", "floor", "total", *STAGES]
        extra = [
            "dense_lookup", *(f"dense_{stage}" for stage in STAGES),
            "narrow_prefetch_lookup", "reader_on_lookup", "hybrid_floor", "hamilton_alone", "access_lookup",
        ]  # fmt: skip
        rows: dict[str, list[float]] = {name: [] for name in [*stages, *extra]}
        # Progress is redrawn between lookups, never from a refresh thread that would compete for
        # the GIL and the second core while a lookup is being timed.
        progress = Progress(console=console, auto_refresh=False)
        task = progress.add_task("lookups", total=len(queries) * args.rounds)
        progress.start()
        for i, text in enumerate(queries * args.rounds):
            progress.update(task, completed=i, refresh=i % 20 == 0)
            new_shape()
            encode_ms, floor_ms = floor(text)
            rows["floor_encode"].append(encode_ms)
            rows["floor"].append(floor_ms)
            new_shape()
            rows["hybrid_floor"].append(hybrid_floor(text))
            rows["hamilton_alone"].append(hamilton_alone(text))
            new_shape()
            total, nodes = traced_lookup(tool, text)
            for name, ms in nodes.items():
                per_node.setdefault(name, []).append(ms)
            rows["total"].append(total)
            for stage, ms in stages_of(total, nodes).items():
                rows[stage].append(ms)
            new_shape()
            dense_total, dense_nodes = traced_lookup(dense, text)
            rows["dense_lookup"].append(dense_total)
            for stage, ms in stages_of(dense_total, dense_nodes).items():
                rows[f"dense_{stage}"].append(ms)
            new_shape()
            rows["narrow_prefetch_lookup"].append(timed_lookup(narrow, text))
            new_shape()
            rows["reader_on_lookup"].append(timed_lookup(read, text))
            new_shape()
            rows["access_lookup"].append(timed_lookup(tool, text, groups[:1]))
        progress.update(task, completed=len(queries) * args.rounds, refresh=True)
        progress.stop()
    summary = {name: {"p50_ms": percentile(v, 50), "p95_ms": percentile(v, 95)} for name, v in rows.items()}
    table = Table(title=f"Warm lookup latency, SciFact, {len(queries)} test queries x {args.rounds} rounds")
    for column in ("stage", "p50 ms", "p95 ms"):
        table.add_column(column)
    for name, figures in summary.items():
        table.add_row(name, f"{figures['p50_ms']:.2f}", f"{figures['p95_ms']:.2f}")
    console.print(table)
    mode = config.retrieval.mode
    own = {  # the configured mode against the floor of its searches, and dense against the dense floor
        "dense": own_work(summary, "dense_", "floor"),
        mode: own_work(summary, "", "hybrid_floor" if mode == "hybrid" else "floor"),
    }
    targets = {"dense": 1.0, "hybrid": 1.3}
    own_table = Table(title="The product's own work per lookup: lookup p50 - floor p50 - Hamilton alone p50")
    for column in ("part", *own):
        own_table.add_column(column)
    own_table.add_row("own work, ms", *(f"{o['own_work_p50_ms']:.2f}" for o in own.values()))
    own_table.add_row(
        "over Hamilton alone (target)",
        *(f"{o['own_work_over_hamilton_alone']:.2f}x ({targets.get(m, '-')})" for m, o in own.items()),
    )
    for part in own["dense"]["own_work_parts_p50_ms"]:
        own_table.add_row(f"  {part}", *(f"{o['own_work_parts_p50_ms'][part]:.2f}" for o in own.values()))
    console.print(own_table)
    prefetch_cost = summary["total"]["p50_ms"] - summary["narrow_prefetch_lookup"]["p50_ms"]
    access_ratio = summary["access_lookup"]["p50_ms"] / summary["total"]["p50_ms"]
    reader_cost = summary["reader_on_lookup"]["p50_ms"] - summary["total"]["p50_ms"]
    console.print(f"the answerability reader costs {reader_cost:.2f} ms at p50 (target <= 15)")
    console.print(
        f"Hamilton alone p50 {summary['hamilton_alone']['p50_ms']:.2f} ms; the "
        f"{config.retrieval.prefetch_k}-wide prefetch costs {prefetch_cost:.2f} ms at p50 against prefetches "
        f"retrieve_k wide; access-filtered lookup p50 / unrestricted = {access_ratio:.3f} (target <= 1.10: "
        f"{'met' if access_ratio <= 1.10 else 'MISSED'}; the caller sees half the documents)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "queries": len(queries),
                "rounds": args.rounds,
                "chunks": report.points_in_store,
                "stages": summary,
                "nodes_p50_ms": {name: statistics.median(v) for name, v in per_node.items()},
                "mode": mode,
                "overrides": args.overrides,
                "query_backend": f"{encoder.backend} ({encoder.quantize})",
                "fusion": config.retrieval.fusion,
                "own_work": own,
                "own_work_targets_over_hamilton_alone": targets,
                "prefetch_k": config.retrieval.prefetch_k,
                "wide_prefetch_cost_p50_ms": prefetch_cost,
                "answerability_reader_cost_p50_ms": reader_cost,
                "access_lookup_over_lookup_p50": access_ratio,
                "machine": machine(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    console.print(f"wrote {args.out}")
    if args.limit is None and not args.overrides:  # the defaults, every query: the doc's figures
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        console.print(f"wrote its tables in {args.doc}")
    return 0


def markdown_tables(results: dict[str, Any]) -> dict[str, str]:
    """The tables of docs/benchmarks.md this benchmark owns: the product's own work per lookup
    (dense and the configured mode) and the access filter's cost."""
    p50 = {name: figures["p50_ms"] for name, figures in results["stages"].items()}
    p95 = {name: figures["p95_ms"] for name, figures in results["stages"].items()}
    own, targets = results["own_work"], results["own_work_targets_over_hamilton_alone"]
    modes = list(own)
    ran = results["machine"]
    where = (
        f"p50 ms, {results['queries']} SciFact queries x {results['rounds']} rounds, "
        f"{results['query_backend']} query encoder, {ran['cpu']} ({ran['cpus']} CPUs)"
    )
    floors = {"dense": p50["floor"], "hybrid": p50["hybrid_floor"]}
    lookups = {"dense": p50["dense_lookup"], results["mode"]: p50["total"]}
    rows = [
        f"| {where} | {' | '.join(modes)} |",
        "|---|" + "---:|" * len(modes),
        "| floor (dense: encode + one search; hybrid: encode + BM25 vector + the engine calls of a "
        "hybrid search) | " + " | ".join(f"{floors.get(m, p50['floor']):.2f}" for m in modes) + " |",
        "| Hamilton alone | " + " | ".join(f"{p50['hamilton_alone']:.2f}" for _ in modes) + " |",
        "| lookup | " + " | ".join(f"{lookups[m]:.2f}" for m in modes) + " |",
        "| **own work** | " + " | ".join(f"**{own[m]['own_work_p50_ms']:.2f}**" for m in modes) + " |",
        "| **own work / Hamilton alone** (target) | "
        + " | ".join(
            f"**{own[m]['own_work_over_hamilton_alone']:.2f}x** ({targets.get(m, '-')}x)" for m in modes
        )
        + " |",
    ]
    for part in own[modes[0]]["own_work_parts_p50_ms"]:
        rows.append(
            f"| {part} | " + " | ".join(f"{own[m]['own_work_parts_p50_ms'][part]:.2f}" for m in modes) + " |"
        )
    ratio = results["access_lookup_over_lookup_p50"]
    access = [
        f"| lookup ({results['mode']}, default) | p50 ms | p95 ms |",
        "|---|---:|---:|",
        f"| unrestricted | {p50['total']:.2f} | {p95['total']:.2f} |",
        f"| restricted to half the documents | {p50['access_lookup']:.2f} | {p95['access_lookup']:.2f} |",
        f"| restricted / unrestricted p50 (target <= 1.10) | **{ratio:.3f}x** | |",
    ]
    return {"lookup-latency": "\n".join(rows), "lookup-latency-access": "\n".join(access)}


def write_doc(doc: Path, results: dict[str, Any]) -> None:
    """This benchmark's tables of ``doc`` rewritten whole from ``results``; the prose kept."""
    for name, table in markdown_tables(results).items():
        replace_table(doc, name, table)


def restrict_half(store: Any, tool: KnowledgeTool) -> list[str]:
    """Give every other document to group ``g0``, the rest to ``g1`` (in the store and the
    tool's L0 index); the groups."""
    groups = ["g0", "g1"]
    for number, doc_id in enumerate(sorted(store.documents())):
        store.set_access(doc_id, [groups[number % 2]])
        if (doc := tool.l0_index.documents.get(doc_id)) is not None:
            tool.l0_index.upsert([dataclasses.replace(doc, access=(groups[number % 2],))])
    return groups


if __name__ == "__main__":
    raise SystemExit(main())

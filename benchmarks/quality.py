"""Retrieval quality on real data: dense, sparse (BM25) and hybrid retrieval on SciFact,
classic-dev, their mix and hugo-docs (each page's description as its query; nDCG@10 at depth 10),
and the category filter/fallback on classic-dev.

    python benchmarks/quality.py [--cache benchmarks/.cache] [--out benchmarks/results/quality.json]

Both corpora are ingested with the default configuration into cached stores (re-runs skip
unchanged documents; chunk vectors come from the embedding cache of ``benchmarks/corpora.py``).
Every run returns 10 blocks (``return_n`` 10), so nDCG@10 sees ten documents. Results go to
JSON and to their section of docs/quality.md (the rest of the doc is written by hand).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from corpora import CachedEmbedder, classic_scifact_mix, hugo_described_pages
from doc_sections import measured, replace_section, replace_table
from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.eval.data import beir_to_parquet, load_eval_queries, load_qrels, relevance
from lookup_knowledge.eval.evaluation import evaluate
from lookup_knowledge.stores import build_embedder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DENSE_ONLY = {
    "rerank.domain_match": 0, "rerank.entity_match": 0, "rerank.keyword_match": 0,
    "rerank.title_match": 0, "rerank.source_type": {}, "retrieval.max_chunks_per_document": None,
    "retrieval.retrieve_k": 30, "retrieval.return_n": 30,
}  # fmt: skip
WRONG_CATEGORY = {
    "aeronautics": "medicine",
    "medicine": "library_information_science",
    "library_information_science": "news",
    "news": "aeronautics",
}
SECTION = "## Retrieval modes and settings compared"
MACHINE = "the shared 2-vCPU VM"  # runs that did not record their CPU
console = Console()


def beir_queries(name: str | Path, pin_category: bool = False) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.parquet"
        beir_to_parquet(DATA / name, path, categories="true" if pin_category else "none")
        return load_eval_queries(path)


WHOLE_DOCUMENTS = {"ingest.chunk_chars": 100_000}  # one chunk per abstract, as MTEB embeds them
BACKENDS = [("torch", "none"), ("onnx", "none"), ("onnx", "int8"), ("openvino", "none"), ("openvino", "int8")]


DEPTH = {"retrieval.return_n": 10}  # nDCG@10 over ten returned blocks
# recall@100 as BEIR reads it: 100 distinct documents (one block each) out of 200 chunks searched
DEEP = {"retrieval.retrieve_k": 200, "retrieval.return_n": 100, "retrieval.max_chunks_per_document": 1}
MODES = {
    "dense": {"retrieval.mode": "dense"},
    "sparse (BM25)": {"retrieval.mode": "sparse"},
    "hybrid, RRF": {"retrieval.mode": "hybrid", "retrieval.fusion": "rrf"},
    "hybrid, DBSF": {"retrieval.mode": "hybrid", "retrieval.fusion": "dbsf"},
}


def prepared_tool(
    name: str | Path,
    cache: Path,
    store: str | None = None,
    ingest_overrides: dict[str, Any] | None = None,
    cached_vectors: bool = False,
) -> tuple[KnowledgeTool, dict[str, Any]]:
    base = {"store.path": str(cache / (store or name)), **(ingest_overrides or {})}
    config = load_config(overrides=base)
    console.print(f"ingesting {name} (cached at {base['store.path']}) ...")
    embedder = CachedEmbedder(build_embedder(config), cache / "embeddings") if cached_vectors else None
    report = ingest(DATA / name, config, progress=console.is_terminal, embedder=embedder)
    console.print(f"  {report.documents} documents, {report.points_in_store} chunks, {report.seconds:.0f} s")
    return KnowledgeTool.from_config(config), base


def run(tool: KnowledgeTool, base: dict[str, Any], overrides: dict[str, Any], queries, qrels) -> dict:
    variant = tool.variant(load_config(overrides={**base, **overrides}))
    result = evaluate(variant, queries, qrels)
    overall = result.metrics["overall"]
    return {
        "overrides": overrides,
        **{
            k: overall[k]
            for k in (
                "ndcg@10",
                "recall@10",
                "ndcg@return_n",
                "recall@return_n",
                "mrr@10",
                "map",
                "fallback_rate",
                "found_rate",
            )  # fmt: skip
        },
        "fallback_rate_by_reason": overall["fallback_rate_by_reason"],
        "queries": overall["judged_queries"],
        "queries_per_second": result.queries_per_second,
    }


def with_recall_at_100(
    tool: KnowledgeTool, base: dict[str, Any], overrides: dict[str, Any], queries, qrels
) -> dict:
    """The depth-10 run, plus recall@100 from a run returning 100 distinct documents."""
    row = run(tool, base, {**overrides, **DEPTH}, queries, qrels)
    row["recall@100"] = run(tool, base, {**overrides, **DEEP}, queries, qrels)["recall@return_n"]
    return row


def scifact(cache: Path) -> dict[str, dict]:
    queries = beir_queries("scifact")
    qrels = relevance(queries, load_qrels(DATA / "scifact" / "qrels.tsv"))
    rows = {}
    tool, base = prepared_tool("scifact", cache, "scifact-bm25", cached_vectors=True)
    with tool:
        for name, mode in MODES.items():
            rows[f"{name}, default pipeline"] = with_recall_at_100(tool, base, mode, queries, qrels)
        for name, overrides in STEPS.items():
            rows[name] = run(tool, base, {**overrides, **DEPTH}, queries, qrels)
    return rows


# What each step adds on SciFact (depth 10 each).
RRF, DBSF = {"retrieval.fusion": "rrf"}, {"retrieval.fusion": "dbsf"}
ONE_CHUNK = {"retrieval.max_chunks_per_document": 1}
NARROW = {"retrieval.prefetch_k": None}  # each prefetch only retrieve_k (20) wide
NARROW_NAME = "prefetch = retrieve_k (20)"
DEFAULT_PREFETCH = load_config().retrieval.prefetch_k
STEPS = {
    f"hybrid, RRF, {NARROW_NAME}": {**RRF, **NARROW},
    f"hybrid, DBSF, {NARROW_NAME}": {**DBSF, **NARROW},
    "hybrid, DBSF, prefetch 50": {**DBSF, "retrieval.prefetch_k": 50},
    "hybrid, DBSF, prefetch 400": {**DBSF, "retrieval.prefetch_k": 400},
    "hybrid, DBSF, no per-document cap": {**DBSF, "retrieval.max_chunks_per_document": None},
    "hybrid, DBSF, one chunk per document": {**DBSF, **ONE_CHUNK},
}  # fmt: skip


def scifact_sample(cache: Path, size: int) -> Path:
    """SciFact's test queries over a corpus sample: every judged document, then the first others."""
    folder = (cache / f"scifact-sample-{size}").resolve()
    if (folder / "qrels.tsv").is_file():
        return folder
    source = DATA / "scifact"
    judged = {line.split("\t")[1] for line in (source / "qrels.tsv").read_text().splitlines()[1:]}
    lines = (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    keep = [line for line in lines if json.loads(line)["_id"] in judged]
    keep += [line for line in lines if json.loads(line)["_id"] not in judged][: max(size - len(keep), 0)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("\n".join(keep) + "\n", encoding="utf-8")
    for name in ("queries.jsonl", "qrels.tsv"):
        (folder / name).write_bytes((source / name).read_bytes())
    return folder


def backends(cache: Path, size: int) -> dict[str, dict]:
    """Dense-only nDCG@10 per embedding backend (documents and queries both on it), MTEB setup."""
    data = scifact_sample(cache, size)
    queries = beir_queries(data)
    qrels = relevance(queries, load_qrels(data / "qrels.tsv"))
    rows = {}
    for backend, quantize in BACKENDS:
        name = backend if quantize == "none" else f"{backend}-{quantize}"
        choice = {"embedder.backend": backend, "embedder.quantize": quantize, "embedder.device": "cpu"}
        tool, base = prepared_tool(data, cache, f"{data.name}-{name}", {**WHOLE_DOCUMENTS, **choice})
        with tool:
            ran = {path: tool.embedder.encoder(path).backend for path in ("query", "document")}
            rows[name] = {**run(tool, base, DENSE_ONLY, queries, qrels), "ran": ran}
    # The default on a CPU: queries on onnx, searched over the documents openvino embedded.
    auto = {**WHOLE_DOCUMENTS, "embedder.backend": "auto", "embedder.device": "cpu"}
    tool, base = prepared_tool(data, cache, f"{data.name}-openvino", auto)
    with tool:
        ran = {path: tool.embedder.encoder(path).backend for path in ("query", "document")}
        rows["auto (per path)"] = {**run(tool, base, DENSE_ONLY, queries, qrels), "ran": ran}
    return rows


def classic(cache: Path) -> dict[str, dict]:
    plain = beir_queries("classic-dev")
    true_pinned = beir_queries("classic-dev", pin_category=True)
    wrong_pinned = true_pinned.assign(category=true_pinned["category"].map(WRONG_CATEGORY))
    qrels = relevance(plain, load_qrels(DATA / "classic-dev" / "qrels.tsv"))
    width = DEPTH
    tool, base = prepared_tool("classic-dev", cache, "classic-dev-bm25", cached_vectors=True)
    with tool:
        modes = {
            f"{name}, no filter": with_recall_at_100(tool, base, {**mode, "l0.enabled": False}, plain, qrels)
            for name, mode in MODES.items()
        }
        narrow = {**DBSF, **NARROW, **width, "l0.enabled": False}
        modes[f"hybrid, DBSF, {NARROW_NAME}, no filter"] = run(tool, base, narrow, plain, qrels)
        return {
            **modes,
            "no filter": run(tool, base, {**width, "l0.enabled": False}, plain, qrels),
            "true category pinned": run(tool, base, width, true_pinned, qrels),
            "wrong category pinned, fallback on": run(tool, base, width, wrong_pinned, qrels),
            "wrong category pinned, fallback off": run(
                tool, base, {**width, "retrieval.fallback": False}, wrong_pinned, qrels
            ),
        }


def mix(cache: Path) -> dict[str, dict]:
    """The second mix (classic-dev + SciFact as ``science``): each mode, no filter."""
    folder = classic_scifact_mix(cache).resolve()
    queries = beir_queries(folder)
    qrels = relevance(queries, load_qrels(folder / "qrels.tsv"))
    tool, base = prepared_tool(folder, cache, "mix-classic-scifact-bm25", cached_vectors=True)
    with tool:
        rows = {
            f"{name}, no filter": with_recall_at_100(
                tool, base, {**mode, "l0.enabled": False}, queries, qrels
            )
            for name, mode in MODES.items()
        }
        narrow = {**DBSF, **NARROW, **DEPTH, "l0.enabled": False}
        rows[f"hybrid, DBSF, {NARROW_NAME}, no filter"] = run(tool, base, narrow, queries, qrels)
        return rows


def hugo(cache: Path) -> dict[str, dict]:
    """hugo-docs, each page's frontmatter description as its query (``benchmarks/corpora.py``):
    each mode with L0 deriving the category filter, as in use, and hybrid without L0."""
    folder = hugo_described_pages(cache).resolve()
    queries = beir_queries(folder)
    qrels = relevance(queries, load_qrels(folder / "qrels.tsv"))
    tool, base = prepared_tool("hugo-docs", cache, "hugo-docs-bm25", cached_vectors=True)
    with tool:
        rows = {
            f"{name}, default pipeline": with_recall_at_100(tool, base, mode, queries, qrels)
            for name, mode in MODES.items()
        }
        no_l0 = {**DBSF, **DEPTH, "l0.enabled": False}
        rows["hybrid, DBSF, L0 off (no filter)"] = run(tool, base, no_l0, queries, qrels)
        return rows


def hugo_timings(cache: Path, queries: int = 200) -> dict[str, Any]:
    """hugo-docs (markdown, no judgments): ingest time and warm lookup latency per mode, the
    queries being the first documents' titles."""
    tool, base = prepared_tool("hugo-docs", cache, "hugo-docs-bm25", cached_vectors=True)
    documents = read_corpus(DATA / "hugo-docs").documents
    titles = [doc.title for doc in documents if doc.title][:queries]
    chunks = sum(len(chunk_document(doc, tool.config.ingest.chunk_chars)) for doc in documents)
    timings: dict[str, Any] = {"queries": len(titles), "chunks": chunks}
    with tool:
        tools = {name: tool.variant(load_config(overrides={**base, **mode})) for name, mode in MODES.items()}
        elapsed: dict[str, list[float]] = {name: [] for name in tools}
        for title in titles[:20]:  # warm-up
            for variant in tools.values():
                variant.lookup(title)
        encoder = tool.embedder.encoder("query")
        for title in titles:  # modes side by side per query: the same machine load
            for name, variant in tools.items():
                encoder.encode(["shape"], 1)  # each mode meets a new input shape, as in use
                started = time.perf_counter()
                variant.lookup(title)
                elapsed[name].append((time.perf_counter() - started) * 1000)
    timings["lookup_p50_ms"] = {name: statistics.median(ms) for name, ms in elapsed.items()}
    return timings


def print_table(title: str, rows: dict[str, dict]) -> None:
    table = Table(title=title)
    for column in ("run", "nDCG@10", "recall@10", "MRR@10", "fallback rate", "q/s"):
        table.add_column(column)
    for name, r in rows.items():
        table.add_row(
            name, f"{r['ndcg@10']:.4f}", f"{r['recall@10']:.4f}", f"{r['mrr@10']:.4f}",
            f"{r['fallback_rate']:.3f}", f"{r['queries_per_second']:.0f}",
        )  # fmt: skip
    console.print(table)


def section(results: dict[str, Any]) -> str:
    """The generated section of docs/quality.md: every table of this run, when and where it ran,
    and what the rows show (the prose around it is the doc's own)."""

    def rows(block: dict[str, dict]) -> list[str]:
        out = [
            "| run | nDCG@10 | recall@10 | recall@100 | nDCG@10 of the 10 blocks returned | MRR@10 "
            "| fallback rate |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, r in block.items():
            deep = f"{r['recall@100']:.4f}" if "recall@100" in r else "-"
            scores = " | ".join(f"{r[k]:.4f}" for k in ("ndcg@10", "recall@10"))
            tail = " | ".join(f"{r[k]:.4f}" for k in ("ndcg@return_n", "mrr@10"))
            out.append(f"| {n} | {scores} | {deep} | {tail} | {r['fallback_rate']:.3f} |")
        return out

    hugo, ran = results["hugo-docs"], results.get("measured", {})
    return "\n".join(
        [
            SECTION,
            "",
            f"Measured by `python benchmarks/quality.py` on {ran.get('machine', MACHINE)}; nDCG and "
            "recall do not depend on the machine or its load, the hugo-docs timings do.",
            "",
            "### SciFact (BEIR test split, 300 queries)",
            "",
            *rows(results["scifact"]),
            "",
            "### classic-dev (414 judged queries, 4 domains)",
            "",
            *rows(results["classic-dev"]),
            "",
            f"Under a wrong filter the fallback recovers {results['fallback_recovery']:.1%} of the "
            "unfiltered nDCG@10 (target: at least 95%); without it, "
            f"{results['no_fallback_recovery']:.1%}.",
            "",
            "### classic-dev + SciFact mix (714 judged queries, 5 domains; `benchmarks/corpora.py`)",
            "",
            *rows(results["mix"]),
            "",
            f"### hugo-docs ({results['hugo-docs-described']['dense, default pipeline']['queries']} pages, "
            "each page's frontmatter description as its query, the page as its answer; "
            "`benchmarks/corpora.py`)",
            "",
            "The description is not indexed. L0 derives the category filter from each description "
            "as it would for an agent's query (17 domains), so these rows include the fallback.",
            "",
            *rows(results["hugo-docs-described"]),
            "",
            f"hugo-docs timings: {hugo['chunks']} chunks; warm lookup p50 over {hugo['queries']} queries "
            "(document titles), the modes side by side per query: "
            + ", ".join(f"{name} {ms:.1f} ms" for name, ms in hugo["lookup_p50_ms"].items())
            + ".",
            "",
            *shown(results),
        ]
    )


def shown(results: dict[str, Any]) -> list[str]:
    """What the rows show: each default's margin over its alternatives, computed from them."""

    def ndcg(block: str, run: str, measure: str = "ndcg@10") -> float:
        return results[block][run][measure]

    sci = {m: ndcg("scifact", f"{m}, default pipeline") for m in MODES}
    cla = {m: ndcg("classic-dev", f"{m}, no filter") for m in MODES}
    mixed = {m: ndcg("mix", f"{m}, no filter") for m in MODES}
    pages = {m: ndcg("hugo-docs-described", f"{m}, default pipeline") for m in MODES}
    best = max(results["scifact"].items(), key=lambda item: item[1]["ndcg@10"])
    narrow = f"hybrid, DBSF, {NARROW_NAME}"

    def over(a: dict[str, float], b: str, c: str) -> str:
        return f"{a[b] - a[c]:+.4f}"

    return [
        "What the rows show (nDCG@10):",
        "",
        f"- hybrid DBSF over dense: SciFact {over(sci, 'hybrid, DBSF', 'dense')}, classic-dev "
        f"{over(cla, 'hybrid, DBSF', 'dense')}, the mix {over(mixed, 'hybrid, DBSF', 'dense')}, "
        f"hugo-docs {over(pages, 'hybrid, DBSF', 'dense')}; BM25 alone over hybrid DBSF on "
        f"hugo-docs {over(pages, 'sparse (BM25)', 'hybrid, DBSF')}.",
        f"- DBSF over RRF: SciFact {over(sci, 'hybrid, DBSF', 'hybrid, RRF')}, classic-dev "
        f"{over(cla, 'hybrid, DBSF', 'hybrid, RRF')}, the mix {over(mixed, 'hybrid, DBSF', 'hybrid, RRF')}.",
        f"- prefetch {DEFAULT_PREFETCH} wide over `retrieve_k` (20): SciFact "
        f"{sci['hybrid, DBSF'] - ndcg('scifact', narrow):+.4f}, classic-dev "
        f"{cla['hybrid, DBSF'] - ndcg('classic-dev', f'{narrow}, no filter'):+.4f}, the mix "
        f"{mixed['hybrid, DBSF'] - ndcg('mix', f'{narrow}, no filter'):+.4f}.",
        f"- SciFact target (nDCG@10 >= 0.74, default pipeline, depth 10): "
        f"{'met' if sci['hybrid, DBSF'] >= 0.74 else 'not met'} ({sci['hybrid, DBSF']:.4f}); the best "
        f"variant measured: {best[0]}, {best[1]['ndcg@10']:.4f}.",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/quality.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/quality.md"))
    parser.add_argument(
        "--backends", type=int, metavar="DOCS", default=None,
        help="only compare embedding backends on a SciFact sample of DOCS abstracts (judged ones included)",
    )  # fmt: skip
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc from --out")
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text()))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    if args.backends:
        return compare_backends(args.cache, args.backends, args.out.with_name("quality_backends.json"))
    started, load = time.perf_counter(), os.getloadavg()[0]
    results: dict[str, Any] = {
        "scifact": scifact(args.cache),
        "classic-dev": classic(args.cache),
        "mix": mix(args.cache),
        "hugo-docs-described": hugo(args.cache),
        "hugo-docs": hugo_timings(args.cache),
    }
    cla = results["classic-dev"]
    unfiltered = cla["no filter"]["ndcg@10"]
    results["fallback_recovery"] = cla["wrong category pinned, fallback on"]["ndcg@10"] / unfiltered
    results["no_fallback_recovery"] = cla["wrong category pinned, fallback off"]["ndcg@10"] / unfiltered
    results["seconds"] = time.perf_counter() - started
    results["measured"] = measured(load)
    print_table("SciFact", results["scifact"])
    print_table("classic-dev", cla)
    print_table("classic-dev + SciFact mix", results["mix"])
    print_table("hugo-docs, page descriptions", results["hugo-docs-described"])
    console.print(f"hugo-docs lookup p50 ms per mode: {results['hugo-docs']['lookup_p50_ms']}")
    console.print(
        f"fallback recovery under a wrong filter: {results['fallback_recovery']:.1%} (target >= 95%)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    write_doc(args.doc, results)
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


CURRENT = {  # the default pipeline's row of each set, for the doc's table of current figures
    "SciFact": ("scifact", "hybrid, DBSF, default pipeline"),
    "classic-dev": ("classic-dev", "hybrid, DBSF, no filter"),
    "classic-dev + SciFact mix": ("mix", "hybrid, DBSF, no filter"),
    "hugo-docs": ("hugo-docs-described", "hybrid, DBSF, default pipeline"),
}


def current_table(results: dict[str, Any]) -> str:
    """The default pipeline's nDCG@10 and recall@10 per set (docs/quality.md, current figures)."""
    rows = ["| set | nDCG@10 | recall@10 | recall@100 |", "|---|---:|---:|---:|"]
    for name, (block, run_name) in CURRENT.items():
        r = results[block][run_name]
        deep = f"{r['recall@100']:.4f}" if "recall@100" in r else "-"
        rows.append(f"| {name} | {r['ndcg@10']:.4f} | {r['recall@10']:.4f} | {deep} |")
    return "\n".join(rows)


def write_doc(doc: Path, results: dict[str, Any]) -> None:
    """This run's section of docs/quality.md and its table of current figures, in place (the
    doc's prose and the other benchmarks' sections are kept)."""
    replace_section(doc, SECTION, section(results))
    replace_table(doc, "quality-current", current_table(results))


def compare_backends(cache: Path, size: int, out: Path) -> int:
    started = time.perf_counter()
    rows = backends(cache, size)
    torch_ndcg = rows["torch"]["ndcg@10"]
    for row in rows.values():
        row["ndcg@10_vs_torch"] = row["ndcg@10"] - torch_ndcg
        row["eligible_as_default"] = row["ndcg@10_vs_torch"] >= -0.005
    print_table(f"SciFact sample ({size} abstracts, 300 test queries), dense only, per backend", rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"sample_docs": size, "rows": rows, "seconds": time.perf_counter() - started}, indent=2)
    )
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

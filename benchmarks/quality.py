"""Retrieval quality on real data: SciFact nDCG@10 and the category filter/fallback on classic-dev.

    python benchmarks/quality.py [--cache benchmarks/.cache] [--out benchmarks/results/quality.json]

Both corpora are ingested with the default configuration into cached stores (re-runs skip
unchanged documents). Results go to JSON and to docs/quality.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.eval.data import beir_to_parquet, load_eval_queries, load_qrels, relevance
from lookup_knowledge.eval.evaluation import evaluate

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PUBLISHED_SCIFACT = 0.645  # all-MiniLM-L6-v2 dense, MTEB
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
FALLBACK_SECTION = "## Fallback decision: wrong and right category filters"
console = Console()


def beir_queries(name: str | Path, pin_category: bool = False) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.parquet"
        beir_to_parquet(DATA / name, path, pin_category=pin_category)
        return load_eval_queries(path)


WHOLE_DOCUMENTS = {"ingest.chunk_chars": 100_000}  # one chunk per abstract, as MTEB embeds them
BACKENDS = [("torch", "none"), ("onnx", "none"), ("onnx", "int8"), ("openvino", "none"), ("openvino", "int8")]


def prepared_tool(
    name: str | Path, cache: Path, store: str | None = None, ingest_overrides: dict[str, Any] | None = None
) -> tuple[KnowledgeTool, dict[str, Any]]:
    base = {"store.path": str(cache / (store or name)), **(ingest_overrides or {})}
    config = load_config(overrides=base)
    console.print(f"ingesting {name} (cached at {base['store.path']}) ...")
    report = ingest(DATA / name, config, progress=console.is_terminal)
    console.print(f"  {report.documents} documents, {report.points_in_store} chunks, {report.seconds:.0f} s")
    return KnowledgeTool.from_config(config), base


def run(tool: KnowledgeTool, base: dict[str, Any], overrides: dict[str, Any], queries, qrels) -> dict:
    variant = KnowledgeTool(
        load_config(overrides={**base, **overrides}),
        search_port=tool.search_port,
        embedder=tool.embedder,
        l0_index=tool.l0_index,
    )
    result = evaluate(variant, queries, qrels)
    overall = result.metrics["overall"]
    return {
        "overrides": overrides,
        **{k: overall[k] for k in ("ndcg@10", "recall@10", "mrr@10", "map", "fallback_rate", "found_rate")},
        "fallback_rate_by_reason": overall["fallback_rate_by_reason"],
        "queries": overall["judged_queries"],
        "queries_per_second": result.queries_per_second,
    }


def scifact(cache: Path) -> dict[str, dict]:
    queries = beir_queries("scifact")
    qrels = relevance(queries, load_qrels(DATA / "scifact" / "qrels.tsv"))
    rows = {}
    tool, base = prepared_tool("scifact", cache, "scifact-whole", WHOLE_DOCUMENTS)
    with tool:
        rows["dense only, one chunk per document (MTEB setup)"] = run(tool, base, DENSE_ONLY, queries, qrels)
    tool, base = prepared_tool("scifact", cache)
    with tool:
        rows["dense only, default chunking"] = run(tool, base, DENSE_ONLY, queries, qrels)
        rows["default pipeline, return_n 10"] = run(tool, base, {"retrieval.return_n": 10}, queries, qrels)
        rows["default pipeline as shipped (return_n 5)"] = run(tool, base, {}, queries, qrels)
    return rows


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
    width = {"retrieval.return_n": 10}
    tool, base = prepared_tool("classic-dev", cache)
    with tool:
        return {
            "no filter": run(tool, base, {**width, "l0.enabled": False}, plain, qrels),
            "true category pinned": run(tool, base, width, true_pinned, qrels),
            "wrong category pinned, fallback on": run(tool, base, width, wrong_pinned, qrels),
            "wrong category pinned, fallback off": run(
                tool, base, {**width, "retrieval.fallback": False}, wrong_pinned, qrels
            ),
        }


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


def markdown(results: dict[str, Any]) -> str:
    def rows(block: dict[str, dict]) -> list[str]:
        out = ["| run | nDCG@10 | recall@10 | MRR@10 | fallback rate |", "|---|---|---|---|---|"]
        for n, r in block.items():
            scores = f"{r['ndcg@10']:.4f} | {r['recall@10']:.4f} | {r['mrr@10']:.4f}"
            out.append(f"| {n} | {scores} | {r['fallback_rate']:.3f} |")
        return out

    sci, cla = results["scifact"], results["classic-dev"]
    dense = sci["dense only, one chunk per document (MTEB setup)"]["ndcg@10"]
    chunked = sci["dense only, default chunking"]["ndcg@10"]
    lines = [
        "# Retrieval quality",
        "",
        "Measured by `python benchmarks/quality.py` (default configuration, all-MiniLM-L6-v2, "
        "documents chunked by `ingest.chunk_chars`; a document's rank is its best chunk's rank).",
        "",
        "## SciFact (BEIR test split, 300 queries)",
        "",
        *rows(sci),
        "",
        f"Dense retrieval alone, embedding each abstract whole as MTEB does: nDCG@10 {dense:.4f} vs "
        f"the published {PUBLISHED_SCIFACT} (difference {dense - PUBLISHED_SCIFACT:+.4f}). With the "
        f"default chunking ({load_config().ingest.chunk_chars} chars) dense retrieval reaches "
        f"{chunked:.4f}: later chunks of long abstracts are embedded too instead of being cut at "
        "the model's 256 tokens. Boosts are inert here (the corpus has no keywords or entities); "
        "the default pipeline returns 10 blocks (at most 2 per document) where the dense-only run "
        "returns 30, hence its slightly lower figure, still above the published one. "
        "The shipped default returns 5 blocks, so its nDCG@10 is computed over at most 5 documents.",
        "",
        "## classic-dev: category filter and fallback (414 judged queries, 4 domains)",
        "",
        *rows(cla),
        "",
        f"Under a wrong filter the fallback recovers {results['fallback_recovery']:.1%} of the "
        "unfiltered nDCG@10 (target: at least 95%); without it, "
        f"{results['no_fallback_recovery']:.1%}.",
        "",
        f"Reference threshold in force: {results['reference_threshold']}.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/quality.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/quality.md"))
    parser.add_argument(
        "--backends", type=int, metavar="DOCS", default=None,
        help="only compare embedding backends on a SciFact sample of DOCS abstracts (judged ones included)",
    )  # fmt: skip
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    if args.backends:
        return compare_backends(args.cache, args.backends, args.out.with_name("quality_backends.json"))
    started = time.perf_counter()
    results: dict[str, Any] = {"scifact": scifact(args.cache), "classic-dev": classic(args.cache)}
    cla = results["classic-dev"]
    unfiltered = cla["no filter"]["ndcg@10"]
    results["fallback_recovery"] = cla["wrong category pinned, fallback on"]["ndcg@10"] / unfiltered
    results["no_fallback_recovery"] = cla["wrong category pinned, fallback off"]["ndcg@10"] / unfiltered
    results["reference_threshold"] = load_config().retrieval.reference_threshold
    results["seconds"] = time.perf_counter() - started
    print_table("SciFact", results["scifact"])
    print_table("classic-dev", cla)
    console.print(
        f"fallback recovery under a wrong filter: {results['fallback_recovery']:.1%} (target >= 95%)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    kept = args.doc.read_text(encoding="utf-8").partition(FALLBACK_SECTION)[2] if args.doc.is_file() else ""
    fallback = f"\n{FALLBACK_SECTION}{kept}" if kept else ""  # written by benchmarks/fallback_quality.py
    args.doc.write_text(markdown(results) + fallback, encoding="utf-8")
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


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

"""The category filter's fallback on multi-domain data: wrong and right filters, both fallback rules.

    python benchmarks/fallback_quality.py [--cache benchmarks/.cache] [--doc docs/quality.md]

For classic-dev, a five-domain mix (classic-dev + SciFact as ``science``, built by
``benchmarks/corpora.py``) and hugo-docs (each page's description as the query, 17 domains, a
set the rules were not tuned on) it pins each query's true category, a deliberately wrong one (the
``eval-queries --categories wrong`` choice) and every wrong one in turn, and reports the eval
filter headline for the relative rule (default) and the old fixed threshold: the share of the
unfiltered nDCG@10 kept under a wrong filter, and the share of the pure filter's gain kept under
a right one (nDCG@10 at depth 10: ``return_n`` 10). The result replaces the "Fallback decision"
section of docs/quality.md and goes to benchmarks/results/fallback_quality.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpora import DATA, CachedEmbedder, classic_scifact_mix, hugo_described_pages  # noqa: E402
from doc_sections import replace_section

from lookup_knowledge import KnowledgeTool, ingest, load_config  # noqa: E402
from lookup_knowledge.eval.data import beir_to_parquet, load_eval_queries, load_qrels, relevance  # noqa: E402
from lookup_knowledge.eval.evaluation import (  # noqa: E402
    FilterReferences,
    evaluate,
    filter_headline,
    filter_references,
)
from lookup_knowledge.stores import build_embedder  # noqa: E402

SECTION = "## Fallback decision: wrong and right category filters"
DEPTH = {"retrieval.return_n": 10}  # nDCG@10 over 10 returned blocks
RULES = {
    "relative (default)": {},
    "relative, cosines only": {"retrieval.fallback_sparse_ratio": 0.0},  # without the BM25 comparison
    "threshold 0.45 (old)": {"retrieval.fallback_rule": "threshold", "retrieval.reference_threshold": 0.45},
}
console = Console()
DESIGN = [
    "### How the decision works, and why",
    "",
    "With a category filter (and `retrieval.fallback` on), the filtered search and the same query "
    "unfiltered go to the store as one `search_batch` request: one embedding, two searches in one "
    "round trip, never a third. The decision then compares the two lists of the same query, in "
    "this order (the trace's `fallbackDecision.fired` names the branch, `used` whose hits became "
    "the candidates, and each attempt says `used` and lists its `hitKeys`):",
    "",
    "1. the filtered search raised: unfiltered hits, `filtered_vector_error` (a failed batch is "
    "retried alone, unfiltered first, to find the failing request);",
    "2. the filtered search has no usable hit: unfiltered hits, `filtered_vector_no_evidence`;",
    "3. the unfiltered companion raised or found nothing: the filtered hits stand;",
    "4. the filter holds up when its top normalized score is at least `fallback_score_ratio` "
    "(0.75) times the unfiltered top: filtered hits; else unfiltered hits, "
    "`filtered_vector_low_quality` (`fired`: `filter_lost`);",
    "5. in sparse and hybrid mode it must also keep the query's best term matches: its top BM25 "
    "score at least `fallback_sparse_ratio` (0.6) times the unfiltered top BM25 score; else "
    "unfiltered hits, `filtered_vector_low_quality` (`fired`: `filter_lost_terms`);",
    "6. and the query's distinctive codes (`--editor`, `collections.Complement`, `E4471`): when an "
    "unfiltered hit holds one verbatim that no filtered hit holds, the filter left out the chunk the "
    'query names ("editor" routes "what does --editor do" to the editors page\'s category, the '
    "`hugo new` options that list the flag in another): unfiltered hits, "
    "`filtered_vector_low_quality` (`fired`: `filter_lost_code`).",
    "",
    "Why a ratio of the two top scores: a right filter removes off-domain distractors but keeps "
    "the query's best in-domain matches, so its top score stays close to the unfiltered top (often "
    "equal: the unfiltered best hit is in the category). A wrong filter keeps only off-domain "
    "documents, whose best score falls well below the unfiltered best. The ratio compares the "
    "query with itself, so it does not move with the corpus, the query's wording or the model's "
    "score range, which is what broke the fixed `reference_threshold`: on the mix the old cut of "
    "0.45 keeps less than half of a right filter's gain, because right filters of hard queries "
    "also score below 0.45. The trace also reports the overlap of the two lists (the share of "
    "unfiltered hits the filter kept) to explain a decision; the rule does not read it: on these "
    "sets overlap rules either dropped the gain of right filters whose distractors fill the top "
    "(classic-dev keeps 49% at best) or kept neighbour-domain wrong filters.",
    "",
    "Why BM25 too (sparse and hybrid mode): a small embedding model scores off-domain text close "
    "to on-domain text, so some wrong filters keep 75% of the unfiltered cosine; they rarely keep "
    "the query's rare terms. The store scores BM25 with one collection-wide IDF, filtered or not, "
    "so the two top scores compare like the cosines do. The ratio was chosen on classic-dev and the "
    "mix by a sweep over the store's own rankings (each query's filtered and unfiltered top ten, "
    "before post-processing): every right filter's gain held from 0.5 to 0.75 while more wrong "
    "filters fell back, and at 0.8 the mix lost a sixth of it, so 0.6 keeps a margin. The rows "
    "`relative, cosines only` above are the same rule without the BM25 comparison. It matters most "
    "on hugo-docs, whose 17 domains are all about Hugo and whose queries are one-line descriptions, "
    "so the cosines of a wrong domain stay close; there no ratio meets 98% for wrong filters with "
    "80% of the right filters' gain. Dense mode has no BM25 score and decides on the cosines alone.",
    "",
    "Tuning (only on ../shared/data): the per-query filtered and unfiltered top-20 lists were "
    "searched once and the rule families replayed offline (fixed threshold, top-score ratio, "
    "mean-of-top-m ratio, top-k overlap, and their and/or combinations). On the mix, a score ratio "
    "between 0.70 and 0.78 met both targets (wrong filter >= 98% with the `wrong` pin, right filter "
    ">= 80% of the gain); 0.75 sits in the middle. The pure filter's gain rests on few queries "
    "(classic-dev's four domains barely overlap; on the mix a few claims carry much of it): read the "
    "gain shares as coarse, a few queries' noise rather than a calibration to chase.",
    "",
    "Pinning *every* wrong category in turn leaves misses in neighbour domains: SciFact claims "
    "pinned to `medicine`, where a Medline abstract is the unfiltered best hit or scores within both "
    "ratios of it, so the two lists look like a right filter's. A stricter rule on these two lists "
    "loses the right filters' gain first.",
    "",
    "Dense, sparse, hybrid: the dense comparison reads only the `normalized_score` the store "
    "adapter reports for each hit, and needs one property of it: the filtered and the unfiltered "
    "search of one query are scored on the same scale. In every retrieval mode that score is the "
    "hit's dense "
    "cosine (the store scores the hit's dense vector when it ranked by BM25 or by fusion): "
    "reciprocal-rank fusion scores each list by rank, so both tops would score alike. The "
    "figures above are the shipped hybrid default; under hybrid the pure filter's gain over the "
    "unfiltered search is smaller than under dense retrieval (hybrid already ranks most in-domain "
    "documents first), so its share rests on even fewer queries. "
    "`fallback_rule: threshold` keeps the old fixed cut for "
    "comparison (the unfiltered search still rides in the same batch).",
    "",
]


def pinned_queries(folder: Path, categories: str) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.parquet"
        beir_to_parquet(folder, path, categories=categories)
        return load_eval_queries(path)


def every_wrong(true_pins: pd.DataFrame, categories: list[str]) -> pd.DataFrame:
    """Each query once per category that is not its own (query ids suffixed with the pin)."""
    rows = [
        {**row, "query_id": f"{row['query_id']}|{category}", "category": category}
        for row in true_pins.to_dict("records")
        for category in categories
        if category != row["true_category"]
    ]
    return pd.DataFrame(rows)


def suffixed_qrels(qrels: dict, queries: pd.DataFrame) -> dict:
    return {qid: qrels[qid.split("|")[0]] for qid in queries["query_id"]}


def measure(
    name: str, folder: Path, store: Path, embedder: CachedEmbedder, documents: Path | None = None
) -> dict[str, Any]:
    """Both rules on one set: ``folder`` holds its queries and judgments (a BEIR folder) and,
    unless ``documents`` names another folder, its documents."""
    base = {"store.path": str(store), **DEPTH}
    console.print(f"ingesting {name} into {store} (cached) ...")
    ingest(documents or folder, load_config(overrides=base), embedder=embedder)
    true_pins = pinned_queries(folder, "true")
    wrong_pins = pinned_queries(folder, "wrong")
    qrels = relevance(true_pins, load_qrels(folder / "qrels.tsv"))
    categories = sorted(set(true_pins["true_category"]))
    all_wrong = every_wrong(true_pins, categories)
    all_qrels = suffixed_qrels(qrels, all_wrong)
    results: dict[str, Any] = {"queries": len(true_pins), "categories": categories, "rules": {}}
    with KnowledgeTool(load_config(overrides=base), embedder=embedder) as tool:
        references = filter_references(tool, true_pins, qrels)  # the same for every rule
        expanded = FilterReferences(  # keyed like the every-wrong query ids
            unfiltered=references.unfiltered.reindex(
                [q.split("|")[0] for q in all_wrong["query_id"]]
            ).set_axis(all_wrong["query_id"]),
            pure_filter=references.pure_filter,
        )
        for rule, overrides in RULES.items():
            config = load_config(overrides={**base, **overrides})
            variant = tool.variant(config)
            row: dict[str, Any] = {}
            for label, queries, judged, refs in (
                ("right", true_pins, qrels, references),
                ("wrong", wrong_pins, qrels, references),
                ("every_wrong", all_wrong, all_qrels, expanded),
            ):
                run = evaluate(variant, queries, judged)
                headline = filter_headline(variant, queries, judged, run, refs) or {}
                row[label] = headline["right_filter" if label == "right" else "wrong_filter"]
                row[label]["fallback_rate"] = run.metrics["overall"]["fallback_rate"]
            results["rules"][rule] = row
            console.print(f"  {rule}: {summary(row)}")
    return results


def summary(row: dict[str, Any]) -> str:
    return (
        f"wrong {row['wrong']['share_of_unfiltered_kept']:.1%}, every wrong "
        f"{row['every_wrong']['share_of_unfiltered_kept']:.1%}, right gain kept "
        f"{_share(row['right']['share_of_filter_gain_kept'])}"
    )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def markdown(results: dict[str, Any], score_ratio: float, sparse_ratio: float) -> str:
    lines = [
        SECTION,
        "",
        "Measured by `python benchmarks/fallback_quality.py` (nDCG@10 at depth 10: `return_n` 10; "
        "every query pinned to a category, once its own, once a deliberately wrong one as "
        "`eval-queries --categories wrong` picks it, and once each of the other categories).",
        "",
    ]
    for corpus, r in results["corpora"].items():
        right = next(iter(r["rules"].values()))["right"]
        lines += [
            f"### {corpus} ({r['queries']} judged queries, {len(r['categories'])} domains)",
            "",
            f"Unfiltered nDCG@10 {right['unfiltered_ndcg@10']:.4f}; the pure filter (true category, "
            f"no fallback) {right['pure_filter_ndcg@10']:.4f}.",
            "",
            "| rule | wrong filter: share of unfiltered nDCG@10 kept | every wrong category | "
            "right filter: share of the pure filter's gain kept | fallback rate (wrong / right) |",
            "|---|---|---|---|---|",
        ]
        for rule, row in r["rules"].items():
            lines.append(
                f"| {rule} | {_share(row['wrong']['share_of_unfiltered_kept'])} "
                f"({row['wrong']['ndcg@10']:.4f}) | {_share(row['every_wrong']['share_of_unfiltered_kept'])} "
                f"| {_share(row['right']['share_of_filter_gain_kept'])} ({row['right']['ndcg@10']:.4f}) "
                f"| {row['wrong']['fallback_rate']:.3f} / {row['right']['fallback_rate']:.3f} |"
            )
        lines.append("")
    lines += [
        f"Relative rule in force: `fallback_score_ratio` {score_ratio}, "
        f"`fallback_sparse_ratio` {sparse_ratio}.",
        "",
        *DESIGN,
    ]
    return "\n".join(lines)


def _ratios() -> tuple[float, float]:
    retrieval = load_config().retrieval
    return retrieval.fallback_score_ratio, retrieval.fallback_sparse_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/fallback_quality.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/quality.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc section from --out")
    args = parser.parse_args()
    if args.from_json:
        results = json.loads(args.out.read_text())
        replace_section(args.doc, SECTION, markdown(results, *_ratios()))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    started = time.perf_counter()
    embedder = CachedEmbedder(build_embedder(load_config()), args.cache / "embeddings")
    corpora = {
        "classic-dev": (DATA / "classic-dev", args.cache / "classic-dev-bm25"),
        "classic-dev + SciFact (science)": (
            classic_scifact_mix(args.cache),
            args.cache / "mix-classic-scifact-bm25",
        ),
    }
    results: dict[str, Any] = {
        "corpora": {name: measure(name, folder, store, embedder) for name, (folder, store) in corpora.items()}
    }
    hugo = "hugo-docs (page descriptions)"
    results["corpora"][hugo] = measure(
        hugo, hugo_described_pages(args.cache), args.cache / "hugo-docs-bm25", embedder, DATA / "hugo-docs"
    )
    results["seconds"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    replace_section(args.doc, SECTION, markdown(results, *_ratios()))
    console.print(f"wrote {args.out} and the fallback section of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

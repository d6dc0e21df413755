"""Verbatim evidence: are chunks the source's own text, and what did the chunking cost in ranking?

    python benchmarks/verbatim.py [--label after] [--ndcg hugo-docs classic-dev scifact]

Over every chunk of a whole hugo-docs store (chunked with the default ``ingest.chunk_chars``):
the share that is a byte-exact excerpt of its page (after newline normalization; with a
location, ``source[startChar:endChar]`` and its line range must match), the share holding an
unbalanced code fence (an odd number of fence lines), and the share under 150 characters.
With ``--ndcg``, nDCG@10 of the default pipeline (hybrid, DBSF, ten blocks) per named set, each
ingested into a store of this label under ``--cache`` (chunk vectors from the embedding cache of
``benchmarks/corpora.py``). Prints a table; writes ``benchmarks/results/verbatim-<label>.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from corpora import DATA, CachedEmbedder, hugo_described_pages
from doc_sections import replace_section
from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.eval.data import load_qrels, relevance
from lookup_knowledge.eval.evaluation import evaluate
from lookup_knowledge.stores import build_embedder

SECTION = "## Verbatim chunks, before and after"  # a comparison of two versions: its own section
TINY_CHARS = 150
FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
DEFAULT_RUN = {"retrieval.mode": "hybrid", "retrieval.fusion": "dbsf", "retrieval.return_n": 10}
console = Console()


def source_text(path: Path) -> str:
    """A page as the chunk offsets read it: UTF-8 without its byte-order mark, newlines as \\n."""
    return path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")


def _located(chunk: Any, text: str) -> bool:
    """The chunk's location (when it has one) points at exactly its content."""
    location = getattr(chunk, "location", None)
    if location is None:
        return chunk.content in text
    start, end = location.start_char, location.end_char
    first_line, last_line = text.count("\n", 0, start) + 1, text.count("\n", 0, max(start, end - 1)) + 1
    exact = text[start:end] == chunk.content
    return exact and (location.start_line, location.end_line) == (first_line, last_line)


def chunk_shares(folder: Path, chunk_chars: int) -> dict[str, Any]:
    """Verbatim, unbalanced-fence and tiny shares over every chunk of the markdown ``folder``."""
    counts = {"chunks": 0, "verbatim": 0, "located": 0, "unbalanced_fence": 0, "tiny": 0}
    for doc in read_corpus(folder).documents:
        text = source_text(folder / doc.source)
        for chunk in chunk_document(doc, chunk_chars):
            counts["chunks"] += 1
            counts["verbatim"] += chunk.content in text
            counts["located"] += getattr(chunk, "location", None) is not None and _located(chunk, text)
            counts["unbalanced_fence"] += len(FENCE_LINE.findall(chunk.content)) % 2
            counts["tiny"] += len(chunk.content) < TINY_CHARS
    total = counts["chunks"]
    return {**counts, **{f"{k}_share": counts[k] / total for k in counts if k != "chunks"}}


def _queries_and_judgments(name: str, cache: Path) -> tuple[Any, Any]:
    from quality import beir_queries  # imports the whole quality benchmark: only when ranking

    folder = hugo_described_pages(cache).resolve() if name == "hugo-docs" else DATA / name
    queries = beir_queries(folder)
    return queries, relevance(queries, load_qrels(folder / "qrels.tsv"))


def ndcg(name: str, cache: Path, label: str, config_path: Path | None) -> dict[str, Any]:
    """nDCG@10 and recall@10 of the default pipeline on a store of ``name`` chunked by this code."""
    queries, qrels = _queries_and_judgments(name, cache)
    overrides = {"store.path": str(cache / f"{name}-verbatim-{label}")}
    config = load_config(config_path, overrides=overrides)
    embedder = CachedEmbedder(build_embedder(config), cache / "embeddings")
    report = ingest(DATA / name, config, embedder=embedder)
    console.print(
        f"{name}: {report.documents} documents, {report.points_in_store} chunks, {report.seconds:.0f} s"
    )
    tool = KnowledgeTool.from_config(load_config(config_path, overrides={**overrides, **DEFAULT_RUN}))
    with tool:
        overall = evaluate(tool, queries, qrels).metrics["overall"]
    keys = ("ndcg@10", "recall@10", "found_rate", "fallback_rate")
    return {"chunks": report.points_in_store, **{k: overall[k] for k in keys}}


def section(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The docs/quality.md section comparing a ``before`` and an ``after`` run."""
    b, a = before["hugo-docs chunks"], after["hugo-docs chunks"]
    lines = [
        SECTION, "",
        "Measured by `python benchmarks/verbatim.py` (chunk shares over every chunk of a whole hugo-docs "
        "store; nDCG@10 of the default pipeline, hybrid DBSF, ten blocks, each set ingested into a store of "
        "its own), before and after chunks became verbatim excerpts with a location "
        "(`lookup_knowledge/chunking.py`).", "",
        "| hugo-docs chunks | before | after |", "|---|---|---|",
        f"| chunks | {b['chunks']} | {a['chunks']} |",
        f"| byte-exact excerpt of the page | {b['verbatim_share']:.2%} | {a['verbatim_share']:.2%} |",
        f"| located: `content == page[startChar:endChar]`, lines matching | - | {a['located_share']:.2%} |",
        f"| unbalanced code fence | {b['unbalanced_fence_share']:.2%} | {a['unbalanced_fence_share']:.2%} |",
        f"| under {TINY_CHARS} characters | {b['tiny_share']:.2%} | {a['tiny_share']:.2%} |",
        "", "| nDCG@10 (recall@10) | before | after |", "|---|---|---|",
    ]  # fmt: skip
    for name in after["ndcg"]:
        old, new = before["ndcg"].get(name), after["ndcg"][name]
        cell = f"{old['ndcg@10']:.4f} ({old['recall@10']:.4f})" if old else "-"
        lines.append(f"| {name} | {cell} | {new['ndcg@10']:.4f} ({new['recall@10']:.4f}) |")
    return "\n".join([*lines, "", *RULES]) + "\n"


RULES = [
    "How (`lookup_knowledge/chunking.py`): markdown-it-py finds the blocks; a block (fenced or "
    "indented code, table, list item with its marker, paragraph) is never cut inside: one longer "
    "than `chunk_chars` stays whole up to 8 x `chunk_chars` (8,000 characters; hugo-docs' largest "
    "fence is 4,899), beyond which it is cut at line ends. A long paragraph is cut between "
    "sentences. A heading goes with the block after it (headings with no text under them go with "
    "the next text), and a chunk under 150 characters (or half "
    "of `chunk_chars`) joins the next chunk when it opens its section, else the one before. Each "
    "chunk's payload and evidence block carry `location` (`startLine`, `endLine`, `startChar`, "
    "`endChar`, `headingPath`); a JSONL record's has no lines and counts characters in its text. "
    "Breadcrumbs drop `{#anchors}`, shortcodes and inline markup. The chunks left without a "
    "location were stand-ins for pages with no body text (their description or title); such a page "
    "now has no chunks (ingest skips it and names it: a title alone is never evidence). The one "
    "unbalanced fence is a page whose own last fence is never closed.",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--label", default="after", help="names the stores and the JSON file")
    parser.add_argument("--ndcg", nargs="*", default=[], choices=["hugo-docs", "classic-dev", "scifact"])
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--config", type=Path, default=None, help="the same file for a before/after pair")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--doc", type=Path, help="write the before/after section of this doc from --out")
    args = parser.parse_args()
    if args.doc:
        runs = [
            json.loads((args.out / f"verbatim-{label}.json").read_text()) for label in ("before", "after")
        ]
        replace_section(args.doc, SECTION, section(*runs))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    started = time.perf_counter()
    shares = chunk_shares(DATA / "hugo-docs", load_config().ingest.chunk_chars)
    table = Table(title=f"hugo-docs chunks ({args.label}): {shares['chunks']}")
    for column in ("verbatim", "located exactly", "unbalanced fence", f"under {TINY_CHARS} chars"):
        table.add_column(column)
    table.add_row(
        *(
            f"{shares[k]:.2%}"
            for k in ("verbatim_share", "located_share", "unbalanced_fence_share", "tiny_share")
        )
    )
    console.print(table)
    results: dict[str, Any] = {"label": args.label, "hugo-docs chunks": shares, "ndcg": {}}
    for name in args.ndcg:
        results["ndcg"][name] = ndcg(name, args.cache, args.label, args.config)
        console.print(f"{name}: nDCG@10 {results['ndcg'][name]['ndcg@10']:.4f}")
    results["seconds"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"verbatim-{args.label}.json"
    path.write_text(json.dumps(results, indent=2))
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

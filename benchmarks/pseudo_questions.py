"""How each store answers questions made from its own text, against its judged questions' margins.

    python benchmarks/pseudo_questions.py [--cache benchmarks/.cache] [--per-set 80]
                                          [--trust benchmarks/results/trust.json]
                                          [--out benchmarks/results/pseudo_questions.json]

A lead for the abstention's neighbour problem (docs/trust.md): questions from a neighbouring
field clear the bar on SciFact's, Medline's and CISI's stores at margins (1.3-3.9) that these
stores' own questions rarely fall to, while hugo-docs' own questions sit there. A store-relative
bar needs the store's answerable margins without judged questions: this measures whether a
sentence taken from a chunk, searched with its own document left out, lands where the store's
judged questions land. Per store: the margin quantiles of such pseudo-questions and of the
judged questions (``trust.py``'s records). Sentences come from the blocks the judged questions
returned (ranks 2-3), as the product makes them (``calibration.own_question``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from trust import knowledge_base
from trust_stores import judged_sets

from lookup_knowledge import KnowledgeTool
from lookup_knowledge.adapters.search import SearchRequest
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.calibration import own_question
from lookup_knowledge.ranking import searched_hits


def pseudo_questions(tool: KnowledgeTool, judged: list[str], limit: int) -> list[tuple[str, str]]:
    """(doc id, sentence) pairs from the blocks the judged questions returned."""
    pairs = []
    for text in judged:
        for block in tool.lookup(text).evidence_blocks[1:3]:
            if (question := own_question(block.content)) is not None:
                pairs.append((block.doc_id, question))
    return pairs[:limit]


def pseudo_margins(tool: KnowledgeTool, pairs: list[tuple[str, str]]) -> list[float]:
    """Each sentence's margin over the store's probe null, its own document's hits left out."""
    retrieval = tool.config.retrieval
    margins = []
    for doc_id, sentence in pairs:
        request = SearchRequest(
            sentence,
            tool.embedder.embed_query(sentence),
            40,  # wide enough to hold hits of other documents
            mode="hybrid",
            sparse_vector=bm25_encoder().embed_query(sentence),
            fusion=retrieval.fusion,
            prefetch_k=retrieval.prefetch_k,
        )
        null = tool.store_calibration.null_for(request, tool.search_port, tool.embedder)
        (hits,) = searched_hits(tool.search_port, [request])
        others = [hit.normalized_score for hit in hits if hit.doc_id != doc_id]
        if others and (margin := null.margin(max(others))) is not None:
            margins.append(margin)
    return margins


def quantiles(values: list[float]) -> dict[str, float]:
    return {f"p{q}": float(np.quantile(values, q / 100)) for q in (5, 10, 50)} if values else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--trust", type=Path, default=Path("benchmarks/results/trust.json"))
    parser.add_argument("--per-set", type=int, default=80)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pseudo_questions.json"))
    args = parser.parse_args()
    records = json.loads(args.trust.read_text())["sets"]
    random.seed(0)
    results: dict[str, Any] = {}
    for judged in judged_sets(args.cache):
        if judged.name not in records:
            continue
        answerable = [r for r in records[judged.name]["records"] if r["group"] == "answerable"]
        sample = [r["text"] for r in random.sample(answerable, min(args.per_set, len(answerable)))]
        tool, _ = knowledge_base(judged, args.cache)
        with tool:
            margins = pseudo_margins(tool, pseudo_questions(tool, sample, args.per_set))
        judged_margins = [
            r["margin"] for r in answerable if r["margin"] is not None and math.isfinite(r["margin"])
        ]
        results[judged.name] = {"pseudo": quantiles(margins), "judged": quantiles(judged_margins)}
        results[judged.name]["pseudo_questions"] = len(margins)
    table = Table("knowledge base", "pseudo p5 / p10 / p50", "judged p5 / p10 / p50")
    for name, r in results.items():
        cells = [" / ".join(f"{v:.2f}" for v in r[kind].values()) for kind in ("pseudo", "judged")]
        table.add_row(name, *cells)
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

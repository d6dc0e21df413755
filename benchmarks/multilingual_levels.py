"""What ``relevanceLevel`` means for a question asked across languages: on the three sets of
``benchmarks/multilingual.py`` (tldr, FastAPI, the translated handbook), each found lookup's level
and whether its top block is from an answering page, English questions beside the others; the
level by the dense and BM25 places alone (before) and as the product reads it (after: a
question asked across languages also by its lines, ``dataflows/result.py``).

    python benchmarks/multilingual_levels.py [--per-language 60] [--cache benchmarks/.cache]
        [--out benchmarks/results/multilingual_levels.json]

The stores are the ones ``multilingual.py`` ingests (cached). The table goes to
docs/multilingual.md.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from doc_sections import machine_line, measured, replace_table
from multilingual import FASTAPI_GIT, TLDR, _run, console, fastapi_set, handbook_set, prepared_tool, tldr_set

from lookup_knowledge.contract import LookupResult
from lookup_knowledge.dataflows.result import _by_places

LEVELS = ("high", "medium", "low")
GROUPS = {"English": ("en",), "other languages": ("zh", "ja", "ko", "es", "de", "fr", "pt", "ru")}


def sets(cache: Path, per_language: int) -> dict[str, tuple[Path, Any, dict, str]]:
    tldr_kb, tldr_queries, tldr_qrels = tldr_set(cache, per_language, 2000)
    fastapi_kb, fastapi_queries, fastapi_qrels = fastapi_set(cache, FASTAPI_GIT, per_language)
    handbook_kb, handbook_queries, handbook_qrels, _ = handbook_set()
    return {
        "tldr": (tldr_kb, tldr_queries, tldr_qrels, "multilingual-tldr-2000"),
        "fastapi": (fastapi_kb, fastapi_queries, fastapi_qrels, "multilingual-fastapi-docs"),
        "handbook": (handbook_kb, handbook_queries, handbook_qrels, "multilingual-handbook"),
    }


def levels(cache: Path, per_language: int) -> dict[str, Any]:
    """Per set and language group, before and after: lookups per level and how many of them
    have an answering page's block on top."""
    out: dict[str, Any] = {}
    for name, (kb, queries, qrels, store) in sets(cache, per_language).items():
        tool, base, _ = prepared_tool(kb, cache, store)
        try:
            results, _ = _run(tool, base, {}, queries, qrels)
        finally:
            tool.close()
        counts: dict[str, Counter] = {}
        for qid, lang in zip(queries["query_id"], queries["lang"], strict=True):
            result = LookupResult.model_validate_json(results.loc[qid, "result_json"])
            if not result.found:
                continue
            group = next(g for g, langs in GROUPS.items() if lang in langs)
            right = result.evidence_blocks[0].doc_id in qrels[qid]
            for when, level in (
                ("before", _by_places(result.retrieval_trace.evidence_verdict)),
                ("after", result.relevance_level),
            ):
                tally = counts.setdefault(f"{group}|{when}", Counter())
                tally[level] += 1
                tally[f"{level} right"] += right
        out[name] = {key: dict(tally) for key, tally in counts.items()}
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| set | questions | level read by | high: lookups (top block right) | medium | low |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name in ("tldr", "fastapi", "handbook"):
        for group in GROUPS:
            for when in ("before", "after"):
                tally = results["levels"][name].get(f"{group}|{when}", {})
                cells = [
                    f"{n} ({tally.get(f'{level} right', 0) / n:.0%})" if (n := tally.get(level, 0)) else "0"
                    for level in LEVELS
                ]
                if group == "English" and when == "before":
                    continue  # an English question's lines are not read (unless guessed otherwise)
                label = "places alone (before)" if when == "before" else "the product"
                lines.append(f"| {name} | {group} | {label} | " + " | ".join(cells) + " |")
    return "\n".join([machine_line(results["measured"], "multilingual_levels.py"), "", *lines])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--per-language", type=int, default=60)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/multilingual_levels.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    args = parser.parse_args()
    if not TLDR.is_dir() or not FASTAPI_GIT.is_dir():
        print(f"skipped: needs {TLDR} and {FASTAPI_GIT}")
        return 0
    load = os.getloadavg()[0]
    args.cache.mkdir(parents=True, exist_ok=True)
    results = {"levels": levels(args.cache, args.per_language), "per_language": args.per_language}
    results["measured"] = measured(load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    replace_table(args.doc, "multilingual-levels", table(results))
    console.print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Identifiers that win, reasons that hold: hugo-docs identifier questions, nDCG@10 around them.

    python benchmarks/identifiers.py --label before|after [--sets hugo,scifact] [--cache benchmarks/.cache]
    python benchmarks/identifiers.py --from-json   # rewrite the docs/quality.md section only

Three measures of the default pipeline (hybrid, DBSF), each store ingested with the default
configuration under ``--cache`` (stores of its own; vectors from the shared embedding cache):

* identifier questions: every identifier (``adapters/sparse.py``: snake_case, UPPER_CASE, dotted
  keys, flags, camelCase, codes with digits) that exactly one chunk of hugo-docs holds as a whole
  word, asked as "what does <identifier> do", at the default ``return_n`` (5): the share whose
  page is among the blocks, whose holding chunk is among them, and whose holding chunk is first;
* hugo-docs page descriptions and SciFact claims: nDCG@10 and recall@10 (``return_n`` 10, the
  evaluation ranking 20 deep, as ``benchmarks/quality.py`` runs them);
* honesty: the share of returned blocks with an ``exact_code:X`` reason whose content does not
  hold X as a whole word (over the identifier questions).

Each run is stored under its ``--label`` in ``benchmarks/results/identifiers.json``; with both
``before`` and ``after`` present the section "Identifiers" of docs/quality.md is rewritten.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from corpora import DATA, hugo_described_pages
from doc_sections import replace_section
from quality import DBSF, DEPTH, beir_queries, prepared_tool, run

from lookup_knowledge import KnowledgeTool
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.sparse import holds_identifier, identifiers
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.eval.data import load_qrels, relevance

SECTION = "## Identifiers: two versions compared"  # a comparison of two versions: its own section
MAX_QUESTIONS = 300
# Named things, not measurements, hashes or links (``10.8ms``, ``04d4c08d``, ``github.com/...``):
# a letter (or ``--``) first, three letters in all, no path.
_NAMED = re.compile(r"(?![0-9a-f]+$)(?:--)?[^\W\d_](?=(?:[^a-z]*[a-z]){2})[\w.-]*", re.IGNORECASE)
KINDS = {  # the first that fits names an identifier's kind
    "flag": re.compile(r"--.+"),
    "UPPER_CASE": re.compile(r"[A-Z0-9]+(?:_[A-Z0-9]+)+"),
    "snake_case": re.compile(r".*_.*"),
    "dotted": re.compile(r".*\..*"),
    "code (letters+digits)": re.compile(r".*\d.*"),
    "camelCase": re.compile(r".*"),
}


def kind_of(identifier: str) -> str:
    return next(kind for kind, pattern in KINDS.items() if pattern.fullmatch(identifier))


def identifier_questions(chunk_chars: int, corpus: Path = DATA / "hugo-docs") -> list[dict[str, str]]:
    """Identifiers exactly one chunk of ``corpus`` holds, with the page that holds them (seeded sample)."""
    holders: dict[str, set[tuple[str, int]]] = {}
    written: dict[str, str] = {}
    for doc in read_corpus(corpus).documents:
        for chunk in chunk_document(doc, chunk_chars):
            for identifier in identifiers(chunk.content):
                holders.setdefault(identifier.lower(), set()).add((doc.doc_id, chunk.chunk_index))
                written.setdefault(identifier.lower(), identifier)
    unique = sorted(key for key, where in holders.items() if len(where) == 1 and _NAMED.fullmatch(key))
    picked = sorted(random.Random(0).sample(unique, min(MAX_QUESTIONS, len(unique))))
    return [{"identifier": written[key], "doc_id": next(iter(holders[key]))[0]} for key in picked]


def identifier_hits(tool: KnowledgeTool, questions: list[dict[str, str]]) -> dict[str, Any]:
    """Per question: page / holding chunk among the returned blocks, holding chunk first; false codes."""
    rows, false_codes, coded = [], 0, 0
    for question in questions:
        identifier = question["identifier"]
        result = tool.lookup(f"what does {identifier} do")
        blocks = result.evidence_blocks
        holding = [holds_identifier(block.content, identifier) for block in blocks]
        for block in blocks:
            for reason in block.hit_reasons:
                if reason.startswith("exact_code:"):
                    coded += 1
                    false_codes += not holds_identifier(block.content, reason.removeprefix("exact_code:"))
        rows.append({
            "kind": kind_of(identifier),
            "page": any(block.doc_id == question["doc_id"] for block in blocks),
            "chunk": any(holding),
            "first": bool(holding) and holding[0],
            "found": result.found,
        })  # fmt: skip
    return {
        "questions": len(rows),
        **{measure: _share(rows, measure) for measure in ("page", "chunk", "first", "found")},
        "by_kind": {
            kind: {"questions": count, "chunk": _share([r for r in rows if r["kind"] == kind], "chunk")}
            for kind, count in sorted(Counter(r["kind"] for r in rows).items())
        },
        "exact_code_reasons": coded,
        "false_exact_code_reasons": false_codes,
    }


def _share(rows: list[dict[str, Any]], measure: str) -> float:
    return sum(bool(row[measure]) for row in rows) / len(rows) if rows else 0.0


def hugo(cache: Path) -> dict[str, Any]:
    folder = hugo_described_pages(cache).resolve()
    queries = beir_queries(folder)
    qrels = relevance(queries, load_qrels(folder / "qrels.tsv"))
    tool, base = prepared_tool("hugo-docs", cache, "identifiers-hugo-docs", cached_vectors=True)
    with tool:
        described = run(tool, base, {**DBSF, **DEPTH}, queries, qrels)
        questions = identifier_questions(tool.config.ingest.chunk_chars)
        return {"described": described, "identifiers": identifier_hits(tool, questions)}


def scifact(cache: Path) -> dict[str, Any]:
    queries = beir_queries("scifact")
    qrels = relevance(queries, load_qrels(DATA / "scifact" / "qrels.tsv"))
    tool, base = prepared_tool("scifact", cache, "identifiers-scifact", cached_vectors=True)
    with tool:
        return {"claims": run(tool, base, {**DBSF, **DEPTH}, queries, qrels)}


def section(results: dict[str, Any]) -> str:
    """The markdown section from the ``before`` and ``after`` runs."""
    before, after = results["before"], results["after"]
    lines = [
        SECTION,
        "",
        "Measured by `python benchmarks/identifiers.py --label before|after` (default pipeline, "
        "hybrid DBSF; stores of their own). Identifier questions: each identifier exactly one "
        'hugo-docs chunk holds as a whole word, asked as "what does <identifier> do", five '
        "blocks returned; `page`: its page among them, `chunk`: the chunk holding it among them, "
        "`first`: that chunk first. False `exact_code`: reasons on those blocks whose content "
        "does not hold the code as a whole word.",
        "",
        "| run | hugo-docs nDCG@10 | hugo-docs recall@10 | SciFact nDCG@10 | SciFact recall@10 "
        "| identifier questions | page | chunk | first | false `exact_code` |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, row in (("before", before), ("after", after)):
        described, claims, ids = (
            row["hugo"]["described"],
            row["scifact"]["claims"],
            row["hugo"]["identifiers"],
        )
        lines.append(
            f"| {label} | {described['ndcg@10']:.4f} | {described['recall@10']:.4f} | "
            f"{claims['ndcg@10']:.4f} | {claims['recall@10']:.4f} | {ids['questions']} | "
            f"{ids['page']:.1%} | {ids['chunk']:.1%} | {ids['first']:.1%} | "
            f"{ids['false_exact_code_reasons']} of {ids['exact_code_reasons']} |"
        )
    kinds = after["hugo"]["identifiers"]["by_kind"]
    shares = ", ".join(
        f"{kind} {before['hugo']['identifiers']['by_kind'].get(kind, {}).get('chunk', 0):.0%} -> "
        f"{row['chunk']:.0%} ({row['questions']})"
        for kind, row in kinds.items()
    )
    lines += ["", f"Holding chunk among the blocks, per kind (before -> after, questions): {shares}.", ""]
    return "\n".join([*lines, *DESIGN, ""])


DESIGN = [
    "The rules the `after` run was measured with: "
    "(1) `exact_code:X` only when the block's content holds X verbatim, case-insensitive, as a "
    "whole word, and only then does the hit skip `min_evidence_score`; (2) each identifier of "
    "several parts (`SOME_ENV_VAR`, `server.http.port`, `--dry-run`, `INV-48213`) is one more BM25 "
    "token of its own beside its stemmed parts, in documents and queries, so the chunks that hold "
    "it whole get that rare token's weight and siblings that hold only its parts "
    "(`SOME_ENV_VAR_PROTOCOL`) do not; the sparse hit reason names it (`vector:sparse rank 1 "
    "(some_env_var)`); camelCase words and codes such as `E4471` are one token already; (3) the "
    "per-document cap gives a document's places to its chunks holding an exact code first. "
    "`tests/test_hybrid.py` checks every hit reason against the store and the source over the "
    "sample knowledge base and an identifier fixture (`test_every_hit_reason_is_true_of_its_block`).",
    "",
    "Why a whole-identifier BM25 token, of the three ways considered: it is computed client-side, "
    "so both store adapters hold and rank it alike, and it ranks with the store's IDF. Qdrant "
    "Edge's full-text payload index (`TextIndexParams`, `MatchText`, `MatchPhrase`) tokenizes with "
    "the engine's tokenizers: `Word` and `Code` split dotted keys and flags into their parts and "
    "`Whitespace` keeps punctuation attached (`` `SOME_ENV_VAR`, `` is another token than "
    "`SOME_ENV_VAR`), so a phrase `some env var` also matches inside `SOME_ENV_VAR_PROTOCOL`, and it "
    "would serve the embedded store only. A rerank boost for verbatim presence cannot lift a chunk "
    "the searches left outside `retrieve_k`. Those two were decided by these properties, not "
    "measured.",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--label")
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc section from --out")
    parser.add_argument("--sets", default="hugo,scifact")
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/identifiers.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/quality.md"))
    args = parser.parse_args()
    if args.from_json:
        replace_section(args.doc, SECTION, section(json.loads(args.out.read_text())))
        return 0
    if not args.label:
        parser.error("--label is required to measure")
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    started = time.perf_counter()
    measured = {name: {"hugo": hugo, "scifact": scifact}[name](args.cache) for name in args.sets.split(",")}
    results[args.label] = {
        **results.get(args.label, {}),
        **measured,
        "seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps({args.label: measured}, indent=2))
    if {"before", "after"} <= results.keys():
        replace_section(args.doc, SECTION, section(results))
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

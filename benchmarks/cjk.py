"""Whether a Chinese or Japanese question is found on pages written in its language.

    python benchmarks/cjk.py [--cache benchmarks/.cache] [--out benchmarks/results/cjk.json]
                             [--doc docs/cjk.md] [--label after]
    python benchmarks/cjk.py --from-json   # rewrite docs/cjk.md's table from --out only

The judged sets of ``benchmarks/sets`` (``cjk-zh``: 220 Chinese tldr pages, ``cjk-ja``: 160
Japanese ones; ``SOURCE.md`` in each) are each a knowledge base; every question of a set is
looked up on it with the default configuration. Per language and question kind (answerable,
unanswerable, chit-chat): the found=true share; for the answerable ones, the share whose first
block is from an answering page (top-1) and the mean reciprocal rank of the first answering page
among the returned blocks (MRR@10, whatever the verdict). Questions are split by their number:
odd ones are ``dev`` (what a threshold may be chosen on), even ones ``test``; the table gives
both. The written off-topic and chit-chat lines of ``multilingual_offtopic.json`` in the set's
language (30 and 10, written for issue 53) are looked up on the same store, outside both halves
(the ``all`` rows give their found share). Prints the table, writes every lookup to ``--out``
(under ``--label``: runs of other code are kept beside it) and the table of ``docs/cjk.md``
between its markers.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
from doc_sections import machine_line, measured, replace_table
from quality import prepared_tool
from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool

console = Console()
SETS = Path(__file__).with_name("sets")
LANGUAGES = {"zh": "Chinese", "ja": "Japanese"}
KINDS = ("answerable", "unanswerable", "chitchat")
WRITTEN = Path(__file__).with_name("multilingual_offtopic.json")  # off-topic and chit-chat lines
TARGETS = {"answerable": ">= 95%", "unanswerable": "<= 10%", "chitchat": "<= 5%", "top1": ">= 80%"}
RETURNED = 10  # blocks read for MRR


def questions(lang: str) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    """The set's questions and, per answerable one, its answering pages."""
    folder = SETS / f"cjk-{lang}"
    records = [
        json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    answers: dict[str, set[str]] = {}
    for row in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        qid, page, _ = row.split("\t")
        answers.setdefault(qid, set()).add(page)
    return records, answers


def written_lines(lang: str) -> list[dict[str, Any]]:
    """The written off-topic and chit-chat lines in ``lang`` (``multilingual_offtopic.json``)."""
    lines = json.loads(WRITTEN.read_text(encoding="utf-8"))["questions"]
    return [
        {"_id": f"{lang}-w{n:02d}", "text": q["text"], "kind": "written"}
        for n, q in enumerate(q for q in lines if q["lang"] == lang)
    ]


def knowledge_base(lang: str, cache: Path) -> KnowledgeTool:
    """The set's store, ingested once (the cache holds it; an unchanged page is not re-ingested)."""
    tool, _ = prepared_tool(
        (SETS / f"cjk-{lang}" / "pages").resolve(), cache, f"cjk-{lang}", cached_vectors=True
    )
    return tool


def lookup_record(tool: KnowledgeTool, record: dict[str, Any], answers: set[str]) -> dict[str, Any]:
    """What one lookup said, and where its first answering page came."""
    result = tool.lookup(record["text"])
    documents = list(dict.fromkeys(block.doc_id for block in result.evidence_blocks))[:RETURNED]
    verdict = result.retrieval_trace.evidence_verdict if result.retrieval_trace else None
    rank = next((n for n, doc in enumerate(documents, 1) if doc in answers), None)
    number = int(record["_id"].rsplit("-", 1)[1][1:])
    written = record["kind"] == "written"
    return {
        "id": record["_id"],
        "text": record["text"],
        "kind": record["kind"],
        "split": None if written else "dev" if number % 2 else "test",
        "found": result.found,
        "reason": verdict.reason if verdict else None,
        "multilingual_top": verdict.multilingual_top if verdict else None,
        "sentence_cosine": getattr(verdict, "sentence_cosine", None),  # None on code before it
        "query_terms": list(verdict.query_terms) if verdict else [],
        "matched_terms": list(verdict.matched_terms or []) if verdict else [],
        "informative": verdict.informative_coverage if verdict else None,
        "top_doc": documents[0] if documents else None,
        "top1": rank == 1 if answers else None,
        "rr": 1 / rank if rank else 0.0,
    }


def summary(records: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per language and split (and ``all``): found share per kind, top-1 and MRR@10."""
    table: dict[str, dict[str, Any]] = {}
    for lang in LANGUAGES:
        for split in ("dev", "test", "all"):
            rows = records[records["lang"] == lang]
            rows = rows if split == "all" else rows[rows["split"] == split]
            answerable = rows[rows["kind"] == "answerable"]
            kinds = (*KINDS, "written") if split == "all" else KINDS
            table[f"{lang}/{split}"] = {
                **{kind: float(rows[rows["kind"] == kind]["found"].mean()) for kind in kinds},
                "top1": float(answerable["top1"].astype(bool).mean()),
                "mrr@10": float(answerable["rr"].mean()),
                "questions": {kind: int((rows["kind"] == kind).sum()) for kind in kinds},
            }
    return table


def markdown(runs: dict[str, Any]) -> str:
    """The doc's table: every run kept (a label each), per language and split."""
    header = [
        "| run | language | split | answerable found | unanswerable found | chit-chat found | "
        "answering page first | MRR@10 | written off-topic and chit-chat found |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines = []
    for label, run in runs.items():
        for key, row in run["summary"].items():
            lang, split = key.split("/")
            n = row["questions"]
            lines.append(
                f"| {label} | {LANGUAGES[lang]} | {split} | "
                + " | ".join(f"{row[kind]:.0%} of {n[kind]}" for kind in KINDS)
                + f" | {row['top1']:.0%} | {row['mrr@10']:.2f} | "
                + (f"{row['written']:.0%} of {n['written']} |" if "written" in row else "|")
            )
    targets = (
        f"Targets: answerable found {TARGETS['answerable']}, unanswerable {TARGETS['unanswerable']}, "
        f"chit-chat {TARGETS['chitchat']}, answering page first {TARGETS['top1']}."
    )
    ran = next(iter(runs.values()))["measured"]
    return "\n".join([machine_line(ran, "cjk.py"), "", *header, *lines, "", targets])


def print_table(label: str, table: dict[str, dict[str, Any]]) -> None:
    view = Table(title=f"CJK lookups ({label})")
    for column in ("set", "answerable", "unanswerable", "chit-chat", "top-1", "MRR@10", "written"):
        view.add_column(column)
    for key, row in table.items():
        written = f"{row['written']:.0%}" if "written" in row else ""
        view.add_row(key, *(f"{row[k]:.0%}" for k in (*KINDS, "top1")), f"{row['mrr@10']:.2f}", written)
    console.print(view)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cjk.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/cjk.md"))
    parser.add_argument("--label", default="after")
    parser.add_argument("--from-json", action="store_true")
    args = parser.parse_args()
    runs = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    if not args.from_json:
        load, records = os.getloadavg()[0], []
        for lang in LANGUAGES:
            tool = knowledge_base(lang, args.cache)
            with tool:
                items, answers = questions(lang)
                items += written_lines(lang)
                records += [
                    {"lang": lang, **lookup_record(tool, r, answers.get(r["_id"], set()))} for r in items
                ]
        table = summary(pd.DataFrame(records))
        print_table(args.label, table)
        runs[args.label] = {"measured": measured(load), "summary": table, "records": records}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs, ensure_ascii=False, indent=1), encoding="utf-8")
    replace_table(args.doc, "cjk", markdown(runs))


if __name__ == "__main__":
    main()

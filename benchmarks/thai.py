"""Thai read by its words: tldr-pages' Thai pages as the knowledge base, asked the questions of
``benchmarks/sets/tldr-thai`` (written here in Thai, each judged to the page or pages answering
it) and ten Thai off-topic and chit-chat lines, before (the engine's tokenizer cuts Thai at its
vowel marks) and with Thai cut into words (pythainlp's ``newmm``, the ``thai`` extra).

    python benchmarks/thai.py [--tldr-git DIR] [--cache benchmarks/.cache]
        [--out benchmarks/results/thai.json]

Per variant: MRR@10, recall@5 and found share of what the agent receives, BM25 alone's MRR@10
(``retrieval.mode: sparse``, verdict off) and the off-topic lines' found share. The table goes to
docs/multilingual.md.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
from doc_sections import machine_line, measured, replace_table
from multilingual import _git, _run, console, prepared_tool

import lookup_knowledge.adapters.sparse as sparse

SET = Path(__file__).with_name("sets") / "tldr-thai"
TLDR_GIT = Path("/work/.mirror/tldr-pages+tldr/repo")
OFF_TOPIC = (  # written here: nothing a command-line cheat sheet answers
    "สวัสดีครับ วันนี้เป็นยังไงบ้าง", "ขอบคุณมากครับ", "คุณชื่ออะไร", "เล่านิทานให้ฟังหน่อย",
    "วิธีทำต้มยำกุ้ง", "พรุ่งนี้ฝนจะตกไหม", "เมืองหลวงของญี่ปุ่นคืออะไร", "แนะนำหนังสนุกๆ ให้หน่อย",
    "ลดน้ำหนักยังไงให้ได้ผล", "ราคาทองวันนี้เท่าไหร่",
)  # fmt: skip


def questions() -> tuple[pd.DataFrame, dict[str, dict[str, int]]]:
    rows = [json.loads(line) for line in (SET / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = pd.DataFrame({"query_id": r["_id"], "query": r["text"], "lang": r["lang"]} for r in rows)
    qrels: dict[str, dict[str, int]] = {}
    for line in (SET / "qrels.tsv").read_text().splitlines()[1:]:
        qid, page, score = line.split("\t")
        qrels.setdefault(qid, {})[page] = int(score)
    return queries, qrels


def knowledge_base(git_dir: Path, cache: Path) -> Path:
    """Every Thai page of the snapshot, its id its path (``common/ls``)."""
    kb = cache / "tldr-thai-kb"
    for path in _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", "pages.th").split():
        doc_id = path.removeprefix("pages.th/").removesuffix(".md")
        target = kb / f"{doc_id}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        front = f"---\nid: {doc_id}\ntitle: {doc_id.split('/')[-1]}\n---\n"
        target.write_text(front + _git(git_dir, "show", f"HEAD:{path}"), encoding="utf-8")
    return kb


def measure(kb: Path, cache: Path, name: str) -> dict[str, Any]:
    queries, qrels = questions()
    tool, base, _ = prepared_tool(kb, cache, name)
    try:
        results, per_query = _run(tool, base, {}, queries, qrels)
        _, sparse_only = _run(
            tool, base, {"retrieval.mode": "sparse", "abstention.enabled": False}, queries, qrels
        )
        lines = pd.DataFrame({"query_id": [f"off-{n}" for n in range(len(OFF_TOPIC))], "query": OFF_TOPIC})
        off, _ = _run(tool, base, {}, lines, None)
    finally:
        tool.close()
    return {
        "questions": len(queries),
        "mrr@10": float(per_query["mrr@10"].mean()),
        "recall@5": float(per_query["recall@5"].mean()),
        "found": float(results["found"].mean()),
        "bm25_mrr@10": float(sparse_only["mrr@10"].mean()),
        "off_topic_found": float(off["found"].mean()),
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "| Thai | questions | MRR@10 | recall@5 | found | BM25 alone MRR@10 | off-topic found |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in results["variants"].items():
        lines.append(
            f"| {label} | {r['questions']} | {r['mrr@10']:.3f} | {r['recall@5']:.3f} | {r['found']:.0%} "
            f"| {r['bm25_mrr@10']:.3f} | {r['off_topic_found']:.0%} ({len(OFF_TOPIC)}) |"
        )
    return "\n".join([machine_line(results["measured"], "thai.py"), "", *lines])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--tldr-git", type=Path, default=TLDR_GIT)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/thai.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    args = parser.parse_args()
    if not args.tldr_git.is_dir() or sparse.thai_words("ไทย") is None:
        print(f"skipped: needs {args.tldr_git} (a git directory of tldr-pages) and the 'thai' extra")
        return 0
    load = os.getloadavg()[0]
    args.cache.mkdir(parents=True, exist_ok=True)
    kb = knowledge_base(args.tldr_git, args.cache)
    segmenter = sparse._thai_segmenter
    sparse._thai_segmenter = lambda: None  # the product before: no segmenter, at ingest and lookup
    try:
        before = measure(kb, args.cache, "tldr-thai-before")
    finally:
        sparse._thai_segmenter = segmenter
    results = {
        "variants": {"before (cut at vowel marks)": before, "words": measure(kb, args.cache, "tldr-thai")}
    }
    results["measured"] = measured(load)
    console.print(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    replace_table(args.doc, "thai", table(results))
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Questions asked in the knowledge base's own language, not English: FastAPI's docs as translated
by the project (German, Spanish, French, Portuguese, Russian, Korean, Japanese, Chinese) and in
English, each a knowledge base of its own, asked the 48 questions of
``benchmarks/sets/fastapi-native`` (written here in English before the pages were read, judged
against the English pages, then translated; a translated page has the English page's path).
The multilingual leg off (the product before it) and ``auto``; and, for the Snowball languages,
BM25 alone, page by page, with the English stemmer the product uses for every language against
the question's own language's stemmer and stop words (the per-language BM25 issue 53 asks for).
Across languages, the same questions in every language asked of the English pages (written
questions, where ``multilingual.py`` asks the pages' translated headings); ``--across`` runs
this part alone and keeps the rest of ``--out``.

    python benchmarks/same_language.py [--fastapi-git DIR] [--cache benchmarks/.cache]
        [--out benchmarks/results/same_language.json] [--across]

Per language: MRR@10 and recall@5 of what the agent receives (blocks only when ``found``), the
found share and the ranking's MRR@10 (verdict off). Tables go to docs/multilingual.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import qdrant_edge as qe
from doc_sections import machine_line, measured, replace_table
from multilingual import FASTAPI_GIT, _git, _title, console, measure, off_topic, prepared_tool, print_table

SET = Path(__file__).with_name("sets") / "fastapi-native"
LANGUAGES = ("en", "de", "es", "fr", "pt", "ru", "ko", "ja", "zh")  # Korean, Japanese, Chinese: no stemmer
VARIANTS = {"off (before)": {"multilingual.search": "off"}, "auto": {"multilingual.search": "auto"}}
SNOWBALL = {
    "en": "English",
    "de": "German",
    "es": "Spanish",
    "fr": "French",
    "pt": "Portuguese",
    "ru": "Russian",
}


def questions() -> tuple[pd.DataFrame, dict[str, dict[str, int]]]:
    """The set's questions (query_id, query, lang) and judgments (page id -> 1)."""
    rows = [json.loads(line) for line in (SET / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = pd.DataFrame([{"query_id": r["_id"], "query": r["text"], "lang": r["lang"]} for r in rows])
    qrels: dict[str, dict[str, int]] = {}
    for line in (SET / "qrels.tsv").read_text().splitlines()[1:]:
        qid, page, score = line.split("\t")
        qrels.setdefault(qid, {})[page.removesuffix(".md")] = int(score)
    return queries, qrels


def pages(git_dir: Path, lang: str) -> dict[str, str]:
    """The language's docs pages at the snapshot: page id (path without ``.md``) -> markdown."""
    listed = _git(git_dir, "ls-tree", "-r", "--name-only", f"HEAD:docs/{lang}/docs").split()
    return {
        p.removesuffix(".md"): _git(git_dir, "show", f"HEAD:docs/{lang}/docs/{p}")
        for p in listed
        if p.endswith(".md")
    }


def knowledge_base(cache: Path, lang: str, texts: dict[str, str]) -> Path:
    return write_pages(cache / f"fastapi-docs-{lang}", texts)


def write_pages(kb: Path, texts: dict[str, str]) -> Path:
    """``texts`` (page id -> markdown) as a knowledge base of markdown files with frontmatter."""
    for doc_id, text in texts.items():
        target = kb / f"{doc_id}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            f"---\nid: {doc_id}\ntitle: {_title(text, doc_id)}\n---\n\n{text}", encoding="utf-8"
        )
    return kb


def bm25_pages(
    texts: dict[str, str], queries: pd.DataFrame, qrels: dict, stemmer: str, stop_words: str
) -> float:
    """MRR@10 of BM25 alone over whole pages (the engine's BM25) with ``stemmer``'s Snowball
    stemmer, English stop words and ``stop_words``' ones."""
    words = {qe.Language.English, getattr(qe.Language, stop_words)}
    model = qe.Bm25(
        qe.Bm25Config(
            language=stemmer.lower(),
            tokenizer=qe.TokenizerType.Word,
            stopwords=qe.StopwordsSet(languages=words),
        )
    )
    return bm25_mrr(texts, queries, qrels, model.embed_document, model.embed_query)


def bm25_mrr(
    texts: dict[str, str], queries: pd.DataFrame, qrels: dict, embed_document: Callable, embed_query: Callable
) -> float:
    """MRR@10 of BM25 alone over whole pages, each page and question as the two embed functions
    make its sparse vector (``indices``, ``values``), the IDF computed over ``texts``."""
    docs = {doc_id: embed_document(text) for doc_id, text in texts.items()}
    df = Counter(i for vector in docs.values() for i in set(vector.indices))
    idf = {i: math.log(1 + (len(docs) - n + 0.5) / (n + 0.5)) for i, n in df.items()}
    reciprocal = []
    for qid, query in zip(queries["query_id"], queries["query"], strict=True):
        terms = set(embed_query(query).indices)
        scores = {
            d: sum(w * idf[i] for i, w in zip(v.indices, v.values, strict=True) if i in terms)
            for d, v in docs.items()
        }
        ranked = sorted(scores, key=lambda d: (-scores[d], d))[:10]
        reciprocal.append(next((1 / r for r, d in enumerate(ranked, 1) if d in qrels[qid]), 0.0))
    return sum(reciprocal) / len(reciprocal)


def run(git_dir: Path, cache: Path, languages: tuple[str, ...] = LANGUAGES) -> dict[str, Any]:
    """Each language's questions on its own pages (``lookup``, ``off_topic``, ``bm25_pages``) and,
    on the English store, every language's questions (``across``)."""
    queries, qrels = questions()
    out: dict[str, Any] = {"lookup": {label: {} for label in VARIANTS}, "bm25_pages": {}}
    for lang in languages:
        texts = pages(git_dir, lang)
        asked = queries[queries["lang"] == lang].reset_index(drop=True)
        tool, base, _ = prepared_tool(
            knowledge_base(cache, lang, texts), cache, f"same-language-fastapi-{lang}"
        )
        try:
            if lang == "en":  # every language's questions, the English ones among them
                out["across"] = {
                    label: measure(tool, base, o, queries, qrels) for label, o in VARIANTS.items()
                }
            for label, overrides in VARIANTS.items():
                own = {"en": out["across"][label]["en"]} if lang == "en" else None
                out["lookup"][label].update(own or measure(tool, base, overrides, asked, qrels))
                if lang != "en":
                    lines = off_topic(tool, base, overrides, (lang,))
                    out.setdefault("off_topic", {}).setdefault(label, {}).update(lines)
        finally:
            tool.close()
        out["bm25_pages"][lang] = {"pages": len(texts)}
        if lang in SNOWBALL:
            out["bm25_pages"][lang] |= {
                "english stemmer": bm25_pages(texts, asked, qrels, "English", "English"),
                "own stemmer": bm25_pages(texts, asked, qrels, SNOWBALL[lang], "English"),
                "own stemmer and stop words": bm25_pages(texts, asked, qrels, SNOWBALL[lang], SNOWBALL[lang]),
            }
    for label, rows in out["lookup"].items():
        print_table(f"same language, multilingual search {label}", rows)
    console.print(out["bm25_pages"])
    return out


def lookup_table(results: dict[str, Any]) -> str:
    block = results["lookup"]
    header = "| language | pages | questions | " + " | ".join(
        f"{label}: MRR@10 / recall@5 / found (ranking MRR@10)" for label in block
    )
    lines = [header + " |", "|---|---:|---:|" + "---:|" * len(block)]
    for lang in LANGUAGES:
        cells = [
            f"{r['mrr@10']:.3f} / {r['recall@5']:.3f} / {r['found']:.0%} ({r['ranking_mrr@10']:.3f})"
            for r in (block[label][lang] for label in block)
        ]
        pages_held = results["bm25_pages"][lang]["pages"]
        lines.append(
            f"| {lang} | {pages_held} | {block['auto'][lang]['queries']} | " + " | ".join(cells) + " |"
        )
    return "\n".join([machine_line(results["measured"], "same_language.py"), "", *lines])


def across_table(results: dict[str, Any]) -> str:
    """Per language, the questions asked of the English pages: each variant's figures, and auto's
    MRR@10 and recall@5 as a share of the English questions'."""
    block = results["across"]
    header = "| language | questions | " + " | ".join(
        f"{label}: MRR@10 / recall@5 / found (ranking MRR@10)" for label in block
    )
    lines = [
        header + " | auto, share of English: MRR@10 / recall@5 |",
        "|---|---:|" + "---:|" * (len(block) + 1),
    ]
    english = block["auto"]["en"]
    for lang in LANGUAGES:
        cells = [
            f"{r['mrr@10']:.3f} / {r['recall@5']:.3f} / {r['found']:.0%} ({r['ranking_mrr@10']:.3f})"
            for r in (block[label][lang] for label in block)
        ]
        auto = block["auto"][lang]
        share = f"{auto['mrr@10'] / english['mrr@10']:.0%} / {auto['recall@5'] / english['recall@5']:.0%}"
        lines.append(f"| {lang} | {auto['queries']} | " + " | ".join(cells) + f" | {share} |")
    return "\n".join([machine_line(results["measured"], "same_language.py"), "", *lines])


def off_topic_table(results: dict[str, Any]) -> str:
    """Found share of each language's off-topic and chit-chat lines on the store in its language."""
    block = results["off_topic"]
    labels = list(block)
    lines = ["| questions | " + " | ".join(f"found, {label}" for label in labels) + " |"]
    lines.append("|---|" + "---:|" * len(labels))
    for row, first in block[labels[0]].items():
        cells = [f"{block[label][row]['found']:.0%}" for label in labels]
        lines.append(f"| {row} ({first['queries']}) | " + " | ".join(cells) + " |")
    return "\n".join([machine_line(results["measured"], "same_language.py"), "", *lines])


def stemmer_table(results: dict[str, Any]) -> str:
    lines = [
        "| language | English stemmer (the product's) | the language's stemmer | its stemmer, stop words |",
        "|---|---:|---:|---:|",
    ]
    for lang in [lang for lang in LANGUAGES[1:] if lang in SNOWBALL]:
        r = results["bm25_pages"][lang]
        base = r["english stemmer"]
        own, both = r["own stemmer"], r["own stemmer and stop words"]
        lines.append(
            f"| {lang} | {base:.3f} | {own:.3f} ({own - base:+.3f}) | {both:.3f} ({both - base:+.3f}) |"
        )
    return "\n".join([machine_line(results["measured"], "same_language.py"), "", *lines])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--fastapi-git", type=Path, default=FASTAPI_GIT)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/same_language.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    parser.add_argument("--across", action="store_true", help="only the questions asked of the English pages")
    args = parser.parse_args()
    if not args.fastapi_git.is_dir():
        print(f"skipped: {args.fastapi_git} not found (a git directory of github.com/fastapi/fastapi)")
        return 0
    load = os.getloadavg()[0]
    args.cache.mkdir(parents=True, exist_ok=True)
    fresh = run(args.fastapi_git, args.cache, ("en",) if args.across else LANGUAGES)
    kept = json.loads(args.out.read_text()) if args.across and args.out.exists() else {}
    results = {**kept, "across": fresh["across"]} if args.across else fresh
    for label, rows in results["across"].items():
        print_table(f"across languages, multilingual search {label}", rows)
    results["measured"] = measured(load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if not args.across:  # the pages' own language (--across measures the English store alone)
        replace_table(args.doc, "same-language", lookup_table(results))
        replace_table(args.doc, "same-language-off-topic", off_topic_table(results))
        replace_table(args.doc, "same-language-stemmers", stemmer_table(results))
    replace_table(args.doc, "same-language-across", across_table(results))
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

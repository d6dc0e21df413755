"""A knowledge base in two languages: FastAPI's English pages and the translations of a seeded
half of its translated pages, one store, asked the written questions of
``benchmarks/sets/fastapi-native`` in the translations' language (and in English). Either
version of the judged page answers. A question whose page has no translation in the store is
answered by an English page only: how a partly translated docs site, or a company knowledge base
with some pages in its people's language, is asked.

    python benchmarks/mixed_language.py [--languages zh,ja,de,es] [--fastapi-git DIR]
        [--cache benchmarks/.cache] [--out benchmarks/results/mixed_language.json]

Per language, with the default configuration: the ranking's MRR@10 (verdict off) of all its
questions, of those whose page is translated in the store and of those whose page is not; the
found share, and the share found with a first block from a page that does not answer. Beside
them, the ranking's MRR@10 of the same questions on a store of the English pages alone, and of
the pages of two lookups taken in turn, the first from a store of the translated half alone,
the second from the English one (``lists in turn``): what a search per language, merged, would
reach; and the lookup time with that search on and off. The same pages each once
(:func:`measure_once`): a translated page's English original left out, so its translation is
the only page that answers. A second set (:func:`measure_tldr`): tldr's English pages and 220
Chinese ones, the search off and on. The tables go to docs/multilingual.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import time
from itertools import zip_longest
from pathlib import Path
from typing import Any

import pandas as pd
from doc_sections import machine_line, measured, replace_table
from multilingual import FASTAPI_GIT, _run, console, prepared_tool, tldr_set
from rich.table import Table
from same_language import knowledge_base, pages, questions, write_pages

from lookup_knowledge import KnowledgeTool, load_config

SETS = Path(__file__).with_name("sets")
SHARE = 0.5  # of the translated pages, translated in the mixed store
SEED = 7
RETURNED = 10


def page_ids(tool: KnowledgeTool, base: dict[str, Any], text: str) -> list[str]:
    """The pages of one lookup's blocks (verdict off), in order, each once."""
    variant = tool.variant(
        load_config(overrides={**base, "abstention.enabled": False, "retrieval.return_n": RETURNED})
    )
    return list(dict.fromkeys(block.doc_id for block in variant.lookup(text).evidence_blocks))


def lookup_ms(tool: KnowledgeTool, base: dict[str, Any], texts: list[str], rounds: int = 3) -> dict:
    """Median lookup time of ``texts`` with the search over other languages on and off, the two
    taken in turn question by question (one process, side by side: the machine's load hits both)."""
    switch = "multilingual.other_languages"
    variants = {on: tool.variant(load_config(overrides={**base, switch: on})) for on in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for text in texts:
            for on, variant in variants.items():
                started = time.perf_counter()
                variant.lookup(text)
                times[on].append((time.perf_counter() - started) * 1000)
    return {"on": statistics.median(times[True]), "off": statistics.median(times[False])}


def reciprocal_rank(found: list[str], relevant: set[str]) -> float:
    return next((1 / (n + 1) for n, doc in enumerate(found[:RETURNED]) if doc in relevant), 0.0)


def in_turn(first: list[str], second: list[str]) -> list[str]:
    """Two ranked page lists taken in turn, each page once."""
    return list(dict.fromkeys(doc for pair in zip_longest(first, second) for doc in pair if doc))


def measure_language(lang: str, git_dir: Path, cache: Path) -> dict[str, Any]:
    english, translations = pages(git_dir, "en"), pages(git_dir, lang)
    both_languages = sorted(set(english) & set(translations))
    translated = set(random.Random(SEED).sample(both_languages, int(len(both_languages) * SHARE)))
    own = {f"{lang}/{doc}": translations[doc] for doc in sorted(translated)}
    mixed_kb = write_pages(cache / f"mixed-language-{lang}-pages", {**english, **own})
    own_kb = write_pages(cache / f"mixed-language-{lang}-only-pages", own)

    asked, qrels = questions()
    asked = asked[asked["lang"].isin(["en", lang])].reset_index(drop=True)
    judged = {
        q: {**pages_, **{f"{lang}/{d}": 1 for d in pages_ if d in translated}} for q, pages_ in qrels.items()
    }
    stores = {
        "mixed": prepared_tool(mixed_kb, cache, f"mixed-language-{lang}")[:2],
        "en": prepared_tool(knowledge_base(cache, "en", english), cache, "same-language-fastapi-en")[:2],
        "own": prepared_tool(own_kb, cache, f"mixed-language-{lang}-only")[:2],
    }
    try:
        results, _ = _run(*stores["mixed"], {}, asked, judged)
        _, ranked = _run(*stores["mixed"], {"abstention.enabled": False}, asked, judged)
        rows: dict[str, Any] = {}
        for question_lang, group in asked.groupby("lang"):
            ids = list(group["query_id"])
            is_translated = {q: any(d in translated for d in qrels[q]) for q in ids}
            row = {
                "questions": len(ids),
                "page translated": sum(is_translated.values()),
                "ranking": _mrr(ranked, ids),
                "ranking, page translated": _mrr(ranked, [q for q in ids if is_translated[q]]),
                "ranking, page not translated": _mrr(ranked, [q for q in ids if not is_translated[q]]),
                "found": float(results.loc[ids, "found"].mean()),
                "found, first page wrong": _first_wrong(results, ids, judged),
            }
            if question_lang != "en":
                per_store = {
                    q: (page_ids(*stores["own"], text), page_ids(*stores["en"], text))
                    for q, text in zip(group["query_id"], group["query"], strict=True)
                }
                row["english store alone"] = _mean(
                    reciprocal_rank(en, set(judged[q])) for q, (_, en) in per_store.items()
                )
                row["lists in turn"] = _mean(
                    reciprocal_rank(in_turn(own_, en), set(judged[q])) for q, (own_, en) in per_store.items()
                )
                texts = list(group["query"])
                row["ms two languages"] = lookup_ms(*stores["mixed"], texts)
                row["ms own language alone"] = lookup_ms(*stores["own"], texts)
            rows[question_lang] = row
        return rows
    finally:
        for tool, _ in stores.values():
            tool.close()


def measure_once(lang: str, git_dir: Path, cache: Path) -> dict[str, Any]:
    """The store of :func:`measure_language` with each page once: the English original of a
    translated page left out, so only its translation answers (a company knowledge base whose
    pages are each written in one language). The search over other languages off, then on."""
    english, translations = pages(git_dir, "en"), pages(git_dir, lang)
    both_languages = sorted(set(english) & set(translations))
    translated = set(random.Random(SEED).sample(both_languages, int(len(both_languages) * SHARE)))
    kept = {doc: text for doc, text in english.items() if doc not in translated}
    own = {f"{lang}/{doc}": translations[doc] for doc in sorted(translated)}
    kb = write_pages(cache / f"mixed-language-{lang}-once-pages", {**kept, **own})
    asked, qrels = questions()
    asked = asked[asked["lang"] == lang].reset_index(drop=True)
    judged = {
        q: {(f"{lang}/{d}" if d in translated else d): 1 for d in pages_} for q, pages_ in qrels.items()
    }
    with_page = [q for q in asked["query_id"] if any(d in translated for d in qrels[q])]
    tool, base = prepared_tool(kb, cache, f"mixed-language-{lang}-once")[:2]
    try:
        return {
            "on" if on else "off": _switched(tool, base, on, asked, judged, with_page) for on in (False, True)
        }
    finally:
        tool.close()


def _switched(
    tool: KnowledgeTool, base: dict, on: bool, asked: pd.DataFrame, judged: dict, with_page: list[str]
) -> dict[str, Any]:
    """Ranking MRR@10 (all, page translated, not) and found share, the search over other
    languages ``on`` or off."""
    switch = {"multilingual.other_languages": on}
    results, _ = _run(tool, base, switch, asked, judged)
    _, ranked = _run(tool, base, {**switch, "abstention.enabled": False}, asked, judged)
    ids = list(asked["query_id"])
    return {
        "questions": len(ids),
        "page translated": len(with_page),
        "ranking": _mrr(ranked, ids),
        "ranking, page translated": _mrr(ranked, with_page),
        "ranking, page not translated": _mrr(ranked, [q for q in ids if q not in with_page]),
        "found": float(results["found"].mean()),
        "found, first page wrong": _first_wrong(results, ids, judged),
    }


def _first_wrong(results: pd.DataFrame, ids: list[str], judged: dict) -> float:
    """The share of ``ids`` found with a first block from a page that does not answer."""
    return sum(
        results.loc[q, "found"] and _first_page(results.loc[q, "result_json"]) not in judged[q] for q in ids
    ) / len(ids)


def measure_tldr(cache: Path) -> dict[str, Any]:
    """A second set: tldr's 2,000 sampled English pages (``multilingual.tldr_set``) and the 220
    Chinese tldr pages of ``benchmarks/sets/cjk-zh`` (ids ``zh/...``), one store, asked
    tldr-multilingual's Chinese questions whose English page it holds; either page of the command
    answers. The search over other languages off, then on (the default)."""
    english, queries, qrels = tldr_set(cache, 0, 2000)
    chinese = SETS / "cjk-zh" / "pages"
    kb = cache / "mixed-language-tldr-pages"
    if not kb.is_dir():
        shutil.copytree(english, kb)
        for page in chinese.rglob("*.md"):
            target = kb / "zh" / page.relative_to(chinese)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                page.read_text(encoding="utf-8").replace('id: "', 'id: "zh/', 1), encoding="utf-8"
            )
    held = {str(p.relative_to(english).with_suffix("")) for p in english.rglob("*.md")}
    translated = {str(p.relative_to(chinese).with_suffix("")) for p in chinese.rglob("*.md")}
    asked = queries[
        (queries["lang"] == "zh") & queries["query_id"].map(lambda q: all(d in held for d in qrels[q]))
    ].reset_index(drop=True)
    judged = {
        q: {**qrels[q], **{f"zh/{d}": 1 for d in qrels[q] if d in translated}} for q in asked["query_id"]
    }
    with_page = [q for q in asked["query_id"] if any(d in translated for d in qrels[q])]
    tool, base = prepared_tool(kb, cache, "mixed-language-tldr")[:2]
    try:
        return {
            "on" if on else "off": _switched(tool, base, on, asked, judged, with_page) for on in (False, True)
        }
    finally:
        tool.close()


def switched_table(rows: dict[str, Any]) -> str:
    """Rows of :func:`_switched` by their label (``zh, on``)."""
    lines = [
        "| questions, other languages searched | questions | page translated "
        "| ranking MRR@10: all / page translated / page not | found | found, first page wrong |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for label, r in rows.items():
        ranking = " / ".join(
            _cell(r[k]) for k in ("ranking", "ranking, page translated", "ranking, page not translated")
        )
        lines.append(
            f"| {label} | {r['questions']} | {r['page translated']} | {ranking} | {r['found']:.0%} "
            f"| {r['found, first page wrong']:.0%} |"
        )
    return "\n".join(lines)


def _mrr(ranked: pd.DataFrame, ids: list[str]) -> float | None:
    return float(ranked.loc[ids, "mrr@10"].mean()) if ids else None


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values)


def _first_page(result_json: str) -> str | None:
    blocks = json.loads(result_json).get("evidenceBlocks") or []
    return blocks[0]["docId"] if blocks else None


def table(results: dict[str, Any]) -> str:
    lines = [
        machine_line(results["measured"], "mixed_language.py"),
        "",
        "| questions | asked | pages translated | ranking MRR@10: all / page translated / page not | found "
        "| found, first page wrong | English pages alone | the two stores' lists in turn "
        "| lookup p50 ms, other languages on / off: this store; the translated pages alone |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for lang, rows in results["languages"].items():
        for question_lang in (lang, "en"):
            r = rows[question_lang]
            ranking = " / ".join(
                _cell(r[k]) for k in ("ranking", "ranking, page translated", "ranking, page not translated")
            )
            lines.append(
                f"| {question_lang} on en + {lang} | {r['questions']} | {r['page translated']} | {ranking} "
                f"| {r['found']:.0%} | {r['found, first page wrong']:.0%} "
                f"| {_cell(r.get('english store alone'))} | {_cell(r.get('lists in turn'))} | {_ms(r)} |"
            )
    return "\n".join(lines)


def _ms(row: dict[str, Any]) -> str:
    if "ms two languages" not in row:
        return ""
    mixed, own = row["ms two languages"], row["ms own language alone"]
    return f"{mixed['on']:.1f} / {mixed['off']:.1f}; {own['on']:.1f} / {own['off']:.1f}"


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--languages", default="zh,ja,de,es")
    parser.add_argument("--fastapi-git", type=Path, default=FASTAPI_GIT)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/mixed_language.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    args = parser.parse_args()
    if not (args.fastapi_git / "HEAD").is_file():
        console.print(f"skipped: no FastAPI snapshot at {args.fastapi_git} (see docs/multilingual.md)")
        return 0
    load = os.getloadavg()[0]
    languages = {
        lang: measure_language(lang, args.fastapi_git, args.cache) for lang in args.languages.split(",")
    }
    once = {lang: measure_once(lang, args.fastapi_git, args.cache) for lang in languages}
    results = {
        "languages": languages,
        "once": once,
        "tldr": measure_tldr(args.cache),
        "measured": measured(load),
    }
    view = Table(title="two languages in one store")
    for column in (
        "questions",
        "ranking",
        "translated",
        "not translated",
        "found",
        "found wrong",
        "en alone",
        "in turn",
    ):
        view.add_column(column)
    for lang, rows in languages.items():
        for question_lang, r in rows.items():
            view.add_row(
                f"{question_lang} on en+{lang}",
                *(
                    _cell(r.get(k))
                    for k in ("ranking", "ranking, page translated", "ranking, page not translated", "found",
                              "found, first page wrong", "english store alone", "lists in turn")
                ),
            )  # fmt: skip
    console.print(view)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    replace_table(args.doc, "mixed-language", table(results))
    replace_table(
        args.doc,
        "mixed-language-once",
        switched_table({f"{lang}, {k}": r for lang, rows in once.items() for k, r in rows.items()}),
    )
    replace_table(
        args.doc, "mixed-language-tldr", switched_table({f"zh, {k}": r for k, r in results["tldr"].items()})
    )
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

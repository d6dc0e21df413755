"""Korean read by its words or by its characters and their pairs: BM25 alone, page by page.

The product reads Korean as CJK: each Hangul run (Korean writes spaces between its words, so a
run is one word with its endings: "매개변수를") as its characters and their overlapping pairs.
This measures it against Korean's own words, as Kiwi's morphological analyser (``kiwipiepy``,
its model in the ``kiwipiepy-model`` wheel; not a dependency of the product) cuts them: nouns,
verb and adjective stems, roots and foreign words kept; particles, endings and suffixes left out
(as Lucene's Nori drops them). Two sets: FastAPI's Korean pages asked the 48 Korean questions of
``benchmarks/sets/fastapi-native``; tldr-pages' Korean pages asked tldr-multilingual's Korean
questions whose judged page has a Korean version (those questions are lines of that page: its
summary and one example's description, as the translators wrote them).

    pip install kiwipiepy
    python benchmarks/korean_words.py [--fastapi-git DIR] [--tldr-git DIR]
        [--out benchmarks/results/korean_words.json]

Per set: MRR@10 of BM25 alone (the product's encoder, IDF computed over the set's pages:
``same_language.bm25_mrr``) with each reading. The table goes to docs/multilingual.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from doc_sections import machine_line, measured, replace_table
from multilingual import FASTAPI_GIT, TLDR, _git, console
from same_language import bm25_mrr, pages, questions
from thai import TLDR_GIT

import lookup_knowledge.adapters.sparse as sparse

KEPT_TAGS = ("NNG", "NNP", "NNB", "NR", "NP", "VV", "VA", "XR", "SH", "SL", "SN")  # Kiwi's (Sejong) tags
_HANGUL_RUN = re.compile("[\uac00-\ud7af]+")
_CHARACTERS_AND_PAIRS = sparse.cjk_spaced  # the product's reading


@cache
def _kiwi():  # type: ignore[no-untyped-def]
    from kiwipiepy import Kiwi

    return Kiwi()


@cache
def korean_words(run: str) -> tuple[str, ...]:
    """A Hangul run's words as Kiwi cuts it: the morphemes of :data:`KEPT_TAGS`."""
    return tuple(t.form for t in _kiwi().tokenize(run) if t.tag.split("-")[0] in KEPT_TAGS)


def words_spaced(text: str) -> str:
    """``text`` with each Hangul run written as its words' whole tokens, other CJK as before."""
    spaced = _HANGUL_RUN.sub(
        lambda run: " " + " ".join(map(sparse._whole_token, korean_words(run.group(0)))) + " ", text
    )
    return _CHARACTERS_AND_PAIRS(spaced)


def fastapi_korean(git_dir: Path) -> tuple[dict[str, str], pd.DataFrame, dict[str, set[str]]]:
    asked, judged = questions()
    return (
        pages(git_dir, "ko"),
        asked[asked["lang"] == "ko"].reset_index(drop=True),
        {qid: set(docs) for qid, docs in judged.items()},
    )


def tldr_korean(git_dir: Path) -> tuple[dict[str, str], pd.DataFrame, dict[str, set[str]]]:
    texts = {
        path.removeprefix("pages.ko/").removesuffix(".md"): _git(git_dir, "show", f"HEAD:{path}")
        for path in _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", "pages.ko").split()
    }
    judged: dict[str, set[str]] = {}
    for line in (TLDR / "qrels.tsv").read_text().splitlines()[1:]:
        qid, page, _ = line.split("\t")
        judged.setdefault(qid, set()).add(page)
    rows = [json.loads(line) for line in (TLDR / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    asked = [r for r in rows if r["lang"] == "ko" and judged[r["_id"]] & texts.keys()]
    frame = pd.DataFrame({"query_id": [r["_id"] for r in asked], "query": [r["text"] for r in asked]})
    return texts, frame, judged


def compare(texts: dict[str, str], asked: pd.DataFrame, judged: dict[str, set[str]]) -> dict[str, Any]:
    readings: dict[str, Callable[[str], str]] = {
        "characters and pairs": _CHARACTERS_AND_PAIRS,
        "words": words_spaced,
    }
    out: dict[str, Any] = {"pages": len(texts), "questions": len(asked)}
    for label, reading in readings.items():
        sparse.cjk_spaced = reading
        try:
            encoder = sparse.Bm25Encoder()
            out[label] = bm25_mrr(texts, asked, judged, encoder.embed_document, encoder.embed_query)
        finally:
            sparse.cjk_spaced = _CHARACTERS_AND_PAIRS
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| set | pages | questions | characters and pairs (the product's) | Kiwi's words |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in results["sets"].items():
        change = r["words"] - r["characters and pairs"]
        lines.append(
            f"| {name} | {r['pages']} | {r['questions']} | {r['characters and pairs']:.3f} "
            f"| {r['words']:.3f} ({change:+.3f}) |"
        )
    return "\n".join([machine_line(results["measured"], "korean_words.py"), "", *lines])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--fastapi-git", type=Path, default=FASTAPI_GIT)
    parser.add_argument("--tldr-git", type=Path, default=TLDR_GIT)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/korean_words.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    args = parser.parse_args()
    try:
        _kiwi()
    except ImportError:
        print("skipped: needs kiwipiepy (pip install kiwipiepy)")
        return 0
    if not (args.fastapi_git.is_dir() and args.tldr_git.is_dir() and TLDR.is_dir()):
        print(f"skipped: needs {args.fastapi_git}, {args.tldr_git} (git directories) and {TLDR}")
        return 0
    load = os.getloadavg()[0]
    results: dict[str, Any] = {
        "sets": {
            "FastAPI, Korean questions written here": compare(*fastapi_korean(args.fastapi_git)),
            "tldr-pages, the pages' own lines": compare(*tldr_korean(args.tldr_git)),
        },
        "measured": measured(load),
    }
    console.print(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    replace_table(args.doc, "korean-words", table(results))
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

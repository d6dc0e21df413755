"""Multilingual retrieval: questions in eight other languages against an English knowledge base,
with the multilingual leg off (the product before it), ``auto`` (questions not in English) and
``always``; and what the leg costs (ingest chunks/s, lookup p50, store size).

    python benchmarks/multilingual.py [--sets tldr,fastapi,handbook] [--per-language 120] [--costs]
        [--fastapi-git DIR] [--cache benchmarks/.cache] [--out benchmarks/results/multilingual.json]

Sets:
- ``tldr``: ``../shared/data/tldr-multilingual`` (tldr-pages: the English pages, and for pages
  translated into zh, ja, ko, es, de, fr, pt_BR and ru one example description and the one-line
  summary in that language, each judged to the English page; the English summaries as the same
  questions in the knowledge base's own language).
- ``fastapi``: built here from a snapshot of github.com/fastapi/fastapi (``--fastapi-git``: its git
  directory, read with ``git show``): the English docs pages are the knowledge base; each section
  heading of a translated page (zh, ja, ko, es, de, fr, pt, ru), matched to the English heading by
  the anchor both carry (``{ #path-parameters }``), is a question judged to the English page that
  holds the anchor (anchors held by more than one English page are left out); the English headings
  are the English questions. No setting was fitted on it.
- ``unseen``: the ``fastapi`` set's questions in three languages no setting was chosen on
  (``UNSEEN``: Turkish, Traditional Chinese, and Ukrainian, which the encoder was not trained on),
  asked of the same store; the leg off and ``auto``.
- ``handbook``: ``benchmarks/sets/handbook`` (a company's employee handbook, English pages; its
  47 answerable and 52 unanswerable questions, written before the pages were read), each question
  translated here into German, Spanish and Chinese (``queries-translated.jsonl``): MRR@10 and
  found share of the answerable ones, and found share of the unanswerable ones, per language.

Per language: MRR@10 and recall@5 of what the agent receives (blocks only when ``found``), the
found share, and the MRR@10 of the ranking itself (the rerank trace, whatever the verdict). The
stores are ingested once with the default configuration (multilingual vectors on) and cached.
Results go to JSON and to the tables in docs/multilingual.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
from corpora import CachedEmbedder
from doc_sections import machine_line, measured, replace_table
from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config, sample_knowledge_base
from lookup_knowledge.eval.evaluation import evaluate
from lookup_knowledge.stores import build_embedder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TLDR = DATA / "tldr-multilingual"
FASTAPI_GIT = Path("/work/.mirror/fastapi+fastapi/repo")
LANGUAGES = ("en", "zh", "ja", "ko", "es", "de", "fr", "pt", "ru")
# languages no setting was chosen on, FastAPI's translations only: Turkish, Traditional Chinese
# (both the encoder's), Ukrainian (not the encoder's)
UNSEEN = ("en", "tr", "zh-hant", "uk")
VARIANTS = {
    "off (before)": {"multilingual.search": "off"},
    "auto, chunk vectors only": {"multilingual.search": "auto", "rerank.cross_language_lines": False},
    "auto": {"multilingual.search": "auto"},
    "always": {"multilingual.search": "always"},
}
HANDBOOK = Path(__file__).with_name("sets") / "handbook"
OFF_TOPIC = Path(__file__).with_name("multilingual_offtopic.json")  # the line bar was set on these
HELD_OUT_OFF_TOPIC = Path(__file__).with_name("multilingual_offtopic_heldout.json")  # written after
SEED = 53
OFF_TOPIC_STORES = ("tldr", "fastapi", "handbook", "sample knowledge base")  # the off-topic table's
console = Console()


def tldr_set(
    cache: Path, per_language: int, pages: int
) -> tuple[Path, pd.DataFrame, dict[str, dict[str, int]]]:
    """The tldr questions (``per_language`` at most per language, seeded), their judgments, and a
    knowledge base of ``pages`` English pages written under ``cache``: every page the questions
    judge, and a seeded sample of the others (0: all 7,425). A question no single page answers
    (:func:`ambiguous_questions`) has ``ambiguous`` set."""
    rows = [json.loads(line) for line in (TLDR / "queries.jsonl").read_text().splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (TLDR / "qrels.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        qrels.setdefault(qid, {})[doc] = int(score)
    frame = pd.DataFrame(
        {"query_id": r["_id"], "query": r["text"], "lang": r["lang"].split("_")[0]} for r in rows
    )
    queries = _sampled(frame, per_language)
    queries["ambiguous"] = queries["query_id"].isin(ambiguous_questions(list(queries["query_id"]), qrels))
    if not pages:
        return TLDR / "kb-en", queries, qrels
    judged = {doc for q in queries["query_id"] for doc in qrels[q]}
    others = sorted(
        str(p.relative_to(TLDR / "kb-en").with_suffix("")) for p in (TLDR / "kb-en").rglob("*.md")
    )
    others = [doc for doc in others if doc not in judged]
    chosen = sorted(judged) + random.Random(SEED).sample(others, max(0, pages - len(judged)))
    kb = cache / f"tldr-kb-{pages}"
    if not kb.is_dir():
        for doc in chosen:
            target = kb / f"{doc}.md"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(TLDR / "kb-en" / f"{doc}.md", target)
    return kb, queries, qrels


def ambiguous_questions(query_ids: list[str], qrels: dict[str, dict[str, int]]) -> set[str]:
    """The example questions no single page answers: every example description of the page they
    are judged to is on other pages too, word for word. An alias page's one example, "View
    documentation for the original command", is on hundreds: its translation names no command."""
    pages = list((TLDR / "kb-en").rglob("*.md"))
    examples = {str(p.relative_to(TLDR / "kb-en").with_suffix("")): _examples(p) for p in pages}
    pages_holding = Counter(line for lines in examples.values() for line in set(lines))
    return {
        q
        for q in query_ids
        if "-example-" in q
        and all(pages_holding[line] > 1 for doc in qrels[q] for line in examples.get(doc, ["?"]))
    }


def _examples(page: Path) -> list[str]:
    lines = page.read_text(encoding="utf-8").splitlines()
    return [line[2:].strip() for line in lines if line.startswith("- ")]


def fastapi_set(
    cache: Path, git_dir: Path, per_language: int, languages: tuple[str, ...] = LANGUAGES
) -> tuple[Path, pd.DataFrame, dict]:
    """The fastapi docs set (module docstring) in ``languages``, written under ``cache`` from the
    snapshot."""
    commit = _git(git_dir, "rev-parse", "HEAD").strip()
    kb = cache / "fastapi-docs-en"
    pages = [
        p
        for p in _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD:docs/en/docs").split()
        if p.endswith(".md")
    ]
    english: dict[str, dict[str, str]] = {}
    shutil.rmtree(kb, ignore_errors=True)
    for page in pages:
        text = _git(git_dir, "show", f"HEAD:docs/en/docs/{page}")
        doc_id = page.removesuffix(".md")
        english[doc_id] = _anchored_headings(text)
        target = kb / page
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            f"---\nid: {doc_id}\ntitle: {_title(text, doc_id)}\n---\n\n{text}", encoding="utf-8"
        )
    holders: dict[str, list[str]] = {}
    for doc_id, headings in english.items():
        for anchor in headings:
            holders.setdefault(anchor, []).append(doc_id)
    rows, qrels = [], {}
    for lang in languages:
        folder = "en" if lang == "en" else lang
        for page in pages:
            try:
                text = _git(git_dir, "show", f"HEAD:docs/{folder}/docs/{page}")
            except subprocess.CalledProcessError:  # not translated
                continue
            doc_id = page.removesuffix(".md")
            for anchor, heading in _anchored_headings(text).items():
                if holders.get(anchor) != [doc_id] or len(heading) < 4:
                    continue
                qid = f"{lang}-{doc_id}#{anchor}"
                rows.append({"query_id": qid, "query": heading, "lang": lang})
                qrels[qid] = {doc_id: 1}
    (cache / "fastapi-commit.txt").write_text(commit)
    frame = pd.DataFrame(rows).drop_duplicates("query_id")
    return kb, _sampled(frame, per_language), qrels


def handbook_set() -> tuple[Path, pd.DataFrame, dict, pd.DataFrame]:
    """The handbook set (module docstring): its answerable questions in English and translated,
    their judgments, and its unanswerable questions in the same languages."""
    folder = HANDBOOK
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        qrels.setdefault(qid, {})[doc] = int(score)
    english = [
        {**(r := json.loads(line)), "lang": "en", "source": r["_id"]}
        for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    translated = [
        json.loads(line) for line in (folder / "queries-translated.jsonl").read_text("utf-8").splitlines()
    ]
    rows = pd.DataFrame(
        {"query_id": r["_id"], "query": r["text"], "lang": r["lang"], "answerable": r["answerable"],
         "source": r["source"]}
        for r in english + translated
    )  # fmt: skip
    answerable = rows[rows["answerable"]].reset_index(drop=True)
    judged = {
        qid: qrels[source] for qid, source in zip(answerable["query_id"], answerable["source"], strict=True)
    }
    return folder / "pages", answerable, judged, rows[~rows["answerable"]].reset_index(drop=True)


def unanswerable_found(tool: KnowledgeTool, base: dict, overrides: dict, queries: pd.DataFrame) -> dict:
    """Found share per language of questions no page of the store answers."""
    results, _ = _run(tool, base, overrides, queries, None)
    return {
        lang: {"queries": len(group), "found": float(results.loc[list(group["query_id"]), "found"].mean())}
        for lang, group in queries.groupby("lang")
    }


_HEADING = re.compile(r"^#{1,4} (.+?)\s*\{ *#([\w-]+) *\}\s*$", re.MULTILINE)
_MARKUP = re.compile(r"<[^>]+>|`|\*\*?|\[|\]\([^)]*\)")


def _anchored_headings(text: str) -> dict[str, str]:
    """Each heading's anchor -> its text without markup (fenced code left out)."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {anchor: _MARKUP.sub("", heading).strip() for heading, anchor in _HEADING.findall(text)}


def _title(text: str, fallback: str) -> str:
    first = _anchored_headings(text)
    return json.dumps(next(iter(first.values()), fallback), ensure_ascii=False)


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=True
    ).stdout


def _sampled(frame: pd.DataFrame, per_language: int) -> pd.DataFrame:
    if not per_language:
        return frame.reset_index(drop=True)
    parts = [
        group.sample(min(per_language, len(group)), random_state=SEED) for _, group in frame.groupby("lang")
    ]
    return pd.concat(parts).reset_index(drop=True)


def prepared_tool(kb: Path, cache: Path, name: str) -> tuple[KnowledgeTool, dict[str, Any], float]:
    """A tool over the cached store of ``kb`` (ingested with the default configuration)."""
    base = {"store.path": str(cache / name)}
    config = load_config(overrides=base)
    embedder = CachedEmbedder(build_embedder(config), cache / "embeddings")
    report = ingest(kb, config, progress=console.is_terminal, embedder=embedder)
    console.print(
        f"{name}: {report.documents} documents, {report.points_in_store} chunks, {report.seconds:.0f} s"
    )
    return KnowledgeTool.from_config(config), base, report.seconds


def multilingual_top(result_json: str) -> float | None:
    """The verdict's best multilingual cosine of one lookup (``None``: the leg did not run)."""
    verdict = (json.loads(result_json).get("retrievalTrace") or {}).get("evidenceVerdict") or {}
    return verdict.get("multilingualTop")


def _run(tool: KnowledgeTool, base: dict, overrides: dict, queries: pd.DataFrame, qrels: dict | None):
    variant = tool.variant(load_config(overrides={**base, **overrides}))
    judged = {q: qrels[q] for q in queries["query_id"]} if qrels else None
    run = evaluate(variant, queries[["query_id", "query"]].reset_index(drop=True), judged)
    return run.results.set_index("query_id"), run.per_query.set_index("query_id") if qrels else None


def measure(tool: KnowledgeTool, base: dict, overrides: dict, queries: pd.DataFrame, qrels: dict) -> dict:
    """Per language: MRR@10, recall@5 and found share of what the agent receives, the MRR@10 of
    the ranking itself (the same run with the verdict off), and the best multilingual cosines of
    the questions whose first block is right (the ``multilingual_bar``'s evidence)."""
    results, per_query = _run(tool, base, overrides, queries, qrels)
    _, ranked = _run(tool, base, {**overrides, "abstention.enabled": False}, queries, qrels)
    rows = {}
    for lang, group in queries.groupby("lang"):
        ids = list(group["query_id"])
        clear = list(group.loc[~group["ambiguous"], "query_id"]) if "ambiguous" in group else ids
        rows[lang] = {
            "queries": len(ids),
            "mrr@10": float(per_query.loc[ids, "mrr@10"].mean()),
            "recall@5": float(per_query.loc[ids, "recall@5"].mean()),
            "found": float(results.loc[ids, "found"].mean()),
            "ranking_mrr@10": float(ranked.loc[ids, "mrr@10"].mean()),
            "ambiguous": len(ids) - len(clear),
            "unambiguous": {
                "mrr@10": float(per_query.loc[clear, "mrr@10"].mean()),
                "recall@5": float(per_query.loc[clear, "recall@5"].mean()),
                "found": float(results.loc[clear, "found"].mean()),
            },
            # per question: the ranking's reciprocal rank, the verdict's reason and multilingual_top
            # (to read what another multilingual_bar would have found)
            "per_question": [
                [float(ranked.loc[q, "mrr@10"]), *_verdict(results.loc[q, "result_json"])] for q in ids
            ],
        }
    return rows


def _verdict(result_json: str) -> tuple[str | None, float | None]:
    verdict = (json.loads(result_json).get("retrievalTrace") or {}).get("evidenceVerdict") or {}
    return verdict.get("reason"), verdict.get("multilingualTop")


def off_topic(tool: KnowledgeTool, base: dict, overrides: dict, languages: tuple[str, ...] = ()) -> dict:
    """Found share of the off-topic and chit-chat questions per language (``languages`` only,
    when given), and their best multilingual cosines."""
    written = [
        {**q, "kind": q["kind"] + suffix}
        for path, suffix in ((OFF_TOPIC, ""), (HELD_OUT_OFF_TOPIC, ", held-out"))
        for q in json.loads(path.read_text(encoding="utf-8"))["questions"]
        if not languages or q["lang"] in languages
    ]
    queries = pd.DataFrame(
        {"query_id": f"{q['lang']}-{q['kind']}-{n}", "query": q["text"], "lang": q["lang"], "kind": q["kind"]}
        for n, q in enumerate(written)
    )
    results, _ = _run(tool, base, overrides, queries, None)
    rows = {}
    for (lang, kind), group in queries.groupby(["lang", "kind"]):
        ids = list(group["query_id"])
        rows[f"{lang} {kind}"] = {
            "queries": len(ids),
            "found": float(results.loc[ids, "found"].mean()),
            "multilingual_tops": [
                t for q in ids if (t := multilingual_top(results.loc[q, "result_json"])) is not None
            ],
        }
    return rows


def quality(sets: list[str], cache: Path, per_language: int, pages: int, git_dir: Path) -> dict[str, Any]:
    """Each set's per-language figures under every variant; off-topic and chit-chat questions on
    the tldr store and the sample knowledge base, the leg off and auto."""
    out: dict[str, Any] = {}
    for name in sets:
        unanswerable = None
        if name == "tldr":
            kb, queries, qrels = tldr_set(cache, per_language, pages)
        elif name in ("fastapi", "unseen"):
            languages = UNSEEN if name == "unseen" else LANGUAGES
            kb, queries, qrels = fastapi_set(cache, git_dir, per_language, languages)
        else:
            kb, queries, qrels, unanswerable = handbook_set()
        store = {
            "tldr": f"multilingual-tldr-{pages}",
            "fastapi": "multilingual-fastapi-docs",
            "unseen": "multilingual-fastapi-docs",
        }
        tool, base, _ = prepared_tool(kb, cache, store.get(name, f"multilingual-{name}"))
        variants = {k: VARIANTS[k] for k in ("off (before)", "auto")} if name == "unseen" else VARIANTS
        try:
            out[name] = {label: measure(tool, base, o, queries, qrels) for label, o in variants.items()}
            if name != "unseen":  # its store's lines are read with the fastapi set
                out.setdefault("off_topic", {})[name] = {
                    k: off_topic(tool, base, VARIANTS[k]) for k in ("off (before)", "auto")
                }
            if unanswerable is not None:
                out[f"{name}_unanswerable"] = {
                    k: unanswerable_found(tool, base, VARIANTS[k], unanswerable)
                    for k in ("off (before)", "auto")
                }
        finally:
            tool.close()
        for label, rows in out[name].items():
            print_table(f"{name}, multilingual search {label}", rows)
    tool, base, _ = prepared_tool(sample_knowledge_base(), cache, "multilingual-sample-kb")
    try:
        out.setdefault("off_topic", {})["sample knowledge base"] = {
            k: off_topic(tool, base, VARIANTS[k]) for k in ("off (before)", "auto")
        }
    finally:
        tool.close()
    return out


def costs(cache: Path, documents: int, lookups: int) -> dict[str, Any]:
    """Ingest chunks/s of ``documents`` tldr pages into fresh stores, vectors off and on
    (alternating, twice; both encoders loaded before, as a long-running process has them), their
    store sizes, and lookup p50 of English, German and Chinese questions on the cached tldr
    store with the leg off and auto."""
    tldr_store = cache / "multilingual-tldr-2000"  # the lookups' store, made by the quality run
    if not (tldr_store / "knowledge").is_dir():
        raise SystemExit(f"no tldr store at {tldr_store}: run `python benchmarks/multilingual.py` first")
    pages = sorted((TLDR / "kb-en").rglob("*.md"))
    sample = random.Random(SEED).sample(pages, documents)
    kb = cache / "tldr-cost-sample"
    shutil.rmtree(kb, ignore_errors=True)
    for page in sample:
        target = kb / page.relative_to(TLDR / "kb-en")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)
    warm = cache / "cost-warm-up"  # both encoders loaded before the timed runs (once per process)
    shutil.rmtree(warm, ignore_errors=True)
    (warm / "kb").mkdir(parents=True)
    for page in sample[:3]:
        shutil.copyfile(page, warm / "kb" / page.name)
    warm_config = {"store.path": str(warm / "store"), "multilingual.vectors": "on"}
    ingest(warm / "kb", load_config(overrides=warm_config))
    ingest_rows: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(2):
        for vectors in ("off", "on"):
            store = cache / f"cost-{vectors}"
            shutil.rmtree(store, ignore_errors=True)
            config = load_config(overrides={"store.path": str(store), "multilingual.vectors": vectors})
            report = ingest(kb, config)
            size = sum(f.stat().st_blocks * 512 for f in (store / "knowledge").rglob("*") if f.is_file())
            ingest_rows[vectors].append(
                {"chunks_per_s": report.chunks_written / report.seconds, "store_mb": size / 2**20}
            )
    queries = [json.loads(line) for line in (TLDR / "queries.jsonl").read_text().splitlines()]
    by_lang = {
        lang: [q["text"] for q in queries if q["lang"] == lang][:lookups] for lang in ("en", "de", "zh")
    }
    config = load_config(overrides={"store.path": str(tldr_store)})
    tool = KnowledgeTool.from_config(config)
    latency: dict[str, dict[str, float]] = {}
    try:
        for label in ("off", "auto"):
            variant = tool.variant(
                config.model_copy(
                    update={"multilingual": config.multilingual.model_copy(update={"search": label})}
                )
            )
            variant.lookup("warm-up")
            variant.lookup("Aufwärmen")
            for lang, texts in by_lang.items():
                times = []
                for text in texts:
                    began = time.perf_counter()
                    variant.lookup(text)
                    times.append((time.perf_counter() - began) * 1000)
                latency.setdefault(label, {})[lang] = statistics.median(times)
    finally:
        tool.close()
    return {
        "documents": documents,
        "ingest": {
            v: {k: statistics.median(r[k] for r in rows) for k in ("chunks_per_s", "store_mb")}
            for v, rows in ingest_rows.items()
        },
        "lookup_p50_ms": latency,
    }


def print_table(title: str, rows: dict[str, dict]) -> None:
    table = Table(title=title)
    for column in ("language", "queries", "MRR@10", "recall@5", "found", "ranking MRR@10"):
        table.add_column(column)
    for lang, r in rows.items():
        table.add_row(
            lang, str(r["queries"]), f"{r['mrr@10']:.3f}", f"{r['recall@5']:.3f}", f"{r['found']:.1%}",
            f"{r['ranking_mrr@10']:.3f}",
        )  # fmt: skip
    console.print(table)


def quality_table(results: dict[str, Any], name: str) -> str:
    """Per language, each variant's MRR@10 / recall@5 / found share (the ranking's MRR@10)."""
    block = results[name]
    header = "| language | questions | " + " | ".join(
        f"{label}: MRR@10 / recall@5 / found (ranking MRR@10)" for label in block
    )
    lines = [header + " |", "|---|---:|" + "---:|" * len(block)]
    first = next(iter(block.values()))
    order = [lang for lang in dict.fromkeys((*LANGUAGES, *UNSEEN)) if lang in first]
    for lang in order:
        cells = [
            f"{r['mrr@10']:.3f} / {r['recall@5']:.3f} / {r['found']:.0%} ({r['ranking_mrr@10']:.3f})"
            for r in (block[label][lang] for label in block)
        ]
        lines.append(f"| {lang} | {first[lang]['queries']} | " + " | ".join(cells) + " |")
    others = [lang for lang in order if lang != "en"]
    for label in block:
        share = (
            statistics.fmean(block[label][lang]["mrr@10"] for lang in others) / block[label]["en"]["mrr@10"]
        )
        lines.append(f"\nNon-English MRR@10 as a share of English, {label}: {share:.0%}.")
    return "\n".join([machine_line(results["measured"], "multilingual.py"), "", *lines])


def share_table(results: dict[str, Any], name: str, label: str = "auto") -> str:
    """Per language under ``label``: MRR@10, recall@5 and found share as shares of English (the
    targets of issue 53), of all its questions and of those a single page answers; with ambiguous
    questions, what a ranking reaches with each other question's page first and these at 0."""
    rows, ambiguous = results[name][label], any(r.get("ambiguous") for r in results[name][label].values())
    english = rows["en"]
    ceiling = " | MRR@10 / English, every unambiguous page first" if ambiguous else ""
    lines = [
        f"| language ({label}) | ambiguous questions | MRR@10 / English | recall@5 / English "
        f"| found{ceiling} |",
        "|---|---:|---:|---:|---:|" + ("---:|" if ambiguous else ""),
    ]
    for lang in (lang for lang in LANGUAGES if lang in rows and lang != "en"):
        r, clear = rows[lang], rows[lang].get("unambiguous")
        cells = [
            f"{r[m] / english[m]:.0%}" + (f" ({clear[m] / english[m]:.0%})" if ambiguous else "")
            for m in ("mrr@10", "recall@5")
        ]
        found = f"{r['found']:.0%}" + (f" ({clear['found']:.0%})" if ambiguous else "")
        best = (
            f" | {(r['queries'] - r['ambiguous']) / r['queries'] / english['mrr@10']:.0%}"
            if ambiguous
            else ""
        )
        lines.append(f"| {lang} | {r.get('ambiguous', 0)} | {cells[0]} | {cells[1]} | {found}{best} |")
    if ambiguous:
        lines.append("\nIn brackets: without the ambiguous questions (no single page answers them).")
    return "\n".join(lines)


def cost_table(results: dict[str, Any]) -> str:
    c = results["costs"]
    off, on = c["ingest"]["off"], c["ingest"]["on"]
    lat = c["lookup_p50_ms"]
    rows = [
        machine_line(results["measured"], "multilingual.py --costs"),
        "",
        f"| {c['documents']} tldr pages | multilingual off | multilingual on | on / off |",
        "|---|---:|---:|---:|",
        f"| ingest chunks/s | {off['chunks_per_s']:.1f} | {on['chunks_per_s']:.1f} | "
        f"{on['chunks_per_s'] / off['chunks_per_s']:.0%} |",
        f"| store size MB | {off['store_mb']:.1f} | {on['store_mb']:.1f} | "
        f"{on['store_mb'] / off['store_mb']:.0%} |",
    ]
    for lang in ("en", "de", "zh"):
        a, b = lat["off"][lang], lat["auto"][lang]
        rows.append(
            f"| lookup p50 ms, {lang} questions (search off / auto) | {a:.1f} | {b:.1f} | {b / a:.0%} |"
        )
    return "\n".join(rows)


def off_topic_table(results: dict[str, Any]) -> str:
    """Found share of the written off-topic and chit-chat questions, per store, language and kind."""
    block = results["off_topic"]
    stores = list(block)
    labels = list(next(iter(block.values())))
    header = " | ".join(f"{store}, {label}" for store in stores for label in labels)
    lines = [f"| questions | {header} |", "|---|" + "---:|" * (len(stores) * len(labels))]
    for row in next(iter(next(iter(block.values())).values())):
        cells = [f"{block[store][label][row]['found']:.0%}" for store in stores for label in labels]
        lines.append(f"| {row} ({block[stores[0]][labels[0]][row]['queries']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unanswerable_table(results: dict[str, Any], name: str) -> str:
    """Found share of the questions no page answers, per language, the leg off and auto."""
    block = results[f"{name}_unanswerable"]
    labels = list(block)
    lines = ["| language | questions | " + " | ".join(f"found, {k}" for k in labels) + " |"]
    lines.append("|---|---:|" + "---:|" * len(labels))
    for lang in (lang for lang in LANGUAGES if lang in block[labels[0]]):
        cells = " | ".join(f"{block[k][lang]['found']:.0%}" for k in labels)
        lines.append(f"| {lang} | {block[labels[0]][lang]['queries']} | {cells} |")
    return "\n".join(lines)


def write_doc(doc: Path, results: dict[str, Any]) -> None:
    for name in ("tldr", "fastapi", "handbook"):
        if name in results:
            replace_table(doc, f"multilingual-{name}", quality_table(results, name))
            replace_table(doc, f"multilingual-{name}-shares", share_table(results, name))
    if "unseen" in results:
        replace_table(doc, "multilingual-unseen", quality_table(results, "unseen"))
        if f"{name}_unanswerable" in results:
            replace_table(doc, f"multilingual-{name}-unanswerable", unanswerable_table(results, name))
    if set(results.get("off_topic", {})) >= {*OFF_TOPIC_STORES}:  # the table whole, or left as it is
        replace_table(doc, "multilingual-off-topic", off_topic_table(results))
    if "costs" in results:
        replace_table(doc, "multilingual-costs", cost_table(results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--sets", default="tldr,fastapi,unseen,handbook")
    parser.add_argument("--per-language", type=int, default=120, help="questions per language (0: all)")
    parser.add_argument("--pages", type=int, default=2000, help="tldr pages in the knowledge base (0: all)")
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's tables from --out")
    parser.add_argument("--costs", action="store_true", help="measure ingest and lookup costs only")
    parser.add_argument("--cost-documents", type=int, default=600)
    parser.add_argument("--cost-lookups", type=int, default=60)
    parser.add_argument("--fastapi-git", type=Path, default=FASTAPI_GIT)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/multilingual.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    args = parser.parse_args()
    if not TLDR.is_dir():
        print(f"skipped: {TLDR} not found (benchmark data lives in ../shared/data)")
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    load = os.getloadavg()[0]
    if args.from_json:
        write_doc(args.doc, results)
        return 0
    if args.costs:
        results["costs"] = costs(args.cache, args.cost_documents, args.cost_lookups)
        console.print(results["costs"])
    else:
        sets = [
            s for s in args.sets.split(",") if s not in ("fastapi", "unseen") or args.fastapi_git.is_dir()
        ]
        fresh = quality(sets, args.cache, args.per_language, args.pages, args.fastapi_git)
        results.setdefault("off_topic", {}).update(fresh.pop("off_topic"))  # other sets' kept
        results.update(fresh)
        results["per_language"], results["tldr_pages"] = args.per_language, args.pages
    results["measured"] = measured(load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    write_doc(args.doc, results)
    console.print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

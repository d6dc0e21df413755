"""Whether the verdict an agent reads first is true: abstention, relevance levels, completeness.

    python benchmarks/trust.py [--cache benchmarks/.cache] [--out benchmarks/results/trust.json]
                               [--offtopic-per-set 60] [--held-out] [--sample-kb] [--own-sets]
                               [--sets NAME ...] [--doc docs/trust.md]
    python benchmarks/trust.py --own-sets --sets docs-site handbook benefits   # only the sets built here
    python benchmarks/trust.py --from-json   # rewrite docs/trust.md's tables from --out only

Each judged collection is the knowledge base in turn (SciFact; classic-dev's four collections,
each a store of its own; hugo-docs with page descriptions as questions, ``trust_stores.py``):

- answerable: the set's own judged questions; found=true share, nDCG@10 with abstention and
  without (``abstention.enabled false``, today's behaviour), the level of each lookup and
  whether its top block is relevant, and what its completeness hint said;
- off-topic: questions of the other judged sets (a seeded sample per set), and the off-topic,
  chit-chat and workplace lists of ``benchmarks/offtopic_queries.json`` (eight languages, written
  apart from the probe set the stores calibrate with; workplace: what a company's own wiki would
  answer and none of these stores does).

With ``--own-sets``, the sets built here (``own_sets.py``, never fitted on) add a group
``unanswerable`` (near-topic questions no page answers) and, for the answerable questions,
whether the top block's page answers (page level) and whether the top block itself holds the
located answer (passage level, ``own_sets.holds_answer``), per relevance level; their two
tables are written whenever they are measured.

Leave-one-corpus-out (over the sets choices may be fitted on): for each set, the strictness a
user would pick on the *other* sets (the strictest that keeps answerable found=true >= 97% on
each of them), read on the held-out set.
Prints tables, writes JSON (per-lookup records included) to ``--out`` and the tables of
``docs/trust.md`` between their markers (``doc_sections.replace_table``), whole.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
from doc_sections import replace_table
from own_sets import Answer, holds_answer, located_answers, unanswerable_questions
from quality import DEPTH, beir_queries, prepared_tool, run
from rich.console import Console
from rich.table import Table
from trust_stores import JudgedSet, judged_sets

from lookup_knowledge import KnowledgeTool, load_config
from lookup_knowledge.adapters.search import KnowledgeSearchPort
from lookup_knowledge.adapters.sparse import held_as_written
from lookup_knowledge.calibration import script_of
from lookup_knowledge.contract import EvidenceBlock
from lookup_knowledge.dataflows.abstention import AbstentionPolicy, informative_share, query_term_idf
from lookup_knowledge.dataflows.query_understanding import query_terms
from lookup_knowledge.eval.data import Qrels, load_qrels, relevance

console = Console()
OFFTOPIC_FILE = Path(__file__).with_name("offtopic_queries.json")
LEVELS = ("high", "medium", "low")
GROUPS = ("answerable", "cross-corpus", "offtopic", "chitchat", "workplace")
OWN_GROUPS = ("answerable", "unanswerable", "workplace", "cross-corpus", "offtopic", "chitchat")
ANSWERABLE_TARGET = 0.97
POLICY = AbstentionPolicy()  # the verdict's thresholds


def judged_questions(judged: JudgedSet) -> tuple[pd.DataFrame, Qrels]:
    """The set's judged questions and their judgments."""
    queries = beir_queries(judged.questions)
    qrels = relevance(queries, load_qrels(judged.questions / "qrels.tsv"))
    return queries[queries["query_id"].isin(set(qrels))].reset_index(drop=True), qrels


def _hint_kind(hint: str) -> str:
    return hint.split(":", 1)[0]


def block_text(block: EvidenceBlock) -> str:
    """What a block shows an agent: its title, breadcrumb and content."""
    return "\n".join((block.title or "", block.breadcrumb or "", block.content))


def written_terms(terms: tuple[str, ...], blocks: list[EvidenceBlock]) -> tuple[str, ...]:
    """Of the matched ``terms``, those the best blocks hold as written, not only in another
    form of their stem (``parent`` for "parental")."""
    best = blocks[: POLICY.coverage_hits]
    texts = [block_text(b).lower() for b in best]
    return tuple(term for term in terms if any(held_as_written(text, term) for text in texts))


def information_shares(
    text: str, matched: tuple[str, ...], port: KnowledgeSearchPort
) -> tuple[float | None, float | None]:
    """The verdict's two shares of the query's information (the best hits' ``matched`` terms',
    and the words no chunk holds), read from the store whatever the margin."""
    terms = query_terms(text)
    share = informative_share(query_term_idf(True, terms, port), terms, matched)
    return (share.held, share.unheld) if share else (None, None)


def lookup_record(
    tool: KnowledgeTool,
    text: str,
    relevant: set[str] | None,
    unabstained: KnowledgeTool | None = None,
    answers: list[Answer] | None = None,
) -> dict[str, Any]:
    """What one lookup said, and (answerable questions) whether it was right; with its
    informative coverage whatever its margin, to replay other strictness values (and, given
    the same tool without abstention, the share its best blocks hold as written); given the
    question's located ``answers``, whether the top block (and any of the top three) holds one."""
    result = tool.lookup(text)
    verdict = result.retrieval_trace.evidence_verdict if result.retrieval_trace else None
    documents = [block.doc_id for block in result.evidence_blocks]
    record = {
        "text": text,
        "top_doc": documents[0] if documents else None,
        "found": result.found,
        "status": result.evidence_status,
        "level": result.relevance_level,
        "hint": _hint_kind(result.completeness_hint),
        "reason": verdict.reason if verdict else None,
        "margin": verdict.margin if verdict else None,
        "null_median": verdict.null_median if verdict else None,  # to replay other normalizations
        "null_p90": verdict.null_p90 if verdict else None,
        "coverage": verdict.lexical_coverage if verdict else None,
        "dense_top": verdict.dense_top if verdict else None,
        "top_dense_rank": verdict.top_dense_rank if verdict else None,
        "top_sparse_rank": verdict.top_sparse_rank if verdict else None,
        "top_hit_coverage": verdict.top_hit_coverage if verdict else None,  # what the level reads
        "own_p5": verdict.own_questions_p5 if verdict else None,  # the store's bar floor, to replay
    }
    # read for every lookup (the product reads them only in the band around the bar)
    matched = tuple(verdict.matched_terms) if verdict else ()
    shares = information_shares(text, matched, tool.search_port) if verdict else (None, None)
    record.update(informative=shares[0], unheld=shares[1])
    if verdict and unabstained is not None:
        blocks = sorted(unabstained.lookup(text).evidence_blocks, key=lambda b: -b.score)
        written = written_terms(matched, blocks)
        record["informative_written"] = information_shares(text, written, tool.search_port)[0]
    if relevant is not None:
        record["top_relevant"] = bool(documents) and documents[0] in relevant
        record["relevant_missing"] = bool(relevant - set(documents))
    if answers is not None:
        top3 = result.evidence_blocks[:3]
        held = [holds_answer(b.doc_id or "", block_text(b), answers) for b in top3]
        pages = {answer.page for answer in answers}
        record["top_block_answers"] = bool(held) and held[0]
        record["answer_block_top3"] = any(held)
        record["answer_page_top3"] = any(b.doc_id in pages for b in top3)
    return record


def offtopic_groups(sets: list[JudgedSet], questions: dict[str, pd.DataFrame], per_set: int) -> dict:
    """Off-topic questions per knowledge base: every other set's (sampled), and the written lists."""
    written = json.loads(OFFTOPIC_FILE.read_text(encoding="utf-8"))
    groups: dict[str, dict[str, list[str]]] = {}
    for judged in sets:
        cross = [
            text
            for other in sets
            if other.name != judged.name and other.asks_others
            for text in questions[other.name].sample(
                min(per_set, len(questions[other.name])), random_state=0
            )["query"]
        ]
        groups[judged.name] = {
            "cross-corpus": cross,
            "offtopic": written["offtopic"],
            "chitchat": written["chitchat"],
            "workplace": written["workplace"],
        }
    return groups


READER_ON = {"answerability.reader": True}  # the answerability reader (docs/answerability.md)


def knowledge_base(
    judged: JudgedSet, cache: Path, overrides: dict[str, Any] | None = None
) -> tuple[KnowledgeTool, dict[str, Any]]:
    """The set's cached store as it is (a benchmark of the verdict, not of chunking: other
    work may change the chunker meanwhile); ingested only when missing."""
    base = {"store.path": str(cache / f"trust-{judged.name}"), **(overrides or {})}
    if not Path(base["store.path"]).is_dir():
        return prepared_tool(judged.documents, cache, f"trust-{judged.name}", overrides, cached_vectors=True)
    return KnowledgeTool.from_config(load_config(overrides=base)), base


def measure_set(
    judged: JudgedSet,
    cache: Path,
    queries: pd.DataFrame,
    qrels: Qrels,
    offtopic: dict,
    overrides: dict[str, Any] | None = None,
) -> dict:
    """Every lookup of one knowledge base, and its nDCG@10 with and without abstention."""
    tool, base = knowledge_base(judged, cache, overrides)
    answers = located_answers(judged.questions) if judged.passages else None
    with tool:
        unabstained = tool.variant(load_config(overrides={**base, "abstention.enabled": False}))
        records = []
        for qid, text in zip(queries["query_id"], queries["query"], strict=True):
            relevant = {doc for doc, grade in qrels.get(qid, {}).items() if grade > 0}
            located = answers.get(qid, []) if answers is not None else None
            records.append(
                {"group": "answerable", **lookup_record(tool, text, relevant, unabstained, located)}
            )
        for group, texts in offtopic.items():
            records += [{"group": group, **lookup_record(tool, text, None, unabstained)} for text in texts]
        after = run(tool, base, DEPTH, queries, qrels)
        before = run(tool, base, {**DEPTH, "abstention.enabled": False}, queries, qrels)
    return {"records": records, "ndcg@10": after["ndcg@10"], "ndcg@10 without abstention": before["ndcg@10"]}


def passage_figures(records: pd.DataFrame) -> dict[str, Any]:
    """A set with located answers: found shares of its answerable and unanswerable questions,
    whether the top block's page answers and whether the top block itself holds the answer (of
    all answerable questions: an abstained lookup has no top block to count), and per level of
    the found ones, how often each holds."""
    answerable = records[records["group"] == "answerable"]
    unanswerable = records[records["group"] == "unanswerable"]
    found = answerable[answerable["found"]]
    wrong = unanswerable[unanswerable["found"]]

    def share(column: str, rows: pd.DataFrame = answerable) -> float | None:
        return float(rows[column].astype(bool).mean()) if len(rows) else None

    return {
        "questions": {"answerable": len(answerable), "unanswerable": len(unanswerable)},
        "answerable_found": share("found"),
        "unanswerable_found": share("found", unanswerable),
        "top_page_answers": share("top_relevant"),
        "top_block_answers": share("top_block_answers"),
        "answer_page_top3": share("answer_page_top3"),
        "answer_block_top3": share("answer_block_top3"),
        "levels": {
            level: {
                "lookups": int((found["level"] == level).sum()),
                "page": share("top_relevant", found[found["level"] == level]),
                "passage": share("top_block_answers", found[found["level"] == level]),
            }
            for level in LEVELS
        },
        "unanswerable_levels": {level: int((wrong["level"] == level).sum()) for level in LEVELS},
    }


def summary(records: pd.DataFrame, measured: dict, passages: bool) -> dict[str, Any]:
    """A variant's figures beside the default's: found shares, levels, passages and nDCG@10."""
    return {
        "ndcg@10": measured["ndcg@10"],
        "found_rate": found_rates(records),
        "calibration": calibration(records),
        "unanswerable_levels": unanswerable_levels(records),
        **({"passages": passage_figures(records)} if passages else {}),
    }


def found_rates(records: pd.DataFrame) -> dict[str, float]:
    """found=true share per question group."""
    return records.groupby("group")["found"].mean().to_dict()


def calibration(records: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per level: lookups, and the share whose top block is relevant (answerable questions)."""
    answerable = records[(records["group"] == "answerable") & records["found"]]
    table = {}
    for level in LEVELS:
        rows = answerable[answerable["level"] == level]
        table[level] = {
            "lookups": len(rows),
            "top_relevant": float(rows["top_relevant"].mean()) if len(rows) else None,
        }
    return table


def unanswerable_levels(records: pd.DataFrame) -> dict[str, int]:
    """Levels of the found lookups of questions the store cannot answer (every group but the
    answerable one): each is a wrong answer, and ``high`` claims it most."""
    found = records[(records["group"] != "answerable") & records["found"]]
    return {level: int((found["level"] == level).sum()) for level in LEVELS}


def hint_meaning(records: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per hint kind: lookups, and the share with a relevant document not among the blocks."""
    answerable = records[(records["group"] == "answerable") & records["found"]]
    return {
        kind: {"lookups": len(rows), "relevant_missing": float(rows["relevant_missing"].mean())}
        for kind, rows in answerable.groupby("hint")
    }


def would_find(records: pd.DataFrame, strictness: float) -> pd.Series:
    """found=true had the strictness been ``strictness`` (the store's bar: the higher of it and the
    verdict's ``own_questions_p5``; same lookups, same margins, informative coverage and unheld
    share; the rare exact-code hits that pass whatever the margin are not replayed)."""
    words = records["coverage"].isna() | (records["coverage"] > 0)
    margin, share = records["margin"], records["informative"]
    own = records["own_p5"] if "own_p5" in records else pd.Series(float("nan"), index=records.index)
    strictness = own.where(own > strictness, strictness)  # the store's bar (abstention.own_questions)
    informative = pd.Series(False, index=records.index)
    for least, relief in POLICY.informative_reliefs:  # the bar lowered by relief for hits holding least
        informative |= (margin >= strictness - relief) & (share >= least)
    cjk = records["text"].map(script_of) == "cjk"  # a CJK query's verdict reads its words alone
    refused = POLICY.uninformative(margin, share, strictness) & ~cjk  # NaN share: not read
    unheld = records["unheld"] if "unheld" in records else pd.Series(float("nan"), index=records.index)
    unheld_subject = (unheld >= POLICY.unheld_share) & (margin < 2 * strictness) & ~cjk
    passed = margin.isna() | (((margin >= strictness) & ~refused) | informative) & ~unheld_subject
    return records["dense_top"].notna() & (records["status"] != "retrieval_failed") & words & passed


def strictness_sweep(per_set: dict[str, pd.DataFrame]) -> dict[str, dict[str, dict[str, float]]]:
    """found=true share per set and question group at each strictness (replayed from the margins)."""
    return {
        str(strictness): {
            name: {group: float(would_find(rows, strictness).mean()) for group, rows in f.groupby("group")}
            for name, f in per_set.items()
        }
        for strictness in (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)
    }


def leave_one_out(
    per_set: dict[str, pd.DataFrame], fitted: set[str] | None = None
) -> dict[str, dict[str, float]]:
    """Strictness fitted on the other sets (the strictest keeping answerable >= 97% found on
    each), and what it gives on the held-out one; only the ``fitted`` sets (all, by default)
    are ever fitted on, the others are only read."""
    grid = [round(0.25 * step, 2) for step in range(17)]  # margins 0 to 4
    fitted = set(per_set) if fitted is None else fitted
    out = {}
    for held_out in per_set:
        others = [frame for name, frame in per_set.items() if name != held_out and name in fitted]
        if not others:
            continue

        def keeps(strictness: float, frames: list[pd.DataFrame]) -> bool:
            return all(
                would_find(f[f["group"] == "answerable"], strictness).mean() >= ANSWERABLE_TARGET
                for f in frames
            )

        fitted = max((s for s in grid if keeps(s, others)), default=grid[0])
        frame = per_set[held_out]
        rates = {
            group: float(would_find(frame[frame["group"] == group], fitted).mean())
            for group in frame["group"].unique()
        }
        out[held_out] = {"fitted_strictness": fitted, **rates}
    return out


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_tables(results: dict[str, Any]) -> dict[str, str]:
    """The tables of ``docs/trust.md``: abstention, the strictness sweep, leave-one-out, levels, hints."""
    groups = GROUPS
    sets = results["sets"]
    abstention = [
        _row(["knowledge base", *groups, "nDCG@10", "without abstention", "delta"]),
        _row(["---"] * (len(groups) + 4)),
    ]
    for name, b in sets.items():
        after, before = b["ndcg@10"], b["ndcg@10 without abstention"]
        rates = [f"{b['found_rate'].get(g, float('nan')):.3f}" for g in groups]
        abstention.append(_row([name, *rates, f"{after:.4f}", f"{before:.4f}", f"{after - before:+.4f}"]))
    sweep = [_row(["strictness", "knowledge base", *groups]), _row(["---"] * (len(groups) + 2))]
    for strictness, per_set in results["strictness_sweep"].items():
        for name, rates in per_set.items():
            sweep.append(_row([strictness, name, *(f"{rates.get(g, float('nan')):.3f}" for g in groups)]))
    loco = [_row(["held out", "fitted strictness", *groups]), _row(["---"] * (len(groups) + 2))]
    for name, r in results["leave_one_corpus_out"].items():
        loco.append(
            _row([name, f"{r['fitted_strictness']:.2f}", *(f"{r.get(g, float('nan')):.3f}" for g in groups)])
        )
    levels = [
        _row(["knowledge base", *LEVELS, "found, cannot answer: high / medium / low"]),
        _row(["---"] * 5),
    ]
    for name, b in sets.items():
        cells = [
            f"{c['top_relevant']:.3f} ({c['lookups']})" if c["lookups"] else "- (0)"
            for c in (b["calibration"][level] for level in LEVELS)
        ]
        wrong = " / ".join(str(b["unanswerable_levels"][level]) for level in LEVELS)
        levels.append(_row([name, *cells, wrong]))
    hints = [_row(["knowledge base", "complete", "partial"]), _row(["---"] * 3)]
    for name, b in sets.items():
        cells = [
            f"{h['relevant_missing']:.3f} ({h['lookups']})" if (h := b["hints"].get(kind)) else "- (0)"
            for kind in ("complete", "partial")
        ]
        hints.append(_row([name, *cells]))
    return {
        "trust-abstention": "\n".join(abstention),
        "trust-strictness": "\n".join(sweep),
        "trust-leave-one-out": "\n".join(loco),
        "trust-levels": "\n".join(levels),
        "trust-hints": "\n".join(hints),
    }


def _share(value: float | None) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3f}"


def own_set_tables(results: dict[str, Any]) -> dict[str, str]:
    """The tables of the sets built here (``own_sets.py``): found shares per group with the
    top block's page and passage, and per level how often the top block holds the answer."""
    own = {name: b for name, b in results["sets"].items() if "passages" in b}
    if not own:
        return {}
    found = [
        _row(["knowledge base", "questions (answerable / unanswerable)", *(f"{g} found" for g in OWN_GROUPS),
              "top block's page answers", "top block holds the answer", "answering page / passage in top 3"]),
        _row(["---"] * (len(OWN_GROUPS) + 5)),
    ]  # fmt: skip
    levels = [
        _row(["knowledge base", *(f"{level}: passage / page (lookups)" for level in LEVELS),
              "unanswerable found: high / medium / low"]),
        _row(["---"] * 5),
    ]  # fmt: skip
    for name, b in own.items():
        p = b["passages"]
        counts = f"{p['questions']['answerable']} / {p['questions']['unanswerable']}"
        rates = [_share(b["found_rate"].get(g)) for g in OWN_GROUPS]
        top3 = f"{_share(p['answer_page_top3'])} / {_share(p['answer_block_top3'])}"
        found.append(
            _row([name, counts, *rates, _share(p["top_page_answers"]), _share(p["top_block_answers"]), top3])
        )
        cells = [
            f"{_share(c['passage'])} / {_share(c['page'])} ({c['lookups']})"
            for c in (p["levels"][lv] for lv in LEVELS)
        ]
        levels.append(_row([name, *cells, " / ".join(str(p["unanswerable_levels"][lv]) for lv in LEVELS)]))
    return {"trust-own-sets": "\n".join(found), "trust-own-levels": "\n".join(levels)}


def reader_table(results: dict[str, Any]) -> dict[str, str]:
    """The answerability reader side by side (``--reader``): per store, each group's found share,
    the top block's page and passage (sets built here) and nDCG@10, off -> on."""
    sets = {name: b for name, b in results["sets"].items() if "reader_on" in b}
    if not sets:
        return {}
    columns = [
        *(f"{g} found" for g in OWN_GROUPS),
        "top block's page answers",
        "top block holds it",
        "nDCG@10",
    ]
    rows = [_row(["knowledge base (reader off -> on)", *columns]), _row(["---"] * (len(columns) + 1))]
    for name, off in sets.items():
        on = off["reader_on"]
        pair = [(off["found_rate"].get(g), on["found_rate"].get(g)) for g in OWN_GROUPS]
        for key in ("top_page_answers", "top_block_answers"):
            pair.append((off.get("passages", {}).get(key), on.get("passages", {}).get(key)))
        cells = ["-" if a is None else f"{_share(a)} -> {_share(b)}" for a, b in pair]
        rows.append(_row([name, *cells, f"{off['ndcg@10']:.4f} -> {on['ndcg@10']:.4f}"]))
    return {"trust-reader": "\n".join(rows)}


def write_doc(doc: Path, results: dict[str, Any], own_only: bool = False) -> None:
    """Each table of ``doc`` (docs/trust.md) rewritten whole from ``results``; its prose kept;
    with ``own_only``, only the tables of the sets built here."""
    tables = own_set_tables(results) if own_only else {**markdown_tables(results), **own_set_tables(results)}
    tables |= reader_table(results)
    for name, table in tables.items():
        replace_table(doc, name, table)


def print_tables(results: dict[str, Any]) -> None:
    table = Table(title="abstention: found=true share per question group")
    groups = GROUPS
    for column in ["knowledge base", *groups, "nDCG@10", "without abstention"]:
        table.add_column(column)
    for name, block in results["sets"].items():
        rates = block["found_rate"]
        table.add_row(
            name, *(f"{rates.get(g, float('nan')):.3f}" for g in groups),
            f"{block['ndcg@10']:.4f}", f"{block['ndcg@10 without abstention']:.4f}",
        )  # fmt: skip
    console.print(table)
    levels = Table(title="relevance level: share of found lookups whose top block is relevant (lookups)")
    for column in ["knowledge base", *LEVELS, "unanswerable found: high / medium / low"]:
        levels.add_column(column)
    for name, block in results["sets"].items():
        cells = [
            f"{c['top_relevant']:.3f} ({c['lookups']})" if c["lookups"] else "- (0)"
            for c in (block["calibration"][level] for level in LEVELS)
        ]
        wrong = " / ".join(str(block["unanswerable_levels"][level]) for level in LEVELS)
        levels.add_row(name, *cells, wrong)
    console.print(levels)
    for name, text in (own_set_tables(results) | reader_table(results)).items():
        console.print(f"[bold]{name}[/bold]\n{text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/trust.json"))
    parser.add_argument("--offtopic-per-set", type=int, default=60)
    parser.add_argument("--sets", nargs="*", help="only these knowledge bases")
    parser.add_argument("--held-out", action="store_true", help="add the held-out docs set (package READMEs)")
    parser.add_argument("--sample-kb", action="store_true", help="add the bundled sample knowledge base")
    parser.add_argument("--own-sets", action="store_true", help="add the sets built here (benchmarks/sets)")
    parser.add_argument("--doc", type=Path, default=Path("docs/trust.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's tables from --out")
    parser.add_argument(
        "--reader", action="store_true", help="also measure each store with the answerability reader"
    )
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    sets = judged_sets(args.cache, held_out=args.held_out, sample_kb=args.sample_kb, own_sets=args.own_sets)
    judged = {s.name: judged_questions(s) for s in sets}
    offtopic = offtopic_groups(sets, {n: q for n, (q, _) in judged.items()}, args.offtopic_per_set)
    for s in sets:
        if s.passages:
            offtopic[s.name] = {"unanswerable": unanswerable_questions(s.questions), **offtopic[s.name]}
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "sets": {}}
    frames = {}
    for s in sets:
        if args.sets and s.name not in args.sets:
            continue
        queries, qrels = judged[s.name]
        measured = measure_set(s, args.cache, queries, qrels, offtopic[s.name])
        frame = pd.DataFrame(measured.pop("records"))
        frames[s.name] = frame
        results["sets"][s.name] = {
            **measured,
            **summary(frame, measured, s.passages),
            "hints": hint_meaning(frame),
            "records": frame.to_dict("records"),
        }
        if args.reader:
            on = measure_set(s, args.cache, queries, qrels, offtopic[s.name], READER_ON)
            results["sets"][s.name]["reader_on"] = summary(pd.DataFrame(on.pop("records")), on, s.passages)
    results["leave_one_corpus_out"] = leave_one_out(frames, {s.name for s in sets if s.fitted})
    results["strictness_sweep"] = strictness_sweep(frames)
    print_tables(results)
    console.print({name: block["hints"] for name, block in results["sets"].items()})
    console.print(results["leave_one_corpus_out"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    if not args.sets:  # a partial run would leave the doc's tables without the other sets
        write_doc(args.doc, results)
    elif args.own_sets and set(args.sets) >= {s.name for s in sets if s.passages}:
        write_doc(args.doc, results, own_only=True)  # their tables hold only them
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""verify_answer on answers built from real lookups: catch rate, false flags, latency.

    python benchmarks/verify.py [--kb hugo-docs|sample] [--answers-per-block 2]

The knowledge base (default: ``hugo-docs`` when ``../shared/data`` is present, else the sample
knowledge base) is copied to a temporary folder, so its files can be edited, and ingested into a
temporary store (default configuration). For hugo-docs the copy holds the sections
:data:`HUGO_SECTIONS` and the questions are their pages' own descriptions (real questions a page
answers) and titles; for the sample, every document's title and keywords. One recorded lookup
per session for each question; from every returned block, correct answers (a verbatim run of
the block's words, quoted, cited with its key) and six faulted ones:

* ``never_returned``: a chunk of the same document no lookup of the session returned;
* ``other_session``: a key returned to another session only;
* ``fabricated``: a key of a document the knowledge base does not hold;
* ``altered_quote``: the quote with one word changed;
* ``other_block``: a quote from another returned block, cited with this block's key;
* ``changed_source``: the block's source file edited after the lookup (checked last, once every
  other answer is verified: the record's version of the block no longer matches the file).

Every answer goes through ``AgentLookup.verify_answer`` (the record read, the verdict written as
a ``verify_answer`` row: SQLite, WAL). Writes ``benchmarks/results/verify.json`` and prints a
table.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from corpora import DATA, PLACEHOLDER_DESCRIPTION

from lookup_knowledge import AgentLookup, load_config, sample_knowledge_base
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import l0_index_path

RESULTS = Path(__file__).parent / "results" / "verify.json"
EXPECTED = {
    "correct": "ok",
    "never_returned": "not_returned",
    "other_session": "not_returned",
    "fabricated": "unknown_key",
    "altered_quote": "quote_mismatch",
    "other_block": "quote_mismatch",
    "changed_source": "stale",
}
QUOTE_WORDS = 7
HUGO_SECTIONS = ("content-management", "templates", "hugo-pipes", "hosting-and-deployment", "getting-started")


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _quote(content: str, rng: random.Random) -> str | None:
    """A verbatim run of :data:`QUOTE_WORDS` words (none holding a quotation mark, which would end
    the quote early), or ``None`` when the block has none."""
    words = content.split()
    starts = [i for i in range(len(words) - QUOTE_WORDS) if '"' not in " ".join(words[i : i + QUOTE_WORDS])]
    if not starts:
        return None
    start = rng.choice(starts)
    return " ".join(words[start : start + QUOTE_WORDS])


def _answer(quote: str, key: str) -> str:
    return f'According to the knowledge base, "{quote}" [{key}]. This settles the question.'


def questions(index: L0Index) -> list[str]:
    """Each document's title and keywords: questions the sample knowledge base answers."""
    asked = [text for doc in index.documents.values() for text in (doc.title, *doc.keywords)]
    return list(dict.fromkeys(q for q in asked if q and len(q) > 3))


def hugo_questions(kb: Path) -> list[str]:
    """The copied pages' descriptions (each a question its page answers) and titles."""
    pages = read_corpus(kb).documents
    asked = [p.description for p in pages if p.description and p.description != PLACEHOLDER_DESCRIPTION]
    return list(dict.fromkeys(q for q in [*asked, *(p.title for p in pages)] if q and len(q) > 3))


def copy_kb(name: str, into: Path) -> Path:
    """A writable copy of the knowledge base ``name`` (its files are edited for ``changed_source``)."""
    if name == "sample":
        shutil.copytree(sample_knowledge_base(), into)
        return into
    for section in HUGO_SECTIONS:
        shutil.copytree(DATA / "hugo-docs" / section, into / section)
    return into


def main() -> None:
    parser = argparse.ArgumentParser()
    default_kb = "hugo-docs" if (DATA / "hugo-docs").is_dir() else "sample"
    parser.add_argument("--kb", choices=["hugo-docs", "sample"], default=default_kb)
    parser.add_argument("--answers-per-block", type=int, default=2)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        kb = copy_kb(args.kb, Path(tmp) / "kb")
        config = load_config(overrides={"store.path": str(Path(tmp) / "store")})
        report = ingest(kb, config, progress=True)
        index = L0Index.load(l0_index_path(config))
        asked = hugo_questions(kb) if args.kb == "hugo-docs" else questions(index)
        with AgentLookup.from_config(config) as agent:
            agent.warm_up()
            figures = run(agent, asked, rng, args.answers_per_block)
    held = ", ".join(HUGO_SECTIONS) if args.kb == "hugo-docs" else "lookup_knowledge/sample-kb"
    figures["store"] = (
        f"{args.kb} ({held}): {report.documents} documents, {report.points_in_store} chunks, "
        "default configuration"
    )
    figures["machine"] = f"{platform.machine()}, {platform.processor() or 'cpu'}, 2 cores (shared)"
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print_table(figures)


def run(agent: AgentLookup, asked: list[str], rng: random.Random, per_block: int) -> dict[str, Any]:
    sessions: dict[str, list[Any]] = {}
    for number, question in enumerate(asked):
        result = agent.call(question, f"bench-{number}")
        if result.evidence_blocks:
            sessions[f"bench-{number}"] = result.evidence_blocks
    returned_to = defaultdict(set)
    for session, blocks in sessions.items():
        for block in blocks:
            returned_to[block.evidence_key].add(session)
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    latencies: list[float] = []
    stale_latencies: list[float] = []
    cited: list[tuple[str, Any, str]] = []  # (session, block, quote): cited again once its file changed

    def verified(kind: str, answer: str, session: str, into: list[float]) -> None:
        started = time.perf_counter()
        verdict = agent.verify_answer(answer, session)
        into.append((time.perf_counter() - started) * 1000)
        outcomes[kind][verdict.citations[0].status if verdict.citations else "none"] += 1

    for session, blocks in sessions.items():
        keys = {b.evidence_key for b in blocks}
        for block in blocks:
            for _ in range(per_block):
                quote = _quote(block.content, rng)
                if quote is None:
                    continue
                for kind, answer in _faults(block, blocks, quote, keys, returned_to, session, rng).items():
                    verified(kind, answer, session, latencies)
                cited.append((session, block, quote))
    edited: set[str] = set()
    for session, block, quote in cited:
        if block.source_path and block.source_path not in edited:
            edited.add(block.source_path)
            with open(block.source_path, "a", encoding="utf-8") as out:
                out.write("\nEdited after the lookup.\n")
        if block.source_path:
            verified("changed_source", _answer(quote, block.evidence_key), session, stale_latencies)
    return _figures(outcomes, latencies, stale_latencies, len(sessions))


def _faults(block: Any, blocks: list[Any], quote: str, keys: set[str], returned_to: dict[str, set[str]],
            session: str, rng: random.Random) -> dict[str, str]:  # fmt: skip
    key = block.evidence_key
    cases = {"correct": _answer(quote, key)}
    never = next((f"{block.doc_id}#chunk-{i}" for i in range(200) if f"{block.doc_id}#chunk-{i}" not in keys
                  and f"{block.doc_id}#chunk-{i}" not in returned_to), None)  # fmt: skip
    if never is not None:
        cases["never_returned"] = _answer(quote, never)
    others = sorted(k for k, seen in returned_to.items() if session not in seen)
    if others:
        cases["other_session"] = _answer(quote, rng.choice(others))
    cases["fabricated"] = _answer(quote, f"handbook-{rng.randrange(10**6)}#chunk-{rng.randrange(9)}")
    words = quote.split()
    position = rng.randrange(len(words))
    words[position] = "zanzibar" if words[position] != "zanzibar" else "quokka"
    cases["altered_quote"] = _answer(" ".join(words), key)
    content = _normalized(block.content)
    for other in blocks:
        other_quote = _quote(other.content, rng) if other is not block else None
        if other_quote and other_quote not in content:
            cases["other_block"] = _answer(other_quote, key)
            break
    return cases


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


def _figures(outcomes: dict[str, Counter[str]], latencies: list[float], stale: list[float],
             sessions: int) -> dict[str, Any]:  # fmt: skip
    kinds = {}
    for kind, expected in EXPECTED.items():
        counts = outcomes.get(kind, Counter())
        total = sum(counts.values())
        kinds[kind] = {"answers": total, "expected": expected, "right_status": counts[expected],
                       "flagged": total - counts["ok"], "statuses": dict(counts)}  # fmt: skip
    faulted = [k for k in kinds if k != "correct"]
    faulted_total = sum(kinds[k]["answers"] for k in faulted)
    return {
        "sessions": sessions,
        "answers": sum(k["answers"] for k in kinds.values()),
        "faulted_answers": faulted_total,
        "catch_rate": round(sum(kinds[k]["right_status"] for k in faulted) / faulted_total, 4),
        "flagged_rate": round(sum(kinds[k]["flagged"] for k in faulted) / faulted_total, 4),
        "false_flags": kinds["correct"]["flagged"],
        "correct_answers": kinds["correct"]["answers"],
        "verify_ms": {
            "p50": _percentile(latencies, 0.5),
            "p95": _percentile(latencies, 0.95),
            "mean": round(statistics.fmean(latencies), 3),
            "calls": len(latencies),
        },  # fmt: skip
        "changed_source_verify_ms": {"p50": _percentile(stale, 0.5), "p95": _percentile(stale, 0.95)},
        "kinds": kinds,
        "date": time.strftime("%Y-%m-%d"),
    }


def print_table(figures: dict[str, Any]) -> None:
    print(f"{'kind':<16}{'answers':>8}{'expected':>16}{'right':>8}{'flagged':>9}")
    for kind, row in figures["kinds"].items():
        print(
            f"{kind:<16}{row['answers']:>8}{row['expected']:>16}{row['right_status']:>8}{row['flagged']:>9}"
        )
    print(f"answers {figures['answers']}, catch rate {figures['catch_rate']:.2%}, false flags "
          f"{figures['false_flags']} of {figures['correct_answers']}, verify_answer p50 "
          f"{figures['verify_ms']['p50']} ms p95 {figures['verify_ms']['p95']} ms")  # fmt: skip


if __name__ == "__main__":
    main()

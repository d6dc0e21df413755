"""The knowledge bases benchmarks/trust.py reads: one store per judged collection.

SciFact (its 300 test claims), each classic-dev collection on its own (four domains: a
question of one is off-topic for the others) and hugo-docs (page descriptions as questions);
held out, for checking choices made on those: the READMEs of the installed Python packages
(their one-line summaries as questions). With ``sample_kb``, also the bundled sample knowledge
base (30 runbooks and policies of one organisation) with its evaluation set: a small store of
one company's text, which no other set resembles. With ``own_sets``, the sets built here
(``own_sets.py``: a docs site and a company handbook, each with unanswerable questions and
passage-level answers), which no choice is fitted on.
Stores and vectors are cached under ``--cache`` (``benchmarks/corpora.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from corpora import DATA, hugo_described_pages, package_readmes
from own_sets import OWN_SETS, SETS

from lookup_knowledge import sample_knowledge_base

CLASSIC_DOMAINS = ("aeronautics", "medicine", "library_information_science", "news")


@dataclass(frozen=True)
class JudgedSet:
    """A knowledge base (what to ingest) and its judged questions (a BEIR folder)."""

    name: str
    documents: Path
    questions: Path
    asks_others: bool = True  # its questions are the other sets' cross-corpus questions
    fitted: bool = True  # choices may be fitted on it (leave-one-corpus-out reads it)
    passages: bool = False  # has unanswerable questions and located answers (``own_sets.py``)


def classic_collection(cache: Path, domain: str) -> Path:
    """One classic-dev collection as a BEIR folder of its own under ``cache``."""
    folder = cache / f"classic-{domain}"
    if (folder / "qrels.tsv").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    source = DATA / "classic-dev"
    for name in ("corpus.jsonl", "queries.jsonl"):
        lines = (source / name).read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if json.loads(line).get("category") == domain]
        (folder / name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    ids = {json.loads(line)["_id"] for line in (folder / "queries.jsonl").read_text().splitlines()}
    rows = (source / "qrels.tsv").read_text().splitlines()
    (folder / "qrels.tsv").write_text(
        "\n".join([rows[0], *(row for row in rows[1:] if row.split("\t")[0] in ids)]) + "\n"
    )
    return folder


def judged_sets(
    cache: Path, held_out: bool = False, sample_kb: bool = False, own_sets: bool = False
) -> list[JudgedSet]:
    """Every judged knowledge base of the trust benchmark; with ``held_out``, also the docs set
    choices made on the others are checked on (``corpora.package_readmes``); with ``sample_kb``,
    the bundled sample knowledge base (its questions stay out of the others' cross-corpus sets,
    which then compare with runs without it); with ``own_sets``, the sets of ``benchmarks/sets``
    (likewise kept out of the others' questions, and never fitted on)."""
    classic = [
        JudgedSet(f"classic-{d}", folder, folder)
        for d in CLASSIC_DOMAINS
        for folder in [classic_collection(cache, d).resolve()]
    ]
    hugo = JudgedSet("hugo-docs", DATA / "hugo-docs", hugo_described_pages(cache).resolve())
    sets = [JudgedSet("scifact", DATA / "scifact", DATA / "scifact"), *classic, hugo]
    if held_out:
        pages, questions = package_readmes(cache)
        sets.append(JudgedSet("package-readmes", pages.resolve(), questions.resolve()))
    if sample_kb:
        kb = sample_knowledge_base()
        sets.append(JudgedSet("sample-kb", kb, kb.parent / "sample-eval", asks_others=False))
    if own_sets:
        sets += [
            JudgedSet(
                name, SETS / name / "pages", SETS / name, asks_others=False, fitted=False, passages=True
            )
            for name in OWN_SETS
        ]
    return sets

"""The judged sets built here (``benchmarks/sets``): every file parses, every judgment names a
question and a page that exist, every located answer stands on its page under its heading, every
unanswerable question's checked terms are absent from every page; and the passage rule the trust
benchmark judges top blocks by. Reads only files in the repository."""

from __future__ import annotations

import csv
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _benchmark(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


own = _benchmark("own_sets")
SETS = [own.SETS / name for name in own.OWN_SETS]


def _pages(folder: Path) -> dict[str, str]:
    pages = folder / "pages"
    return {p.relative_to(pages).as_posix(): p.read_text(encoding="utf-8") for p in pages.rglob("*.md")}


@pytest.mark.parametrize("folder", SETS, ids=lambda f: f.name)
def test_each_set_is_complete_and_consistent(folder: Path) -> None:
    """40+ answerable and 40+ unanswerable questions with unique ids; every qrels row names an
    answerable question and an existing page; every answerable question has a judged page and a
    located answer on one of its judged pages; unanswerable ones have no judgment."""
    assert (folder / "SOURCE.md").is_file() and any(folder.glob("LICENSE*"))
    pages = _pages(folder)
    queries = own.read_jsonl(folder / "queries.jsonl")
    ids = [q["_id"] for q in queries]
    assert len(ids) == len(set(ids))
    answerable = {q["_id"] for q in queries if q["answerable"] is True}
    unanswerable = {q["_id"] for q in queries if q["answerable"] is False}
    assert len(answerable) >= 40 and len(unanswerable) >= 40
    with (folder / "qrels.tsv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    judged: dict[str, set[str]] = {}
    for row in rows:
        assert row["query-id"] in answerable, row
        assert row["corpus-id"] in pages, row
        assert int(row["score"]) > 0
        judged.setdefault(row["query-id"], set()).add(row["corpus-id"])
    assert set(judged) == answerable
    answers = own.located_answers(folder)
    assert set(answers) == answerable
    for qid, located in answers.items():
        assert all(a.page in judged[qid] for a in located), qid


def _sections(text: str) -> dict[str, str]:
    """A markdown page's text from each heading on (code fences skipped), "" for the opening."""
    lines, fenced, first = text.splitlines(), False, None
    sections: dict[str, str] = {}
    for n, line in enumerate(lines):
        fenced ^= line.strip().startswith("```")
        if not fenced and re.match(r"#{1,6}\s*\S", line):
            first = n if first is None else first
            sections.setdefault(line.lstrip("#").strip(), "\n".join(lines[n:]))
    return {"": "\n".join(lines[:first]), **sections}


@pytest.mark.parametrize("folder", SETS, ids=lambda f: f.name)
def test_every_located_answer_stands_on_its_page_under_its_heading(folder: Path) -> None:
    """Each answer is the page's own words, under the heading recorded ("" for the text before
    a page's first heading)."""
    pages = _pages(folder)
    for located in own.located_answers(folder).values():
        for answer in located:
            text = pages[answer.page]
            assert own.held_share(text, answer.text) == 1.0, answer
            sections = _sections(text)
            assert answer.heading in sections, answer
            assert own.held_share(sections[answer.heading], answer.text) == 1.0, answer


@pytest.mark.parametrize("folder", SETS, ids=lambda f: f.name)
def test_no_page_holds_an_unanswerable_questions_checked_terms(folder: Path) -> None:
    everything = "\n".join(_pages(folder).values()).lower()
    for query in own.read_jsonl(folder / "queries.jsonl"):
        if query["answerable"]:
            continue
        assert query["checked_absent"], query["_id"]
        for term in query["checked_absent"]:
            assert not re.search(r"(?<![a-z0-9])" + re.escape(term.lower()), everything), (query, term)


def test_a_block_holds_an_answer_from_its_page_even_cut_at_a_chunk_boundary() -> None:
    answer = own.Answer(
        "q", "faq.md", "Timeouts", "The default timeout for network inactivity is five seconds."
    )
    whole = "## Timeouts\nThe **default** timeout for network\ninactivity is five seconds. Change it."
    cut = "...the default timeout for network inactivity is five"  # 8 of 9 words, in order
    assert own.holds_answer("faq.md", whole, [answer])
    assert own.holds_answer("faq.md", cut, [answer])
    assert not own.holds_answer("other.md", whole, [answer]), "the same words on another page"
    scattered = "Five seconds of network use is the default; a timeout needs inactivity."
    assert own.held_share(scattered, answer.text) < own.HELD_SHARE
    assert not own.holds_answer("faq.md", scattered, [answer])
    assert own.held_share("anything", "") == 0.0


def test_words_normalize_quotes_markup_and_case() -> None:
    assert own.words("Clef’s `trust_env` **NOT**") == own.words("clef's trust env not")


def test_trust_py_writes_the_own_set_tables(tmp_path: Path) -> None:
    """From a made-up run of one set with located answers, the two tables of the sets built
    here are written between their markers, and nothing else of the page changes."""
    trust = _benchmark("trust")
    level = {"lookups": 4, "page": 0.75, "passage": 0.5}
    block = {
        "found_rate": {g: 0.25 for g in trust.OWN_GROUPS},
        "passages": {
            "questions": {"answerable": 40, "unanswerable": 41},
            "top_page_answers": 0.8,
            "top_block_answers": 0.4,
            "answer_page_top3": 0.9,
            "answer_block_top3": 0.6,
            "levels": {"high": level, "medium": level, "low": {"lookups": 0, "page": None, "passage": None}},
            "unanswerable_levels": {"high": 1, "medium": 2, "low": 3},
        },
    }
    doc = tmp_path / "trust.md"
    original = (ROOT / "docs" / "trust.md").read_text(encoding="utf-8")
    doc.write_text(original, encoding="utf-8")
    trust.write_doc(doc, {"sets": {"handbook": block}}, own_only=True)
    written = doc.read_text(encoding="utf-8")
    cells = " | ".join(["0.250"] * len(trust.OWN_GROUPS))
    assert f"| handbook | 40 / 41 | {cells} | 0.800 | 0.400 | 0.900 / 0.600 |" in written
    assert "| handbook | 0.500 / 0.750 (4) | 0.500 / 0.750 (4) | - / - (0) | 1 / 2 / 3 |" in written
    prose = [line for line in original.splitlines() if not line.startswith("|")]
    assert [line for line in written.splitlines() if not line.startswith("|")] == prose

"""The docs are references: method, rules and current figures, each figure table written whole by
the benchmark script that measures it (between markers), no run log (commit hashes, load
averages), and a glossary of the terms the other pages use."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCHMARKS = ROOT / "benchmarks"
REFERENCES = ("benchmarks.md", "quality.md", "trust.md")
MARKER = re.compile(r"<!-- table:([\w-]+) \(written by its benchmark script\) -->")


@pytest.fixture(scope="module")
def doc_sections():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("doc_sections")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("name", REFERENCES)
def test_the_reference_pages_hold_no_run_log(name: str) -> None:
    """No commit hash, load average or clock time of one run: the figures are the current ones,
    earlier runs are in git."""
    text = (DOCS / name).read_text(encoding="utf-8")
    assert not re.search(r"`[0-9a-f]{7}`", text), "a commit hash"
    assert "load average" not in text.lower()
    assert not re.search(r"\b20\d\d-\d\d-\d\d \d\d:\d\d", text), "a run's date and time"


@pytest.mark.parametrize("name", REFERENCES)
def test_every_marked_table_is_closed_and_written_by_a_script(name: str) -> None:
    text = (DOCS / name).read_text(encoding="utf-8")
    scripts = "\n".join(path.read_text(encoding="utf-8") for path in BENCHMARKS.glob("*.py"))
    for table in MARKER.findall(text):
        assert f"<!-- /table:{table} -->" in text, table
        assert f'"{table}"' in scripts, f"no benchmark script writes table {table}"


def test_a_table_is_replaced_whole_and_the_prose_kept(doc_sections, tmp_path: Path) -> None:
    start, end = doc_sections.markers("t")
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Doc\n\nProse.\n\n{start}\n| old |\n| --- |\n{end}\n\nMore prose.\n")
    doc_sections.replace_table(doc, "t", "| new |\n| --- |\n| 1 |\n")
    assert doc.read_text() == f"# Doc\n\nProse.\n\n{start}\n| new |\n| --- |\n| 1 |\n{end}\n\nMore prose.\n"
    with pytest.raises(SystemExit):
        doc_sections.replace_table(doc, "missing", "| x |")


def test_the_glossary_defines_the_terms_the_docs_use() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    glossary = text[text.index("## Glossary") :].split("\n## ", 1)[0]
    for term in (
        "L0",
        "L1",
        "Hints",
        "Probe null",
        "Margin",
        "Bar",
        "Evidence floor",
        "Fallback",
        "Relevance level",
        "Completeness hint",
    ):
        assert f"- **{term}**" in glossary, term


def _benchmark(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_trust_py_writes_every_table_of_trust_md(tmp_path: Path) -> None:
    """From a run's JSON (here a made-up one of two sets), each marked table of docs/trust.md is
    rewritten and nothing else."""
    trust = _benchmark("trust")
    groups = {g: 0.5 for g in trust.GROUPS}
    block = {
        "ndcg@10": 0.7,
        "ndcg@10 without abstention": 0.71,
        "found_rate": groups,
        "calibration": {level: {"lookups": 3, "top_relevant": 2 / 3} for level in trust.LEVELS},
        "unanswerable_levels": {level: 1 for level in trust.LEVELS},
        "hints": {"complete": {"lookups": 4, "relevant_missing": 0.25}},
    }
    results = {
        "sets": {"one": block, "two": block},
        "strictness_sweep": {"1.5": {"one": groups, "two": groups}},
        "leave_one_corpus_out": {"one": {"fitted_strictness": 1.0, **groups}},
    }
    doc = tmp_path / "trust.md"
    original = (DOCS / "trust.md").read_text(encoding="utf-8")
    doc.write_text(original, encoding="utf-8")
    trust.write_doc(doc, results)
    written = doc.read_text(encoding="utf-8")
    assert "| two | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 0.7000 | 0.7100 | -0.0100 |" in written
    assert "| one | 0.667 (3) | 0.667 (3) | 0.667 (3) | 1 / 1 / 1 |" in written
    assert "| one | 0.250 (4) | - (0) |" in written
    assert MARKER.findall(written) == MARKER.findall(original)
    prose = [line for line in original.splitlines() if not line.startswith("|")]
    assert [line for line in written.splitlines() if not line.startswith("|")] == prose

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


def _st(p50: float, p95: float = 0.0) -> dict[str, float]:
    return {"p50_ms": p50, "p95_ms": p95}


def _parts(*ms: float) -> dict[str, float]:
    names = (
        "query vectors beyond the floor's encode",
        "store round trips beyond the floor's queries",
        "post-processing nodes",
        "other nodes",
        "Hamilton run beyond Hamilton alone",
    )
    return dict(zip(names, ms, strict=True))


def test_the_benchmark_scripts_write_the_tables_of_benchmarks_md(tmp_path: Path) -> None:
    """Each script's doc writer, given JSON of the shape it writes holding the page's current
    figures, gives the page as committed: the tables are the scripts' own, to the byte."""
    machine = {"cpu": "AMD EPYC", "cpus": 2}
    own = {
        "dense": {
            "own_work_p50_ms": 3.33,
            "own_work_over_hamilton_alone": 2.37,
            "own_work_parts_p50_ms": _parts(0.15, 0.64, 1.16, 0.80, 0.38),
        },
        "hybrid": {
            "own_work_p50_ms": 5.20,
            "own_work_over_hamilton_alone": 3.71,
            "own_work_parts_p50_ms": _parts(0.27, 1.93, 1.25, 0.83, 0.53),
        },
    }
    latency = {
        "queries": 300,
        "rounds": 3,
        "mode": "hybrid",
        "query_backend": "openvino (none)",
        "machine": machine,
        "stages": {
            "floor": _st(7.44),
            "hybrid_floor": _st(9.46),
            "hamilton_alone": _st(1.40),
            "dense_lookup": _st(12.17),
            "total": _st(16.06, 21.10),
            "access_lookup": _st(17.49, 22.42),
        },
        "own_work": own,
        "own_work_targets_over_hamilton_alone": {"dense": 1.0, "hybrid": 1.3},
        "access_lookup_over_lookup_p50": 1.089,
    }
    throughput = {
        "queries": 300,
        "mode": "hybrid",
        "query_backend": "openvino (none)",
        "machine": machine,
        "dense_floor_qps": [238],
        "floor_qps": [203],
        "design_floor_qps": [134],
        "eval_qps": [88],
        "direct_qps": [85],
        "own_work_per_query_ms": 3.9,
        "hamilton_alone_per_query_ms": 0.95,
        "own_work_over_hamilton_alone": 4.1,
    }

    def backend(*v: float) -> dict[str, float]:
        keys = (
            "query_p50_ms",
            "query_p50_vs_torch",
            "chunks_per_s",
            "chunks_per_s_vs_torch",
            "query_peak_rss_mb",
            "document_peak_rss_mb",
        )
        return dict(zip(keys, v, strict=True))

    backends = {
        "queries": 100,
        "chunks": 256,
        "rounds": 2,
        "summary": {
            "torch": backend(6.71, 1.0, 38.8, 1.0, 584, 1142),
            "onnx": backend(3.89, 0.58, 23.1, 0.60, 197, 1821),
            "onnx int8": backend(2.93, 0.44, 29.3, 0.76, 178, 1941),
            "openvino": backend(2.67, 0.40, 100.4, 2.59, 308, 1010),
            "openvino int8": backend(6.67, 0.99, 35.2, 0.91, 356, 1065),
        },
    }
    scale = _benchmark("scale")
    sizes = [
        (10_000, 13.2, 16.9, 24.3, 18.4, 88, 4450, 2.3, 0.008, 0.13, 8297, 916),
        (100_000, 15.3, 23.0, 31.8, 27.6, 73, 3868, 50.1, 0.011, 0.39, 4502, 1144),
        (1_000_000, 17.0, 38.7, 60.3, 49.2, 60, 3126, 491.2, 0.018, 3.80, 4086, 3064),
    ]
    stores = {"sizes": [dict(zip(scale.TABLE, row, strict=True)) for row in sizes]}
    edits = {
        "pages": 20,
        "summary": {
            "reuse": {"chunks_written_median": 28, "chunks_embedded_median": 1, "seconds_median": 0.12},
            "embed all": {"chunks_written_median": 28, "chunks_embedded_median": 28, "seconds_median": 0.50},
        },
    }
    doc = tmp_path / "benchmarks.md"
    committed = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    start, end = "(written by its benchmark script) -->\n", "\n<!-- /table:"
    emptied = re.sub(re.escape(start) + r".*?" + re.escape(end), start + "|  |" + end, committed, flags=re.S)
    doc.write_text(emptied, encoding="utf-8")
    _benchmark("lookup_latency").write_doc(doc, latency)
    _benchmark("eval_throughput").write_doc(doc, throughput)
    _benchmark("embedder_backends").write_doc(doc, backends)
    scale.write_doc(doc, stores)
    _benchmark("reingest_edit").write_doc(doc, edits)
    ingest = {
        "datasets": [
            {
                "dataset": "hugo-docs",
                "limit": 150,
                "chunks": 648,
                "encode_seconds": 11.9,
                "sparse_seconds": 0.083,
                "sparse_share_of_encode": 0.007,
                "in_ingest_non_encode_share": 0.046,
                "overhead": 0.163,
                "cpu_overhead": 0.135,
            },
            {
                "dataset": "scifact",
                "limit": 150,
                "chunks": 294,
                "encode_seconds": 6.8,
                "sparse_seconds": 0.049,
                "sparse_share_of_encode": 0.007,
                "in_ingest_non_encode_share": 0.04,
                "overhead": 0.056,
                "cpu_overhead": 0.033,
            },
        ]
    }
    _benchmark("ingest").write_doc(doc, ingest)
    assert doc.read_text(encoding="utf-8") == committed

"""The committed DAG diagrams are current, and diagrams render with or without Graphviz's `dot`."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dataflow_fixtures import SampleKB, make_tool
from typer.testing import CliRunner

from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.cli.app import app
from lookup_knowledge.cli.render import (
    dot_node_edge_set,
    execution_graph,
    has_graphviz,
    mermaid_source,
    variant_graph,
)
from lookup_knowledge.pipeline import VARIANTS

VISUALIZATIONS = Path(__file__).resolve().parents[1] / "visualizations"
CLI = Path(sys.executable).with_name("lookup-knowledge")
needs_dot = pytest.mark.skipif(not has_graphviz(), reason="Graphviz `dot` is not installed (images only)")


def _without_dot() -> dict[str, str]:
    """An environment whose PATH holds only the virtualenv's scripts: no Graphviz `dot`."""
    return {**os.environ, "PATH": str(CLI.parent)}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_committed_dot_source_matches_the_dag(variant: str) -> None:
    committed = (VISUALIZATIONS / f"lookup_dag_{variant}.dot").read_text(encoding="utf-8")
    assert dot_node_edge_set(committed) == dot_node_edge_set(variant_graph(variant).source), (
        "visualizations/ is stale: run `make render` and commit the result"
    )


def test_a_rerender_of_an_unchanged_dag_writes_the_same_source() -> None:
    """Hamilton lists nodes and inputs in set order, which differs between processes (string
    hashes are salted): two processes with other salts must draw the same DOT source."""
    draw = "from lookup_knowledge.cli.render import variant_graph; print(variant_graph('default').source)"
    sources = {
        subprocess.run(
            [sys.executable, "-c", draw],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(sources) == 1


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_committed_mermaid_matches_the_dag(variant: str) -> None:
    committed = (VISUALIZATIONS / f"lookup_dag_{variant}.mmd").read_text(encoding="utf-8")
    assert committed == mermaid_source(variant), "visualizations/ is stale: run `make render`"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_committed_images_exist(variant: str) -> None:
    for fmt in ("png", "svg"):
        assert (VISUALIZATIONS / f"lookup_dag_{variant}.{fmt}").stat().st_size > 1000


def test_variants_differ_in_their_nodes() -> None:
    nodes = {v: dot_node_edge_set(variant_graph(v).source)[0] for v in VARIANTS}
    assert "filtered_hits" in nodes["default"]
    assert "filtered_hits" not in nodes["l1_disabled"]
    assert "_l0_hints_inputs" in nodes["default"]  # l0_index and query feed L0 matching
    assert "_l0_hints_inputs" not in nodes["l0_disabled"]
    spec_nodes = {
        "l0_hints", "category_filter", "filtered_hits", "fallback_decision", "candidates_df",
        "deduped_df", "reranked_df", "context_pack", "lookup_result",
    }  # fmt: skip
    assert spec_nodes <= nodes["default"]


def test_config_variant_labels_say_the_value_in_force() -> None:
    source = variant_graph("l1_disabled").source
    assert "retrieval_attempts</b><br /><i>when l1_enabled=False</i>" in source
    assert ": l1_enabled</b>" not in source


def test_mermaid_has_every_dag_edge() -> None:
    text = mermaid_source("default")
    assert text.startswith("flowchart TB")
    assert "  filtered_hits --> fallback_decision" in text
    assert "  pinned_category -.-> category_filter" in text  # optional input: dotted


def test_render_without_dot_writes_sources_and_says_how_to_get_images(tmp_path: Path) -> None:
    out = tmp_path / "diagrams"
    done = subprocess.run(
        [str(CLI), "render", "--out", str(out)], capture_output=True, text=True, env=_without_dot()
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"lookup_dag_{v}.{fmt}" for v in VARIANTS for fmt in ("dot", "mmd")
    )
    assert done.stderr.count("\n") == 1 and "install Graphviz" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@needs_dot
def test_render_with_dot_writes_images(tmp_path: Path) -> None:
    done = subprocess.run([str(CLI), "render", "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "lookup_dag_default.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in (tmp_path / "lookup_dag_l0_disabled.svg").read_text(encoding="utf-8")


def _explain(store: Path, target: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [str(CLI), "query", "refund approval", "--json", "--no-record", "--explain", str(target)]
    return subprocess.run([*command, "--set", f"store.path={store}"], capture_output=True, text=True, env=env)


@pytest.mark.slow  # a CLI process that loads the model
def test_explain_without_dot_prints_the_result_then_writes_dot_source(sample_store: Path) -> None:
    target = sample_store / "q.png"
    done = _explain(sample_store, target, _without_dot())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["evidenceStatus"] == "evidence"  # the result comes first, whole
    assert done.stderr.count("\n") == 1 and "Graphviz `dot` not found" in done.stderr
    source = target.with_suffix(".dot").read_text(encoding="utf-8")
    assert "query: refund approval" in source  # the picture is titled with the query
    assert "filtered_hits" in source and not target.exists()


def test_explain_into_a_missing_folder_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "dir"
    store = tmp_path / "store"  # never opened: the folder is checked first
    command = [
        "query",
        "refund approval",
        "--explain",
        str(missing / "x.png"),
        "--set",
        f"store.path={store}",
    ]
    done = CliRunner().invoke(app, command)
    assert done.exit_code == 2
    assert done.stderr.strip() == f"error: --explain: the folder {missing} does not exist"
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a CLI process that loads the model
def test_explain_to_an_unknown_format_is_one_line_and_still_prints_the_result(sample_store: Path) -> None:
    done = _explain(sample_store, sample_store / "q.txt")
    assert done.returncode == 0
    assert json.loads(done.stdout)["found"] is True
    assert done.stderr.strip().startswith("executed path not drawn: cannot draw q.txt")


@pytest.mark.slow  # a CLI process that loads the model
@needs_dot
def test_explain_with_dot_draws_the_image(sample_store: Path) -> None:
    target = sample_store / "q.svg"
    done = _explain(sample_store, target)
    assert done.returncode == 0, done.stderr
    svg = target.read_text(encoding="utf-8")
    assert "query: refund approval" in svg and "unfiltered_hits" in svg


KEYS_QUESTION = "How often must production API keys be rotated?"


def _executed_source(kb: SampleKB, embedder: Embedder, pinned: str) -> str:
    tool = make_tool(kb, embedder)
    result = tool.lookup(KEYS_QUESTION, pinned_category=pinned)
    return execution_graph(tool, result, tool.dataflow_inputs(KEYS_QUESTION, pinned)).source


def test_explain_times_sit_inside_their_nodes_and_the_title_says_what_they_are(
    sample_kb: SampleKB, embedder: Embedder
) -> None:
    source = _executed_source(sample_kb, embedder, "security")
    assert "xlabel" not in source and "darkgreen" not in source  # no labels on edges, no bare border
    assert re.search(r"<b>candidates_df</b><br /><br /><i>DataFrame</i><br />\d+\.\d\d ms>", source)
    assert "each node: its wall time in this lookup" in source


def test_explain_says_the_companion_ran_but_was_not_used(sample_kb: SampleKB, embedder: Embedder) -> None:
    source = _executed_source(sample_kb, embedder, "security")  # the right category: the filter holds
    assert "companion: ran, not used" in source and "RETRY" not in source


def test_explain_marks_the_unfiltered_hits_a_fallback_used(sample_kb: SampleKB, embedder: Embedder) -> None:
    source = _executed_source(sample_kb, embedder, "payments")  # a wrong category: the filter loses
    assert "used: fallback (filtered_vector_" in source and "fillcolor=orange" in source

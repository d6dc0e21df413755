"""The committed DAG diagrams are current, and a query's executed path renders."""

from pathlib import Path

import pytest

from lookup_knowledge.pipeline import VARIANTS
from lookup_knowledge.render import svg_node_edge_set, variant_graph

VISUALIZATIONS = Path(__file__).resolve().parents[1] / "visualizations"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_committed_diagram_matches_the_dag(variant: str) -> None:
    committed = (VISUALIZATIONS / f"lookup_dag_{variant}.svg").read_text(encoding="utf-8")
    fresh = variant_graph(variant).pipe(format="svg").decode()
    assert svg_node_edge_set(committed) == svg_node_edge_set(fresh), (
        "visualizations/ is stale: run `make render` and commit the result"
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_committed_png_exists(variant: str) -> None:
    assert (VISUALIZATIONS / f"lookup_dag_{variant}.png").stat().st_size > 1000


def test_variants_differ_in_their_nodes() -> None:
    nodes = {v: svg_node_edge_set(variant_graph(v).pipe(format="svg").decode())[0] for v in VARIANTS}
    assert "filtered_hits" in nodes["default"]
    assert "filtered_hits" not in nodes["l1_disabled"]
    assert "_l0_hints_inputs" in nodes["default"]  # l0_index and query feed L0 matching
    assert "_l0_hints_inputs" not in nodes["l0_disabled"]
    spec_nodes = {
        "l0_hints", "category_filter", "filtered_hits", "fallback_decision", "candidates_df",
        "deduped_df", "reranked_df", "context_pack", "lookup_result",
    }  # fmt: skip
    assert spec_nodes <= nodes["default"]

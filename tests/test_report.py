"""Evaluation report plots: which queries are labelled worst, and where their labels go."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from lookup_knowledge.eval.report import _latency_histogram, _per_query_distribution, worst_query_labels


def _per_query(ndcg: dict[str, float]) -> pd.DataFrame:
    values = list(ndcg.values())
    return pd.DataFrame({"query_id": list(ndcg), "ndcg@10": values, "recall@10": values, "mrr@10": values})


def test_only_queries_below_a_perfect_score_are_labelled_worst() -> None:
    per_query = _per_query({"a": 1.0, "b": 1.0, "c": 0.6, "d": 0.0, "e": 1.0})
    assert [label[0] for label in worst_query_labels(per_query)] == ["d", "c"]
    assert worst_query_labels(_per_query({"a": 1.0, "b": 1.0})) == []


def test_labels_are_spread_apart_and_stay_inside_the_axes() -> None:
    per_query = _per_query({"a": 0.95, "b": 0.96, "c": 0.97, "d": 0.98, "e": 0.99, "f": 0.2})
    labels = worst_query_labels(per_query, count=5, gap=0.06)
    heights = [height for *_, height in labels]
    assert len(labels) == 5 and all(0.0 <= h <= 1.0 for h in heights)
    assert all(upper - lower >= 0.06 - 1e-9 for lower, upper in zip(heights, heights[1:], strict=False))


@pytest.mark.parametrize(
    ("ndcg", "title_part", "labelled"),
    [
        ({"a": 1.0, "b": 0.5}, "worst nDCG@10 query ids labelled", ["b"]),
        ({"a": 1.0}, "every query scored", []),
    ],
)
def test_per_query_plot_labels_and_title(ndcg: dict[str, float], title_part: str, labelled: list) -> None:
    figure, axes = plt.subplots()
    _per_query_distribution(axes, _per_query(ndcg))
    assert title_part in axes.get_title() and axes.get_ylabel()
    assert [text.get_text() for text in axes.texts] == labelled
    plt.close(figure)


def test_latency_histogram_labels_both_axes() -> None:
    figure, axes = plt.subplots()
    _latency_histogram(axes, pd.DataFrame({"latency_ms": [1.0, 2.0, 5.0]}))
    assert axes.get_xlabel() == "ms" and axes.get_ylabel() == "queries"
    plt.close(figure)

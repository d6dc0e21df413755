"""The evaluation dataflow: eval queries in batches -> lookups -> results frame -> metrics.

Each batch is one task (``Parallelizable``), so the same DAG runs in-process or on Dask: the
executor is chosen when the driver is built (``lookup_knowledge.eval.evaluation``). Within a
batch the query embeddings and store searches are batched; every query still runs the lookup DAG.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
from hamilton.htypes import Collect, Parallelizable

from lookup_knowledge.eval import metrics
from lookup_knowledge.eval.batch import ToolProvider, lookup_many


def query_batch(queries: pd.DataFrame, batch_size: int) -> Parallelizable[pd.DataFrame]:
    """The eval queries, ``batch_size`` at a time: one task each."""
    for start in range(0, len(queries), batch_size):
        yield queries.iloc[start : start + batch_size]


def batch_results(
    query_batch: pd.DataFrame,
    tool_provider: ToolProvider,
    qrels: dict[str, dict[str, int]],
    on_progress: Callable | None = None,
) -> pd.DataFrame:
    """One row per query of the batch: its lookup through the DAG, ranked evidence and timings
    (``on_progress(n)`` is told as queries finish)."""
    pinned = metrics.pinned_categories(query_batch)
    with tool_provider.open() as tool:
        results = lookup_many(tool, query_batch["query"].tolist(), pinned, on_progress)
    return metrics.result_rows(query_batch, results, qrels)


def results_frame(batch_results: Collect[pd.DataFrame], queries: pd.DataFrame) -> pd.DataFrame:
    """Every batch's rows, in query order."""
    frames = list(batch_results)
    return pd.concat(frames, ignore_index=True) if frames else metrics.result_rows(queries, [], {})


def per_query_metrics(
    results_frame: pd.DataFrame, qrels: dict[str, dict[str, int]], return_n: int
) -> pd.DataFrame:
    """trec_eval measures per judged query, at document level, over the full eval depth and
    over what the agent saw (the first ``return_n`` evidence blocks)."""
    return metrics.per_query_metrics(results_frame, qrels, return_n)


def eval_metrics(results_frame: pd.DataFrame, per_query_metrics: pd.DataFrame) -> dict[str, Any]:
    """Overall and per-category metrics, rates and latency."""
    return metrics.summarize(results_frame, per_query_metrics)

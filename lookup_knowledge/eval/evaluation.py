"""Batch evaluation: the evaluation dataflow run in-process or on Dask, and the filter headline.

>>> run = evaluate(tool, load_eval_queries("queries.parquet"))  # doctest: +SKIP
>>> run.metrics["overall"]["ndcg@10"]  # doctest: +SKIP
>>> run = distributed_evaluate(config, queries, qrels, Client("tcp://scheduler:8786"))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pandas as pd
from hamilton import driver
from hamilton.execution import executors

from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
from lookup_knowledge.config import Config
from lookup_knowledge.eval import dataflow as evaluation_dataflow
from lookup_knowledge.eval.batch import ToolProvider
from lookup_knowledge.eval.data import Qrels
from lookup_knowledge.eval.metrics import EVAL_DEPTH, METRIC_NAMES, pinned_categories

__all__ = ["METRIC_NAMES", "EvalRun", "distributed_evaluate", "evaluate", "filter_headline"]
EVAL_OUTPUTS = ["results_frame", "per_query_metrics", "eval_metrics"]
SHARD_SIZE = 256  # queries per task of the evaluation dataflow on Dask
# In-process the tasks run one after another and each begins with an encoding nothing overlaps
# (lookup_many): fewer, larger tasks.
LOCAL_SHARD_SIZE = 4 * SHARD_SIZE


@dataclass
class EvalRun:
    """Everything one evaluation produced."""

    results: pd.DataFrame
    per_query: pd.DataFrame
    metrics: dict[str, Any]
    seconds: float
    config_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def queries_per_second(self) -> float:
        return len(self.results) / self.seconds if self.seconds else float("nan")


def evaluate(
    tool: KnowledgeTool,
    queries: pd.DataFrame,
    qrels: Qrels | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EvalRun:
    """Evaluate ``queries`` in this process on ``tool``'s store, embedder and L0 index."""
    deep = tool.variant(eval_config(tool.config))
    return run_evaluation(
        ToolProvider(deep.config, deep),
        tool.config,
        queries,
        qrels,
        _local_driver(),
        LOCAL_SHARD_SIZE,
        on_progress,
    )


def distributed_evaluate(
    config: Config, queries: pd.DataFrame, qrels: Qrels | None, client: Any, shard_size: int = SHARD_SIZE
) -> EvalRun:
    """Evaluate ``queries`` in batches of ``shard_size`` on the Dask cluster behind ``client``.

    Every worker opens the configured store itself, so use a Qdrant server (``store.url``) for
    real clusters; a local-mode store can only be held by one worker process at a time.
    """
    from hamilton.plugins.h_dask import DaskExecutor  # the [dask] extra loads only here

    dataflow = _driver(DaskExecutor(client=client))
    return run_evaluation(ToolProvider(eval_config(config)), config, queries, qrels, dataflow, shard_size)


def eval_config(config: Config) -> Config:
    """The configuration evaluation runs with: evidence ranked at least :data:`EVAL_DEPTH` deep
    (the deepest cutoff) whatever ``return_n`` is; the ``@return_n`` measures read the first
    ``return_n`` blocks, what the agent saw."""
    retrieval = config.retrieval
    return_n = max(retrieval.effective_return_n, EVAL_DEPTH)
    retrieve_k = max(retrieval.effective_retrieve_k, return_n)
    deeper = retrieval.model_copy(update={"return_n": return_n, "retrieve_k": retrieve_k})
    return config.model_copy(update={"retrieval": deeper})


def run_evaluation(
    tools: ToolProvider,
    config: Config,
    queries: pd.DataFrame,
    qrels: Qrels | None,
    dataflow: driver.Driver,
    batch_size: int = SHARD_SIZE,
    on_progress: Callable[[int], None] | None = None,
) -> EvalRun:
    """Run the evaluation dataflow; ``config`` is the configuration under evaluation."""
    inputs = {
        "queries": queries,
        "batch_size": batch_size,
        "tool_provider": tools,
        "qrels": qrels or {},
        "return_n": config.retrieval.effective_return_n,
        "on_progress": on_progress,
    }
    started = time.perf_counter()
    outputs = dataflow.execute(EVAL_OUTPUTS, inputs=inputs)
    seconds = time.perf_counter() - started
    depth, return_n = tools.config.retrieval.effective_return_n, config.retrieval.effective_return_n
    summary = {**outputs["eval_metrics"], "depth": depth, "return_n": return_n}
    return EvalRun(outputs["results_frame"], outputs["per_query_metrics"], summary, seconds)


@cache
def _local_driver() -> driver.Driver:
    return _driver(executors.SynchronousLocalTaskExecutor())


def _driver(remote: executors.TaskExecutor) -> driver.Driver:
    """The evaluation dataflow's driver: batches run as tasks on ``remote``."""
    return (
        driver.Builder()
        .enable_dynamic_execution(allow_experimental_mode=True)
        .with_modules(evaluation_dataflow)
        .with_local_executor(executors.SynchronousLocalTaskExecutor())
        .with_remote_executor(remote)
        .build()
    )


def filter_headline(
    tool: KnowledgeTool,
    queries: pd.DataFrame,
    qrels: Qrels,
    run: EvalRun,
    references: FilterReferences | None = None,
) -> dict[str, Any] | None:
    """What the fallback keeps, for queries pinned to their true or a wrong category.

    Needs the ``true_category`` column (``eval-queries --categories true|wrong``). Two reference
    runs of the same queries are made unless given: unfiltered (no pins) and, for true pins, the
    pure filter (fallback off). Under a wrong filter the headline is the share of the unfiltered
    nDCG@10 kept; under a right one, the share of the pure filter's gain over unfiltered kept.
    """
    if "true_category" not in queries.columns or not qrels:
        return None
    references = references or filter_references(tool, queries, qrels)
    pinned = pd.Series(pinned_categories(queries), index=queries.index)
    right = queries[pinned.notna() & (pinned == queries["true_category"])]
    wrong = queries[pinned.notna() & (pinned != queries["true_category"])]
    ndcg = run.per_query.set_index("query_id")["ndcg@10"]
    headline: dict[str, Any] = {}
    if len(wrong):
        kept, base = _mean(ndcg, wrong), _mean(references.unfiltered, wrong)
        headline["wrong_filter"] = {
            "queries": len(wrong), "ndcg@10": kept, "unfiltered_ndcg@10": base,
            "share_of_unfiltered_kept": kept / base if base else None,
        }  # fmt: skip
    if len(right):
        kept, base = _mean(ndcg, right), _mean(references.unfiltered, right)
        best = _mean(references.pure_filter, right)
        headline["right_filter"] = {
            "queries": len(right), "ndcg@10": kept, "unfiltered_ndcg@10": base,
            "pure_filter_ndcg@10": best,
            "share_of_filter_gain_kept": (kept - base) / (best - base) if best > base else None,
        }  # fmt: skip
    return headline


@dataclass(frozen=True)
class FilterReferences:
    """Per-query nDCG@10 of the two reference runs: unfiltered, and the pure true-category filter."""

    unfiltered: pd.Series
    pure_filter: pd.Series


def filter_references(tool: KnowledgeTool, queries: pd.DataFrame, qrels: Qrels) -> FilterReferences:
    """Run the queries unpinned, and pinned to their true category with the fallback off."""
    pure_tool = tool.variant(
        tool.config.model_copy(
            update={"retrieval": tool.config.retrieval.model_copy(update={"fallback": False})}
        )
    )
    return FilterReferences(
        unfiltered=_ndcg(tool, queries.assign(category=None), qrels),
        pure_filter=_ndcg(pure_tool, queries.assign(category=queries["true_category"]), qrels),
    )


def _ndcg(tool: KnowledgeTool, queries: pd.DataFrame, qrels: Qrels) -> pd.Series:
    return evaluate(tool, queries, qrels).per_query.set_index("query_id")["ndcg@10"]


def _mean(ndcg: pd.Series, queries: pd.DataFrame) -> float:
    return float(ndcg.reindex(queries["query_id"]).dropna().mean())

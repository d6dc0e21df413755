"""Sharded evaluation: eval query shards as Hamilton tasks, for a distributed executor (Dask)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from hamilton.htypes import Collect, Parallelizable

from lookup_knowledge.agent.tool import KnowledgeTool
from lookup_knowledge.config import Config
from lookup_knowledge.eval.batch import lookup_many
from lookup_knowledge.eval.evaluation import pinned_categories, results_frame


def query_shard(queries: pd.DataFrame, shard_size: int) -> Parallelizable[pd.DataFrame]:
    """The eval queries, ``shard_size`` at a time: one task each."""
    shards: Iterator[pd.DataFrame] = (
        queries.iloc[start : start + shard_size] for start in range(0, len(queries), shard_size)
    )
    yield from shards


def shard_results(
    query_shard: pd.DataFrame, config_data: dict[str, Any], qrels: dict[str, dict[str, int]]
) -> pd.DataFrame:
    """One shard's result rows, from a tool the worker builds on the configured store."""
    pinned = pinned_categories(query_shard)
    with KnowledgeTool.from_config(Config.model_validate(config_data)) as tool:
        results = lookup_many(tool, query_shard["query"].tolist(), pinned)
    return results_frame(query_shard, results, qrels)


def eval_results(shard_results: Collect[pd.DataFrame]) -> pd.DataFrame:
    """Every shard's rows, in query order."""
    return pd.concat(list(shard_results), ignore_index=True)

"""Distributed evaluation: the sharded-eval DAG on Dask through Hamilton's own executor.

>>> from dask.distributed import Client  # doctest: +SKIP
>>> run = distributed_evaluate(config, queries, qrels, Client("tcp://scheduler:8786"))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
from hamilton import driver
from hamilton.execution import executors
from hamilton.plugins.h_dask import DaskExecutor

from lookup_knowledge.config import Config
from lookup_knowledge.dataflows import sharded_eval
from lookup_knowledge.eval.data import Qrels
from lookup_knowledge.eval.evaluation import EvalRun, per_query_metrics, summarize


def distributed_evaluate(
    config: Config, queries: pd.DataFrame, qrels: Qrels | None, client: Any, shard_size: int = 256
) -> EvalRun:
    """Evaluate ``queries`` in shards on the Dask cluster behind ``client``.

    Every worker opens the configured store itself, so use a Qdrant server (``store.url``) for
    real clusters; a local-mode store can only be held by one worker process at a time.
    """
    dag = (
        driver.Builder()
        .enable_dynamic_execution(allow_experimental_mode=True)
        .with_modules(sharded_eval)
        .with_local_executor(executors.SynchronousLocalTaskExecutor())
        .with_remote_executor(DaskExecutor(client=client))
        .build()
    )
    started = time.perf_counter()
    inputs = {
        "queries": queries,
        "shard_size": shard_size,
        "config_data": config.model_dump(mode="json"),
        "qrels": qrels or {},
    }
    frame = dag.execute(["eval_results"], inputs=inputs)["eval_results"]
    seconds = time.perf_counter() - started
    per_query = per_query_metrics(frame, qrels or {})
    return EvalRun(frame, per_query, summarize(frame, per_query), seconds)

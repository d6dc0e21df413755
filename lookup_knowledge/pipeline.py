"""The Hamilton driver for the lookup dataflow, its config variants and its node-timing hook."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from hamilton import base, driver, node
from hamilton.lifecycle.base import BasePostNodeExecute, BasePreNodeExecute

from lookup_knowledge.config import Config
from lookup_knowledge.contract import NodeTiming
from lookup_knowledge.dataflows import (
    context,
    postprocessing,
    query_understanding,
    result,
    retrieval,
)
from lookup_knowledge.dataflows.retrieval import FallbackPolicy

DATAFLOW_MODULES = (query_understanding, retrieval, postprocessing, context, result)
FINAL_NODE = "lookup_result"
_RUN_IDS = itertools.count()
VARIANTS: dict[str, dict[str, bool]] = {
    "default": {"l0_enabled": True, "l1_enabled": True},
    "l1_disabled": {"l0_enabled": True, "l1_enabled": False},
    "l0_disabled": {"l0_enabled": False, "l1_enabled": True},
}


class NodeTimingHook(BasePreNodeExecute, BasePostNodeExecute):
    """Records which nodes executed, in order, with wall time, per calling thread.

    Built on Hamilton's base node hooks rather than ``NodeExecutionHook``, which assembles tags,
    kwargs and input types for every node before calling it: ~60 us per lookup for two fields.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def start(self) -> None:
        """Begin a new record for this thread's next execution."""
        self._local.timings = []

    def timings(self) -> list[NodeTiming]:
        """This thread's executed nodes, in order."""
        recorded = getattr(self._local, "timings", [])
        return [NodeTiming(node_.name, round(seconds * 1000, 4)) for node_, seconds in recorded]

    def pre_node_execute(self, *, node_: node.Node, **_: Any) -> None:
        if not hasattr(self._local, "timings"):
            self.start()
        self._local.started = time.perf_counter()  # nodes of one thread's execution never nest

    def post_node_execute(self, *, node_: node.Node, **_: Any) -> None:
        self._local.timings.append((node_, time.perf_counter() - self._local.started))


def dataflow_config(config: Config) -> dict[str, bool]:
    """The Hamilton config that selects the DAG variant."""
    return {"l0_enabled": config.l0.enabled, "l1_enabled": config.l1.enabled}


def build_driver(hamilton_config: dict[str, bool], *adapters: Any) -> driver.Driver:
    """A driver over the dataflow modules for one variant."""
    return (
        driver.Builder()
        .with_modules(*DATAFLOW_MODULES)
        .with_config(hamilton_config)
        .with_adapters(base.DictResult(), *adapters)
        .build()
    )


def execute_lookup(
    dataflow: driver.Driver, inputs: dict[str, Any], overrides: dict[str, Any] | None = None
) -> Any:
    """Execute the DAG up to ``lookup_result`` on the driver's function graph, with its adapters.

    ``Driver.execute`` re-derives the upstream node set and re-validates every input's type on
    each call: ~0.3 ms, a sixth of the per-lookup post-processing budget on a 2-core machine.
    The tool validates once with ``Driver.validate_execution`` when it is built; per call the
    same function graph runs here, with the same lifecycle adapters (the node timings included).
    """
    graph = dataflow.graph
    run_id = f"lookup-{next(_RUN_IDS)}"  # unique in the process, without uuid4's urandom call
    final = [graph.nodes[FINAL_NODE]]
    computed = graph.execute(final, overrides=overrides or {}, inputs=inputs, run_id=run_id)
    return computed[FINAL_NODE]


def settings_inputs(config: Config) -> dict[str, Any]:
    """The configuration values the dataflow takes as inputs."""
    retrieval_config = config.retrieval
    return {
        "retrieve_k": retrieval_config.effective_retrieve_k,
        "return_n": retrieval_config.effective_return_n,
        "reference_threshold": retrieval_config.reference_threshold,
        "fallback_enabled": retrieval_config.fallback,
        "fallback_policy": FallbackPolicy(
            rule=retrieval_config.fallback_rule,
            score_ratio=retrieval_config.fallback_score_ratio,
            reference_threshold=retrieval_config.reference_threshold,
        ),
        "min_evidence_score": retrieval_config.min_evidence_score,
        "max_chunks_per_document": retrieval_config.max_chunks_per_document,
        "rerank_weights": config.rerank,
        "context_budget_chars": config.context.budget_chars,
    }

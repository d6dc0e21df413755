"""The Hamilton driver for the lookup dataflow, its config variants and its lifecycle adapters.

Every lookup runs through ``Driver.execute``, Hamilton's public entry point, so graph-level and
node-level hooks of any adapter (the executed-node recorder below, an OpenTelemetry tracer, a
user's own) all fire once per lookup.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from hamilton import driver, node
from hamilton.lifecycle import ResultBuilder
from hamilton.lifecycle.base import BaseDoNodeExecute

from lookup_knowledge.config import Config, RetrievalConfig
from lookup_knowledge.contract import LookupResult, NodeTiming
from lookup_knowledge.dataflows import (
    abstention,
    context,
    freshness,
    postprocessing,
    query_understanding,
    result,
    retrieval,
)
from lookup_knowledge.dataflows.abstention import AbstentionPolicy
from lookup_knowledge.dataflows.retrieval import FallbackPolicy, HybridFusion

DATAFLOW_MODULES = (query_understanding, retrieval, postprocessing, freshness, abstention, context, result)
FINAL_NODE = "lookup_result"
REQUEST_NODE = "l1_requests"  # what to ask the store; ``l1_answers`` asks it
ANSWER_NODE = "l1_answers"
FUSED_NODE = "fused_answers"  # the answers with a few-matches search fused again
DEFAULT_MODE = RetrievalConfig().mode
VARIANTS: dict[str, dict[str, bool | str]] = {
    "default": {"l0_enabled": True, "l1_enabled": True, "retrieval_mode": DEFAULT_MODE},
    **{
        mode: {"l0_enabled": True, "l1_enabled": True, "retrieval_mode": mode}
        for mode in ("dense", "sparse", "hybrid")
        if mode != DEFAULT_MODE
    },
    "l1_disabled": {"l0_enabled": True, "l1_enabled": False, "retrieval_mode": DEFAULT_MODE},
    "l0_disabled": {"l0_enabled": False, "l1_enabled": True, "retrieval_mode": DEFAULT_MODE},
}


class ExecutedNodes(BaseDoNodeExecute):
    """Runs each node and records it, in order, with its wall time, per calling thread.

    It is Hamilton's ``do_node_execute`` method rather than a pair of before/after hooks: one
    call per node instead of two, each with fewer arguments (a lookup runs some 60 nodes).
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def do_node_execute(
        self, *, run_id: str, node_: node.Node, kwargs: dict[str, Any], task_id: str | None = None
    ) -> Any:
        local = self._local
        if getattr(local, "run_id", None) != run_id:  # a new run on this thread
            local.run_id, local.timings = run_id, []
        started = time.perf_counter()  # nodes of one thread's run never nest
        try:
            return node_(**kwargs)
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000
            local.timings.append(NodeTiming(node_.name, round(elapsed_ms, 4)))

    def timings(self) -> list[NodeTiming]:
        """The nodes of this thread's latest run, in execution order."""
        return list(getattr(self._local, "timings", []))


class TracedLookupResult(ResultBuilder):
    """The driver's result: ``lookup_result`` with the run's executed nodes in its trace."""

    def __init__(self, executed: ExecutedNodes) -> None:
        self.executed = executed

    def build_result(self, **outputs: Any) -> LookupResult | dict[str, Any]:
        if FINAL_NODE not in outputs:  # a run up to earlier nodes (the requests of a batch)
            return outputs
        lookup: LookupResult = outputs[FINAL_NODE]
        if lookup.retrieval_trace is None:
            return lookup
        trace = lookup.retrieval_trace.model_copy(update={"executed_nodes": self.executed.timings()})
        return lookup.model_copy(update={"retrieval_trace": trace})


def dataflow_config(config: Config) -> dict[str, bool | str]:
    """The Hamilton config that selects the DAG variant."""
    return {
        "l0_enabled": config.l0.enabled,
        "l1_enabled": config.l1.enabled,
        "retrieval_mode": config.retrieval.mode,
        "multilingual_search": multilingual_search(config),
    }


def multilingual_search(config: Config) -> str:
    """When lookups search the multilingual vectors: ``auto`` (questions not in English),
    ``always``, or ``off`` (configured off, or ``auto`` without the ``multilingual`` extra)."""
    from lookup_knowledge.adapters.multilingual import multilingual_installed

    setting = config.multilingual.search
    return "off" if setting == "auto" and not multilingual_installed() else setting


def build_driver(hamilton_config: dict[str, bool | str], *adapters: Any) -> driver.Driver:
    """A driver over the dataflow modules for one variant, with the given lifecycle adapters
    (a ``ResultBuilder`` among them decides what ``execute`` returns; default: a dict)."""
    return (
        driver.Builder()
        .with_modules(*DATAFLOW_MODULES)
        .with_config(hamilton_config)
        .with_adapters(*adapters)
        .build()
    )


def lookup_driver(config: Config, *adapters: Any) -> tuple[driver.Driver, ExecutedNodes]:
    """The driver a tool runs lookups with: it returns the ``LookupResult`` with executed nodes.
    Raises ``ValueError`` for an adapter that runs nodes itself (``do_node_execute``, such as
    Hamilton's cache adapter): :class:`ExecutedNodes` does, and Hamilton takes one such adapter."""
    if runners := [type(a).__name__ for a in adapters if isinstance(a, BaseDoNodeExecute)]:
        raise ValueError(
            f"adapter {runners[0]} runs the nodes itself (do_node_execute); the lookup driver's "
            "ExecutedNodes does that to time each node, and Hamilton allows one: add hooks instead"
        )
    executed = ExecutedNodes()
    dataflow = build_driver(dataflow_config(config), executed, TracedLookupResult(executed), *adapters)
    return dataflow, executed


def execute_requests(
    dataflow: driver.Driver, inputs: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The DAG run up to :data:`REQUEST_NODE` (what to ask the store, unsent): every node it
    computed, to be handed back as overrides with the answers (batched eval)."""
    return dataflow.execute(list(_request_outputs(dataflow)), inputs=inputs, overrides=overrides or {})


_REQUEST_OUTPUTS: weakref.WeakKeyDictionary[driver.Driver, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _request_outputs(dataflow: driver.Driver) -> tuple[str, ...]:
    """:data:`REQUEST_NODE` and every node upstream of it, per driver (a walk of its graph)."""
    if (outputs := _REQUEST_OUTPUTS.get(dataflow)) is None:
        upstream = dataflow.what_is_upstream_of(REQUEST_NODE)  # REQUEST_NODE among them
        computed = [v.name for v in upstream if not v.is_external_input and v.name != REQUEST_NODE]
        # REQUEST_NODE first: its dependencies run in the order a whole lookup runs them
        outputs = _REQUEST_OUTPUTS[dataflow] = (REQUEST_NODE, *computed)
    return outputs


def execute_lookup(
    dataflow: driver.Driver, inputs: dict[str, Any], overrides: dict[str, Any] | None = None
) -> LookupResult:
    """One lookup through the driver's public ``execute``: every adapter's hooks fire."""
    return dataflow.execute([FINAL_NODE], inputs=inputs, overrides=overrides or {})


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
            sparse_score_ratio=retrieval_config.fallback_sparse_ratio,
            reference_threshold=retrieval_config.reference_threshold,
        ),
        "hybrid_fusion": HybridFusion(
            retrieval_config.fusion, retrieval_config.prefetch_k, retrieval_config.few_matches_fusion
        ),
        "min_evidence_score": retrieval_config.min_evidence_score,
        "relative_evidence_floor": retrieval_config.relative_evidence_floor,
        "max_chunks_per_document": retrieval_config.max_chunks_per_document,
        "rerank_weights": config.rerank,
        "search_other_languages": config.multilingual.other_languages,
        "context_budget_chars": config.context.budget_chars,
        "context_hit_reasons": config.context.hit_reasons,
        "abstention_policy": AbstentionPolicy(
            config.abstention.enabled, config.abstention.strictness, config.abstention.own_questions
        ),
    }

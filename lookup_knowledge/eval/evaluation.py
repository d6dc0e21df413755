"""Batch evaluation: run eval queries through the lookup DAG, score them with trec_eval measures.

>>> run = evaluate(tool, load_eval_queries("queries.parquet"))  # doctest: +SKIP
>>> run.metrics["overall"]["ndcg@10"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pytrec_eval

from lookup_knowledge.agent.tool import KnowledgeTool
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.eval.batch import lookup_many
from lookup_knowledge.eval.data import Qrels

# trec_eval measure -> reported name
_MEASURES = {
    "ndcg_cut_10": "ndcg@10",
    "recall_5": "recall@5",
    "recall_10": "recall@10",
    "recall_20": "recall@20",
    "map": "map",
}
METRIC_NAMES = [*_MEASURES.values(), "mrr@10"]


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
    """Run every query through the tool's DAG (batched) and compute metrics against ``qrels``."""
    pinned = pinned_categories(queries)
    started = time.perf_counter()
    results = lookup_many(tool, queries["query"].tolist(), pinned, on_progress)
    seconds = time.perf_counter() - started
    qrels = qrels or {}
    frame = results_frame(queries, results, qrels)
    per_query = per_query_metrics(frame, qrels)
    return EvalRun(frame, per_query, summarize(frame, per_query), seconds)


def pinned_categories(queries: pd.DataFrame) -> list[str | None]:
    """Each query's pinned category filter (blank or missing: none, so L0 decides)."""
    if "category" not in queries.columns:
        return [None] * len(queries)
    return [c if isinstance(c, str) and c.strip() else None for c in queries["category"]]


def document_ranking(result: LookupResult) -> list[str]:
    """Doc ids in rank order; a document's rank is the rank of its best chunk."""
    ids = (block.doc_id or block.evidence_key for block in result.evidence_blocks)
    return list(dict.fromkeys(ids))


def results_frame(queries: pd.DataFrame, results: list[LookupResult], qrels: Qrels) -> pd.DataFrame:
    """One row per query: status, fallback, ranked evidence with scores, timings, contract JSON."""
    rows = []
    for query_id, result in zip(queries["query_id"], results, strict=True):
        trace = result.retrieval_trace
        blocks = result.evidence_blocks
        ranking = document_ranking(result)
        judged = qrels.get(query_id)
        rows.append(
            {
                "query_id": query_id,
                "query": result.query,
                "found": result.found,
                "evidence_status": result.evidence_status,
                "fallback_reason": trace.fallback_reason if trace else None,
                "relevance_level": result.relevance_level,
                "category_filter": trace.category_filter if trace else None,
                "evidence_keys": [b.evidence_key for b in blocks],
                "doc_ids": ranking,
                "scores": [b.score for b in blocks],
                "normalized_scores": [b.normalized_score for b in blocks],
                "rerank_scores": [b.rerank_score for b in blocks],
                "top_normalized_score": blocks[0].normalized_score if blocks else None,
                "top_hit_relevant": (judged.get(ranking[0], 0) > 0) if judged and ranking else None,
                "latency_ms": sum(n.ms for n in trace.executed_nodes) if trace else 0.0,
                "node_timings_json": json.dumps(
                    {n.name: n.ms for n in trace.executed_nodes} if trace else {}
                ),
                "result_json": json.dumps(result.model_dump(by_alias=True, mode="json"), ensure_ascii=False),
            }
        )
    frame = pd.DataFrame(rows)
    frame["category"] = pinned_categories(queries)
    return frame


def per_query_metrics(results: pd.DataFrame, qrels: Qrels) -> pd.DataFrame:
    """trec_eval measures per judged query, at document level."""
    judged = [qid for qid in results["query_id"] if qid in qrels]
    if not judged:
        return pd.DataFrame(columns=["query_id", "category", *METRIC_NAMES])
    rankings = dict(zip(results["query_id"], results["doc_ids"], strict=True))
    run = {qid: _as_run(rankings[qid]) for qid in judged}
    top10 = {qid: _as_run(rankings[qid][:10]) for qid in judged}
    judgments = {qid: qrels[qid] for qid in judged}
    scores = pytrec_eval.RelevanceEvaluator(judgments, set(_MEASURES)).evaluate(run)
    reciprocal = pytrec_eval.RelevanceEvaluator(judgments, {"recip_rank"}).evaluate(top10)
    categories = dict(zip(results["query_id"], results["category"], strict=True))
    return pd.DataFrame(
        [
            {
                "query_id": qid,
                "category": categories[qid],
                **{name: scores[qid][measure] for measure, name in _MEASURES.items()},
                "mrr@10": reciprocal[qid]["recip_rank"],
            }
            for qid in judged
        ]
    )


def _as_run(ranking: list[str]) -> dict[str, float]:
    # trec_eval orders by score; strictly decreasing scores keep our ranking as is
    return {doc_id: float(len(ranking) - rank) for rank, doc_id in enumerate(ranking)} or {"": 0.0}


def summarize(results: pd.DataFrame, per_query: pd.DataFrame) -> dict[str, Any]:
    """Overall and per-category metrics, rates and latency."""
    summary: dict[str, Any] = {"overall": _summary(results, per_query)}
    categories = results["category"].dropna().unique().tolist()
    summary["per_category"] = {
        c: _summary(results[results["category"] == c], per_query[per_query["category"] == c])
        for c in sorted(categories)
    }
    return summary


def _summary(results: pd.DataFrame, per_query: pd.DataFrame) -> dict[str, Any]:
    n = len(results)
    fallback = results["fallback_reason"].dropna().value_counts()
    latency = results["latency_ms"].to_numpy(dtype=float)
    return {
        "queries": n,
        "judged_queries": len(per_query),
        **{name: float(per_query[name].mean()) if len(per_query) else None for name in METRIC_NAMES},
        "found_rate": float(results["found"].mean()) if n else None,
        "no_evidence_rate": float((results["evidence_status"] == "no_evidence").mean()) if n else None,
        "retrieval_failed_rate": float((results["evidence_status"] == "retrieval_failed").mean())
        if n
        else None,
        "fallback_rate": float(results["fallback_reason"].notna().mean()) if n else None,
        "fallback_rate_by_reason": {reason: count / n for reason, count in fallback.items()},
        "latency_ms_p50": float(np.percentile(latency, 50)) if n else None,
        "latency_ms_p95": float(np.percentile(latency, 95)) if n else None,
    }


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
    pure_tool = KnowledgeTool(
        tool.config.model_copy(
            update={"retrieval": tool.config.retrieval.model_copy(update={"fallback": False})}
        ),
        search_port=tool.search_port,
        embedder=tool.embedder,
        l0_index=tool.l0_index,
    )
    return FilterReferences(
        unfiltered=_ndcg(tool, queries.assign(category=None), qrels),
        pure_filter=_ndcg(pure_tool, queries.assign(category=queries["true_category"]), qrels),
    )


def _ndcg(tool: KnowledgeTool, queries: pd.DataFrame, qrels: Qrels) -> pd.Series:
    return evaluate(tool, queries, qrels).per_query.set_index("query_id")["ndcg@10"]


def _mean(ndcg: pd.Series, queries: pd.DataFrame) -> float:
    return float(ndcg.reindex(queries["query_id"]).dropna().mean())

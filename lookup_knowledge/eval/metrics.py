"""Result rows and trec_eval measures for batch evaluation (document level).

Rankings are as deep as the deepest cutoff (:data:`EVAL_DEPTH`); the ``@return_n`` measures
score only what the agent saw, the first ``return_n`` evidence blocks.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytrec_eval

from lookup_knowledge.contract import LookupResult

# trec_eval measure -> reported name
_MEASURES = {
    "ndcg_cut_10": "ndcg@10",
    "recall_5": "recall@5",
    "recall_10": "recall@10",
    "recall_20": "recall@20",
    "map": "map",
}
EVAL_DEPTH = 20  # documents the deepest cutoff (recall@20) needs
AGENT_METRICS = ["ndcg@return_n", "recall@return_n"]
METRIC_NAMES = [*_MEASURES.values(), "mrr@10", *AGENT_METRICS]
RESULT_COLUMNS = [
    "query_id", "query", "found", "evidence_status", "fallback_reason", "relevance_level",
    "category_filter", "evidence_keys", "block_doc_ids", "doc_ids", "scores", "normalized_scores",
    "rerank_scores", "top_normalized_score", "top_hit_relevant", "latency_ms", "node_timings_json",
    "result_json", "category",
]  # fmt: skip


def pinned_categories(queries: pd.DataFrame) -> list[str | None]:
    """Each query's pinned category filter (blank or missing: none, so L0 decides)."""
    if "category" not in queries.columns:
        return [None] * len(queries)
    return [c if isinstance(c, str) and c.strip() else None for c in queries["category"]]


def block_doc_ids(result: LookupResult) -> list[str]:
    """Each evidence block's document, in rank order (repeated when a document has several)."""
    return [block.doc_id or block.evidence_key for block in result.evidence_blocks]


def document_ranking(result: LookupResult) -> list[str]:
    """Doc ids in rank order; a document's rank is the rank of its best chunk."""
    return list(dict.fromkeys(block_doc_ids(result)))


def result_rows(queries: pd.DataFrame, results: list[LookupResult], qrels: dict) -> pd.DataFrame:
    """One row per query: status, fallback, ranked evidence with scores, timings, contract JSON."""
    rows = []
    for query_id, category, result in zip(
        queries["query_id"], pinned_categories(queries), results, strict=True
    ):
        trace, blocks = result.retrieval_trace, result.evidence_blocks
        ranking, judged = document_ranking(result), qrels.get(query_id)
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
                "block_doc_ids": block_doc_ids(result),
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
                "result_json": result.model_dump_json(by_alias=True),
                "category": category,
            }
        )
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def per_query_metrics(results: pd.DataFrame, qrels: dict, return_n: int) -> pd.DataFrame:
    """trec_eval measures per judged query over the full ranking, and ``@return_n`` ones over the
    documents of the first ``return_n`` evidence blocks."""
    judged = [qid for qid in results["query_id"] if qid in qrels]
    if not judged:
        return pd.DataFrame(columns=["query_id", "category", *METRIC_NAMES])
    rankings = dict(zip(results["query_id"], results["doc_ids"], strict=True))
    seen = dict(zip(results["query_id"], results["block_doc_ids"], strict=True))
    judgments = {qid: qrels[qid] for qid in judged}
    full = _evaluate(judgments, set(_MEASURES), {qid: rankings[qid] for qid in judged})
    top10 = _evaluate(judgments, {"recip_rank"}, {qid: rankings[qid][:10] for qid in judged})
    agent = _evaluate(
        judgments,
        {f"ndcg_cut.{return_n}", f"recall.{return_n}"},
        {qid: list(dict.fromkeys(seen[qid][:return_n])) for qid in judged},
    )
    categories = dict(zip(results["query_id"], results["category"], strict=True))
    return pd.DataFrame(
        [
            {
                "query_id": qid,
                "category": categories[qid],
                **{name: full[qid][measure] for measure, name in _MEASURES.items()},
                "mrr@10": top10[qid]["recip_rank"],
                "ndcg@return_n": agent[qid][f"ndcg_cut_{return_n}"],
                "recall@return_n": agent[qid][f"recall_{return_n}"],
            }
            for qid in judged
        ]
    )


def _evaluate(judgments: dict, measures: set[str], rankings: dict[str, list[str]]) -> dict[str, dict]:
    # trec_eval orders by score; strictly decreasing scores keep our ranking as is
    run = {
        qid: {doc_id: float(len(ranking) - rank) for rank, doc_id in enumerate(ranking)} or {"": 0.0}
        for qid, ranking in rankings.items()
    }
    return pytrec_eval.RelevanceEvaluator(judgments, measures).evaluate(run)


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

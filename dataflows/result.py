"""Result assembly: evidence status, traces and the ``lookup_result`` contract."""

from __future__ import annotations

import pandas as pd

from lookup_knowledge.adapters.search import identity_key
from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import (
    AttemptTrace,
    BoostContribution,
    ContextPack,
    EvidenceBlock,
    EvidenceCuts,
    EvidenceStatus,
    FallbackDecisionTrace,
    L0Hints,
    LookupResult,
    RelevanceLevel,
    RerankEntry,
    RerankTrace,
    RetrievalTrace,
    evidence_domains,
)
from lookup_knowledge.frames import records

from .retrieval import FallbackDecision, HybridFusion, SearchAttempt

HIGH_RELEVANCE = 0.6

MESSAGES = {
    "no_evidence": "No knowledge evidence was found for this query: the knowledge base has "
    "nothing usable on it.",
    "retrieval_failed": "Knowledge retrieval failed: every search raised an error. This is an "
    "outage, not an empty knowledge base; retry later.",
    "l1_disabled": "No knowledge evidence: L1 retrieval is disabled by configuration. L0 hints "
    "are in the trace; they are not evidence.",
}


def evidence_status(
    retrieval_attempts: list[SearchAttempt], evidence_blocks: list[EvidenceBlock]
) -> EvidenceStatus:
    """``evidence``; ``retrieval_failed`` when every search raised (an outage, not an empty
    knowledge base); else ``no_evidence``."""
    if evidence_blocks:
        return "evidence"
    if retrieval_attempts and all(a.error is not None for a in retrieval_attempts):
        return "retrieval_failed"
    return "no_evidence"


def _decision_trace(decision: FallbackDecision) -> FallbackDecisionTrace:
    values = decision.values
    return FallbackDecisionTrace(
        rule=decision.policy.rule,
        fired=decision.rule,
        used=decision.use,
        filtered_top=values.filtered_top,
        unfiltered_top=values.unfiltered_top,
        score_ratio=values.score_ratio,
        overlap=values.overlap,
        filtered_sparse_top=values.filtered_sparse_top,
        unfiltered_sparse_top=values.unfiltered_sparse_top,
        sparse_score_ratio=values.sparse_score_ratio,
        settings=decision.policy.settings(),
    )


def retrieval_trace(
    l0_hints: L0Hints,
    category_filter: str | None,
    retrieval_attempts: list[SearchAttempt],
    fallback_decision: FallbackDecision,
    reference_threshold: float,
    min_evidence_score: float,
    retrieve_k: int,
    return_n: int,
    max_chunks_per_document: int | None,
    relative_evidence_floor: float,
    evidence_cuts: EvidenceCuts,
    retrieval_mode: str = "dense",
    hybrid_fusion: HybridFusion | None = None,
) -> RetrievalTrace:
    """L0 hints, filter, every search with whether its hits were used, the fallback decision
    with the values it read, and the settings in force."""
    l1_candidates = any(attempt.usable for attempt in retrieval_attempts if attempt.used)
    layer = "L0+L1" if not l0_hints.is_empty and l1_candidates else "L1"
    return RetrievalTrace(
        retrieval_mode=retrieval_mode,
        fusion=(hybrid_fusion or HybridFusion()).method if retrieval_mode == "hybrid" else None,
        l0_hints=l0_hints,
        category_filter=category_filter,
        attempts=[
            AttemptTrace(
                kind=a.kind,
                filter=a.filter,
                width=a.width,
                hit_count=len(a.hits),
                top_normalized_score=a.top_normalized_score,
                usable_count=len(a.usable),
                error=a.error,
                used=a.used,
                hit_keys=[identity_key(hit, rank) for rank, hit in enumerate(a.usable, start=1)],
            )
            for a in retrieval_attempts
        ],
        fallback_reason=fallback_decision.reason,
        fallback_decision=_decision_trace(fallback_decision) if retrieval_attempts else None,
        reference_threshold=reference_threshold,
        min_evidence_score=min_evidence_score,
        retrieve_k=retrieve_k,
        return_n=return_n,
        max_chunks_per_document=max_chunks_per_document,
        retrieval_layer=layer,
        relative_evidence_floor=relative_evidence_floor,
        evidence_cuts=evidence_cuts,
    )


def rerank_trace(reranked_df: pd.DataFrame, rerank_weights: RerankConfig) -> RerankTrace:
    """Per returned block: rank, key, source, base and final score, boosts with contributions."""
    entries = [
        RerankEntry(
            rank=row["rank"],
            evidence_key=row["evidence_key"],
            source=row["source"],
            base_score=row["score"],
            normalized_score=row["normalized_score"],
            rank_score=row["rank_score"],
            final_score=row["rerank_score"],
            boosts=[BoostContribution(reason=r, contribution=c) for r, c in row["boosts"]],
        )
        for row in records(reranked_df)
    ]
    return RerankTrace(weights=rerank_weights.model_dump(), entries=entries)


def relevance_level(evidence_blocks: list[EvidenceBlock], reference_threshold: float) -> RelevanceLevel:
    """``high``/``medium``/``low`` by the best normalized score; ``none`` without evidence."""
    if not evidence_blocks:
        return "none"
    top = max(block.normalized_score for block in evidence_blocks)
    if top >= HIGH_RELEVANCE:
        return "high"
    return "medium" if top >= reference_threshold else "low"


def completeness_hint(
    evidence_blocks: list[EvidenceBlock], evidence_cuts: EvidenceCuts, context_pack: ContextPack
) -> str:
    """Whether the agent sees every chunk that qualified as evidence (scored above the evidence
    floor), and if not, how many were cut and by what."""
    if not evidence_blocks:
        return "none: no evidence was returned"
    cuts = []
    if evidence_cuts.return_n:
        cuts.append(f"{_count(evidence_cuts.return_n, 'more qualifying chunk')} cut by return_n")
    if evidence_cuts.document_cap:
        better = len(evidence_cuts.capped_above_returned)
        note = f" ({better} scoring above a returned block)" if better else ""
        cuts.append(f"{_count(evidence_cuts.document_cap, 'chunk')} cut by the per-document cap{note}")
    summary = context_pack.summary
    if summary.omitted_sources or summary.partially_included_sources or _truncated(context_pack):
        cuts.append("the context pack truncated or omitted evidence to fit its budget")
    if cuts:
        return "partial: " + "; ".join(cuts)
    return f"complete: all {_count(len(evidence_blocks), 'qualifying chunk')} returned and packed in full"


def _truncated(context_pack: ContextPack) -> bool:
    return any(item.truncated for item in context_pack.items)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def retrieved_domains_this_session(
    evidence_blocks: list[EvidenceBlock], prior_session_domains: list[str] | None = None
) -> list[str]:
    """Domains of the evidence this session got so far, first seen first, this call included."""
    return list(dict.fromkeys([*(prior_session_domains or []), *evidence_domains(evidence_blocks)]))


def lookup_result(
    query: str,
    evidence_status: EvidenceStatus,
    evidence_blocks: list[EvidenceBlock],
    context_pack: ContextPack,
    retrieval_trace: RetrievalTrace,
    rerank_trace: RerankTrace,
    relevance_level: RelevanceLevel,
    completeness_hint: str,
    retrieved_domains_this_session: list[str],
) -> LookupResult:
    """The assembled result contract."""
    found = evidence_status == "evidence"
    if found:
        documents = len({b.doc_id or b.evidence_key for b in evidence_blocks})
        message = (
            f"Found {_count(len(evidence_blocks), 'evidence block')} from {_count(documents, 'document')}."
        )
    elif not retrieval_trace.attempts:
        message = MESSAGES["l1_disabled"]
    else:
        message = MESSAGES[evidence_status]
    if evidence_status == "retrieval_failed":  # the first error says what failed: down, missing, corrupt
        message += f" First error: {retrieval_trace.attempts[0].error}"
    return LookupResult(
        query=query,
        found=found,
        evidence_status=evidence_status,
        evidence_blocks=evidence_blocks,
        context_pack=context_pack if found else None,
        retrieval_trace=retrieval_trace,
        rerank_trace=rerank_trace if found else None,
        relevance_level=relevance_level,
        completeness_hint=completeness_hint,
        retrieved_domains_this_session=retrieved_domains_this_session,
        message=message,
    )

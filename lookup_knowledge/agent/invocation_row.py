"""The ``tool_invocation`` row of one ``lookup_knowledge`` call: what the record keeps of its
input, status, layer, latency, retrieval details and returned evidence (docs/invocations.md)."""

from __future__ import annotations

from typing import Any

from lookup_knowledge.adapters.recorder import Invocation
from lookup_knowledge.agent.tool_definition import TOOL_NAME
from lookup_knowledge.agent.verify import block_record
from lookup_knowledge.contract import LookupResult, evidence_domains


def invocation_row(session_id: str | None, result: LookupResult, latency_ms: float) -> Invocation:
    """The ``tool_invocation`` row of one call in ``session_id`` (a request's session key): its
    input is the query as the result holds it (stripped; a refused one as echoed, short and encodable)."""
    trace = result.retrieval_trace
    return Invocation(
        session_id=session_id,
        tool_name=TOOL_NAME,
        input=result.query,
        status=result.evidence_status,
        evidence_count=len(result.evidence_blocks),
        retrieval_layer=trace.retrieval_layer if trace else None,
        fallback_reason=trace.fallback_reason if trace else None,
        latency_ms=round(latency_ms, 3),
        retrieval_details=retrieval_details(result),
        returned_evidence=[block_record(block).to_record() for block in result.evidence_blocks],
    )


def retrieval_details(result: LookupResult) -> dict[str, Any]:
    """The ``retrieval_details`` JSON: hints, filter, attempts, evidence, pack and rerank summaries."""
    trace = result.retrieval_trace

    def dump(model: Any, **kwargs: Any) -> Any:
        return None if model is None else model.model_dump(by_alias=True, mode="json", **kwargs)

    thresholds = {
        "reference_threshold",
        "min_evidence_score",
        "retrieve_k",
        "return_n",
        "max_chunks_per_document",
    }
    evidence_fields = {
        "evidence_key",
        "doc_id",
        "source",
        "title",
        "category",
        "score",
        "normalized_score",
        "rerank_score",
        "rank",
        "hit_reasons",
    }
    return {
        "l0Hints": dump(trace.l0_hints) if trace else None,
        "categoryFilter": trace.category_filter if trace else None,
        "attempts": [dump(attempt, exclude={"hit_keys"}) for attempt in trace.attempts] if trace else [],
        "fallbackReason": trace.fallback_reason if trace else None,
        "fallbackDecision": dump(trace.fallback_decision) if trace else None,
        "retrievalLayer": trace.retrieval_layer if trace else None,
        "settings": dump(trace, include=thresholds) if trace else None,
        "evidence": [dump(block, include=evidence_fields) for block in result.evidence_blocks],
        "evidenceDomains": evidence_domains(result.evidence_blocks),
        "contextPack": dump(result.context_pack.summary) if result.context_pack else None,
        "rerank": dump(result.rerank_trace),
        "relevanceLevel": result.relevance_level,
        "completenessHint": result.completeness_hint,
        "retrievedDomainsThisSession": result.retrieved_domains_this_session,
        "message": result.message,
        "executedNodes": dump(trace, include={"executed_nodes"})["executedNodes"] if trace else [],
        "coldStartMs": trace.cold_start_ms if trace else None,
        "access": trace.access_filter if trace else None,
    }

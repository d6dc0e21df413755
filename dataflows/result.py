"""Result assembly: evidence status, traces and the ``lookup_result`` contract."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pandas as pd

from lookup_knowledge.adapters.multilingual import LANGUAGES
from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import (
    AttemptTrace,
    BoostContribution,
    ContextPack,
    EvidenceBlock,
    EvidenceCuts,
    EvidenceStatus,
    EvidenceVerdict,
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

from .retrieval import HybridFusion, SearchAttempt

MEDIUM_AGREEMENT = 3  # medium: both searches rank the top block within this place (docs/trust.md)
HIGH_COVERAGE = 0.5  # high: the top block also holds half of the query's informative terms, as written
HIGH_MARGIN, MEDIUM_MARGIN = 4.0, 3.0  # dense mode (no BM25 leg): levels by the verdict's margin
# a question asked across languages (docs/multilingual.md): the lead in best line cosine over the
# other returned blocks that lifts a top block the multilingual search and the lines both put first
# to high (else to medium); the middle of the lead's plateau on tldr and FastAPI (0.03-0.08)
LINE_LEAD = 0.05
SIMILAR_SHARE = 0.8  # a cut chunk with this share of the best block's rank score is of similar strength
MAX_NAMED_DOCUMENTS = 3  # documents a partial hint names

MESSAGES = {
    "no_evidence": "No knowledge evidence was found for this query: the knowledge base has "
    "nothing usable on it.",
    "implausible": "No knowledge evidence was found for this query: the nearest passages in the "
    "knowledge base do not plausibly answer it.",
    "retrieval_failed": "Knowledge retrieval failed: every search raised an error. This is an "
    "outage, not an empty knowledge base; retry later.",
    "l1_disabled": "No knowledge evidence: L1 retrieval is disabled by configuration. L0 hints "
    "are in the trace; they are not evidence.",
}
# a refused question in a language the multilingual encoder was not trained on (tldr-pages'
# questions in twelve such languages reached about half the MRR@10 of the encoder's languages)
OTHER_LANGUAGE = (
    " The question reads as language '{}', which the multilingual encoder does not read well: "
    "ask it again in English, or in the documents' language."
)


def evidence_status(
    retrieval_attempts: list[SearchAttempt],
    evidence_blocks: list[EvidenceBlock],
    evidence_verdict: EvidenceVerdict,
) -> EvidenceStatus:
    """``evidence`` when blocks survived and plausibly answer the question; ``retrieval_failed``
    when every search raised (an outage, not an empty knowledge base); else ``no_evidence``."""
    if evidence_blocks and evidence_verdict.plausible:
        return "evidence"
    if retrieval_attempts and all(a.error is not None for a in retrieval_attempts):
        return "retrieval_failed"
    return "no_evidence"


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields by name, one level deep (what its trace model copies)."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def retrieval_trace(
    l0_hints: L0Hints,
    category_filter: str | None,
    retrieval_attempts: list[SearchAttempt],
    fallback_decision: FallbackDecisionTrace,
    reference_threshold: float,
    min_evidence_score: float,
    retrieve_k: int,
    return_n: int,
    max_chunks_per_document: int | None,
    relative_evidence_floor: float,
    evidence_cuts: EvidenceCuts,
    evidence_verdict: EvidenceVerdict,
    retrieval_mode: str,
    hybrid_fusion: HybridFusion,
    access_scope: tuple | None = None,
) -> RetrievalTrace:
    """L0 hints, filters (category, access), every search with whether its hits were used, the
    fallback decision with the values it read, and the settings in force."""
    l1_candidates = any(attempt.usable for attempt in retrieval_attempts if attempt.used)
    layer = "L0+L1" if not l0_hints.is_empty and l1_candidates else "L1"
    return RetrievalTrace(
        retrieval_mode=retrieval_mode,
        fusion=hybrid_fusion.method if retrieval_mode == "hybrid" else None,
        l0_hints=l0_hints,
        category_filter=category_filter,
        access_filter=None if access_scope is None else list(access_scope),
        attempts=[
            AttemptTrace.model_validate(attempt, from_attributes=True) for attempt in retrieval_attempts
        ],
        fallback_reason=fallback_decision.reason,
        fallback_decision=fallback_decision if retrieval_attempts else None,
        reference_threshold=reference_threshold,
        min_evidence_score=min_evidence_score,
        retrieve_k=retrieve_k,
        return_n=return_n,
        max_chunks_per_document=max_chunks_per_document,
        retrieval_layer=layer,
        relative_evidence_floor=relative_evidence_floor,
        evidence_cuts=evidence_cuts,
        evidence_verdict=evidence_verdict if retrieval_attempts else None,
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
            line_score=row["line_score"],
            final_score=row["rerank_score"],
            boosts=[BoostContribution(reason=r, contribution=c) for r, c in row["boosts"]],
        )
        for row in records(reranked_df)
    ]
    weights = rerank_weights.model_dump(exclude={"cross_language_lines"})  # a switch: lineScore shows it
    return RerankTrace(weights=weights, entries=entries)


def relevance_level(
    evidence_status: EvidenceStatus, evidence_verdict: EvidenceVerdict, retrieval_mode: str
) -> RelevanceLevel:
    """``high`` when the dense and the BM25 search both rank the top block (the first returned)
    first and it holds at least :data:`HIGH_COVERAGE` of the query's terms as written (a
    neighbouring field's question is often ranked first by both on its general words alone, or on
    its words in another sense: "leavers" for "leave"), ``medium`` when both rank it in their
    top :data:`MEDIUM_AGREEMENT`, else ``low`` (dense mode: by the margin); ``none`` without
    evidence. A lookup that is evidence only by the words its hits hold, its margin under the
    store's bar (``informative_terms``), is ``medium`` at best; one asked across languages is
    also read by its lines (:func:`_across_languages`). Measured meanings in ``docs/trust.md``."""
    if evidence_status != "evidence":
        return "none"
    verdict = evidence_verdict
    if retrieval_mode == "dense":  # one search: no agreement to read
        margin = verdict.margin if verdict.margin is not None else HIGH_MARGIN
        return "high" if margin >= HIGH_MARGIN else "medium" if margin >= MEDIUM_MARGIN else "low"
    return _across_languages(_by_places(verdict), verdict)


def _by_places(verdict: EvidenceVerdict) -> RelevanceLevel:
    """The level by the dense and BM25 places of the top block (:func:`relevance_level`)."""
    places = (verdict.top_dense_rank, verdict.top_sparse_rank)
    if None in places:
        return "low"
    worst = max(place for place in places if place is not None)
    if worst == 1 and _holds_the_question(verdict) and verdict.reason != "informative_terms":
        return "high"
    return "medium" if worst <= MEDIUM_AGREEMENT else "low"


def _across_languages(level: RelevanceLevel, verdict: EvidenceVerdict) -> RelevanceLevel:
    """For a question asked across languages (its lines read: ``top_line_lead``), where the
    dense and BM25 places read little: ``high`` when the multilingual search and the lines both
    put the top block first, its best line :data:`LINE_LEAD` above the others'; ``medium`` when
    they both put it first or its line leads by that much; never lower than by the places."""
    lead = verdict.top_line_lead
    if lead is None:
        return level
    first = verdict.top_multilingual_rank == 1 and lead >= 0
    if level == "high" or (first and lead >= LINE_LEAD):
        return "high"
    return "medium" if level == "medium" or first or lead >= LINE_LEAD else "low"


def _holds_the_question(verdict: EvidenceVerdict) -> bool:
    """Whether the top block holds :data:`HIGH_COVERAGE` of the query's terms as written (a
    query without any, all stop words: its places alone decide)."""
    return verdict.top_hit_coverage is None or verdict.top_hit_coverage >= HIGH_COVERAGE


def completeness_hint(
    evidence_status: EvidenceStatus,
    evidence_blocks: list[EvidenceBlock],
    screened_df: pd.DataFrame,
    context_pack: ContextPack,
) -> str:
    """Whether the blocks hold all the evidence of their strength (``complete``), or more chunks
    of similar strength were cut, and in which documents (``partial``); ``none`` without evidence."""
    if evidence_status != "evidence":
        return "none: no evidence was returned"
    similar, weaker = _cut_chunks(screened_df)
    notes = []
    if similar:
        documents = list(dict.fromkeys(row["doc_id"] or row["evidence_key"] for row in similar))
        named = ", ".join(documents[:MAX_NAMED_DOCUMENTS])
        others = len(documents) - MAX_NAMED_DOCUMENTS
        more = f" and {others} more" if others > 0 else ""
        notes.append(
            f"{_count(len(similar), 'more chunk')} of similar strength in {named}{more} "
            "(raise return_n or look them up)"
        )
    summary = context_pack.summary
    if summary.omitted_sources or summary.partially_included_sources or _truncated(context_pack):
        notes.append("the context pack truncated or omitted evidence to fit its budget")
    if notes:
        return "partial: " + "; ".join(notes)
    one = len(evidence_blocks) == 1
    returned = "the returned block" if one else f"the {len(evidence_blocks)} returned blocks"
    if weaker:
        holds = "holds" if one else "hold"
        below = f"each under {SIMILAR_SHARE:.0%} of the top block's score"
        return f"complete: {returned} {holds} the strongest evidence; {len(weaker)} more found, {below}"
    return f"complete: {returned} {'is' if one else 'are'} all the evidence found, packed in full"


def _cut_chunks(screened_df: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """Chunks cut by ``return_n`` or the per-document cap: those of similar strength to the
    returned blocks (at least :data:`SIMILAR_SHARE` of the strongest one's rank score), and the rest."""
    rows = records(screened_df)
    kept = [row["rank_score"] for row in rows if row["left_out"] is None]
    if not kept:
        return [], []
    bar = SIMILAR_SHARE * max(kept)
    cut = [row for row in rows if row["left_out"] in ("return_n", "document_cap")]
    return [row for row in cut if row["rank_score"] >= bar], [row for row in cut if row["rank_score"] < bar]


def _truncated(context_pack: ContextPack) -> bool:
    return any(item.truncated for item in context_pack.items)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def retrieved_domains_this_session(
    evidence_status: EvidenceStatus,
    evidence_blocks: list[EvidenceBlock],
    prior_session_domains: list[str] | None = None,
) -> list[str]:
    """Domains of the evidence this session was returned so far, first seen first, this call
    included: only when it returns its blocks (``evidence``); blocks the verdict held back add none."""
    returned = evidence_blocks if evidence_status == "evidence" else []
    return list(dict.fromkeys([*(prior_session_domains or []), *evidence_domains(returned)]))


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
    query_language: str = "en",
) -> LookupResult:
    """The assembled result contract; a refused question in a language outside the multilingual
    encoder's (``query_language``) is told to ask in English."""
    found = evidence_status == "evidence"
    if found:
        documents = len({b.doc_id or b.evidence_key for b in evidence_blocks})
        message = (
            f"Found {_count(len(evidence_blocks), 'evidence block')} from {_count(documents, 'document')}."
        )
    elif not retrieval_trace.attempts:
        message = MESSAGES["l1_disabled"]
    elif evidence_blocks:  # blocks survived the floors but do not plausibly answer the question
        message = MESSAGES["implausible"]
    else:
        message = MESSAGES[evidence_status]
    if evidence_status == "retrieval_failed":  # the first error says what failed: down, missing, corrupt
        message += f" First error: {retrieval_trace.attempts[0].error}"
    elif not found and query_language not in LANGUAGES:
        message += OTHER_LANGUAGE.format(query_language)
    if found and (stale := [b.source or b.evidence_key for b in evidence_blocks if b.stale]):
        message += f" Stale: {', '.join(dict.fromkeys(stale))} changed or vanished since ingest."
    return LookupResult(
        query=query,
        found=found,
        evidence_status=evidence_status,
        evidence_blocks=evidence_blocks if found else [],
        context_pack=context_pack if found else None,
        retrieval_trace=retrieval_trace,
        rerank_trace=rerank_trace if found else None,
        relevance_level=relevance_level,
        completeness_hint=completeness_hint,
        retrieved_domains_this_session=retrieved_domains_this_session,
        message=message,
    )

"""What the inspector shows of one lookup, built from a live :class:`LookupResult` or from a
recorded ``tool_invocation`` row (its stored trace, not a re-run), in words a person reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lookup_knowledge.adapters.recorder import Invocation
from lookup_knowledge.contract import (
    AttemptTrace,
    EvidenceBlock,
    FallbackDecisionTrace,
    LookupResult,
    NodeTiming,
    RerankEntry,
)

STATUS_WORDS = {
    "evidence": "Found: the knowledge base holds evidence for this question",
    "no_evidence": "Not found: nothing returned plausibly answers this question",
    "retrieval_failed": "Retrieval failed: the store or the model did not answer",
    "invalid_input": "Refused: the question cannot be looked up as asked",
}
VERDICT_WORDS = {  # the evidence_verdict node's reasons (contract.EvidenceVerdict.reason)
    "no_candidates": "no hit passed the evidence floors",
    "exact_code": "a block holds a distinctive code of the question verbatim",
    "named_title": "a best hit's title is the name the question puts in code",
    "plausible": "the best hit scores clearly above what the store gives questions it cannot answer",
    "informative_terms": "the margin is a little short, but the best hits hold the question's telling words",
    "below_probe_null": "the best hit scores no better than questions this store cannot answer",
    "uninformative_terms": "the best hits hold only the question's least informative words",
    "unheld_terms": "words no document holds carry most of the question's information",
    "no_shared_terms": "the best hits hold none of the question's words",
    "multilingual_match": "the question is in another language and the best hit is close to it in meaning",
    "sentence_match": "the best hits hold some of the question's words and one sentence is close in meaning",
    "below_multilingual_floor": "the best hits hold the question's words but are far from it in meaning, "
    "or it reads like small talk",
    "not_answered": "the answerability reader read the question with each returned block: none answers it",
}
DECISION_WORDS = {  # contract.DecisionRule
    "no_filter": "one unfiltered search: no category filter, nothing to decide",
    "fallback_disabled": "the fallback is off: the filtered hits stand",
    "filtered_search_failed": "the filtered search failed: the unfiltered hits were used",
    "filtered_search_empty": "the filtered search found nothing usable: the unfiltered hits were used",
    "unfiltered_search_unusable": "the unfiltered companion found nothing usable: the filtered hits stand",
    "filter_holds_up": "the filtered top scores close enough to the unfiltered top: the filter holds",
    "filter_lost": "the filtered top scores too far below the unfiltered top: the unfiltered hits were used",
    "filter_lost_terms": "the filtered BM25 top is far below the unfiltered: the unfiltered hits were used",
    "filter_lost_code": "only unfiltered hits hold the question's code: the unfiltered hits were used",
    "filtered_top_at_threshold": "the filtered top reaches the reference threshold: the filter holds",
    "filtered_top_below_threshold": "the filtered top is under the reference threshold: unfiltered hits used",
    "l1_disabled": "no vector search (L1 is off)",
}


@dataclass
class BlockView:
    """One evidence block as the page shows it."""

    rank: int
    key: str
    source: str | None
    title: str | None
    breadcrumb: str | None
    location: str | None
    content: str | None
    hit_reasons: list[str]
    scores: list[tuple[str, float]]
    boosts: list[tuple[str, float]]
    instruction_like: bool = False
    stale: bool | None = None


@dataclass
class Inspection:
    """One lookup as the inspector shows it."""

    query: str
    status: str
    found: bool
    level: str
    hint: str
    message: str
    verdict_reason: str | None
    verdict_facts: list[tuple[str, str]]
    blocks: list[BlockView]
    attempts: list[AttemptTrace]
    decision: FallbackDecisionTrace | None
    category_filter: str | None
    access: list[str] | None
    nodes: list[NodeTiming]
    pack_text: str | None = None
    pack_facts: list[tuple[str, str]] = field(default_factory=list)
    recorded: bool = False

    @property
    def status_words(self) -> str:
        return STATUS_WORDS.get(self.status, self.status)

    @property
    def decision_words(self) -> str | None:
        return None if self.decision is None else DECISION_WORDS.get(self.decision.fired, self.decision.fired)

    @property
    def total_ms(self) -> float:
        return sum(node.ms for node in self.nodes)


def from_result(result: LookupResult) -> Inspection:
    """A live lookup's inspection: everything its result and trace hold."""
    trace = result.retrieval_trace
    boosts = _boosts(result.rerank_trace.entries if result.rerank_trace else [])
    verdict = trace.evidence_verdict if trace else None
    pack = result.context_pack
    return Inspection(
        query=result.query,
        status=result.evidence_status,
        found=result.found,
        level=result.relevance_level,
        hint=result.completeness_hint,
        message=result.message,
        verdict_reason=verdict.reason if verdict else None,
        verdict_facts=_verdict_facts(verdict) if verdict else [],
        blocks=[_live_block(block, boosts.get(block.evidence_key, [])) for block in result.evidence_blocks],
        attempts=list(trace.attempts) if trace else [],
        decision=trace.fallback_decision if trace else None,
        category_filter=trace.category_filter if trace else None,
        access=trace.access_filter if trace else None,
        nodes=list(trace.executed_nodes) if trace else [],
        pack_text=pack.text if pack else None,
        pack_facts=_pack_facts(pack.summary.model_dump(by_alias=True)) if pack else [],
    )


def from_record(row: Invocation) -> Inspection:
    """A recorded call's inspection from its stored trace: the record keeps evidence summaries
    and the returned blocks' content, not breadcrumbs, locations, the verdict's reading or the
    pack's text."""
    details = row.retrieval_details
    rerank = details.get("rerank") or {}
    boosts = _boosts([RerankEntry.model_validate(entry) for entry in rerank.get("entries", [])])
    contents = {entry.get("key"): entry for entry in row.returned_evidence or []}
    blocks = []
    for summary in details.get("evidence", []):
        key = summary.get("evidenceKey", "")
        returned = contents.get(key, {})
        blocks.append(
            BlockView(
                rank=summary.get("rank", 0),
                key=key,
                source=summary.get("source") or returned.get("source"),
                title=summary.get("title"),
                breadcrumb=None,
                location=None,
                content=returned.get("content"),
                hit_reasons=list(summary.get("hitReasons", [])),
                scores=_scores(summary),
                boosts=boosts.get(key, []),
            )
        )
    decision = details.get("fallbackDecision")
    pack = details.get("contextPack")
    return Inspection(
        query=row.input,
        status=row.status,
        found=row.status == "evidence",
        level=details.get("relevanceLevel") or "-",
        hint=details.get("completenessHint") or "",
        message=details.get("message") or "",
        verdict_reason=None,
        verdict_facts=[],
        blocks=blocks,
        attempts=[AttemptTrace.model_validate(attempt) for attempt in details.get("attempts", [])],
        decision=FallbackDecisionTrace.model_validate(decision) if decision else None,
        category_filter=details.get("categoryFilter"),
        access=details.get("access"),
        nodes=[NodeTiming(node["name"], node["ms"]) for node in details.get("executedNodes", [])],
        pack_facts=_pack_facts(pack) if pack else [],
        recorded=True,
    )


def _live_block(block: EvidenceBlock, boosts: list[tuple[str, float]]) -> BlockView:
    return BlockView(
        rank=block.rank,
        key=block.evidence_key,
        source=block.source,
        title=block.title,
        breadcrumb=block.breadcrumb,
        location=_location(block),
        content=block.content,
        hit_reasons=block.hit_reasons,
        scores=_scores(block.model_dump(by_alias=True)),
        boosts=boosts,
        instruction_like=block.instruction_like,
        stale=block.stale,
    )


def _scores(values: dict[str, Any]) -> list[tuple[str, float]]:
    names = {
        "normalizedScore": "normalized", "denseScore": "dense", "sparseScore": "BM25",
        "fusedScore": "fused", "rerankScore": "rerank",
    }  # fmt: skip
    return [(label, float(values[name])) for name, label in names.items() if values.get(name) is not None]


def _boosts(entries: list[RerankEntry]) -> dict[str, list[tuple[str, float]]]:
    return {entry.evidence_key: [(b.reason, b.contribution) for b in entry.boosts] for entry in entries}


def _location(block: EvidenceBlock) -> str | None:
    where = block.location
    if where is None:
        return None
    parts = []
    if where.page is not None:
        parts.append(f"page {where.page}")
    if where.slide is not None:
        parts.append(f"slide {where.slide}")
    if where.sheet is not None:
        parts.append(f"sheet {where.sheet}")
    if where.start_line is not None:
        parts.append(f"lines {where.start_line}–{where.end_line}")
    parts.append(f"characters {where.start_char}–{where.end_char}")
    return ", ".join(parts)


def _verdict_facts(verdict: Any) -> list[tuple[str, str]]:
    facts = [
        ("margin over the store's probe questions", _num(verdict.margin)),
        ("margin needed (strictness)", _num(verdict.strictness)),
        ("best dense score", _num(verdict.dense_top)),
        ("probe questions scoring below it", _share(verdict.dense_percentile)),
        ("question terms the best hits hold", ", ".join(verdict.matched_terms) or "none"),
        ("question terms", ", ".join(verdict.query_terms) or "none"),
    ]
    return [(name, value) for name, value in facts if value != "-"]


def _pack_facts(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("characters used", f"{summary.get('charsUsed', 0)} of {summary.get('budgetChars', 0)}"),
        ("sources included", ", ".join(summary.get("includedSources", [])) or "none"),
        ("sources omitted (budget)", ", ".join(summary.get("omittedSources", [])) or "none"),
    ]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
